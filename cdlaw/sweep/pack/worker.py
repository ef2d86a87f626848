"""The pack worker: the scheduler's entry point for a pack, each run under its own lock.

    execute_pack(tasks, on_event, pause_after_s) -> one outcome per task, as execute_run's

The claimed runs train together in cdlaw.train.packed_loop.train_pack (docs/packing.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from cdlaw.disk_full import is_disk_full, sweep_stopped
from cdlaw.sweep.events import OnEvent, RunEnded, RunProgress, RunStarted
from cdlaw.sweep.worker import choose_fork, claim_run
from cdlaw.train.result import read_result
from cdlaw.train.trackers import TrackedRun


def execute_pack(tasks, on_event: OnEvent | None = None, pause_after_s: float | None = None):
    """Train the runs of `tasks` (RunTasks of one pack_key) in one pack; return a list of
    {"run_id", "outcome", "result"[, "error"]}, one per task, in order. Outcomes are
    execute_run's plus `paused` (checkpointed, to be re-packed) and `pack-failed`.

    Each run is claimed as execute_run claims it (skipped when done, `locked` when another
    process holds it, its attempt recorded), and writes its own files. A run that ends in
    the pack says so at once (RunEnded, its tracker closed), not when the pack ends.

    `pause_after_s`: the pack checkpoints every run still in it after that many seconds and
    hands them back as `paused`; the scheduler re-forms packs from them and the runs that
    became ready meanwhile (a branch whose fork now exists), so a pack never runs on half
    empty while work waits. Resuming from a checkpoint is exact, so pausing changes no
    number. A pack that fails outside a run's own arithmetic (a bad token id, a crash)
    hands its unfinished runs back as `pack-failed`: the scheduler trains each of them
    alone, where execute_run records whichever run is at fault, and the others go on.
    """
    emit = on_event or (lambda e: None)
    outcomes: dict[str, dict] = {}
    claimed = []
    try:
        for task in tasks:
            run_dir = Path(task.sweep_dir) / task.config.run_id
            got = claim_run(task.config, run_dir, task.retry_failed, task.exec_cfg)
            if isinstance(got, dict):
                outcomes[task.config.run_id] = got
            else:
                claimed.append((task, got, run_dir))
        if claimed:
            _train(claimed, emit, pause_after_s, outcomes)
    except Exception as e:
        if not is_disk_full(e):
            raise
        for task, _, run_dir in claimed:
            if task.config.run_id not in outcomes:
                error = sweep_stopped(e, run_dir)
                outcomes[task.config.run_id] = {
                    "run_id": task.config.run_id,
                    "outcome": "disk-full",
                    "result": None,
                    "error": error,
                }
    finally:
        for _, lock, _ in claimed:
            lock.release()
    return [outcomes[t.config.run_id] for t in tasks]


def _train(claimed, emit, pause_after_s, outcomes: dict[str, dict]) -> None:
    from cdlaw.data.ordering import stream_for_run
    from cdlaw.train.packed_loop import PackedRun, train_pack
    from cdlaw.train.run_parts import RunInterrupted

    exec_cfg = claimed[0][0].exec_cfg
    packed, trackers = [], {}
    for task, _, run_dir in claimed:
        cfg, rid = task.config, task.config.run_id
        emit(RunStarted(rid, os.getpid()))
        prepared, stream = stream_for_run(cfg, Path(task.cache_dir))
        tracked = TrackedRun(exec_cfg.trackers, run_dir.parent.parent, cfg)
        trackers[rid] = tracked

        def on_end(row: dict, rid=rid, run_dir=run_dir, tracked=tracked) -> None:
            (run_dir / "error.txt").unlink(missing_ok=True)  # from a failed earlier attempt
            (run_dir / "result.failed.json").unlink(missing_ok=True)
            if exec_cfg.trackers:
                tracked.finish(row)
            emit(RunEnded(rid, row.get("status", "done"), row.get("loss")))

        packed.append(
            PackedRun(
                cfg,
                run_dir,
                stream,
                prepared.val_tokens,
                corpus=prepared,
                on_row=tracked.row if exec_cfg.trackers else None,
                on_progress=lambda p, rid=rid: emit(RunProgress(run_id=rid, **p)),
                on_end=on_end,
                fork_steps=tuple(task.fork_steps),
                fork_from=choose_fork(run_dir, tuple(Path(p) for p in task.fork_from)),
            )
        )
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
    for task, _, run_dir in claimed:
        rid = task.config.run_id
        result = read_result(run_dir)
        if result is not None:
            outcomes[rid] = {"run_id": rid, "outcome": result.get("status"), "result": result}
            continue
        if exec_cfg.trackers:
            trackers[rid].finish(None)  # it resumes: the tracked run stays open
        outcome = "paused" if error is None else "pack-failed"
        outcomes[rid] = {"run_id": rid, "outcome": outcome, "result": None, "error": error}
