"""The governor's 95% bands on a cooled-down loss.

A band is the spread of the law's bootstrap refits, each calibrated to the run with its
own offset δ, widened on both sides by `widen` (the offset's standard error and the
stable-to-cooled relation's spread, cdlaw.govern.governor). Its low end never goes below
`loss_floor`: a run of N parameters cannot, under any of the calibrated laws, end below
that law's model floor E + A/N^α plus its offset (unlimited data), taken at the low end of
the offset's own 95% interval — and never below 0.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cdlaw.law import Law


def loss_floor(laws: list[Law], offsets: list[tuple[float, float]], n_params: float) -> float:
    """The lowest cooled-down loss the calibrated laws allow a run of n_params: the least
    model floor + δ over the laws, less 1.96 standard errors of the law's own δ; ≥ 0."""
    pairs = zip(laws, offsets, strict=True)
    floors = [float(lw.loss_model_floor(n_params)) + d for lw, (d, _) in pairs]
    return max(min(floors) - 1.96 * offsets[0][1], 0.0)


def point_band(vals: list[float], widen: float, floor: float) -> tuple[float, float]:
    """The band of one loss: vals are the law's (first) and its bootstrap laws' values."""
    lo = hi = vals[0]
    if len(vals) >= 3:
        lo, hi = (float(v) for v in np.percentile(vals[1:], [2.5, 97.5]))
    return max(min(lo, vals[0]) - widen, floor), max(hi, vals[0]) + widen


def grid_band(
    laws: list[Law],
    offsets: list[tuple[float, float]],
    own: Callable[[Law], Callable],
    grid: np.ndarray,
    widen: float,
    floor: float,
) -> dict:
    """The band along a grid of ends: {"cooled_lo", "cooled_hi"} (the law's own ± widen
    alone without bootstrap laws)."""
    vals = np.array([own(lw)(grid) + d for lw, (d, _) in zip(laws, offsets, strict=True)])
    if len(vals) >= 3:
        lo, hi = np.percentile(vals[1:], [2.5, 97.5], axis=0)
        lo, hi = np.minimum(lo, vals[0]), np.maximum(hi, vals[0])
    else:
        lo = hi = vals[0]
    return {"cooled_lo": np.maximum(lo - widen, floor), "cooled_hi": hi + widen}
