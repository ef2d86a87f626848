"""The fit's encoding of a law: log-space parameter vectors, and log L for a batch of them.

The fit works on vectors of log-space parameters (E = e^e, A = e^a, B = e^b, K = e^k, as in
the CD paper's and Chinchilla's fits), not on Law objects; this module converts between the
two and evaluates log L with its analytic gradient for thousands of vectors at once.
"""

from __future__ import annotations

import numpy as np

from cdlaw.law import SHARED_PARAMS, STRATEGY_PARAMS, Law

# ---------------------------------------------------------------------------------------
# The fit's view of the law: log L for a batch of log-space parameter vectors at once,
# with analytic gradients, for cdlaw.fit.optim.
#
# A fit vector holds, in this order (E, A, B, K, R*_D, R*_N as logs):
#   cd:          e, a, b, alpha, beta, then per strategy k, rho, sigma
#   muennighoff: e, a, b, alpha, beta, log R*_N, then per strategy log R*_D
#   chinchilla:  e, a, b, alpha, beta
# R*_N (excess parameters) acts on D′ = 0 rows too, so the muennighoff fit shares one.
# ---------------------------------------------------------------------------------------

# Parameters stored as logs in a fit vector (their public values are e^x).
LOG_PARAMS = ("E", "A", "B", "K", "rstar_d", "rstar_n")


def fit_vector_names(form: str, strategies) -> list[str]:
    """Public names of a fit vector's entries, as fit.json's ci95 / bootstrap_params use."""
    names = list(SHARED_PARAMS)
    if form == "muennighoff":
        names.append("rstar_n")
        names += [f"{s}.rstar_d" for s in strategies]
    elif form == "cd":
        names += [f"{s}.{p}" for s in strategies for p in STRATEGY_PARAMS["cd"]]
    return names


