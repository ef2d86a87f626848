"""The plan's valley (cdlaw.plan.valley): the N whose loss along the budget is within the
plan's band. Its width follows the curvature of a planted law, its ends are where the loss
meets the band, and a plan carries it at its own band's upper end (docs/plan.md)."""

import json
import math
import sys

import numpy as np
import pytest

from cdlaw.cli import main
from cdlaw.law import PRESETS, Law
from cdlaw.plan.optimum import budget_loss, optimal_n_params
from cdlaw.plan.planner import plan
from cdlaw.plan.result import Plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.plan.valley import plan_valley

HOFFMANN = PRESETS["chinchilla-hoffmann"]
QIN = PRESETS["qin2026"]


def curvature(law: Law, n: float, budget: float) -> float:
    """d²L/d(ln N)² along the budget of a Chinchilla law, at N: α²A/N^α + β²B/D^β."""
    p = law.params
    d = budget / (6 * n)
    return p["alpha"] ** 2 * p["A"] / n ** p["alpha"] + p["beta"] ** 2 * p["B"] / d ** p["beta"]


@pytest.mark.parametrize("scale", [1.0, 0.04])
def test_the_valley_is_as_wide_as_the_planted_curvature_says(scale):
    """Near its minimum the loss along a budget is L* + κ/2·(ln N − ln N*)², so a band ε
    above L* holds ln N* ± sqrt(2ε/κ). Scaling A and B by 0.04 flattens the valley five-fold
    (κ ∝ A, B) at the same N*."""
    p = dict(HOFFMANN.params, A=HOFFMANN.params["A"] * scale, B=HOFFMANN.params["B"] * scale)
    law = Law("chinchilla", p, {})
    budget, eps = 1e22, 1e-5
    n_star, _ = optimal_n_params(law, "none", budget, math.inf)
    best = float(budget_loss(law, "none", budget, n_star, math.inf))
    v = plan_valley(law, "none", budget, math.inf, n_star, best + eps)
    half = math.sqrt(2 * eps / curvature(law, n_star, budget))
    assert math.log(n_star / v.small.n_params) == pytest.approx(half, rel=0.02)
    assert math.log(v.large.n_params / n_star) == pytest.approx(half, rel=0.02)
    assert not v.on_edge and v.loss_ceiling == best + eps


def test_the_valleys_ends_are_where_the_loss_meets_the_band():
    budget, unique = 1e21, 5e9
    n_star, _ = optimal_n_params(QIN, "repetition", budget, unique)
    best = float(budget_loss(QIN, "repetition", budget, n_star, unique))
    ceiling = best + 0.01
    v = plan_valley(QIN, "repetition", budget, unique, n_star, ceiling)
    assert v.small.n_params < n_star < v.large.n_params
    for n, outward in ((v.small.n_params, 0.99), (v.large.n_params, 1.01)):
        at = float(budget_loss(QIN, "repetition", budget, n, unique))
        assert at <= ceiling and at == pytest.approx(ceiling, abs=1e-6)
        assert float(budget_loss(QIN, "repetition", budget, n * outward, unique)) > ceiling
    # the smaller model trains more epochs over the same unique tokens
    assert v.small.epochs > v.large.epochs and v.small.strategy == "repetition"
    assert plan_valley(QIN, "repetition", budget, unique, n_star, best - 1e-3) is None


def refits(law: Law, n: int = 40, seed: int = 0) -> tuple[Law, ...]:
    """Stand-ins for bootstrap refits: the law with E, A, B, α, β jittered by ~1%."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = {k: v * (1 + 0.01 * rng.standard_normal()) for k, v in law.params.items()}
        out.append(Law(law.form, p, law.strategies))
    return tuple(out)


def test_a_plan_carries_its_valley_at_its_bands_upper_end():
    source = PlanningLaw("jittered", QIN, None, refits(QIN))
    p = plan(source, 1e21, 5e9)
    assert p.predicted_loss_ci95 is not None and p.valley is not None
    assert p.valley.loss_ceiling == p.predicted_loss_ci95[1]
    assert p.valley.small.n_params <= p.n_params <= p.valley.large.n_params
    assert p.valley.small.strategy == p.valley.large.strategy == p.strategy
    d = p.to_dict()
    assert d["valley"]["n_params"] == [p.valley.small.n_params, p.valley.large.n_params]
    assert Plan.from_dict(json.loads(json.dumps(d))).to_dict() == d
    # no band (a preset), or N fixed by the user: no valley
    assert plan(QIN, 1e21, 5e9).valley is None
    assert plan(source, 1e21, 5e9, n_params=3e9).valley is None


def test_plan_prints_the_valley_beside_n(monkeypatch, capsys, tmp_path):
    from lawtables import make_table

    from cdlaw.fit.io import write_fit
    from cdlaw.fit.procedure import fit_law

    fit = fit_law(make_table(seed=1, n_derived=60), n_starts=16, bootstrap=30)
    path = tmp_path / "fit.json"
    write_fit(fit, path, tmp_path / "fit_rows.parquet")
    args = ["cdlaw", "plan", "--law", str(path), "--budget-flops", "1e20", "--unique-tokens", "2e9"]
    for extra in ([], ["--json"]):
        monkeypatch.setattr(sys, "argv", args + extra)
        with pytest.raises(SystemExit) as e:
            main()
        out = capsys.readouterr().out
        assert (e.value.code or 0) == 0
        if extra:
            v = json.loads(out)["valley"]
            assert v["n_params"][0] < json.loads(out)["n_params"] < v["n_params"][1]
        else:
            text = " ".join(out.split())
            assert "valley N " in text and "within the 95% band" in text


def test_the_frontier_figure_shades_each_plans_valley():
    from cdlaw.figures.frontier import frontier_figure
    from cdlaw.plan.planner import frontier

    source = PlanningLaw("jittered", QIN, None, refits(QIN, 20))
    front = frontier(source, np.geomspace(1e19, 1e21, 3), 5e9).to_dict()
    fig = frontier_figure(front)
    shaded = {c.get_gid(): c for ax in fig.axes for c in ax.collections if c.get_gid()}
    assert {"plan:valley_n", "plan:valley_passes"} <= set(shaded)
    low, high = (front["rows"][1]["valley"]["n_params"][i] for i in (0, 1))
    ys = shaded["plan:valley_n"].get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(min(r["valley"]["n_params"][0] for r in front["rows"]))
    assert low < front["rows"][1]["n_params"] < high
    # without bands (a preset) nothing is shaded
    plain = frontier_figure(frontier(QIN, np.geomspace(1e19, 1e21, 3), 5e9).to_dict())
    assert not any(c.get_gid() == "plan:valley_n" for ax in plain.axes for c in ax.collections)
