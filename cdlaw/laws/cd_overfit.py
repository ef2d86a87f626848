"""The CD law with an overfitting penalty on derived tokens. Pure numpy.

    L(N, D, D′) = E + A/N^α + B/(D + η·D′)^β + λ_s·r·(N/D)^μ,      r = D′/D
    η = (R*/r)(1 − e^(−r/R*)),   R* = K·(D/N)^ρ·N^σ                 (per strategy s: K, ρ, σ, λ)

The first three terms are the CD law (Qin, Hamidieh, Alvarez-Melis, arXiv 2607.25271,
eqs. 1–3; cdlaw.laws.cd.cd_loss). The last is an additive overfitting penalty in the spirit of
Lovelace, Belardi, Kundurthy, Sudhakar, Weinberger, "Prescriptive Scaling Laws for Data
Constrained Training" (arXiv 2605.01640), who add to Chinchilla one additive term, with a
single fitted coefficient, for the excess loss that repetition causes. Their equation could
not be read from the stored copy of the paper (only its abstract), so this form is our
adaptation, not a transcription; docs/overfitting-laws.md derives it and says what it keeps.

- λ_s ≥ 0, one per strategy (repetition and paraphrase overfit differently); μ is shared:
  each derived pass over D adds λ_s·(N/D)^μ, more for a model with more parameters per
  unique token.
- λ = 0 gives the CD law exactly; D′ = 0 gives Chinchilla exactly (the penalty is 0 where
  r = 0).
- The gain from derived tokens saturates (D_eff → D·(1 + R*)) while the penalty grows
  linearly in r, so for λ > 0 the loss has a unique minimiser in D′
  (`cd_overfit_best_derived_tokens`), past which more derived tokens raise the loss.

Fit vector (logs of the positive scales E, A, B, K, λ), in this order:

    e, a, b, α, β, μ, then per strategy k, ρ, σ, l          (l = log λ)

which extends cdlaw.fit.vector's cd vector (e, a, b, α, β, then per strategy k, ρ, σ) the
way its muennighoff vector does: shared parameters first (μ in the slot where muennighoff
keeps log R*_N), then per strategy. l = −∞ (λ = 0) is the CD law; a fit bounds l below
instead (e.g. −15: λ ≈ 3·10⁻⁷ nats per pass).

Registered as `cd-overfit` (CD_OVERFIT, below): source the idea, an additive
one-coefficient overfitting penalty, to Lovelace et al. (arXiv 2605.01640); the exact form
is cdlaw's own (docs/overfitting-laws.md). It can overfit (LawForm.can_overfit), and its
derived_optimum is cd_overfit_best_derived_tokens.
"""

from __future__ import annotations

import numpy as np

from cdlaw.laws import cd, chinchilla
from cdlaw.laws.cd import cd_loss  # not cdlaw.law, which imports this package
from cdlaw.laws.form import Centring, LawForm, LogLosses, Rows

CD_OVERFIT_SHARED = ("E", "A", "B", "alpha", "beta", "mu")
CD_OVERFIT_STRATEGY = ("K", "rho", "sigma", "lam")
N_SHARED = len(CD_OVERFIT_SHARED)
N_PER_STRATEGY = len(CD_OVERFIT_STRATEGY)
# Entries of the fit vector that are logs of the public values.
CD_OVERFIT_LOG_PARAMS = ("E", "A", "B", "K", "lam")


def overfit_penalty(N, D, Dp, lam, mu):
    """λ·r·(N/D)^μ with r = D′/D: exactly 0 where D′ = 0 or λ = 0 (even at D′ = ∞)."""
    N, D, Dp = (np.asarray(x, dtype=float) for x in (N, D, Dp))
    r = Dp / D
    with np.errstate(invalid="ignore", over="ignore"):
        p = lam * r * (N / D) ** mu
    return np.where((r > 0) & (np.asarray(lam) != 0), p, 0.0)


def cd_overfit_loss(N, D, Dp, E, A, B, alpha, beta, K, rho, sigma, lam, mu):
    """L = CD law + λ·r·(N/D)^μ (docs/overfitting-laws.md). λ = 0 is cd_loss exactly."""
    return cd_loss(N, D, Dp, E, A, B, alpha, beta, K, rho, sigma) + overfit_penalty(
        N, D, Dp, lam, mu
    )


