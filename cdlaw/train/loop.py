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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from cdlaw.train.run_state import (
    Compute,
    RunHooks,
    RunRecord,
    RunTarget,
    StepProgress,
    StepStats,
)
from cdlaw.train.steps import (
    IGNORE,
    autocast_dtype,
    loss_on_batches,
    lr_at,
    make_batch,
    make_optimizer,
    optimizer_step,
    read_batch,
    resolve_device,
)


def train_run(
    cfg: RunConfig,
    run_dir: Path,
    stream: TokenStream,
    val_tokens: np.ndarray,
    exec_cfg: ExecConfig = ExecConfig(),
    on_progress: Callable[[StepProgress], None] | None = None,
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

    `on_progress` sees the StepProgress of every metrics row this call appends; `on_row`
    sees every metrics row this call appends (an experiment tracker,
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
    total_steps = -(-stream.n_tokens // (cfg.train.batch_size * cfg.model.seq_len))
    target = RunTarget(cfg, run_dir, stream, total_steps, corpus, tasks)
    run = _open(target, val_tokens, exec_cfg, config_problem, fork_from)
    hooks = RunHooks(on_row, on_progress)
    status = "done"
    with stop_signals() as stop_signal:
        for step in range(run.record.state.step, total_steps):
            lr = run.train_step(step)
            # Log, evaluate, check for divergence (the only places that sync).
            if run.log(lr, hooks):
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
    return finish_run(run.record, run.model.net, status, run.clock.elapsed(), run.model.compute)


def _open(
    target: RunTarget,
    val_tokens: np.ndarray,
    exec_cfg: ExecConfig,
    config_problem: str | None,
    fork_from: Path | None,
) -> _Run:
    """The device, the model and AdamW, and the run opened on them: fresh, resumed from its
    checkpoint, or started from a fork (cdlaw.train.run_parts.open_run)."""
    model_cfg = target.cfg.model
    device = torch.device(resolve_device(exec_cfg.device))
    if exec_cfg.threads:
        torch.set_num_threads(exec_cfg.threads)
    amp = autocast_dtype(exec_cfg.precision, device, model_cfg.d_model)
    net = build_model(model_cfg, seed=target.cfg.seed).to(device)
    net.train()
    optimizer = make_optimizer(net, target.cfg.train, device)
    body = torch.compile(net.model) if exec_cfg.compile else net.model  # all but the LM head
    assert non_embedding_params(net) == count_params(model_cfg).n_params

    val_x, val_y = make_batch(val_tokens, len(val_tokens) - 1, model_cfg.seq_len)
    val = (torch.from_numpy(val_x), torch.from_numpy(val_y))
    record = open_run(target, net, optimizer, exec_cfg, config_problem, fork_from)
    state = record.state
    interval_loss = torch.tensor(state.interval_loss, dtype=torch.float32, device=device)
    return _Run(
        record,
        _Model(net, body, optimizer, Compute(device, amp)),
        val,
        interval_loss,
        grad_norm=torch.zeros((), device=device),
        clock=_Clock(time.perf_counter(), state.elapsed_s),
    )


@dataclass
class _Model:
    """The model a run trains, the part of it the forward runs up to the LM head (compiled
    with --compile), its AdamW and where it computes."""

    net: torch.nn.Module
    body: Callable[..., Any]  # net.model, or what torch.compile made of it
    optimizer: torch.optim.Optimizer
    compute: Compute


@dataclass
class _Clock:
    """A run's training time: this call's and the calls' before it (what elapsed_s counts),
    and the tokens this call trained (its rate)."""

    session_start: float  # time.perf_counter() when this call started training
    elapsed_before: float  # seconds the calls before this one trained it
    session_tokens: int = 0  # tokens this call trained

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.session_start

    def rate(self) -> float:
        return self.session_tokens / (time.perf_counter() - self.session_start)


@dataclass
class _Run:
    """A run while train_run trains it: its record (cdlaw.train.run_state), its model, its
    validation set, the tensors its next metrics row reads, its clock. It is the RunProbe
    its rows ask for validation, task scores and time."""

    record: RunRecord
    model: _Model
    val: tuple[torch.Tensor, torch.Tensor]  # the validation set as (inputs, targets) rows
    interval_loss: torch.Tensor  # cross-entropy summed since the last metrics row
    grad_norm: torch.Tensor  # of the last step that trained
    clock: _Clock

    def train_step(self, step: int) -> float:
        """Train step `step` on the next batch of the stream; return its learning rate."""
        cfg, state, model = self.record.target.cfg, self.record.state, self.model
        train, seq_len = cfg.train, cfg.model.seq_len
        start = state.tokens_seen
        x, y, n = read_batch(
            self.record.target.stream,
            start,
            train.batch_size * seq_len,
            seq_len,
            cfg.model.vocab_size,
        )
        n_targets = int((y != IGNORE).sum())
        inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
        lr = lr_at(step, self.record.target.total_steps, train)
        for group in model.optimizer.param_groups:
            group["lr"] = lr
        # A stream of k·batch_tokens + 1 tokens ends with a lone input and no target.
        if n_targets:
            self.grad_norm = optimizer_step(
                model.net,
                model.optimizer,
                inputs,
                targets,
                n_targets,
                train,
                self._micro_rows(),
                model.compute.amp,
                self.interval_loss,
                model.body,
            )
        state.step = step + 1
        state.tokens_seen = start + n
        state.interval_targets += n_targets
        self.clock.session_tokens += n
        return lr

    def log(self, lr: float, hooks: RunHooks) -> bool:
        """log_step after the step just trained: True when the run has diverged."""
        return log_step(self.record, StepStats(lr, self.interval_loss, self.grad_norm), self, hooks)

    # RunProbe: what log_step asks when a row is due

    def val_loss(self) -> float:
        val_x, val_y = self.val
        model = self.model
        return loss_on_batches(
            model.net, val_x, val_y, self._micro_rows(), model.compute.amp, model.body
        )

    def task_scores(self) -> dict:
        return evaluate_tasks(self.model.net, self.record.target.tasks, self.model.compute.amp)

    def elapsed(self) -> float:
        return self.clock.elapsed()

    def rate(self) -> float:
        return self.clock.rate()

    def checkpoint(self) -> None:
        self._sync_state()
        # Metrics first: rows newer than the checkpoint are dropped on resume, lost rows
        # could not be recovered.
        run_dir, model = self.record.target.run_dir, self.model
        write_metrics(run_dir / "metrics.parquet", self.record.rows)
        save_checkpoint(
            run_dir / "checkpoint", model.net, model.optimizer, self.record.state.to_dict()
        )

    def save_fork(self, fork: Path) -> None:
        self._sync_state()
        model = self.model
        save_fork(fork, model.net, model.optimizer, self.record.state.to_dict(), self.record.rows)

    def _sync_state(self) -> None:
        """The loss sum and the time so far into state, which a checkpoint or fork saves."""
        self.record.state.interval_loss = float(self.interval_loss)
        self.record.state.elapsed_s = self.clock.elapsed()

    def _micro_rows(self) -> int:
        train = self.record.target.cfg.train
        return train.micro_batch_size or train.batch_size
