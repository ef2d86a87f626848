"""The compute–data (CD) law (Qin, Hamidieh, Alvarez-Melis, arXiv 2607.25271).

    L(N, D, D′) = E + A/N^α + B/(D + η·D′)^β                           CD paper, eq. 1
    η = (R*/r)(1 − e^(−r/R*)),   r = D′/D                              CD paper, eq. 2
    R* = K·(D/N)^ρ·N^σ          (one K, ρ, σ per strategy)             CD paper, eq. 3

E, A, B, α, β are Chinchilla's (cdlaw.laws.chinchilla); each derived strategy has its own
K, ρ, σ. Fit vector: e, a, b, α, β, then per strategy k, ρ, σ (K = e^k), with

    log L      = logsumexp(e, a − α·log N, b − β·log D_eff)
    log D_eff  = log D + log1p(R*·(1 − e^(−r/R*)))
    log R*     = k + ρ·log(D/N) + σ·log N
"""

from __future__ import annotations

import numpy as np

from cdlaw.laws import chinchilla
from cdlaw.laws.chinchilla import batched_log_loss_at, chinchilla_loss, linear_terms_at
from cdlaw.laws.form import Centring, LawForm, Rows
from cdlaw.laws.log_terms import through_rstar
from cdlaw.units import counted

STRATEGY_PARAMS = ("K", "rho", "sigma")


def rstar(N, D, K, rho, sigma):
    """R*(D, N) = K·(D/N)^ρ·N^σ: how many epochs' worth of derived tokens D can absorb."""
    N = np.asarray(N, dtype=float)
    D = np.asarray(D, dtype=float)
    return K * (D / N) ** rho * N**sigma


