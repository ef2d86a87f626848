"""The data-constrained law of Muennighoff et al. 2023 ("Scaling Data-Constrained Language
Models", arXiv 2305.16264, eqs. 5–7), with both decay terms.

    G      = (α·A/(β·B))^(1/(α+β))
    N*(D)  = G·(G·D)^(β/α)                    the Chinchilla-optimal N for D tokens
    U_N    = min(N, N*(D)),  R_N = N/U_N − 1
    D_eff  = D + D·R*_D·(1 − e^(−r/R*_D))
    N_eff  = U_N + U_N·R*_N·(1 − e^(−R_N/R*_N))
    L      = E + A/N_eff^α + B/D_eff^β

E, A, B, α, β are Chinchilla's (cdlaw.laws.chinchilla). Each strategy has its own constant
R*_D; R*_N (excess parameters) acts on D′ = 0 rows too, so the fit keeps one for every
strategy (fit.json still stores it under each). Fit vector: e, a, b, α, β, log R*_N, then
per strategy log R*_D.
"""

from __future__ import annotations

import numpy as np

from cdlaw.laws import chinchilla
from cdlaw.laws.cd import batched_log_effective_data, effective_data
from cdlaw.laws.chinchilla import chinchilla_loss, chinchilla_optimal_n_for_data
from cdlaw.laws.form import LawForm, Rows
from cdlaw.laws.log_terms import data_grads, data_term, floor_grad, log_sum, through_rstar


def muennighoff_loss(N, D, Dp, E, A, B, alpha, beta, rstar_d, rstar_n):
    """The data-constrained law of Muennighoff et al. 2023 (eqs. 5–7), both decay terms.

    U_D = D unique tokens repeated R_D = D′/D extra times; U_N = min(N, N*(U_D)) and
    R_N = N/U_N − 1 extra "repeated" parameters; each decays with its own R*:
        D' = U_D + U_D·R*_D·(1 − e^(−R_D/R*_D)),  N' = U_N + U_N·R*_N·(1 − e^(−R_N/R*_N)).
    """
    N = np.asarray(N, dtype=float)
    D_eff = effective_data(D, Dp, rstar_d)
    U_N = np.minimum(N, chinchilla_optimal_n_for_data(D, A, B, alpha, beta))
    N_eff = effective_data(U_N, N - U_N, rstar_n)
    return chinchilla_loss(N_eff, D_eff, E, A, B, alpha, beta)


def loss(p, N, D, Dp):
    # Strategy "none" has no R*_D; D′ = 0 leaves D_eff = D whatever it is (∞: D + D′).
    rstar_d = p.get("rstar_d", np.inf)
    return muennighoff_loss(N, D, Dp, *(p[k] for k in chinchilla.SHARED), rstar_d, p["rstar_n"])


def rstar_of(p, N, D):
    return np.broadcast_to(float(p["rstar_d"]), np.broadcast(N, D).shape)


def identify(strategy, n_params, tokens_per_param) -> str | None:
    if len(n_params) < 2:
        return (
            f"strategy {strategy} has {len(n_params)} run(s) with derived tokens; its R*_D "
            "needs at least 2"
        )
    return None


def batched_log_loss(theta, rows: Rows):
    """log L (S, n) and its VJP (the LawForm.log_loss_vjp contract)."""
    theta = np.asarray(theta, dtype=float)
    logN, logD = rows.logN, rows.logD
    e, a, b, alpha, beta = (theta[:, j : j + 1] for j in range(5))
    first = 6

    def rstar_at(j, sl):  # one constant R*_D per strategy
        return np.repeat(np.exp(theta[:, first + j : first + j + 1]), sl.stop - sl.start, 1)

    lDeff, dlogR = batched_log_effective_data(
        theta.shape[0], logD, rows.ratio, rows.slices, rstar_at
    )
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # U_N = min(N, N*(D)); log N*(D) = (log α − log β + a − b + β log D)/α
        lrn = theta[:, 5:6]
        lNstar = (np.log(alpha) - np.log(beta) + a - b + beta * logD) / alpha
        excess = lNstar < logN
        q = np.where(excess, np.expm1(np.minimum(logN - lNstar, 700.0)), 0.0)  # N/U_N − 1
        Rn = np.exp(lrn)
        em1n = np.expm1(-q / Rn)
        Gn = -Rn * em1n
        lNeff = np.where(excess, lNstar + np.log1p(Gn), logN)
        dN_dstar = np.where(excess, 1.0 - (1.0 + em1n) * (q + 1.0) / (1.0 + Gn), 0.0)
        dN_drn = np.where(excess, (Gn - q * (1.0 + em1n)) / (1.0 + Gn), 0.0)
        T2 = np.exp(a - alpha * lNeff)
        E = np.exp(e)
        T3 = data_term(lDeff, b, beta)
        total, logL = log_sum(E, T2, T3)

    def vjp(w):
        g = np.zeros_like(theta)
        wt = floor_grad(w, total, E, g)
        wp2 = wt * T2
        g[:, 1] = wp2.sum(axis=1)
        wp3 = data_grads(wt, T3, lDeff, g)
        g[:, 3] = -np.einsum("sn,sn->s", wp2, lNeff)
        ws = -alpha * wp2 * dN_dstar  # ∂/∂log N*, through log N_eff
        a_ = alpha[:, 0]
        sum_ws = ws.sum(axis=1)
        g[:, 1] += sum_ws / a_
        g[:, 2] -= sum_ws / a_
        g[:, 3] += np.einsum("sn,sn->s", ws, (1.0 / alpha - lNstar)) / a_
        g[:, 4] += (ws @ logD - sum_ws / beta[:, 0]) / a_
        g[:, 5] = np.einsum("sn,sn->s", -alpha * wp2, dN_drn)
        for j, _, wR in through_rstar(wp3, dlogR, beta, rows.slices):
            g[:, first + j] = wR.sum(axis=1)  # ∂/∂log R*_D
        return g

    return logL, vjp


MUENNIGHOFF = LawForm(
    name="muennighoff",
    source="Muennighoff et al. 2023, arXiv 2305.16264, eqs. 5-7",
    shared=chinchilla.SHARED,
    strategy_params=("rstar_d", "rstar_n"),
    tied=("rstar_n",),
    loss=loss,
    model_floor=chinchilla.model_floor,
    log_params=chinchilla.LOG_PARAMS | {"rstar_d", "rstar_n"},
    positive=chinchilla.POSITIVE | {"rstar_d", "rstar_n"},
    nonnegative=chinchilla.NONNEGATIVE,
    huber_delta=1e-3,  # as Chinchilla's fit, which Muennighoff et al. follow
    bounds=chinchilla.BOUNDS,  # log R*_D, log R*_N: ±12
    centring=chinchilla.CENTRING,
    start_axes=(*chinchilla.START_AXES, ("rstar_d", (0.0, 4.0)), ("rstar_n", (0.0, 4.0))),
    log_loss_vjp=batched_log_loss,
    rstar=rstar_of,
    identify=identify,
)
