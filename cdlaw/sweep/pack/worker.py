"""The pack worker: the scheduler's entry point for a pack, each run under its own lock.

    execute_pack(pack, on_event) -> one RunOutcome per task, as execute_run's

The claimed runs train together in cdlaw.train.packed_loop.train_pack (docs/packing.md).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from cdlaw.sweep.events import OnEvent, RunEnded, RunProgress, RunStarted
from cdlaw.sweep.handoffs import Outcome, PackTask, RunOutcome, RunTask
from cdlaw.sweep.locks import RunLock
from cdlaw.sweep.worker import choose_fork, claim_run
from cdlaw.system.disk_full import is_disk_full, sweep_stopped
from cdlaw.train.result import read_result
from cdlaw.train.trackers import TrackedRun

if TYPE_CHECKING:  # the packed loop (torch) is imported where a pack trains
    from cdlaw.train.packed_loop import PackedRun


def execute_pack(pack: PackTask, on_event: OnEvent | None = None) -> list[RunOutcome]:
    """Train the runs of `pack.tasks` (RunTasks of one pack_key) in one pack; return one
    RunOutcome per task, in order. Outcomes are execute_run's plus `paused` (checkpointed,
    to be re-packed) and `pack-failed`.

    Each run is claimed as execute_run claims it (skipped when done, `locked` when another
    process holds it, its attempt recorded), and writes its own files. A run that ends in
    the pack says so at once (RunEnded, its tracker closed), not when the pack ends.

    `pack.pause_after_s`: the pack checkpoints every run still in it after that many
    seconds and hands them back as `paused`; the scheduler re-forms packs from them and the
    runs that became ready meanwhile (a branch whose fork now exists), so a pack never runs
    on half empty while work waits. Resuming from a checkpoint is exact, so pausing changes
    no number. A pack that fails outside a run's own arithmetic (a bad token id, a crash)
    hands its unfinished runs back as `pack-failed`: the scheduler trains each of them
    alone, where execute_run records whichever run is at fault, and the others go on.
    """
    emit = on_event or (lambda e: None)
    outcomes: dict[str, RunOutcome] = {}
    claimed: list[tuple[RunTask, RunLock]] = []
    try:
        for task in pack.tasks:
            got = claim_run(task)
            if isinstance(got, RunOutcome):
                outcomes[task.config.run_id] = got
            else:
                claimed.append((task, got))
        if claimed:
            _train([task for task, _ in claimed], emit, pack.pause_after_s, outcomes)
    except Exception as e:
        if not is_disk_full(e):
            raise
        for task, _ in claimed:
            rid = task.config.run_id
            if rid not in outcomes:
                error = sweep_stopped(e, task.run_dir)
                outcomes[rid] = RunOutcome(rid, Outcome.DISK_FULL, error=error)
    finally:
        for _, lock in claimed:
            lock.release()
    return [outcomes[t.config.run_id] for t in pack.tasks]


def _train(
    claimed: list[RunTask], emit: OnEvent, pause_after_s: float | None, outcomes: dict
) -> None:
    """Train the claimed runs in one pack; each one's outcome into `outcomes`."""
    from cdlaw.train.packed_loop import train_pack
    from cdlaw.train.run_parts import RunInterrupted

    exec_cfg = claimed[0].exec_cfg
    packed, trackers = [], {}
    for task in claimed:
        run, trackers[task.config.run_id] = _packed_run(task, emit)
        packed.append(run)
    error = None
    try:
        train_pack(packed, exec_cfg, pause_after_s=pause_after_s)
    except RunInterrupted as e:
        if e.reason != "pause":
            raise  # a signal: every run is checkpointed; the sweep stops
    except Exception as e:
        if is_disk_full(e):
            raise
        error = f"{type(e).__name__}: {e}"
    for task in claimed:
        rid = task.config.run_id
        result = read_result(task.run_dir)
        if result is not None:
            outcomes[rid] = RunOutcome.ended(rid, result)
            continue
        if exec_cfg.trackers:
            trackers[rid].finish(None)  # it resumes: the tracked run stays open
        kind = Outcome.PAUSED if error is None else Outcome.PACK_FAILED
        outcomes[rid] = RunOutcome(rid, kind, error=error)


def _packed_run(task: RunTask, emit: OnEvent) -> tuple[PackedRun, TrackedRun]:
    """The claimed run as the packed loop takes it (its stream, its fork, its listeners),
    and its tracked run (--tracker)."""
    from cdlaw.data.tokens.ordering import stream_for_run
    from cdlaw.train import packed_loop

    cfg, rid, run_dir, exec_cfg = task.config, task.config.run_id, task.run_dir, task.exec_cfg
    emit(RunStarted(rid, os.getpid()))
    prepared, stream = stream_for_run(cfg, Path(task.cache_dir))
    tracked = TrackedRun(exec_cfg.trackers, run_dir.parent.parent, cfg)

    def on_end(row: dict) -> None:
        (run_dir / "error.txt").unlink(missing_ok=True)  # from a failed earlier attempt
        (run_dir / "result.failed.json").unlink(missing_ok=True)
        if exec_cfg.trackers:
            tracked.finish(row)
        emit(RunEnded(rid, row.get("status", "done"), row.get("loss")))

    run = packed_loop.PackedRun(
        cfg,
        run_dir,
        stream,
        prepared.val_tokens,
        corpus=prepared,
        on_row=tracked.row if exec_cfg.trackers else None,
        on_progress=lambda p: emit(RunProgress(rid, **dataclasses.asdict(p))),
        on_end=on_end,
        fork_steps=tuple(task.fork_steps),
        fork_from=choose_fork(run_dir, tuple(Path(p) for p in task.fork_from)),
    )
    return run, tracked
