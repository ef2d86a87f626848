"""Many L-BFGS runs at once: the multistart and bootstrap engine of `cdlaw fit` (docs/fit.md).

A scaling-law fit is tiny (a dozen parameters, a few hundred rows) but is run from
thousands of starting points, and a Python loop around scipy.optimize.minimize spends
nearly all of its time in per-iteration overhead. Here every start is one row of an
(S, P) array: one numpy call evaluates the objective and its gradient for all starts,
and the L-BFGS two-loop recursion, the line search and the stopping tests are written
over that batch. A start leaves the batch when it converges, so the batch shrinks as it
goes. The best few results are then polished one by one with scipy's L-BFGS-B.

What makes it fast, besides the batching: the parameters are centred on the table
(Problem), the iteration is diagonally preconditioned by the Gauss–Newton curvature
(Problem.curvature_scale), the L-BFGS memory is 20 pairs for a dozen parameters, and
chunks of starts run on threads with OpenBLAS kept single-threaded.

Stopping rules are scipy's, so the two can be compared one for one: stop when
(f_k − f_{k+1}) ≤ ftol·max(|f_k|, |f_{k+1}|, 1) or when the largest projected-gradient
component is ≤ gtol.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

# fun(x (k, P), idx (k,)) -> (f (k,), g (k, P)); idx says which starts the rows are.
BatchObjective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]

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


@contextmanager
def single_threaded_blas():
    """Run the block with OpenBLAS on one thread, then restore its setting.

    A fit's BLAS calls are tiny (a dozen parameters; scipy's L-BFGS-B works on 11×20
    matrices): OpenBLAS's worker threads only add wake-up latency, and on a busy machine
    they made each scipy iteration ~40× slower. Parallelism here comes from running
    chunks of starts on threads instead. Does nothing where OpenBLAS is not loaded.
    """
    import scipy.optimize  # noqa: F401  (loads scipy's own OpenBLAS, so it is found too)

    handles = []
    for get, set_ in _openblas_thread_functions():
        try:
            handles.append((set_, get()))
            set_(1)
        except Exception:  # an unusual build: leave it alone
            pass
    try:
        yield
    finally:
        for set_, n in handles:
            set_(n)


def with_single_threaded_blas(fn):
    """Decorator: run fn inside single_threaded_blas()."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded_blas():
            return fn(*args, **kwargs)

    return wrapper


def _openblas_thread_functions():
    """(get, set) num-threads functions of every OpenBLAS this process has loaded (Linux)."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
    except OSError:
        return []
    out = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("", ""), ("", "64_"), ("scipy_", ""), ("scipy_", "64_")):
            get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                set_.argtypes = [ctypes.c_int]
                out.append((get, set_))
                break
    return out


def projected_gradient(x, g, lower, upper):
    """The gradient with components that would push through a bound set to zero."""
    blocked = ((x <= lower) & (g > 0)) | ((x >= upper) & (g < 0))
    return np.where(blocked, 0.0, g)


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


# ---------------------------------------------------------------------------------------
# The fit as an optimisation problem: rows, coordinates, bounds and the start grid.
# ---------------------------------------------------------------------------------------


def huber(residual, delta):
    """Huber's loss: r²/2 inside ±δ, δ(|r| − δ/2) outside (scipy.special.huber)."""
    a = np.abs(residual)
    return np.where(a <= delta, 0.5 * residual**2, delta * (a - 0.5 * delta))


