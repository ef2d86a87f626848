"""Task accuracy at a model not trained: four predictors per task, fitted to a table of runs
(final rows and intermediate evaluations), compared on the largest model size held out,
and the one with the smaller held-out error chosen (docs/downstream.md).

    tp = fit_task_predictors(runs, boot=100, holdout=True)   # list[TaskPredictors]
    tp[0].chosen, tp[0].fits["task-loss"].heldout_error
    forecast(tp[0], n_params=7e9, tokens=140e9)               # Forecast: value, band, predictor

The predictors of an accuracy column task_<t>_acc (or _acc_norm):

- `task-loss`: Bhagia et al. 2024 (arXiv 2412.04403), two steps through the task's own loss,
  the gold continuation's bits per byte (task_<t>_bpb): step 1, bpb(N, D) = E + A/N^α +
  B/D^β on the final rows; step 2, acc = a / (1 + e^(−k·(bpb − x0))) + b with b the task's
  chance level (cdlaw.tasks.chance; fitted when unknown), on every evaluation of every run,
  intermediate checkpoints included: the link is a property of the model, not of the
  schedule.
- `val-loss`: the same two steps through the validation loss (today's `plan --link`).
- `val-loss-exp`: step 1 as above, then Gadre et al. 2024's (arXiv 2403.08540) exponential
  link acc = 1 − ε + K·e^(−γL), their Err(L) = ε − K·e^(−γL).
- `direct`: accuracy against compute at a fixed number of tokens per parameter, a
  sigmoid in log10 C, C = 6N(D + D′), fitted to the final rows at the target's ratio.

D in step 1 and in C is every token trained, D + D′. The average over tasks (task
"average", Gadre et al.'s 17-task mean) gets the predictors that need no bits per byte.

Held out (`holdout=True`): every predictor is fitted again without the runs (and their
checkpoints) of the largest N and predicts those runs' final accuracy; its error is the
mean absolute difference. The predictor with the least is chosen per task, but a tie
between val-loss-exp and a link that levels off goes to the latter (choose); without the
check the chain through the task's loss is used where it can be, else the validation loss's.
The 95% band pairs bootstrap refit i of step 1 (final runs resampled) with refit i of
step 2 (runs resampled, each with all its evaluations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from cdlaw.fit.curves import EXP_DECAY, SIGMOID, Curve, fit_curve, fit_power_nd
from cdlaw.fit.forecast import point
from cdlaw.fit.predictor_fits import (
    AVERAGE,
    LEVELS_OFF,
    PREDICTORS,
    RATIO_TOL,
    TIE_SE,
    CurveFit,
    PredictorFit,
    TaskPredictors,
)
from cdlaw.tasks.chance import chance_level
from cdlaw.tasks.columns import column, parse_column

RUN_KEYS = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "seed", "lr", "weight_decay")


@dataclass
class _Table:
    """The columns every predictor reads, as arrays, and which rows are final."""

    N: np.ndarray
    T: np.ndarray  # every token trained, D + D′
    loss: np.ndarray
    final: np.ndarray  # bool: a finished run's last evaluation (not a checkpoint)
    run: np.ndarray  # int: the run each row belongs to
    frame: pd.DataFrame
    step1: dict = field(default_factory=dict)  # fitted step 1s: every task shares the loss's

    @classmethod
    def of(cls, runs: pd.DataFrame) -> _Table:
        run = run_ids(runs)
        ckpt = runs["checkpoint"].to_numpy(bool) if "checkpoint" in runs.columns else None
        final = np.ones(len(runs), bool) if ckpt is None else ~ckpt
        return cls(
            runs["n_params"].to_numpy(float),
            (runs["fresh_tokens"] + runs["derived_tokens"]).to_numpy(float),
            runs["loss"].to_numpy(float),
            final,
            run,
            runs,
        )

    def metric(self, col: str) -> np.ndarray:
        return pd.to_numeric(self.frame[col], errors="coerce").to_numpy(float)


def run_ids(runs: pd.DataFrame) -> np.ndarray:
    """The run each row of a table belongs to, as an int: a run's checkpoint rows share its
    end's (the same N, D, D′, strategy, seed, lr and weight decay)."""
    keys = [k for k in RUN_KEYS if k in runs.columns]
    return runs.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()


