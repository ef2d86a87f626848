"""The per-run worker: train one run under its lock and record what happened (docs/files.md, docs/sweep.md).

    runs/<sweep>/<run_id>/     written by train_run; plus, from here:
        attempts.json          one entry per process that started training it
        error.txt              the traceback of a failed run
    runs/.cache/               tokenised corpora, shared by every sweep in runs/

A run is done when its result.json exists (train_run writes it last, atomically). A crash
in training is recorded as a failed result.json and the sweep goes on; an interrupted run
continues from its checkpoint (train_run resumes by itself). An unreadable result.json
means not done: it is set aside under the run's lock and the run trained again. A full
disk is no failure of the run: the outcome `disk-full` stops the sweep, which resumes the
run once there is space (cdlaw.train.damage). Executors call `execute_run` in this
process, in worker processes or in Ray tasks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from cdlaw.config import ExecConfig, RunConfig, to_dict
from cdlaw.data.inputs import config_outdated, stale_tasks
from cdlaw.sweep.events import OnEvent, RunEnded, RunProgress, RunStarted
from cdlaw.sweep.handoffs import Outcome, RunOutcome, RunTask
from cdlaw.sweep.locks import LOCK_NAME, RunLock
from cdlaw.sweep.simulate import simulate_run
from cdlaw.system.atomic import write_json_atomic, write_text_atomic
from cdlaw.system.disk_full import is_disk_full, sweep_stopped
from cdlaw.tasks.columns import without_tasks
from cdlaw.train.damage import (
    json_problem,
    model_problems,
    parquet_problem,
    report_damage,
    set_aside,
    set_aside_unreadable_result,
    unreadable,
)
from cdlaw.train.forks import fork_exists
from cdlaw.train.metrics import read_metrics, write_metrics
from cdlaw.train.result import read_result, result_row
from cdlaw.train.trackers import TrackedRun

if TYPE_CHECKING:  # the trainer (torch) is imported where a run trains
    from cdlaw.train.run_state import StepProgress


def execute_run(task: RunTask, on_event: OnEvent | None = None) -> RunOutcome:
    """Train one run unless it is done or another process holds it.

    Shared prefixes (share = true, cdlaw.sweep.forest): the run saves fork checkpoints
    after each step in `task.fork_steps`, and a run that has not started yet starts from
    the first fork in `task.fork_from` (its own fork first, then older ones) that exists;
    when its own fork is gone it says so, and starts from an older one or from step 0.

    Returns its RunOutcome: done, diverged, failed, skipped, locked or disk-full (with
    one sentence). A crash inside training is recorded as a failed result.json (with
    error.txt holding the traceback) and returned, never raised; KeyboardInterrupt is
    raised (the trainer has saved a checkpoint, so the run resumes next time). A full disk
    records nothing: the run is left to resume from its last checkpoint.
    """
    try:
        return _execute_run(task, on_event or (lambda e: None))
    except Exception as e:
        if not is_disk_full(e):
            raise
        error = sweep_stopped(e, task.run_dir)
        return RunOutcome(task.config.run_id, Outcome.DISK_FULL, error=error)


def claim_run(task: RunTask) -> RunLock | RunOutcome:
    """The run's lock, held, with the run ready to train (an unreadable result.json set
    aside, a failed one moved to result.failed.json when retried, the attempt recorded);
    or, when it is not to be trained here, its outcome (skipped or locked)."""
    cfg, run_dir, retry_failed = task.config, task.run_dir, task.retry_failed
    result = read_result(run_dir)
    if result is not None and not (retry_failed and result.get("status") == "failed"):
        return RunOutcome(cfg.run_id, Outcome.SKIPPED, result)
    lock = RunLock(run_dir / LOCK_NAME)
    if not lock.acquire():
        return RunOutcome(cfg.run_id, Outcome.LOCKED)
    result = read_result(run_dir)  # it may have finished while we looked at the lock
    if result is None:
        set_aside_unreadable_result(run_dir)  # under the lock: nobody writes it now
    elif not (retry_failed and result.get("status") == "failed"):
        lock.release()
        return RunOutcome(cfg.run_id, Outcome.SKIPPED, result)
    else:
        os.replace(run_dir / "result.json", run_dir / "result.failed.json")
    _record_attempt(run_dir, task.exec_cfg)
    return lock


def _execute_run(task: RunTask, emit: OnEvent) -> RunOutcome:
    cfg, run_dir, exec_cfg = task.config, task.run_dir, task.exec_cfg
    lock = claim_run(task)
    if isinstance(lock, RunOutcome):
        return lock
    with lock:
        emit(RunStarted(cfg.run_id, os.getpid()))
        # --tracker: the run's config, rows and result go to TensorBoard, W&B or MLflow too
        tracked = TrackedRun(exec_cfg.trackers, run_dir.parent.parent, cfg)
        if task.simulation is not None:  # a loss drawn from a law: nothing to train
            result = simulate_run(task.simulation, cfg, run_dir)
            if exec_cfg.trackers:
                for row in read_metrics(run_dir / "metrics.parquet"):
                    tracked.row(row)
                tracked.finish(result)
        else:
            result = _train(task, emit, tracked)
        (run_dir / "result.failed.json").unlink(missing_ok=True)
    outcome = RunOutcome.ended(cfg.run_id, result)
    emit(RunEnded(cfg.run_id, outcome.kind.value, result.get("loss")))
    return outcome


def _train(task: RunTask, emit: OnEvent, tracked: TrackedRun) -> dict:
    """Train the claimed run; its result row (a failed one, with error.txt, when training
    raised). A signal (RunInterrupted) and a full disk are raised: the run resumes later."""
    from cdlaw.data.tokens.ordering import stream_for_run
    from cdlaw.train.loop import RunInterrupted, train_run

    cfg, run_dir, exec_cfg = task.config, task.run_dir, task.exec_cfg
    started = time.time()
    ended: dict | None = None  # the row the run ended with; None: it stops and resumes
    try:
        prepared, stream = stream_for_run(cfg, Path(task.cache_dir))

        def progress(p: StepProgress) -> None:
            emit(RunProgress(cfg.run_id, **dataclasses.asdict(p)))

        result = train_run(
            cfg,
            run_dir,
            stream,
            prepared.val_tokens,
            exec_cfg,
            progress,
            fork_steps=tuple(task.fork_steps),
            fork_from=choose_fork(run_dir, tuple(Path(p) for p in task.fork_from)),
            corpus=prepared,  # model/ gets the tokenizer: a whole HF folder
            on_row=tracked.row if exec_cfg.trackers else None,
        )
    except RunInterrupted:  # stopped by a signal with a checkpoint saved: not a failure
        raise
    except Exception as e:  # recorded, and the sweep goes on (docs/sweep.md)
        if is_disk_full(e):
            raise  # not the run's failure: it resumes once there is space
        result = result_row(
            cfg,
            status="failed",
            wall_seconds=time.time() - started,
            device=exec_cfg.device,
            error=f"{type(e).__name__}: {e}",
        )
        write_text_atomic(run_dir / "error.txt", traceback.format_exc())
        write_json_atomic(run_dir / "result.json", result)
        ended = result
    else:
        (run_dir / "error.txt").unlink(missing_ok=True)  # from a failed earlier attempt
        ended = result
    finally:
        if exec_cfg.trackers:
            tracked.finish(ended)
    return result


def score_finished_runs(plan, exec_cfg: ExecConfig) -> tuple[list[str], list[dict]]:
    """score_finished_run for every selected run of a SweepPlan whose corpus was prepared:
    (the ids of the runs whose result.json changed, {run_id, error} of each run that could
    not be scored). One run's failure stops no other: the summary is rebuilt from them all."""
    if plan.prepared is None:
        return [], []
    changed, failures = [], []
    for r in plan.runs:
        try:
            if score_finished_run(r, plan.sweep_dir / r.run_id, plan.prepared, exec_cfg):
                changed.append(r.run_id)
        except Exception as e:
            if is_disk_full(e):
                raise
            error = f"scoring its [eval] tasks from model/ failed: {type(e).__name__}: {e}"
            failures.append({"run_id": r.run_id, "error": error})
    return changed, failures


