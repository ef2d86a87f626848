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
  checkpoint; a run that kills its worker twice is recorded as failed; a run whose Ray
  node died goes to a live one, up to MAX_NODE_LOSSES times (retry_after);
- fork checkpoints that no unfinished run of the sweep can start from are deleted;
- with packing (--pack), ready runs of one shape go out together as one pack task, which
  hands its unfinished runs back every few seconds to be packed again (docs/packing.md).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.sweep.events import OnEvent, RunEnded, RunLocked, RunRetried, RunSkipped
from cdlaw.sweep.executors import Executor
from cdlaw.sweep.forest import Forest, Fork, fork_dir
from cdlaw.sweep.handoffs import Outcome, PackTask, RunOutcome, RunTask
from cdlaw.sweep.locks import LOCK_NAME, RunLock, read_lock
from cdlaw.sweep.pack.groups import Packing
from cdlaw.sweep.selection import SweepPlan
from cdlaw.sweep.simulate import Simulation
from cdlaw.sweep.summary import rebuild_summary
from cdlaw.system.atomic import write_json_atomic
from cdlaw.system.disk_full import DiskFull
from cdlaw.train.forks import fork_exists, remove_fork
from cdlaw.train.packable import pack_key
from cdlaw.train.result import read_result, result_row

POLL_S = 0.2  # how often the scheduler looks at events and finished futures
MAX_TASK_FAILURES = 2  # a run whose worker died, or whose task raised, this often: failed
# A node lost now and then is the cluster's doing; one lost every time the run is on it,
# the run's (its memory, say): failed after this many.
MAX_NODE_LOSSES = 3
RETRY_LOCKED_S = 2.0  # how often a run held by another process is looked at again
DEAD_LOCK_WAIT_S = 10.0  # how long a dead worker's lock may look held (see record_failure)