def run_counts(run: np.ndarray, boot: int, rng) -> np.ndarray:
    """(1 + boot, n) weights: ones, then each bootstrap's count of each row's run (runs
    resampled with replacement, a run's rows together)."""
    ids, inv = np.unique(run, return_inverse=True)
    w = [np.ones(len(run))]
    for _ in range(boot):
        c = np.bincount(rng.integers(0, len(ids), len(ids)), minlength=len(ids))
        w.append(c[inv].astype(float))
    return np.array(w)


def accuracy_columns(runs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(column, task, metric) of each accuracy column (acc, acc_norm) of the table."""
    out = []
    for c in runs.columns:
        p = parse_column(str(c))
        if p and p[1] in ("acc", "acc_norm"):
            out.append((str(c), p[0], p[1]))
    return out


def with_average(runs: pd.DataFrame, tasks: list[str] | None) -> tuple[pd.DataFrame, list[str]]:
    """The table with a column average_acc: the mean accuracy over `tasks` (every task with
    an acc column when None), where each of them is finite; and the tasks averaged."""
    acc = {t: c for c, t, m in accuracy_columns(runs) if m == "acc"}
    names = list(acc) if tasks is None else [t for t in tasks if t in acc]
    if len(names) < 2:
        return runs, []
    runs = runs.copy()
    runs["average_acc"] = (
        runs[[acc[t] for t in names]]
        .apply(pd.to_numeric, errors="coerce")
        .mean(axis=1, skipna=False)
    )
    return runs, names


def fit_task_predictors(
    runs: pd.DataFrame,
    boot: int = 100,
    seed: int = 0,
    holdout: bool = False,
    chance: dict[str, float] | None = None,
    average: list[str] | None = None,
    task: str | None = None,
) -> list[TaskPredictors]:
    """The predictors of every accuracy column of `runs` (a prepared table, checkpoint rows
    marked by a boolean `checkpoint` column), and of the average over `average` tasks;
    each compared on the largest N held out when `holdout`."""
    runs, averaged = with_average(runs, average)
    cols = accuracy_columns(runs)
    if task is not None:
        cols = [c for c in cols if task in (c[0], c[1])]
    if averaged and task in (None, AVERAGE):
        cols.append(("average_acc", AVERAGE, "acc"))
    tab = _Table.of(runs)
    rng = np.random.default_rng(seed)
    out = []
    for col, name, metric in cols:
        floor: float | None
        if name == AVERAGE:
            known = [c for t in averaged if (c := chance_level(t, chance)) is not None]
            floor = float(np.mean(known)) if len(known) == len(averaged) else None
        else:
            floor = chance_level(name, chance)
        bpb: str | None = column(name, "bpb")
        if name == AVERAGE or bpb not in runs.columns:
            bpb = None
        out.append(_task(tab, col, name, metric, floor, bpb, boot, rng, holdout, averaged))
    return out


def _task(tab, col, name, metric, floor, bpb, boot, rng, holdout, averaged) -> TaskPredictors:
    y = tab.metric(col)
    ok = np.isfinite(y) & np.isfinite(tab.loss)
    fits = {p: _fit(p, tab, ok, y, floor, bpb, boot, rng) for p in PREDICTORS}
    heldout_n = None
    missed: dict[str, np.ndarray] = {}  # per predictor, |predicted − observed| of each run held out
    sizes = np.unique(tab.N[ok & tab.final])
    if holdout and len(sizes) >= 3:
        heldout_n = float(sizes[-1])
        train = ok & (tab.N < heldout_n)
        test = ok & tab.final & (tab.N == heldout_n)
        C = 6 * tab.N * tab.T
        seen = train & tab.final
        span = max(
            math.log10(heldout_n / tab.N[seen].max()), math.log10(C[test].max() / C[seen].max()), 0
        )
        for p, f in fits.items():
            if not f.ok:
                continue
            hf = _fit(p, tab, train, y, floor, bpb, 0, rng)
            if not hf.ok:  # fitted to every run, but not checked: never chosen over one that is
                continue
            pred = np.array(
                [point(hf, tab.N[i], tab.T[i], None, floor or 0.0) for i in np.flatnonzero(test)],
                float,
            )
            missed[p] = np.abs(pred - y[test])  # NaN where it cannot predict
            good = np.isfinite(missed[p])
            err = float(np.mean(missed[p][good])) if good.any() else math.nan
            fits[p] = replace(f, heldout_error=err, heldout_runs=int(good.sum()), heldout_span=span)
    chosen, over = choose({p: m for p, m in missed.items() if np.isfinite(m).any()})
    if chosen is not None:
        by = f"the least held-out error at N = {heldout_n:.3g}"
        if over:
            by += (
                f" among the predictors whose link levels off ({over}'s is lower by less than "
                f"{TIE_SE:g} standard errors of the difference, and its link has no ceiling)"
            )
    else:
        usable = [p for p in PREDICTORS if fits[p].ok]
        prefer = [p for p in ("task-loss", "val-loss", "val-loss-exp", "direct") if p in usable]
        chosen = prefer[0] if prefer else None
        by = (
            "default: the first that fits of task-loss, val-loss (no held-out check; "
            "`cdlaw downstream --holdout-largest` chooses by held-out error)"
        )
    fin = ok & tab.final
    return TaskPredictors(
        col, name, metric, floor, fits, chosen, by, heldout_n,
        float(tab.N[fin].max()) if fin.any() else math.nan,
        float((6 * tab.N * tab.T)[fin].max()) if fin.any() else math.nan,
        int(fin.sum()), int(ok.sum()), averaged if name == AVERAGE else [],
    )  # fmt: skip


def choose(missed: dict[str, np.ndarray]) -> tuple[str | None, str | None]:
    """The predictor with the least mean held-out error, from each one's |predicted −
    observed| on the same runs held out (NaN where it could not predict); and the one it
    was preferred over, if any. A predictor whose link does not level off (LEVELS_OFF) loses
    to one whose link does when their errors tie: the mean of their paired differences is
    within TIE_SE standard errors of it. So a coin toss between the two does not pick the
    link that, beyond the runs, climbs to an accuracy of 1. (None, None) for none."""
    mean = {p: float(np.nanmean(m)) for p, m in missed.items()}
    if not mean:
        return None, None
    best = min(mean, key=mean.__getitem__)
    if best in LEVELS_OFF:
        return best, None
    tied = []
    for p in LEVELS_OFF:
        if p not in missed:
            continue
        d = missed[p] - missed[best]
        d = d[np.isfinite(d)]
        if len(d) >= 2 and d.mean() <= TIE_SE * d.std(ddof=1) / math.sqrt(len(d)):
            tied.append(p)
    if not tied:
        return best, None
    return min(tied, key=mean.__getitem__), best


def _fit(p, tab: _Table, rows, y, floor, bpb, boot, rng) -> PredictorFit:
    """One predictor fitted to `rows` (bool) of the table; `boot` bootstrap refits."""
    fin = rows & tab.final
    if len(np.unique(tab.N[fin])) < 2:
        return PredictorFit(p, why_not="final runs of fewer than 2 sizes")
    if p == "direct":
        return _fit_direct(tab, fin, y, floor, boot, rng)
    if p == "task-loss":
        if bpb is None:
            return PredictorFit(p, why_not="no bits-per-byte column for this task")
        x = tab.metric(bpb)
        xname = bpb
    else:
        x, xname = tab.loss, "loss"
    rows = rows & np.isfinite(x) & (x > 0)
    fin = rows & tab.final
    if fin.sum() < 6:
        return PredictorFit(p, why_not=f"{int(fin.sum())} final runs; step 1 needs 6")
    step1 = _step1(tab, fin, x, xname, boot, rng)
    curve = SIGMOID if p != "val-loss-exp" else EXP_DECAY
    link = _fit_link(curve, x[rows], y[rows], tab.run[rows], floor, xname, boot, rng, falling=True)
    if link is None:
        return PredictorFit(p, why_not="too few evaluations for its link")
    return PredictorFit(p, step1, (link,))


def _step1(tab: _Table, fin, x, xname: str, boot: int, rng) -> CurveFit:
    """Step 1 on the final rows `fin`, fitted once per (quantity, rows, refits)."""
    key = (xname, fin.tobytes(), boot)
    if key not in tab.step1:
        th, _ = fit_power_nd(tab.N[fin], tab.T[fin], x[fin], run_counts(tab.run[fin], boot, rng))
        tab.step1[key] = CurveFit("power_nd", "N, D", th[0].tolist(), th[1:].tolist())
    return tab.step1[key]


def _fit_direct(tab: _Table, fin, y, floor, boot, rng) -> PredictorFit:
    ratio = tab.T / tab.N
    x = np.log10(6 * tab.N * tab.T)
    links = []
    for members in _ratio_groups(ratio, fin):
        if len(np.unique(tab.N[members])) < 4:
            continue
        link = _fit_link(
            SIGMOID, x[members], y[members], tab.run[members], floor, "log10_flops", boot, rng,
            falling=False,
        )  # fmt: skip
        if link is not None:
            links.append(replace(link, ratio=float(np.exp(np.log(ratio[members]).mean()))))
    if not links:
        return PredictorFit(
            "direct", why_not="no ratio of tokens per parameter has final runs of 4 sizes or more"
        )
    return PredictorFit("direct", None, tuple(links))


def _ratio_groups(ratio: np.ndarray, rows: np.ndarray) -> list[np.ndarray]:
    """Rows (bool masks) whose ratios lie within RATIO_TOL of their neighbours'."""
    idx = np.flatnonzero(rows)
    if not len(idx):
        return []
    order = idx[np.argsort(ratio[idx])]
    groups, cur = [], [order[0]]
    for i in order[1:]:
        if ratio[i] > ratio[cur[-1]] * (1 + RATIO_TOL):
            groups.append(cur)
            cur = []
        cur.append(i)
    groups.append(cur)
    out = []
    for g in groups:
        m = np.zeros(len(ratio), bool)
        m[g] = True
        out.append(m)
    return out


def _fit_link(curve, x, y, run, floor, xname, boot_n, rng, falling) -> CurveFit | None:
    free = len(curve.params) - (1 if curve is SIGMOID and floor is not None else 0)
    if len(x) < free + 1:
        return None
    lo, hi, starts, fixed = _bounds_and_starts(curve, x, y, floor, falling)
    ones = np.ones((len(starts), len(x)))
    th, cost = fit_curve(curve, x, y, ones, starts, lo, hi, fixed)
    best = th[int(np.argmin(cost))]
    thetas = [best.tolist()]
    if boot_n:
        w = run_counts(run, boot_n, rng)[1:]
        tb, _ = fit_curve(curve, x, y, w, np.repeat(best[None, :], boot_n, 0), lo, hi, fixed)
        thetas += tb.tolist()
    return CurveFit(curve.name, xname, thetas[0], thetas[1:], fixed)


def _bounds_and_starts(curve: Curve, x, y, floor, falling: bool):
    span = float(np.ptp(x)) or 1.0
    if curve is EXP_DECAY:
        lo, hi = np.array([0.0, 0.0, 1e-3]), np.array([1.0, 1e12, 20.0 / max(span, 1e-3)])
        starts = []
        for g in np.array([0.1, 0.3, 1.0, 3.0, 10.0]) / max(float(np.median(x)), 1e-6):
            X = np.stack([np.ones_like(x), np.exp(-g * x)], axis=1)
            c, *_ = np.linalg.lstsq(X, y, rcond=None)
            starts.append([float(np.clip(1 - c[0], 0, 1)), float(max(c[1], 1e-9)), float(g)])
        # K's and γ's caps rise to the starts' least squares; ε, the error at a loss of
        # infinity, stays within [0, 1]
        hi[1:] = np.maximum(hi[1:], np.array(starts)[:, 1:].max(0) * 1.01 + 1e-9)
        return lo, hi, np.array(starts), {}
    b0 = floor if floor is not None else max(float(y.min()) - 0.01, 0.0)
    kmax = 50.0 / span
    lo = np.array([0.0, float(x.min()) - 5 * span, -kmax if falling else 0.0, 0.0])
    # the height a at most 1 − b: the sigmoid levels off at an accuracy of 1 at most
    top = 1.0 - (floor or 0.0)
    hi = np.array(
        [top, float(x.max()) + 5 * span, 0.0 if falling else kmax, max(float(y.min()), 1e-6)]
    )
    sign = -1.0 if falling else 1.0
    starts = []
    for x0 in (*np.quantile(x, [0.1, 0.5, 0.9]), float(x.min()) - span, float(x.max()) + span):
        for k in (2.0, 8.0):
            a = max(float(y.max()) - b0, 0.05) * (2.0 if x0 < x.min() or x0 > x.max() else 1.2)
            starts.append([min(a, top), float(x0), sign * k / span, b0])
    fixed = {"b": float(floor)} if floor is not None else {}
    return lo, hi, np.array(starts), fixed