def score_finished_run(cfg: RunConfig, run_dir: Path, prepared, exec_cfg: ExecConfig) -> bool:
    """Bring a finished run up to date with its [eval] and the task files as they are now,
    under its lock; True when its result.json changed.

    A done run that lacks the columns of a task (one added after it trained), or whose
    task file changed since it was scored (or eval.max_items did), is scored from its
    model/ folder: the end of the run only. A changed task's old scores are dropped
    everywhere, from result.json and from the curve in metrics.parquet, even where
    model/ is damaged and cannot score it (named in one line; the columns stay empty).
    config.json then records the task files and [eval] scored, and the inputs of a
    folder of an older cdlaw that recorded none (cdlaw.data.inputs). Nothing is done for
    a run held by another process, or whose config.json is damaged (named elsewhere).
    """
    from cdlaw.tasks.files import task_tokens_for
    from cdlaw.tasks.lm_eval import column

    result = read_result(run_dir)
    config_path = run_dir / "config.json"
    status = (result or {}).get("status")
    if result is None or status not in ("done", "diverged") or json_problem(config_path):
        return False
    saved = json.loads(config_path.read_text())
    stale = stale_tasks(saved, cfg)
    todo, harness = [], []
    if status == "done":
        tasks = task_tokens_for(cfg.eval, prepared, cfg.model.seq_len)
        todo = [t for t in tasks if t.name in stale or not all(c in result for c in t.columns)]
        harness = [
            n for n in cfg.eval.lm_eval if not any(k.startswith(column(n, "")) for k in result)
        ]
    outdated = config_outdated(saved, cfg)
    if not (todo or harness or stale or outdated):
        return False
    lock = RunLock(run_dir / LOCK_NAME)
    if not lock.acquire():
        return False
    with lock:
        scores = _scores(cfg, run_dir, todo, harness, exec_cfg)
        kept = without_tasks(result, stale)
        if stale:
            _drop_task_curves(run_dir / "metrics.parquet", stale)
        changed = bool(scores) or kept != result
        if changed:
            write_json_atomic(run_dir / "result.json", {**scores, **kept})
        if outdated:  # last: what it records is what the run's files now hold
            now = to_dict(cfg)
            write_json_atomic(config_path, {**saved, "eval": now["eval"], "inputs": now["inputs"]})
    return changed


