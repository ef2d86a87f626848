"""The overfitting-aware laws (docs/overfitting-laws.md): gradients, special cases, the
minimiser in D′, and recovery of known parameters from a noisy demo-like table."""

import numpy as np
import pytest
from overfitgrid import L0, PER_STRATEGY, PRACTICAL, RATIOS, SHARED, SIZES, TOKENS_PER_PARAM
from scipy.optimize import least_squares

from cdlaw.laws.cd import cd_loss
from cdlaw.laws.cd_overfit import (
    cd_overfit_batched_log_loss,
    cd_overfit_best_derived_tokens,
    cd_overfit_best_ratio,
    cd_overfit_fit_vector,
    cd_overfit_loss,
)
from cdlaw.laws.chinchilla import chinchilla_loss
from cdlaw.laws.practical import (
    practical_batched_log_loss,
    practical_fit_vector,
    practical_h,
    practical_loss,
)


def strategy_table():
    """Rows sorted as the fitter sorts them: D′ = 0 first, then each strategy's slice."""
    rows = [(n, q * n, 0.0, -1) for n in SIZES for q in TOKENS_PER_PARAM]
    rows += [
        (n, q * n, r, j)
        for j in range(len(PER_STRATEGY))
        for n in SIZES
        for q in TOKENS_PER_PARAM
        for r in RATIOS
    ]
    N, D, ratio, group = np.array(rows).T
    slices = tuple(
        slice(int(np.searchsorted(group, j)), int(np.searchsorted(group, j, side="right")))
        for j in range(len(PER_STRATEGY))
    )
    return N, D, ratio, group.astype(int), slices


def cd_overfit_table_loss(N, D, ratio, group):
    L = np.empty(len(N))
    for j in range(-1, len(PER_STRATEGY)):
        m = group == j
        p = PER_STRATEGY[max(j, 0)]  # D′ = 0 rows: any strategy's parameters give Chinchilla
        L[m] = cd_overfit_loss(N[m], D[m], ratio[m] * D[m], **SHARED, **p)
    return L


def random_rows(rng, n):
    logN = np.log(rng.uniform(2e4, 2e6, n))
    logD = logN + np.log(rng.uniform(0.5, 20, n))
    ratio = rng.choice([0.0, 0.5, 1, 3, 7, 15, 31], n)
    return logN, logD, ratio


def central_difference_vjp(f, theta, w, step=1e-6):
    g = np.zeros_like(theta)
    for j in range(theta.shape[1]):
        d = np.zeros_like(theta)
        d[:, j] = step
        g[:, j] = np.sum((f(theta + d)[0] - f(theta - d)[0]) * w, axis=1) / (2 * step)
    return g


# ---------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------


def test_practical_vjp_matches_central_differences():
    rng = np.random.default_rng(0)
    logN, logD, ratio = random_rows(rng, 40)
    truth = practical_fit_vector(**PRACTICAL)
    for scale in (0.05, 0.5):  # near the truth, and far from it
        theta = truth + scale * rng.standard_normal((5, 8))
        f = lambda t: practical_batched_log_loss(t, logN, logD, ratio, L0)  # noqa: E731
        logL, vjp = f(theta)
        w = rng.standard_normal(logL.shape)
        np.testing.assert_allclose(
            vjp(w), central_difference_vjp(f, theta, w), rtol=1e-6, atol=1e-7
        )


def test_cd_overfit_vjp_matches_central_differences():
    rng = np.random.default_rng(1)
    N, D, ratio, group, _ = strategy_table()
    pick = np.sort(rng.choice(len(N), 60, replace=False))  # still sorted by strategy
    group = group[pick]
    slices = tuple(
        slice(int(np.searchsorted(group, j)), int(np.searchsorted(group, j, side="right")))
        for j in range(2)
    )
    logN, logD, r = np.log(N[pick]), np.log(D[pick]), ratio[pick]
    truth = cd_overfit_fit_vector(SHARED, PER_STRATEGY)
    for scale in (0.05, 0.5):
        theta = truth + scale * rng.standard_normal((5, len(truth)))
        f = lambda t: cd_overfit_batched_log_loss(t, logN, logD, r, slices)  # noqa: E731
        logL, vjp = f(theta)
        w = rng.standard_normal(logL.shape)
        np.testing.assert_allclose(
            vjp(w), central_difference_vjp(f, theta, w), rtol=1e-6, atol=1e-7
        )


