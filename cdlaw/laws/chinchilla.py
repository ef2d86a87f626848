"""The Chinchilla law, L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022, arXiv 2203.15556, eq. 2).

Derived tokens are worth nothing to it: a fit uses only the D′ = 0 rows (or, with
--naive, every row with D′ counted as fresh). Its five parameters, and how the fit treats
them (bounds, centring, start axes), are shared by the cd and muennighoff forms, which
extend this law's data term; they import them from here.

Fit vector: e, a, b, α, β with E = e^e, A = e^a, B = e^b (as Chinchilla's own fit), and
    log L = logsumexp(e, a − α·log N, b − β·log D),
finite for every parameter value.
"""

from __future__ import annotations

import numpy as np

from cdlaw.laws.form import Centring, LawForm, LogLosses, PerSize, Rows, Span
from cdlaw.laws.log_terms import data_grads, data_term, floor_grad, log_sum

SHARED = ("E", "A", "B", "alpha", "beta")
LOG_PARAMS = frozenset({"E", "A", "B"})
POSITIVE = frozenset({"A", "B", "alpha", "beta"})  # a zero exponent has no optimal size
NONNEGATIVE = frozenset({"E"})
# The loss is E·1 + A·N^−α + B·D^−β: linear in E, A, B, which a fit solves (LawForm.linear).
LINEAR = ("E", "A", "B")


def chinchilla_loss(N, D, E, A, B, alpha, beta):
    """L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022, eq. 2)."""
    N = np.asarray(N, dtype=float)
    D = np.asarray(D, dtype=float)
    return E + A / N**alpha + B / D**beta


def chinchilla_optimal_n_for_data(D, A, B, alpha, beta):
    """The compute-optimal N whose optimal data is D, under the Chinchilla law.

    With G = (αA/(βB))^(1/(α+β)), the optimum at budget C is N* = G·(C/6)^(β/(α+β)) and
    D* = (C/6)^(α/(α+β))/G (Hoffmann et al. 2022, eq. 4), so N*(D) = G·(G·D)^(β/α).
    Muennighoff et al. 2023 use this as U_N, the "unique parameters" worth of U_D tokens.
    """
    G = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
    return G * (G * np.asarray(D, dtype=float)) ** (beta / alpha)


def loss(p, N, D, Dp):
    """The public loss: derived tokens change nothing."""
    return chinchilla_loss(N, D, *(p[k] for k in SHARED)) + 0 * Dp


def model_floor(p, N):
    """L_N = E + A/N^α: the loss with unlimited fresh data (every registered form)."""
    return p["E"] + p["A"] / np.asarray(N, dtype=float) ** p["alpha"]


# ---------------------------------------------------------------------------------------
# How the fit treats E, A, B, α, β. Intercepts are searched near the table's losses: E
# from 5% to 90% of the lowest loss, the model and data terms at the table's centre from
# 2% of the median loss to the highest loss (the one-epoch loss at the centre's D can lie
# well above the median of a table that is mostly derived-token runs, and nearly all of it
# can be the data term).
# ---------------------------------------------------------------------------------------


def _e_bounds(t: LogLosses) -> tuple[float, float]:
    return -15.0, t.top + 1.0


def _term_bounds(t: LogLosses) -> tuple[float, float]:
    return -15.0, t.top + 3.0


def _e_starts(t: LogLosses) -> tuple[float, float]:
    return t.low + np.log(0.05), t.low + np.log(0.9)


def _term_starts(t: LogLosses) -> tuple[float, float]:
    return t.mid + np.log(0.02), t.top


BOUNDS: dict[str, Span] = {
    "E": _e_bounds,
    "A": _term_bounds,
    "B": _term_bounds,
    "alpha": (0.005, 3.0),
    "beta": (0.005, 3.0),
}
# a − α·log N and b − β·log D, each intercept taken at the table's mean.
CENTRING = (
    Centring("A", "alpha", -1, "log_n_params"),
    Centring("B", "beta", -1, "log_fresh_tokens"),
)
START_AXES: tuple[tuple[str, Span], ...] = (
    ("alpha", (0.1, 1.0)),
    ("beta", (0.1, 1.0)),
    ("E", _e_starts),
    ("A", _term_starts),
    ("B", _term_starts),
)


