"""How fast is `cdlaw fit`? The CD paper's fit size against a plain scipy loop, in one run.

The table: 370 runs made from the qin2026 constants with 0.5% multiplicative noise on a
CD-paper-like grid (7 sizes 14M–600M, D from 0.05× to 16× of 20 tokens per parameter,
r up to 60, both strategies). cdlaw fits the joint cd law from the paper's 6,144-start
grid and then refits 200 bootstrap resamples.

The reference is the loop a researcher would write: scipy.optimize.minimize(L-BFGS-B)
once per start, with the same objective and analytic gradient, the same coordinates,
bounds and stopping tolerances. It is timed on a random sample of the starts (and of the
bootstrap refits) and scaled per start to the full count; the table says so.

    .venv/bin/python benchmarks/bench_fit.py [--starts 6144] [--bootstrap 200] [--sample 48]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from cdlaw.fit import SEARCH_FTOL, SEARCH_GTOL, fit_law
from cdlaw.fit_optim import _threads, build_problem, start_grid
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


def reference_loop(fun, starts, lower, upper, maxcor):
    """scipy.optimize.minimize once per start; returns (seconds per start, best f)."""
    bounds = list(zip(lower, upper, strict=True))
    t = time.perf_counter()
    best = np.inf
    for z0 in starts:
        r = minimize(
            fun,
            z0,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"ftol": SEARCH_FTOL, "gtol": SEARCH_GTOL, "maxiter": 2000, "maxcor": maxcor},
        )
        best = min(best, r.fun)
    return (time.perf_counter() - t) / len(starts), best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=6144)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--rows", type=int, default=370)
    ap.add_argument("--sample", type=int, default=48, help="reference starts actually timed")
    args = ap.parse_args()

    df = paper_like_table(args.rows)
    # --- cdlaw: the whole fit, with the moment the bootstrap starts noted ------------
    marks = {}

    def progress(stage, done, total):
        marks.setdefault(stage, time.perf_counter())

    t0 = time.perf_counter()
    result = fit_law(
        df, law="cd", n_starts=args.starts, bootstrap=args.bootstrap, progress=progress
    )
    total = time.perf_counter() - t0
    search = marks.get("bootstrap", t0 + total) - t0
    boot = total - search

    # --- the reference: the same problem, one scipy call per start --------------------
    p = build_problem(
        "cd",
        ("repetition", "paraphrase"),
        df["n_params"],
        df["fresh_tokens"],
        df["derived_tokens"],
        df["strategy"],
        df["loss"],
        np.arange(len(df)),
    )
    starts, _ = start_grid(p, args.starts, np.random.default_rng(0))
    sample = starts[np.random.default_rng(1).choice(len(starts), args.sample, replace=False)]
    f_all = p.objective(result.huber_delta)

    def fun1(z):
        f, g = f_all(z[None, :], np.zeros(1, dtype=int))
        return float(f[0]), g[0]

    per_start, ref_best = reference_loop(fun1, sample, p.lower, p.upper, maxcor=10)
    per_start20, _ = reference_loop(fun1, sample[: args.sample // 2], p.lower, p.upper, maxcor=20)
    # Bootstrap reference: warm-started scipy refits on resampled rows.
    z_best = p.z(
        np.array(
            [
                np.log(result.law.E),
                np.log(result.law.A),
                np.log(result.law.B),
                result.law.alpha,
                result.law.beta,
            ]
            + [
                v
                for s in ("repetition", "paraphrase")
                for v in (
                    np.log(result.law.strategies[s]["K"]),
                    result.law.strategies[s]["rho"],
                    result.law.strategies[s]["sigma"],
                )
            ]
        )
    )
    rng = np.random.default_rng(2)
    n_boot_ref = max(1, min(args.bootstrap, args.sample // 2))
    t = time.perf_counter()
    for _ in range(n_boot_ref):
        w = np.bincount(rng.integers(0, len(df), len(df)), minlength=len(df)).astype(float)
        fw = p.objective(result.huber_delta, w)

        def fun_w(z, fw=fw):
            f, g = fw(z[None, :], np.zeros(1, dtype=int))
            return float(f[0]), g[0]

        minimize(
            fun_w,
            z_best,
            jac=True,
            method="L-BFGS-B",
            bounds=list(zip(p.lower, p.upper, strict=True)),
            options={"ftol": SEARCH_FTOL, "gtol": SEARCH_GTOL, "maxiter": 2000},
        )
    per_boot = (time.perf_counter() - t) / n_boot_ref

    ref_search = per_start * args.starts
    ref_search20 = per_start20 * args.starts
    ref_boot = per_boot * args.bootstrap
    print(
        f"\ncdlaw fit benchmark: joint cd law, {len(df)} rows, {args.starts} starts, "
        f"{args.bootstrap} bootstrap refits"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"objective threads {_threads()}\n"
    )
    w = 58
    print(f"{'what':<{w}} {'seconds':>9} {'ratio':>7}")
    print("-" * (w + 18))
    rows = [
        ("cdlaw: multistart search + polish", search, None),
        ("cdlaw: bootstrap refits (warm, batched)", boot, None),
        ("cdlaw: whole fit", total, None),
        (
            f"reference: scipy loop, maxcor 10 (timed {args.sample} starts, scaled)",
            ref_search,
            ref_search / search,
        ),
        (
            f"reference: scipy loop, maxcor 20 (timed {args.sample // 2} starts, scaled)",
            ref_search20,
            ref_search20 / search,
        ),
        (
            f"reference: scipy bootstrap refits (timed {n_boot_ref}, scaled)",
            ref_boot,
            ref_boot / max(boot, 1e-9),
        ),
        (
            "reference: whole fit (maxcor 10 search + bootstrap)",
            ref_search + ref_boot,
            (ref_search + ref_boot) / total,
        ),
    ]
    for name, sec, ratio in rows:
        print(f"{name:<{w}} {sec:>9.2f} {'' if ratio is None else f'{ratio:>6.1f}x':>7}")
    print(
        f"\nbest objective: cdlaw {result.objective:.10g}; reference sample best {ref_best:.10g}; "
        f"optimizer {result.optimizer['message']!r}, "
        f"{result.optimizer['n_converged']}/{result.optimizer['n_starts']} starts converged"
    )
    print(
        f"goal: whole fit < 60 s -> {'met' if total < 60 else 'MISSED'}; "
        f"≥ 10x the reference -> {'met' if (ref_search + ref_boot) / total >= 10 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
