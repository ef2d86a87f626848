"""Train one run: an OLMo 3 model on a token stream, leaving its files in run_dir (docs/files.md).

    train_run(cfg, run_dir, stream, val_tokens) -> the run's result row (docs/files.md)

The loop reads straight down, like nanoGPT's; the pieces of a step are cdlaw.train.steps,
the parts around the steps (open or resume, log, finish) cdlaw.train.run_parts. What it
trains with (AdamW, the schedules, z-loss, clipping, autocast, accumulation) is
docs/sweep.md's [train] table; what it writes, and how damaged files are recovered,
docs/files.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.data.tokens.cache import PreparedCorpus
from cdlaw.data.tokens.streams import TokenStream
from cdlaw.shapes import count_params
from cdlaw.tasks.files import TaskTokens, task_tokens_for
from cdlaw.tasks.scoring import evaluate_tasks
from cdlaw.train.checkpoint import save_checkpoint
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
    read_batch,
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
    tasks: list[TaskTokens] | None = None,
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

    `tasks`: the downstream tasks to score at evaluations (cdlaw.tasks.scoring); None: those
    cfg.eval names, tokenised for `corpus` (none without a corpus).
    """
    run_dir = Path(run_dir)
    if (result := read_result(run_dir)) is not None:
        return result

    val_tokens, config_problem = check_run(cfg, run_dir, stream, val_tokens)
    if tasks is None:
        tasks = task_tokens_for(cfg.eval, corpus, cfg.model.seq_len) if corpus else []
    run = _open(cfg, run_dir, stream, val_tokens, exec_cfg, config_problem, fork_from)
    run.tasks = tasks
    state, total_steps = run.state, run.total_steps
    status = "done"
    with stop_signals() as stop_signal:
        for step in range(state["step"], total_steps):
            lr = run.train_step(step)
            # Log, evaluate, check for divergence (the only places that sync).
            if run.log(lr, on_row, on_progress):
                status = "diverged"
                break
            if step + 1 in fork_steps and not (fork := fork_path(run_dir, step + 1)).exists():
                run.save_fork(fork)
            stop = bool(stop_signal) or stop_after_steps == step + 1
            if stop or ((step + 1) % cfg.train.checkpoint_every == 0 and step + 1 < total_steps):
                run.checkpoint()
            if stop:
                raise RunInterrupted(
                    step + 1, f"signal {stop_signal[0]}" if stop_signal else "stop_after_steps"
                )

    # The model, the curve, and result.json last.
    return finish_run(
        cfg,
        run_dir,
        run.net,
        stream,
        state,
        run.rows,
        status,
        run.elapsed(),
        run.device,
        run.amp,
        corpus,
        run.started_from,
        tasks,
    )


