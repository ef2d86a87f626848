"""Small curve forms and one batched least-squares fit for all of them: the pieces the task
predictors (cdlaw.fit.predictors) are made of.

    theta, rss = fit_curve(SIGMOID, x, y, weights, starts, fixed={"b": 0.25})

`weights` is (B, n): one row per fit, so the B bootstrap refits of a curve (each a
resample's multiplicity per point) and a grid of starts are one batched
Levenberg–Marquardt run in numpy, not B calls of an optimiser. It is least squares with a
Jacobian, where cdlaw.fit.optim's batched L-BFGS minimises the law's general objective;
the two share the test of a parameter held at a bound (held_at_bound).

- `power_nd`: L(N, D) = E + A/N^α + B/D^β, the first step of Bhagia et al. 2024 (arXiv
  2412.04403, "Establishing Task Scaling Laws via Compute-Efficient Model Ladders"), fitted
  to relative residuals by variable projection: on a grid of (α, β) the rest is linear.
- `sigmoid`: m = a / (1 + e^(−k·(x − x0))) + b, their second step, k < 0 for a loss; b,
  the floor, at most the task's chance level, a + b at most 1 (cdlaw.fit.predictor_links).
- `exp_decay`: m = 1 − ε + ε·s·e^(−γ·(L − L_min)), Gadre et al. 2024 (arXiv 2403.08540,
  "Language models scale reliably with over-training and on downstream tasks") Err(L) =
  ε − K·e^(−γL) written for an accuracy, K = ε·s·e^(γ·L_min), with a ceiling: s ≤ 1 holds
  the accuracy at most 1 down to L_min, the lowest loss the chain's step 1 reaches (its E),
  and the curve is read at L_min below it. L_min is held, not fitted.
- `logacc_power`: m = b + (1 − b)·exp(−A·C^(−α)), x = log10 C, Krajewski et al. 2025
  (arXiv 2512.08894, "Revisiting the Scaling Properties of Downstream Metrics"): a power law
  in compute of −log of the accuracy above chance, at one ratio of tokens per parameter;
  its parameters are log A, α and the floor b. It rises from b to 1 as C grows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cdlaw.fit.optim import held_at_bound


@dataclass(frozen=True)
class Curve:
    """A form m = f(θ, x): its parameters, the formula it prints, and f with its Jacobian."""

    name: str
    params: tuple[str, ...]
    formula: str
    f: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (B, P), (n,) -> (B, n)
    jac: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (B, P), (n,) -> (B, n, P)


def _sig(theta, x):
    a, x0, k, b = (theta[:, i : i + 1] for i in range(4))
    z = np.clip(-k * (x[None, :] - x0), -700.0, 700.0)
    return a / (1.0 + np.exp(z)) + b


def _sig_jac(theta, x):
    a, x0, k = (theta[:, i : i + 1] for i in range(3))
    z = np.clip(-k * (x[None, :] - x0), -700.0, 700.0)
    s = 1.0 / (1.0 + np.exp(z))
    slope = a * s * (1.0 - s)
    d = x[None, :] - x0
    return np.stack([s, -k * slope, d * slope, np.ones_like(s)], axis=2)


def _exp(theta, x):
    eps, s, g, lmin = (theta[:, i : i + 1] for i in range(4))
    e = np.exp(np.clip(-g * (np.maximum(x[None, :], lmin) - lmin), -700.0, 700.0))
    return 1.0 - eps + eps * s * e


def _exp_jac(theta, x):
    eps, s, g, lmin = (theta[:, i : i + 1] for i in range(4))
    d = np.maximum(x[None, :], lmin) - lmin
    e = np.exp(np.clip(-g * d, -700.0, 700.0))
    return np.stack([s * e - 1.0, eps * e, -eps * s * d * e, np.zeros_like(e)], axis=2)


LN10 = float(np.log(10.0))


def _logacc(theta, x):
    logA, al, b = (theta[:, i : i + 1] for i in range(3))
    u = np.exp(np.clip(logA - al * LN10 * x[None, :], -700.0, 700.0))
    return b + (1.0 - b) * np.exp(-u)


def _logacc_jac(theta, x):
    logA, al, b = (theta[:, i : i + 1] for i in range(3))
    u = np.exp(np.clip(logA - al * LN10 * x[None, :], -700.0, 700.0))
    q = np.exp(-u)
    return np.stack([-(1.0 - b) * q * u, (1.0 - b) * q * u * LN10 * x[None, :], 1.0 - q], axis=2)


SIGMOID = Curve("sigmoid", ("a", "x0", "k", "b"), "a / (1 + exp(−k·(x − x0))) + b", _sig, _sig_jac)
EXP_DECAY = Curve(
    "exp_decay", ("eps", "s", "gamma", "L_min"), "1 − eps + eps·s·exp(−gamma·(L − L_min))",
    _exp, _exp_jac,
)  # fmt: skip
LOGACC_POWER = Curve(
    "logacc_power", ("logA", "alpha", "b"), "b + (1 − b)·exp(−exp(logA)·C^(−alpha))",
    _logacc, _logacc_jac,
)  # fmt: skip
CURVES = {c.name: c for c in (SIGMOID, EXP_DECAY, LOGACC_POWER)}


def fit_curve(
    curve: Curve,
    x,
    y,
    weights: np.ndarray,
    starts: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    fixed: dict[str, float] | None = None,
    iters: int = 100,
    tol: float = 1e-6,
    bound_aware: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Batched Levenberg–Marquardt: row b of `weights` (B, n) and of `starts` (B, P) is one
    fit; parameters named in `fixed` stay at their value. Returns (theta (B, P), weighted
    residual sum of squares (B,)). Steps are clipped into [lo, hi] ((P,), or (B, P): each
    row its own bounds); a row is done once a step gains under `tol` of its cost. With
    `bound_aware`, a parameter held at a bound by the gradient is left out of the step."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    w = np.asarray(weights, float)
    th = np.clip(np.array(starts, float), lo, hi)
    lo, hi = np.broadcast_to(lo, th.shape), np.broadcast_to(hi, th.shape)
    free = np.ones(len(curve.params), bool)
    for name, v in (fixed or {}).items():
        i = curve.params.index(name)
        th[:, i], free[i] = v, False
    q = int(free.sum())
    eye = np.eye(q)
    r = curve.f(th, x) - y
    cost = np.einsum("bn,bn->b", w, r * r)
    lam = np.full(len(th), 1e-3)
    act = np.arange(len(th))  # the rows still iterating; a row once done is left as it is
    for _ in range(iters):
        ta, ra, wa, la = th[act], r[act], w[act], lam[act]
        lo_a, hi_a = lo[act][:, free], hi[act][:, free]
        J = curve.jac(ta, x)[:, :, free]
        JW = J * wa[:, :, None]
        A = np.einsum("bnp,bnq->bpq", JW, J)
        g = np.einsum("bnp,bn->bp", JW, ra)
        if bound_aware:
            # a parameter at a bound that the gradient pushes past it stays there: its row
            # and column drop out of the step, so the others still move (a clipped step
            # would move them off their own best line and stall)
            pinned = held_at_bound(ta[:, free], g, lo_a, hi_a)
            keep = ~pinned
            A = A * keep[:, :, None] * keep[:, None, :] + pinned[:, :, None] * eye
            g = g * keep
        diag = np.einsum("bpp->bp", A)
        damp = la[:, None, None] * (diag[:, :, None] * eye + 1e-9 * eye)
        try:
            step = -np.linalg.solve(A + damp, g[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:
            break
        new = ta.copy()
        new[:, free] = np.clip(ta[:, free] + step, lo_a, hi_a)
        r_new = curve.f(new, x) - y
        cost_new = np.einsum("bn,bn->b", wa, r_new * r_new)
        ca = cost[act]
        better = np.isfinite(cost_new) & (cost_new < ca)
        # a row is done once a step gains under tol of its cost, or none is taken at a
        # damping where steps are tiny
        gain = (ca - cost_new) / np.maximum(ca, 1e-300)
        done = np.where(better, gain < tol, la > 1e6)
        up = act[better]
        th[up], r[up], cost[up] = new[better], r_new[better], cost_new[better]
        lam[act] = np.minimum(np.where(better, la * 0.3, la * 10.0), 1e12)
        act = act[~done]
        if not len(act):
            break
    return th, cost


# ---------------------------------------------------------------------------------------
# Step 1: E + A/N^α + B/D^β by variable projection
# ---------------------------------------------------------------------------------------

POWER_PARAMS = ("E", "A", "alpha", "B", "beta")
POWER_FORMULA = "E + A/N^alpha + B/D^beta"
_EXPONENTS = np.geomspace(0.02, 2.0, 40)


def fit_power_nd(N, D, y, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E + A/N^α + B/D^β fitted to each row of `weights` (B, n) by least squares of the
    relative residual (fit − y)/y, with E, A, B ≥ 0: for each (α, β) of a grid the rest is
    a weighted linear least squares, solved for every grid point and every row at once;
    then each row's best grid point's neighbourhood is searched on a grid four times
    finer. Returns (theta (B, 5) in POWER_PARAMS order, rss (B,))."""
    N, D, y = (np.asarray(v, float) for v in (N, D, y))
    w = np.asarray(weights, float) / y[None, :] ** 2
    # the columns in scaled units (N/N̄, D/D̄) keep the normal equations well conditioned
    sN, sD = np.exp(np.log(N).mean()), np.exp(np.log(D).mean())
    Ns, Ds = N / sN, D / sD
    al, be = (g.ravel() for g in np.meshgrid(_EXPONENTS, _EXPONENTS, indexing="ij"))
    theta, rss = _power_grid(Ns, Ds, y, w, al[None, :], be[None, :])
    step = np.log(_EXPONENTS[1] / _EXPONENTS[0])
    fa, fb = (
        g.ravel() for g in np.meshgrid(*[np.exp(np.linspace(-step, step, 9))] * 2, indexing="ij")
    )
    t2, r2 = _power_grid(Ns, Ds, y, w, theta[:, 2:3] * fa, theta[:, 4:5] * fb)
    better = r2 < rss
    theta, rss = np.where(better[:, None], t2, theta), np.where(better, r2, rss)
    theta[:, 1] *= sN ** theta[:, 2]  # back from scaled units: A/(N/N̄)^α = (A·N̄^α)/N^α
    theta[:, 3] *= sD ** theta[:, 4]
    return theta, rss


