"""How fast is `cdlaw fit`? The CD paper's fit size against a plain scipy loop, in one run.

The table: 370 runs made from the qin2026 constants with 0.5% multiplicative noise on a
CD-paper-like grid (7 sizes 14M–600M, D from 0.05× to 16× of 20 tokens per parameter,
r up to 60, both strategies). cdlaw fits the joint cd law as `cdlaw fit` does (its default
starts, E, A, B solved rather than searched: docs/fit.md) and then refits 200 bootstrap
resamples.

The reference is the loop a researcher would write for the CD paper's fit:
scipy.optimize.minimize(L-BFGS-B) once per start of the paper's 6,144-start grid over all
eleven parameters, with the same objective and analytic gradient, the same coordinates,
bounds and stopping tolerances. It is timed on a random sample of the starts (and of the
bootstrap refits) and scaled per start to the full count; the table says so. Both must
reach the same best objective.

    .venv/bin/python benchmarks/bench_fit.py [--starts N] [--bootstrap 200] [--sample 48]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from cdlaw.fit.optim import SEARCH_FTOL, SEARCH_GTOL
from cdlaw.fit.problem import build_problem
from cdlaw.fit.procedure import DEFAULT_STARTS, fit_law
from cdlaw.fit.search import PROJECTED
from cdlaw.fit.starts import start_grid
from cdlaw.fit.threads import objective_threads, single_threaded_blas
from cdlaw.fit.vector import law_to_fit_vector
from cdlaw.law import PRESETS

SIZES = [14e6, 30e6, 60e6, 100e6, 190e6, 370e6, 600e6]
MULTIPLES = [0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16]  # of 20 tokens per parameter
RATIOS = [1, 2, 4, 8, 16, 32, 60]


def paper_like_table(n_rows: int = 370, noise: float = 0.005, seed: int = 0) -> pd.DataFrame:
    """All one-epoch cells plus a random sample of derived-token runs, from qin2026."""
    rng = np.random.default_rng(seed)
    law = PRESETS["qin2026"]
    one_epoch = [(N, 20 * N * m, 0.0, "none") for N in SIZES for m in MULTIPLES]
    derived = [
        (N, 20 * N * m, r * 20 * N * m, s)
        for N in SIZES
        for m in MULTIPLES
        for s in ("repetition", "paraphrase")
        for r in RATIOS
    ]
    pick = rng.choice(len(derived), n_rows - len(one_epoch), replace=False)
    rows = one_epoch + [derived[i] for i in np.sort(pick)]
    df = pd.DataFrame(rows, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy"])
    true = np.array([law.loss(*r) for r in rows])
    df["loss"] = true * np.exp(noise * rng.standard_normal(len(df)))
    return df


def reference_loop(fun, starts, lower, upper, scale, maxcor):
    """scipy.optimize.minimize once per start, in x·scale; returns (s per start, CPU s, best f)."""
    bounds = list(zip(lower * scale, upper * scale, strict=True))

    def scaled(u):
        f, g = fun(u / scale)
        return f, g / scale

    t, c = time.perf_counter(), time.process_time()
    best = np.inf
    for z0 in starts:
        r = minimize(
            scaled,
            z0 * scale,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"ftol": SEARCH_FTOL, "gtol": SEARCH_GTOL, "maxiter": 2000, "maxcor": maxcor},
        )
        best = min(best, r.fun)
    n = len(starts)
    return (time.perf_counter() - t) / n, (time.process_time() - c) / n, best


def one(fun_batch):
    """A batch objective as scipy's fun(x) -> (f, g) for one point."""

    def fun(z):
        f, g = fun_batch(z[None, :], np.zeros(1, dtype=int))
        return float(f[0]), g[0]

    return fun


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=DEFAULT_STARTS, help="cdlaw's starts")
    ap.add_argument("--reference-starts", type=int, default=6144, help="the paper's grid")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--rows", type=int, default=370)
    ap.add_argument("--sample", type=int, default=48, help="reference starts actually timed")
    args = ap.parse_args()
    with single_threaded_blas():  # for the reference too: see its docstring (cdlaw.fit.threads)
        run(args)


