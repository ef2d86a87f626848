"""The search of a fit: many starts at once, then the best few polished (docs/fit.md).

    sol = search(problem, delta, "joint", grid, warm, progress)  # the first, full search
    sol = solve(problem, delta, "joint", starts, progress)   # from given full points
    boot_starts(sol)                                         # where bootstrap refits start

Every start runs in one batched L-BFGS (cdlaw.fit.optim.minimize_batched); the N_POLISH
best distinct minima are polished with scipy's L-BFGS-B. The first search projects out
the linear coefficients where the law has them (cdlaw.fit.projection). A staged fit
(method "staged") solves the shared parameters on D′ = 0 rows first, then the
per-strategy ones.
cdlaw.fit.procedure calls this; it owns no data handling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from cdlaw.fit.optim import (
    SEARCH_FTOL,
    SEARCH_GTOL,
    minimize_batched,
    polish,
    projected_gradient,
)
from cdlaw.fit.problem import Problem
from cdlaw.fit.projection import Projection

N_POLISH = 5  # distinct best minima polished with scipy
N_REFINE = 16  # distinct best minima of a projected search refined in every coordinate
PROJECTED = "multistart (E, A, B solved)"  # the progress label of a projected search
SEARCH_ROWS = 4096  # a larger table's search runs on a sample of this many rows
MIN_SAMPLED = 256  # rows of each group (D′ = 0, each strategy) in that sample, at least
STATIONARY = 1e-7  # projected gradient below which a stalled line search is a minimum
SAME_MINIMUM = 1e-3  # two minima closer than this in every coordinate are one

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def _is_new(x: np.ndarray, kept) -> bool:
    """Whether minimum x differs from every one already kept (by SAME_MINIMUM)."""
    return all(np.max(np.abs(x - k)) > SAME_MINIMUM for k in kept)


@dataclass
class Solution:
    """One search's outcome: the best point and the distinct minima found on the way."""

    z: np.ndarray  # best point, in the problem's coordinates
    f: float
    success: bool
    message: str
    candidates: np.ndarray  # distinct good minima, for warm refits
    n_converged: int
    n_starts: int


def _distinct_best(x: np.ndarray, f: np.ndarray, most: int) -> list[int]:
    """Indices of up to `most` lowest finite minima, each differing from those before it."""
    picked: list[int] = []
    for i in np.argsort(np.where(np.isfinite(f), f, np.inf)):
        if not np.isfinite(f[i]) or len(picked) == most:
            break
        if _is_new(x[i], [x[j] for j in picked]):
            picked.append(int(i))
    return picked


