"""Many L-BFGS runs at once: the batched minimiser of `cdlaw fit` (docs/fit.md).

A scaling-law fit is tiny (a dozen parameters, a few hundred rows) but is run from
thousands of starting points, and a Python loop around scipy.optimize.minimize spends
nearly all of its time in per-iteration overhead. Here every start is one row of an
(S, P) array: one numpy call evaluates the objective and its gradient for all starts,
and the L-BFGS two-loop recursion, the line search and the stopping tests are written
over that batch. A start leaves the batch when it converges, so the batch shrinks as it
goes. The best few results are then polished one by one with scipy's L-BFGS-B (polish).

What makes it fast, besides the batching: the parameters are centred on the table
(cdlaw.fit.problem.Problem), the iteration is diagonally preconditioned by the
Gauss–Newton curvature (Problem.curvature_scale), the L-BFGS memory is 20 pairs for a
dozen parameters, and chunks of starts run on threads with OpenBLAS kept single-threaded
(cdlaw.fit.threads). The objective itself is cdlaw.fit.problem's; the start grid is
cdlaw.fit.starts'.

Stopping rules are scipy's, so the two can be compared one for one: stop when
(f_k − f_{k+1}) ≤ ftol·max(|f_k|, |f_{k+1}|, 1) or when the largest projected-gradient
component is ≤ gtol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# fun(x (k, P), idx (k,)) -> (f (k,), g (k, P)); idx says which starts the rows are.
BatchObjective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]

SEARCH_FTOL = 1e-12  # the fit's stopping rule, for the search and every refit (scipy's ftol)
SEARCH_GTOL = 1e-9
ARMIJO = 1e-4  # sufficient-decrease constant of the line search (scipy uses the same)
MAX_LINE_SEARCH = 30


@dataclass
class BatchResult:
    """Where each start ended up."""

    x: np.ndarray  # (S, P) final points
    f: np.ndarray  # (S,) final objective values
    n_iter: np.ndarray  # (S,) L-BFGS iterations taken
    converged: np.ndarray  # (S,) bool: stopped by ftol / gtol (not maxiter or a failed search)
    n_evals: int  # objective evaluations, counted per start


def held_at_bound(x, g, lower, upper):
    """Where a variable sits at a bound that its gradient g pushes it past (a descent step
    along −g would leave the box): bool, x's shape."""
    return ((x <= lower) & (g > 0)) | ((x >= upper) & (g < 0))


def projected_gradient(x, g, lower, upper):
    """The gradient with components that would push through a bound set to zero."""
    return np.where(held_at_bound(x, g, lower, upper), 0.0, g)


@dataclass
class _Working:
    """The starts still iterating, one row each, with their L-BFGS memory.

    Rows leave in batches (retire), so `idx` says which start each row is.
    """

    x: np.ndarray  # (k, P) current points
    f: np.ndarray  # (k,)
    g: np.ndarray  # (k, P)
    idx: np.ndarray  # (k,) start index of each row
    n_iter: np.ndarray  # (k,)
    s_hist: np.ndarray  # (memory, k, P), slot-major so that one slot is contiguous
    y_hist: np.ndarray  # (memory, k, P)
    rho_hist: np.ndarray  # (memory, k)
    gamma: np.ndarray  # (k,) initial inverse-Hessian scale, s·y/y·y of the newest pair
    has_pair: np.ndarray  # (k,) bool
    alive: np.ndarray  # (k,) bool: still iterating (dead rows wait for the next compaction)
    n_done: int = 0  # starts retired so far

    def retire(self, mask: np.ndarray, converged: np.ndarray, out: BatchResult) -> None:
        """Record finished starts in out; drop them from the rows once 5% are dead.

        Compacting costs a copy of the history, so it is done in batches.
        """
        mask = mask & self.alive
        done = self.idx[mask]
        self.n_done += len(done)
        out.x[done], out.f[done], out.n_iter[done] = self.x[mask], self.f[mask], self.n_iter[mask]
        out.converged[done] = converged[mask]
        self.alive = self.alive & ~mask
        if np.count_nonzero(~self.alive) > 0.05 * len(self.alive) or not self.alive.any():
            k = self.alive
            self.x, self.f, self.g, self.idx = self.x[k], self.f[k], self.g[k], self.idx[k]
            self.n_iter = self.n_iter[k]
            self.s_hist, self.y_hist = self.s_hist[:, k], self.y_hist[:, k]
            self.rho_hist = self.rho_hist[:, k]
            self.gamma, self.has_pair, self.alive = self.gamma[k], self.has_pair[k], self.alive[k]


