"""The links of the task predictors (cdlaw.fit.predictors): step 2 of the two-step chains and
the direct fit, each bounded inside [0, 1], fitted by one batched least squares with its
bootstrap refits (cdlaw.fit.curves.fit_curve).

    link = fit_link(SIGMOID, bpb, acc, run, floor=0.25, xname="task_q_bpb", boot_n=100,
                    rng=rng, anchored=True)     # CurveFit, its refits in .bootstrap

Bounds (docs/downstream.md): a sigmoid's floor b at most the chance level and its ceiling
a + b at most 1; the capped exponential's floor 1 − ε at least 0 and its share s of ε
regained at L_min at most 1; the direct fit's floor the chance level. A forecast reads
every link within [chance, 1] (cdlaw.fit.forecast). Refits resample runs, each with all
its evaluations.
"""

from __future__ import annotations

import numpy as np

from cdlaw.fit.curves import EXP_DECAY, LOGACC_POWER, SIGMOID, Curve, fit_curve
from cdlaw.fit.predictor_fits import CurveFit
from cdlaw.fit.task_noise import MIN_SNR

LN10 = float(np.log(10.0))


def _height(th: np.ndarray) -> np.ndarray:
    """(top, x0, k, b) rows as the sigmoid's own (a = top − b, x0, k, b)."""
    return np.concatenate([th[:, :1] - th[:, 3:4], th[:, 1:]], axis=1)


def _top_jac(th, x):
    J = SIGMOID.jac(_height(th), x)
    J[:, :, 3] -= J[:, :, 0]  # b moves the floor and, through a = top − b, the height
    return J


# the sigmoid fitted by its ceiling: top ∈ [chance, 1] and b ∈ [0, chance] are a box, and
# a + b ≤ 1 is not
_SIGMOID_TOP = Curve(
    "sigmoid", ("top", "x0", "k", "b"), SIGMOID.formula,
    lambda th, x: SIGMOID.f(_height(th), x), _top_jac,
)  # fmt: skip


def run_counts(run: np.ndarray, boot: int, rng) -> np.ndarray:
    """(1 + boot, n) weights: ones, then each bootstrap's count of each row's run (runs
    resampled with replacement, a run's rows together)."""
    ids, inv = np.unique(run, return_inverse=True)
    w = [np.ones(len(run))]
    for _ in range(boot):
        c = np.bincount(rng.integers(0, len(ids), len(ids)), minlength=len(ids))
        w.append(c[inv].astype(float))
    return np.array(w)


def fit_link(
    curve: Curve, x, y, run, floor, xname, boot_n, rng, anchored=False, lowest=0.0
) -> CurveFit | None:
    """One link fitted to (x, y) by least squares, with `boot_n` refits (runs resampled,
    `run`: each point's run). `floor`: the chance level (None: unknown). `anchored` (a
    sigmoid): its ceiling fitted only where the runs reach towards it (reaches_ceiling,
    PROBES refits deciding), else held near 1 by the OLMo ladder's extra point, accuracy 1
    at a loss of 0, in the fit and every refit (their code's helper point); `lowest`: the
    capped exponential's L_min. None with too few points."""
    lo, hi, starts, fixed = _bounds_and_starts(curve, x, y, floor, lowest)
    if len(x) < len(curve.params) - len(fixed) + 1:
        return None
    fitted = _SIGMOID_TOP if curve is SIGMOID else curve
    best = _best(fitted, x, y, starts, lo, hi, fixed)
    if anchored:
        w = run_counts(run, PROBES, rng)[1:]
        tops, _ = fit_curve(fitted, x, y, w, np.repeat(best[None, :], PROBES, 0), lo, hi)
        if not reaches_ceiling(best, x, y, -lo[2], tops[:, 0]):
            x, y = np.append(x, 0.0), np.append(y, 1.0)
            best = _best(fitted, x, y, starts, lo, hi, fixed)
    thetas = best[None, :]
    if boot_n:
        w = run_counts(run, boot_n, rng)[1:]
        if len(x) > len(run):  # the extra point, in every refit
            w = np.concatenate([w, np.ones((boot_n, len(x) - len(run)))], axis=1)
        tb, _ = fit_curve(fitted, x, y, w, np.repeat(best[None, :], boot_n, 0), lo, hi, fixed)
        thetas = np.concatenate([thetas, tb])
    if curve is SIGMOID:
        thetas = _height(thetas)
    out = thetas.tolist()
    return CurveFit(curve.name, xname, out[0], out[1:], fixed)


def _best(curve: Curve, x, y, starts, lo, hi, fixed) -> np.ndarray:
    """The least-squares fit from the best of `starts`."""
    ones = np.ones((len(starts), len(x)))
    th, cost = fit_curve(curve, x, y, ones, starts, lo, hi, fixed)
    return th[int(np.argmin(cost))]


REACH = 0.75  # runs reach towards a ceiling: their top accuracies are this far up to it
PROBES = 200  # refits that say whether the runs pin the ceiling below 1
NEAR_ONE = 0.05  # ... at most this share of them may find one nearer 1 than the fit's