@dataclass(frozen=True)
class Problem:
    """The rows one fit sees, sorted so that each strategy's D′ > 0 rows are a slice.

    The optimiser works in centred coordinates z, with theta = M·z (theta is the
    log-space fit vector of cdlaw.law): the intercepts a, b, k are taken at the middle
    of the table (a' = a − α·mean log N, ...) so that a slope can move without dragging
    its intercept across the table. The objective is unchanged; L-BFGS converges in far
    fewer steps because the coordinates are no longer nearly collinear.
    """

    form: str
    strategies: tuple[str, ...]
    logN: np.ndarray
    logD: np.ndarray
    ratio: np.ndarray  # D′/D (0 on D′ = 0 rows)
    y: np.ndarray  # log observed loss
    row_ids: np.ndarray
    slices: tuple[slice, ...]
    M: np.ndarray  # theta = M @ z
    lower: np.ndarray  # bounds on z
    upper: np.ndarray

    @property
    def n_params(self) -> int:
        return self.M.shape[0]

    def theta(self, z) -> np.ndarray:
        return np.asarray(z) @ self.M.T

    def z(self, theta) -> np.ndarray:
        return np.linalg.solve(self.M, np.asarray(theta, dtype=float).T).T

    def log_loss(self, z) -> np.ndarray:
        from cdlaw.fit.vector import batched_log_loss

        z = np.atleast_2d(z)
        logL, _ = batched_log_loss(
            self.form, self.theta(z), self.logN, self.logD, self.ratio, self.slices
        )
        return logL

    def curvature_scale(self, z, free=None) -> np.ndarray:
        """sqrt(Σ_i (∂log L_i/∂z_j)²) per coordinate, geometric mean over sample points z.

        The Gauss–Newton diagonal: used as a diagonal preconditioner it evens out the
        coordinates' curvature and cuts L-BFGS iterations by about a third.
        """
        z = np.atleast_2d(np.asarray(z, dtype=float))[:64]
        free = np.arange(self.n_params) if free is None else np.asarray(free)
        base = self.log_loss(z)
        out = np.empty(len(free))
        for c, j in enumerate(free):
            step = z.copy()
            step[:, j] += 1e-6
            J = (self.log_loss(step) - base) / 1e-6
            out[c] = np.exp(np.mean(np.log(np.sum(J**2, axis=1) + 1e-12)))
        return np.sqrt(out)

    def subset(self, keep) -> Problem:
        """The same coordinates and bounds on fewer rows (keep: bool mask over rows)."""
        keep = np.asarray(keep, bool)
        slices, start = [], int(np.sum(keep[: self.slices[0].start])) if self.slices else 0
        for sl in self.slices:
            n = int(np.sum(keep[sl]))
            slices.append(slice(start, start + n))
            start += n
        return Problem(
            self.form,
            self.strategies,
            *(v[keep] for v in (self.logN, self.logD, self.ratio, self.y, self.row_ids)),
            tuple(slices),
            self.M,
            self.lower,
            self.upper,
        )

    def objective(self, delta: float, weights=None, free=None, base=None) -> BatchObjective:
        """The summed Huber loss of log residuals and its gradient, for minimize_batched.

        weights: (n,) row weights, or (S, n) per start (bootstrap counts). free: indices
        of z being fitted, the others taken from base ((P,) or (S, P) per start).
        """
        from cdlaw.fit.vector import batched_log_loss

        W = None if weights is None else np.asarray(weights, dtype=float)

        def chunk(z, idx, f, g, sl):
            logL, vjp = batched_log_loss(
                self.form, self.theta(z[sl]), self.logN, self.logD, self.ratio, self.slices
            )
            res = np.subtract(self.y, logL, out=logL)
            c = np.clip(res, -delta, delta)  # ∂huber/∂res; huber(res) = c·(res − c/2)
            wc = c if W is None else c * (W[idx[sl]] if W.ndim == 2 else W)
            f[sl] = np.einsum("sn,sn->s", wc, res) - 0.5 * np.einsum("sn,sn->s", wc, c)
            g[sl] = -(vjp(wc) @ self.M)  # ∂res/∂theta = −∂logL/∂theta

        def fun(zf, idx):
            if free is None:
                z = zf
            else:
                z = np.array(
                    np.broadcast_to(base, (len(idx), self.n_params))
                    if np.ndim(base) == 1
                    else base[idx]
                )
                z[:, free] = zf
            f = np.empty(len(z))
            g = np.empty_like(z)
            # Chunks of starts keep the (starts × rows) arrays in cache; numpy releases
            # the GIL inside its loops, so threads run chunks side by side.
            step = max(1, CHUNK_ELEMENTS // max(1, len(self.y)))
            parts = [slice(c, c + step) for c in range(0, len(z), step)]
            workers = objective_threads()
            if len(parts) > 1 and workers > 1:
                list(_pool(workers).map(lambda sl: chunk(z, idx, f, g, sl), parts))
            else:
                for sl in parts:
                    chunk(z, idx, f, g, sl)
            return f, (g if free is None else g[:, free])

        return fun


CHUNK_ELEMENTS = 1 << 17  # starts × rows per chunk (1 MiB per float64 array)


def objective_threads() -> int:
    """Worker threads for the objective: CDLAW_FIT_THREADS, else every core (at most 8)."""
    import os

    env = os.environ.get("CDLAW_FIT_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(8, cores or 1))


@functools.cache
def _pool(workers: int):
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(workers, thread_name_prefix="cdlaw-fit")


def build_problem(
    form, strategies, n_params, fresh_tokens, derived_tokens, strategy, loss, row_ids
):
    """Sort the rows (D′ = 0 first, then each strategy's) and set up coordinates and bounds."""
    from cdlaw.fit.vector import fit_vector_names

    strategy = np.asarray(strategy, dtype=object)
    derived = np.asarray(derived_tokens, dtype=float) > 0
    group = np.full(len(strategy), -1)
    for j, s in enumerate(strategies):
        group[derived & (strategy == s)] = j
    order = np.argsort(group, kind="stable")
    group = group[order]
    N, D, Dp, L = (
        np.asarray(v, dtype=float)[order] for v in (n_params, fresh_tokens, derived_tokens, loss)
    )
    logN, logD = np.log(N), np.log(D)
    slices = tuple(
        slice(int(np.searchsorted(group, j)), int(np.searchsorted(group, j, side="right")))
        for j in range(len(strategies))
    )
    names = fit_vector_names(form, strategies)
    P = len(names)
    M = np.eye(P)
    M[1, 3] = logN.mean()  # a = a' + α·mean log N
    M[2, 4] = logD.mean()  # b = b' + β·mean log D
    lower = np.full(P, -12.0)
    upper = np.full(P, 12.0)
    top = np.log(L.max())
    lower[:3], upper[0], upper[1:3] = -15.0, top + 1.0, top + 3.0
    lower[3:5], upper[3:5] = 0.005, 3.0
    if form == "cd":
        for j, sl in enumerate(slices):
            c = 5 + 3 * j
            M[c, c + 1] = -np.mean(logD[sl] - logN[sl])  # k = k' − ρ·mean log(D/N) − σ·mean log N
            M[c, c + 2] = -np.mean(logN[sl])
            lower[c + 1 : c + 3], upper[c + 1 : c + 3] = -5.0, 5.0
    return Problem(
        form,
        tuple(strategies),
        logN,
        logD,
        Dp / D,
        np.log(L),
        np.asarray(row_ids)[order],
        slices,
        M,
        lower,
        upper,
    )


def start_axes(problem: Problem) -> list[tuple[str, list[int], float, float]]:
    """The start grid's axes in the order levels are added: (name, z indices, lo, hi).

    Ranges are set from the table: E from 5% to 90% of the lowest loss, the model and data
    terms at the table's centre from 2% of the median loss to the highest loss (the one-
    epoch loss at the centre's D can lie well above the median of a table that is mostly
    derived-token runs, and nearly all of it can be the data term). Every strategy starts
    from the same K, rho, sigma (its own rows then pull it away).
    """
    low, mid, top = np.log(np.exp(problem.y).min()), np.median(problem.y), problem.y.max()
    axes = [
        ("alpha", [3], 0.1, 1.0),
        ("beta", [4], 0.1, 1.0),
        ("E", [0], low + np.log(0.05), low + np.log(0.9)),
        ("A", [1], mid + np.log(0.02), top),
        ("B", [2], mid + np.log(0.02), top),
    ]
    n_s = len(problem.strategies)
    if problem.form == "cd" and n_s:
        axes += [
            ("K", [5 + 3 * j for j in range(n_s)], -1.0, 5.0),
            ("rho", [6 + 3 * j for j in range(n_s)], -1.5, 0.5),
            ("sigma", [7 + 3 * j for j in range(n_s)], -1.5, 0.5),
        ]
    elif problem.form == "muennighoff":
        axes += [("rstar_d", [6 + j for j in range(n_s)], 0.0, 4.0), ("rstar_n", [5], 0.0, 4.0)]
    return axes


def start_grid(problem: Problem, n_starts: int, rng: np.random.Generator, axes=None):
    """A Cartesian grid of at least n_starts points over the axes, then a random n_starts.

    Levels are added one axis at a time, round robin, until the product reaches n_starts
    (8 axes with 3 levels each give 6,561 points for the CD paper's 6,144 starts).
    Returns (Z (n_starts, P), span (P, 2) per z index: the grid's min and max, NaN where
    the axis has a single level).
    """
    axes = start_axes(problem) if axes is None else axes
    levels = [1] * len(axes)
    i = 0
    while np.prod(levels) < n_starts:
        levels[i % len(axes)] += 1
        i += 1
    values = [
        np.linspace(lo, hi, m) if m > 1 else np.array([(lo + hi) / 2])
        for (_, _, lo, hi), m in zip(axes, levels, strict=True)
    ]
    mesh = np.stack([v.ravel() for v in np.meshgrid(*values, indexing="ij")], axis=1)
    if len(mesh) > n_starts:
        mesh = mesh[np.sort(rng.choice(len(mesh), n_starts, replace=False))]
    Z = np.tile((problem.lower + problem.upper) / 2, (len(mesh), 1))
    span = np.full((problem.n_params, 2), np.nan)
    for col, ((_, zi, lo, hi), m) in enumerate(zip(axes, levels, strict=True)):
        Z[:, zi] = mesh[:, col : col + 1]
        if m > 1:
            span[zi] = (lo, hi)
    return np.clip(Z, problem.lower, problem.upper), span
