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

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.data.corpus_cache import PreparedCorpus
from cdlaw.data.streams import TokenStream
from cdlaw.errors import BadInput
from cdlaw.shapes import count_params
from cdlaw.train.checkpoint import (
    save_checkpoint,
)
from cdlaw.train.forks import fork_path, save_fork
from cdlaw.train.metrics import write_metrics
from cdlaw.train.model import build_model, non_embedding_params
from cdlaw.train.result import read_result

# RunInterrupted is what train_run raises when it stops early (a signal, stop_after_steps).
from cdlaw.train.run_parts import (
    RunInterrupted,
    check_run,
    finish_run,
    log_step,
    open_run,
    stop_signals,
)
from cdlaw.train.run_parts import save_hf_model as save_hf_model
from cdlaw.train.steps import (
    IGNORE,
    autocast_dtype,
    lm_losses,
    loss_on_batches,
    lr_at,
    make_batch,
    make_optimizer,
    resolve_device,
)


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
    if (result := read_result(run_dir)) is not None:
        return result

    val_tokens, config_problem = check_run(cfg, run_dir, stream, val_tokens)
    model_cfg, train = cfg.model, cfg.train
    seq_len = model_cfg.seq_len

    # --- Device, model, optimizer. ---------------------------------------------------------
    device = torch.device(resolve_device(exec_cfg.device))
    if exec_cfg.threads:
        torch.set_num_threads(exec_cfg.threads)
    amp = autocast_dtype(exec_cfg.precision, device, model_cfg.d_model)
    net = build_model(model_cfg, seed=cfg.seed).to(device)
    net.train()
    optimizer = make_optimizer(net, train, device)
    body = torch.compile(net.model) if exec_cfg.compile else net.model  # all but the LM head
    assert non_embedding_params(net) == count_params(model_cfg).n_params

    batch_tokens = train.batch_size * seq_len
    micro_rows = train.micro_batch_size or train.batch_size
    total_steps = -(-stream.n_tokens // batch_tokens)
    val_x, val_y = make_batch(val_tokens, len(val_tokens) - 1, seq_len)
    val_x, val_y = torch.from_numpy(val_x), torch.from_numpy(val_y)

    # --- Fresh start or resume. ------------------------------------------------------------
    state, rows, started_from = open_run(
        cfg, run_dir, stream, net, optimizer, exec_cfg, total_steps, config_problem, fork_from
    )
    checkpoint_dir = run_dir / "checkpoint"
    metrics_path = run_dir / "metrics.parquet"

    def checkpoint() -> None:
        state["interval_loss"] = float(interval_loss)
        state["elapsed_s"] = elapsed()
        # Metrics first: rows newer than the checkpoint are dropped on resume, lost rows
        # could not be recovered.
        write_metrics(metrics_path, rows)
        save_checkpoint(checkpoint_dir, net, optimizer, state)

    interval_loss = torch.tensor(state["interval_loss"], dtype=torch.float32, device=device)
    grad_norm = torch.zeros((), device=device)
    session_start, session_tokens = time.perf_counter(), 0
    elapsed_before = state["elapsed_s"]

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - session_start

    status = "done"
    with stop_signals() as stop_signal:
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
                    ce, z = lm_losses(net, xb, yb, amp, body)
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
            if log_step(
                cfg,
                state,
                rows,
                stream,
                metrics_path,
                lr=lr,
                interval_loss=interval_loss,
                grad_norm=grad_norm,
                total_steps=total_steps,
                evaluate=lambda: loss_on_batches(net, val_x, val_y, micro_rows, amp, body),
                elapsed=elapsed,
                rate=lambda tokens=session_tokens: tokens / (time.perf_counter() - session_start),
                on_row=on_row,
                on_progress=on_progress,
            ):
                status = "diverged"
                break

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

    # --- Finish: the model, the curve, and result.json last. -------------------------------
    return finish_run(
        cfg, run_dir, net, stream, state, rows, status, elapsed(), device, amp, corpus, started_from
    )