def _scores(cfg: RunConfig, run_dir: Path, todo: list, harness: list[str], exec_cfg) -> dict:
    """The done run's model/ scored on the tasks `todo` and the lm-eval tasks `harness`;
    {} when there are none, or when model/ is damaged (named in one line)."""
    from cdlaw.tasks.lm_eval import lm_eval_scores
    from cdlaw.tasks.scoring import score_saved_model
    from cdlaw.train.steps import resolve_device

    if not (todo or harness):
        return {}
    model = run_dir / "model"
    if problems := model_problems(model):
        name, problem = next(iter(problems.items()))
        report_damage(
            f"{model / name} {problem}: run {cfg.run_id} is not scored on "
            f"{', '.join([t.name for t in todo] + harness)} (its columns stay empty); retrain "
            f"it with `cdlaw sweep FILE --restart --only run_id={cfg.run_id}`"
        )
        return {}
    device = resolve_device(exec_cfg.device)
    scores: dict = {}
    if todo:
        scores = score_saved_model(model, todo, device, exec_cfg.precision)
    if harness:
        ev = dataclasses.replace(cfg.eval, lm_eval=tuple(harness))
        scores.update(lm_eval_scores(model, ev, device))
    return scores


def _drop_task_curves(metrics_path: Path, names: set[str]) -> None:
    """metrics.parquet without the columns of the tasks named (a damaged file is left as
    it is: every sweep names it)."""
    if parquet_problem(metrics_path):
        return
    rows = read_metrics(metrics_path)
    trimmed = [without_tasks(r, names) for r in rows]
    if trimmed != rows:
        write_metrics(metrics_path, trimmed)


def choose_fork(run_dir: Path, fork_from: tuple[Path, ...]) -> Path | None:
    """The fork a run that has not started yet starts from: its own, else the nearest older
    one that exists (said in one line), else None (step 0, said too)."""
    if not fork_from or any((run_dir / n).is_dir() for n in ("checkpoint", "checkpoint.old")):
        return None  # a run with a checkpoint of its own resumes from it
    for fork in fork_from:
        if fork_exists(fork):
            if fork != fork_from[0]:
                report_damage(
                    f"run {run_dir.name}: its fork checkpoint {_fork_label(fork_from[0])} is gone; it "
                    f"starts from the older fork {_fork_label(fork)} instead"
                )
            return fork
    report_damage(
        f"run {run_dir.name}: its fork checkpoint {_fork_label(fork_from[0])} is gone and no older "
        "fork is left; it trains from step 0 (same result, more compute)"
    )
    return None


def _fork_label(fork: Path) -> str:
    """<trunk>/forks/step-<s>, as a user finds it in the sweep folder."""
    return "/".join(fork.parts[-3:])


def _record_attempt(run_dir: Path, exec_cfg: ExecConfig) -> None:
    """attempts.json: one entry per process that started (or resumed) training this run."""
    path = run_dir / "attempts.json"
    try:
        attempts = json.loads(path.read_text())
    except FileNotFoundError:
        attempts = []
    except ValueError as e:  # cut short: keep what is left, start the list again
        attempts = []
        report_damage(f"{path} {unreadable(e)}; set aside as {set_aside(path).name}, started again")
    attempts.append(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "time": time.time(),
            "resumed": any((run_dir / n).exists() for n in ("checkpoint", "checkpoint.old")),
            "exec": to_dict(exec_cfg),
        }
    )
    write_json_atomic(path, attempts)
