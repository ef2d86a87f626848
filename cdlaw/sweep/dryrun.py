"""`--dry-run`: the table of runs and a time estimate from a short measured calibration.

Nothing is written into the runs folder. A few steps of the smallest and the largest model
still to train are timed on this device; each run's time is interpolated from them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.strategies import NONE
from cdlaw.sweep.executors import choose_jobs
from cdlaw.sweep.grid import SweepConfig
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.pack.size import by_size, check_fits, choose_packing, measure_gains
from cdlaw.sweep.selection import SweepPlan, plan_sweep
from cdlaw.sweep.spec import load_sweep
from cdlaw.sweep.stale import refuse_changed_runs
from cdlaw.sweep.summary import run_state
from cdlaw.sweep.sweep_file import check_sweep_file, restart_text, run_folders, sweep_growth
from cdlaw.system.errors import BadInput
from cdlaw.train.packable import pack_key
from cdlaw.train.result import run_facts

if TYPE_CHECKING:  # the trainer (torch) is imported where the dry run measures
    from cdlaw.train.run_state import StepProgress


@dataclass
class DryRun:
    plan: SweepPlan
    rows: list[dict]  # run_facts + state + est_seconds, per selected run
    serial_seconds: float  # the runs still to do, one after another
    wall_seconds: float  # … spread over `jobs` workers
    jobs: int
    threads: int
    device: str
    calibration: list[dict]  # per measured shape: n_params, tokens_per_second, setup_s
    notes: list[str] = field(default_factory=list)
    # share = true: the same, had every run trained alone from step 0 (else equal to the above)
    flops: float = 0.0  # FLOPs of the steps still to train (attention included)
    flops_alone: float = 0.0
    serial_seconds_alone: float = 0.0
    wall_seconds_alone: float = 0.0
    # --pack: the most runs per pack per model size, what auto measured, and the estimate
    # without packing (wall_seconds then assumes every pack full: a lower bound)
    packs: dict[str, int] = field(default_factory=dict)
    pack_probes: list[dict] = field(default_factory=list)
    pack_gains: dict[str, float] = field(default_factory=dict)
    wall_seconds_unpacked: float = 0.0


class _CalibrationDone(Exception):
    pass


def measure_throughput(cfg: RunConfig, exec_cfg: ExecConfig, budget_s: float = 2.0) -> dict:
    """Train a few steps of cfg's model on random tokens: steady tokens/s and setup time.

    The first step (allocation, kernel selection, a compile) is excluded from the rate and
    counted as setup, and so is any later step over 5× the median (a recompile); with
    exec_cfg.compile, `compile_s` is what the first run of the shape paid beyond a second
    one's setup. Stops after `budget_s` seconds of steps (at least 3 steps) or 30 steps,
    whichever comes first.
    """
    import tempfile

    import numpy as np

    from cdlaw.data.tokens.streams import array_stream
    from cdlaw.train.loop import train_run

    batch_tokens = cfg.train.batch_size * cfg.model.seq_len
    steps = 30
    train = dataclasses.replace(
        cfg.train, log_every=1, eval_every=10**9, checkpoint_every=10**9, lr=1e-4
    )
    probe = dataclasses.replace(
        cfg,
        sweep="calibration",
        strategy=NONE,
        fresh_tokens=steps * batch_tokens,
        derived_tokens=0,
        derived_files="",
        train=train,
    )
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.model.vocab_size, probe.fresh_tokens, dtype=np.int64)
    setups = []
    # With --compile the first run of a shape in a process compiles and later ones reuse the
    # graph (measured: 5.6 s, then 0.02 s): a second probe run tells the two apart.
    for seed in range(2 if exec_cfg.compile else 1):
        marks: list[tuple[float, int]] = []

        def on_progress(p: StepProgress, marks=marks) -> None:
            marks.append((time.perf_counter(), p.tokens_seen))
            if len(marks) >= 4 and marks[-1][0] - marks[0][0] > budget_s:
                raise _CalibrationDone

        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="cdlaw-calibration-") as tmp:
            with contextlib.suppress(_CalibrationDone):
                train_run(
                    dataclasses.replace(probe, seed=seed),
                    Path(tmp),
                    array_stream(tokens),
                    tokens[: cfg.model.seq_len + 1],
                    exec_cfg,
                    on_progress,
                )
        (t1, n1) = marks[0]
        # Tokens over time of the steps after the first, less any step over 5× the median:
        # with --compile a step may recompile (the final evaluation under no_grad does), and
        # one such step would otherwise set the whole rate.
        intervals = [(tb - ta, nb - na) for (ta, na), (tb, nb) in itertools.pairwise(marks)]
        usual = 5 * float(np.median([dt for dt, _ in intervals]))
        kept = [(dt, n) for dt, n in intervals if dt <= usual]
        tps = sum(n for _, n in kept) / max(sum(dt for dt, _ in kept), 1e-9)
        setups.append(max(0.0, t1 - start - n1 / tps))
    return {
        "n_params": run_facts(cfg)["n_params"],
        "flops_per_token": run_facts(cfg)["flops_per_token"],
        "tokens_per_second": tps,
        "setup_s": setups[-1],
        "compile_s": max(0.0, setups[0] - setups[-1]),  # once a shape and process
        "steps_timed": len(marks) - 1,
    }


def estimate_seconds(facts: dict, calibration: list[dict], val_tokens: int, eval_every: int):
    """A run's time: setup + tokens / rate + evaluations (a forward pass, ~1/3 of a step).

    Seconds per token are interpolated linearly in FLOPs per token between the measured
    shapes (extrapolated beyond them), which holds once the matmuls dominate.
    """
    pts = sorted(calibration, key=lambda c: c["flops_per_token"])
    lo, hi = pts[0], pts[-1]
    spt_lo, spt_hi = 1 / lo["tokens_per_second"], 1 / hi["tokens_per_second"]
    x = facts["flops_per_token"]
    if hi["flops_per_token"] > lo["flops_per_token"]:
        w = (x - lo["flops_per_token"]) / (hi["flops_per_token"] - lo["flops_per_token"])
        spt = max(min(spt_lo, spt_hi), spt_lo + w * (spt_hi - spt_lo))
    else:
        spt = spt_lo * x / lo["flops_per_token"]
    setup = min(c["setup_s"] for c in pts)  # the first probe also paid the imports, once
    evals = facts["steps"] // eval_every + 1
    return setup + facts["tokens_trained"] * spt + evals * val_tokens * spt / 3


def makespan(durations: list[float], jobs: int) -> float:
    """Wall time of running these durations, in this order, on `jobs` workers (greedy)."""
    import heapq

    free = [0.0] * max(1, jobs)
    for d in durations:
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def forest_makespan(rows: list[dict], forks: dict, jobs: int) -> float:
    """Wall time of these runs on `jobs` workers when a branch may start only once its
    trunk has reached the fork step (greedy list scheduling, rows in priority order).

    rows: run_id, est_seconds, steps, fork_step; forks: branch -> Fork (parent, step)."""
    by_id = {r["run_id"]: r for r in rows}
    start: dict[str, float] = {}
    free = [0.0] * max(1, jobs)
    left = list(rows)

    def ready_at(row: dict) -> float:
        fork = forks.get(row["run_id"])
        if fork is None or fork.parent not in by_id:
            return 0.0  # a root, or its trunk is done already (its fork is on disk)
        if fork.parent not in start:
            return math.inf
        parent = by_id[fork.parent]
        done_share = (fork.step - parent["fork_step"]) / max(
            1, parent["steps"] - parent["fork_step"]
        )
        return start[fork.parent] + parent["est_seconds"] * min(1.0, max(0.0, done_share))

    while left:
        free.sort()
        now = free[0]
        times = [ready_at(r) for r in left]
        pick = next((i for i, t in enumerate(times) if t <= now), None)
        if pick is None:
            now = min(times)  # the worker idles until the next fork exists
            pick = times.index(now)
        row = left.pop(pick)
        start[row["run_id"]] = now
        free[0] = now + row["est_seconds"]
    return max(free)


def dry_run_sweep(
    path: str | Path,
    out: str | Path = "runs",
    options: SweepOptions = SweepOptions(),
    calibrate: bool = True,
) -> DryRun:
    """Validate a sweep and estimate its time; writes nothing into the runs folder.

    Of `options` it reads only restart, simulation, executor, jobs, exec_cfg and pack. It
    refuses what the sweep refuses (a changed sweep file, runs on other inputs) unless
    restart, whose deleted runs it counts as to do. The corpus is prepared in the runs
    folder's cache when that exists, else in a temporary folder removed afterwards.
    """
    out = Path(out)
    sweep = load_sweep(path)
    check_sweep_file(sweep, out, options.restart)  # as the sweep itself refuses it
    notes: list[str] = []
    exec_cfg = options.exec_cfg
    device = _calibration_device(exec_cfg, options.executor, notes)
    check = None
    if not options.restart:  # runs trained on other inputs: refused, as the sweep refuses them
        check = partial(refuse_changed_runs, out / sweep.name, simulation=options.simulation)
    plan = _plan_here(sweep, out, options.only, check)
    notes += plan.notes
    toml = plan.sweep_dir / "sweep.toml"
    if toml.is_file() and toml.read_text() != plan.sweep.text:
        notes.append(_sweep_file_note(toml, plan.sweep))
    rows = _run_rows(plan, options.restart, notes)
    todo = [row for row in rows if row["state"] not in ("done", "diverged")]
    n_jobs, threads, _ = choose_jobs(device, len(todo), options.jobs, exec_cfg.threads)
    if options.executor == "ray":
        notes.append("the estimate is for this machine; a Ray cluster spreads runs wider")
    pending = {row["run_id"] for row in todo}
    pending_cfgs = [r for r in plan.runs if r.run_id in pending]
    calibration: list[dict] = []
    packed = _Packed()
    calibrate = _fits_here(pending_cfgs, device, options.executor, notes) and calibrate
    if calibrate and todo:  # the smallest and the largest model still to train
        probe_exec = dataclasses.replace(exec_cfg, device=device, threads=threads)
        by_cost = sorted(pending_cfgs, key=lambda r: run_facts(r)["flops_per_token"])
        shapes = {by_cost[0].model: by_cost[0], by_cost[-1].model: by_cost[-1]}
        calibration = [measure_throughput(cfg, probe_exec) for cfg in shapes.values()]
        if options.pack != 1:
            packed = _measure_packs(pending_cfgs, options.pack, probe_exec, n_jobs)
    _estimate_rows(rows, plan, calibration)
    startup = _startup_seconds(calibration, exec_cfg.compile, pending_cfgs)
    forest = plan.forest
    order = sorted(todo, key=lambda r: -forest.critical[r["run_id"]]) if n_jobs > 1 else todo
    alone = sorted(todo, key=lambda r: -r["est_seconds_alone"]) if n_jobs > 1 else todo
    pending_forks = {b: f for b, f in forest.forks.items() if b in pending}
    wall = forest_makespan(order, pending_forks, n_jobs) + startup if todo else 0.0
    wall_unpacked = wall
    if packed.gains:  # every run sped up by its full pack's measured gain
        for row in rows:
            if row["run_id"] in packed.gains:
                row["est_seconds"] /= packed.gains[row["run_id"]]
        wall = forest_makespan(order, pending_forks, n_jobs) + startup
    wall_alone = (
        makespan([r["est_seconds_alone"] for r in alone], n_jobs) + startup if todo else 0.0
    )
    return DryRun(
        plan=plan,
        rows=rows,
        serial_seconds=float(sum(r["est_seconds"] for r in todo)),
        wall_seconds=wall,
        jobs=n_jobs,
        threads=threads,
        device=device,
        calibration=calibration,
        notes=notes,
        flops=float(sum(r["own_flops"] for r in todo)),
        flops_alone=float(sum(forest.alone_flops[r["run_id"]] for r in todo)),
        serial_seconds_alone=float(sum(r["est_seconds_alone"] for r in todo)),
        wall_seconds_alone=wall_alone,
        packs=packed.packs,
        pack_probes=packed.probes,
        pack_gains=packed.pack_gains,
        wall_seconds_unpacked=wall_unpacked,
    )


def _calibration_device(exec_cfg: ExecConfig, executor: str, notes: list[str]) -> str:
    """The device the calibration measures: this machine's (its CPU for a Ray sweep from a
    machine without the GPU the sweep asks for, with a note saying so)."""
    try:
        from cdlaw.train.steps import resolve_device

        return resolve_device(exec_cfg.device)
    except BadInput:
        if executor != "ray":
            raise
        notes.append("no GPU here: calibrated on this CPU; the cluster's GPUs will be faster")
        return "cpu"  # the cluster has the GPUs; the estimate can only measure this machine


def _fits_here(runs: list[RunConfig], device: str, executor: str, notes: list[str]) -> bool:
    """Whether the runs' largest model fits this device to be timed: a local sweep's
    refusal (check_fits) is the dry run's too; a cluster's model that does not fit here is
    not timed, with a note."""
    try:
        check_fits(runs, device)
    except BadInput as e:
        if executor == "local":
            raise
        notes.append(f"not timed here: {e}")
        return False
    return True


def _run_rows(plan: SweepPlan, restart: bool, notes: list[str]) -> list[dict]:
    """One row per selected run: its facts and state, "pending" for a folder `restart`
    deletes (and a note saying how many it deletes)."""
    doomed: set[str] = set()
    if restart:
        ids = {r.run_id for r in plan.all_runs}
        selected = {r.run_id for r in plan.runs}
        folders = run_folders(plan.sweep, plan.out, ids, selected, restart=True)
        doomed = {p.name for p in folders.doomed}
        if doomed:
            notes.append(f"--restart deletes {restart_text(folders, plan.sweep_dir)} first")
    return [
        {
            **run_facts(r),
            "state": "pending"
            if r.run_id in doomed
            else run_state(plan.sweep_dir / r.run_id)["state"],
        }
        for r in plan.runs
    ]


def _sweep_file_note(toml: Path, sweep: SweepConfig) -> str:
    """What running this sweep does to the other sweep file of its name in the runs folder."""
    growth = sweep_growth(toml.read_text(), sweep)
    if growth is None:  # only with --restart (check_sweep_file refuses it otherwise)
        return f"{toml} holds a different sweep, whose runs --restart deletes"
    if not growth.added:
        return f"{toml} defines the same runs: running this one replaces it and keeps them"
    return (
        f"this sweep adds {growth.added} run(s) to the {growth.kept} of {toml}: running it "
        "keeps them and replaces that file"
    )


def _plan_here(sweep: SweepConfig, out: Path, only: str | None, check_runs=None) -> SweepPlan:
    """plan_sweep (check_runs: refuse_changed_runs, as the sweep's own) with the corpus in
    out/.cache where that exists, else in a temporary folder removed afterwards."""
    import tempfile

    with contextlib.ExitStack() as stack:
        cache = out / ".cache"
        if not cache.is_dir():
            cache = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdlaw-cache-")))
        return plan_sweep(sweep, out, only, cache_dir=cache, preview=True, check_runs=check_runs)


@dataclass
class _Packed:
    """What --pack measured for a dry run (all empty without packing)."""

    packs: dict[str, int] = field(default_factory=dict)  # model size -> most runs per pack
    probes: list[dict] = field(default_factory=list)  # PackProbe as dicts
    pack_gains: dict[str, float] = field(default_factory=dict)  # model size -> full pack's gain
    gains: dict[str, float] = field(default_factory=dict)  # run_id -> its full pack's gain


def _measure_packs(
    runs: list[RunConfig], pack: str | int, probe_exec: ExecConfig, n_jobs: int
) -> _Packed:
    """The packing of the runs still to train, and each full pack's measured gain."""
    packing, probes = choose_packing(runs, pack, probe_exec, n_jobs)
    if packing is None:
        return _Packed()
    by_key = measure_gains(runs, packing, probe_exec, probes)
    packs, pack_gains = by_size(runs, packing, by_key)
    gains = {cfg.run_id: by_key[pack_key(cfg)] for cfg in runs}
    return _Packed(packs, [dataclasses.asdict(p) for p in probes], pack_gains, gains)


def _estimate_rows(rows: list[dict], plan: SweepPlan, calibration: list[dict]) -> None:
    """Add to each row its fork, its own tokens and FLOPs, and its estimated seconds
    (est_seconds from its fork on, est_seconds_alone from step 0; NaN uncalibrated)."""
    val_tokens = len(getattr(plan.prepared, "val_tokens", ())) or plan.sweep.data.val_tokens
    forest = plan.forest
    every = plan.sweep.train.eval_every
    for row in rows:
        rid, done = row["run_id"], row["state"] in ("done", "diverged")
        fork = forest.forks.get(rid)
        row["fork_parent"], row["fork_step"] = (fork.parent, fork.step) if fork else ("", 0)
        row["own_tokens"], row["own_flops"] = forest.own_tokens[rid], forest.own_flops[rid]
        if done or not calibration:
            row["est_seconds"] = row["est_seconds_alone"] = 0.0 if done else math.nan
            continue
        row["est_seconds_alone"] = estimate_seconds(row, calibration, val_tokens, every)
        own = {**row, "tokens_trained": row["own_tokens"], "steps": row["steps"] - row["fork_step"]}
        row["est_seconds"] = estimate_seconds(own, calibration, val_tokens, every)


def _startup_seconds(calibration: list[dict], compile: bool, runs: list[RunConfig]) -> float:
    """What each process pays before its first step: the imports (torch, transformers)
    once, and with --compile a compile of each model shape it trains (the jobs compile
    side by side)."""
    if not calibration:
        return 0.0
    startup = max(c["setup_s"] for c in calibration) - min(c["setup_s"] for c in calibration)
    if compile:
        n_shapes = len({cfg.model for cfg in runs})
        startup += n_shapes * max(c.get("compile_s", 0.0) for c in calibration)
    return startup
