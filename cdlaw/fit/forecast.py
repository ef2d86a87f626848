"""A task's metric at a model not trained, by one of its predictors (cdlaw.fit.predictors),
with the 95% band of the predictor's bootstrap (docs/downstream.md); both within the
accuracy's range, [chance, 1].

    f = forecast(task_predictors, n_params=7e9, tokens=140e9)   # Forecast
    f.value, f.ci95, f.predictor, f.beyond_runs

The band pairs bootstrap refit i of step 1 with refit i of the link (cycled to the longer);
a law's bootstrap losses, when given, replace step 1 of the val-loss chains. Beyond the
runs it is widened on each side by the predictor's held-out error per decade of its
check's extrapolation, times the decades this model lies beyond the runs (in N or in
compute, whichever is more): the bootstrap alone knows the fit's noise, not how the form
errs beyond the runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from cdlaw.fit.predictor_fits import (
    CURVE_FORMS,
    PREDICTORS,
    RATIO_TOL,
    CurveFit,
    PredictorFit,
    TaskPredictors,
)


def _direct_link(f: PredictorFit, N: float, T: float) -> CurveFit | None:
    r = T / N
    near = [c for c in f.links if c.ratio and abs(math.log(r / c.ratio)) <= math.log1p(RATIO_TOL)]
    return min(near, key=lambda c: abs(math.log(r / c.ratio))) if near else None  # type: ignore[operator]


def point(f: PredictorFit, N: float, T: float, loss: float | None, chance: float = 0.0) -> float:
    """The predictor's point prediction at (N, T = D + D′), within the accuracy's range
    [chance, 1]; `loss` replaces step 1's validation loss (a law's) for the val-loss
    chains."""
    if f.name == "direct":
        c = _direct_link(f, N, T)
        if c is None:
            return math.nan
        return float(np.clip(c.values(np.array([c.theta]), math.log10(6 * N * T))[0, 0], chance, 1))
    assert f.step1 is not None
    if loss is not None and f.links[0].x == "loss":
        x = loss
    else:
        x = float(f.step1.values(np.array([f.step1.theta]), (N, T))[0, 0])
    c = f.links[0]
    return float(np.clip(c.values(np.array([c.theta]), x)[0, 0], chance, 1))


def samples(
    f: PredictorFit,
    N: float,
    T: float,
    losses: np.ndarray | None = None,
    chance: float = 0.0,
    loss: float | None = None,
) -> np.ndarray:
    """The bootstrap's predictions at (N, T), within [chance, 1]: step 1 refit i (or
    `losses[i]`, a law's bootstrap, for the val-loss chains) through link refit i, cycled
    to the longer. A law's point `loss` without its bootstrap (a preset) is every refit's
    step 1: the band is then the link's alone, around the loss the point is made from."""
    if f.name == "direct":
        c = _direct_link(f, N, T)
        if c is None or not c.bootstrap:
            return np.array([])
        return np.clip(c.values(np.array(c.bootstrap), math.log10(6 * N * T))[:, 0], chance, 1)
    assert f.step1 is not None
    c = f.links[0]
    if not c.bootstrap:
        return np.array([])
    if losses is not None and c.x == "loss":
        xs = np.asarray(losses, float)
    elif loss is not None and c.x == "loss":
        xs = np.array([float(loss)])
    elif f.step1.bootstrap:
        xs = f.step1.values(np.array(f.step1.bootstrap), (N, T))[:, 0]
    else:
        return np.array([])
    n = max(len(xs), len(c.bootstrap))
    th = np.array(c.bootstrap)[np.arange(n) % len(c.bootstrap)]
    x = xs[np.arange(n) % len(xs)]
    curve = CURVE_FORMS[c.form]
    return np.clip(np.diagonal(curve.f(th, x)), chance, 1)  # refit i at its own x_i


@dataclass(frozen=True)
class Forecast:
    """One task's predicted metric at a model: `cdlaw predict`'s rows, `plan --link`'s
    "tasks"[] for accuracies."""

    column: str
    task: str
    metric: str
    value: float
    ci95: tuple[float, float] | None
    predictor: str
    chosen_by: str
    heldout_error: float | None
    n_factor: float  # N over the largest N fitted
    flops_factor: float  # compute over the largest compute fitted
    beyond_runs: str | None  # the extrapolation in words; None inside the runs
    no_band_reason: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "ci95": list(self.ci95) if self.ci95 else None}


def forecast(
    tp: TaskPredictors,
    n_params: float,
    tokens: float,
    loss: float | None = None,
    losses: np.ndarray | None = None,
    predictor: str | None = None,
) -> Forecast | None:
    """The task's metric at (N, D + D′ = tokens) by its chosen predictor (or `predictor`),
    with the 95% band of its bootstrap; `loss` and `losses` (a law's point and bootstrap
    at the model) replace step 1 of the val-loss chains. None when no predictor can."""
    n_params, tokens = float(n_params), float(tokens)
    order = [predictor] if predictor else [tp.chosen, *PREDICTORS]
    chance = tp.chance or 0.0  # an accuracy's range is [chance, 1]
    for name in order:
        f = tp.fits.get(name) if name else None
        if f is None or not f.ok:
            continue
        value = point(f, n_params, tokens, loss, chance)
        if not np.isfinite(value):
            continue
        s = samples(f, n_params, tokens, losses, chance, loss)
        s = s[np.isfinite(s)]
        ci = None
        if s.size >= 2:  # a band holds its point, as the plan's does
            lo, hi = np.percentile(s, [2.5, 97.5])
            ci = (float(min(lo, value)), float(max(hi, value)))
        nf, cf = n_params / tp.n_max, 6 * n_params * tokens / tp.flops_max
        ci = _widened(ci, f, max(math.log10(nf), math.log10(cf), 0.0), chance)
        beyond = None
        if nf > 1.0001 or cf > 1.0001:
            beyond = f"N {nf:.3g}× and compute {cf:.3g}× the largest fitted"
        why = None if ci else "the predictor has no bootstrap refits (`--bootstrap 0`)"
        by = tp.chosen_by if name == tp.chosen else f"{tp.chosen} cannot predict here"
        return Forecast(
            tp.column, tp.task, tp.metric, value, ci, name, by, f.heldout_error,  # type: ignore[arg-type]
            nf, cf, beyond, why,
        )  # fmt: skip
    return None


def _widened(ci, f: PredictorFit, decades: float, chance: float):
    """The bootstrap band widened by the predictor's held-out error per decade it
    extrapolated in its check, times the decades this prediction extrapolates: the
    bootstrap knows the fit's noise, not how the form errs beyond the runs, which the
    check measured. Unchanged without a check or inside the runs."""
    if ci is None or not decades or not f.heldout_error or not f.heldout_span:
        return ci
    extra = f.heldout_error * decades / f.heldout_span
    return (max(ci[0] - extra, chance), min(ci[1] + extra, 1.0))
