"""The budgets a law supports: the range whose plans stay inside the extrapolation limit,
the default of `cdlaw plan --frontier` and of the frontier figure (docs/plan.md#the-
extrapolation-limit). Found by planning (cdlaw.plan.planner) through the one guard.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cdlaw.law import Law
from cdlaw.plan import EXTRAPOLATION_LIMIT
from cdlaw.plan.guard import BeyondLimit
from cdlaw.plan.planner import frontier_points, plan
from cdlaw.plan.source import PlanningLaw, as_planning_law
from cdlaw.system.errors import BadInput

# Where supported_budgets looks for budgets a law can plan: 10^0 to 10^40 FLOPs, first at
# half a decade, then each end to 1/64 of that by bisection.
SUPPORT_SCAN = (0.0, 40.0, 0.5)
SUPPORT_BISECTIONS = 6


def supported_budgets(
    law: Law | PlanningLaw,
    unique_tokens: float | None,
    strategy: str = "auto",
    points: int = 13,
    **options,
) -> np.ndarray | None:
    """`points` (≥ 2) log-spaced budgets spanning the range whose plans stay inside the
    extrapolation limit (the one guard, checks.guard) on the strategy the law prefers (not
    on another the guard fell back to: the frontier would jump to it), with a predicted
    loss below ln V
    where the runs' vocabulary is known (above it the law means nothing): the default of
    `cdlaw plan --frontier` and of the frontier figure. None for a law without a fitted
    range (muennighoff2023), for which nothing is limited. Options as for plan(), without
    extrapolate; BadInput when no budget from 1 to 1e40 FLOPs can be planned inside it.

    The scan plans without the bootstrap (its refits decide nothing here), so it costs
    about a hundred plain plans."""
    source = law if isinstance(law, PlanningLaw) else as_planning_law(law)
    points = frontier_points(points)
    if source.data_range is None:
        return None
    probe = replace(source, bootstrap=())
    options = {k: v for k, v in options.items() if k != "extrapolate"}
    uniform = source.data_range.uniform_loss

    def inside(log_c: float) -> bool:
        try:
            p = plan(probe, 10.0**log_c, unique_tokens, strategy, extrapolate=False, **options)
        except BeyondLimit:
            return False
        if p.left_out:  # the guard left a strategy out: was it the one the law prefers?
            free = plan(probe, 10.0**log_c, unique_tokens, strategy, extrapolate=True, **options)
            if free.strategy != p.strategy:
                return False  # a frontier would jump to a worse strategy here
        return uniform is None or p.predicted_loss <= uniform

    lo, hi, step = SUPPORT_SCAN
    grid = np.arange(lo, hi + step / 2, step)
    ok = np.array([inside(x) for x in grid])
    if not ok.any():
        raise BadInput(
            f"no budget from 1 to 1e{hi:g} FLOPs has a plan inside the {EXTRAPOLATION_LIMIT:g}× "
            "extrapolation limit of the range its law was fitted on: give --frontier-range "
            "with --extrapolate to plan one anyway"
        )
    # the longest run of budgets inside, its ends refined between the grid's neighbours
    runs, start = [], None
    for i, good in enumerate([*ok, False]):
        if good and start is None:
            start = i
        elif not good and start is not None:
            runs.append((start, i - 1))
            start = None
    first, last = max(runs, key=lambda r: r[1] - r[0])
    ends = []
    for end, outward in ((first, -1), (last, 1)):
        good, bad = grid[end], grid[end] + outward * step
        if not 0 <= end + outward < len(grid):
            ends.append(good)
            continue
        for _ in range(SUPPORT_BISECTIONS):
            mid = (good + bad) / 2
            good, bad = (mid, bad) if inside(mid) else (good, mid)
        ends.append(good)
    if ends[1] - ends[0] < 1e-9:  # one budget alone: a frontier needs two
        ends = [ends[0] - step / 2**SUPPORT_BISECTIONS, ends[1]]
    return np.logspace(ends[0], ends[1], int(points))
