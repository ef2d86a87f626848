"""The registered overfitting-aware laws, cd-overfit and practical (docs/overfitting-laws.md),
through the real fitter: planted parameters come back, the CD law is cd-overfit's λ → 0
case, the loss minimiser in D′ is what Law reports, and the demo's overfitting rows are
fitted better than by the CD law."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from overfitgrid import L0, PER_STRATEGY, PRACTICAL, RATIOS, SHARED, SIZES, TOKENS_PER_PARAM

from cdlaw.fit.io import FitResult
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.law import Law
from cdlaw.laws.cd_overfit import overfit_penalty
from cdlaw.system.errors import BadInput

STARTS = 128
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo-runs-cosine.csv"
STRATEGIES = ("repetition", "paraphrase")
CD_OVERFIT = Law(
    "cd-overfit", params=SHARED, strategies=dict(zip(STRATEGIES, PER_STRATEGY, strict=True))
)
PRACTICAL_LAW = Law("practical", params={**PRACTICAL, "L0": L0})
CD = Law(
    "cd",
    params={k: v for k, v in SHARED.items() if k != "mu"},
    strategies={
        s: {k: p[k] for k in ("K", "rho", "sigma")} for s, p in CD_OVERFIT.strategies.items()
    },
)


def planted_table(law: Law, strategies, seed: int) -> pd.DataFrame:
    """The demo-like grid of test_new_laws (5 sizes, D from 0.5 N to 20 N, r up to 31),
    losses from `law` with 0.5% multiplicative noise, and the demo's vocabulary."""
    rows = [(n, q * n, 0.0, "none") for n in SIZES for q in TOKENS_PER_PARAM]
    rows += [
        (n, q * n, r * q * n, s)
        for s in strategies
        for n in SIZES
        for q in TOKENS_PER_PARAM
        for r in RATIOS
    ]
    df = pd.DataFrame(rows, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy"])
    loss = np.empty(len(df))
    for s in df["strategy"].unique():
        m = (df["strategy"] == s).to_numpy()
        loss[m] = law.loss(*(df[c].to_numpy()[m] for c in df.columns[:3]), s)
    noise = 1 + 0.005 * np.random.default_rng(seed).standard_normal(len(df))
    return df.assign(loss=loss * noise, vocab_size=512)


def test_cd_overfit_recovers_planted_parameters():
    result = fit_law(planted_table(CD_OVERFIT, STRATEGIES, 1), law="cd-overfit", n_starts=STARTS)
    law = result.law
    assert result.optimizer.success and not result.optimizer.at_bound
    for k in ("alpha", "beta", "mu"):
        assert law.params[k] == pytest.approx(SHARED[k], abs=0.02), k
    for s, truth in zip(STRATEGIES, PER_STRATEGY, strict=True):
        for k in ("rho", "sigma"):
            assert law.strategies[s][k] == pytest.approx(truth[k], abs=0.02), (s, k)
        assert law.strategies[s]["lam"] == pytest.approx(truth["lam"], rel=0.10), s


def test_practical_recovers_planted_parameters_with_l0_fixed_at_ln_vocab():
    result = fit_law(planted_table(PRACTICAL_LAW, STRATEGIES, 2), law="practical", n_starts=STARTS)
    law = result.law
    assert result.optimizer.success and not result.optimizer.at_bound
    assert law.params["L0"] == np.log(512)  # taken from the table, not fitted
    saved = result.to_dict()  # fit.json holds L0, so that plan and plot can evaluate it
    assert saved["params"]["L0"] == np.log(512)
    assert FitResult.from_dict(saved).law.loss(1e5, 1e5, 3e5, "repetition") == pytest.approx(
        law.loss(1e5, 1e5, 3e5, "repetition")
    )
    for k in ("alpha", "beta", "gamma", "delta"):
        assert law.params[k] == pytest.approx(PRACTICAL[k], abs=0.02), k
    assert law.params["c"] == pytest.approx(PRACTICAL["c"], rel=0.10)
    # both strategies' derived tokens are tokens seen, with no parameters of their own
    assert law.strategies == {"repetition": {}, "paraphrase": {}}
    assert law.loss(2e5, 2e5, 6e5, "paraphrase") == law.loss(2e5, 2e5, 6e5, "repetition")


def test_the_cd_law_is_cd_overfits_zero_penalty_case():
    df = planted_table(CD, STRATEGIES, 3)
    cd = fit_law(df, law="cd", n_starts=STARTS)
    overfit = fit_law(df, law="cd-overfit", n_starts=STARTS)
    mu = overfit.law.params["mu"]
    for s in STRATEGIES:  # no overfitting found: a penalty within the noise (0.5%) at most
        lam = overfit.law.strategies[s]["lam"]
        assert lam < 0.05 * min(p["lam"] for p in PER_STRATEGY), s
        m = (df["strategy"] == s).to_numpy()
        N, D, Dp, loss = (df[c].to_numpy()[m] for c in (*df.columns[:3], "loss"))
        assert np.max(overfit_penalty(N, D, Dp, lam, mu) / loss) < 0.01, s
    assert overfit.rmse_log <= cd.rmse_log * (1 + 1e-3)
    # a λ at its floor is "absent", never reported as a parameter the data cannot pin
    assert not any("lam (lower bound)" in a for a in overfit.optimizer.at_bound)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_best_derived_tokens_and_the_data_floor_are_the_loss_minimum(strategy):
    N = np.array([2e4, 2e5, 2e6])[:, None]
    D = N * np.array([0.5, 2.0, 20.0])
    best = CD_OVERFIT.best_derived_tokens(N, D, strategy)
    assert best.shape == (3, 3) and np.all(np.isfinite(best)) and np.all(best > 0)
    r = np.concatenate([[0.0], np.geomspace(1e-3, 1e4, 200_001)])
    for n, d, b, floor in zip(
        np.broadcast_to(N, D.shape).ravel(),
        D.ravel(),
        best.ravel(),
        CD_OVERFIT.loss_data_floor(N, D, strategy).ravel(),
        strict=True,
    ):
        grid = CD_OVERFIT.loss(n, d, r * d, strategy)
        i = int(np.argmin(grid))
        assert b / d == pytest.approx(r[i], rel=1e-4)
        # the minimum itself, which the grid can only approach from above
        assert floor <= grid[i] and floor == pytest.approx(grid[i], rel=1e-9)
        assert floor < CD_OVERFIT.loss_one_epoch(n, d)
    # no optimum for strategy "none", for a law that never overfits, or where λ = 0
    assert np.all(np.isinf(CD_OVERFIT.best_derived_tokens(N, D, "none")))
    assert np.all(np.isinf(CD.best_derived_tokens(N, D, strategy)))
    no_penalty = Law(
        "cd-overfit",
        params=SHARED,
        strategies={s: {**p, "lam": 0.0} for s, p in CD_OVERFIT.strategies.items()},
    )
    assert np.all(np.isinf(no_penalty.best_derived_tokens(N, D, strategy)))
    np.testing.assert_allclose(
        no_penalty.loss_data_floor(N, D, strategy), CD.loss_data_floor(N, D, strategy)
    )


def test_practical_needs_a_vocab_size_column():
    df = planted_table(PRACTICAL_LAW, STRATEGIES, 4).drop(columns="vocab_size")
    with pytest.raises(BadInput, match="vocab_size") as e:
        fit_law(df, law="practical", n_starts=4)
    assert str(e.value).count(".") <= 1 and "\n" not in str(e.value)
    mixed = planted_table(PRACTICAL_LAW, STRATEGIES, 4)
    mixed.loc[::2, "vocab_size"] = 1024
    with pytest.raises(BadInput, match="one vocab_size"):
        fit_law(mixed, law="practical", n_starts=4)


def test_cd_overfit_fits_the_demos_overfitting_rows_better_than_cd():
    """The cosine demo overfits at N 200K, D 48K from about r = 15: the CD law cannot."""
    df = load_runs(DEMO)
    rmse = {}
    for name in ("cd", "cd-overfit"):
        rows = fit_law(df, law=name, n_starts=STARTS, select="mean").rows
        big = rows["n_params"] == rows["n_params"].max()
        m = big & (rows["strategy"] == "repetition") & (rows["derived_ratio"] >= 7) & rows["used"]
        assert m.sum() >= 3
        rmse[name] = float(np.sqrt(np.mean(rows.loc[m, "residual_log"] ** 2)))
    print(f"demo 200K repetition r >= 7 log-RMSE: {rmse}")
    assert rmse["cd-overfit"] < rmse["cd"]


def test_staged_fits_mu_with_the_derived_rows():
    """μ is shared but only derived rows see it: --method staged fits it in stage 2."""
    from cdlaw.fit.problem import build_problem

    df = planted_table(CD_OVERFIT, STRATEGIES, 5)
    problem = build_problem("cd-overfit", STRATEGIES, *(df[c] for c in df.columns[:5]), df.index)
    first, second = problem.stages((problem.lower + problem.upper) / 2)
    names = np.array(problem.form.fit_vector_names(STRATEGIES))
    assert list(names[first]) == ["E", "A", "B", "alpha", "beta"]
    assert "mu" in names[second] and "repetition.lam" in names[second]
