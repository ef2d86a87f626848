"""How well could *any* runs costing 3% of the grid's FLOPs know the plan's loss?

For each truth and budget of benchmarks/bench_next.py this prints, linearised at the
true law (cdlaw.design.bound), the sd of the plan's predicted log loss

    grid      from every run of sweeps/qin2026-grid.toml (385 runs, 2.25e22 FLOPs)
    best 3%   the certified lower bound over every design of the candidates below that
              costs at most 3% of the grid's FLOPs, chosen by someone who knew the truth

with the same 2% noise per cell. The candidates are generous: the grid's cells, and
abstract cells at 14M·2^k parameters up to past the plan's N, 0.1–80 tokens per
parameter, D′/D from 0.25 to 64 for each strategy, and none — far more than `cdlaw next`
offers, so the bound is lower than any loop could reach. Where "best 3%" is above "grid",
no way of choosing runs at 3% of the FLOPs knows the plan's loss as well as the whole grid
does, in expectation (a median over 20 noise seeds can still come out either way).

    .venv/bin/python benchmarks/bound_next.py [--share 0.03] [--iterations 3000]
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_next import BUDGETS, GRID, NOISE, SHARE, VOCAB, truths

from cdlaw.design.bound import c_optimal_bound, design_variance, log_loss_jacobian
from cdlaw.plan.planner import plan
from cdlaw.shapes import count_params
from cdlaw.sweep.spec import load_sweep

TOKENS_PER_PARAM = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80)
RATIOS = (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)


def grid_cells() -> list[tuple[float, float, float, str]]:
    runs = load_sweep(GRID).runs(VOCAB)
    return [(float(count_params(r.model, VOCAB).n_params), float(r.fresh_tokens),
             float(r.derived_tokens), r.strategy) for r in runs]  # fmt: skip


def broad_cells(strategies, top_n: float) -> list[tuple[float, float, float, str]]:
    out = []
    n = 14e6
    while n <= 2 * top_n:
        for k in TOKENS_PER_PARAM:
            d = n * k
            out.append((n, d, 0.0, "none"))
            out += [(n, d, d * r, s) for s in strategies for r in RATIOS]
        n *= 2
    return out


def flops(cells) -> np.ndarray:
    return np.array([6.0 * n * (d + dp) for n, d, dp, _ in cells])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--share", type=float, default=SHARE)
    ap.add_argument("--iterations", type=int, default=3000)
    a = ap.parse_args()
    grid = grid_cells()
    budget = a.share * flops(grid).sum()
    print(f"noise {NOISE:.0%} per cell; budget {a.share:.0%} of the grid = {budget:.3g} FLOPs")
    print(f"{'truth':16} {'C':>6} {'plan':>22} {'grid sd':>8} {'best sd':>8} {'ratio':>6}")
    for name, truth in truths().items():
        for c, u in BUDGETS:
            p = plan(truth, c, u)
            b = p.best
            g = log_loss_jacobian(truth, [(b.n_params, b.fresh_tokens, b.derived_tokens,
                                           b.strategy)])[0]  # fmt: skip
            grid_sd = NOISE * design_variance(log_loss_jacobian(truth, grid), g) ** 0.5
            cands = grid + broad_cells(list(truth.strategies), b.n_params)
            bound = c_optimal_bound(log_loss_jacobian(truth, cands), g, flops(cands), budget,
                                    iterations=a.iterations)  # fmt: skip
            best = NOISE * bound.lower_sd
            where = f"{b.strategy} {b.n_params:.3g}"
            print(f"{name:16} {c:6.0e} {where:>22} {grid_sd:8.3%} {best:8.3%} "
                  f"{best / grid_sd:6.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