def eta(r, R):
    """η(r) = (R*/r)(1 − e^(−r/R*)), the worth of a derived token relative to a fresh one.

    η → 1 as r → 0 (the first derived tokens are as good as fresh) and η → R*/r as r → ∞.
    Computed with expm1 so that small r keeps full precision.
    """
    r = np.asarray(r, dtype=float)
    R = np.asarray(R, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -R * np.expm1(-r / R) / r
    return np.where(r == 0, 1.0, out)


def effective_data(D, Dp, R):
    """D_eff = D + η·D′ = D + D·R*·(1 − e^(−(D′/D)/R*)); saturates at D·(1 + R*).

    D′ = 0 gives exactly D, and D′ = ∞ gives exactly D·(1 + R*).
    """
    D = np.asarray(D, dtype=float)
    Dp = np.asarray(Dp, dtype=float)
    R = np.asarray(R, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gain = D * R * -np.expm1(-(Dp / D) / R)
    # R* = 0 means derived tokens are worthless (0·∞ guards); R* = ∞ means they are fresh.
    gain = np.where(R == 0, 0.0, gain)
    gain = np.where(np.isinf(R), Dp, gain)
    return D + gain


def cd_loss(N, D, Dp, E, A, B, alpha, beta, K, rho, sigma):
    """The CD law, L(N, D, D′) = E + A/N^α + B/(D + η·D′)^β with R* = K·(D/N)^ρ·N^σ."""
    D_eff = effective_data(D, Dp, rstar(N, D, K, rho, sigma))
    return chinchilla_loss(N, D_eff, E, A, B, alpha, beta)


def cd_log_loss(logN, logD, logDp, e, a, b, alpha, beta, k, rho, sigma):
    """log L = logsumexp(e, a − α·log N, b − β·log D_eff), the form the fit minimises in.

    E = e^e, A = e^a, B = e^b, K = e^k (docs/law.md, as in the CD paper's and Chinchilla's fits).
    logDp may be −inf (D′ = 0). Returns log L; stable for any parameter values.
    """
    log_r = logDp - logD
    log_R = k + rho * (logD - logN) + sigma * logN
    # log D_eff = log D + log(1 + R*·(1 − e^(−r/R*)))
    x = np.exp(log_r - log_R)  # r / R*
    gain = np.exp(log_R) * -np.expm1(-x)
    log_Deff = logD + np.log1p(gain)
    return np.logaddexp(np.logaddexp(e, a - alpha * logN), b - beta * log_Deff)


def loss(p, N, D, Dp):
    if "K" not in p:  # strategy "none": no R*, and D′ counts for nothing
        return chinchilla.loss(p, N, D, Dp)
    return cd_loss(N, D, Dp, *(p[k] for k in (*chinchilla.SHARED, *STRATEGY_PARAMS)))


def rstar_of(p, N, D):
    return rstar(N, D, p["K"], p["rho"], p["sigma"])


def identify(strategy, n_params, tokens_per_param) -> str | None:
    """K, ρ, σ need derived-token rows at ≥ 2 sizes and ≥ 2 tokens-per-param ratios."""
    X = np.column_stack([np.ones(len(n_params)), np.log(tokens_per_param), np.log(n_params)])
    if len(n_params) >= 3 and np.linalg.matrix_rank(X, tol=1e-6) >= 3:
        return None
    n_sizes = len(np.unique(n_params))
    lack = (
        f"only {counted(n_sizes, 'model size')}"
        if n_sizes < 2
        else f"only {len(np.unique(tokens_per_param))} tokens-per-param value(s) per size"
    )
    return (
        f"strategy {strategy}'s runs with derived tokens cover {lack} ({counted(len(n_params), 'row')}), "
        "so its K, rho and sigma cannot be told apart; add runs at ≥ 2 sizes and ≥ 2 "
        "tokens-per-param ratios, or fit --law muennighoff (one R* per strategy)"
    )


# ---------------------------------------------------------------------------------------
# The fit's view: log L for a batch of fit vectors, with its analytic gradient.
# ---------------------------------------------------------------------------------------


def batched_log_effective_data(S, logD, ratio, slices, rstar_at):
    """log D_eff (S, n) for S fit vectors, and per strategy ∂log D_eff/∂log R* on its rows.

    rstar_at(j, sl) gives R* (S, rows of sl) for strategy j; it is overwritten here.
    Rows outside every slice have D′ = 0, so D_eff = D there.
    """
    n = logD.shape[0]
    lDeff = np.empty((S, n))
    derived = np.zeros(n, bool)
    for sl in slices:
        derived[sl] = True
    lDeff[:, ~derived] = logD[~derived]
    dlogR = []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j, sl in enumerate(slices):
            R = rstar_at(j, sl)
            em1 = np.divide(-ratio[sl], R)
            np.expm1(em1, out=em1)  # e^(−r/R*) − 1
            G = np.multiply(R, em1, out=R)
            np.negative(G, out=G)  # R*(1 − e^(−r/R*)): derived tokens' worth, in units of D
            np.add(np.log1p(G), logD[sl], out=lDeff[:, sl])
            # ∂log D_eff/∂log R* = (G − r·e^(−r/R*))/(1 + G)
            em1 += 1.0
            em1 *= ratio[sl]
            np.subtract(G, em1, out=em1)
            G += 1.0
            dlogR.append(np.divide(em1, G, out=em1))
    return lDeff, dlogR


def _features(rows: Rows, sl: slice) -> np.ndarray:
    """(1, log(D/N), log N) on a strategy's rows: log R* = (k, ρ, σ) · these."""

    def make():
        logN, logD = rows.logN[sl], rows.logD[sl]
        return np.stack([np.ones_like(logN), logD - logN, logN])

    return rows.once(f"cd.features {sl.start}:{sl.stop}", make)


def _log_effective_data(theta, rows: Rows):
    """log D_eff (S, n) for S fit vectors and its derivative in log R*, each strategy's R*
    from its K, ρ, σ."""
    first = len(chinchilla.SHARED)

    def rstar_at(j, sl):
        return np.exp(theta[:, first + 3 * j : first + 3 * j + 3] @ _features(rows, sl))

    return batched_log_effective_data(theta.shape[0], rows.logD, rows.ratio, rows.slices, rstar_at)


def _rstar_gradient(g, wp3, dlogR, theta, rows: Rows):
    """g with each strategy's ∂/∂(k, ρ, σ) filled in, through log R*."""
    first = len(chinchilla.SHARED)
    for j, sl, wR in through_rstar(wp3, dlogR, theta[:, 4:5], rows.slices):
        c = first + 3 * j
        g[:, c : c + 3] = wR @ _features(rows, sl).T
    return g


def batched_log_loss(theta, rows: Rows):
    """log L (S, n) and its VJP (the LawForm.log_loss_vjp contract)."""
    theta = np.asarray(theta, dtype=float)
    lDeff, dlogR = _log_effective_data(theta, rows)
    logL, core = batched_log_loss_at(theta, rows.sizes, lDeff)

    def vjp(w):
        g, wp3 = core(w)
        return _rstar_gradient(g, wp3, dlogR, theta, rows)

    return logL, vjp


def linear_terms(theta, rows: Rows):
    """1, N^−α, D_eff^−β for S fit vectors, with their VJP (the LawForm.linear_terms
    contract): D_eff, through R*, carries each strategy's K, ρ, σ."""
    theta = np.asarray(theta, dtype=float)
    first = len(chinchilla.SHARED)

    def rstar_at(j, sl):
        return np.exp(theta[:, first + 3 * j : first + 3 * j + 3] @ _features(rows, sl))

    lDeff, dlogR = batched_log_effective_data(
        theta.shape[0], rows.logD, rows.ratio, rows.slices, rstar_at
    )
    Phi, core = linear_terms_at(theta, rows.sizes, lDeff)

    def vjp(W):
        g, wp3 = core(W)
        for j, sl, wR in through_rstar(wp3, dlogR, theta[:, 4:5], rows.slices):
            c = first + 3 * j
            g[:, c : c + 3] = wR @ _features(rows, sl).T
        return g

    return Phi, vjp


CD = LawForm(
    name="cd",
    source="Qin, Hamidieh, Alvarez-Melis, arXiv 2607.25271, eqs. 1-3",
    shared=chinchilla.SHARED,
    strategy_params=STRATEGY_PARAMS,
    loss=loss,
    model_floor=chinchilla.model_floor,
    log_params=chinchilla.LOG_PARAMS | {"K"},
    positive=chinchilla.POSITIVE | {"K"},
    nonnegative=chinchilla.NONNEGATIVE,
    huber_delta=0.1,  # the CD paper's fit
    bounds={**chinchilla.BOUNDS, "rho": (-5.0, 5.0), "sigma": (-5.0, 5.0)},  # k: ±12
    # log R* = k + ρ·log(D/N) + σ·log N, k taken at the mean of the strategy's rows
    centring=(
        *chinchilla.CENTRING,
        Centring("K", "rho", 1, "log_tokens_per_param"),
        Centring("K", "sigma", 1, "log_n_params"),
    ),
    # every strategy starts from the same K, ρ, σ (its own rows then pull it away)
    start_axes=(
        *chinchilla.START_AXES,
        ("K", (-1.0, 5.0)),
        ("rho", (-1.5, 0.5)),
        ("sigma", (-1.5, 0.5)),
    ),
    log_loss_vjp=batched_log_loss,
    linear=chinchilla.LINEAR,
    linear_terms=linear_terms,
    rstar=rstar_of,
    identify=identify,
)
