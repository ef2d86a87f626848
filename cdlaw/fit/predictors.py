"""Task accuracy at a model not trained: four predictors per task, fitted to a table of runs
(final rows and intermediate evaluations), checked on larger sizes held out, and one chosen
(cdlaw.fit.predictor_choice; docs/downstream.md).

    tp = fit_task_predictors(runs, boot=100)         # list[TaskPredictors], checked
    tp[0].chosen, tp[0].fits["task-loss"].heldout_error, tp[0].noise
    forecast(tp[0], n_params=7e9, tokens=140e9)      # Forecast: value, band, predictor

The predictors of an accuracy column task_<t>_acc (or _acc_norm), each bounded: it reads
at least the task's chance level and at most a ceiling ≤ 1, and moves one way with loss or
compute.

- `task-loss`: Bhagia et al. 2024 (arXiv 2412.04403), two steps through the task's own loss,
  the gold continuation's bits per byte (task_<t>_bpb): step 1, bpb(N, D) = E + A/N^α +
  B/D^β on the final rows; step 2, acc = a / (1 + e^(−k·(bpb − x0))) + b fitted as their
  code fits it: to every evaluation of every run but each run's first tenth (intermediate
  checkpoints included: the link is a property of the model, not of the schedule), with
  one more point, accuracy 1 at a loss of 0, which holds the ceiling a + b at 1 unless the
  runs bend towards a lower one. b ≤ the chance level (early checkpoints of
  length-normalised scores fall below it); what the link reads is never below chance.
- `val-loss`: the same two steps through the validation loss.
- `val-loss-exp`: step 1 as above, then Gadre et al. 2024's (arXiv 2403.08540) exponential
  link, acc = 1 − ε + ε·s·e^(−γ(L − L_min)), their Err(L) = ε − K·e^(−γL) with a ceiling:
  at L_min, step 1's irreducible loss E (no model of the chain reaches below it), the
  accuracy is at most 1; what the link reads is never below chance.
- `direct`: Krajewski et al. 2025 (arXiv 2512.08894): at one ratio of tokens per parameter,
  −log of the accuracy above chance is a power law in compute, acc = b + (1 − b)·
  exp(−A·C^(−α)), C = 6N(D + D′), fitted to the final rows at the target's ratio.

D in step 1 and in C is every token trained, D + D′. The average over tasks (task
"average", Gadre et al.'s 17-task mean) gets the predictors that need no bits per byte.

Held out (`holdout=True`): every predictor is fitted again without the runs (and their
checkpoints) of the largest size, and, where four sizes or more allow, of the two largest,
and predicts those runs' final accuracy; the bounded default is kept unless another is
better beyond the noise (cdlaw.fit.predictor_choice). Each task's noise is measured from
its evaluations (cdlaw.fit.task_noise). The 95% band pairs bootstrap refit i of step 1
(final runs resampled) with refit i of step 2 (runs resampled, each with all its
evaluations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from cdlaw.fit.curves import EXP_DECAY, LOGACC_POWER, SIGMOID, fit_power_nd
from cdlaw.fit.forecast import point
from cdlaw.fit.predictor_choice import choose, credible, held_out_checks
from cdlaw.fit.predictor_fits import (
    AVERAGE,
    PREDICTORS,
    RATIO_TOL,
    CurveFit,
    PredictorFit,
    TaskPredictors,
)
from cdlaw.fit.predictor_links import fit_link, run_counts
from cdlaw.fit.task_noise import task_noise
from cdlaw.tasks.chance import chance_level
from cdlaw.tasks.columns import column, parse_column

RUN_KEYS = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "seed", "lr", "weight_decay")
SKIP = 0.1  # each run's first tenth of evaluations is left out of the links (the ladder's)
DIRECT_SIZES = 3  # a direct fit needs final runs of this many sizes at its ratio


@dataclass
class _Table:
    """The columns every predictor reads, as arrays, and which rows are final."""

    N: np.ndarray
    T: np.ndarray  # every token trained by the run, D + D′
    loss: np.ndarray
    final: np.ndarray  # bool: a finished run's last evaluation (not a checkpoint)
    run: np.ndarray  # int: the run each row belongs to
    tokens: np.ndarray  # tokens trained at each row's evaluation (NaN where unknown)
    early: np.ndarray  # bool: among its run's first SKIP of evaluations
    frame: pd.DataFrame
    step1: dict = field(default_factory=dict)  # fitted step 1s: every task shares the loss's

    @classmethod
    def of(cls, runs: pd.DataFrame) -> _Table:
        run = run_ids(runs)
        ckpt = runs["checkpoint"].to_numpy(bool) if "checkpoint" in runs.columns else None
        final = np.ones(len(runs), bool) if ckpt is None else ~ckpt
        T = (runs["fresh_tokens"] + runs["derived_tokens"]).to_numpy(float)
        seen = (
            pd.to_numeric(runs["tokens_trained"], errors="coerce").to_numpy(float)
            if "tokens_trained" in runs.columns
            else np.full(len(runs), np.nan)
        )
        tokens = np.where(final, T, seen)
        return cls(
            runs["n_params"].to_numpy(float), T, runs["loss"].to_numpy(float), final, run,
            tokens, _early(run, tokens, final), runs,
        )  # fmt: skip

    def metric(self, col: str) -> np.ndarray:
        return pd.to_numeric(self.frame[col], errors="coerce").to_numpy(float)


def _early(run: np.ndarray, tokens: np.ndarray, final: np.ndarray) -> np.ndarray:
    """Each run's first SKIP of evaluations by tokens trained (none where their order is
    unknown): the ladder's authors leave them out of step 2, where the first steps of
    training score by chance and the link is not yet what it will be."""
    early = np.zeros(len(run), bool)
    for r in np.unique(run):
        m = np.flatnonzero(run == r)
        if len(m) < 2 or not np.isfinite(tokens[m]).all():
            continue
        m = m[np.argsort(tokens[m], kind="stable")]
        early[m[: int(SKIP * len(m))]] = True
    return early & ~final


def run_ids(runs: pd.DataFrame) -> np.ndarray:
    """The run each row of a table belongs to, as an int: a run's checkpoint rows share its
    end's (the same N, D, D′, strategy, seed, lr and weight decay)."""
    keys = [k for k in RUN_KEYS if k in runs.columns]
    return runs.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()


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
    holdout: bool = True,
    chance: dict[str, float] | None = None,
    average: list[str] | None = None,
    task: str | None = None,
) -> list[TaskPredictors]:
    """The predictors of every accuracy column of `runs` (a prepared table, checkpoint rows
    marked by a boolean `checkpoint` column), and of the average over `average` tasks;
    each checked on larger sizes held out when `holdout` (cdlaw.fit.predictor_choice)."""
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
        spec = _Spec(col, name, metric, floor, bpb, averaged if name == AVERAGE else [])
        out.append(_task(tab, spec, boot, rng, holdout))
    return out


