"""The packed training loop: runs of one pack_key trained in one process, one step for all.

    train_pack(runs, exec_cfg) -> {run_id: result row}, each as train_run would return it

Each run keeps its own numbers and files, written by train_run's code
(cdlaw.train.run_parts); the stacked models are cdlaw.train.packed_model. docs/packing.md
says what may share a pack, why a packed run equals the run alone, and how a pack resumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.data.tokens.cache import PreparedCorpus
from cdlaw.data.tokens.streams import TokenStream
from cdlaw.system.errors import BadInput
from cdlaw.tasks.files import TaskTokens, task_tokens_for
from cdlaw.tasks.scoring import evaluate_tasks
from cdlaw.train.checkpoint import save_checkpoint
from cdlaw.train.forks import fork_path, save_fork
from cdlaw.train.metrics import write_metrics
from cdlaw.train.model import build_model
from cdlaw.train.packable import pack_key
from cdlaw.train.packed_model import PackedModels
from cdlaw.train.packed_step import PackStep, packed_step
from cdlaw.train.result import read_result
from cdlaw.train.run_parts import (
    RunInterrupted,
    check_run,
    finish_run,
    log_step,
    open_run,
    stop_signals,
)
from cdlaw.train.run_state import (
    Compute,
    RunHooks,
    RunRecord,
    RunState,
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
    read_batch,
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
    on_progress: Callable[[StepProgress], None] | None = None  # as train_run's
    on_end: Callable[[dict], None] | None = None  # sees the result row when the run leaves
    fork_steps: tuple[int, ...] = ()  # as train_run's: save a fork after these steps
    fork_from: Path | None = None  # as train_run's: a branch starts from this fork
    tasks: list[TaskTokens] | None = None  # as train_run's: None, those cfg.eval names


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
    _check_one_pack(runs)
    found = {r.cfg.run_id: read_result(Path(r.run_dir)) for r in runs}
    results: dict[str, dict] = {rid: row for rid, row in found.items() if row is not None}
    todo = [r for r in runs if r.cfg.run_id not in results]
    checked = [(r, *check_run(r.cfg, Path(r.run_dir), r.stream, r.val_tokens)) for r in todo]
    if not todo:
        return results

    pack = _open_pack(checked, exec_cfg)
    pack_steps = 0
    with stop_signals() as stop_signal:
        while pack.slots:
            norms = pack.train_step()
            pack_steps += 1
            paused = pause_after_s is not None and (
                time.perf_counter() - pack.session_start >= pause_after_s
            )
            val_losses = pack.shared_validation()
            leaving = []
            for k, s in enumerate(pack.slots):
                pack.end_step(k, s, norms, val_losses)
                stop = bool(stop_signal) or stop_after_steps == pack_steps or paused
                if s.ended:
                    results[s.run.cfg.run_id] = pack.leave(k, s)
                    leaving.append(k)
                elif stop or s.state.step % s.run.cfg.train.checkpoint_every == 0:
                    pack.save(k, s)
            pack.drop(leaving)
            if pack.slots and (stop_signal or stop_after_steps == pack_steps or paused):
                reason = (
                    f"signal {stop_signal[0]}"
                    if stop_signal
                    else ("stop_after_steps" if stop_after_steps == pack_steps else "pause")
                )
                raise RunInterrupted(pack_steps, reason)
    return {rid: results[rid] for rid in found if rid in results}  # in the order of `runs`


def _check_one_pack(runs: list[PackedRun]) -> None:
    """Raise BadInput unless the runs share one pack_key and each is there once."""
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


@dataclass
class _Slot:
    """A run while it is in the pack: its record (cdlaw.train.run_state: target, loop
    state, rows), its real model and AdamW (to load and save with train_run's code) and
    its current step."""

    run: PackedRun
    record: RunRecord
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    val: tuple[torch.Tensor, torch.Tensor]  # the validation set as (inputs, targets) rows
    elapsed_before: float  # seconds the packs (or runs alone) before this one trained it
    n_targets: int = 0  # of its current step's batch
    batch_rows: int = 0  # rows of its current step's batch (fewer than the batch's at its end)
    ended: str = ""  # "done" | "diverged" once the run has left
    lr: float = 0.0  # of its current step
    grad_norm: torch.Tensor | None = None  # of its last step that trained (none: zero)
    step_end: int = 0  # the stream position its current step ends at

    @property
    def state(self) -> RunState:
        return self.record.state

    @property
    def total_steps(self) -> int:
        return self.record.target.total_steps


def _open_pack(
    checked: list[tuple[PackedRun, np.ndarray, str | None]], exec_cfg: ExecConfig
) -> _Pack:
    """The device, each run opened on its own model and AdamW (fresh, resumed from its
    checkpoint, or from a fork: open_run), and their weights and AdamW state loaded into
    one PackedModels. `checked`: (run, validation tokens, config.json problem) per run."""
    device = torch.device(resolve_device(exec_cfg.device))
    if exec_cfg.threads:
        torch.set_num_threads(exec_cfg.threads)
    model_cfg, train = checked[0][0].cfg.model, checked[0][0].cfg.train
    seq_len, batch_tokens = model_cfg.seq_len, train.batch_size * model_cfg.seq_len
    amp = autocast_dtype(exec_cfg.precision, device, model_cfg.d_model)

    slots = []
    for run, val_tokens, config_problem in checked:
        run.run_dir = Path(run.run_dir)
        if run.tasks is None:
            seq = run.cfg.model.seq_len
            run.tasks = task_tokens_for(run.cfg.eval, run.corpus, seq) if run.corpus else []
        net = build_model(run.cfg.model, seed=run.cfg.seed).to(device)
        optimizer = make_optimizer(net, run.cfg.train, device)
        total_steps = -(-run.stream.n_tokens // batch_tokens)
        target = RunTarget(run.cfg, run.run_dir, run.stream, total_steps, run.corpus, run.tasks)
        record = open_run(target, net, optimizer, exec_cfg, config_problem, run.fork_from)
        val_x, val_y = make_batch(val_tokens, len(val_tokens) - 1, seq_len)
        val = (torch.from_numpy(val_x), torch.from_numpy(val_y))
        slots.append(_Slot(run, record, net, optimizer, val, record.state.elapsed_s))
    models = PackedModels(
        [s.net for s in slots], [s.run.cfg.train for s in slots], device, exec_cfg.compile
    )
    for k, s in enumerate(slots):
        models.load_from(k, s.net, s.optimizer)
    interval = torch.tensor([s.state.interval_loss for s in slots], device=device)
    z_loss = torch.tensor([s.run.cfg.train.z_loss for s in slots], device=device)
    micro_rows = train.micro_batch_size or train.batch_size
    return _Pack(slots, models, interval, z_loss, device, amp, micro_rows, time.perf_counter())


@dataclass
class _Pack:
    """The runs in a pack while it trains: slot k is row k of the packed models and of the
    per-run tensors."""

    slots: list[_Slot]
    models: PackedModels
    interval: torch.Tensor  # (K,) each run's cross-entropy summed since its last metrics row
    z_loss: torch.Tensor  # (K,) each run's z-loss coefficient
    device: torch.device
    amp: torch.dtype | None
    micro_rows: int
    session_start: float  # time.perf_counter() when this pack started training

    def elapsed(self, slot: _Slot) -> float:
        return slot.elapsed_before + time.perf_counter() - self.session_start

    def train_step(self) -> torch.Tensor:
        """One step of every run in the pack: each its next batch, the packed forward and
        backward over the micro-batches, each its own clip and AdamW update. Returns the
        gradient norms, (K,)."""
        model_cfg, train = self.slots[0].run.cfg.model, self.slots[0].run.cfg.train
        x, y = _batches(self.slots, train.batch_size, model_cfg.seq_len, model_cfg.vocab_size)
        step = PackStep(
            lrs=[s.lr for s in self.slots],
            z_loss=self.z_loss,
            n_targets=torch.tensor([max(s.n_targets, 1) for s in self.slots], device=self.device),
            micro_rows=self.micro_rows,
            amp=self.amp,
            idle=[k for k, s in enumerate(self.slots) if not s.n_targets],
        )
        # A compiled step rounds its own way anyway: it keeps one graph, on padded batches.
        groups = None if self.models.compile else _row_groups(self.slots)
        return packed_step(self.models, x, y, step, self.interval, groups)

    def shared_validation(self) -> dict:
        """{k: validation loss} of the runs due an evaluation after this step that share
        the first one's validation set: one packed forward for all of them."""
        due = [k for k, s in enumerate(self.slots) if _evaluating(s)]
        same = [k for k in due if _same_val(self.slots[k], self.slots[due[0]])]
        return _validation_losses(
            self.models, same, self.slots, self.micro_rows, self.device, self.amp
        )

    def end_step(self, k: int, s: _Slot, norms: torch.Tensor, val_losses: dict) -> None:
        """After the step: run k's counters, its metrics row and evaluation (log_step), its
        end (s.ended: done or diverged) and its fork when one is due."""
        s.state.step += 1
        s.state.tokens_seen = s.step_end
        s.state.interval_targets += s.n_targets
        step, last = s.state.step, s.state.step == s.total_steps
        if s.n_targets or s.grad_norm is None:  # a lone last input trains nothing
            s.grad_norm = norms[k] if s.n_targets else torch.zeros((), device=self.device)
        if self._log(k, s, val_losses):
            s.ended = "diverged"
        elif last:
            s.ended = "done"
        if step in s.run.fork_steps and s.ended != "diverged":
            fork = fork_path(s.run.run_dir, step)
            if not fork.exists():
                self._sync(k, s)
                save_fork(fork, s.net, s.optimizer, s.state.to_dict(), s.record.rows)

    def _log(self, k: int, s: _Slot, val_losses: dict) -> bool:
        """log_step for run k: True when it has diverged."""
        assert s.grad_norm is not None  # end_step sets it first
        stats = StepStats(s.lr, self.interval[k], s.grad_norm)
        hooks = RunHooks(s.run.on_row, s.run.on_progress)
        return log_step(s.record, stats, _SlotProbe(self, k, s, val_losses), hooks)

    def save(self, k: int, s: _Slot) -> None:
        """Checkpoint run k: its metrics, then its model, AdamW and loop state."""
        self._sync(k, s)
        write_metrics(s.run.run_dir / "metrics.parquet", s.record.rows)
        save_checkpoint(s.run.run_dir / "checkpoint", s.net, s.optimizer, s.state.to_dict())

    def _sync(self, k: int, s: _Slot) -> None:
        """Row k of the pack into run k's own model, AdamW and state, to be saved."""
        s.state.interval_loss = float(self.interval[k])
        s.state.elapsed_s = self.elapsed(s)
        self.models.copy_to(k, s.net, s.optimizer)

    def leave(self, k: int, s: _Slot) -> dict:
        """Finish run k as train_run does (model/ when done, result.json last); its result
        row, which its on_end sees."""
        self.models.copy_to(k, s.net)
        compute = Compute(self.device, self.amp)
        result = finish_run(s.record, s.net, s.ended, self.elapsed(s), compute)
        if s.run.on_end is not None:
            s.run.on_end(result)
        return result

    def drop(self, leaving: list[int]) -> None:
        """Take the runs that left out of the pack; the others go on in their order."""
        if not leaving:
            return
        keep = [k for k in range(len(self.slots)) if k not in leaving]
        self.slots = [self.slots[k] for k in keep]
        self.interval, self.z_loss = self.interval[keep].clone(), self.z_loss[keep].clone()
        if self.slots:
            self.models.keep(keep, [s.run.cfg.train for s in self.slots])


@dataclass
class _SlotProbe:
    """What log_step asks of run k of the pack (a RunProbe): its validation loss (from the
    pack's shared forward when it took part, else on its own model), its task scores on
    its own model, as a run alone scores them, and its time."""

    pack: _Pack
    k: int
    slot: _Slot
    val_losses: dict  # {k: validation loss} of the runs in the shared forward

    def val_loss(self) -> float:
        if self.k in self.val_losses:
            return self.val_losses[self.k]
        s = self.slot
        self.pack.models.copy_to(self.k, s.net)
        return loss_on_batches(s.net, *s.val, self.pack.micro_rows, self.pack.amp)

    def task_scores(self) -> dict:
        s = self.slot
        self.pack.models.copy_to(self.k, s.net)
        return evaluate_tasks(s.net, s.record.target.tasks, self.pack.amp)

    def elapsed(self) -> float:
        return self.pack.elapsed(self.slot)

    def rate(self) -> float:
        return self.slot.state.tokens_seen / max(self.pack.elapsed(self.slot), 1e-9)


def _evaluating(s: _Slot) -> bool:
    """Is the step just taken one where the run evaluates (as log_step decides)?"""
    step = s.state.step + 1
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


def _row_groups(slots: list[_Slot]) -> list[tuple[int, list[int] | None]]:
    """(rows, models) groups of one step: the runs whose batches have the same number of
    rows, trained together on just those rows, so each sums its gradient over the tokens
    it would alone (a matmul over 7 rows and a padded 8th rounds differently). Every run
    with a full batch: one group of all (models None). Runs with no target (a lone last
    input) train nothing."""
    groups: dict[int, list[int]] = {}
    for k, s in enumerate(slots):
        if s.n_targets:
            groups.setdefault(s.batch_rows, []).append(k)
    if len(groups) == 1 and len(next(iter(groups.values()))) == len(slots):
        return [(next(iter(groups)), None)]
    return sorted(groups.items())


def _batches(slots: list[_Slot], rows: int, seq_len: int, vocab: int):
    """Each run's next batch, as train_run reads it, stacked (K, rows, seq_len); a run's
    partial last batch is padded with rows that have no targets. Sets each slot's lr,
    n_targets and the stream position its step ends at."""
    x = np.zeros((len(slots), rows, seq_len), dtype=np.int64)
    y = np.full((len(slots), rows, seq_len), IGNORE, dtype=np.int64)
    for k, s in enumerate(slots):
        start, step = s.state.tokens_seen, s.state.step
        xs, ys, n = read_batch(s.run.stream, start, rows * seq_len, seq_len, vocab)
        x[k, : len(xs)], y[k, : len(ys)] = xs, ys
        s.n_targets, s.batch_rows = int((ys != IGNORE).sum()), len(xs)
        s.lr = lr_at(step, s.total_steps, s.run.cfg.train)
        s.step_end = start + n
    return torch.from_numpy(x), torch.from_numpy(y)