def cd_overfit_best_ratio(N, D, E, A, B, alpha, beta, K, rho, sigma, lam, mu, iterations=200):
    """The derived ratio r* = D′/D that minimises L at fixed (N, D, strategy).

    With u = e^(−r/R*) ∈ (0, 1], ∂L/∂r = 0 reads φ(u) = c, where
        φ(u) = g·u·(1 + R*(1 − u))^(−β−1),   g = β·B·D^(−β),   c = λ·(N/D)^μ.
    φ rises from 0 (u = 0, r = ∞) to g (u = 1, r = 0), so:
    c ≥ g → r* = 0 (the first derived token already costs more than it gains);
    c = 0 (λ = 0) → r* = ∞ (derived tokens never hurt);
    otherwise one root, bracketed in closed form by g·u·(1 + R*)^(−β−1) ≤ φ(u) ≤ g·u:
        log(c/g) ≤ log u* ≤ log(c/g) + (β + 1)·log(1 + R*),
    and found by bisection in log u (vectorised); r* = −R*·log u*.
    """
    N, D, E, A, B, alpha, beta, K, rho, sigma, lam, mu = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (N, D, E, A, B, alpha, beta, K, rho, sigma, lam, mu))
    )
    R = K * (D / N) ** rho * N**sigma
    g = beta * B * D**-beta
    c = lam * (N / D) ** mu
    with np.errstate(divide="ignore", invalid="ignore"):
        lo = np.log(c / g)
        hi = np.minimum(lo + (beta + 1.0) * np.log1p(R), 0.0)
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            u = np.exp(mid)
            above = g * u * (1.0 + R * -np.expm1(mid)) ** (-beta - 1.0) > c
            hi = np.where(above, mid, hi)
            lo = np.where(above, lo, mid)
        r = -R * 0.5 * (lo + hi)
    r = np.where(c >= g, 0.0, r)
    return np.where(c > 0, r, np.inf)


def cd_overfit_best_derived_tokens(N, D, E, A, B, alpha, beta, K, rho, sigma, lam, mu):
    """D′* = r*·D: the most derived tokens worth training on (more would raise the loss)."""
    r = cd_overfit_best_ratio(N, D, E, A, B, alpha, beta, K, rho, sigma, lam, mu)
    return r * np.asarray(D, dtype=float)


# ---------------------------------------------------------------------------------------
# The fit's view: log L for a batch of log-space fit vectors, with an analytic gradient.
# ---------------------------------------------------------------------------------------


def cd_overfit_fit_vector(shared: dict, strategies: list[dict]) -> np.ndarray:
    """Public values → fit vector. shared: E, A, B, alpha, beta, mu; strategies: one dict
    of K, rho, sigma, lam per strategy, in the fit vector's strategy order."""
    v = [np.log(shared["E"]), np.log(shared["A"]), np.log(shared["B"])]
    v += [shared["alpha"], shared["beta"], shared["mu"]]
    for s in strategies:
        with np.errstate(divide="ignore"):
            v += [np.log(s["K"]), s["rho"], s["sigma"], np.log(s["lam"])]
    return np.array(v, dtype=float)


def cd_overfit_batched_log_loss(theta, logN, logD, ratio, strategy_slices):
    """log L for S fit vectors at n rows at once, and its vector–Jacobian product.

    theta: (S, 6 + 4·n_strategies) fit vectors (order in the module docstring). logN, logD,
    ratio = D′/D: (n,). strategy_slices: one slice of rows per strategy, in the fit vector's
    strategy order; rows outside every slice have D′ = 0 (as cdlaw.fit.vector).
    Returns (logL (S, n), vjp) with vjp(w (S, n)) = Σ_i w_si ∂logL_si/∂theta_s (S, P).

    log L = log(E + T_N + T_D + P) with T_N = e^(a − α log N), T_D = e^(b − β log D_eff),
    P = e^(l + log r + μ log(N/D)) on derived rows:
        log D_eff = log D + log1p(G),  G = R*(1 − e^(−r/R*)),
        log R*    = k + ρ·log(D/N) + σ·log N,
        ∂log D_eff/∂log R* = (G − r·e^(−r/R*))/(1 + G).
    """
    theta = np.asarray(theta, dtype=float)
    logN = np.asarray(logN, dtype=float)
    logD = np.asarray(logD, dtype=float)
    ratio = np.asarray(ratio, dtype=float)
    S, n = theta.shape[0], logD.shape[0]
    e, a, b, alpha, beta, mu = (theta[:, j : j + 1] for j in range(N_SHARED))
    lDeff = np.broadcast_to(logD, (S, n)).copy()
    P = np.zeros((S, n))
    lr = np.zeros(n)  # log r on derived rows (0 elsewhere: unused there)
    pos = ratio > 0
    lr[pos] = np.log(ratio[pos])
    lND = logN - logD
    dlogR = []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j, sl in enumerate(strategy_slices):
            c = N_SHARED + N_PER_STRATEGY * j
            k, rho, sigma, lam = (theta[:, c + i : c + i + 1] for i in range(N_PER_STRATEGY))
            R = np.exp(k + rho * (logD[sl] - logN[sl]) + sigma * logN[sl])
            r = ratio[sl]
            em1 = np.expm1(-r / R)  # e^(−r/R*) − 1
            G = -R * em1
            lDeff[:, sl] = logD[sl] + np.log1p(G)
            dlogR.append((G - r * (1.0 + em1)) / (1.0 + G))
            P[:, sl] = np.where(pos[sl], np.exp(lam + lr[sl] + mu * lND[sl]), 0.0)
        E = np.exp(e)
        TN = np.exp(a - alpha * logN)
        TD = np.exp(b - beta * lDeff)
        total = E + TN + TD + P
        logL = np.log(total)

    def vjp(w):
        w = np.asarray(w, dtype=float)
        g = np.zeros_like(theta)
        wt = w / total
        wN, wD, wP = wt * TN, wt * TD, wt * P
        g[:, 0] = (wt * E).sum(axis=1)
        g[:, 1] = wN.sum(axis=1)
        g[:, 2] = wD.sum(axis=1)
        g[:, 3] = -(wN @ logN)
        g[:, 4] = -np.einsum("sn,sn->s", wD, lDeff)
        g[:, 5] = wP @ lND
        for j, sl in enumerate(strategy_slices):
            c = N_SHARED + N_PER_STRATEGY * j
            wR = -beta * wD[:, sl] * dlogR[j]  # ∂/∂log R*
            g[:, c] = wR.sum(axis=1)
            g[:, c + 1] = wR @ (logD[sl] - logN[sl])
            g[:, c + 2] = wR @ logN[sl]
            g[:, c + 3] = wP[:, sl].sum(axis=1)
        return g

    return logL, vjp


