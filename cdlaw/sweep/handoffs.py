"""What the scheduler hands a worker and what the worker hands back (docs/sweep.md).

    RunTask      one run to train, with its folders, settings and forks
    PackTask     runs of one pack_key to train together in one process
    RunOutcome   how one run's task ended: its `Outcome` kind, its result row, a sentence

Plain frozen data: they cross process boundaries (worker processes, Ray tasks) as they are.
The scheduler (cdlaw.sweep.scheduler) sends tasks through an executor
(cdlaw.sweep.executors) to the run worker (cdlaw.sweep.worker.execute_run) or the pack
worker (cdlaw.sweep.pack.worker.execute_pack), and reads each RunOutcome's kind.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.sweep.simulate import Simulation


@dataclass(frozen=True)
class RunTask:
    """What a worker needs to run one run."""

    config: RunConfig
    sweep_dir: Path
    cache_dir: Path
    exec_cfg: ExecConfig
    retry_failed: bool  # a run that failed before: its failed result is replaced
    simulation: Simulation | None = None  # draw the loss from a law instead of training
    fork_steps: tuple[int, ...] = ()  # save a fork checkpoint after these steps (a trunk)
    fork_from: tuple[Path, ...] = ()  # fork checkpoints to start from, nearest first (a branch)

    @property
    def run_dir(self) -> Path:
        return Path(self.sweep_dir) / self.config.run_id


@dataclass(frozen=True)
class PackTask:
    """Runs of one pack_key to train together in one process (cdlaw.sweep.pack.worker);
    the pack checkpoints and hands its runs back after `pause_after_s` seconds."""

    tasks: tuple[RunTask, ...]
    pause_after_s: float | None = None


class Outcome(str, enum.Enum):
    """How a run's task ended; the scheduler decides what comes next from it."""

    DONE = "done"  # trained to its end (result.json written)
    DIVERGED = "diverged"  # stopped on a diverging loss: a result, not a failure
    FAILED = "failed"  # training raised: recorded as a failed result.json
    SKIPPED = "skipped"  # it had a result already: nothing trained
    LOCKED = "locked"  # another live process holds it: looked at again later
    DISK_FULL = "disk-full"  # the disk filled: the sweep stops, the run resumes later
    PAUSED = "paused"  # a pack checkpointed it and handed it back, to be packed again
    PACK_FAILED = "pack-failed"  # its pack failed outside its own arithmetic: train it alone


@dataclass(frozen=True)
class RunOutcome:
    """One run's outcome from its task: its kind, its result row (result.json's, when it
    has one) and, for disk-full and pack-failed, one sentence saying what went wrong."""

    run_id: str
    kind: Outcome
    result: dict | None = None
    error: str | None = None

    @classmethod
    def ended(cls, run_id: str, result: dict) -> RunOutcome:
        """The outcome of a run that ended with this result row: its status."""
        return cls(run_id, Outcome(result.get("status", "done")), result)
