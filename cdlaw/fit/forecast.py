"""A task's metric at a model not trained, by one of its predictors (cdlaw.fit.predictors),
with a 95% band (docs/downstream.md); both within the accuracy's range, [chance, 1].

    f = forecast(task_predictors, n_params=7e9, tokens=140e9)   # Forecast
    f.value, f.ci95, f.predictor, f.spread, f.noise, f.supported

The band starts from the predictor's bootstrap: refit i of step 1 with refit i of the link
(cycled to the longer); a law's bootstrap losses, when given, replace step 1 of the
val-loss chains. Then, in turn:

1. beyond the runs, each side grows, in quadrature, by a 95% half-width of the error the
   checks found: Z_MAE times the predictor's held-out mean |error| per decade of
   extrapolation (the largest over its checks) times the decades this model lies beyond
   the runs (in N or in compute, whichever is more): the bootstrap knows the fit's noise,
   not how the form errs beyond the runs;
2. it takes in every other credible predictor's point (fitted, and, where checked, with a
   held-out error at most twice the chosen one's plus twice the noise): where the
   predictors disagree, the band says so;
3. each side grows, in quadrature, by 1.96 times the task's noise (cdlaw.fit.task_noise):
   the model's own last checkpoint scatters by that much about any curve.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from cdlaw.fit.predictor_choice import credible
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
    # every credible predictor's point here (the one used among them), and their spread
    points: dict[str, float] = field(default_factory=dict)
    spread: float | None = None  # largest minus smallest of `points`; None: one predictor
    noise: float | None = None  # the task's noise (cdlaw.fit.task_noise); None: unknown
    unsupported: str | None = None  # why the runs cannot support this prediction, or None

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
    with its 95% band (module doc); `loss` and `losses` (a law's point and bootstrap at the
    model) replace step 1 of the val-loss chains. None when no predictor can."""
    n_params, tokens = float(n_params), float(tokens)
    order = [predictor] if predictor else [tp.chosen, *PREDICTORS]
    chance = tp.chance or 0.0  # an accuracy's range is [chance, 1]
    noise = tp.noise.sd if tp.noise is not None else None
    for name in order:
        f = tp.fits.get(name) if name else None
        if name is None or f is None or not f.ok:
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
        points = {name: value} | {
            p: v for p in credible(tp.fits, name, noise)
            if np.isfinite(v := point(tp.fits[p], n_params, tokens, loss, chance))
        }  # fmt: skip
        if ci is not None:
            ci = (min(ci[0], *points.values()), max(ci[1], *points.values()))
            ci = _with_noise(ci, value, noise, chance)
        beyond = None
        if nf > 1.0001 or cf > 1.0001:
            beyond = f"N {nf:.3g}× and compute {cf:.3g}× the largest fitted"
        why = None if ci else "the predictor has no bootstrap refits (`--bootstrap 0`)"
        by = tp.chosen_by if name == tp.chosen else f"{tp.chosen} cannot predict here"
        if predictor and name != tp.chosen:
            by = f"asked for ({tp.chosen} is chosen: {tp.chosen_by})"
        spread = max(points.values()) - min(points.values()) if len(points) > 1 else None
        unsupported = tp.noise.why_unsupported() if tp.noise is not None else None
        return Forecast(
            tp.column, tp.task, tp.metric, value, ci, name, by, f.heldout_error,
            nf, cf, beyond, why, points, spread, noise, unsupported,
        )  # fmt: skip
    return None


# a mean absolute error is σ·√(2/π) for normal errors: 1.96σ is this many mean |errors|
Z_MAE = 1.96 * math.sqrt(math.pi / 2)


def _widened(ci, f: PredictorFit, decades: float, chance: float):
    """The bootstrap band widened by the error the checks found per decade of extrapolation,
    times the decades this prediction extrapolates, as a 95% half-width (Z_MAE mean |errors|)
    added in quadrature on each side: the bootstrap knows the fit's noise, not how the form
    errs beyond the runs, which the checks measured. Unchanged without a check or inside
    the runs."""
    rate = f.per_decade
    if ci is None or not decades or not rate:
        return ci
    z = Z_MAE * rate * decades
    mid = (ci[0] + ci[1]) / 2
    return (
        max(mid - math.hypot(mid - ci[0], z), chance),
        min(mid + math.hypot(ci[1] - mid, z), 1.0),
    )


def _with_noise(ci, value: float, noise: float | None, chance: float):
    """Each side of the band grown in quadrature by 1.96 × the task's noise, within
    [chance, 1]."""
    if not noise:
        return ci
    z = 1.96 * noise
    lo = value - math.hypot(value - ci[0], z)
    hi = value + math.hypot(ci[1] - value, z)
    return (max(lo, chance), min(hi, 1.0))