# ---------------------------------------------------------------------------------------
# The declaration (docs/law.md, "Adding a law"; docs/overfitting-laws.md for the bounds).
# ---------------------------------------------------------------------------------------


def loss(p, N, D, Dp):
    if "K" not in p:  # strategy "none": no R*, no penalty, and D′ counts for nothing
        return chinchilla.loss(p, N, D, Dp)
    return cd_overfit_loss(
        N, D, Dp, *(p[k] for k in (*chinchilla.SHARED, "K", "rho", "sigma", "lam", "mu"))
    )


def derived_optimum(p, N, D):
    """D′* at (N, D): the derived tokens past which the strategy's loss rises."""
    return cd_overfit_best_derived_tokens(
        N, D, *(p[k] for k in (*chinchilla.SHARED, "K", "rho", "sigma", "lam", "mu"))
    )


def batched_log_loss(theta, rows: Rows):
    """log L (S, n) and its VJP (the LawForm.log_loss_vjp contract)."""
    return cd_overfit_batched_log_loss(theta, rows.logN, rows.logD, rows.ratio, rows.slices)


def _lam_bounds(t: LogLosses) -> tuple[float, float]:
    return -15.0, t.top  # −15 stands in for λ = 0 (3·10⁻⁷ nats per pass)


def _lam_starts(t: LogLosses) -> tuple[float, float]:
    # the penalty per pass at the table's centre, from 10⁻⁵ to 10⁻² of the median loss
    return t.mid + np.log(1e-5), t.mid + np.log(1e-2)


CD_OVERFIT = LawForm(
    name="cd-overfit",
    source=(
        "the CD law (Qin, Hamidieh, Alvarez-Melis, arXiv 2607.25271, eqs. 1-3) plus an "
        "additive one-coefficient overfitting penalty after Lovelace et al. (arXiv "
        "2605.01640); the exact form is cdlaw's own (docs/overfitting-laws.md)"
    ),
    shared=CD_OVERFIT_SHARED,
    strategy_params=CD_OVERFIT_STRATEGY,
    loss=loss,
    model_floor=chinchilla.model_floor,
    log_params=frozenset(CD_OVERFIT_LOG_PARAMS),
    positive=chinchilla.POSITIVE | {"K"},
    nonnegative=chinchilla.NONNEGATIVE | {"lam"},
    huber_delta=0.1,  # as cd
    bounds={**cd.CD.bounds, "mu": (-1.0, 3.0), "lam": _lam_bounds},
    # log R* as cd; the penalty's log λ − μ·log(D/N) taken at the strategy's mean D/N
    centring=(*cd.CD.centring, Centring("lam", "mu", -1, "log_tokens_per_param")),
    start_axes=(*cd.CD.start_axes, ("lam", _lam_starts), ("mu", (0.0, 1.0))),
    log_loss_vjp=batched_log_loss,
    rstar=cd.rstar_of,
    identify=cd.identify,
    can_overfit=True,
    vanishing=frozenset({"lam"}),
    derived_optimum=derived_optimum,
)