def _minimise(problem, delta, starts, free, base, progress, label) -> Solution:
    """Batched L-BFGS from every start over the `free` coordinates, then polish the best."""
    lo, hi = problem.lower[free], problem.upper[free]
    whole = len(free) == problem.n_params
    fun = problem.objective(delta, free=None if whole else free, base=None if whole else base)
    report = None if progress is None else (lambda d, t: progress(label, d, t))
    # Preconditioner from the rows this search sees (base fills the frozen coordinates).
    sample = starts[:: max(1, len(starts) // 64)]
    if not whole:
        full = np.array(np.broadcast_to(base, (len(sample), problem.n_params)))
        full[:, free] = sample
        sample = full
    scale = problem.curvature_scale(sample, free)
    res = minimize_batched(
        fun, starts, lo, hi, ftol=SEARCH_FTOL, gtol=SEARCH_GTOL, scale=scale, progress=report
    )
    picked = _distinct_best(res.x, res.f, N_POLISH)
    if not picked:
        raise RuntimeError("every start of the fit gave a non-finite objective")

    def fun1(x):
        f, g = fun(x[None, :], np.zeros(1, dtype=int))
        return float(f[0]), g[0]

    polished = [polish(fun1, res.x[i], lo, hi) for i in picked]
    best = min(polished, key=lambda r: r.fun)
    cands = np.array([r.x for r in sorted(polished, key=lambda r: r.fun)])
    success, message = bool(best.success), str(best.message)
    pg = float(np.abs(projected_gradient(best.x, best.jac, lo, hi)).max())
    if not success and pg <= STATIONARY:
        # scipy's line search stops when no step lowers f in floating point: at a minimum.
        success = True
        message = f"{message.strip()} no representable decrease left (stationary point)"
    message += f"; max projected gradient {pg:.1e}"
    return Solution(
        best.x,
        float(best.fun),
        success,
        message,
        cands,
        int(res.converged.sum()),
        len(starts),
    )


def search(
    problem: Problem,
    delta: float,
    method: str,
    grid: np.ndarray,
    warm: np.ndarray,
    progress,
    rng: np.random.Generator,
) -> Solution:
    """The fit's first, full search: from the start grid and the warm starts (full points).

    Where the form's linear coefficients can be solved (Projection.of, joint fits), the grid
    is searched over the other coordinates with the coefficients projected out, and the
    N_REFINE best distinct minima (and the warm starts) are then minimised on the fit's own
    objective in every coordinate and polished; otherwise every start searches every
    coordinate (solve). Projected, `n_starts` and `n_converged` count the grid's starts.

    A table of more than SEARCH_ROWS rows is searched on a sample of them (sample_rows,
    drawn with rng), and the minima found are then minimised and polished on every row:
    the search's cost stays that of SEARCH_ROWS rows, and the optimum is every row's.
    """
    if len(problem.y) > SEARCH_ROWS:
        sample = problem.subset(sample_rows(problem, SEARCH_ROWS, rng))
        found = search(sample, delta, method, grid, warm, progress, rng)
        sol = solve(problem, delta, method, found.candidates, progress, "every row")
        return replace(sol, n_converged=found.n_converged, n_starts=found.n_starts)
    projection = Projection.of(problem) if method == "joint" else None
    if projection is None:
        return solve(problem, delta, method, np.vstack([warm, grid]), progress)
    free = projection.free
    x0 = grid[:, free]
    scale = problem.curvature_scale(projection.complete(x0[:: max(1, len(x0) // 64)]), free)
    report = None if progress is None else (lambda d, t: progress(PROJECTED, d, t))
    res = minimize_batched(
        projection.objective(), x0, problem.lower[free], problem.upper[free],
        ftol=SEARCH_FTOL, gtol=SEARCH_GTOL, scale=scale, progress=report,
    )  # fmt: skip
    picked = _distinct_best(res.x, res.f, N_REFINE)
    if not picked:
        raise RuntimeError("every start of the fit gave a non-finite objective")
    starts = np.vstack([warm, projection.complete(res.x[picked])])
    sol = _minimise(problem, delta, starts, np.arange(problem.n_params), None, progress, "refine")
    return replace(sol, n_converged=int(res.converged.sum()), n_starts=len(grid))


def solve(
    problem: Problem,
    delta: float,
    method: str,
    starts: np.ndarray,
    progress,
    label: str = "multistart",
) -> Solution:
    """One fit (joint or staged) from a set of starting points in z."""
    P = problem.n_params
    everything = np.arange(P)
    if method == "joint" or len(problem.shared) == P:  # staged needs per-strategy parameters
        return _minimise(problem, delta, starts, everything, None, progress, label)
    shared, per = problem.stages(starts[0])
    one_epoch = problem.ratio == 0
    s1 = _minimise(
        problem.subset(one_epoch),
        delta,
        np.unique(starts[:, shared], axis=0),
        shared,
        starts[0],
        progress,
        "stage 1 (D′ = 0)",
    )
    z = starts[0].copy()
    z[shared] = s1.z
    s2 = _minimise(
        problem.subset(~one_epoch),
        delta,
        np.unique(starts[:, per], axis=0),
        per,
        z,
        progress,
        "stage 2 (per strategy)",
    )
    z[per] = s2.z
    f = float(problem.objective(delta)(z[None], np.zeros(1, int))[0][0])
    cands = np.tile(z, (min(len(s1.candidates), len(s2.candidates)), 1))
    cands[:, shared] = s1.candidates[: len(cands)]
    cands[:, per] = s2.candidates[: len(cands)]
    return Solution(
        z,
        f,
        s1.success and s2.success,
        f"stage 1: {s1.message}; stage 2: {s2.message}",
        cands,
        s1.n_converged + s2.n_converged,
        s1.n_starts + s2.n_starts,
    )


def sample_rows(problem: Problem, size: int, rng: np.random.Generator) -> np.ndarray:
    """A bool mask of about `size` rows drawn without replacement, each group of rows (the
    D′ = 0 rows, each strategy's) in proportion, and at least MIN_SAMPLED of each (or all
    it has), so that every parameter the table identifies the sample identifies too."""
    n = len(problem.y)
    group = np.full(n, -1)
    for j, sl in enumerate(problem.slices):
        group[sl] = j
    keep = np.zeros(n, bool)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        k = min(len(rows), max(MIN_SAMPLED, round(size * len(rows) / n)))
        keep[rng.choice(rows, k, replace=False)] = True
    return keep


def boot_starts(sol: Solution) -> np.ndarray:
    """The best fit, then the search's other distinct minima: where bootstrap refits start.
    Two polished minima can land on one point; a start is kept only once."""
    starts = [sol.z]
    for c in sol.candidates:
        if _is_new(c, starts):
            starts.append(c)
    return np.array(starts)
