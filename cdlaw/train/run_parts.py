"""The parts of a run around its training steps: check, open (fresh or resumed), log a step,
finish. cdlaw.train.loop puts them around one model's steps; cdlaw.train.packed_loop around
the steps of many models trained at once, so a packed run writes exactly what a run alone does
(docs/files.md).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import threading
from pathlib import Path

import numpy as np

from cdlaw.config import ExecConfig, RunConfig, to_dict
from cdlaw.data.inputs import config_outdated, recorded_inputs, stale_tasks, training_changes
from cdlaw.data.tokens.streams import TokenStream
from cdlaw.schedule import logged_steps, logs_row
from cdlaw.shapes import count_params, flops_per_token
from cdlaw.system.atomic import write_json_atomic
from cdlaw.system.errors import BadInput
from cdlaw.tasks.columns import without_tasks
from cdlaw.train.checkpoint import (
    apply_checkpoint,
    newest_checkpoint,
    remove_checkpoint,
)
from cdlaw.train.damage import json_problem, report_damage, set_aside, set_aside_unreadable_result
from cdlaw.train.export import complete_model_folder
from cdlaw.train.forks import start_from_fork
from cdlaw.train.metrics import resumed_rows, write_metrics
from cdlaw.train.result import result_row
from cdlaw.train.run_state import (
    Compute,
    RunHooks,
    RunProbe,
    RunRecord,
    RunState,
    RunTarget,
    StepProgress,
    StepStats,
)
from cdlaw.train.steps import device_name

# ---------------------------------------------------------------------------------------


def save_hf_model(net, path: Path) -> None:
    """save_pretrained without its progress bar (a sweep draws its own on stderr)."""
    with no_hf_progress():
        net.save_pretrained(path)


@contextlib.contextmanager
def no_hf_progress():
    """transformers' progress bars off while inside (a sweep draws its own on stderr)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def check_run(
    cfg: RunConfig, run_dir: Path, stream: TokenStream, val_tokens
) -> tuple[np.ndarray, str | None]:
    """Check everything before writing anything: (the validation tokens as int64, what is
    wrong with config.json or None). Raises BadInput on input that cannot train."""
    model_cfg = cfg.model
    val_tokens = np.asarray(val_tokens, dtype=np.int64)
    if stream.n_tokens != cfg.tokens_trained or stream.derived_tokens != cfg.derived_tokens:
        raise ValueError(
            f"stream has {stream.n_tokens} tokens ({stream.derived_tokens} derived) but the run "
            f"asks for {cfg.tokens_trained} ({cfg.derived_tokens} derived)"
        )
    if len(val_tokens) < 2:
        raise BadInput("the validation set needs at least 2 tokens")
    if val_tokens.min() < 0 or val_tokens.max() >= model_cfg.vocab_size:
        raise BadInput(
            f"validation token ids run up to {val_tokens.max()}, outside the model's "
            f"vocabulary of {model_cfg.vocab_size}; set model.vocab_size to the tokenizer's size"
        )
    config_path = run_dir / "config.json"
    config_problem = json_problem(config_path) if config_path.exists() else None
    if config_path.exists() and config_problem is None:
        saved = json.loads(config_path.read_text())
        if saved.get("run_id") != cfg.run_id:
            raise BadInput(
                f"{run_dir} holds run {saved.get('run_id')}, not {cfg.run_id}; use another folder"
            )
        _check_inputs(cfg, run_dir, saved)
    return val_tokens, config_problem


def _check_inputs(cfg: RunConfig, run_dir: Path, saved: dict) -> None:
    """A run with a checkpoint is never resumed onto other inputs than it trained on
    (cdlaw.data.inputs): BadInput naming each that changed."""
    recorded = recorded_inputs(saved)
    own = any((run_dir / n).is_dir() for n in ("checkpoint", "checkpoint.old"))
    if not own or recorded is None or cfg.inputs is None:
        return
    if said := training_changes(recorded, cfg.inputs):
        raise BadInput(
            f"run {cfg.run_id} in {run_dir} was trained in part on other inputs than it reads "
            f"now: {'; '.join(said)}; pass --restart to retrain it from step 0, or --out to "
            "train elsewhere"
        )


