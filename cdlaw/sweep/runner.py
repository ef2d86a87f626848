"""Run a sweep: validate it, claim its folder, and keep the executors busy (docs/files.md, docs/cli.md, docs/sweep.md).

    runs/<sweep>/sweep.toml           the sweep file, copied verbatim
    runs/<sweep>/summary.parquet      rebuilt from every <run_id>/result.json (atomic)
    runs/<sweep>/<run_id>/            one run: written by train_run, the worker and its lock
    runs/.cache/                      tokenised corpora, shared by every sweep in runs/

Resumes by default: finished runs are skipped, interrupted ones continue from their
checkpoint. The parts, each in its own module:

    cdlaw.sweep.options     SweepOptions: what to train, where, how many at once, packed
    cdlaw.sweep.selection   validation against the corpus, --only, the facts of each run
    cdlaw.sweep.locks        the per-run lock file (two processes never train one run)
    cdlaw.sweep.handoffs     RunTask / PackTask out to a worker, RunOutcome back
    cdlaw.sweep.worker       execute_run: one run, trained under its lock, failures recorded
    cdlaw.sweep.pack         --pack: which runs train together, how many, the pack worker
    cdlaw.sweep.executors    in-process, K worker processes, or Ray; devices, jobs × threads
    cdlaw.sweep.scheduler    keeps the executor busy: priorities, forks, retries, locks
    cdlaw.sweep.forest       share = true: which run forks from which, at which step
    cdlaw.sweep.summary      summary.parquet and the state of each run (`cdlaw status`)
    cdlaw.sweep.dryrun       --dry-run: the table of runs and a measured time estimate

All three executors go through one scheduling loop (cdlaw.sweep.scheduler).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.data.files.block_tokens import Workers
from cdlaw.sweep.events import (
    OnEvent,
    PacksChosen,
    RunSkipped,
    SweepPlanned,
)
from cdlaw.sweep.executors import (
    InProcessExecutor,
    PoolExecutor,
    RayExecutor,
    choose_jobs,
    packs_per_device,
)
from cdlaw.sweep.grid import SweepConfig
from cdlaw.sweep.locks import (
    LOCK_NAME,
    read_lock,
)
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.pack.groups import Packing
from cdlaw.sweep.pack.size import PackProbe, by_size, chain_seconds, check_fits, choose_packing
from cdlaw.sweep.scheduler import Scheduler
from cdlaw.sweep.selection import SweepPlan, check_writable, plan_sweep
from cdlaw.sweep.simulate import check_strategies
from cdlaw.sweep.spec import load_sweep
from cdlaw.sweep.stale import refuse_changed_runs
from cdlaw.sweep.summary import rebuild_summary
from cdlaw.sweep.sweep_file import check_sweep_file, restart_text, run_folders
from cdlaw.sweep.worker import score_finished_runs
from cdlaw.system.atomic import write_text_atomic
from cdlaw.system.disk_full import DiskFull, stop_when_full, sweep_stopped
from cdlaw.system.errors import BadInput
from cdlaw.train.damage import name_finished_run_damage
from cdlaw.train.result import read_result, run_facts

log = logging.getLogger("cdlaw.sweep")


@dataclass
class SweepOutcome:
    """What a sweep did: per selected run its status, and the rebuilt summary."""

    plan: SweepPlan
    statuses: dict[str, str | None]  # run_id -> done | diverged | failed; None: unfinished
    trained: list[str]  # run ids this process trained (finished or not)
    summary: object  # pandas DataFrame (summary.parquet)
    wall_seconds: float
    executor: str = "local"
    jobs: int = 1
    threads: int = 0
    failures: list[dict] = field(default_factory=list)  # {run_id, error} of failed runs
    packs: dict[str, int] = field(default_factory=dict)  # model size -> most runs per pack

    @property
    def exit_code(self) -> int:
        """1 when any selected run failed (diverged runs are results, not failures)."""
        return 1 if self.failures else 0


@stop_when_full(lambda e: DiskFull(sweep_stopped(e)))  # one sentence; finished runs kept
def run_sweep(
    path: str | Path,
    out: str | Path = "runs",
    options: SweepOptions = SweepOptions(),
    on_event: OnEvent | None = None,
) -> SweepOutcome:
    """Validate, then train every selected run not yet done; rebuild the summary.

    Resumes by default: finished runs are skipped, interrupted ones continue from their
    checkpoint, runs that failed before this sweep started are tried again.
    `options.restart` deletes the selected runs' folders first (all of the sweep's run
    folders when the sweep file changed). Runs held by another live process are waited
    for, not trained. With executor "simulate" each run's loss is drawn from
    `options.simulation` (a law and its noise) instead of trained: same folders and rows,
    no corpus, no torch. `options.pack` trains runs of one shape together in one process
    (cdlaw.sweep.pack.size, docs/packing.md): same numbers, less time.
    """
    started = time.time()
    out = Path(out)
    sweep = load_sweep(path)  # parsed once, here
    check_sweep_file(sweep, out, options.restart)  # before any work
    check_writable(out, sweep.name)
    device = _device(options)
    # Ray starts first: packs are sized on a worker, before anything is written
    ray_ex = _start_ray(options, device, on_event)
    emit = on_event or (lambda e: None)
    try:
        work = _plan_work(sweep, out, options, device, ray_ex)
        _claim_sweep_dir(work.plan, options.restart)
        todo = _start_work(work, emit)
        ex = _executor(work, ray_ex, on_event)
    except BaseException:
        if ray_ex is not None:
            ray_ex.close()
        raise
    packing = work.packing
    if packing is not None:
        sizes, gains = by_size(todo, packing)
        emit(PacksChosen(sizes, gains, [dataclasses.asdict(p) for p in work.probes]))
    # In parallel, the costliest chain of work first (a trunk before its branches; it
    # shortens the makespan); alone, in grid order (a branch still waits for its fork).
    # With measured step times (--pack auto) chains are weighed in seconds, not FLOPs.
    plan = work.plan
    if work.jobs > 1:
        critical = chain_seconds(plan.forest, todo, packing) if packing else plan.forest.critical
        todo.sort(key=lambda r: -critical[r.run_id])
    trained: list[str] = []
    try:
        with _forward_sigterm(ex):
            scheduler = Scheduler(
                plan, todo, work.retry, ex, work.exec_cfg, emit, options.simulation, packing
            )
            trained = scheduler.run()
    finally:
        ex.close()
    scored, unscored = score_finished_runs(work.plan, work.exec_cfg)
    if scored:
        log.info(
            f"scored {len(scored)} finished run(s) on the [eval] tasks they lacked or whose "
            "files changed, from their model/ folders (the end of each run only)"
        )
    return _outcome(work, todo, trained, started, options.executor, unscored)


@dataclass
class _Work:
    """What a sweep will do, decided before its folder is claimed (so that bad input,
    a pack too big for memory included, writes nothing there)."""

    plan: SweepPlan
    results: dict[str, dict]  # run_id -> its result.json once the folder is claimed ({}: none)
    todo: list[RunConfig]  # the runs to train, in grid order
    retry: set[str]  # runs that failed before this sweep: tried again
    jobs: int  # runs at once
    threads: int  # torch threads per run
    gpus: int  # GPUs the local jobs spread over (0: all on one device)
    exec_cfg: ExecConfig  # every run's, with the device and threads chosen here
    packing: Packing | None  # None: each run alone
    probes: list[PackProbe]  # what --pack auto measured


def _device(options: SweepOptions) -> str:
    """The device runs train on: resolved here for local runs, a worker's for Ray."""
    if options.simulation is not None:
        return "cpu"
    if options.executor == "local":
        from cdlaw.train.steps import resolve_device

        return resolve_device(options.exec_cfg.device)
    return options.exec_cfg.device