def _open(
    cfg: RunConfig,
    run_dir: Path,
    stream: TokenStream,
    val_tokens: np.ndarray,
    exec_cfg: ExecConfig,
    config_problem: str | None,
    fork_from: Path | None,
) -> _Run:
    """The device, the model and AdamW, and the run opened on them: fresh, resumed from its
    checkpoint, or started from a fork (cdlaw.train.run_parts.open_run)."""
    model_cfg = cfg.model
    device = torch.device(resolve_device(exec_cfg.device))
    if exec_cfg.threads:
        torch.set_num_threads(exec_cfg.threads)
    amp = autocast_dtype(exec_cfg.precision, device, model_cfg.d_model)
    net = build_model(model_cfg, seed=cfg.seed).to(device)
    net.train()
    optimizer = make_optimizer(net, cfg.train, device)
    body = torch.compile(net.model) if exec_cfg.compile else net.model  # all but the LM head
    assert non_embedding_params(net) == count_params(model_cfg).n_params

    total_steps = -(-stream.n_tokens // (cfg.train.batch_size * model_cfg.seq_len))
    val_x, val_y = make_batch(val_tokens, len(val_tokens) - 1, model_cfg.seq_len)
    val = (torch.from_numpy(val_x), torch.from_numpy(val_y))
    state, rows, started_from = open_run(
        cfg, run_dir, stream, net, optimizer, exec_cfg, total_steps, config_problem, fork_from
    )
    interval_loss = torch.tensor(state["interval_loss"], dtype=torch.float32, device=device)
    grad_norm = torch.zeros((), device=device)
    return _Run(
        cfg,
        run_dir,
        stream,
        net,
        body,
        optimizer,
        device,
        amp,
        total_steps,
        val,
        state,
        rows,
        started_from,
        interval_loss,
        grad_norm,
        session_start=time.perf_counter(),
        elapsed_before=state["elapsed_s"],
    )


@dataclass
class _Run:
    """A run while train_run trains it: its model and AdamW, its loop state, and what its
    next metrics row reads."""

    cfg: RunConfig
    run_dir: Path
    stream: TokenStream
    net: torch.nn.Module
    body: torch.nn.Module  # what the forward runs up to the LM head (compiled with --compile)
    optimizer: torch.optim.Optimizer
    device: torch.device
    amp: torch.dtype | None
    total_steps: int
    val: tuple[torch.Tensor, torch.Tensor]  # the validation set as (inputs, targets) rows
    state: dict  # step, tokens_seen, … (cdlaw.train.run_parts.open_run): what a checkpoint saves
    rows: list[dict]  # the metrics rows so far
    started_from: dict  # the trunk and step a branch forked from (none: run "", step 0)
    interval_loss: torch.Tensor  # cross-entropy summed since the last metrics row
    grad_norm: torch.Tensor  # of the last step that trained
    session_start: float  # time.perf_counter() when this call started training
    elapsed_before: float  # seconds the calls before this one trained it
    session_tokens: int = 0  # tokens this call trained
    tasks: list[TaskTokens] = field(default_factory=list)  # scored at evaluations (tasks_due)

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.session_start

    def train_step(self, step: int) -> float:
        """Train step `step` on the next batch of the stream; return its learning rate."""
        train, seq_len, state = self.cfg.train, self.cfg.model.seq_len, self.state
        start = state["tokens_seen"]
        x, y, n = read_batch(
            self.stream, start, train.batch_size * seq_len, seq_len, self.cfg.model.vocab_size
        )
        n_targets = int((y != IGNORE).sum())
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        lr = lr_at(step, self.total_steps, train)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # A stream of k·batch_tokens + 1 tokens ends with a lone input and no target.
        if n_targets:
            micro_rows = self._micro_rows()
            for i in range(0, x.shape[0], micro_rows):
                xb = x[i : i + micro_rows].to(self.device, non_blocking=True)
                yb = y[i : i + micro_rows].to(self.device, non_blocking=True)
                ce, z = lm_losses(self.net, xb, yb, self.amp, self.body)
                ((ce + train.z_loss * z) / n_targets).backward()
                self.interval_loss += ce.detach()
            self.grad_norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), train.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        state["step"] = step + 1
        state["tokens_seen"] = start + n
        state["interval_targets"] += n_targets
        self.session_tokens += n
        return lr

    def log(self, lr: float, on_row, on_progress) -> bool:
        """log_step after the step just trained: True when the run has diverged."""
        val_x, val_y = self.val
        return log_step(
            self.cfg,
            self.state,
            self.rows,
            self.stream,
            self.run_dir / "metrics.parquet",
            lr=lr,
            interval_loss=self.interval_loss,
            grad_norm=self.grad_norm,
            total_steps=self.total_steps,
            evaluate=lambda: loss_on_batches(
                self.net, val_x, val_y, self._micro_rows(), self.amp, self.body
            ),
            elapsed=self.elapsed,
            rate=lambda tokens=self.session_tokens: (
                tokens / (time.perf_counter() - self.session_start)
            ),
            on_row=on_row,
            on_progress=on_progress,
            evaluate_tasks=(
                (lambda: evaluate_tasks(self.net, self.tasks, self.amp)) if self.tasks else None
            ),
        )

    def checkpoint(self) -> None:
        self._sync_state()
        # Metrics first: rows newer than the checkpoint are dropped on resume, lost rows
        # could not be recovered.
        write_metrics(self.run_dir / "metrics.parquet", self.rows)
        save_checkpoint(self.run_dir / "checkpoint", self.net, self.optimizer, self.state)

    def save_fork(self, fork: Path) -> None:
        self._sync_state()
        save_fork(fork, self.net, self.optimizer, self.state, self.rows)

    def _sync_state(self) -> None:
        """The loss sum and the time so far into state, which a checkpoint or fork saves."""
        self.state["interval_loss"] = float(self.interval_loss)
        self.state["elapsed_s"] = self.elapsed()

    def _micro_rows(self) -> int:
        return self.cfg.train.micro_batch_size or self.cfg.train.batch_size
