"""Train one run: an OLMo 3 model on a token stream, leaving its files in run_dir (docs/files.md).

    train_run(cfg, run_dir, stream, val_tokens) -> the run's result row (docs/files.md)

The loop reads straight down, like nanoGPT's: AdamW (β 0.9, 0.95; no weight decay on the
input embedding and the norms), cosine schedule with 2% warmup to 10% of peak (or WSD),
z-loss, gradient clipping, bf16 autocast where the hardware has it, gradient accumulation.

Tokens. Step s reads the next batch_size·seq_len tokens of the stream (fewer at the end)
and predicts each from the ones before it in its row: inputs are tokens [t, t + n), targets
tokens [t + 1, t + n + 1). So every token of the stream is an input exactly once, in order,
and every token but the first a target exactly once. steps = ceil(n_tokens / batch_tokens).

Files. config.json first; metrics.parquet at every evaluation and checkpoint; checkpoint/
every checkpoint_every steps and on SIGTERM/SIGINT; at the end model/ (a Hugging Face
folder) and result.json, last and atomically: its presence means the run is finished.
A run_dir holding a checkpoint resumes from it and ends bit-for-bit where an uninterrupted
run would (on CPU). Finished runs drop their checkpoint: model/ holds the final weights,
and optimizer state three times the model's size is dead weight in a sweep of hundreds.
Damaged files (an unreadable result.json, checkpoint, config.json or metrics.parquet) are
set aside and named in one line, and the run goes on from what is whole (cdlaw.train.damage).
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from cdlaw.atomic import write_json_atomic
from cdlaw.config import ExecConfig, RunConfig, to_dict
from cdlaw.data.corpus_cache import PreparedCorpus
from cdlaw.data.streams import TokenStream
from cdlaw.errors import BadInput
from cdlaw.shapes import count_params, flops_per_token
from cdlaw.train.checkpoint import (
    apply_checkpoint,
    newest_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from cdlaw.train.damage import (
    json_problem,
    say,
    set_aside,
    set_aside_unreadable_result,
)
from cdlaw.train.export import complete_model_folder
from cdlaw.train.forks import fork_path, save_fork, start_from_fork
from cdlaw.train.metrics import resumed_rows, write_metrics
from cdlaw.train.model import build_model, non_embedding_params
from cdlaw.train.result import read_result, result_row
from cdlaw.train.steps import (
    IGNORE,
    autocast,
    autocast_dtype,
    device_name,
    forward_logits,
    loss_on_batches,
    lr_at,
    make_batch,
    make_optimizer,
    resolve_device,
    token_losses,
)


class RunInterrupted(Exception):
    """Training stopped early (a signal, or stop_after_steps); a checkpoint was saved."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"run stopped after step {step} ({reason}); checkpoint saved")
        self.step = step
        self.reason = reason


# ---------------------------------------------------------------------------------------
# Files of a run.
# ---------------------------------------------------------------------------------------


