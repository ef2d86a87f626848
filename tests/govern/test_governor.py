"""The governor on planted curves: what it calibrates, its gain, its crossing and its action
are known exactly when the curve is drawn from the law it governs with."""

import math

import numpy as np
import pytest
from plantedcurves import LAW, RATIO, planted_frame
from scipy.optimize import brentq

from cdlaw.govern.curve import Curve, check_stable
from cdlaw.govern.governor import GovernOptions, govern, law_loss
from cdlaw.plan.planner import plan
from cdlaw.plan.source import load_law

N, D, F = 100e6, 1e9, 0.2
SOURCE = load_law("qin2026")


def curve_of(frame, strategy="repetition") -> Curve:
    return check_stable(
        Curve(
            tokens=frame["tokens"].to_numpy(float),
            loss=frame["loss"].to_numpy(float),
            lr=frame["lr"].to_numpy(float),
            source="planted",
            loss_column="loss",
            n_params=N,
            fresh_tokens=D,
            strategy=strategy,
            decay_frac=F,
        )
    )


def decide(frame, budget, strategy="repetition"):
    return govern(curve_of(frame, strategy), SOURCE, GovernOptions(budget, D, cooldown=RATIO))


def true_gain(E: float, strategy="repetition") -> float:
    h = 1e-6
    up = law_loss(LAW, N, D, strategy, E * (1 + h))
    down = law_loss(LAW, N, D, strategy, E * (1 - h))
    return float(-(up - down) / (2 * h * E) / (6 * N))


def test_a_planted_curve_gives_back_its_offset_gain_and_losses():
    frame = planted_frame(np.linspace(2e8, 3e9, 40), delta=0.02)
    d = decide(frame, 1e19)
    assert d.offset == pytest.approx(0.02, abs=1e-9)
    e_now = 3e9 / (1 - F)
    assert d.gain_now == pytest.approx(true_gain(e_now), rel=1e-4)
    now = d.option("cool down now")
    assert now.end_tokens == pytest.approx(e_now)
    assert now.loss == pytest.approx(float(law_loss(LAW, N, D, "repetition", e_now)) + 0.02)
    assert d.threshold == pytest.approx(plan(SOURCE, 1e19, D).marginal_gain_per_flop)


def test_a_noisy_planted_curve_recovers_its_offset_within_its_band():
    frame = planted_frame(np.linspace(2e8, 3e9, 60), delta=-0.03, noise=0.01, seed=3)
    d = decide(frame, 1e19)
    assert abs(d.offset + 0.03) < 3 * d.offset_se + 1e-3
    lo, hi = d.option("cool down now").loss_ci95
    truth = float(law_loss(LAW, N, D, "repetition", 3e9 / (1 - F))) - 0.03
    assert lo < truth < hi


def test_the_crossing_is_where_the_true_gain_meets_lambda():
    frame = planted_frame(np.linspace(2e8, 3e9, 40))
    d = decide(frame, 1e19, "paraphrase")
    lam = d.threshold
    e_cross = brentq(lambda e: true_gain(e, "paraphrase") - lam, 3.75e9, 1e12)
    assert d.cross_tokens == pytest.approx(e_cross * (1 - F), rel=0.01)
    assert d.gain_now > lam and d.action == "continue"
    best = d.option("best stop")
    assert best.end_tokens == pytest.approx(e_cross, rel=0.02)  # the minimum of L + λ·F


def test_past_the_crossing_it_cools_down_now():
    frame = planted_frame(np.linspace(2e8, 3e9, 40))
    d = decide(frame, 1e18, "paraphrase")  # a small budget: a high λ
    assert d.gain_now < d.threshold
    assert d.action == "cool down now"
    assert d.cross_tokens is not None and d.cross_tokens < d.tokens_now


def test_a_saturated_repetition_run_switches_to_the_better_strategy():
    # 12 epochs of repetition: qin2026's paraphrases still pay where repeats no longer do
    frame = planted_frame(np.linspace(1e9, 12e9, 40))
    d = decide(frame, 1e20)
    assert d.action == "switch strategy" and d.switch_to == "paraphrase"
    switch = d.option("switch to paraphrase")
    assert switch.loss < d.option("best stop").loss


def test_the_switched_loss_equals_the_own_strategy_before_the_switch_point():
    from cdlaw.govern.governor import switched_loss

    E = np.array([0.5e9, 1e9, 2e9])
    same = switched_loss(LAW, N, D, "repetition", "paraphrase", 3e9, E)
    assert np.allclose(same, law_loss(LAW, N, D, "repetition", E))
    assert math.isfinite(float(switched_loss(LAW, N, D, "repetition", "paraphrase", 3e9, 5e9)))


def with_bootstrap(paraphrase_k: float, copies: int = 20):
    """SOURCE with `copies` bootstrap laws, qin2026's except paraphrase's K."""
    from dataclasses import replace

    from cdlaw.law import Law

    law = SOURCE.law
    strategies = {s: dict(p) for s, p in law.strategies.items()}
    strategies["paraphrase"]["K"] = paraphrase_k
    other = Law(law.form, law.params, strategies, "a bootstrap refit")
    return replace(SOURCE, bootstrap=(other,) * copies)


def test_a_switch_is_advised_only_when_the_bootstrap_laws_back_it():
    frame = planted_frame(np.linspace(1e9, 12e9, 40))  # as the saturated run above
    curve = curve_of(frame)
    options = GovernOptions(1e20, D, cooldown=RATIO)
    backed = with_bootstrap(SOURCE.law.strategies["paraphrase"]["K"])
    assert govern(curve, backed, options).action == "switch strategy"
    # refits whose paraphrases saturate at once: the law alone would switch, they would not
    doubted = govern(curve, with_bootstrap(1e-6), options)
    assert doubted.action != "switch strategy" and doubted.switch_to is None
    assert any("0% of the bootstrap laws agree" in r for r in doubted.reasons)


def test_a_spent_budget_says_so_rather_than_blaming_the_gain():
    frame = planted_frame(np.linspace(2e8, 3e9, 40))
    d = decide(frame, 6 * N * 3e9, "paraphrase")  # the budget is spent before the cooldown
    assert d.action == "cool down now" and d.reasons[0].startswith("the budget is spent")
    assert "G_t meets λ: the budget is spent" in d.reasons


def test_best_stop_is_now_itself_when_going_on_does_not_pay():
    frame = planted_frame(np.linspace(2e8, 3e9, 40))
    d = decide(frame, 1e18, "paraphrase")
    assert d.option("best stop").end_tokens == d.option("cool down now").end_tokens


def test_a_fit_older_than_its_runs_is_warned_of_first():
    """A fit.json whose runs changed since (PlanningLaw.stale, as load_law finds it): the
    decision's first warning, as plan's."""
    from dataclasses import replace

    frame = planted_frame(np.linspace(2e8, 1e9, 40))
    stale = replace(SOURCE, stale="runs/x/fit.json: the fit has 3 rows but runs/x now gives 4")
    d = govern(curve_of(frame), stale, GovernOptions(1e20, D, cooldown=RATIO))
    assert d.warnings[0] == stale.stale
    assert stale.stale not in decide(frame, 1e20).warnings
