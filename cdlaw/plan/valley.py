"""The plan's valley: the model sizes whose predicted loss is within the plan's band.

A plan is the minimum over N of the law's loss along its budget, and that minimum is
flat: on Muennighoff et al.'s runs, 6.1B parameters at 2.7 epochs predict a loss 0.034
nats above the plan's 15.4B at 1.08 epochs, inside its 95% band. Every N whose loss along
the budget (same strategy, every FLOP spent as the plan spends them) is no higher than the
band's upper end is an allocation the runs cannot tell from the plan:

    v = plan_valley(law, "repetition", 1e21, 1e10, n_star, ceiling)   # a Valley, or None

cdlaw.plan.planner attaches it to the Plan (`valley`); the frontier figure shades it.
"""

from __future__ import annotations

import math

import numpy as np

from cdlaw.law import Law
from cdlaw.plan.optimum import allocation, budget_loss, search_grid
from cdlaw.plan.result import Valley


def plan_valley(
    law: Law,
    strategy: str,
    budget_flops: float,
    unique_tokens: float,
    n_star: float,
    ceiling: float,
) -> Valley | None:
    """The N around n_star whose loss along the budget stays ≤ ceiling, its ends refined to
    1e-6 in log N; None where the plan's own loss is above the ceiling (no band to hold)."""

    def excess(ln_n):
        with np.errstate(all="ignore"):
            f = budget_loss(law, strategy, budget_flops, np.exp(ln_n), unique_tokens)
        return np.where(np.isfinite(f), f - ceiling, np.inf)

    centre = math.log(n_star)
    if not excess(np.array([centre]))[0] <= 0:
        return None
    grid = search_grid(budget_flops)
    inside = excess(grid) <= 0
    i = int(np.clip(np.searchsorted(grid, centre), 0, len(grid) - 1))
    lo, hi = i, i
    while lo > 0 and inside[lo - 1]:
        lo -= 1
    while hi < len(grid) - 1 and inside[hi + 1]:
        hi += 1
    small = _edge(excess, grid[lo - 1], min(grid[lo], centre)) if lo > 0 else grid[0]
    large = _edge(excess, max(grid[hi], centre), grid[hi + 1]) if hi < len(grid) - 1 else grid[-1]
    on_edge = lo == 0 or hi == len(grid) - 1
    ends = [
        allocation(law, strategy, budget_flops, math.exp(x), unique_tokens, "valley")
        for x in (small, large)
    ]
    return Valley(ends[0], ends[1], float(ceiling), on_edge)


def _edge(excess, a: float, b: float) -> float:
    """Where excess crosses 0 between a and b (one of them inside the valley, one not):
    bisection, keeping the inside end."""
    fa = excess(np.array([a]))[0]
    for _ in range(60):
        mid = 0.5 * (a + b)
        fm = excess(np.array([mid]))[0]
        if (fm <= 0) == (fa <= 0):
            a, fa = mid, fm
        else:
            b = mid
        if b - a < 1e-6:
            break
    return a if fa <= 0 else b
