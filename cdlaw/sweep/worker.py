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

from cdlaw.atomic import write_json_atomic, write_text_atomic
from cdlaw.config import ExecConfig, RunConfig, to_dict
from cdlaw.sweep.events import OnEvent, RunEnded, RunProgress, RunStarted
from cdlaw.sweep.locks import LOCK_NAME, RunLock
from cdlaw.sweep.simulate import Simulation, simulate_run
from cdlaw.train.damage import (
    disk_full_message,
    is_disk_full,
    report_damage,
    set_aside,
    set_aside_unreadable_result,
    unreadable,
)
from cdlaw.train.forks import fork_exists
from cdlaw.train.metrics import read_metrics
from cdlaw.train.result import read_result, result_row
from cdlaw.train.trackers import TrackedRun


def execute_run(
    cfg: RunConfig,
    sweep_dir: Path,
    cache_dir: Path,
    exec_cfg: ExecConfig = ExecConfig(),
    retry_failed: bool = False,
    on_event: OnEvent | None = None,
    simulation: Simulation | None = None,
    fork_steps: tuple[int, ...] = (),
    fork_from: tuple[Path, ...] = (),
) -> dict:
    """Train one run unless it is done or another process holds it.

    Shared prefixes (share = true, cdlaw.sweep.forest): the run saves fork checkpoints
    after each step in `fork_steps`, and a run that has not started yet starts from the
    first fork in `fork_from` (its own fork first, then older ones) that exists; when its
    own fork is gone it says so, and starts from an older one or from step 0.

    Returns {"run_id", "outcome": done|diverged|failed|skipped|locked|disk-full,
    "result": row|None} (with "error", one sentence, for disk-full). A crash inside
    training is recorded as a failed result.json (with error.txt holding the traceback)
    and returned, never raised; KeyboardInterrupt is raised (the trainer has saved a
    checkpoint, so the run resumes next time). A full disk records nothing: the run is
    left to resume from its last checkpoint.
    """
    try:
        forks = (tuple(fork_steps), tuple(Path(p) for p in fork_from))
        return _execute_run(
            cfg, sweep_dir, cache_dir, exec_cfg, retry_failed, on_event, simulation, forks
        )
    except Exception as e:
        if not is_disk_full(e):
            raise
        error = disk_full_message(e, Path(sweep_dir) / cfg.run_id)
        return {"run_id": cfg.run_id, "outcome": "disk-full", "result": None, "error": error}


def claim_run(cfg: RunConfig, run_dir: Path, retry_failed: bool, exec_cfg: ExecConfig):
    """The run's lock, held, with the run ready to train (an unreadable result.json set
    aside, a failed one moved to result.failed.json when retried, the attempt recorded);
    or, when it is not to be trained here, its outcome dict (skipped or locked)."""
    result = read_result(run_dir)
    if result is not None and not (retry_failed and result.get("status") == "failed"):
        return {"run_id": cfg.run_id, "outcome": "skipped", "result": result}
    lock = RunLock(run_dir / LOCK_NAME)
    if not lock.acquire():
        return {"run_id": cfg.run_id, "outcome": "locked", "result": None}
    result = read_result(run_dir)  # it may have finished while we looked at the lock
    if result is None:
        set_aside_unreadable_result(run_dir)  # under the lock: nobody writes it now
    elif not (retry_failed and result.get("status") == "failed"):
        lock.release()
        return {"run_id": cfg.run_id, "outcome": "skipped", "result": result}
    else:
        os.replace(run_dir / "result.json", run_dir / "result.failed.json")
    _record_attempt(run_dir, exec_cfg)
    return lock