def open_run(
    target: RunTarget,
    net,
    optimizer,
    exec_cfg: ExecConfig,
    config_problem: str | None,
    fork_from: Path | None = None,
) -> RunRecord:
    """A fresh start, or the run's newest whole checkpoint (or a fork) loaded into net and
    optimizer; config.json written when needed. Returns the run opened: its state, its
    metrics rows so far and the fork it started from."""
    cfg, run_dir, stream, total_steps = (
        target.cfg,
        target.run_dir,
        target.stream,
        target.total_steps,
    )
    train = cfg.train
    n_params, n_params_total = count_params(cfg.model)
    state = RunState(cfg.run_id)
    config_path = run_dir / "config.json"
    checkpoint_dir = run_dir / "checkpoint"
    metrics_path = run_dir / "metrics.parquet"
    set_aside_unreadable_result(run_dir)
    own = any((run_dir / n).is_dir() for n in ("checkpoint", "checkpoint.old"))
    forked = False
    if fork_from is not None and not own:
        forked = start_from_fork(fork_from, run_dir, cfg.run_id, stream.fresh_tokens)
    found = newest_checkpoint(checkpoint_dir, net, optimizer, like=state.to_dict())
    # what config.json records (None: damaged, set aside below, or none yet)
    saved = None
    if not config_problem and config_path.is_file():
        saved = json.loads(config_path.read_text())
    rows: list[dict] = []
    if found is not None:
        last = found.state["step"]
        logged = logged_steps(last, total_steps, train)
        resumed = resumed_rows(metrics_path, last, logged, cfg.run_id)
        if resumed is None:
            remove_checkpoint(checkpoint_dir)
            found = None
        else:
            # a task's curve holds only scores of its file as it is now (stale_tasks)
            stale = stale_tasks(saved, cfg) if saved is not None else set()
            rows = [without_tasks(r, stale) for r in resumed] if stale else resumed
            if rows != resumed:  # written before config.json records the new task files
                write_metrics(metrics_path, rows)
            state = RunState.from_dict(apply_checkpoint(found, net, optimizer))
    # A branch's trunk and fork step (kept in every later checkpoint's state), else none.
    started_from = state.forked_from or {"run": "", "step": 0}
    if config_problem:
        report_damage(
            f"{config_path} {config_problem}; set aside as {set_aside(config_path).name}, written again"
        )
    elif found is not None and not config_path.exists() and not forked:
        report_damage(f"{config_path} is missing; written again")
    outdated = saved is not None and config_outdated(saved, cfg)
    if found is None or not config_path.exists() or forked or outdated:
        config = {**to_dict(cfg), "run_id": cfg.run_id, "exec": to_dict(exec_cfg)}
        config.update(n_params=n_params, n_params_total=n_params_total, steps=total_steps)
        write_json_atomic(config_path, config)
    return RunRecord(target, state, rows, started_from)


def log_step(run: RunRecord, stats: StepStats, probe: RunProbe, hooks: RunHooks) -> bool:
    """After step run.state.step: append a metrics row when one is due (asking `probe` for
    the validation loss when an evaluation is, and for the downstream tasks' scores when
    theirs is: tasks_due), write metrics.parquet at an evaluation; True when the run has
    diverged (and must stop). `hooks` see the row and the progress."""
    cfg, stream, state = run.target.cfg, run.target.stream, run.state
    train, step, total_steps = cfg.train, state.step, run.target.total_steps
    if not logs_row(step, total_steps, train):
        return False
    evaluating = step % train.eval_every == 0 or step == total_steps
    if state.interval_targets:
        train_loss = stats.interval_loss.item() / state.interval_targets
    else:  # only the lone last token since the previous row: nothing new to say
        train_loss = state.train_loss
    stats.interval_loss.zero_()
    state.interval_targets = 0
    state.train_loss = train_loss
    if state.initial_loss is None:
        state.initial_loss = train_loss
    val_loss = math.nan
    scores: dict = {}
    if evaluating and math.isfinite(train_loss):
        val_loss = probe.val_loss()
        state.val_loss = val_loss
        if run.target.tasks and tasks_due(cfg, step, total_steps):
            scores = probe.task_scores()
    run.rows.append(
        {
            "run_id": cfg.run_id,
            "step": step,
            "tokens_seen": state.tokens_seen,
            "epoch": state.tokens_seen / stream.fresh_tokens,
            "lr": stats.lr,
            "train_loss": train_loss,
            "val_loss": val_loss,
            "grad_norm": stats.grad_norm.item(),
            "flops": flops_per_token(count_params(cfg.model).n_params) * state.tokens_seen,
            "elapsed_s": probe.elapsed(),
            **scores,
        }
    )
    _tell(hooks, run, probe)
    exploded = train_loss > train.diverge_factor * state.initial_loss
    bad_val = evaluating and not math.isfinite(val_loss)
    if not math.isfinite(train_loss) or exploded or bad_val:
        return True
    if evaluating:
        write_metrics(run.target.run_dir / "metrics.parquet", run.rows)
    return False