def _start_ray(options: SweepOptions, device: str, on_event: OnEvent | None):
    """The Ray executor for --executor ray (None otherwise): a GPU per run on cuda."""
    if options.executor != "ray":
        return None
    gpus_per_run = 1 if device.startswith("cuda") else (0 if device == "cpu" else -1)
    return RayExecutor(options.ray_address, options.exec_cfg.threads or 1, gpus_per_run, on_event)


def _plan_work(sweep: SweepConfig, out: Path, options: SweepOptions, device: str, ray_ex) -> _Work:
    """Plan the sweep, read what its runs did so far, and choose jobs, threads and the
    packing of the runs to train; on bad input remove the folders this created."""
    simulation = options.simulation
    with _clean_up_on_bad_input(out):
        # on Ray, the corpus's blocks are tokenised as tasks too (the cache is on storage
        # every node sees, as the runs need it)
        ray = ray_ex is not None
        workers = Workers(executor="ray", ray_address=options.ray_address) if ray else None
        # runs trained on other inputs are refused before anything is prepared
        sweep_dir = out / sweep.name
        check = (
            None
            if options.restart
            else partial(refuse_changed_runs, sweep_dir, simulation=simulation)
        )
        plan = plan_sweep(
            sweep,
            out,
            options.only,
            read_corpus=simulation is None,
            workers=workers,
            check_runs=check,
        )
        if simulation is not None:
            check_strategies(simulation, plan.runs)  # before any run folder is written
        results = _results(plan, options.restart)
        before = {rid: result.get("status") for rid, result in results.items()}
        todo = [r for r in plan.runs if before[r.run_id] in (None, "failed")]
        exec_cfg = options.exec_cfg
        n_jobs, threads, gpus = choose_jobs(device, len(todo), options.jobs, exec_cfg.threads)
        if simulation is not None:  # microseconds a run: one process is plenty
            n_jobs, threads = 1, 0
        elif ray_ex is not None:
            n_jobs, threads = ray_ex.capacity, ray_ex.threads
        if options.executor == "local":
            check_fits(todo, device)  # before a run is killed for memory
            exec_cfg = dataclasses.replace(exec_cfg, device=device, threads=threads)
        packing, probes = _choose_packing(
            todo, options.pack, exec_cfg, device, options.jobs, ray_ex
        )
    retry = {rid for rid, s in before.items() if s == "failed"}
    return _Work(plan, results, todo, retry, n_jobs, threads, gpus, exec_cfg, packing, probes)


