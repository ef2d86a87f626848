"""What a sweep tells its caller while it runs: one small frozen dataclass per kind of event.

Workers send them from other processes (a multiprocessing queue, or Ray's), so each is
plain data. `cdlaw sweep` draws its progress from them; a library caller passes any
callable as `on_event`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SweepPlanned:
    """The sweep's runs are known: their facts (cdlaw.train.result.run_facts), in order."""

    sweep: str
    runs: list[dict]
    sweep_dir: str


@dataclass(frozen=True)
class PacksChosen:
    """--pack: the most runs per pack for each model size; with auto, the gain in total
    tokens/s measured at that pack size, and every probe (cdlaw.sweep.pack.size.PackProbe)."""

    sizes: dict[str, int]
    gains: dict[str, float]
    probes: list[dict]


@dataclass(frozen=True)
class RunSkipped:
    """A run was finished before this sweep looked at it (status done|diverged|failed)."""

    run_id: str
    status: str | None


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    pid: int


@dataclass(frozen=True)
class RunProgress:
    """A training step that wrote a metrics row."""

    run_id: str
    step: int
    steps_total: int
    tokens_seen: int
    tokens_total: int
    tokens_per_second: float
    train_loss: float
    val_loss: float = math.nan  # NaN where this step did not evaluate


@dataclass(frozen=True)
class RunEnded:
    run_id: str
    status: str  # done | diverged | failed
    loss: float | None = None


@dataclass(frozen=True)
class RunLocked:
    """Another process holds the run's lock: this sweep waits for it, or (`waits` False:
    the run's worker died twice and another process took it meanwhile) leaves it to it."""

    run_id: str
    pid: int | None
    host: str | None
    waits: bool = True


@dataclass(frozen=True)
class RunRetried:
    """The worker process of a run died, its task raised, or its Ray node died (`reason`
    says which); the run goes back to the queue and resumes."""

    run_id: str
    reason: str


Event = (
    SweepPlanned
    | PacksChosen
    | RunSkipped
    | RunStarted
    | RunProgress
    | RunEnded
    | RunLocked
    | RunRetried
)
OnEvent = Callable[[Event], None]