def run(args) -> None:
    df = paper_like_table(args.rows)
    load_before = os.getloadavg()[0]
    # --- cdlaw: the whole fit, noting when the bootstrap starts ------------------------
    marks = {}

    def progress(stage, done, total):
        marks.setdefault(stage, (time.perf_counter(), time.process_time()))

    t0, c0 = time.perf_counter(), time.process_time()
    result = fit_law(
        df, law="cd", n_starts=args.starts, bootstrap=args.bootstrap, progress=progress
    )
    total, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    end = (t0 + total, c0 + total_cpu)
    tr, cr = marks.get("refine", end)
    tb, cb = marks.get("bootstrap", end)
    search, search_cpu = tr - t0, cr - c0
    refine, refine_cpu = tb - tr, cb - cr
    boot, boot_cpu = end[0] - tb, end[1] - cb

    # --- the reference: the same problem, one scipy call per start -------------------
    strategies = ("repetition", "paraphrase")
    p = build_problem(
        "cd",
        strategies,
        df["n_params"],
        df["fresh_tokens"],
        df["derived_tokens"],
        df["strategy"],
        df["loss"],
        np.arange(len(df)),
    )
    starts, _ = start_grid(p, args.reference_starts, np.random.default_rng(0))
    scale = p.curvature_scale(starts[:: max(1, len(starts) // 64)])
    sample = starts[np.random.default_rng(1).choice(len(starts), args.sample, replace=False)]
    fun = one(p.objective(result.huber_delta))
    half = sample[: max(1, args.sample // 2)]
    ref10, ref10_cpu, ref_best = reference_loop(fun, sample, p.lower, p.upper, scale, 10)
    ref30, ref30_cpu, _ = reference_loop(fun, half, p.lower, p.upper, scale, 30)
    plain, plain_cpu, _ = reference_loop(fun, half, p.lower, p.upper, np.ones(len(scale)), 10)

    # Bootstrap reference: scipy refits on resampled rows, warm-started from the best fit.
    z_best = p.z(law_to_fit_vector(result.law, strategies))
    boot_scale = p.curvature_scale(z_best)
    rng = np.random.default_rng(2)
    n_boot_ref = max(1, min(args.bootstrap, args.sample // 2))
    per_boot = per_boot_cpu = 0.0
    for _ in range(n_boot_ref):
        w = np.bincount(rng.integers(0, len(df), len(df)), minlength=len(df)).astype(float)
        fw = one(p.objective(result.huber_delta, w))
        a, b, _ = reference_loop(fw, z_best[None], p.lower, p.upper, boot_scale, 10)
        per_boot, per_boot_cpu = per_boot + a / n_boot_ref, per_boot_cpu + b / n_boot_ref

    n, B = args.reference_starts, args.bootstrap
    cd_search = search + refine
    ref_total, ref_total_cpu = ref10 * n + per_boot * B, ref10_cpu * n + per_boot_cpu * B
    print(
        f"\ncdlaw fit benchmark: joint cd law, {len(df)} rows, {B} bootstrap refits; cdlaw "
        f"{result.optimizer.n_starts} starts ({PROJECTED}), the reference {n} (all parameters)"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, objective threads {objective_threads()}; "
        f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other users)"
    )
    print(
        "reference: scipy.optimize.minimize(L-BFGS-B) once per start, same objective, gradient,\n"
        "coordinates, bounds and tolerances; timed on a random sample of starts, scaled per start\n"
    )
    w = 62
    print(f"{'what':<{w}} {'wall s':>8} {'CPU s':>8} {'ratio':>7}")
    print("-" * (w + 26))
    rows = [
        ("cdlaw: search, E, A, B solved (projected)", search, search_cpu, None),
        ("cdlaw: refine and polish (every parameter)", refine, refine_cpu, None),
        ("cdlaw: bootstrap refits (batched, warm-started)", boot, boot_cpu, None),
        ("cdlaw: whole fit", total, total_cpu, None),
        (f"reference search, maxcor 10 ({len(sample)} starts timed)", ref10 * n, ref10_cpu * n, ref10 * n / cd_search),
        (f"reference search, maxcor 30 ({len(half)} starts timed)", ref30 * n, ref30_cpu * n, ref30 * n / cd_search),
        (f"reference search, unpreconditioned ({len(half)} timed)", plain * n, plain_cpu * n, plain * n / cd_search),
        (f"reference bootstrap refits ({n_boot_ref} timed)", per_boot * B, per_boot_cpu * B, per_boot * B / max(boot, 1e-9)),
        ("reference whole fit (maxcor 10 search + bootstrap)", ref_total, ref_total_cpu, ref_total / total),
    ]  # fmt: skip
    for name, sec, cpu, ratio in rows:
        r = "" if ratio is None else f"{ratio:6.1f}x"
        print(f"{name:<{w}} {sec:>8.2f} {cpu:>8.2f} {r:>7}")
    print(
        f"\nbest objective: cdlaw {result.objective:.10g}, reference sample {ref_best:.10g}; "
        f"{result.optimizer.n_converged}/{result.optimizer.n_starts} starts converged, "
        f"{result.optimizer.bootstrap_converged}/{B} bootstrap refits"
    )
    same = abs(result.objective - ref_best) <= 1e-9 * abs(ref_best)
    print(
        f"goals: whole fit ≥ 120x the reference: {'met' if ref_total / total >= 120 else 'MISSED'} "
        f"({ref_total / total:.0f}x wall, {ref_total_cpu / total_cpu:.0f}x CPU); the same best "
        f"objective: {'met' if same else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