class Scheduler:
    """One sweep's runs on one executor: call `run()` once; it returns the run ids trained
    here. Owns the queue of runs waiting for a slot and what is in flight.

    `packing`: ready runs of one pack_key go out together, up to the pack size, as one
    task (cdlaw.sweep.pack.worker) that hands its unfinished runs back every
    `packing.pause_s` seconds to be packed again with whatever became ready."""

    def __init__(
        self,
        plan: SweepPlan,
        todo: list[RunConfig],
        retry: set[str],
        ex: Executor,
        exec_cfg: ExecConfig,
        emit: OnEvent,
        simulation: Simulation | None = None,
        packing: Packing | None = None,
    ):
        self.plan = plan
        self.retry = retry  # runs that failed before this sweep (their result is replaced)
        self.ex = ex
        self.exec_cfg = exec_cfg
        self.emit = emit
        self.simulation = simulation
        self.packing = packing
        # who forks from whom; None for a simulated sweep, whose runs train nothing
        self.forest: Forest | None = plan.forest if simulation is None else None
        # the runs ready to go out once a slot is free, kept in `rank` order
        self.queue: list[RunConfig] = list(todo)
        # each run's place in the queue's order (todo's); a retried run gets -1: first
        self.rank: dict[str, int] = {c.run_id: i for i, c in enumerate(todo)}
        self.by_id: dict[str, RunConfig] = {c.run_id: c for c in todo}
        # every shape's step measured (--pack auto): work is weighed in seconds, not FLOPs
        self.timed = packing is not None and all(pack_key(c) in packing.step_seconds for c in todo)
        # runs another live process holds: run_id -> (run, when to look again)
        self.waiting: dict[str, tuple[RunConfig, float]] = {}
        # how each run's tasks failed outside training here (retry_after)
        self.tries: dict[str, Tries] = {}
        # runs whose pack failed under them: trained alone from now on
        self.alone: set[str] = set()
        # the tasks out on the executor, each with the runs it trains
        self.inflight: dict[cf.Future, list[RunConfig]] = {}
        # the run ids trained here (finished or not), in the order they came back
        self.trained: list[str] = []

    def run(self) -> list[str]:
        """Keep the executor's slots full until every run is done, failed or given up."""
        while self.queue or self.inflight or self.waiting:
            self._requeue_waiting()
            self._fill_slots()
            if not self.inflight:
                self.ex.drain()
                time.sleep(POLL_S)
                continue
            done, _ = cf.wait(list(self.inflight), timeout=POLL_S, return_when=cf.FIRST_COMPLETED)
            self.ex.drain()
            for future in done:
                self._collect(future)
            if done:
                summary = rebuild_summary(self.plan.sweep_dir)
                if self.forest and self.forest.saves:
                    remove_unneeded_forks(self.plan, finished=set(summary["run_id"]))
        return self.trained

    # --- sending runs out -----------------------------------------------------------------

    def _requeue_waiting(self) -> None:
        """Locked runs whose wait is over go back in the queue; the queue is put in order."""
        now = time.monotonic()
        for rid, (cfg, when) in list(self.waiting.items()):
            if when <= now:
                self.queue.append(cfg)
                del self.waiting[rid]
        self.queue.sort(key=lambda c: self.rank[c.run_id])

    def _fill_slots(self) -> None:
        """Submit the next ready group while the executor has a free slot."""
        while len(self.inflight) < self.ex.capacity:
            coming = {c.run_id for c in self.queue} | set(self.waiting)
            coming |= {c.run_id for group in self.inflight.values() for c in group}
            group = self._next_group(coming)
            if not group:
                break
            self._submit(group)

    def _ready(self, cfg: RunConfig, coming: set[str]) -> bool:
        """A branch is ready once its fork exists, or once its trunk is not `coming` (to be
        trained here, or held by another process) and so will not write it."""
        fork = self.forest.forks.get(cfg.run_id) if self.forest else None
        if fork is None or fork_exists(fork_dir(self.plan.sweep_dir, fork)):
            return True
        return fork.parent not in coming

    def _next_group(self, coming: set[str]) -> list[RunConfig]:
        """The first ready run, with (packing) the next ready runs of its pack_key."""
        packing = self.packing
        candidates = [c for c in self.queue if self._ready(c, coming)]
        if not candidates or packing is None or candidates[0].run_id in self.alone:
            return candidates[:1]
        packable = [c for c in candidates if c.run_id not in self.alone]
        key = pack_key(candidates[0])
        same = [c for c in packable if pack_key(c) == key]
        # Free slots are shared out: one pack per other key that waits, the rest split
        # this key's runs (two half packs on two workers beat one full pack and an idle one).
        others = len({pack_key(c) for c in packable}) - 1
        slots = max(1, self.ex.capacity - len(self.inflight) - others)
        size = min(packing.size(candidates[0]), math.ceil(len(same) / slots))
        return same[: min(size, self._chain_cap(candidates[0], coming))]

    def _chain_cap(self, head: RunConfig, unfinished: set[str]) -> int:
        """The most runs a pack headed by `head` (the ready run with the most work ahead of
        it) may hold without the sweep waiting on head at its end. A pack of K slows each
        of its runs K/gain(K) times; with every pack full, the sweep ends when the packed
        work left is done: Σ work/gain over the slots. Head's own work w keeps up while
        w·K/gain(K) stays within that. Without measured gains (--pack K): work in FLOPs,
        gain taken equal across shapes, K ≤ W/(slots·w)."""
        packing, capacity = self.packing, self.ex.capacity
        if self.forest is None or packing is None:
            return packing.size(head) if packing else 1
        own = self._work(head.run_id)
        rids = [rid for rid in unfinished if rid in self.by_id]
        if own <= 0:
            return packing.size(head)
        if not self.timed:
            return max(1, int(sum(self._work(rid) for rid in rids) / (capacity * own)))
        by_id = self.by_id
        end = sum(self._work(r) / packing.gain(by_id[r], packing.size(by_id[r])) for r in rids)
        end /= capacity
        k = 1
        while k < packing.size(head) and own * (k + 1) / packing.gain(head, k + 1) <= end:
            k += 1
        return k

    def _work(self, rid: str) -> float:
        """A run's own work: alone-seconds where every shape's step was measured, else FLOPs
        (only where runs fork: a simulated sweep has no forest)."""
        cfg, forest, packing = self.by_id[rid], self.forest, self.packing
        assert forest is not None  # packs are sized only where runs fork
        if not self.timed:
            return forest.own_flops.get(rid, 0.0)
        assert packing is not None  # timed: every shape's step was measured
        steps = forest.own_tokens.get(rid, 0) / (cfg.train.batch_size * cfg.model.seq_len)
        return steps * packing.step_seconds[pack_key(cfg)]

    def _task(self, cfg: RunConfig) -> RunTask:
        """What a worker needs to train cfg: its folders, settings and forks."""
        rid, sweep_dir, forest = cfg.run_id, self.plan.sweep_dir.resolve(), self.forest
        saves = forest.saves.get(rid, ()) if forest else ()
        starts = forest.fallbacks.get(rid, ()) if forest else ()
        return RunTask(
            cfg,
            sweep_dir,
            self.plan.cache_dir.resolve(),
            self.exec_cfg,
            rid in self.retry,
            self.simulation,
            fork_steps=saves,
            fork_from=tuple(fork_dir(sweep_dir, f) for f in starts),
        )

    def _submit(self, group: list[RunConfig]) -> None:
        """Send `group` out: one run alone, or (packing) one pack task of all of them."""
        for c in group:
            self.queue.remove(c)
        job: RunTask | PackTask = self._task(group[0])
        if self.packing is not None and group[0].run_id not in self.alone:
            job = PackTask(tuple(self._task(c) for c in group), self.packing.pause_s)
        self.inflight[self.ex.submit(job)] = group

    # --- what comes back ------------------------------------------------------------------

    def _collect(self, future: cf.Future) -> None:
        """A finished task: its runs' outcomes, or the failure of its worker."""
        group = self.inflight.pop(future)
        try:
            result = future.result()
        except Exception as e:  # the worker died under the run, or it raised outside training
            self._task_failed(group, e, self.ex.lost(future, e))
            return
        in_group = {c.run_id: c for c in group}
        for outcome in result if isinstance(result, list) else [result]:
            self._outcome(in_group[outcome.run_id], outcome)

    def _task_failed(self, group: list[RunConfig], e: Exception, lost: str | None) -> None:
        """Each run of a task that raised goes back in line first, until retry_after says
        it has failed. `lost`: what the executor said of a node that died under the task
        (Executor.lost), None when the failure is the run's."""
        died = isinstance(e, BrokenProcessPool)
        if died:
            self.ex.broken()
        reason = f"{type(e).__name__}: {e}"
        for cfg in group:
            if len(group) > 1 and lost is None:
                self.alone.add(cfg.run_id)  # which run of the pack it was, alone will show
            tries, again = retry_after(self.tries.get(cfg.run_id, Tries()), lost is not None)
            self.tries[cfg.run_id] = tries
            if not again:
                if lost is not None:
                    what = f"its Ray node died {tries.nodes_lost} times under it"
                else:
                    what = "the worker died twice" if died else "it failed twice outside training"
                error = f"{what}: {reason}"
                if record_failure(self.plan.sweep_dir / cfg.run_id, cfg, self.exec_cfg, error):
                    self.emit(RunEnded(cfg.run_id, "failed"))
                else:  # another process holds it now: its outcome is that process's
                    holder = read_lock(self.plan.sweep_dir / cfg.run_id / LOCK_NAME) or {}
                    pid, host = holder.get("pid"), holder.get("host")
                    self.emit(RunLocked(cfg.run_id, pid, host, waits=False))
            else:
                self.emit(RunRetried(cfg.run_id, lost or reason))
                self.rank[cfg.run_id] = -1
                self.queue.append(cfg)

    def _outcome(self, cfg: RunConfig, outcome: RunOutcome) -> None:
        """One run's outcome from its task (cdlaw.sweep.worker, cdlaw.sweep.pack.worker)."""
        kind = outcome.kind
        if kind is Outcome.LOCKED:
            if cfg.run_id not in self.waiting:
                holder = read_lock(self.plan.sweep_dir / cfg.run_id / LOCK_NAME) or {}
                self.emit(RunLocked(cfg.run_id, holder.get("pid"), holder.get("host")))
            self.waiting[cfg.run_id] = (cfg, time.monotonic() + RETRY_LOCKED_S)
        elif kind is Outcome.DISK_FULL:
            raise DiskFull(outcome.error)
        elif kind is Outcome.SKIPPED:
            self.emit(RunSkipped(cfg.run_id, (outcome.result or {}).get("status")))
        elif kind is Outcome.PAUSED:  # back in line, to be packed again
            self.queue.append(cfg)
        elif kind is Outcome.PACK_FAILED:  # trained alone, where its own fault shows
            self.emit(RunRetried(cfg.run_id, f"its pack failed ({outcome.error})"))
            self.alone.add(cfg.run_id)
            self.queue.append(cfg)
        elif cfg.run_id not in self.trained:  # done, diverged or failed: trained here
            self.trained.append(cfg.run_id)


