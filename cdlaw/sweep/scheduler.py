"""Keep an executor busy with a sweep's runs, in order of the work they lead to (docs/sweep.md).

One loop for every executor (in-process, worker processes, Ray), over
concurrent.futures-style futures:

- a run goes out when a slot is free and it is ready: a branch (share = true) is ready once
  its fork checkpoint exists, or once its trunk will not write it here (finished, failed,
  or not selected), and then it starts from the nearest older fork or from step 0;
- among ready runs the one heading the costliest chain of work goes first (the queue's
  order, set by the runner), so trunks start early and branches follow their forks;
- a run another live process holds is looked at again every RETRY_LOCKED_S;
- a worker that dies loses nothing: its run is queued again and resumes from its
  checkpoint; a run that kills its worker twice is recorded as failed;
- fork checkpoints that no unfinished run of the sweep can start from are deleted;
- with packing (--pack), ready runs of one shape go out together as one pack task, which
  hands its unfinished runs back every few seconds to be packed again (docs/packing.md).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from concurrent.futures.process import BrokenProcessPool

from cdlaw.atomic import write_json_atomic
from cdlaw.config import ExecConfig, RunConfig
from cdlaw.sweep.events import RunEnded, RunLocked, RunRetried, RunSkipped
from cdlaw.sweep.executors import PackTask, RunTask
from cdlaw.sweep.forest import Fork, fork_dir
from cdlaw.sweep.locks import LOCK_NAME, RunLock, read_lock
from cdlaw.sweep.pack.groups import Packing, pack_key
from cdlaw.sweep.selection import SweepPlan
from cdlaw.sweep.summary import rebuild_summary
from cdlaw.train.damage import DiskFull
from cdlaw.train.forks import fork_exists, remove_fork
from cdlaw.train.result import read_result, result_row

POLL_S = 0.2  # how often the scheduler looks at events and finished futures
RETRY_LOCKED_S = 2.0  # how often a run held by another process is looked at again


def schedule_runs(
    plan, todo, retry, ex, exec_cfg, emit, simulation=None, packing: Packing | None = None
) -> list[str]:
    """Train `todo` (in priority order) on executor `ex`; return the run ids trained here.

    `packing`: ready runs of one pack_key go out together, up to the pack size, as one
    task (cdlaw.sweep.pack.worker) that hands its unfinished runs back every
    `packing.pause_s` seconds to be packed again with whatever became ready."""
    forest = plan.forest if simulation is None else None  # a simulated run trains nothing
    queue: list[RunConfig] = list(todo)
    rank = {c.run_id: i for i, c in enumerate(todo)}  # the queue's order; retries go first
    by_id = {c.run_id: c for c in todo}
    timed = packing is not None and all(pack_key(c) in packing.step_seconds for c in todo)
    waiting: dict[str, tuple[RunConfig, float]] = {}
    deaths: dict[str, int] = {}
    alone: set[str] = set()  # runs whose pack failed under them: trained alone from now on
    inflight: dict[cf.Future, list[RunConfig]] = {}
    trained: list[str] = []

    def task(cfg: RunConfig) -> RunTask:
        rid, sweep_dir = cfg.run_id, plan.sweep_dir.resolve()
        saves = forest.saves.get(rid, ()) if forest else ()
        starts = forest.fallbacks.get(rid, ()) if forest else ()
        return RunTask(
            cfg,
            sweep_dir,
            plan.cache_dir.resolve(),
            exec_cfg,
            rid in retry,
            simulation,
            fork_steps=saves,
            fork_from=tuple(fork_dir(sweep_dir, f) for f in starts),
        )

    def ready(cfg: RunConfig, coming: set[str]) -> bool:
        """A branch is ready once its fork exists, or once its trunk is not `coming` (to be
        trained here, or held by another process) and so will not write it."""
        fork = forest.forks.get(cfg.run_id) if forest else None
        if fork is None or fork_exists(fork_dir(plan.sweep_dir, fork)):
            return True
        return fork.parent not in coming

    def next_group(coming: set[str]) -> list[RunConfig]:
        """The first ready run, with (packing) the next ready runs of its pack_key."""
        candidates = [c for c in queue if ready(c, coming)]
        if not candidates or packing is None or candidates[0].run_id in alone:
            return candidates[:1]
        packable = [c for c in candidates if c.run_id not in alone]
        key = pack_key(candidates[0])
        same = [c for c in packable if pack_key(c) == key]
        # Free slots are shared out: one pack per other key that waits, the rest split
        # this key's runs (two half packs on two workers beat one full pack and an idle one).
        others = len({pack_key(c) for c in packable}) - 1
        slots = max(1, ex.capacity - len(inflight) - others)
        size = min(packing.size(candidates[0]), math.ceil(len(same) / slots))
        return same[: min(size, chain_cap(candidates[0], coming))]

    def chain_cap(head: RunConfig, unfinished: set[str]) -> int:
        """The most runs a pack headed by `head` (the ready run with the most work ahead of
        it) may hold without the sweep waiting on head at its end. A pack of K slows each
        of its runs K/gain(K) times; with every pack full, the sweep ends when the packed
        work left is done: Σ work/gain over the slots. Head's own work w keeps up while
        w·K/gain(K) stays within that. Without measured gains (--pack K): work in FLOPs,
        gain taken equal across shapes, K ≤ W/(slots·w)."""
        if forest is None or packing is None:
            return packing.size(head) if packing else 1
        own = work(head.run_id)
        rids = [rid for rid in unfinished if rid in by_id]
        if own <= 0:
            return packing.size(head)
        if not timed:
            return max(1, int(sum(work(rid) for rid in rids) / (ex.capacity * own)))
        end = sum(work(r) / packing.gain(by_id[r], packing.size(by_id[r])) for r in rids)
        end /= ex.capacity
        k = 1
        while k < packing.size(head) and own * (k + 1) / packing.gain(head, k + 1) <= end:
            k += 1
        return k

    def work(rid: str) -> float:
        """A run's own work: alone-seconds where every shape's step was measured, else FLOPs."""
        cfg = by_id[rid]
        if not timed:
            return forest.own_flops.get(rid, 0.0)
        steps = forest.own_tokens.get(rid, 0) / (cfg.train.batch_size * cfg.model.seq_len)
        return steps * packing.step_seconds[pack_key(cfg)]

    def submit(group: list[RunConfig]) -> None:
        for c in group:
            queue.remove(c)
        job: RunTask | PackTask = task(group[0])
        if packing is not None and group[0].run_id not in alone:
            job = PackTask(tuple(task(c) for c in group), packing.pause_s)
        inflight[ex.submit(job)] = group

    while queue or inflight or waiting:
        now = time.monotonic()
        for rid, (cfg, when) in list(waiting.items()):
            if when <= now:
                queue.append(cfg)
                del waiting[rid]
        queue.sort(key=lambda c: rank[c.run_id])
        while len(inflight) < ex.capacity:
            coming = {c.run_id for c in queue} | set(waiting)
            coming |= {c.run_id for group in inflight.values() for c in group}
            group = next_group(coming)
            if not group:
                break
            submit(group)
        if not inflight:
            ex.drain()
            time.sleep(POLL_S)
            continue
        done, _ = cf.wait(list(inflight), timeout=POLL_S, return_when=cf.FIRST_COMPLETED)
        ex.drain()
        for future in done:
            group = inflight.pop(future)
            try:
                result = future.result()
            except Exception as e:  # the worker died under the run, or it raised outside training
                died = isinstance(e, BrokenProcessPool)
                if died:
                    ex.broken()
                reason = f"{type(e).__name__}: {e}"
                for cfg in group:
                    if len(group) > 1:
                        alone.add(cfg.run_id)  # which run of the pack it was, alone will show
                    deaths[cfg.run_id] = deaths.get(cfg.run_id, 0) + 1
                    if deaths[cfg.run_id] >= 2:
                        what = (
                            "the worker died twice" if died else "it failed twice outside training"
                        )
                        _record_failure(plan, cfg, exec_cfg, f"{what}: {reason}")
                        emit(RunEnded(cfg.run_id, "failed"))
                    else:
                        emit(RunRetried(cfg.run_id, reason))
                        rank[cfg.run_id] = -1
                        queue.append(cfg)
                continue
            in_group = {c.run_id: c for c in group}
            for outcome in result if isinstance(result, list) else [result]:
                cfg = in_group[outcome["run_id"]]
                kind = outcome["outcome"]
                if kind == "locked":
                    if cfg.run_id not in waiting:
                        holder = read_lock(plan.sweep_dir / cfg.run_id / LOCK_NAME) or {}
                        emit(RunLocked(cfg.run_id, holder.get("pid"), holder.get("host")))
                    waiting[cfg.run_id] = (cfg, time.monotonic() + RETRY_LOCKED_S)
                elif kind == "disk-full":
                    raise DiskFull(outcome["error"])
                elif kind == "skipped":
                    emit(RunSkipped(cfg.run_id, (outcome["result"] or {}).get("status")))
                elif kind == "paused":  # back in line, to be packed again
                    queue.append(cfg)
                elif kind == "pack-failed":  # trained alone, where its own fault shows
                    emit(RunRetried(cfg.run_id, f"its pack failed ({outcome['error']})"))
                    alone.add(cfg.run_id)
                    queue.append(cfg)
                elif cfg.run_id not in trained:
                    trained.append(cfg.run_id)
        if done:
            summary = rebuild_summary(plan.sweep_dir)
            if forest and forest.saves:
                remove_unneeded_forks(plan, finished=set(summary["run_id"]))
    return trained


def remove_unneeded_forks(plan: SweepPlan, finished: set[str]) -> list[str]:
    """Delete the fork checkpoints no unfinished run of the sweep can start from (runs not
    selected by --only count: a later sweep may train them); return what was deleted.
    `finished`: the run ids with a result (summary.parquet's, just rebuilt)."""
    forest = plan.forest
    pending = {c.run_id for c in plan.all_runs} - finished
    needed = forest.needed_forks(pending)
    removed = []
    for trunk, steps in forest.saves.items():
        for step in steps:
            path = fork_dir(plan.sweep_dir, Fork(trunk, step))
            if Fork(trunk, step) not in needed and path.exists():
                remove_fork(path)
                removed.append(str(path))
    return removed


def _record_failure(plan: SweepPlan, cfg: RunConfig, exec_cfg: ExecConfig, error: str) -> None:
    run_dir = plan.sweep_dir / cfg.run_id
    lock = RunLock(run_dir / LOCK_NAME)
    if lock.acquire():  # the dead worker's lock is stale (its pid is gone)
        with lock:
            if read_result(run_dir) is None:
                row = result_row(cfg, status="failed", device=exec_cfg.device, error=str(error))
                write_json_atomic(run_dir / "result.json", row)
