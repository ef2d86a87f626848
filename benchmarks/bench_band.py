"""Does the plan's 95% band cover the true loss? The plain percentile band against the band
widened by the plan's optimism (docs/plan.md, "Optimism"), on simulated whole grids.

Every run of sweeps/qin2026-grid.toml (385 runs) gets a loss from a known law with 2%
multiplicative noise; the grid is fitted with bootstrap refits and planned for each budget;
each plan is judged against the true law at the plan: the prediction's error, the
bootstrap's optimism, and whether each band covers the truth.

    .venv/bin/python benchmarks/bench_band.py [--seeds 20] [--jobs 2] [--bootstrap 50]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
from bench_next import BUDGETS, GRID, NOISE, STARTS, VOCAB, truths

from cdlaw.fit.procedure import fit_law
from cdlaw.plan.planner import plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.sweep.simulate import Simulation, simulated_result
from cdlaw.sweep.spec import load_sweep


def one(task) -> list[dict]:
    truth_name, seed, bootstrap = task
    truth = truths()[truth_name]
    sim = Simulation(truth, truth_name, noise=NOISE, noise_seed=seed)
    grid = pd.DataFrame([simulated_result(sim, r) for r in load_sweep(GRID).runs(VOCAB)])
    fit = fit_law(grid, truth.form, n_starts=STARTS, bootstrap=bootstrap, seed=seed)
    draws, _ = fit.bootstrap_laws()
    rows = []
    for C, U in BUDGETS:
        p = plan(PlanningLaw("grid", fit.law, fit.data_range, tuple(draws)), C, U)
        s = p.strategy if p.strategy != "none" else "repetition"
        true = float(truth.loss(p.n_params, p.fresh_tokens, p.derived_tokens, s))
        at_plan = [float(d.loss(p.n_params, p.fresh_tokens, p.derived_tokens, s)) for d in draws]
        lo, hi = np.percentile(at_plan, [2.5, 97.5])
        wlo, whi = p.predicted_loss_ci95
        rows.append({
            "truth": truth_name, "seed": seed, "budget": C,
            "error_pct": 100 * (p.predicted_loss - true) / true,
            "optimism_pct": 100 * p.optimism / true,
            "plain_covers": bool(lo <= true <= hi),
            "widened_covers": bool(wlo <= true <= whi),
            "widening": float(np.log(whi / wlo) / np.log(hi / lo)),
        })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--bootstrap", type=int, default=50)
    a = ap.parse_args()
    tasks = [(t, s, a.bootstrap) for s in range(a.seeds) for t in truths()]
    with ProcessPoolExecutor(a.jobs) as ex:
        df = pd.DataFrame([row for rows in ex.map(one, tasks) for row in rows])
    table = df.groupby(["truth", "budget"]).agg(
        seeds=("seed", "count"),
        mean_error_pct=("error_pct", "mean"),
        mean_optimism_pct=("optimism_pct", "mean"),
        plain_covers=("plain_covers", "sum"),
        widened_covers=("widened_covers", "sum"),
        median_widening=("widening", "median"),
    )
    print(table.reset_index().to_string(index=False, float_format=lambda x: f"{x:.3g}"))


if __name__ == "__main__":
    main()
