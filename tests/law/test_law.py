"""The law's special cases (docs/law.md), exactly, and its pieces against hand computations."""

import math

import numpy as np
import pytest

from cdlaw.law import PRESETS, Law, empirical_eta
from cdlaw.laws import cd, chinchilla
from cdlaw.regimes import classify

SHARED = dict(E=1.4, A=225.3, B=17737.7, alpha=0.29, beta=0.44)
N = np.array([1.4e7, 6e7, 1.9e8, 6e8])
D = np.array([2.8e8, 1e9, 3.8e9, 1.2e10])


def test_zero_derived_tokens_is_chinchilla_exactly():
    got = cd.cd_loss(N, D, 0.0, **SHARED, K=50.0, rho=-0.4, sigma=0.1)
    want = SHARED["E"] + SHARED["A"] / N ** SHARED["alpha"] + SHARED["B"] / D ** SHARED["beta"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, chinchilla.chinchilla_loss(N, D, **SHARED))


def test_constant_rstar_is_muennighoff_data_term_exactly():
    # rho = sigma = 0: R* = K, and D_eff = U_D + U_D R*_D (1 - exp(-R_D / R*_D)) (Muennighoff eq. 5).
    K, Dp = 15.4, 7.0 * D
    got = cd.cd_loss(N, D, Dp, **SHARED, K=K, rho=0.0, sigma=0.0)
    R_D = Dp / D
    D_prime = D + D * K * (1 - np.exp(-R_D / K))
    want = (
        SHARED["E"] + SHARED["A"] / N ** SHARED["alpha"] + SHARED["B"] / D_prime ** SHARED["beta"]
    )
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_infinite_derived_tokens_is_data_floor():
    p = dict(K=50.0, rho=-0.4, sigma=0.1)
    R = cd.rstar(N, D, **p)
    floor = (
        SHARED["E"]
        + SHARED["A"] / N ** SHARED["alpha"]
        + SHARED["B"] / (D * (1 + R)) ** SHARED["beta"]
    )
    np.testing.assert_allclose(cd.cd_loss(N, D, np.inf, **SHARED, **p), floor, rtol=1e-15)
    law = Law("cd", SHARED, {"repetition": p})
    np.testing.assert_allclose(law.loss_data_floor(N, D, "repetition"), floor, rtol=1e-15)
    # and approaches it monotonically from above
    prev = np.inf
    for r in [1, 10, 100, 1e4, 1e8]:
        cur = law.loss(N, D, r * D, "repetition")
        assert np.all(cur >= floor - 1e-12) and np.all(cur <= prev)
        assert r > 100 or np.all(cur < prev)
        prev = cur


def test_eta_limits_and_hand_value():
    assert cd.eta(0.0, 5.0) == 1.0
    np.testing.assert_allclose(cd.eta(1e-9, 5.0), 1.0, rtol=1e-9)
    # hand: R* = 2, r = 2 → η = (2/2)(1 − e^−1)
    np.testing.assert_allclose(cd.eta(2.0, 2.0), 1 - math.exp(-1), rtol=1e-15)
    # large r: η → R*/r
    np.testing.assert_allclose(cd.eta(1e6, 3.0), 3.0 / 1e6, rtol=1e-12)
    # η·D′ = D R* (1 − e^(−r/R*))
    Dv, Dp, R = 1e9, 3e9, 4.0
    np.testing.assert_allclose(
        Dv + cd.eta(Dp / Dv, R) * Dp, cd.effective_data(Dv, Dp, R), rtol=1e-14
    )


def test_rstar_hand_value():
    np.testing.assert_allclose(
        cd.rstar(1e8, 2e9, 3.0, -0.5, 0.1), 3.0 * 20**-0.5 * 1e8**0.1, rtol=1e-14
    )