def reaches_ceiling(top_fit: np.ndarray, x, y, steepest: float, tops: np.ndarray) -> bool:
    """Whether a sigmoid fitted with its ceiling free (top, x0, k, b) shows a ceiling the runs
    reach towards: not a step (its steepness at the fit's bound, a jump between two runs
    the data cannot place), its midpoint inside the runs' losses (they show the bend), its
    rise from floor to ceiling at least MIN_SNR times the runs' scatter about it (else the
    plateau is a few noise steps), its highest accuracies (the mean of the top tenth) at least REACH of the way from its floor
    to its ceiling, and pinned: at most NEAR_ONE of `tops`, the ceilings of refits to
    resampled runs, lie nearer 1 than to it. Else the runs show the foot of the curve, and
    where it levels off is not theirs to say: arc_challenge on the OLMo ladder's 190M and
    370M runs fits a ceiling of 0.28, a tenth of whose refits put it above 0.64, and its
    760M scores 0.35."""
    top, x0, k, b = (float(v) for v in top_fit)
    if k <= -steepest * (1 - 1e-6) or top - b <= 0 or not x.min() <= x0 <= x.max():
        return False
    scatter = float(np.sqrt(np.mean((_SIGMOID_TOP.f(top_fit[None, :], x)[0] - y) ** 2)))
    if top - b < MIN_SNR * scatter:  # a rise of a few noise steps: no plateau to see
        return False
    high = np.sort(np.asarray(y, float))[-max(1, len(y) // 10) :].mean()
    near_one = float(np.mean(tops > (top + 1) / 2))
    return bool(high >= b + REACH * (top - b) and near_one <= NEAR_ONE)


def _bounds_and_starts(curve: Curve, x, y, floor, lowest: float = 0.0):
    """(lo, hi, starts, fixed) of a link's fit, every link within [0, 1] (module doc)."""
    span = float(np.ptp(x)) or 1.0
    if curve is EXP_DECAY:
        return _exp_bounds(x, y, floor, lowest, span)
    if curve is LOGACC_POWER:
        return _logacc_bounds(x, y, floor)
    # a sigmoid falling with a loss, by its ceiling (top, x0, k, b): floor b ≤ chance (≤ the
    # lowest accuracy, chance unknown), ceiling top = a + b in [that, 1]
    b_top = floor if floor is not None else max(float(y.min()), 1e-6)
    kmax = 50.0 / span
    lo = np.array([b_top, float(x.min()) - 5 * span, -kmax, 0.0])
    hi = np.array([1.0, float(x.max()) + 5 * span, 0.0, b_top])
    starts = []
    for x0 in (*np.quantile(x, [0.1, 0.5, 0.9]), float(x.min()) - span, float(x.max()) + span):
        for k in (2.0, 8.0):
            for b0 in sorted({b_top, max(min(float(y.min()), b_top) - 0.02, 0.0)}):
                starts.append([1.0, float(x0), -k / span, b0])
    return lo, hi, np.array(starts), {}


def _exp_bounds(x, y, floor, lowest: float, span: float):
    """The capped exponential: ε ≤ 1, share s ∈ [0, 1], γ > 0; L_min held. Its floor 1 − ε
    may settle below chance, as the sigmoid's may (the smallest runs score below it); what
    a forecast reads of it is never below chance."""
    top_eps = 1.0
    starts = []
    for g in np.array([0.1, 0.3, 1.0, 3.0, 10.0]) / max(float(np.median(x)), 1e-6):
        X = np.stack([np.ones_like(x), np.exp(-g * (x - lowest))], axis=1)
        c, *_ = np.linalg.lstsq(X, y, rcond=None)
        eps = float(np.clip(1 - c[0], 1e-3, top_eps))
        starts.append([eps, float(np.clip(c[1] / eps, 0.0, 1.0)), float(g), lowest])
    g_top = max(20.0 / max(span, 1e-3), max(s[2] for s in starts) * 1.01)
    lo = np.array([0.0, 0.0, 1e-3, lowest])
    hi = np.array([top_eps, 1.0, g_top, lowest])
    return lo, hi, np.array(starts), {"L_min": float(lowest)}


def _logacc_bounds(x, y, floor):
    """Krajewski et al.'s direct form in x = log10 C: log A free, α ≥ 0 (the accuracy rises
    with compute), the floor b the chance level (fitted below the lowest accuracy where it
    is unknown). Starts from their own fit, a line of log(−log q) in ln C, q the accuracy
    above the floor as a share of 1 − b."""
    b0 = floor if floor is not None else max(float(y.min()) - 0.01, 0.0)
    q = (y - b0) / (1 - b0)
    mid = float(np.median(x))
    m = (q > 0.01) & (q < 0.99)
    if m.sum() >= 2 and np.ptp(x[m]) > 0:
        slope, icpt = np.polyfit(x[m] * LN10, np.log(-np.log(q[m])), 1)
        alpha = float(np.clip(-slope, 1e-3, 5.0))
        at_mid = icpt + slope * LN10 * mid
    else:
        alpha = 0.1
        at_mid = float(np.log(-np.log(np.clip(np.median(q), 0.01, 0.99))))
    # log A with the same −log q at the runs' middle compute, for α and its neighbours
    starts = [[at_mid + a * LN10 * mid, a, b0] for a in (0.5 * alpha, alpha, 2.0 * alpha)]
    lo = np.array([-1e4, 0.0, 0.0])
    hi = np.array([1e4, 5.0, max(float(y.min()), 1e-6)])
    fixed = {"b": float(floor)} if floor is not None else {}
    return lo, hi, np.array(starts), fixed
