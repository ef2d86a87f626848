"""The budget of the report's plan when none is given: one the runs can vouch for.

The report leads with a plan, so that plan must be an interpolation, not an
extrapolation. Its unique tokens U are the sweep's largest fresh-token count (the corpus
it could actually use). Its budget C is the largest one, at most the compute of the
sweep's largest run, 6·N·(D + D′), whose plan keeps N, D/N, D and D′/D inside the ranges
the law was fitted on: budgets are tried from the largest run's compute down in steps of
√2, to the smallest run's compute. When none stays inside, C is the largest run's
compute and the plan's range warnings say where it leaves the data.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cdlaw.figures.inputs import PlotInputs
from cdlaw.plan.guard import range_warnings
from cdlaw.plan.planner import plan
from cdlaw.plan.source import PlanningLaw

STEP = np.sqrt(2.0)  # finer costs a plan per step; coarser lands further from the edge
MAX_STEPS = 40  # 2^20: far below any sweep's smallest run
LARGEST_RUN = "the compute of the sweep's largest run, 6·N·(D + D′)"


def run_compute(inputs: PlotInputs) -> tuple[float, float] | None:
    """The smallest and largest run's 6·N·(D + D′), or None without runs."""
    rows = inputs.rows if inputs.rows is not None else inputs.summary
    if rows is None or not len(rows):
        return None
    n = rows["n_params"].to_numpy(float)
    trained = rows["fresh_tokens"].to_numpy(float) + rows["derived_tokens"].to_numpy(float)
    flops = 6 * n * trained
    flops = flops[np.isfinite(flops) & (flops > 0)]
    return (float(flops.min()), float(flops.max())) if flops.size else None


def largest_fresh_tokens(inputs: PlotInputs) -> float | None:
    rows = inputs.rows if inputs.rows is not None else inputs.summary
    if rows is None or not len(rows):
        return None
    fresh = rows["fresh_tokens"].to_numpy(float)
    fresh = fresh[np.isfinite(fresh) & (fresh > 0)]
    return float(fresh.max()) if fresh.size else None


def budget_inside_range(
    source: PlanningLaw, smallest: float, largest: float, unique_tokens: float
) -> tuple[float, bool]:
    """The largest budget from `largest` down to `smallest` whose plan stays inside the
    fitted range, and True; or (largest, False) when none does. Each step plans without
    the bootstrap: only the chosen allocation is read, which the refits do not move, and
    the report plans the budget found once, with them."""
    probe = replace(source, bootstrap=())
    budget = largest
    for _ in range(MAX_STEPS):
        if not range_warnings(probe, plan(probe, budget, unique_tokens).best):
            return budget, True
        budget /= STEP
        if budget < smallest:
            break
    return largest, False


def describe(budget: float, largest: float, inside: bool) -> str:
    """Why the page plans for this budget, in one clause."""
    if not inside:
        return (
            "the compute of the sweep's largest run, 6·N·(D + D′); no budget down to its "
            "smallest run keeps the plan inside the fitted range (see the warnings)"
        )
    if budget >= largest:
        return f"{LARGEST_RUN}, and its plan stays inside the fitted range of N, D/N, D and D′/D"
    return (
        f"the largest budget up to the compute of the sweep's largest run ({largest:.3g} FLOPs)"
        " whose plan stays inside the fitted range of N, D/N, D and D′/D"
    )