def _power_grid(Ns, Ds, y, w, al, be) -> tuple[np.ndarray, np.ndarray]:
    """The best (E, A, α, B, β) over the grid points (al, be), (1 or B, G) each, for each
    row of w (B, n), in the scaled units of Ns, Ds."""
    B, n = w.shape
    G = al.shape[1]
    X = np.stack(
        [
            np.ones((al.shape[0], G, n)),
            Ns[None, None, :] ** -al[:, :, None],
            Ds[None, None, :] ** -be[:, :, None],
        ],
        axis=3,
    )  # (1 or B, G, n, 3)
    if X.shape[0] == 1:  # one grid for every row: one BLAS product
        XX = np.einsum("gni,gnj->ngij", X[0], X[0]).reshape(n, G * 9)
        M = (w @ XX).reshape(B, G, 3, 3)
        v = (w @ (X[0] * y[None, :, None]).transpose(1, 0, 2).reshape(n, G * 3)).reshape(B, G, 3)
    else:
        M = np.einsum("bn,bgni,bgnj->bgij", w, X, X, optimize=True)
        v = np.einsum("bn,bgni,n->bgi", w, X, y, optimize=True)
    c = np.einsum("bn,n->b", w, y * y)
    M = M + 1e-12 * np.trace(M, axis1=2, axis2=3)[..., None, None] * np.eye(3)
    th = np.zeros((B, G, 3))
    rss = np.full((B, G), np.inf)
    # every subset of the three terms: where a coefficient of the full fit goes negative,
    # the best fit with E, A, B ≥ 0 has that term dropped
    for keep in ([0, 1, 2], [1, 2], [0, 2], [0, 1]):
        Ms = M[..., keep, :][..., :, keep]
        with np.errstate(all="ignore"):
            ts = np.linalg.solve(Ms, v[..., keep, None])[..., 0]
            rs = c[:, None] - np.einsum("bgi,bgi->bg", ts, v[..., keep])
        rs[~np.isfinite(rs) | (ts < 0).any(axis=2)] = np.inf
        better = rs < rss
        full = np.zeros_like(th)
        full[..., keep] = ts
        th = np.where(better[..., None], full, th)
        rss = np.where(better, rs, rss)
    g = np.argmin(rss, axis=1)
    b = np.arange(B)
    t = th[b, g]
    ga = al[np.minimum(b, al.shape[0] - 1), g]
    gb = be[np.minimum(b, be.shape[0] - 1), g]
    return np.stack([t[:, 0], t[:, 1], ga, t[:, 2], gb], axis=1), rss[b, g]


def power_nd(theta: np.ndarray, N, D) -> np.ndarray:
    """E + A/N^α + B/D^β for each row of theta (B, 5) at each (N, D): (B, n)."""
    N, D = np.atleast_1d(np.asarray(N, float)), np.atleast_1d(np.asarray(D, float))
    E, A, al, B, be = (theta[:, i : i + 1] for i in range(5))
    return E + A * N[None, :] ** -al + B * D[None, :] ** -be
