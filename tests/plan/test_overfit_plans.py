"""Laws that know overfitting: plans never pass the loss minimum in D′, the fourth regime."""

import numpy as np
import pytest

from cdlaw.law import PRESETS, Law
from cdlaw.plan.planner import plan
from cdlaw.regimes import classify

QIN = PRESETS["qin2026"]


def overfitting_law(lam: float, mu: float = 0.3) -> Law:
    """The CD paper's constants plus a repetition/paraphrase penalty λ·r·(N/D)^μ."""
    strategies = {s: {**v, "lam": lam} for s, v in QIN.strategies.items()}
    return Law("cd-overfit", params={**QIN.params, "mu": mu}, strategies=strategies)


@pytest.mark.parametrize("budget", [1e20, 1e21, 1e22, 1e23])
def test_plans_never_recommend_more_derived_tokens_than_the_loss_minimum(budget):
    law = overfitting_law(0.05)
    p = plan(law, budget, 5e9)
    best = p.best
    assert best.strategy in ("repetition", "paraphrase")
    cap = float(law.best_derived_tokens(best.n_params, best.fresh_tokens, best.strategy))
    assert best.derived_tokens <= cap * (1 + 1e-9)
    # and no other D′ at that (N, D) does better within the budget
    grid = np.linspace(0, min(cap * 3, budget / (6 * best.n_params) - best.fresh_tokens), 2001)
    losses = law.loss(best.n_params, best.fresh_tokens, grid, best.strategy)
    assert best.predicted_loss <= losses.min() + 1e-9


def test_a_capped_plan_leaves_flops_unspent_and_says_so():
    law = overfitting_law(0.5)  # a strong penalty: the minimum comes early
    p = plan(law, 1e23, 1e9, n_params=2e9)  # fixed N, far more compute than the data can use
    cap = float(law.best_derived_tokens(2e9, 1e9, p.best.strategy))
    assert p.best.derived_tokens == pytest.approx(cap, rel=1e-9)
    assert 6 * 2e9 * p.best.tokens_trained < 1e23
    assert any("overfitting" in w and "unspent" in w for w in p.warnings)
    # without the penalty the same plan spends everything
    q = plan(overfitting_law(0.0), 1e23, 1e9, n_params=2e9)
    assert 6 * 2e9 * q.best.tokens_trained == pytest.approx(1e23)
    assert not any("unspent" in w for w in q.warnings)


def test_the_cd_law_is_the_zero_penalty_case_of_its_plans():
    a, b = plan(QIN, 1e21, 5e9), plan(overfitting_law(0.0), 1e21, 5e9)
    assert a.best.n_params == pytest.approx(b.best.n_params, rel=1e-6)
    assert a.best.predicted_loss == pytest.approx(b.best.predicted_loss, rel=1e-12)


def test_runs_past_the_minimum_are_overfit_and_the_floor_is_the_minimum():
    law = overfitting_law(0.05)
    n, d = 1e8, 2e9
    best = float(law.best_derived_tokens(n, d, "repetition"))
    assert np.isfinite(best) and best > 0
    dp = np.array([0.0, 0.5 * best, 0.99 * best, 1.01 * best, 4 * best])
    t = classify(law, n, d, dp, "repetition")
    assert list(t.regime[:3] == "overfit") == [False, False, False]
    assert list(t.regime[3:]) == ["overfit", "overfit"]
    floor = float(law.loss_data_floor(n, d, "repetition"))
    assert floor == pytest.approx(float(law.loss(n, d, best, "repetition")), rel=1e-9)
    assert classify(QIN, n, d, dp, "repetition").regime.tolist().count("overfit") == 0


def test_the_loss_figure_shades_the_overfit_tokens():
    import pandas as pd

    from cdlaw.figures.loss import loss_figure

    law = overfitting_law(0.05)
    rows = []
    for r in (0, 1, 3, 7, 15, 31):
        s = "none" if r == 0 else "repetition"
        loss = float(law.loss(1e8, 2e9, r * 2e9, s))
        rows.append({"n_params": 1e8, "fresh_tokens": 2e9, "derived_tokens": r * 2e9,
                     "tokens_trained": (1 + r) * 2e9, "strategy": s, "loss": loss,
                     "used": True})  # fmt: skip
    fig = loss_figure(law, pd.DataFrame(rows), None)
    gids = {a.get_gid() for ax in fig.axes for a in ax.get_children()}
    assert "band:overfit:repetition" in gids
    fig = loss_figure(QIN, pd.DataFrame(rows), None)
    assert not any(str(g).startswith("band:overfit") for ax in fig.axes for g in
                   (a.get_gid() for a in ax.get_children()))  # fmt: skip
