"""A run's own continuation: the schedule-aware curve laws fitted to its curve so far, and
the loss they predict at the end of any schedule, with a 95% band.

    cont = fit_continuation(steps, loss, plan.lr, peak_lr=plan.peak)
    loss, lo, hi = cont.predict(plan.lr)                       # the planned end
    loss, lo, hi = cont.predict(plan.ending(now, now * 1.25))  # a cooldown now

Both laws of cdlaw.govern.schedule_laws (Tissue et al. 2024; Luo et al. 2025) are fitted
to the points past FIT_FROM of the steps seen (the first steps after warmup follow no
power law in the lr area), binned to at most MAX_POINTS, each point weighted by how near
it lies to the last one (`recency`): the fit follows where the curve is going, not the
transient it is leaving. The point prediction is Tissue et al.'s law's (PREDICT); the
band pools both laws' bootstrap refits (model choice included): each refit adds to the
fitted curve moving blocks of its residuals (their autocorrelation kept) and draws the
gain prior's centre from the prior, so a gain the curve does not identify is as
uncertain as the prior says, and the band widens with the distance the prediction
carries the fit. The gain prior (GAIN_PRIOR) is what 27 published
curves measure (docs/govern.md, docs/results.md). Data-constrained runs pass `weights`:
each step's share of a fresh token's value, which scales its lr in the forward area.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cdlaw.govern.schedule_laws import (
    LAWS,
    MEMORY_PER_DECAY,
    GainPrior,
    LawFit,
    annealing,
    fit_law,
    shrunk,
    tissue_momentum,
)
from cdlaw.system.errors import BadInput

FIT_FROM = 0.2  # fit the points at or past this share of the steps seen
MAX_POINTS = 400  # the curve is binned by step to at most this many points
MIN_POINTS = 8  # the fewest binned points past FIT_FROM a curve law is fitted to
REFITS = 100  # bootstrap refits per law
# The gain (nats an anneal from the peak lr to zero removes), per law: the mean and spread
# of the per-curve fits to Luo et al.'s 27 published curves (benchmarks/bench_curves.py
# `prior`), the spread widened to a third of the mean for setups unlike theirs.
GAIN_PRIOR = {
    "tissue2024": GainPrior(0.139, 0.046),
    "multipower2025": GainPrior(0.137, 0.046),
}
# The point prediction: one law's name, or "mean" of the laws. Tissue et al.'s, with the
# memory of the schedule's decay: on half curves it errs least under every schedule; the
# multi-power law's fixed shape predicts half cosines high (docs/results.md). Both laws'
# refits make the band.
PREDICT = "tissue2024"
# The band's floor for the power law's own extrapolation: a relative error of κ per unit
# of ln(S1 at the end / S1 now), κ the run's own backtest error (the law fitted to the
# first half of the steps seen, predicting the last point) per unit of ln S1 it spanned,
# at least KAPPA_FLOOR; KAPPA_UNMEASURED when the first half is too short to fit.
KAPPA_FLOOR = 0.001
KAPPA_UNMEASURED = 0.005
Z95 = 1.96


@dataclass(frozen=True)
class Continuation:
    """The laws fitted to one run (fits) and their bootstrap refits (draws), on the
    run's schedule so far; `annealed` is the share of the peak lr the observed steps have
    already dropped (0: a stable-phase curve, whose gain is the prior's); `momentum` is
    Tissue et al.'s λ for the planned schedule, kept for every schedule it predicts."""

    fits: dict[str, LawFit]
    draws: dict[str, list[LawFit]]
    fit_steps: np.ndarray
    fit_loss: np.ndarray
    annealed: float
    now: int  # the last step seen
    kappa: float  # the power law's extrapolation error per unit of ln S1 (backtest)
    prior_spread: dict[str, float]  # each law's gain prior, sd over mean
    momentum: float
    prior_mean: dict[str, float]  # each law's gain prior's mean, nats

    @property
    def law(self) -> str:
        """Which law(s) make the point prediction, in words."""
        return " and ".join(self.fits) if PREDICT == "mean" else PREDICT

    def predict(self, lr: np.ndarray, weights: np.ndarray | None = None):
        """(loss, lo, hi) at the last step of the per-step schedule lr."""
        loss, lo, hi = self.predict_at(lr, [len(lr)], weights)
        return float(loss[0]), float(lo[0]), float(hi[0])

    def predict_at(self, lr: np.ndarray, steps, weights: np.ndarray | None = None):
        """(loss, lo, hi) arrays at `steps` (1-based) of the schedule lr (which follows
        the run's own up to now). The band is the refits' 2.5–97.5 percentiles (every
        law's point inside it), at least ±1.96·√(base² + anneal²) around the point: base
        the power law's extrapolation (κ·ln(S1/S1 now) of the loss), anneal the loss the
        schedule's lr drops still ahead remove times the gain prior's relative spread, that
        loss taken at the prior's mean gain where the fit's is smaller: a gain fitted low on
        the curve so far is no surer of the anneal ahead."""
        steps = np.asarray(steps, dtype=int)
        area = np.cumsum(lr if weights is None else lr * weights)
        s1 = area[steps - 1]
        ahead = steps > self.now
        points, pool, anneal = [], [], []
        for law, fit in self.fits.items():
            x = annealing(law, lr, steps, self.momentum)
            x_now = annealing(law, lr, [min(self.now, len(lr))], self.momentum)[0]
            points.append(fit.loss(s1, x))
            pool += [d.loss(s1, x) for d in self.draws[law]]
            B = max(fit.B, self.prior_mean[law] / fit.gain_unit)
            anneal.append(self.prior_spread[law] * B * np.maximum(x - x_now, 0.0))
        point = np.mean(points, axis=0) if PREDICT == "mean" else points[LAWS.index(PREDICT)]
        lo, hi = np.min(points, axis=0), np.max(points, axis=0)
        if pool:
            p_lo, p_hi = np.percentile(np.array(pool), [2.5, 97.5], axis=0)
            lo, hi = np.minimum(lo, p_lo), np.maximum(hi, p_hi)
        base = self.kappa * np.log(np.maximum(s1 / area[min(self.now, len(area)) - 1], 1.0)) * point
        half = np.where(ahead, Z95 * np.hypot(base, np.mean(anneal, axis=0)), 0.0)
        return point, np.minimum(lo, point - half), np.maximum(hi, point + half)

    def draws_at(self, lr: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Every refit's loss at the last step of lr (all laws' refits, in one order)."""
        step = [len(lr)]
        s1 = np.cumsum(lr if weights is None else lr * weights[: len(lr)])[step[0] - 1]
        out = []
        for law in self.fits:
            x = annealing(law, lr, step, self.momentum)[0]
            out += [float(d.loss(s1, x)) for d in self.draws[law]]
        return np.array(out)

    def to_dict(self) -> dict:
        return {
            law: {"L0": f.L0, "A": f.A, "alpha": f.alpha, "gain": f.gain, "sigma": f.sigma}
            for law, f in self.fits.items()
        }


def binned(steps: np.ndarray, loss: np.ndarray, max_points: int = MAX_POINTS):
    """The curve averaged in at most max_points bins of equal width in steps (empty bins
    dropped): a dense, noisy training loss becomes a curve the laws can be fitted to."""
    if len(steps) <= max_points:
        return steps.astype(float), loss.astype(float)
    edges = np.linspace(steps[0], steps[-1] + 1e-9, max_points + 1)
    which = np.clip(np.searchsorted(edges, steps, side="right") - 1, 0, max_points - 1)
    count = np.bincount(which, minlength=max_points)
    keep = count > 0
    s = np.bincount(which, weights=steps, minlength=max_points)[keep] / count[keep]
    y = np.bincount(which, weights=loss, minlength=max_points)[keep] / count[keep]
    return s, y


def fit_continuation(
    steps: np.ndarray,
    loss: np.ndarray,
    lr: np.ndarray,
    peak_lr: float,
    weights: np.ndarray | None = None,
    priors: dict[str, GainPrior] | None = None,
    refits: int = REFITS,
    seed: int = 0,
    where: str = "the log",
    per_decay: float = MEMORY_PER_DECAY,
) -> Continuation:
    """Both laws fitted to the curve (steps 1-based, within the planned schedule lr) and
    their refits; BadInput when too few points lie past FIT_FROM of the steps seen.
    per_decay: Tissue et al.'s memory per decay step (schedule_laws.tissue_momentum)."""
    priors = priors or GAIN_PRIOR
    steps = np.asarray(steps, dtype=float)
    loss = np.asarray(loss, dtype=float)
    warm = int(np.argmax(lr >= (1 - 1e-3) * np.max(lr[: int(steps[-1])]))) + 1
    keep = (steps >= FIT_FROM * steps[-1]) & (steps > warm)
    s, y = binned(steps[keep], loss[keep])
    if len(s) < MIN_POINTS:
        raise BadInput(
            f"{where}: only {len(s)} point(s) past warmup and past {FIT_FROM:.0%} of the steps "
            f"seen; the curve law needs {MIN_POINTS}: let the run go on, or log the loss more often"
        )
    at = np.maximum(np.round(s).astype(int), 1)
    s1 = np.cumsum(lr if weights is None else lr * weights)[at - 1]
    w = recency(s)
    rng = np.random.default_rng(seed)
    momentum = tissue_momentum(lr, per_decay)
    fits, draws = {}, {}
    for law in LAWS:
        x = annealing(law, lr, at, momentum)
        fits[law] = fit_law(law, s1, x, y, peak_lr, priors[law], momentum=momentum, weights=w)
        draws[law] = _refits(fits[law], s1, x, y, w, peak_lr, priors[law], refits, rng, momentum)
    seen = lr[: int(steps[-1])]
    annealed = float(1 - seen[-1] / np.max(seen)) if np.max(seen) > 0 else 0.0
    spread = {law: priors[law].sd / priors[law].mean for law in LAWS}
    means = {law: priors[law].mean for law in LAWS}
    kappa = _backtest(at, y, s1, lr, peak_lr, priors, momentum)
    return Continuation(fits, draws, s, y, annealed, int(steps[-1]), kappa, spread, momentum,
                        means)  # fmt: skip


def recency(steps: np.ndarray) -> np.ndarray:
    """Each point's weight in a curve law's fit: rising linearly with its step from 1/n at
    the first point to 1 + 1/n at the last, scaled to mean 1 (n points). A law that holds
    only roughly over a long window is fitted where it must hold, next to the steps it
    predicts: the early points, still leaving the transient after warmup, count least."""
    s = np.asarray(steps, dtype=float)
    span = s[-1] - s[0]
    w = (s - s[0]) / span + 1 / len(s) if span > 0 else np.ones(len(s))
    return w / w.mean()


def _backtest(at, y, s1, lr, peak_lr, priors, momentum) -> float:
    """κ: the laws fitted to the binned points in the first half of the steps seen predict
    the last three; their mean relative error per unit of the ln S1 they extrapolate over."""
    first = at <= at[-1] / 2
    if first.sum() < MIN_POINTS:
        return KAPPA_UNMEASURED
    preds = []
    for law in LAWS:
        x = annealing(law, lr, at, momentum)
        fit = fit_law(law, s1[first], x[first], y[first], peak_lr, priors[law], momentum=momentum,
                      weights=recency(at[first]))  # fmt: skip
        preds.append(fit.loss(s1[-3:], x[-3:]))
    error = abs(float(np.mean(np.mean(preds, axis=0) / y[-3:])) - 1)
    span = math.log(s1[-1] / s1[first][-1])
    return max(error / span, KAPPA_FLOOR) if span > 0 else KAPPA_UNMEASURED


def _refits(
    fit: LawFit, s1, x, y, w, peak_lr, prior: GainPrior, n: int, rng, momentum
) -> list[LawFit]:
    """n refits on the fitted curve plus moving blocks of its relative residuals (the
    points weighted by w, as the fit), each with the prior's centre drawn from the prior."""
    if n <= 0:
        return []
    fitted = fit.loss(s1, x)
    res = y / fitted - 1
    block = int(min(max(math.ceil((1 + fit.rho) / (1 - fit.rho)), 1), max(len(y) // 3, 1)))
    out = []
    for _ in range(n):
        starts = rng.integers(0, len(y) - block + 1, size=math.ceil(len(y) / block))
        idx = (starts[:, None] + np.arange(block)[None, :]).ravel()[: len(y)]
        centre = max(prior.mean + prior.sd * rng.standard_normal(), 0.0)
        weighed = shrunk(GainPrior(centre, prior.sd), fit.rho)
        out.append(fit_law(fit.law, s1, x, fitted * (1 + res[idx]), peak_lr, weighed,
                           near=fit.alpha, autocorrelated=False, momentum=momentum,
                           weights=w))  # fmt: skip
    return out
