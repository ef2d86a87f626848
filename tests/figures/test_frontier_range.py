"""The frontier figure a fit draws plans only the budgets the fit supports: on a
Muennighoff-shaped table it once drew N up to ~8T, 1000× the data, with grey shading."""

import numpy as np

from cdlaw.figures.plot import compute_frontier
from cdlaw.law import PRESETS

QIN = PRESETS["qin2026"]


def test_the_frontier_a_fit_draws_stays_inside_the_extrapolation_limit():
    fit = {**QIN.to_dict(), "source": "t.csv",
           "data_range": {"n_params": [7e6, 8.7e9], "tokens_per_param": [0.01, 2e3]}}  # fmt: skip
    got = compute_frontier(QIN, 1e9, fit=fit, largest_run_flops=1e22)
    n = np.array([r["n_params"] for r in got["rows"]])
    assert len(n) == 16 and got["beyond_limit"] == []
    assert n.max() <= 30 * 8.7e9 and n.min() >= 7e6 / 30
    assert all(r["extrapolated"] == [] for r in got["rows"])
    # a law without a fitted range still gets budgets around its largest run
    bare = compute_frontier(QIN, 1e9, largest_run_flops=1e20, fit={**QIN.to_dict()})
    assert bare["rows"][0]["budget_flops"] > 0