@dataclass(frozen=True)
class _Spec:
    """One accuracy column and what its predictors read."""

    column: str
    task: str
    metric: str
    floor: float | None  # the chance level; None: fitted
    bpb: str | None  # its bits-per-byte column, for task-loss
    averaged: list[str]


def _task(tab: _Table, spec: _Spec, boot: int, rng, holdout: bool) -> TaskPredictors:
    y = tab.metric(spec.column)
    ok = np.isfinite(y) & np.isfinite(tab.loss)
    fits = {p: _fit(p, tab, ok, y, spec, boot, rng) for p in PREDICTORS}
    noise = task_noise(y, tab.run, tab.final, tab.tokens, _seed_scatter(tab, ok & tab.final, y))
    sizes = np.unique(tab.N[ok & tab.final])
    ratio = tab.T / tab.N
    checks = held_out_checks(tab.N[ok], ratio[ok], tab.final[ok]) if holdout else []
    missed: dict[str, list[np.ndarray]] = {}
    preds: dict[str, list[np.ndarray]] = {}
    for check in checks:
        held = check.held_out(tab.N, ratio)
        for p, (f, errors, pred) in _check(tab, ok, y, spec, fits, held, check, rng).items():
            fits[p] = f
            missed.setdefault(p, []).append(errors)
            preds.setdefault(p, []).append(pred)
    usable = [p for p in PREDICTORS if fits[p].ok]
    whole = {p: len(m) == len(checks) for p, m in missed.items()}  # checked by every check
    aligned = {p: np.concatenate(m) for p, m in missed.items() if whole[p]}
    aligned = {p: m for p, m in aligned.items() if np.isfinite(m).any()}
    chosen, by = choose(aligned, usable, noise.sd, checks, len(sizes))
    spread = None
    if chosen in aligned:  # the credible predictors' largest minus smallest point, per run
        near = [chosen, *(p for p in credible(fits, chosen, noise.sd) if p in aligned)]
        if len(near) > 1:
            at = np.array([np.concatenate(preds[p]) for p in near])
            spread = float(np.nanmean(np.nanmax(at, axis=0) - np.nanmin(at, axis=0)))
    fin = ok & tab.final
    return TaskPredictors(
        spec.column, spec.task, spec.metric, spec.floor, fits, chosen, by,
        next((c.key for c in checks if c.by == "size"), None),
        float(tab.N[fin].max()) if fin.any() else math.nan,
        float((6 * tab.N * tab.T)[fin].max()) if fin.any() else math.nan,
        int(fin.sum()), int(ok.sum()), spec.averaged, noise, [c.label for c in checks],
        spread,
    )  # fmt: skip


