"""Does `cdlaw adapt` know the plan better than a grid of the same cost?

Simulated, so the truth is known: every run's loss is drawn from a known law with 2%
multiplicative noise (cdlaw sweep --executor simulate). For each truth, noise seed and
budget (C, U), four ways to spend FLOPs are fitted and planned:

    grid      every run of sweeps/qin2026-grid.toml (385 runs, 2.25e22 FLOPs)
    adaptive  sweeps/qin2026-seed.toml (18 runs), then fit → next → sweep rounds, at most
              3% of the grid's FLOPs
    cheapest  the grid's cheapest runs, as many as the adaptive loop's FLOPs buy
    random    random grid runs (seeded), as many as the adaptive loop's FLOPs buy

and each is judged where a team bets: its own plan's predicted loss against the true
law's loss at that plan (|error|, %), and whether its 95% interval covers the truth.

    .venv/bin/python benchmarks/bench_next.py [--seeds 20] [--jobs 2] [--budget 1e20:2e9] [--out bench-next]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.design.adaptive import run_adaptive
from cdlaw.design.batch import trained_flops
from cdlaw.fit.procedure import fit_law
from cdlaw.law import PRESETS, Law
from cdlaw.plan.planner import plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.simulate import Simulation, simulated_result
from cdlaw.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "sweeps" / "qin2026-grid.toml"
SEED = ROOT / "sweeps" / "qin2026-seed.toml"
VOCAB = 100278
NOISE = 0.02
SHARE = 0.03  # of the grid's FLOPs
BUDGETS = [(1e21, 5e9), (1e20, 2e9)]
STARTS, BOOTSTRAP, ROUNDS = 256, 50, 4
ROUND_RUNS = 128  # at most per round: enough that FLOPs, not a run count, end a round


def truths() -> dict[str, Law]:
    """The CD paper's law, and the same with an overfitting term (cdlaw's cd-overfit form)."""
    q = PRESETS["qin2026"]
    over = Law(
        "cd-overfit",
        params={**q.params, "mu": 0.5},
        strategies={
            s: {**p, "lam": lam}
            for (s, p), lam in zip(q.strategies.items(), (0.02, 0.01), strict=True)
        },
        source="qin2026 + overfitting (bench_next)",
    )
    return {"qin2026": q, "qin2026-overfit": over}


def judged(method: str, truth: Law, table: pd.DataFrame, form: str, budget, seed: int,
           fit=None) -> dict:  # fmt: skip
    """`method`'s plan for `budget` from its runs, against the truth; `fit` if done already."""
    if fit is None:
        fit = fit_law(table, form, n_starts=STARTS, bootstrap=BOOTSTRAP, seed=seed)
    draws, _ = fit.bootstrap_laws()
    p = plan(PlanningLaw(method, fit.law, fit.data_range, tuple(draws)), *budget)
    s = p.strategy if p.strategy != "none" else "repetition"
    true = float(truth.loss(p.n_params, p.fresh_tokens, p.derived_tokens, s))
    lo, hi = p.predicted_loss_ci95 or (math.nan, math.nan)
    return {
        "method": method,
        "runs": len(table),
        "flops": trained_flops(table),
        "error_pct": 100 * (p.predicted_loss - true) / true,
        "covered": bool(lo <= true <= hi),
        "width_nats": hi - lo,
        "plan_n": p.n_params,
        "strategy": p.strategy,
    }


def within(rows: pd.DataFrame, order, flops: float) -> pd.DataFrame:
    """Runs in `order`, each taken if it still fits in `flops`."""
    take, spent = [], 0.0
    for i in order:
        if spent + rows["flops"].iloc[i] <= flops:
            take.append(i)
            spent += rows["flops"].iloc[i]
    return rows.iloc[take]


def one(task) -> list[dict]:
    truth_name, seed, budgets = task
    truth = truths()[truth_name]
    form = truth.form
    sim = Simulation(truth, truth_name, noise=NOISE, noise_seed=seed)
    grid = pd.DataFrame([simulated_result(sim, r) for r in load_sweep(GRID).runs(VOCAB)])
    out = []
    grid_fit = fit_law(grid, form, n_starts=STARTS, bootstrap=BOOTSTRAP, seed=seed)  # both budgets
    for budget in budgets:
        base = {"truth": truth_name, "seed": seed, "budget": budget[0], "unique": budget[1]}
        out.append({**base, **judged("grid", truth, grid, form, budget, seed, grid_fit)})
        tmp = Path(tempfile.mkdtemp(prefix="bench-next-"))
        try:
            t = time.time()
            res = run_adaptive(SEED, tmp, *budget, until=0.02, max_flops=SHARE * grid["flops"].sum(),
                               round_runs=ROUND_RUNS, max_rounds=ROUNDS, law=form, grid_path=GRID, bootstrap=BOOTSTRAP,
                               n_starts=STARTS, seed=seed,
                               sweep_options=SweepOptions(executor="simulate", simulation=sim))  # fmt: skip
            from cdlaw.fit.table import load_runs

            table = load_runs(res.folder)
            row = judged("adaptive", truth, table, form, budget, seed)
            row["rounds"] = len(res.rounds) - 1
            row["seconds"] = time.time() - t
            out.append({**base, **row})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        spent = row["flops"]
        cheap = within(grid, np.argsort(grid["flops"].to_numpy(), kind="stable"), spent)
        out.append({**base, **judged("cheapest", truth, cheap, form, budget, seed)})
        rng = np.random.default_rng(1000 + seed)
        rand = within(grid, rng.permutation(len(grid)), spent)
        out.append({**base, **judged("random", truth, rand, form, budget, seed)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--truth", action="append", help="qin2026 and/or qin2026-overfit (default both)"
    )
    ap.add_argument(
        "--budget",
        action="append",
        metavar="C:U",
        help="a budget and its unique tokens, e.g. 1e20:2e9 (default 1e21:5e9 and 1e20:2e9)",
    )
    ap.add_argument("--out", default="bench-next")
    a = ap.parse_args()
    budgets = [tuple(float(v) for v in b.split(":")) for b in a.budget] if a.budget else BUDGETS
    tasks = [(t, s, budgets) for s in range(a.seeds) for t in (a.truth or list(truths()))]
    out = Path(a.out)
    out.mkdir(exist_ok=True)
    rows = []
    with ProcessPoolExecutor(a.jobs) as ex:
        for got in ex.map(one, tasks):
            rows += got
            pd.DataFrame(rows).to_csv(out / "rows.csv", index=False)
            print(json.dumps(got[1], default=str), flush=True)
    df = pd.DataFrame(rows)
    df["abs_error_pct"] = df["error_pct"].abs()
    table = (
        df.groupby(["truth", "budget", "method"], sort=False)
        .agg(
            seeds=("seed", "nunique"),
            flops=("flops", "median"),
            runs=("runs", "median"),
            median_abs_error_pct=("abs_error_pct", "median"),
            coverage=("covered", "sum"),
            width_nats=("width_nats", "median"),
            plan_n=("plan_n", "median"),
            strategy=("strategy", lambda s: s.mode().iloc[0]),
        )
        .reset_index()
    )
    table.to_csv(out / "table.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))


if __name__ == "__main__":
    main()