@dataclass
class _Step:
    """What one line search found, per row: the accepted point and whether there was one."""

    x: np.ndarray
    f: np.ndarray
    g: np.ndarray
    found: np.ndarray  # bool: some step met the Armijo condition


def minimize_batched(
    fun: BatchObjective,
    x0: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    ftol: float = 1e-12,
    gtol: float = 1e-9,
    maxiter: int = 2000,
    memory: int = 20,
    scale: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> BatchResult:
    """Minimise fun from every row of x0 with box-bounded L-BFGS, all rows in step.

    A projected L-BFGS: variables at a bound whose gradient points outwards are held,
    the quasi-Newton direction acts on the rest, and a backtracking (Armijo) line search
    along the projected path picks the step. `scale` (P,) is a diagonal preconditioner:
    the iteration runs on x·scale (see Problem.curvature_scale); results are in x.
    progress(done, total) is called once per iteration with the starts that have stopped.
    """
    if scale is not None:
        sc = np.asarray(scale, dtype=float)

        def scaled(u, idx):
            f, g = fun(u / sc, idx)
            return f, g / sc

        out = minimize_batched(
            scaled, np.asarray(x0) * sc, np.asarray(lower) * sc, np.asarray(upper) * sc,
            ftol=ftol, gtol=gtol, maxiter=maxiter, memory=memory, progress=progress,
        )  # fmt: skip
        out.x = out.x / sc
        return out
    lower = np.asarray(lower, dtype=float)
    upper = np.asarray(upper, dtype=float)
    w, out = _start(fun, x0, lower, upper, memory, gtol)
    S = len(out.f)
    for it in range(maxiter):
        if not w.alive.any():
            break
        d, slope = _direction(w, lower, upper, it, memory)
        step = _line_search(fun, w, d, slope, lower, upper, out)
        w.n_iter += 1
        _remember(w, step, it % memory)
        converged, stuck = _stopped(w, step, lower, upper, ftol, gtol)
        w.retire(converged | stuck, converged, out)
        if progress is not None:
            progress(w.n_done, S)
    w.retire(np.ones(len(w.idx), bool), np.zeros(len(w.idx), bool), out)  # out of iterations
    return out


def _start(fun, x0, lower, upper, memory, gtol) -> tuple[_Working, BatchResult]:
    """Evaluate every start once; retire at once the bad ones (non-finite objective,
    unconverged) and those that begin at a stationary point (converged)."""
    x = np.clip(np.array(x0, dtype=float), lower, upper)
    S, P = x.shape
    out = BatchResult(x.copy(), np.full(S, np.inf), np.zeros(S, int), np.zeros(S, bool), 0)
    idx = np.arange(S)
    f, g = fun(x, idx)
    out.n_evals += S
    w = _Working(
        x, f, g, idx, np.zeros(S, int),
        np.zeros((memory, S, P)), np.zeros((memory, S, P)), np.zeros((memory, S)),
        np.ones(S), np.zeros(S, bool), np.ones(S, bool),
    )  # fmt: skip
    bad = ~np.isfinite(w.f) | ~np.all(np.isfinite(w.g), axis=1)
    w.retire(bad, np.zeros(S, bool), out)
    small = np.abs(projected_gradient(w.x, w.g, lower, upper)).max(axis=1) <= gtol
    w.retire(small, np.ones(len(w.f), bool), out)
    return w, out


def _direction(w: _Working, lower, upper, it: int, memory: int):
    """The L-BFGS search direction of every row and its slope g·d (both refer to w's rows).

    The two-loop recursion runs over the stored pairs, newest first (slots in ring order);
    a row whose direction does not point downhill forgets its memory and takes −pg.
    """
    pg = projected_gradient(w.x, w.g, lower, upper)
    order = [(it - 1 - i) % memory for i in range(min(it, memory))]
    q = pg.copy()
    alphas = []
    for j in order:
        a_j = w.rho_hist[j] * np.einsum("sp,sp->s", w.s_hist[j], q)
        q -= a_j[:, None] * w.y_hist[j]
        alphas.append(a_j)
    r = w.gamma[:, None] * q
    for j, a_j in zip(reversed(order), reversed(alphas), strict=True):
        b_j = w.rho_hist[j] * np.einsum("sp,sp->s", w.y_hist[j], r)
        r += w.s_hist[j] * (a_j - b_j)[:, None]
    d = np.where(pg == 0.0, 0.0, -r)
    slope = np.einsum("sp,sp->s", w.g, d)
    uphill = ~(slope < 0)
    if uphill.any():  # the memory misleads: forget it and go down the gradient
        d[uphill] = -pg[uphill]
        w.rho_hist[:, uphill] = 0.0
        w.has_pair[uphill] = False
        w.gamma[uphill] = 1.0
        slope = np.einsum("sp,sp->s", w.g, d)
    return d, slope


def _line_search(fun, w: _Working, d, slope, lower, upper, out: BatchResult) -> _Step:
    """Backtracking (Armijo) search along the projected path, evaluating only the live rows
    still searching; the first step is unit length without curvature information (as scipy
    does)."""
    with np.errstate(divide="ignore"):
        step = np.where(w.has_pair, 1.0, np.minimum(1.0, 1.0 / np.linalg.norm(d, axis=1)))
    x, f, g = w.x, w.f, w.g
    res = _Step(x.copy(), f.copy(), g.copy(), np.zeros(len(w.idx), bool))
    search = np.flatnonzero(w.alive)
    for _ in range(MAX_LINE_SEARCH):
        xt = np.clip(x[search] + step[search, None] * d[search], lower, upper)
        ft, gt = fun(xt, w.idx[search])
        out.n_evals += len(search)
        decrease = np.einsum("sp,sp->s", g[search], xt - x[search])
        ok = np.isfinite(ft) & (ft <= f[search] + ARMIJO * decrease)
        ok &= np.all(np.isfinite(gt), axis=1)
        hit = search[ok]
        res.x[hit], res.f[hit], res.g[hit] = xt[ok], ft[ok], gt[ok]
        res.found[hit] = True
        search = search[~ok]
        if len(search) == 0:
            break
        # Halve, or jump to the minimiser of the quadratic through f, f'(0) and f(t).
        t = step[search]
        sl = slope[search]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            quad = -sl * t**2 / (2.0 * (ft[~ok] - f[search] - sl * t))
        quad = np.where(np.isfinite(quad), quad, 0.5 * t)
        step[search] = np.clip(quad, 0.1 * t, 0.5 * t)
    return res


def _remember(w: _Working, step: _Step, slot: int) -> None:
    """Store the pair (s, y) of this iteration in ring slot `slot`, for rows where it has
    positive curvature (the others store zeros and keep their gamma)."""
    s = step.x - w.x
    y = step.g - w.g
    sy = np.einsum("sp,sp->s", s, y)
    yy = np.einsum("sp,sp->s", y, y)
    good = step.found & (sy > 1e-10 * np.maximum(yy, 1e-300))
    w.s_hist[slot] = np.where(good[:, None], s, 0.0)
    w.y_hist[slot] = np.where(good[:, None], y, 0.0)
    w.rho_hist[slot] = np.where(good, 1.0 / np.where(good, sy, 1.0), 0.0)
    w.gamma = np.where(good, sy / np.where(good, yy, 1.0), w.gamma)
    w.has_pair |= good


def _stopped(w: _Working, step: _Step, lower, upper, ftol: float, gtol: float):
    """Move the rows to the searched points; return (converged, stuck) per row.

    Converged: f fell by at most ftol (relative) or the projected gradient is within gtol.
    Stuck: no step decreased f (a corner or round-off); it stops, unconverged.
    """
    scale = np.maximum(np.maximum(np.abs(w.f), np.abs(step.f)), 1.0)
    stalled = step.found & (w.f - step.f <= ftol * scale)
    w.x, w.f, w.g = step.x, step.f, step.g
    pg = projected_gradient(w.x, w.g, lower, upper)
    small = step.found & (np.abs(pg).max(axis=1) <= gtol)
    return stalled | small, ~step.found


def polish(
    fun1: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    ftol: float = 1e-15,
    gtol: float = 1e-12,
    maxiter: int = 20000,
):
    """scipy's L-BFGS-B from one point with tight tolerances; returns scipy's result."""
    from scipy.optimize import minimize

    return minimize(
        fun1,
        np.clip(x0, lower, upper),
        jac=True,
        method="L-BFGS-B",
        bounds=list(zip(lower, upper, strict=True)),
        options={"ftol": ftol, "gtol": gtol, "maxiter": maxiter, "maxfun": 4 * maxiter},
    )