def _results(plan: SweepPlan, restart: bool) -> dict[str, dict]:
    """Each selected run's result.json as _claim_sweep_dir leaves it: none after restart
    (it deletes every selected run's folder), else as it is ({} where unreadable)."""
    if restart:
        return {r.run_id: {} for r in plan.runs}
    return {r.run_id: read_result(plan.sweep_dir / r.run_id) or {} for r in plan.runs}


def _start_work(work: _Work, emit: OnEvent) -> list[RunConfig]:
    """Say the plan, name finished runs' damage, skip finished ones; return the runs to
    train."""
    plan, results = work.plan, work.results
    emit(SweepPlanned(plan.sweep.name, [run_facts(r) for r in plan.runs], str(plan.sweep_dir)))
    for rid, result in results.items():  # unreadable: {}, not done (set aside when trained)
        if result.get("status") in ("done", "diverged"):
            name_finished_run_damage(plan.sweep_dir / rid, result)
    todo = {r.run_id for r in work.todo}
    for r in plan.runs:
        if r.run_id not in todo:
            emit(RunSkipped(r.run_id, results[r.run_id].get("status")))
    return work.todo


def _executor(work: _Work, ray_ex, on_event: OnEvent | None):
    """Where the runs train: Ray, K worker processes, or this process."""
    if ray_ex is not None:
        return ray_ex
    if work.jobs == 1:
        return InProcessExecutor(on_event)
    return PoolExecutor(work.jobs, work.threads, work.gpus, on_event)