@dataclass(frozen=True)
class Tries:
    """How a run's tasks failed outside training in this sweep: its worker died or its
    task raised (`failed`), or the Ray node under it died (`nodes_lost`)."""

    failed: int = 0
    nodes_lost: int = 0


def retry_after(tries: Tries, node_lost: bool) -> tuple[Tries, bool]:
    """A run's tries after one more failure of its task, and whether it goes out again: a
    worker that died or a task that raised, once more (MAX_TASK_FAILURES); a node that
    died under it, which is no fault of the run and counts apart, up to MAX_NODE_LOSSES."""
    if node_lost:
        tries = Tries(tries.failed, tries.nodes_lost + 1)
        return tries, tries.nodes_lost < MAX_NODE_LOSSES
    tries = Tries(tries.failed + 1, tries.nodes_lost)
    return tries, tries.failed < MAX_TASK_FAILURES


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


def record_failure(run_dir: Path, cfg: RunConfig, exec_cfg: ExecConfig, error: str) -> bool:
    """Write the run's failed result.json under its lock, unless a result is there already;
    False when another process holds the lock.

    The pool reports a worker dead once its pipe closes, which the kernel does before the
    process becomes a zombie: for a moment its lock still names a live pid, so the lock is
    tried again for up to `DEAD_LOCK_WAIT_S`. A lock held longer is another process's
    (a second sweep took the run), and its outcome is that process's to write.
    """
    lock = RunLock(run_dir / LOCK_NAME)
    deadline = time.monotonic() + DEAD_LOCK_WAIT_S
    while not lock.acquire():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    with lock:
        if read_result(run_dir) is None:
            row = result_row(cfg, status="failed", device=exec_cfg.device, error=str(error))
            write_json_atomic(run_dir / "result.json", row)
    return True
