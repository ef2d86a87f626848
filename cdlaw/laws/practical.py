"""The "Practical" scaling law: a saturating law with an overfitting term. Pure numpy.

    L(N, D, T) = E + (L0 − E)·h/(1 + h),   h = a/N^α + b/T^β + c·N^γ/D^δ

Source: "Practical Scaling Laws: Converting Compute into Performance in a Data-Constrained
World", arXiv 2605.09189 (2026). The form is the paper's proposed law as its abstract
states it; the equation number inside the paper could not be read from the stored copy
(see docs/overfitting-laws.md), so it is cited by the abstract here.

The three terms of h are undercapacity (a/N^α), undertraining (b/T^β, T = tokens seen) and
overfitting (c·N^γ/D^δ, D = unique tokens). L lies between the irreducible loss E (h → 0)
and the uninformed baseline L0 (h → ∞), which the paper fixes by the loss type rather than
fitting: for cross-entropy over a vocabulary of V tokens, L0 = ln V (`uninformed_loss`).
In the data-rich, single-epoch limit (T = D, c·N^γ/D^δ → 0, h ≪ 1) it becomes Chinchilla's
E + A/N^α + B/D^β with A = (L0 − E)·a and B = (L0 − E)·b.

In cdlaw's accounting a run sees T = D + D′ tokens: its fresh tokens once, and its derived
tokens D′ of either strategy (repeats or paraphrases) as further tokens seen; D is the
unique data. (Paraphrases are counted as seen, not unique: the law has one kind of derived
token, so both strategies share its parameters.)

Fit vector (log-space where the parameter is a positive scale), in this order:

    e = log E, log a, log b, α, β, log c, γ, δ

— the first five in the same slots as cdlaw.fit.vector's cd vector (e, a, b, α, β), so that
the fitter's centring of a and b and its bounds on α, β carry over. L0 is an argument, not
fitted. Writing L = (E + L0·h)/(1 + h), the weighted mean of E and L0 with weights 1 and h,

    log L = logaddexp(e, log L0 + log h) − log1p(h),    log h = logsumexp of the three terms

is finite for every parameter vector (E > L0 is allowed numerically; it only makes the law
rise with resources, so a fit bounds e < log L0).

Registered as `practical` (PRACTICAL, below), whose fit vector is the eight entries above
then L0 itself: the fit takes L0 = ln(vocab_size) from the table (LawForm.fixed) and holds
it there, and fit.json stores it with the fitted parameters.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cdlaw.laws.form import TABLE_COLUMNS, Centring, LawForm, LogLosses, Rows
from cdlaw.system.errors import BadInput

PRACTICAL_PARAMS = ("E", "a", "b", "alpha", "beta", "c", "gamma", "delta")
# Entries of the fit vector that are logs of the public values (E, a, b, c).
PRACTICAL_LOG_PARAMS = ("E", "a", "b", "c")


def uninformed_loss(vocab_size) -> float:
    """L0 for cross-entropy in nats: the loss of the uniform guess over the vocabulary."""
    return float(np.log(vocab_size))


def practical_h(N, D, Dp, a, alpha, b, beta, c, gamma, delta):
    """h = a/N^α + b/T^β + c·N^γ/D^δ with T = D + D′ (tokens seen), D unique tokens."""
    N, D, Dp = (np.asarray(x, dtype=float) for x in (N, D, Dp))
    T = D + Dp
    with np.errstate(divide="ignore"):
        return a / N**alpha + b / T**beta + c * N**gamma / D**delta


def practical_loss(N, D, Dp, E, L0, a, alpha, b, beta, c, gamma, delta):
    """L = E + (L0 − E)·h/(1 + h) (arXiv 2605.09189), T = D + D′ seen, D unique.

    h/(1 + h) is evaluated as 1/(1 + 1/h), so h = 0 gives E and h = ∞ gives L0 exactly.
    """
    h = practical_h(N, D, Dp, a, alpha, b, beta, c, gamma, delta)
    with np.errstate(divide="ignore"):
        frac = 1.0 / (1.0 + 1.0 / h)
    return E + (L0 - E) * frac


def practical_fit_vector(E, a, b, alpha, beta, c, gamma, delta) -> np.ndarray:
    """Public values → the log-space fit vector (order in the module docstring)."""
    return np.array(
        [np.log(E), np.log(a), np.log(b), alpha, beta, np.log(c), gamma, delta], dtype=float
    )


def practical_batched_log_loss(theta, logN, logD, ratio, L0):
    """log L of the Practical law for S fit vectors at n rows, and its vector–Jacobian product.

    theta: (S, 8) fit vectors (e, log a, log b, α, β, log c, γ, δ). logN, logD, ratio = D′/D:
    (n,); T = D·(1 + r). L0: the fixed uninformed baseline (scalar).
    Returns (logL (S, n), vjp) with vjp(w (S, n)) = Σ_i w_si ∂logL_si/∂theta_s (S, 8), the
    same contract as cdlaw.fit.vector.batched_log_loss.

    With s1 = L0·h/(E + L0·h) and s2 = h/(1 + h):
        ∂log L/∂e     = 1 − s1
        ∂log L/∂log h = s1 − s2 = h·(L0 − E)/((E + L0·h)(1 + h))
    and each term h_j of h passes on its share h_j/h to its own intercept and exponent.
    """
    logL, vjp, _ = _log_loss_and_dL0(theta, logN, logD, ratio, L0)
    return logL, vjp


def _log_loss_and_dL0(theta, logN, logD, ratio, L0):
    """practical_batched_log_loss, and ∂log L/∂L0 = h/(E + L0·h) (S, n). L0: a scalar, or
    one value per fit vector ((S, 1))."""
    theta = np.asarray(theta, dtype=float)
    logN = np.asarray(logN, dtype=float)
    logD = np.asarray(logD, dtype=float)
    logT = logD + np.log1p(np.asarray(ratio, dtype=float))
    lL0 = np.log(np.asarray(L0, dtype=float))
    e, la, lb, alpha, beta, lc, gamma, delta = (theta[:, j : j + 1] for j in range(8))
    l1 = la - alpha * logN  # log(a/N^α)
    l2 = lb - beta * logT  # log(b/T^β)
    l3 = lc + gamma * logN - delta * logD  # log(c·N^γ/D^δ)
    lmax = np.maximum(np.maximum(l1, l2), l3)
    q1, q2, q3 = np.exp(l1 - lmax), np.exp(l2 - lmax), np.exp(l3 - lmax)
    qsum = q1 + q2 + q3
    logh = lmax + np.log(qsum)
    lnum = np.logaddexp(e, lL0 + logh)  # log(E + L0·h)
    lden = np.logaddexp(0.0, logh)  # log(1 + h)
    logL = lnum - lden
    s1 = np.exp(lL0 + logh - lnum)
    s2 = np.exp(logh - lden)
    dlogh = s1 - s2
    de = 1.0 - s1
    f1, f2, f3 = q1 / qsum, q2 / qsum, q3 / qsum  # shares h_j/h

    def vjp(w):
        w = np.asarray(w, dtype=float)
        g = np.empty_like(theta)
        wh = w * dlogh
        w1, w2, w3 = wh * f1, wh * f2, wh * f3
        g[:, 0] = np.einsum("sn,sn->s", w, de)
        g[:, 1] = w1.sum(axis=1)
        g[:, 2] = w2.sum(axis=1)
        g[:, 3] = -(w1 @ logN)
        g[:, 4] = -np.einsum("sn,n->s", w2, logT)
        g[:, 5] = w3.sum(axis=1)
        g[:, 6] = w3 @ logN
        g[:, 7] = -(w3 @ logD)
        return g

    return logL, vjp, np.exp(logh - lnum)


# ---------------------------------------------------------------------------------------
# The declaration (docs/law.md, "Adding a law"; docs/overfitting-laws.md for the bounds).
# L0 is a shared parameter that the fit takes from the table (LawForm.fixed), last in the
# fit vector; every strategy's derived tokens are tokens seen, with no parameters of
# their own.
# ---------------------------------------------------------------------------------------

SHARED = (*PRACTICAL_PARAMS, "L0")


def loss(p, N, D, Dp):
    return practical_loss(N, D, Dp, **{k: p[k] for k in SHARED})


def model_floor(p, N):
    """L_N: unlimited fresh data (D = T → ∞) leaves h = a/N^α."""
    h = p["a"] / np.asarray(N, dtype=float) ** p["alpha"]
    return p["E"] + (p["L0"] - p["E"]) * h / (1.0 + h)


def batched_log_loss(theta, rows: Rows):
    """log L (S, n) and its VJP over the 9-entry fit vector (L0 last, linear)."""
    theta = np.asarray(theta, dtype=float)
    L0 = theta[:, 8:9]
    logL, vjp8, dL0 = _log_loss_and_dL0(theta[:, :8], rows.logN, rows.logD, rows.ratio, L0)

    def vjp(w):
        w = np.asarray(w, dtype=float)
        g = np.empty_like(theta)
        g[:, :8] = vjp8(w)
        g[:, 8] = np.einsum("sn,sn->s", w, dL0)
        return g

    return logL, vjp


def uninformed_loss_of(table) -> float:
    """L0 = ln(vocab_size) of a table of runs, which must all share one vocabulary."""
    sizes = pd.unique(pd.to_numeric(table["vocab_size"], errors="coerce"))
    if len(sizes) != 1 or not np.isfinite(sizes[0]) or sizes[0] < 2:
        shown = ", ".join(str(v) for v in sizes[:5])
        raise BadInput(
            "the practical law fixes L0 at ln(vocab_size), so its runs need one vocab_size "
            f"(an integer ≥ 2), not {shown or 'none'}"
        )
    return uninformed_loss(sizes[0])


def _e_bounds(t: LogLosses) -> tuple[float, float]:
    return -15.0, t.top  # E lies below every loss, and L0 above them


PRACTICAL = LawForm(
    name="practical",
    source=(
        "Practical Scaling Laws: Converting Compute into Performance in a Data-Constrained "
        "World, arXiv 2605.09189 (the law of its abstract; L0 = ln vocab_size)"
    ),
    shared=SHARED,
    loss=loss,
    model_floor=model_floor,
    log_params=frozenset(PRACTICAL_LOG_PARAMS),
    positive=frozenset({"a", "b", "alpha", "beta", "delta", "L0"}),
    nonnegative=frozenset({"E", "c", "gamma"}),
    huber_delta=0.1,  # as cd
    columns=(*TABLE_COLUMNS, "vocab_size"),
    bounds={
        "E": _e_bounds,
        "a": (-15.0, 30.0),
        "b": (-15.0, 30.0),
        "alpha": (0.005, 3.0),
        "beta": (0.005, 3.0),
        "c": (-30.0, 10.0),
        "gamma": (0.0, 3.0),
        "delta": (0.005, 3.0),
    },
    # each term of h taken at the table's centre
    centring=(
        Centring("a", "alpha", -1, "log_n_params"),
        Centring("b", "beta", -1, "log_fresh_tokens"),
        Centring("c", "gamma", 1, "log_n_params"),
        Centring("c", "delta", -1, "log_fresh_tokens"),
    ),
    # the centred terms of h run from about 0.02 to 5 on typical tables (L from E to L0)
    start_axes=(
        ("alpha", (0.1, 1.0)),
        ("beta", (0.1, 1.0)),
        ("E", lambda t: (t.low + np.log(0.05), t.low + np.log(0.9))),
        ("a", (-4.0, 1.5)),
        ("b", (-4.0, 1.5)),
        ("c", (-8.0, 0.0)),
        ("gamma", (0.1, 1.5)),
        ("delta", (0.1, 1.5)),
    ),
    log_loss_vjp=batched_log_loss,
    fixed={"L0": uninformed_loss_of},
    called="the Practical law",
)