def test_batched_log_losses_match_the_public_losses():
    rng = np.random.default_rng(2)
    logN, logD, ratio = random_rows(rng, 30)
    N, D = np.exp(logN), np.exp(logD)
    logL, _ = practical_batched_log_loss(
        practical_fit_vector(**PRACTICAL)[None], logN, logD, ratio, L0
    )
    want = practical_loss(N, D, ratio * D, L0=L0, **PRACTICAL)
    np.testing.assert_allclose(logL[0], np.log(want), rtol=1e-13)

    N, D, ratio, group, slices = strategy_table()
    logL, _ = cd_overfit_batched_log_loss(
        cd_overfit_fit_vector(SHARED, PER_STRATEGY)[None], np.log(N), np.log(D), ratio, slices
    )
    np.testing.assert_allclose(
        logL[0], np.log(cd_overfit_table_loss(N, D, ratio, group)), rtol=1e-13
    )


# ---------------------------------------------------------------------------------------
# Special cases
# ---------------------------------------------------------------------------------------

N4 = np.array([2e4, 1e5, 5e5, 2e6])
D4 = np.array([1e4, 5e5, 5e6, 4e7])
CD = {k: v for k, v in {**SHARED, **PER_STRATEGY[0]}.items() if k not in ("lam", "mu")}


@pytest.mark.parametrize("r", [0.5, 1.0, 7.0, 31.0, 1e4, np.inf])
def test_zero_penalty_is_the_cd_law_exactly(r):
    got = cd_overfit_loss(N4, D4, r * D4, **CD, lam=0.0, mu=0.7)
    np.testing.assert_array_equal(got, cd_loss(N4, D4, r * D4, **CD))
    if np.isinf(r):
        return  # the fit's rows have finite D′
    # and in the fit's coordinates, l = log λ = −∞
    theta = cd_overfit_fit_vector(SHARED, [dict(PER_STRATEGY[0], lam=0.0)])[None]
    logL, _ = cd_overfit_batched_log_loss(
        theta, np.log(N4), np.log(D4), np.full(4, r), (slice(0, 4),)
    )
    np.testing.assert_allclose(logL[0], np.log(cd_loss(N4, D4, r * D4, **CD)), rtol=1e-14)


def test_no_derived_tokens_is_chinchilla_exactly():
    chin = {k: SHARED[k] for k in ("E", "A", "B", "alpha", "beta")}
    for p in PER_STRATEGY:
        got = cd_overfit_loss(N4, D4, 0.0, **SHARED, **p)
        np.testing.assert_array_equal(got, chinchilla_loss(N4, D4, **chin))


def test_practical_stays_between_irreducible_loss_and_uninformed_baseline():
    rng = np.random.default_rng(3)
    n = 20000
    N, D = 10.0 ** rng.uniform(-3, 15, n), 10.0 ** rng.uniform(-3, 15, n)
    Dp = D * rng.choice([0.0, 0.1, 1.0, 30.0, 1e6], n)
    p = dict(PRACTICAL, gamma=rng.uniform(0, 2, n), delta=rng.uniform(0.05, 2, n))
    L = practical_loss(N, D, Dp, L0=L0, **p)
    assert np.all(np.isfinite(L))
    assert np.all((p["E"] <= L) & (L <= L0))
    # strictly inside wherever h is neither negligible nor overwhelming in float64
    h = practical_h(N, D, Dp, **{k: v for k, v in p.items() if k != "E"})
    inside = (h > 1e-12) & (h < 1e12)
    assert inside.sum() > n / 2
    assert np.all((p["E"] < L[inside]) & (L[inside] < L0))


