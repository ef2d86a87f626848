"""Train many small runs of one shape in one process, one batched step for all of them.

    train_pack(runs, exec_cfg) -> {run_id: result row}, each as train_run would return it

A scaling-law sweep is mostly small models, and a small model's step is mostly overhead
(Python, kernel dispatch, optimizer launches), not arithmetic. Runs that share a model
shape, seq_len, batch and micro-batch size and AdamW's betas and eps (`pack_key`, in
cdlaw.sweep.pack.groups, with the grouping of a sweep's runs into packs) train
together: their weights are stacked (cdlaw.sweep.pack.model) and each step is one
batched forward and backward for all of them, then torch's clip and fused AdamW kernels
over every run's tensors in a few calls. Everything else stays
each run's own: its seed, token stream, lr, schedule and its length, weight decay, z-loss,
gradient clipping (its own gradient norm), AdamW state, metrics, checkpoints, result.json
and model/ — written by the same code train_run uses (cdlaw.train.run_parts), so a packed
run's folder is a run's folder and its numbers are the run's numbers (tests/test_packed.py
compares them step by step).

A run leaves the pack when it ends: done (model/ and result.json written then, not at the
end of the pack) or diverged (the others go on). Its row is dropped and the pack goes on
smaller. Checkpoints are each run's own, at its own checkpoint_every, so a pack killed
at any moment (even kill -9) is re-formed from the same runs, each from its own newest
checkpoint; runs already finished return their result.json. SIGTERM/SIGINT checkpoint
every run of the pack, then stop as train_run does.

Shared prefixes work as in train_run: a trunk saves its fork checkpoints after the steps
in its `fork_steps`, and a branch with no checkpoint of its own starts from `fork_from`.
With exec_cfg.compile the pack's forward, loss and backward are compiled
(PackedModels.train_loss): faster, but its numbers then drift from the run alone's by
rounding (docs/packing.md). The elapsed time a packed run records is the pack's wall time
while it was in it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.data.corpus_cache import PreparedCorpus
from cdlaw.data.streams import TokenStream
from cdlaw.errors import BadInput
from cdlaw.sweep.pack.groups import pack_key
from cdlaw.sweep.pack.model import PackedModels
from cdlaw.train.checkpoint import save_checkpoint
from cdlaw.train.forks import fork_path, save_fork
from cdlaw.train.metrics import write_metrics
from cdlaw.train.model import build_model
from cdlaw.train.result import read_result
from cdlaw.train.run_parts import (
    RunInterrupted,
    check_run,
    finish_run,
    log_step,
    open_run,
    stop_signals,
)
from cdlaw.train.steps import (
    IGNORE,
    autocast_dtype,
    loss_on_batches,
    lr_at,
    make_batch,
    make_optimizer,
    resolve_device,
)


@dataclass
class PackedRun:
    """One run of a pack: what train_run takes for it."""

    cfg: RunConfig
    run_dir: Path
    stream: TokenStream
    val_tokens: np.ndarray
    corpus: PreparedCorpus | None = None
    on_row: Callable[[dict], None] | None = None  # as train_run's (an experiment tracker)
    on_progress: Callable[[dict], None] | None = None  # as train_run's
    on_end: Callable[[dict], None] | None = None  # sees the result row when the run leaves
    fork_steps: tuple[int, ...] = ()  # as train_run's: save a fork after these steps
    fork_from: Path | None = None  # as train_run's: a branch starts from this fork


@dataclass
class _Slot:
    """A run while it is in the pack: its real model and AdamW (to load and save with
    train_run's code) and its loop state."""

    run: PackedRun
    net: object
    optimizer: object
    state: dict
    rows: list[dict]
    started_from: dict
    total_steps: int
    val: tuple[torch.Tensor, torch.Tensor]
    elapsed_before: float
    n_targets: int = 0
    ended: str = ""  # "done" | "diverged" once the run has left
    lr: float = 0.0
    grad_norm: torch.Tensor | None = None  # of its last step that trained (none: zero)
    extra: dict = field(default_factory=dict)


def train_pack(
    runs: list[PackedRun],
    exec_cfg: ExecConfig = ExecConfig(),
    stop_after_steps: int | None = None,
    pause_after_s: float | None = None,
) -> dict[str, dict]:
    """Train every run of `runs` (one pack_key) to its end; return {run_id: result row}.

    A run whose folder holds a result.json is not trained again. `stop_after_steps`: after
    that many steps of the pack, checkpoint every run still in it and raise RunInterrupted.
    `pause_after_s`: the same after the first step that ends that many seconds after the
    pack started (the sweep re-forms packs this way, with runs that became ready since).
    """
    if not runs:
        return {}
    first = runs[0]
    for r in runs[1:]:
        if pack_key(r.cfg) != pack_key(first.cfg):
            raise BadInput(
                f"runs {first.cfg.run_id} and {r.cfg.run_id} cannot share a pack: a pack's runs "
                "need one model shape, seq_len, batch and micro-batch size, β1, β2 and ε"
            )
    ids = [r.cfg.run_id for r in runs]
    if len(set(ids)) != len(ids):
        raise BadInput("a pack holds each run once")
    results = {r.cfg.run_id: read_result(Path(r.run_dir)) for r in runs}
    todo = [r for r in runs if results[r.cfg.run_id] is None]
    checked = [(r, *check_run(r.cfg, Path(r.run_dir), r.stream, r.val_tokens)) for r in todo]
    if not todo:
        return results

    device = torch.device(resolve_device(exec_cfg.device))
    if exec_cfg.threads:
        torch.set_num_threads(exec_cfg.threads)
    model_cfg, train = first.cfg.model, first.cfg.train
    seq_len, batch_rows = model_cfg.seq_len, train.batch_size
    micro_rows = train.micro_batch_size or batch_rows
    batch_tokens = batch_rows * seq_len
    amp = autocast_dtype(exec_cfg.precision, device, model_cfg.d_model)

    slots = []
    for run, val_tokens, config_problem in checked:
        run.run_dir = Path(run.run_dir)
        net = build_model(run.cfg.model, seed=run.cfg.seed).to(device)
        optimizer = make_optimizer(net, run.cfg.train, device)
        total_steps = -(-run.stream.n_tokens // batch_tokens)
        state, rows, started_from = open_run(
            run.cfg,
            run.run_dir,
            run.stream,
            net,
            optimizer,
            exec_cfg,
            total_steps,
            config_problem,
            run.fork_from,
        )
        val_x, val_y = make_batch(val_tokens, len(val_tokens) - 1, seq_len)
        val = (torch.from_numpy(val_x), torch.from_numpy(val_y))
        slots.append(
            _Slot(
                run, net, optimizer, state, rows, started_from, total_steps, val, state["elapsed_s"]
            )
        )
    pack = PackedModels(
        [s.net for s in slots], [s.run.cfg.train for s in slots], device, exec_cfg.compile
    )
    for k, s in enumerate(slots):
        pack.load_from(k, s.net, s.optimizer)
    interval = torch.tensor([s.state["interval_loss"] for s in slots], device=device)
    z_loss = torch.tensor([s.run.cfg.train.z_loss for s in slots], device=device)

    session_start = time.perf_counter()

    def elapsed(slot: _Slot) -> float:
        return slot.elapsed_before + time.perf_counter() - session_start

    def save(k: int, slot: _Slot) -> None:
        slot.state["interval_loss"] = float(interval[k])
        slot.state["elapsed_s"] = elapsed(slot)
        pack.copy_to(k, slot.net, slot.optimizer)
        write_metrics(slot.run.run_dir / "metrics.parquet", slot.rows)
        save_checkpoint(slot.run.run_dir / "checkpoint", slot.net, slot.optimizer, slot.state)

    pack_steps = 0
    with stop_signals() as stop_signal:
        while slots:
            x, y = _batches(slots, batch_rows, seq_len, model_cfg.vocab_size)
            lrs = [s.lr for s in slots]
            n_targets = torch.tensor([max(s.n_targets, 1) for s in slots], device=device)
            idle = [k for k, s in enumerate(slots) if not s.n_targets]
            for i in range(0, x.shape[1], micro_rows):
                xb = x[:, i : i + micro_rows].to(device, non_blocking=True)
                yb = y[:, i : i + micro_rows].to(device, non_blocking=True)
                loss, ce = pack.train_loss(xb, yb, z_loss, n_targets, amp)
                loss.backward()
                interval += ce
            norms = pack.clip_grads()
            pack.adamw_step(lrs, idle)
            pack.zero_grad()
            pack_steps += 1
            paused = pause_after_s is not None and (
                time.perf_counter() - session_start >= pause_after_s
            )

            # Runs due an evaluation with one validation set share one packed forward.
            due = [k for k, s in enumerate(slots) if _evaluating(s)]
            same = [k for k in due if _same_val(slots[k], slots[due[0]])]
            val_losses = _validation_losses(pack, same, slots, micro_rows, device, amp)
            leaving = []
            for k, s in enumerate(slots):
                s.state["step"] += 1
                s.state["tokens_seen"] = s.extra["end"]
                s.state["interval_targets"] += s.n_targets
                step, last = s.state["step"], s.state["step"] == s.total_steps
                if s.n_targets or s.grad_norm is None:  # a lone last input trains nothing
                    s.grad_norm = norms[k] if s.n_targets else torch.zeros((), device=device)

                def evaluate(k=k, s=s, val_losses=val_losses) -> float:
                    if k in val_losses:
                        return val_losses[k]
                    pack.copy_to(k, s.net)
                    return loss_on_batches(s.net, *s.val, micro_rows, amp)

                if log_step(
                    s.run.cfg,
                    s.state,
                    s.rows,
                    s.run.stream,
                    s.run.run_dir / "metrics.parquet",
                    lr=s.lr,
                    interval_loss=interval[k],
                    grad_norm=s.grad_norm,
                    total_steps=s.total_steps,
                    evaluate=evaluate,
                    elapsed=lambda s=s: elapsed(s),
                    rate=lambda s=s: s.state["tokens_seen"] / max(elapsed(s), 1e-9),
                    on_row=s.run.on_row,
                    on_progress=s.run.on_progress,
                ):
                    s.ended = "diverged"
                elif last:
                    s.ended = "done"
                if step in s.run.fork_steps and s.ended != "diverged":
                    fork = fork_path(s.run.run_dir, step)
                    if not fork.exists():
                        s.state["interval_loss"] = float(interval[k])
                        s.state["elapsed_s"] = elapsed(s)
                        pack.copy_to(k, s.net, s.optimizer)
                        save_fork(fork, s.net, s.optimizer, s.state, s.rows)
                stop = bool(stop_signal) or stop_after_steps == pack_steps or paused
                if s.ended:
                    pack.copy_to(k, s.net)
                    results[s.run.cfg.run_id] = finish_run(
                        s.run.cfg, s.run.run_dir, s.net, s.run.stream, s.state, s.rows,
                        s.ended, elapsed(s), device, amp, s.run.corpus, s.started_from,
                    )  # fmt: skip
                    leaving.append(k)
                    if s.run.on_end is not None:
                        s.run.on_end(results[s.run.cfg.run_id])
                elif stop or step % s.run.cfg.train.checkpoint_every == 0:
                    save(k, s)
            if leaving:
                keep = [k for k in range(len(slots)) if k not in leaving]
                slots = [slots[k] for k in keep]
                interval, z_loss = interval[keep].clone(), z_loss[keep].clone()
                if slots:
                    pack.keep(keep, [s.run.cfg.train for s in slots])
            if slots and (stop_signal or stop_after_steps == pack_steps or paused):
                reason = (
                    f"signal {stop_signal[0]}"
                    if stop_signal
                    else ("stop_after_steps" if stop_after_steps == pack_steps else "pause")
                )
                raise RunInterrupted(pack_steps, reason)
    return results


def _evaluating(s: _Slot) -> bool:
    """Is the step just taken one where the run evaluates (as log_step decides)?"""
    step = s.state["step"] + 1
    return step % s.run.cfg.train.eval_every == 0 or step == s.total_steps


def _same_val(a: _Slot, b: _Slot) -> bool:
    return a.val[0].shape == b.val[0].shape and bool((a.val[0] == b.val[0]).all())


@torch.no_grad()
def _validation_losses(pack, models: list[int], slots, micro_rows, device, amp) -> dict:
    """{k: validation loss} of the listed models, all on slots[k].val (one set), in one
    packed forward per micro-batch: loss_on_batches' arithmetic for each."""
    if not models:
        return {}
    x, y = slots[models[0]].val
    total = torch.zeros(len(models), dtype=torch.float64, device=device)
    for i in range(0, x.shape[0], micro_rows):
        xb = x[i : i + micro_rows].to(device).expand(len(models), -1, -1)
        yb = y[i : i + micro_rows].to(device).expand(len(models), -1, -1)
        total += pack.losses(xb, yb, models, amp)[0].double()
    n = int((y != IGNORE).sum())
    return {k: t / n for k, t in zip(models, total.tolist(), strict=True)}


def _batches(slots: list[_Slot], rows: int, seq_len: int, vocab: int):
    """Each run's next batch, as train_run reads it, stacked (K, rows, seq_len); a run's
    partial last batch is padded with rows that have no targets. Sets each slot's lr,
    n_targets and the stream position its step ends at."""
    x = np.zeros((len(slots), rows, seq_len), dtype=np.int64)
    y = np.full((len(slots), rows, seq_len), IGNORE, dtype=np.int64)
    for k, s in enumerate(slots):
        start, step = s.state["tokens_seen"], s.state["step"]
        n = min(rows * seq_len, s.run.stream.n_tokens - start)
        xs, ys = make_batch(s.run.stream.read(start, n + 1), n, seq_len)
        if xs.max() >= vocab:
            raise BadInput(
                f"token id {xs.max()} at stream position ≥{start} is outside the model's "
                f"vocabulary of {vocab}"
            )
        x[k, : len(xs)], y[k, : len(ys)] = xs, ys
        s.n_targets = int((ys != IGNORE).sum())
        s.lr = lr_at(step, s.total_steps, s.run.cfg.train)
        s.extra["end"] = start + n
    return torch.from_numpy(x), torch.from_numpy(y)