def batched_log_loss_at(theta, sizes: PerSize, lDeff):
    """log L = logsumexp(e, a − α·log N, b − β·log D_eff) for S fit vectors at once.

    theta: (S, P) fit vectors whose first five entries are e, a, b, α, β; sizes: the rows'
    model sizes (Rows.sizes); lDeff: (S, n) log effective data (log D for Chinchilla itself). Returns (logL, vjp) with
    vjp(w) = (g (S, P) with its first five columns filled, wp3 = w·T_D/L (S, n)), so that a
    form extending the data term can add its own parameters' gradients through wp3.

    Written for speed (the fit calls it for thousands of starts): A/N^α takes one value per
    model size, and the elementwise work is done in place. The terms shared with the forms
    that extend this one are cdlaw.laws.log_terms'.
    """
    e, b, beta = theta[:, 0:1], theta[:, 2:3], theta[:, 4:5]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # A/N^α takes one value per model size: exponentiate those, then spread them.
        T2u = np.exp(theta[:, [1, 3]] @ np.stack([np.ones_like(sizes.lNu), -sizes.lNu]))
        T2 = sizes.spread(T2u)
        E = np.exp(e)
        T3 = data_term(lDeff, b, beta)
        total, logL = log_sum(E, T2, T3)

    def vjp(w):
        g = np.zeros_like(theta)
        wt = floor_grad(w, total, E, g)
        # through the per-size values: Σ_sizes T2u·(Σ_rows wt)
        per_size = sizes.sum(wt)
        per_size *= T2u
        g[:, 1] = per_size.sum(axis=1)
        g[:, 3] = -(per_size @ sizes.lNu)
        return g, data_grads(wt, T3, lDeff, g)

    return logL, vjp


def linear_terms_at(theta, sizes: PerSize, lDeff):
    """The terms E, A and B multiply — 1, N^−α and D_eff^−β — for S fit vectors at once:
    what a fit that solves E, A, B instead of searching them needs (LawForm.linear_terms).

    theta: (S, P) fit vectors (their e, a, b entries are not read); sizes, lDeff: as
    batched_log_loss_at. Returns
    (Phi (3, S, n), vjp) with vjp(W (3, S, n)) = (g (S, P): Σ_j,i W_jsi ∂Phi_jsi/∂θ_s in the
    α and β columns, the others 0; wp3 = W_2·Phi_2 (S, n), the weight on log D_eff^−β that a
    form extending the data term chains its own parameters through, as batched_log_loss_at).
    """
    alpha, beta = theta[:, 3:4], theta[:, 4:5]
    S, n = lDeff.shape
    Phi = np.empty((3, S, n))
    Phi[0] = 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        Pu = np.exp(-alpha * sizes.lNu)  # N^−α, one per size
        Phi[1] = sizes.spread(Pu)
        np.multiply(lDeff, -beta, out=Phi[2])
        np.exp(Phi[2], out=Phi[2])

    def vjp(W):
        g = np.zeros_like(theta)
        per_size = sizes.sum(W[1]) * Pu
        g[:, 3] = -(per_size @ sizes.lNu)
        wp3 = W[2] * Phi[2]
        g[:, 4] = -np.einsum("sn,sn->s", wp3, lDeff)
        return g, wp3

    return Phi, vjp


def batched_log_loss(theta, rows: Rows):
    theta = np.asarray(theta, dtype=float)
    lDeff = np.empty((theta.shape[0], rows.logD.shape[0]))
    lDeff[:] = rows.logD
    logL, vjp = batched_log_loss_at(theta, rows.sizes, lDeff)
    return logL, lambda w: vjp(w)[0]


def linear_terms(theta, rows: Rows):
    """1, N^−α, D^−β for S fit vectors, with their VJP (the LawForm.linear_terms contract)."""
    theta = np.asarray(theta, dtype=float)
    lDeff = np.empty((theta.shape[0], rows.logD.shape[0]))
    lDeff[:] = rows.logD
    Phi, vjp = linear_terms_at(theta, rows.sizes, lDeff)
    return Phi, lambda W: vjp(W)[0]


CHINCHILLA = LawForm(
    name="chinchilla",
    source="Hoffmann et al. 2022, arXiv 2203.15556, eq. 2",
    shared=SHARED,
    loss=loss,
    model_floor=model_floor,
    log_params=LOG_PARAMS,
    positive=POSITIVE,
    nonnegative=NONNEGATIVE,
    huber_delta=1e-3,  # Chinchilla's own fit (Hoffmann et al. 2022, approach 3)
    columns=("n_params", "fresh_tokens", "loss"),
    bounds=BOUNDS,
    centring=CENTRING,
    start_axes=START_AXES,
    log_loss_vjp=batched_log_loss,
    linear=LINEAR,
    linear_terms=linear_terms,
    called="Chinchilla",
)