def _execute_run(
    cfg, sweep_dir, cache_dir, exec_cfg, retry_failed, on_event, simulation, forks
) -> dict:
    run_dir = Path(sweep_dir) / cfg.run_id
    emit = on_event or (lambda e: None)
    lock = claim_run(cfg, run_dir, retry_failed, exec_cfg)
    if isinstance(lock, dict):
        return lock
    with lock:
        emit(RunStarted(cfg.run_id, os.getpid()))
        started = time.time()
        # --tracker: the run's config, rows and result go to TensorBoard, W&B or MLflow too
        tracked = TrackedRun(exec_cfg.trackers, run_dir.parent.parent, cfg)
        if simulation is not None:  # a loss drawn from a law: nothing to train
            result = simulate_run(simulation, cfg, run_dir)
            if exec_cfg.trackers:
                for row in read_metrics(run_dir / "metrics.parquet"):
                    tracked.row(row)
                tracked.finish(result)
            (run_dir / "result.failed.json").unlink(missing_ok=True)
            emit(RunEnded(cfg.run_id, "done", result["loss"]))
            return {"run_id": cfg.run_id, "outcome": "done", "result": result}
        from cdlaw.data.ordering import stream_for_run
        from cdlaw.train.loop import RunInterrupted, train_run

        ended: dict | None = None  # the row the run ended with; None: it stops and resumes
        try:
            prepared, stream = stream_for_run(cfg, Path(cache_dir))

            def progress(p: dict) -> None:
                emit(RunProgress(run_id=cfg.run_id, **p))

            fork_steps, fork_from = forks
            result = train_run(
                cfg,
                run_dir,
                stream,
                prepared.val_tokens,
                exec_cfg,
                progress,
                fork_steps=fork_steps,
                fork_from=choose_fork(run_dir, fork_from),
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
        (run_dir / "result.failed.json").unlink(missing_ok=True)
    status = result.get("status", "done")
    emit(RunEnded(cfg.run_id, status, result.get("loss")))
    return {"run_id": cfg.run_id, "outcome": status, "result": result}


def score_finished_runs(plan, exec_cfg: ExecConfig) -> list[str]:
    """score_finished_run for every run of a SweepPlan whose corpus was prepared; the ids
    of the runs whose result.json gained task columns."""
    if plan.prepared is None or not plan.sweep.eval.enabled:
        return []
    return [
        r.run_id
        for r in plan.runs
        if score_finished_run(r, plan.sweep_dir / r.run_id, plan.prepared, exec_cfg)
    ]


def score_finished_run(cfg: RunConfig, run_dir: Path, prepared, exec_cfg: ExecConfig) -> bool:
    """A done run that lacks columns of the tasks its [eval] now names (tasks added after
    it trained) is scored on them from its model/ folder, under its lock, and its
    result.json rewritten with them (the columns it has are kept). Only the end of the run
    is scored: its metrics.parquet keeps no task columns. True when result.json changed;
    False for a run with nothing missing, no model/ (the columns stay missing: NaN in the
    summary), or held by another process."""
    from cdlaw.data.tasks import task_tokens_for
    from cdlaw.train.lm_eval import column, lm_eval_scores
    from cdlaw.train.steps import resolve_device
    from cdlaw.train.tasks import score_saved_model

    result = read_result(run_dir)
    model = run_dir / "model"
    if result is None or result.get("status") != "done" or not (model / "config.json").is_file():
        return False
    tasks = task_tokens_for(cfg.eval, prepared, cfg.model.seq_len)
    todo = [t for t in tasks if not all(c in result for c in t.columns)]
    harness = [n for n in cfg.eval.lm_eval if not any(k.startswith(column(n, "")) for k in result)]
    if not todo and not harness:
        return False
    lock = RunLock(run_dir / LOCK_NAME)
    if not lock.acquire():
        return False
    device = resolve_device(exec_cfg.device)
    with lock:
        scores: dict = {}
        if todo:
            scores = score_saved_model(model, todo, device, exec_cfg.precision)
        if harness:
            ev = dataclasses.replace(cfg.eval, lm_eval=tuple(harness))
            scores.update(lm_eval_scores(model, ev, device))
        write_json_atomic(run_dir / "result.json", {**scores, **result})
    return True


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
