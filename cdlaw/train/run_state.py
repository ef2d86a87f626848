"""What one run holds while it trains, the same alone (cdlaw.train.loop) and packed
(cdlaw.train.packed_loop): the typed objects the parts around its steps
(cdlaw.train.run_parts) take.

    RunTarget    what the run trains and where it writes: fixed while it trains
    RunState     the loop's counters and running sums: what a checkpoint's state.json holds
    RunRecord    a target, its state, its metrics rows and the fork it started from
    StepStats    the numbers of the step just trained that its metrics row reads
    RunProbe     what log_step asks the loop when a row is due (validation, tasks, time)
    RunHooks     who else sees the run's rows and progress (a tracker, a progress bar)
    StepProgress the progress a metrics row reports to RunHooks.on_progress
    Compute      the device and autocast dtype the run computes in
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from cdlaw.config import RunConfig
from cdlaw.data.tokens.cache import PreparedCorpus
from cdlaw.data.tokens.streams import TokenStream
from cdlaw.tasks.files import TaskTokens


@dataclass(frozen=True)
class RunTarget:
    """What a run trains and where it writes."""

    cfg: RunConfig
    run_dir: Path
    stream: TokenStream
    total_steps: int
    corpus: PreparedCorpus | None = None  # model/ gets its tokenizer (cdlaw.train.export)
    tasks: list[TaskTokens] = field(default_factory=list)  # scored at evaluations (tasks_due)


@dataclass
class RunState:
    """The loop's counters and running sums after step `step`: what a checkpoint saves
    (state.json, as `to_dict`) and a resumed run starts from (`from_dict`)."""

    run_id: str
    step: int = 0
    tokens_seen: int = 0
    elapsed_s: float = 0.0
    initial_loss: float | None = None  # train loss of step 1: the yardstick for divergence
    interval_loss: float = 0.0  # cross-entropy summed since the last metrics row …
    interval_targets: int = 0  # … over this many targets
    train_loss: float = math.nan
    val_loss: float = math.nan
    forked_from: dict | None = None  # a branch's trunk and fork step (cdlaw.train.forks)

    def to_dict(self) -> dict:
        """state.json's keys: every field, forked_from only for a branch."""
        out = dataclasses.asdict(self)
        if self.forked_from is None:
            del out["forked_from"]
        return out

    @classmethod
    def from_dict(cls, saved: dict) -> RunState:
        """The state a checkpoint saved (read and checked by cdlaw.train.checkpoint)."""
        return cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls) if f.name in saved})


@dataclass
class RunRecord:
    """A run opened to train (cdlaw.train.run_parts.open_run): its target, its loop state,
    its metrics rows so far and the trunk and step it forked from (none: run "", step 0)."""

    target: RunTarget
    state: RunState
    rows: list[dict]
    started_from: dict


@dataclass(frozen=True)
class StepStats:
    """The step just trained, as its metrics row reads it (tensors: read only when a row
    is due, the loop's only syncs)."""

    lr: float
    interval_loss: torch.Tensor  # cross-entropy summed since the last row; zeroed by a row
    grad_norm: torch.Tensor  # of the last step that trained


class RunProbe(Protocol):
    """What log_step asks the loop that trains the run, only when a row needs it."""

    def val_loss(self) -> float: ...

    def task_scores(self) -> dict: ...

    def elapsed(self) -> float: ...

    def rate(self) -> float: ...


@dataclass(frozen=True)
class StepProgress:
    """Where a run is after a step that wrote a metrics row (the sweep's RunProgress event
    carries these fields, with the run_id)."""

    step: int
    steps_total: int
    tokens_seen: int
    tokens_total: int
    tokens_per_second: float  # this call's (alone) or this pack's (packed) rate
    train_loss: float
    val_loss: float  # the last evaluation's; NaN before the first


@dataclass(frozen=True)
class RunHooks:
    """Who else sees a run: every metrics row it appends (an experiment tracker,
    cdlaw.train.trackers) and its progress at each row (the sweep's progress bar)."""

    on_row: Callable[[dict], None] | None = None
    on_progress: Callable[[StepProgress], None] | None = None


@dataclass(frozen=True)
class Compute:
    """Where a run computes: its device and autocast dtype (None: fp32)."""

    device: torch.device
    amp: torch.dtype | None
