"""Executors: where runs train, and how many at once (docs/cli.md).

In-process (`jobs=1`), K spawned worker processes (`jobs=K`, torch threads split between
them), or Ray (one task per run or pack with its CPU / GPU request, the runs folder on
shared storage). Each submits the per-run worker (`execute_run`, a RunTask) or the pack
worker (`execute_pack`, a PackTask: several runs in one process) and hands back a
concurrent.futures.Future of their RunOutcomes (cdlaw.sweep.handoffs); events from workers
come back through a queue. `choose_jobs` picks jobs × threads for the local executors.

A Ray node can die under a task (its raylet, the machine): `node_lost` tells that from the
run's own failure by Ray's exception classes, and RayExecutor.lost makes sure the next try
goes to a live node, starting the local Ray anew when its own node died.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import math
import os
import time
import weakref
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.sweep.events import Event, OnEvent, RunProgress
from cdlaw.sweep.handoffs import PackTask, RunOutcome, RunTask
from cdlaw.sweep.worker import execute_run
from cdlaw.system.errors import BadInput
from cdlaw.system.lifetime import die_with_parent, init_ray

# What a task's future holds: a run's outcome, or a pack's, one per run in order.
Outcomes = RunOutcome | list[RunOutcome]


def _task_run(task: RunTask | PackTask, on_event: OnEvent | None) -> Outcomes:
    """A run's outcome, or for a pack one per run (cdlaw.sweep.worker, cdlaw.sweep.pack.worker)."""
    if isinstance(task, PackTask):
        from cdlaw.sweep.pack.worker import execute_pack

        return execute_pack(task, on_event)
    return execute_run(task, on_event)


class _Throttle:
    """Forward every event, but progress events of a run at most every `every` seconds."""

    def __init__(self, send: Callable[[Event], None], every: float = 0.5):
        self.send, self.every = send, every
        self.last: dict[str, float] = {}  # run id -> when its last progress event went

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunProgress):
            now = time.monotonic()
            final = event.step == event.steps_total
            if not final and now - self.last.get(event.run_id, -math.inf) < self.every:
                return
            self.last[event.run_id] = now
        with contextlib.suppress(Exception):  # a lost progress line must not fail a run
            self.send(event)


class InProcessExecutor:
    """Runs each task right here, when submitted (the `local` executor with one job)."""

    capacity = 1

    def __init__(self, on_event: OnEvent | None, threads: int = 0):
        self.on_event = on_event
        self.threads = threads

    def submit(self, task: RunTask | PackTask) -> cf.Future:
        future: cf.Future = cf.Future()
        try:
            future.set_result(_task_run(task, self.on_event))
        except Exception as e:
            future.set_exception(e)
        return future

    def drain(self) -> None:
        pass

    def broken(self) -> None:
        pass  # no worker process to lose: a run that raises here fails as itself

    def lost(self, future: cf.Future, error: BaseException) -> str | None:
        return None  # no node to lose

    def close(self) -> None:
        pass


class Executor(Protocol):
    """What the scheduler asks of an executor: InProcessExecutor, PoolExecutor or
    RayExecutor. `capacity` tasks at once; `drain` passes workers' events on; `broken`
    after a worker process died under a task; `lost` after a task's future raised: None,
    or (the machine under it died, not the run) what to say, once a live machine can take
    the next try; `close` once, at the end."""

    capacity: int

    def submit(self, task: RunTask | PackTask) -> cf.Future: ...

    def drain(self) -> None: ...

    def broken(self) -> None: ...

    def lost(self, future: cf.Future, error: BaseException) -> str | None: ...

    def close(self) -> None: ...


# Worker-process globals, set by _pool_init in each spawned worker.
_WORKER: dict = {}


def _pool_init(queue, slot_counter, threads: int, gpus: int, parent: int) -> None:
    """In each worker: die with the parent, pin torch threads and (with GPUs) one device."""
    die_with_parent(parent)
    with slot_counter.get_lock():
        slot = slot_counter.value
        slot_counter.value += 1
    _WORKER.update(queue=queue, threads=threads, device=f"cuda:{slot % gpus}" if gpus else None)
    import torch

    torch.set_num_threads(max(1, threads))


