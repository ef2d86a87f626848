"""The start grid of `cdlaw fit`: where the many L-BFGS runs begin.

start_axes reads the axes the law form declares, with ranges set from the table where it
says so (intercepts near its losses, exponents over their plausible range); start_grid
lays a Cartesian grid over them and samples n_starts of its points.
"""

from __future__ import annotations

import numpy as np

from cdlaw.fit.problem import Problem
from cdlaw.laws.form import LogLosses, resolve


def start_axes(problem: Problem, solved=()) -> list[tuple[str, list[int], float, float]]:
    """The start grid's axes in the order levels are added: (name, z indices, lo, hi).

    The law form declares its axes and their ranges (fixed, or set from the table's
    losses). A per-strategy parameter has one axis for every strategy: each starts from the
    same value, and its own rows then pull it away. `solved` names parameters the search
    solves rather than starts (a projected search's linear coefficients): no axis.
    """
    losses = LogLosses.of(problem.y)
    base = [name.rsplit(".", 1)[-1] for name in problem.form.fit_vector_names(problem.strategies)]
    axes = []
    for name, span in problem.form.start_axes:
        if name in solved:
            continue
        indices = [i for i, b in enumerate(base) if b == name]
        if indices:
            lo, hi = resolve(span, losses)
            axes.append((name, indices, lo, hi))
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


def warm_start_points(problem: Problem, laws) -> np.ndarray:
    """Starting points (k, P) at the constants of Laws of the problem's form (each must have
    parameters for every strategy the problem fits): a refit starts where a fit ended."""
    from cdlaw.fit.vector import law_to_fit_vector

    usable = [w for w in laws if set(w.strategies) >= set(problem.strategies)]
    if not usable:
        return np.empty((0, problem.n_params))
    theta = np.array([law_to_fit_vector(w, list(problem.strategies)) for w in usable])
    return np.clip(problem.z(theta), problem.lower, problem.upper)