def test_practical_limits():
    big = np.array([1e12, 1e16, 1e20, 1e24])
    # N, T, D → ∞ with D = N² so that c·N^γ/D^δ = c·N^(γ−2δ) → 0 too (γ = 0.6 < 2δ = 1)
    L = practical_loss(big, big**2, 0.0, L0=L0, **PRACTICAL)
    assert np.all(np.diff(L) < 0)
    np.testing.assert_allclose(L[-1], PRACTICAL["E"], rtol=1e-5)
    # N → 0: the undercapacity term diverges and L → L0
    tiny = np.array([1e-4, 1e-8, 1e-16, 1e-40, 0.0])
    L = practical_loss(tiny, 1e6, 1e6, L0=L0, **PRACTICAL)
    assert np.all(np.diff(L[:-1]) > 0)
    np.testing.assert_allclose(L[-2:], L0, rtol=1e-12)
    # data-rich, single-epoch: Chinchilla with A = (L0 − E)·a, B = (L0 − E)·b
    N, D = np.array([1e12, 1e13]), np.array([1e15, 1e16])
    p = dict(PRACTICAL, c=0.0)
    span = L0 - p["E"]
    chin = chinchilla_loss(N, D, p["E"], span * p["a"], span * p["b"], p["alpha"], p["beta"])
    got = practical_loss(N, D, 0.0, L0=L0, **p)
    np.testing.assert_allclose(got - p["E"], chin - p["E"], rtol=1e-3)


# ---------------------------------------------------------------------------------------
# Overfitting: the loss rises with D′ past its minimiser
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [0, 1])
def test_loss_rises_past_its_minimiser_which_matches_a_dense_grid(strategy):
    p = {**SHARED, **PER_STRATEGY[strategy]}
    N = np.array([2e4, 2e4, 2e5, 2e6, 2e6])
    D = np.array([1e4, 4e5, 4e5, 1e6, 4e7])
    r_star = cd_overfit_best_ratio(N, D, **p)
    np.testing.assert_allclose(cd_overfit_best_derived_tokens(N, D, **p), r_star * D)
    assert np.all(np.isfinite(r_star) & (r_star > 0))
    r = np.geomspace(1e-3, 1e5, 200001)  # step 0.009% in r
    for i in range(len(N)):
        L = cd_overfit_loss(N[i], D[i], r * D[i], **p)
        best = int(np.argmin(L))
        assert 0 < best < len(r) - 1
        np.testing.assert_allclose(r_star[i], r[best], rtol=2e-4)
        L_star = cd_overfit_loss(N[i], D[i], r_star[i] * D[i], **p)
        assert L_star <= L[best] + 1e-12
        after = r > r_star[i]
        assert np.all(np.diff(L[after]) > 0)  # beyond r*, every derived token hurts
        assert np.all(np.diff(L[~after]) < 0)
        assert L[-1] > L_star + 0.05  # and by a lot at many passes


def test_minimiser_edge_cases():
    p = {**SHARED, **PER_STRATEGY[0]}
    N, D = np.array([2e4, 2e6]), np.array([1e4, 4e7])
    assert np.all(np.isinf(cd_overfit_best_ratio(N, D, **dict(p, lam=0.0))))
    assert np.all(cd_overfit_best_ratio(N, D, **dict(p, lam=1e3)) == 0.0)
    # no penalty: the CD law only falls with D′
    r = np.geomspace(1e-3, 1e5, 1001)
    L = cd_overfit_loss(2e4, 1e4, r * 1e4, **dict(p, lam=0.0))
    assert np.all(np.diff(L) <= 0)


# ---------------------------------------------------------------------------------------
# Recovery from a noisy table (the real fitter is wired later: least squares here)
# ---------------------------------------------------------------------------------------