def _check(tab, ok, y, spec, fits, held: np.ndarray, check, rng) -> dict:
    """Every predictor fitted again without the rows `held` (runs held out with their
    checkpoints), predicting their final accuracy: {predictor: (its fit with this check
    added, |error| of each run held out, its prediction of each)}."""
    train = ok & ~held
    test = np.flatnonzero(ok & tab.final & held)
    C = 6 * tab.N * tab.T
    seen = train & tab.final
    span = max(
        math.log10(tab.N[test].max() / tab.N[seen].max()),
        math.log10(C[test].max() / C[seen].max()),
        0.0,
    )
    out = {}
    for p, f in fits.items():
        if not f.ok:
            continue
        hf = _fit(p, tab, train, y, spec, 0, rng)
        if not hf.ok:  # fitted to every run, but not by this check: left out of its errors
            continue
        floor = spec.floor or 0.0
        pred = np.array([point(hf, tab.N[i], tab.T[i], None, floor) for i in test], float)
        errors = np.abs(pred - y[test])  # NaN where it cannot predict
        good = np.isfinite(errors)
        err = float(np.mean(errors[good])) if good.any() else math.nan
        done_here = {"held_out": check.label, "error": err, "runs": int(good.sum()), "span": span}
        checks = (*f.checks, done_here)
        done = [c for c in checks if math.isfinite(c["error"])]
        pooled = _pooled(done)
        out[p] = (
            replace(
                f, heldout_error=pooled, heldout_runs=int(sum(c["runs"] for c in done)),
                heldout_span=max((c["span"] for c in done), default=None), checks=checks,
            ),
            errors,
            pred,
        )  # fmt: skip
    return out


def _pooled(checks: list[dict]) -> float | None:
    """The mean |error| over every run held out by every check."""
    runs = sum(c["runs"] for c in checks)
    return sum(c["error"] * c["runs"] for c in checks) / runs if runs else None


def _seed_scatter(tab: _Table, fin: np.ndarray, y: np.ndarray) -> tuple[float, int] | None:
    """(pooled sd, groups) of the metric between final runs that differ only in seed (the
    table names seeds), or None."""
    if "seed" not in tab.frame.columns or fin.sum() < 2:
        return None
    keys = [k for k in RUN_KEYS if k in tab.frame.columns and k != "seed"]
    rows = tab.frame[fin].assign(_y=y[fin])
    g = rows.groupby(keys, dropna=False, sort=False)["_y"]
    n = g.transform("size").to_numpy()
    if not (n > 1).any():
        return None
    dev = (rows["_y"].to_numpy() - g.transform("mean").to_numpy())[n > 1]
    sizes = g.size()
    sizes = sizes[sizes > 1]
    return float(np.sqrt(np.sum(dev**2) / int((sizes - 1).sum()))), len(sizes)


def _fit(p, tab: _Table, rows, y, spec: _Spec, boot, rng) -> PredictorFit:
    """One predictor fitted to `rows` (bool) of the table; `boot` bootstrap refits."""
    fin = rows & tab.final
    if len(np.unique(tab.N[fin])) < 2:
        return PredictorFit(p, why_not="final runs of fewer than 2 sizes")
    if p == "direct":
        return _fit_direct(tab, fin, y, spec.floor, boot, rng)
    if p == "task-loss":
        if spec.bpb is None:
            return PredictorFit(p, why_not="no bits-per-byte column for this task")
        x = tab.metric(spec.bpb)
        xname = spec.bpb
    else:
        x, xname = tab.loss, "loss"
    rows = rows & np.isfinite(x) & (x > 0)
    fin = rows & tab.final
    if fin.sum() < 6:
        return PredictorFit(p, why_not=f"{int(fin.sum())} final runs; step 1 needs 6")
    step1 = _step1(tab, fin, x, xname, boot, rng)
    link_rows = rows & ~tab.early
    data = (x[link_rows], y[link_rows], tab.run[link_rows])
    if p == "val-loss-exp":
        lowest = min(step1.theta[0], float(x[link_rows].min()))
        link = fit_link(EXP_DECAY, *data, spec.floor, xname, boot, rng, lowest=lowest)
    else:
        link = fit_link(SIGMOID, *data, spec.floor, xname, boot, rng, anchored=True)
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
        if len(np.unique(tab.N[members])) < DIRECT_SIZES:
            continue
        link = fit_link(
            LOGACC_POWER, x[members], y[members], tab.run[members], floor, "log10_flops", boot,
            rng,
        )  # fmt: skip
        if link is not None:
            links.append(replace(link, ratio=float(np.exp(np.log(ratio[members]).mean()))))
    if not links:
        return PredictorFit(
            "direct",
            why_not=f"no ratio of tokens per parameter has final runs of {DIRECT_SIZES} sizes "
            "or more",
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
