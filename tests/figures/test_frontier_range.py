"""The frontier figure a fit draws plans only the budgets the fit supports (inside the
extrapolation limit, not model sizes 1000× past the data); a law without a fitted range
plans around the largest run's compute."""

import numpy as np

from cdlaw.figures.plot import compute_frontier, default_budgets
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


def test_a_law_without_a_fitted_range_plans_around_its_largest_run():
    bare = PRESETS["muennighoff2023"]  # a preset with no data range: nothing limits it
    got = compute_frontier(bare, 1e9, largest_run_flops=1e20, fit=bare.to_dict())
    budgets = [r["budget_flops"] for r in got["rows"]]
    assert np.allclose(budgets, default_budgets(1e20))


def test_the_default_range_ends_before_the_guard_would_swap_the_strategy():
    """Past the budget where the law's preferred strategy leaves the fitted range, the
    guard plans another one, and a frontier would jump to it (this fit's old range ended at
    3.5e13 FLOPs on repetition at 33 epochs after paraphrase at 1.5e13): it ends before."""
    from dataclasses import replace
    from pathlib import Path

    from cdlaw.plan.planner import plan
    from cdlaw.plan.source import load_law
    from cdlaw.plan.support import supported_budgets

    golden = Path(__file__).resolve().parents[1] / "fit" / "golden" / "demo-runs.fit.json"
    source = load_law(str(golden))
    probe = replace(source, bootstrap=())
    for c in supported_budgets(source, 96_000):
        guarded = plan(probe, c, 96_000, extrapolate=False)
        assert guarded.strategy == plan(probe, c, 96_000, extrapolate=True).strategy, c