def save_hf_model(net, path: Path) -> None:
    """save_pretrained without its progress bar (a sweep draws its own on stderr)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        net.save_pretrained(path)
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


# ---------------------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------------------


def train_run(
    cfg: RunConfig,
    run_dir: Path,
    stream: TokenStream,
    val_tokens: np.ndarray,
    exec_cfg: ExecConfig = ExecConfig(),
    on_progress: Callable[[dict], None] | None = None,
    stop_after_steps: int | None = None,
    fork_steps: tuple[int, ...] = (),
    fork_from: Path | None = None,
    corpus: PreparedCorpus | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> dict:
    """Train cfg on every token of `stream` once, in order; return the result row (docs/files.md).

    Resumes from run_dir/checkpoint when present; returns the saved row when run_dir
    already holds a readable result.json (an unreadable one is set aside, and the run
    trained again). `stop_after_steps` saves a checkpoint after that step and
    raises RunInterrupted (for tests, and for callers that slice runs). SIGTERM and SIGINT
    do the same, then re-deliver the signal to the previous handler.

    Shared prefixes (cdlaw.train.forks): after each step in `fork_steps` the run saves a
    fork checkpoint for the branches that start there; a run with no checkpoint of its own
    starts from the fork at `fork_from` (another run's state at a step both share) instead
    of step 0, and ends exactly where it would have alone.

    `corpus` (the prepared corpus the stream came from) makes model/ a whole Hugging Face
    folder: its tokenizer, special-token ids and a model card (cdlaw.train.export).

    `on_row` sees every metrics row this call appends (an experiment tracker,
    cdlaw.train.trackers); rows a resumed run takes from metrics.parquet it does not.
    """
    run_dir = Path(run_dir)
    result_path = run_dir / "result.json"
    if (result := read_result(run_dir)) is not None:
        return result

    # --- Check everything before writing anything. ---------------------------------------
    model_cfg, train = cfg.model, cfg.train
    seq_len = model_cfg.seq_len
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
        saved_id = json.loads(config_path.read_text()).get("run_id")
        if saved_id != cfg.run_id:
            raise BadInput(f"{run_dir} holds run {saved_id}, not {cfg.run_id}; use another folder")

    # --- Device, model, optimizer. ---------------------------------------------------------
    device = torch.device(resolve_device(exec_cfg.device))
    if exec_cfg.threads:
        torch.set_num_threads(exec_cfg.threads)
    amp = autocast_dtype(exec_cfg.precision, device, model_cfg.d_model)
    net = build_model(model_cfg, seed=cfg.seed).to(device)
    net.train()
    optimizer = make_optimizer(net, train, device)
    lm = torch.compile(net) if exec_cfg.compile else net
    n_params, n_params_total = count_params(model_cfg)
    assert non_embedding_params(net) == n_params

    batch_tokens = train.batch_size * seq_len
    micro_rows = train.micro_batch_size or train.batch_size
    total_steps = -(-stream.n_tokens // batch_tokens)
    flops_token = flops_per_token(n_params)
    val_x, val_y = make_batch(val_tokens, len(val_tokens) - 1, seq_len)
    val_x, val_y = torch.from_numpy(val_x), torch.from_numpy(val_y)

    # --- Fresh start or resume. ------------------------------------------------------------
    state = {
        "run_id": cfg.run_id,
        "step": 0,
        "tokens_seen": 0,
        "elapsed_s": 0.0,
        "initial_loss": None,  # train loss of step 1: the yardstick for divergence
        "interval_loss": 0.0,  # cross-entropy summed since the last metrics row …
        "interval_targets": 0,  # … over this many targets
        "train_loss": math.nan,
        "val_loss": math.nan,
    }
    checkpoint_dir = run_dir / "checkpoint"
    metrics_path = run_dir / "metrics.parquet"
    set_aside_unreadable_result(run_dir)
    own = any((run_dir / n).is_dir() for n in ("checkpoint", "checkpoint.old"))
    forked = fork_from is not None and not own
    if forked:
        forked = start_from_fork(fork_from, run_dir, cfg.run_id, stream.fresh_tokens)
    found = newest_checkpoint(checkpoint_dir, net, optimizer, like=state)
    rows: list[dict] = []
    if found is not None:
        last = found.state["step"]
        logged = [
            s
            for s in range(1, last + 1)
            if s == 1 or s % train.log_every == 0 or s % train.eval_every == 0 or s == total_steps
        ]
        resumed = resumed_rows(metrics_path, last, logged, cfg.run_id)
        if resumed is None:
            remove_checkpoint(checkpoint_dir)
            found = None
        else:
            rows = resumed
            state = apply_checkpoint(found, net, optimizer)
    # A branch's trunk and fork step (kept in every later checkpoint's state), else none.
    started_from = state.get("forked_from") or {"run": "", "step": 0}
    if config_problem:
        say(
            f"{config_path} {config_problem}; set aside as {set_aside(config_path).name}, written again"
        )
    elif found is not None and not config_path.exists() and not forked:
        say(f"{config_path} is missing; written again")
    if found is None or not config_path.exists() or forked:
        config = {**to_dict(cfg), "run_id": cfg.run_id, "exec": to_dict(exec_cfg)}
        config.update(n_params=n_params, n_params_total=n_params_total, steps=total_steps)
        write_json_atomic(config_path, config)

    def checkpoint() -> None:
        state["interval_loss"] = float(interval_loss)
        state["elapsed_s"] = elapsed()
        # Metrics first: rows newer than the checkpoint are dropped on resume, lost rows
        # could not be recovered.
        write_metrics(metrics_path, rows)
        save_checkpoint(checkpoint_dir, net, optimizer, state)

    # --- Stop cleanly on SIGTERM / SIGINT: finish the step, checkpoint, re-raise. ----------
    stop_signal: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop_signal.append(signum))

    interval_loss = torch.tensor(state["interval_loss"], dtype=torch.float32, device=device)
    grad_norm = torch.zeros((), device=device)
    session_start, session_tokens = time.perf_counter(), 0
    elapsed_before = state["elapsed_s"]

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - session_start

    status = "done"
    try:
        # ====================================== the loop ======================================
        for step in range(state["step"], total_steps):
            start = state["tokens_seen"]
            n = min(batch_tokens, stream.n_tokens - start)
            x, y = make_batch(stream.read(start, n + 1), n, seq_len)
            if x.max() >= model_cfg.vocab_size:
                raise BadInput(
                    f"token id {x.max()} at stream position ≥{start} is outside the model's "
                    f"vocabulary of {model_cfg.vocab_size}"
                )
            n_targets = int((y != IGNORE).sum())
            x, y = torch.from_numpy(x), torch.from_numpy(y)

            lr = lr_at(step, total_steps, train)
            for group in optimizer.param_groups:
                group["lr"] = lr
            # A stream of k·batch_tokens + 1 tokens ends with a lone input and no target.
            if n_targets:
                for i in range(0, x.shape[0], micro_rows):
                    xb = x[i : i + micro_rows].to(device, non_blocking=True)
                    yb = y[i : i + micro_rows].to(device, non_blocking=True)
                    with autocast(device, amp):
                        logits = forward_logits(lm, xb)
                    ce, z = token_losses(logits, yb)
                    ((ce + train.z_loss * z) / n_targets).backward()
                    interval_loss += ce.detach()
                grad_norm = torch.nn.utils.clip_grad_norm_(net.parameters(), train.grad_clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            state["step"] = step + 1
            state["tokens_seen"] = start + n
            state["interval_targets"] += n_targets
            session_tokens += n
            last = step + 1 == total_steps

            # --- Log, evaluate, check for divergence (the only places that sync). ----------
            evaluate = (step + 1) % train.eval_every == 0 or last
            if (step + 1) % train.log_every == 0 or step == 0 or evaluate:
                if state["interval_targets"]:
                    train_loss = interval_loss.item() / state["interval_targets"]
                else:  # only the lone last token since the previous row: nothing new to say
                    train_loss = state["train_loss"]
                interval_loss.zero_()
                state["interval_targets"] = 0
                state["train_loss"] = train_loss
                if state["initial_loss"] is None:
                    state["initial_loss"] = train_loss
                val_loss = math.nan
                if evaluate and math.isfinite(train_loss):
                    val_loss = loss_on_batches(lm, val_x, val_y, micro_rows, amp)
                    state["val_loss"] = val_loss
                rows.append(
                    {
                        "run_id": cfg.run_id,
                        "step": step + 1,
                        "tokens_seen": state["tokens_seen"],
                        "epoch": state["tokens_seen"] / stream.fresh_tokens,
                        "lr": lr,
                        "train_loss": train_loss,
                        "val_loss": val_loss,
                        "grad_norm": grad_norm.item(),
                        "flops": flops_token * state["tokens_seen"],
                        "elapsed_s": elapsed(),
                    }
                )
                if on_row is not None:
                    on_row(rows[-1])
                if on_progress is not None:
                    on_progress(
                        {
                            "step": step + 1,
                            "steps_total": total_steps,
                            "tokens_seen": state["tokens_seen"],
                            "tokens_total": stream.n_tokens,
                            "tokens_per_second": session_tokens
                            / (time.perf_counter() - session_start),
                            "train_loss": train_loss,
                            "val_loss": state["val_loss"],
                        }
                    )
                exploded = train_loss > train.diverge_factor * state["initial_loss"]
                bad_val = evaluate and not math.isfinite(val_loss)
                if not math.isfinite(train_loss) or exploded or bad_val:
                    status = "diverged"
                    break
                if evaluate:
                    write_metrics(metrics_path, rows)

            if step + 1 in fork_steps and not (fork := fork_path(run_dir, step + 1)).exists():
                state["interval_loss"] = float(interval_loss)
                state["elapsed_s"] = elapsed()
                save_fork(fork, net, optimizer, state, rows)

            stop = bool(stop_signal) or stop_after_steps == step + 1
            if stop or ((step + 1) % train.checkpoint_every == 0 and not last):
                checkpoint()
            if stop:
                raise RunInterrupted(
                    step + 1, f"signal {stop_signal[0]}" if stop_signal else "stop_after_steps"
                )
        # ======================================================================================
    except RunInterrupted:
        _restore_handlers(previous)
        if stop_signal:
            signal.raise_signal(stop_signal[0])  # the previous handler decides what happens
        raise
    finally:
        _restore_handlers(previous)

    # --- Finish: the model, the curve, and result.json last. -------------------------------
    if status == "done":
        assert state["tokens_seen"] == stream.n_tokens, "every token of the stream, exactly once"
        loss = state["val_loss"]
        model_tmp = run_dir / "model.tmp"
        shutil.rmtree(model_tmp, ignore_errors=True)
        save_hf_model(net, model_tmp)
        if corpus is not None:
            complete_model_folder(
                model_tmp,
                cfg,
                corpus,
                loss=loss,
                train_loss=state["train_loss"],
                steps=state["step"],
            )
        shutil.rmtree(run_dir / "model", ignore_errors=True)
        model_tmp.rename(run_dir / "model")
    else:
        loss = math.nan
    write_metrics(metrics_path, rows)
    wall = elapsed()
    result = result_row(
        cfg,
        status=status,
        loss=loss,
        train_loss=state["train_loss"],
        steps=state["step"],
        tokens_seen=state["tokens_seen"],
        wall_seconds=wall,
        device=device_name(device),
        precision=str(amp).removeprefix("torch.") if amp else "float32",
        stream_info=stream.info,
        forked_from=started_from,
    )
    write_json_atomic(result_path, result)
    remove_checkpoint(checkpoint_dir)
    return result


def _restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    previous.clear()
