"""The start grid of `cdlaw fit`: where the many L-BFGS runs begin.

start_axes sets each axis's range from the table (intercepts near its losses, exponents
over their plausible range); start_grid lays a Cartesian grid over them and samples
n_starts of its points.
"""

from __future__ import annotations

import numpy as np

from cdlaw.fit.problem import Problem


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
