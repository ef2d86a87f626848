"""What the loss buys: per task, the link from validation loss to the task's metric, and
whether every strategy's runs fall on one curve (docs/downstream.md).

    result = fit_downstream(load_runs("runs/demo"))    # Downstream: one TaskLink per column
    result.write("runs/demo/downstream.json")          # read back: cdlaw.tasks.downstream_json

For each task column of the runs (task_<task>_<metric>, cdlaw.tasks.columns) whose metric has a
link form (cdlaw.fit.link: `power` for bpb, `sigmoid` for acc and acc_norm):

- the pooled link, fitted by least squares to every finished run, its RMSE beside the
  metric's seed noise (the scatter between runs that differ only in seed), its 95%
  intervals and bootstrap refits (runs resampled), which `cdlaw plan --link` carries
  through to a band on the predicted metric;
- the link of each strategy on its own runs;
- the collapse test: the pooled curve against the same curve with each strategy shifted in
  loss (one offset δ per strategy but the reference, `none` when there are one-epoch
  runs). Nested least-squares fits with Gaussian errors give the extra-sum-of-squares F
  test, F = ((RSS₀ − RSS₁)/q) / (RSS₁/(n − p − q)), q = strategies − 1, the likelihood-ratio
  test in the form exact for small n (its χ² form, n·ln(RSS₀/RSS₁), is reported too).
  p < 0.05: the strategies buy task ability at different rates per nat of loss; δ says
  how many nats of loss each strategy's extra (or missing) ability is worth. The same
  test against fully separate curves per strategy, and each strategy held out of the
  pooled fit and predicted by it (its mean residual), are reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from cdlaw.fit.link import FORM_OF_METRIC, LINK_FORMS, LinkFit, fit_link, refit_link
from cdlaw.fit.predictor_links import run_counts
from cdlaw.fit.predictors import fit_task_predictors, run_ids
from cdlaw.strategies import ordered
from cdlaw.system.errors import BadInput
from cdlaw.tasks.downstream_json import ALPHA, Collapse, Downstream, TaskLink, links_digest

REPLICATE_KEYS = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "lr", "weight_decay")


# ---------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------


def fit_downstream(
    runs: pd.DataFrame,
    task: str | None = None,
    n_boot: int = 100,
    seed: int = 0,
    source: str = "",
    predict: PredictOptions | None = None,
) -> Downstream:
    """Every task link of a table of finished runs (cdlaw.fit.table.load_runs, checkpoint
    rows included or not), or the links of one task; and, unless `predict` is None, each
    accuracy's predictors of a model not trained (cdlaw.fit.predictors). BadInput when the
    table has no task columns, or not the task asked for."""
    from cdlaw.tasks.columns import parse_column

    where = source or "the table"
    columns = {str(c): p for c in runs.columns if (p := parse_column(str(c)))}
    if not columns:
        raise BadInput(
            f"{where} has no task columns (task_<task>_<metric>); name tasks in the sweep "
            "file's [eval] and run the sweep again (docs/downstream.md)"
        )
    if task is not None:
        chosen = {c: p for c, p in columns.items() if task in (p[0], c)}
        if not chosen:
            have = ", ".join(sorted({p[0] for p in columns.values()}))
            raise BadInput(f"--task {task!r} is not a task of {where}; tasks: {have}")
        columns = chosen
    n_final = int((~runs["checkpoint"]).sum()) if "checkpoint" in runs.columns else len(runs)
    result = Downstream(source, n_final, list(ordered(runs["strategy"].astype(str))), [])
    result.rows_digest = links_digest(runs)
    rng = np.random.default_rng(seed)
    for col, (name, metric) in columns.items():
        form = FORM_OF_METRIC.get(metric)
        rows = runs[np.isfinite(pd.to_numeric(runs[col], errors="coerce"))]
        rows = rows[np.isfinite(rows["loss"].to_numpy(float))]
        why = _why_not(form, rows, col)
        if why or form is None:
            result.skipped[col] = why or ""
            continue
        result.links.append(_task_link(col, name, metric, form, rows, n_boot, rng))
    if predict is not None:
        result.predictors = fit_task_predictors(
            runs, n_boot, seed, predict.holdout, predict.chance, predict.average, task
        )
    return result


@dataclass(frozen=True)
class PredictOptions:
    """How `cdlaw downstream` fits the task predictors (cdlaw.fit.predictors)."""

    holdout: bool = True  # check them on larger sizes held out, choose by it
    chance: dict[str, float] = field(default_factory=dict)  # task -> chance level given
    average: list[str] | None = None  # the tasks averaged (None: every acc task)


def _why_not(form: str | None, rows: pd.DataFrame, col: str) -> str | None:
    if form is None:
        return "no link form for this metric (bpb, acc and acc_norm have one)"
    need = len(LINK_FORMS[form].params) + 2
    if len(rows) < need:
        return f"{len(rows)} run(s) with a finite value; a {form} link needs at least {need}"
    y = rows[col].to_numpy(float)
    differ = int((y != np.median(y)).sum())
    if differ < len(LINK_FORMS[form].params):
        return (
            f"the metric barely varies: {differ} run(s) differ from the median value "
            f"{np.median(y):.3g}, too few for a {form} link"
        )
    return None


def _task_link(col, name, metric, form_name, rows, n_boot, rng) -> TaskLink:
    form = LINK_FORMS[form_name]
    L, y = rows["loss"].to_numpy(float), rows[col].to_numpy(float)
    strategy = rows["strategy"].astype(str).to_numpy()
    pooled = fit_link(form, L, y)
    # Does the link explain more than the metric's mean? A flat metric (a task too hard
    # for every run) leaves the shifts unidentified, and no collapse test is made.
    trend = _f_test(
        float(np.sum((y - y.mean()) ** 2)),
        pooled.rss,
        len(form.params) - 1,
        len(L) - len(form.params),
    )
    boot = _bootstrap(form, L, y, pooled, run_ids(rows), n_boot, rng)
    final = rows[~rows["checkpoint"]] if "checkpoint" in rows.columns else rows
    seed_sd, groups = _seed_noise(final, col)  # a run's checkpoints are not replicates
    return TaskLink(
        column=col,
        task=name,
        metric=metric,
        form=form_name,
        params=dict(zip(form.params, map(float, pooled.theta), strict=True)),
        ci95=_intervals(form.params, boot),
        n_runs=len(rows),
        rmse=float(np.sqrt(pooled.rss / len(L))),
        seed_sd=seed_sd,
        seed_groups=groups,
        loss_range=(float(L.min()), float(L.max())),
        metric_range=(float(y.min()), float(y.max())),
        per_strategy=_per_strategy(form, L, y, strategy),
        collapse=collapse_test(form, L, y, strategy, pooled) if trend[1] < ALPHA else None,
        bootstrap=boot.tolist(),
        trend_f=trend[0],
        trend_p_value=trend[1],
        seeds_named="seed" in final.columns,
    )


def _bootstrap(form, L, y, pooled: LinkFit, run, n_boot: int, rng) -> np.ndarray:
    """Refits to the runs resampled with replacement, each with all its evaluations (its
    checkpoints are not independent of its end; `run`: each point's run), all in one
    batched fit (cdlaw.fit.link.refit_link): (B, P)."""
    if n_boot <= 0:
        return np.zeros((0, len(form.params)))
    return refit_link(form, L, y, run_counts(run, n_boot, rng)[1:], pooled.theta)


def _intervals(names, boot: np.ndarray) -> dict[str, list[float]]:
    if len(boot) < 2:
        return {}
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    return {n: [float(a), float(b)] for n, a, b in zip(names, lo, hi, strict=True)}


def _seed_noise(rows: pd.DataFrame, col: str) -> tuple[float | None, int]:
    """The pooled sd of the metric between runs that differ only in seed, and the number
    of such groups; (None, 0) without replicates."""
    keys = [k for k in REPLICATE_KEYS if k in rows.columns]
    grouped = rows.groupby(keys, dropna=False, sort=False)[col]
    n = grouped.transform("size").to_numpy()
    if not (n > 1).any():
        return None, 0
    dev = (rows[col].to_numpy(float) - grouped.transform("mean").to_numpy(float))[n > 1]
    sizes = grouped.size()
    sizes = sizes[sizes > 1]
    return float(np.sqrt(np.sum(dev**2) / int((sizes - 1).sum()))), len(sizes)


def _per_strategy(form, L, y, strategy) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for s in ordered(strategy):
        m = strategy == s
        if m.sum() < len(form.params) + 2:
            out[s] = {"n_runs": int(m.sum()), "params": None, "rmse": None}
            continue
        f = fit_link(form, L[m], y[m])
        out[s] = {
            "n_runs": int(m.sum()),
            "params": dict(zip(form.params, map(float, f.theta), strict=True)),
            "rmse": float(np.sqrt(f.rss / m.sum())),
        }
    return out


def reference_strategy(strategies) -> str:
    """What shifts are measured from: the one-epoch runs (`none`) when there are any,
    else the first strategy in cdlaw.strategies' order (repetition, paraphrase, the rest
    by name)."""
    return ordered(strategies)[0]


def collapse_test(form, L, y, strategy, pooled: LinkFit) -> Collapse | None:
    """The pooled link against the same link shifted in loss per strategy (module doc)."""
    order = list(ordered(strategy))  # the reference first (reference_strategy)
    if len(order) < 2:
        return None
    names, ref = order, order[0]
    groups = np.array([order.index(s) for s in strategy])
    shifted = fit_link(
        form, L, y, groups, start=np.concatenate([pooled.theta, np.zeros(len(order) - 1)])
    )
    shifted = _better(shifted, fit_link(form, L, y, groups))
    n, p, q = len(L), len(form.params), len(order) - 1
    f, p_value = _f_test(pooled.rss, shifted.rss, q, n - p - q)
    lr = n * math.log(pooled.rss / shifted.rss) if shifted.rss > 0 else math.inf
    sep_f, sep_df, sep_p = _separate_test(form, L, y, strategy, pooled, names)
    bias, bias_se = _heldout(form, L, y, strategy, names)
    return Collapse(
        reference=ref,
        shift={
            s: (0.0 if i == 0 else float(shifted.theta[p + i - 1])) for i, s in enumerate(order)
        },
        shift_se={
            s: (0.0 if i == 0 else float(shifted.se[p + i - 1])) for i, s in enumerate(order)
        },
        f=f,
        df=(q, n - p - q),
        p_value=p_value,
        lr=float(lr),
        lr_p_value=float(stats.chi2.sf(lr, q)),
        separate_f=sep_f,
        separate_df=sep_df,
        separate_p_value=sep_p,
        heldout_bias=bias,
        heldout_se=bias_se,
        collapses=bool(p_value >= ALPHA),
    )


def _better(a: LinkFit, b: LinkFit) -> LinkFit:
    return a if a.rss <= b.rss else b


def _f_test(rss0: float, rss1: float, df1: int, df2: int) -> tuple[float, float]:
    """The extra-sum-of-squares F test of a nested model (rss1 ≤ rss0 in principle)."""
    if df2 <= 0 or rss1 <= 0:
        return math.nan, math.nan
    f = max(rss0 - rss1, 0.0) / df1 / (rss1 / df2)
    return float(f), float(stats.f.sf(f, df1, df2))


def _separate_test(form, L, y, strategy, pooled, names) -> tuple[float, tuple[int, int], float]:
    """Pooled curve vs one curve per strategy (each its own parameters); NaN when a
    strategy has too few runs for its own curve."""
    p = len(form.params)
    masks = [strategy == s for s in names]
    if any(m.sum() < p + 2 for m in masks):
        return math.nan, (0, 0), math.nan
    rss = sum(fit_link(form, L[m], y[m]).rss for m in masks)
    df = ((len(names) - 1) * p, len(L) - len(names) * p)
    f, pv = _f_test(pooled.rss, rss, *df)
    return f, df, pv


def _heldout(form, L, y, strategy, names) -> tuple[dict[str, float], dict[str, float]]:
    """Per strategy: the mean residual (observed − predicted) of its runs under the link
    fitted to the others, and its standard error."""
    bias, se = {}, {}
    for s in names:
        m = strategy == s
        if (~m).sum() < len(form.params) + 2:
            bias[s], se[s] = math.nan, math.nan
            continue
        f = fit_link(form, L[~m], y[~m])
        r = y[m] - form.predict(f.theta, L[m])
        bias[s] = float(r.mean())
        se[s] = float(r.std(ddof=1) / math.sqrt(m.sum())) if m.sum() > 1 else math.nan
    return bias, se