def test_log_loss_matches_linear_form():
    rng = np.random.default_rng(0)
    n = rng.uniform(1e7, 6e8, 50)
    d = rng.uniform(1e8, 1e10, 50)
    dp = np.where(rng.random(50) < 0.2, 0.0, rng.uniform(1e8, 6e11, 50))
    p = dict(K=40.0, rho=-0.4, sigma=-0.1)
    want = np.log(cd.cd_loss(n, d, dp, **SHARED, **p))
    with np.errstate(divide="ignore"):
        got = cd.cd_log_loss(
            np.log(n),
            np.log(d),
            np.log(dp),
            math.log(SHARED["E"]),
            math.log(SHARED["A"]),
            math.log(SHARED["B"]),
            SHARED["alpha"],
            SHARED["beta"],
            math.log(p["K"]),
            p["rho"],
            p["sigma"],
        )
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_muennighoff_without_repeats_or_excess_params_is_chinchilla():
    m = PRESETS["muennighoff2023"]
    d = np.array([1e9, 1e10])
    n_small = 0.5 * chinchilla.chinchilla_optimal_n_for_data(
        d, m.params["A"], m.params["B"], m.params["alpha"], m.params["beta"]
    )  # N < U_N: no excess
    np.testing.assert_allclose(
        m.loss(n_small, d, 0.0, "repetition"),
        chinchilla.chinchilla_loss(n_small, d, **m.params),
        rtol=1e-14,
    )
    # excess parameters are worth less than fresh ones
    n_big = 20 * n_small
    assert np.all(
        m.loss(n_big, d, 0.0, "repetition") > chinchilla.chinchilla_loss(n_big, d, **m.params)
    )


def test_chinchilla_optimal_n_matches_closed_form_allocation():
    # At the optimum for budget C, D* = C/(6 N*); the inverse map must give back N*.
    a, b, A, B = 0.34, 0.28, 406.4, 410.7
    G = (a * A / (b * B)) ** (1 / (a + b))
    C = 1e21
    n_star = G * (C / 6) ** (b / (a + b))
    d_star = C / (6 * n_star)
    np.testing.assert_allclose(
        chinchilla.chinchilla_optimal_n_for_data(d_star, A, B, a, b), n_star, rtol=1e-12
    )


def test_empirical_eta_recovers_the_law_eta():
    law = PRESETS["qin2026"]
    n, d = np.full(5, 1e8), np.full(5, 2e9)
    r = np.array([0.5, 1, 3, 7, 30])
    for s in ("repetition", "paraphrase"):
        obs = law.loss(n, d, r * d, s)
        np.testing.assert_allclose(
            empirical_eta(law, n, d, r * d, obs), law.eta(n, d, r, s), rtol=1e-8
        )
    assert np.isnan(empirical_eta(law, 1e8, 2e9, 0.0, 3.0))


def test_law_round_trips_through_dict():
    for law in PRESETS.values():
        back = Law.from_dict(law.to_dict())
        assert back == law


def test_law_rejects_wrong_strategy_params():
    with pytest.raises(ValueError):
        Law("cd", SHARED, {"repetition": {"K": 1.0}})
    with pytest.raises(KeyError):
        PRESETS["muennighoff2023"].strategy_params("paraphrase")


def test_regimes_follow_the_definitions():
    law = PRESETS["qin2026"]
    n = 1e8
    d = 20 * n
    # no derived tokens: the whole derived gain is still to be had
    t = classify(law, n, d, 0.0, "none")
    assert t.regime[()] == "compute-bound" and t.loss_one_epoch[()] == pytest.approx(t.loss[()])
    # far past saturation with a small D: fresh data would help → data-bound
    t = classify(law, n, d, 1e6 * d, "repetition")
    assert t.derived_gain_share[()] > 0.9 and t.regime[()] == "data-bound"
    # tiny model with lots of data and saturated derived tokens → model-bound
    t = classify(law, 1e5, 1e16, 1e9 * 1e16, "repetition")
    assert t.regime[()] == "model-bound"
    assert t.loss_data_floor[()] - t.loss_model_floor[()] <= t.tolerance