def _tell(hooks: RunHooks, run: RunRecord, probe: RunProbe) -> None:
    """The row just appended to hooks.on_row, the progress it makes to hooks.on_progress."""
    if hooks.on_row is not None:
        hooks.on_row(run.rows[-1])
    if hooks.on_progress is not None:
        state = run.state
        hooks.on_progress(
            StepProgress(
                step=state.step,
                steps_total=run.target.total_steps,
                tokens_seen=state.tokens_seen,
                tokens_total=run.target.stream.n_tokens,
                tokens_per_second=probe.rate(),
                train_loss=state.train_loss,
                val_loss=state.val_loss,
            )
        )


def tasks_due(cfg: RunConfig, step: int, total_steps: int) -> bool:
    """Are the downstream tasks evaluated after `step`? At every `eval.every` steps (0: at
    every validation evaluation) and always at the last step; never between evaluations."""
    every = cfg.eval.every or cfg.train.eval_every
    return step % every == 0 or step == total_steps


def final_task_scores(cfg: RunConfig, rows: list[dict], status: str, tasks) -> dict:
    """The result row's task columns: the last step's scores for a run that is done, NaN
    for one that is not (every column of every task, so all rows have them)."""
    columns = [c for t in tasks for c in t.columns]
    last = rows[-1] if rows and status == "done" else {}
    return {c: float(last.get(c, math.nan)) for c in columns}


def finish_run(run: RunRecord, net, status: str, wall_seconds: float, compute: Compute) -> dict:
    """End a run that is done or diverged: model/ (done only), the curve, then result.json
    last and atomically, and the checkpoint dropped. Returns the result row, with the
    last step's scores on its tasks (cdlaw.tasks.files.TaskTokens) and, for [eval] lm_eval,
    lm-evaluation-harness's on model/ (cdlaw.tasks.lm_eval)."""
    cfg, run_dir, stream, state = run.target.cfg, run.target.run_dir, run.target.stream, run.state
    if status == "done":
        assert state.tokens_seen == stream.n_tokens, "every token of the stream, exactly once"
        loss = state.val_loss
        _save_model(run, net, loss)
    else:
        loss = math.nan
    write_metrics(run_dir / "metrics.parquet", run.rows)
    amp = compute.amp
    result = result_row(
        cfg,
        status=status,
        loss=loss,
        train_loss=state.train_loss,
        steps=state.step,
        tokens_seen=state.tokens_seen,
        wall_seconds=wall_seconds,
        device=device_name(compute.device),
        precision=str(amp).removeprefix("torch.") if amp else "float32",
        stream_info=stream.info,
        forked_from=run.started_from,
    )
    result.update(final_task_scores(cfg, run.rows, status, run.target.tasks))
    if cfg.eval.lm_eval:
        from cdlaw.tasks.lm_eval import lm_eval_scores

        model = run_dir / "model" if status == "done" else None
        result.update(lm_eval_scores(model, cfg.eval, str(compute.device)))
    write_json_atomic(run_dir / "result.json", result)
    remove_checkpoint(run_dir / "checkpoint")
    return result


def _save_model(run: RunRecord, net, loss: float) -> None:
    """model/, written whole under model.tmp/ and swapped in: the weights and, with the
    corpus, the tokenizer and a model card (cdlaw.train.export)."""
    run_dir, state = run.target.run_dir, run.state
    model_tmp = run_dir / "model.tmp"
    shutil.rmtree(model_tmp, ignore_errors=True)
    save_hf_model(net, model_tmp)
    if run.target.corpus is not None:
        complete_model_folder(
            model_tmp,
            run.target.cfg,
            run.target.corpus,
            loss=loss,
            train_loss=state.train_loss,
            steps=state.step,
        )
    shutil.rmtree(run_dir / "model", ignore_errors=True)
    model_tmp.rename(run_dir / "model")


class RunInterrupted(Exception):
    """Training stopped early (a signal, or stop_after_steps); a checkpoint was saved."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"run stopped after step {step} ({reason}); checkpoint saved")
        self.step = step
        self.reason = reason


@contextlib.contextmanager
def stop_signals():
    """While training, SIGTERM and SIGINT are only noted (in the list this yields): the
    loop finishes its step, checkpoints and raises RunInterrupted; then the handlers that
    were there are put back and the signal is delivered to them. Off the main thread
    (where Python cannot install handlers) nothing is noted."""
    caught: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    except RunInterrupted:
        _restore(previous)
        if caught:
            signal.raise_signal(caught[0])  # the previous handler decides what happens
        raise
    finally:
        _restore(previous)


def _restore(previous: dict) -> None:
    """Put back the signal handlers a run replaced while it trained."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    previous.clear()