def least_squares_fit(f, theta0, y, lower, upper):
    """Minimise Σ (log L − y)² with the batched law's analytic Jacobian.

    The Jacobian is the VJP of n copies of theta against the identity: row i of
    vjp(I) is ∂log L_i/∂theta.
    """
    n = len(y)

    def residual(t):
        return f(t[None])[0][0] - y

    def jacobian(t):
        _, vjp = f(np.tile(t, (n, 1)))
        return vjp(np.eye(n))

    return least_squares(
        residual, theta0, jac=jacobian, bounds=(lower, upper), method="trf", x_scale="jac"
    )


def best_of_starts(f, truth, y, lower, upper, spread, rng, n_starts=3):
    fits = []
    for _ in range(n_starts):
        theta0 = np.clip(truth + rng.uniform(-1, 1, len(truth)) * spread, lower, upper)
        fits.append(least_squares_fit(f, theta0, y, lower, upper))
    return min(fits, key=lambda r: r.cost)


def test_practical_recovers_its_parameters():
    rng = np.random.default_rng(11)
    N, D, r = (x.ravel() for x in np.meshgrid(SIZES, TOKENS_PER_PARAM, np.r_[0, RATIOS]))
    D = D * N
    L = practical_loss(N, D, r * D, L0=L0, **PRACTICAL)
    y = np.log(L * (1 + 0.005 * rng.standard_normal(len(L))))
    truth = practical_fit_vector(**PRACTICAL)
    # e, log a, log b, α, β, log c, γ, δ
    lower = np.array([-15, -15, -15, 0.005, 0.005, -30, 0.0, 0.005])
    upper = np.array([np.log(L0) - 1e-3, 30, 30, 3, 3, 10, 3, 3])
    spread = np.array([0.3, 0.5, 0.5, 0.1, 0.1, 0.5, 0.1, 0.1])
    fit = best_of_starts(
        lambda t: practical_batched_log_loss(t, np.log(N), np.log(D), r, L0),
        truth,
        y,
        lower,
        upper,
        spread,
        rng,
    )
    assert fit.success
    exponents = [3, 4, 6, 7]  # α, β, γ, δ
    np.testing.assert_allclose(fit.x[exponents], truth[exponents], atol=0.02)
    assert abs(np.exp(fit.x[5]) / PRACTICAL["c"] - 1) < 0.10  # the overfitting coefficient


def test_cd_overfit_recovers_its_parameters():
    rng = np.random.default_rng(12)
    N, D, ratio, group, slices = strategy_table()
    L = cd_overfit_table_loss(N, D, ratio, group)
    y = np.log(L * (1 + 0.005 * rng.standard_normal(len(L))))
    truth = cd_overfit_fit_vector(SHARED, PER_STRATEGY)
    # e, a, b, α, β, μ, then per strategy k, ρ, σ, l
    lower = np.r_[-15, -15, -15, 0.005, 0.005, -2, [-12, -5, -5, -15] * 2]
    upper = np.r_[3, 30, 30, 3, 3, 3, [30, 5, 5, 5] * 2]
    spread = np.r_[0.3, 0.5, 0.5, 0.1, 0.1, 0.1, [0.5, 0.1, 0.1, 0.5] * 2]
    fit = best_of_starts(
        lambda t: cd_overfit_batched_log_loss(t, np.log(N), np.log(D), ratio, slices),
        truth,
        y,
        lower,
        upper,
        spread,
        rng,
    )
    assert fit.success
    exponents = [3, 4, 5, 7, 8, 11, 12]  # α, β, μ, and ρ, σ of each strategy
    np.testing.assert_allclose(fit.x[exponents], truth[exponents], atol=0.02)
    for j, p in enumerate(PER_STRATEGY):  # the overfitting coefficients λ
        assert abs(np.exp(fit.x[9 + 4 * j]) / p["lam"] - 1) < 0.10