def _pool_task(task: RunTask | PackTask) -> Outcomes:
    if _WORKER.get("device"):
        task = _with_exec(task, device=_WORKER["device"])
    return _task_run(task, _Throttle(_WORKER["queue"].put))


def _with_exec(task: RunTask | PackTask, **changes) -> RunTask | PackTask:
    """The task with these ExecConfig fields changed (for each run of a pack)."""
    if isinstance(task, PackTask):
        return dataclasses.replace(
            task, tasks=tuple(_run_with_exec(t, **changes) for t in task.tasks)
        )
    return _run_with_exec(task, **changes)


def _run_with_exec(task: RunTask, **changes) -> RunTask:
    return dataclasses.replace(task, exec_cfg=dataclasses.replace(task.exec_cfg, **changes))


class PoolExecutor:
    """K spawned worker processes (spawn, not fork: torch and fork do not mix)."""

    def __init__(self, jobs: int, threads: int, gpus: int, on_event: OnEvent | None):
        import multiprocessing as mp

        self.capacity = jobs
        self.on_event = on_event
        self._ctx = mp.get_context("spawn")
        self._queue = self._ctx.Queue()
        self._args = (jobs, threads, gpus)
        self._pool = None

    def _ensure_pool(self):
        if self._pool is None:
            jobs, threads, gpus = self._args
            counter = self._ctx.Value("i", 0)
            self._pool = cf.ProcessPoolExecutor(
                jobs,
                mp_context=self._ctx,
                initializer=_pool_init,
                initargs=(self._queue, counter, threads, gpus, os.getpid()),
            )
        return self._pool

    def submit(self, task: RunTask | PackTask) -> cf.Future:
        try:
            return self._ensure_pool().submit(_pool_task, task)
        except BrokenProcessPool:  # a worker died: start a fresh pool
            self._pool = None
            return self._ensure_pool().submit(_pool_task, task)

    def lost(self, future: cf.Future, error: BaseException) -> str | None:
        return None  # a dead worker process is the run's (broken): this machine lives

    def broken(self) -> None:
        """A worker died: the pool is unusable; the next submit starts a new one."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def terminate_workers(self, timeout: float = 120.0) -> None:
        """SIGTERM each worker (it checkpoints and exits) and wait for them."""
        import signal

        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.join(timeout)

    def drain(self) -> None:
        import queue as queue_mod

        while True:
            try:
                event = self._queue.get_nowait()
            except queue_mod.Empty:
                return
            if self.on_event:
                self.on_event(event)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.drain()


def _ray_task(task: RunTask | PackTask, queue) -> Outcomes:
    send = _Throttle(queue.put_nowait) if queue is not None else None
    return _task_run(task, send)


def _ray_choose_packing(runs: list[RunConfig], pack: str | int, exec_cfg: ExecConfig):
    """(error sentence or None, choose_packing's result), on a Ray worker. The packs that
    share this node's memory at once: one per GPU, or as many tasks as its cores hold."""
    from cdlaw.sweep.pack.size import choose_packing

    on_gpu = exec_cfg.device.startswith("cuda")
    sharing = 1 if on_gpu else max(1, cpu_count() // max(1, exec_cfg.threads))
    try:
        return None, choose_packing(runs, pack, exec_cfg, sharing)
    except BadInput as e:  # a sentence back to the driver, not a remote traceback
        return str(e), None


def node_lost(error: BaseException) -> bool:
    """Whether a Ray task failed because a Ray node died, not the run: the node it ran on
    (ray.exceptions.NodeDiedError), or this process's own, through which every task goes
    out (LocalRayletDiedError). A worker process that died (WorkerCrashedError) is the
    run's, as a local worker's death is. False without Ray."""
    try:
        from ray.exceptions import LocalRayletDiedError, NodeDiedError
    except ImportError:
        return False
    return isinstance(error, (NodeDiedError, LocalRayletDiedError))


# How long a run whose node died waits for a live node that can take it (a cluster's
# autoscaler may be starting one) before the sweep stops.
NODE_WAIT_S = float(os.environ.get("CDLAW_RAY_NODE_WAIT_S", 300))
NODE_POLL_S = 2.0


class RayNodeLost(RuntimeError):
    """A Ray node died under the sweep and no live one can take its runs: a failure while
    running (exit 1), said in one sentence with the way on."""


class RayExecutor:
    """One Ray task per run, with its CPU / GPU request; the runs folder on shared storage.

    Each task goes out with max_retries=0: a task that fails comes back to the scheduler,
    which sends it out again (Ray's own retry would hide a run that kills its worker every
    time). When a node died under a task (node_lost), `lost` makes sure the next try can go
    to a live node: Ray never places a task on a node it has marked dead, so it waits for a
    live node with room for a task; when the node that died is this process's own (its
    raylet: nothing goes out any more), it starts its local Ray anew, or joins the cluster
    at `address` again."""

    def __init__(self, address: str | None, threads: int, gpus_per_run: float, on_event):
        try:
            import ray
        except ImportError:
            from cdlaw.system.extras import ray_missing

            raise ray_missing() from None
        self.ray = ray
        self.address = address
        self._started = init_ray(ray, address)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus_per_run < 0:  # auto: a GPU per run when the cluster has GPUs
            gpus_per_run = 1 if gpus else 0
        self.threads = max(1, threads)
        self.gpus_per_run = gpus_per_run
        self.capacity = max(1, gpus // gpus_per_run if gpus_per_run else cpus // self.threads)
        self.on_event = on_event
        self._session = 0  # how often Ray was started or joined anew after its node died
        self._sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # future → it
        self._connect()

    def _connect(self) -> None:
        """The progress queue and the task function on the Ray this process is joined to."""
        from ray.util.queue import Queue

        self._queue = Queue(actor_options={"num_cpus": 0})  # progress events from the tasks
        self._remote = self.ray.remote(_ray_task).options(
            num_cpus=self.threads, num_gpus=self.gpus_per_run, max_retries=0
        )

    def submit(self, task: RunTask | PackTask) -> cf.Future:
        first = task.tasks[0] if isinstance(task, PackTask) else task
        task = _with_exec(task, threads=self.threads, device=self._device(first.exec_cfg.device))
        future = self._remote.remote(task, self._queue).future()
        self._sessions[future] = self._session
        return future

    def lost(self, future: cf.Future, error: BaseException) -> str | None:
        """None unless `error` is a Ray node's death (node_lost). Then, once per death (the
        futures that went out before it all raise it), make sure a live node can take the
        next try: Ray started anew here when this process's node died, else a wait for a
        live node with room for a task (RayNodeLost after NODE_WAIT_S). Returns what to say
        of the run."""
        from ray.exceptions import LocalRayletDiedError

        if not node_lost(error):
            return None
        what = type(error).__name__
        if self._sessions.pop(future, self._session) != self._session:
            return f"its Ray node died ({what}); Ray was started anew since"
        if isinstance(error, LocalRayletDiedError) or (self._started and not self._live_nodes()):
            self._start_again(what)
            return f"its Ray node died ({what}); Ray was started anew here"
        self._wait_for_a_live_node(what)
        return f"its Ray node died ({what}); it goes to a live node"

    def _live_nodes(self) -> list[str]:
        """The ids of the live nodes with room for one task (its CPUs and GPUs)."""
        with contextlib.suppress(Exception):  # Ray's state cannot be read: none known
            return [
                n["NodeID"]
                for n in self.ray.nodes()
                if n.get("Alive")
                and n.get("Resources", {}).get("CPU", 0) >= self.threads
                and n.get("Resources", {}).get("GPU", 0) >= self.gpus_per_run
            ]
        return []

    def _wait_for_a_live_node(self, what: str) -> None:
        deadline = time.monotonic() + NODE_WAIT_S
        while not self._live_nodes():
            if time.monotonic() > deadline:
                raise RayNodeLost(
                    f"a Ray node died under the sweep ({what}) and no live node with "
                    f"{self.threads} CPU(s){f' and {self.gpus_per_run:g} GPU(s)' if self.gpus_per_run else ''} "
                    f"joined in {NODE_WAIT_S:g} s: add one to the cluster and run the same "
                    "command again (finished runs are kept, the others resume)"
                )
            time.sleep(NODE_POLL_S)

    def _start_again(self, what: str) -> None:
        """This process's Ray node died: leave that Ray, and start a local one anew (or
        join the cluster at `address` again); RayNodeLost when that cannot be done."""
        with contextlib.suppress(Exception):  # what is left of the dead node's Ray
            self.ray.shutdown()
        try:
            self._started = init_ray(self.ray, self.address)
            self._connect()
        except Exception as e:
            raise RayNodeLost(
                f"the Ray node this sweep runs on died ({what}) and Ray cannot be "
                f"{'started' if self.address is None else f'joined at {self.address}'} again "
                f"here ({type(e).__name__}: {' '.join(str(e).split())[:120]}): start Ray on "
                "this machine again and run the same command (finished runs are kept, the "
                "others resume)"
            ) from None
        self._session += 1
        self._wait_for_a_live_node(what)

    def choose_packing(self, runs: list[RunConfig], pack: str | int, exec_cfg: ExecConfig):
        """pack.size.choose_packing in one task with a run's resources, so `--pack auto`
        times packs and reads memory where the packs will train: on a worker's GPU or
        CPUs, not on this driver (which may have no GPU at all). Bad input is raised here."""
        remote = self.ray.remote(_ray_choose_packing).options(
            num_cpus=self.threads, num_gpus=self.gpus_per_run, max_retries=0
        )
        exec_cfg = dataclasses.replace(
            exec_cfg, threads=self.threads, device=self._device(exec_cfg.device)
        )
        error, chosen = self.ray.get(remote.remote(runs, pack, exec_cfg))
        if error:
            raise BadInput(error)
        return chosen

    def _device(self, device: str) -> str:
        """A task's device: its GPU (Ray sets CUDA_VISIBLE_DEVICES for the task), else
        the CPU where the sweep asked for auto."""
        if self.gpus_per_run:
            return "cuda"
        return "cpu" if device == "auto" else device

    def broken(self) -> None:
        pass

    def drain(self) -> None:
        with contextlib.suppress(Exception):
            for event in self._queue.get_nowait_batch(self._queue.qsize()):
                if self.on_event:
                    self.on_event(event)

    def close(self) -> None:
        self.drain()
        with contextlib.suppress(Exception):
            actor: Any = self._queue.actor  # Ray types it as a union kill() does not take
            self.ray.kill(actor)
        if self._started:
            self.ray.shutdown()


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def packs_per_device(jobs: int, gpus: int) -> int:
    """How many of `jobs` local jobs train at once on one device, sharing its memory: jobs
    go round-robin over `gpus` GPUs (choose_jobs), or all onto one device (CPU, cuda:N)."""
    return -(-jobs // gpus) if gpus else jobs


def choose_jobs(device: str, n_runs: int, jobs: int = 0, threads: int = 0) -> tuple[int, int, int]:
    """(jobs, torch threads per job, GPUs to spread jobs over) for the local executors.

    CPU: one job per core, one thread each, by default. Measured on a 2-core machine: two
    1-thread processes train as many tokens per second as one 2-thread process, and a
    2-thread run slows 3–17× as soon as anything else runs beside it, so independent
    1-thread runs are both as fast and far steadier. GPU: one job per visible GPU.
    """
    n_runs = max(1, n_runs)
    if device.startswith("cuda"):
        import torch

        gpus = 1 if ":" in device else max(1, torch.cuda.device_count())
        jobs = jobs or min(gpus, n_runs)
        return jobs, threads or max(1, cpu_count() // jobs), 0 if ":" in device else gpus
    cores = cpu_count()
    jobs = jobs or min(cores, n_runs, 8)
    return jobs, threads or max(1, cores // jobs), 0