def _is_log_param(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in LOG_PARAMS


def fit_vector_to_public(form: str, strategies, theta) -> np.ndarray:
    """Log-space fit vector(s) → public values (E, A, B, K, R* exponentiated)."""
    theta = np.array(theta, dtype=float)
    for j, name in enumerate(fit_vector_names(form, strategies)):
        if _is_log_param(name):
            theta[..., j] = np.exp(theta[..., j])
    return theta


def fit_vector_from_public(form: str, strategies, values) -> np.ndarray:
    """The inverse of fit_vector_to_public."""
    values = np.array(values, dtype=float)
    for j, name in enumerate(fit_vector_names(form, strategies)):
        if _is_log_param(name):
            values[..., j] = np.log(values[..., j])
    return values


def law_from_public_vector(form: str, strategies, values, source: str = "") -> Law:
    """A Law from one public-valued vector in fit_vector_names order (e.g. a bootstrap row)."""
    p = dict(zip(fit_vector_names(form, strategies), (float(v) for v in values), strict=True))
    per = {}
    for s in strategies:
        if form == "cd":
            per[s] = {k: p[f"{s}.{k}"] for k in STRATEGY_PARAMS["cd"]}
        elif form == "muennighoff":
            per[s] = {"rstar_d": p[f"{s}.rstar_d"], "rstar_n": p["rstar_n"]}
    E, A, B, alpha, beta = (p[k] for k in SHARED_PARAMS)
    return Law(form, E, A, B, alpha, beta, per, source)


def law_to_public_vector(law: Law, strategies) -> list[float]:
    """A Law's public values in fit_vector_names order (strategies in the given order)."""
    vals = [getattr(law, k) for k in SHARED_PARAMS]
    if law.form == "muennighoff":
        vals.append(law.strategy_params(strategies[0])["rstar_n"])
        vals += [law.strategy_params(s)["rstar_d"] for s in strategies]
    elif law.form == "cd":
        vals += [law.strategy_params(s)[k] for s in strategies for k in STRATEGY_PARAMS["cd"]]
    return [float(v) for v in vals]


def law_to_fit_vector(law: Law, strategies) -> np.ndarray:
    """The log-space fit vector of a Law (strategies in the given order)."""
    return fit_vector_from_public(law.form, strategies, law_to_public_vector(law, strategies))


def batched_log_loss(form: str, theta, logN, logD, ratio, strategy_slices):
    """log L for S fit vectors at n rows at once, and its vector–Jacobian product.

    theta: (S, P) log-space fit vectors (order above). logN, logD, ratio = D′/D: (n,).
    strategy_slices: one slice of rows per strategy, in the fit vector's strategy order;
    rows outside every slice have D′ = 0 (sorting rows by strategy makes these views).
    Returns (logL (S, n), vjp) with vjp(w (S, n)) = Σ_i w_si ∂logL_si/∂theta_s (S, P).

    Written for speed (the fit calls it for thousands of starts): linear pieces go through
    matrix products and the elementwise work is done in place.
    """
    theta = np.asarray(theta, dtype=float)
    S, n = theta.shape[0], logD.shape[0]
    e, a, b, alpha, beta = (theta[:, j : j + 1] for j in range(5))
    first = 6 if form == "muennighoff" else 5
    lDeff = np.empty((S, n))
    derived = np.zeros(n, bool)
    for sl in strategy_slices:
        derived[sl] = True
    lDeff[:, ~derived] = logD[~derived]
    dlogR = []  # per strategy: ∂log D_eff/∂log R* on its rows
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j, sl in enumerate(strategy_slices):
            if form == "cd":  # log R* = k + ρ·log(D/N) + σ·log N
                X = np.stack([np.ones_like(logN[sl]), logD[sl] - logN[sl], logN[sl]])
                R = np.exp(theta[:, first + 3 * j : first + 3 * j + 3] @ X)
            else:  # muennighoff: one constant R*_D per strategy
                R = np.repeat(np.exp(theta[:, first + j : first + j + 1]), sl.stop - sl.start, 1)
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
        lNeff = logN
        if form == "muennighoff":
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
        else:
            # A/N^α takes one value per model size: exponentiate those, then spread them.
            lNu, at_size = np.unique(logN, return_inverse=True)
            T2u = np.exp(theta[:, [1, 3]] @ np.stack([np.ones_like(lNu), -lNu]))
            T2 = T2u[:, at_size]
        E = np.exp(e)
        T3 = np.multiply(lDeff, -beta)
        T3 += b
        np.exp(T3, out=T3)
        total = T2 + T3
        total += E
        logL = np.log(total)

    def vjp(w):
        g = np.zeros_like(theta)
        wt = np.divide(w, total)
        g[:, 0] = wt.sum(axis=1) * E[:, 0]
        if form != "muennighoff":  # through the per-size values: Σ_sizes T2u·(Σ_rows wt)
            per_size = wt @ (at_size[:, None] == np.arange(len(lNu))).astype(float)
            per_size *= T2u
            g[:, 1] = per_size.sum(axis=1)
            g[:, 3] = -(per_size @ lNu)
        else:
            wp2 = wt * T2
            g[:, 1] = wp2.sum(axis=1)
        wp3 = np.multiply(wt, T3, out=wt)
        g[:, 2] = wp3.sum(axis=1)
        g[:, 4] = -np.einsum("sn,sn->s", wp3, lDeff)
        if form == "muennighoff":
            g[:, 3] = -np.einsum("sn,sn->s", wp2, lNeff)
            ws = -alpha * wp2 * dN_dstar  # ∂/∂log N*, through log N_eff
            a_ = alpha[:, 0]
            sum_ws = ws.sum(axis=1)
            g[:, 1] += sum_ws / a_
            g[:, 2] -= sum_ws / a_
            g[:, 3] += np.einsum("sn,sn->s", ws, (1.0 / alpha - lNstar)) / a_
            g[:, 4] += (ws @ logD - sum_ws / beta[:, 0]) / a_
            g[:, 5] = np.einsum("sn,sn->s", -alpha * wp2, dN_drn)
        for j, sl in enumerate(strategy_slices):
            wR = np.multiply(wp3[:, sl], dlogR[j])
            wR *= -beta  # ∂/∂log R*
            if form == "cd":
                c = first + 3 * j
                g[:, c : c + 3] = (
                    wR @ np.stack([np.ones_like(logN[sl]), logD[sl] - logN[sl], logN[sl]]).T
                )
            else:
                g[:, first + j] = wR.sum(axis=1)
        return g

    return logL, vjp