def _outcome(
    work: _Work,
    todo: list[RunConfig],
    trained: list[str],
    started: float,
    executor: str,
    unscored: list[dict],
) -> SweepOutcome:
    """The summary rebuilt, and each selected run's status after the sweep; runs that failed
    or could not be scored (`unscored`: {run_id, error}) are its failures."""
    plan, packing = work.plan, work.packing
    summary = rebuild_summary(plan.sweep_dir)
    finals = {r.run_id: read_result(plan.sweep_dir / r.run_id) or {} for r in plan.runs}
    statuses = {rid: row.get("status") for rid, row in finals.items()}
    failures = [
        {"run_id": rid, "error": row.get("error", "")}
        for rid, row in finals.items()
        if row.get("status") == "failed"
    ] + unscored
    return SweepOutcome(
        plan,
        statuses,
        trained,
        summary,
        time.time() - started,
        executor,
        work.jobs,
        work.threads,
        failures,
        by_size(todo, packing)[0] if packing else {},
    )


def _choose_packing(
    runs: list, pack: str | int, exec_cfg: ExecConfig, device: str, jobs: int, ray_ex
) -> tuple:
    """pack.size.choose_packing where the runs will train: on a Ray worker (ray_ex), or
    here with the local jobs' threads, each job's share of its device's memory."""
    if pack == 1 or not runs:
        return None, []
    if ray_ex is not None:
        return ray_ex.choose_packing(runs, pack, exec_cfg)
    n_jobs, threads, gpus = choose_jobs(device, len(runs), jobs, exec_cfg.threads)
    local = dataclasses.replace(exec_cfg, device=device, threads=threads)
    return choose_packing(runs, pack, local, packs_per_device(n_jobs, gpus))


@contextlib.contextmanager
def _clean_up_on_bad_input(out: Path):
    """On BadInput remove the runs folder and its cache where this created them (bad input
    writes nothing)."""
    created = [p for p in (out, out / ".cache") if not p.exists()]
    try:
        yield
    except BadInput:
        for p in reversed(created):
            shutil.rmtree(p, ignore_errors=True)
        raise


def _claim_sweep_dir(plan: SweepPlan, restart: bool) -> None:
    """Copy the sweep file into runs/<sweep>/ (again when it keeps every run of the copy
    there: cdlaw.sweep.sweep_file); with restart, delete the old runs first."""
    sweep_dir = plan.sweep_dir
    toml = sweep_dir / "sweep.toml"
    ours = {r.run_id for r in plan.all_runs}
    selected = {r.run_id for r in plan.runs}
    folders = run_folders(plan.sweep, plan.out, ours, selected, restart)  # checks the file
    same, orphans = folders.same, folders.orphans
    if same and orphans and not restart:
        # summary.parquet gathers every run folder: runs of no run of this sweep would be
        # fitted with it (e.g. folders an older cdlaw named by another run identity).
        raise BadInput(
            f"{len(orphans)} run folder(s) in {sweep_dir} (e.g. {orphans[0]}) are no run of "
            "this sweep (an older cdlaw named runs differently): pass --restart to retrain "
            "the sweep from scratch, or --out to train elsewhere"
        )
    if restart:
        doomed = folders.doomed
        for p in doomed:
            holder = read_lock(p / LOCK_NAME)
            if holder is not None and not holder["stale"]:
                raise BadInput(
                    f"run {p.name} is being trained by pid {holder.get('pid')} on "
                    f"{holder.get('host')}; stop that sweep before --restart"
                )
        for p in doomed:
            shutil.rmtree(p)
        (sweep_dir / "summary.parquet").unlink(missing_ok=True)
        if doomed:
            log.warning(f"--restart deleted {restart_text(folders, sweep_dir)}")
    if not (toml.is_file() and toml.read_text() == plan.sweep.text):
        sweep_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(toml, plan.sweep.text)


@contextlib.contextmanager
def _forward_sigterm(ex):
    """On SIGTERM (a scheduler's stop, `kill`), let the workers checkpoint, then exit 143.

    train_run stops at the end of its step and saves a checkpoint on SIGTERM; worker
    processes get the signal passed on, instead of dying with the sweep mid-step.
    """
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough
        if isinstance(ex, PoolExecutor):
            ex.terminate_workers()
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
