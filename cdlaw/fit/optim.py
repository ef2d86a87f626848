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
    x = np.clip(np.array(x0, dtype=float), lower, upper)
    S, P = x.shape
    out = BatchResult(x.copy(), np.full(S, np.inf), np.zeros(S, int), np.zeros(S, bool), 0)

    idx = np.arange(S)  # which start each row of the working arrays is
    f, g = fun(x, idx)
    out.n_evals += S
    s_hist = np.zeros((memory, S, P))  # slot-major, so that one slot is contiguous
    y_hist = np.zeros((memory, S, P))
    rho_hist = np.zeros((memory, S))
    gamma = np.ones(S)  # initial inverse-Hessian scale, s·y/y·y of the newest pair
    has_pair = np.zeros(S, bool)
    n_iter = np.zeros(S, int)
    alive = np.ones(S, bool)
    n_done = 0

    def retire(mask, converged):
        """Record finished starts; drop them from the working arrays once 5% are dead.

        Compacting costs a copy of the history, so it is done in batches.
        """
        nonlocal x, f, g, s_hist, y_hist, rho_hist, gamma, has_pair, n_iter, idx, alive, n_done
        mask = mask & alive
        done = idx[mask]
        n_done += len(done)
        out.x[done], out.f[done], out.n_iter[done] = x[mask], f[mask], n_iter[mask]
        out.converged[done] = converged[mask]
        alive = alive & ~mask
        if np.count_nonzero(~alive) > 0.05 * len(alive) or not alive.any():
            k = alive
            x, f, g, idx, n_iter = x[k], f[k], g[k], idx[k], n_iter[k]
            s_hist, y_hist, rho_hist = s_hist[:, k], y_hist[:, k], rho_hist[:, k]
            gamma, has_pair, alive = gamma[k], has_pair[k], alive[k]

    # Bad starts (non-finite objective) are retired at once, unconverged; so are starts
    # that begin at a stationary point.
    bad = ~np.isfinite(f) | ~np.all(np.isfinite(g), axis=1)
    retire(bad, np.zeros(S, bool))
    small = np.abs(projected_gradient(x, g, lower, upper)).max(axis=1) <= gtol
    retire(small, np.ones(len(f), bool))

    for it in range(maxiter):
        if not alive.any():
            break
        pg = projected_gradient(x, g, lower, upper)

        # Two-loop recursion over the stored pairs, newest first (slots in ring order).
        order = [(it - 1 - i) % memory for i in range(min(it, memory))]
        q = pg.copy()
        alphas = []
        for j in order:
            a_j = rho_hist[j] * np.einsum("sp,sp->s", s_hist[j], q)
            q -= a_j[:, None] * y_hist[j]
            alphas.append(a_j)
        r = gamma[:, None] * q
        for j, a_j in zip(reversed(order), reversed(alphas), strict=True):
            b_j = rho_hist[j] * np.einsum("sp,sp->s", y_hist[j], r)
            r += s_hist[j] * (a_j - b_j)[:, None]
        d = np.where(pg == 0.0, 0.0, -r)
        slope = np.einsum("sp,sp->s", g, d)
        uphill = ~(slope < 0)
        if uphill.any():  # the memory misleads: forget it and go down the gradient
            d[uphill] = -pg[uphill]
            rho_hist[:, uphill] = 0.0
            has_pair[uphill] = False
            gamma[uphill] = 1.0
            slope = np.einsum("sp,sp->s", g, d)
        # First step without curvature information: unit length, as scipy does.
        with np.errstate(divide="ignore"):
            step = np.where(has_pair, 1.0, np.minimum(1.0, 1.0 / np.linalg.norm(d, axis=1)))

        # Backtracking line search, evaluating only the live starts still searching.
        x_new, f_new, g_new = x.copy(), f.copy(), g.copy()
        found = np.zeros(len(idx), bool)
        search = np.flatnonzero(alive)
        for _ in range(MAX_LINE_SEARCH):
            xt = np.clip(x[search] + step[search, None] * d[search], lower, upper)
            ft, gt = fun(xt, idx[search])
            out.n_evals += len(search)
            decrease = np.einsum("sp,sp->s", g[search], xt - x[search])
            ok = np.isfinite(ft) & (ft <= f[search] + ARMIJO * decrease)
            ok &= np.all(np.isfinite(gt), axis=1)
            hit = search[ok]
            x_new[hit], f_new[hit], g_new[hit] = xt[ok], ft[ok], gt[ok]
            found[hit] = True
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

        n_iter += 1
        s = x_new - x
        y = g_new - g
        sy = np.einsum("sp,sp->s", s, y)
        yy = np.einsum("sp,sp->s", y, y)
        good = found & (sy > 1e-10 * np.maximum(yy, 1e-300))
        slot = it % memory
        s_hist[slot] = np.where(good[:, None], s, 0.0)
        y_hist[slot] = np.where(good[:, None], y, 0.0)
        rho_hist[slot] = np.where(good, 1.0 / np.where(good, sy, 1.0), 0.0)
        gamma = np.where(good, sy / np.where(good, yy, 1.0), gamma)
        has_pair |= good

        scale = np.maximum(np.maximum(np.abs(f), np.abs(f_new)), 1.0)
        stalled = found & (f - f_new <= ftol * scale)
        x, f, g = x_new, f_new, g_new
        small = found & (np.abs(projected_gradient(x, g, lower, upper)).max(axis=1) <= gtol)
        stuck = ~found  # no step decreased f: a corner or round-off; stop, unconverged
        converged = stalled | small
        retire(converged | stuck, converged)
        if progress is not None:
            progress(n_done, S)

    retire(np.ones(len(idx), bool), np.zeros(len(idx), bool))  # out of iterations
    return out


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
