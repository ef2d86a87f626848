"""The task metrics a plan predicts: law → loss → link (docs/downstream.md), and the task
accuracies of any one model (`cdlaw predict`): both go through `forecast_tasks`.

    links = Downstream.read("runs/demo/downstream.json").link("world_mc")
    plan = with_tasks(plan, source, links, predictors)   # plan.tasks: one per link
    forecast_tasks(predictors, source, 7e9, 140e9)       # one Forecast per accuracy

An accuracy with predictors in downstream.json (cdlaw.fit.predictors) is predicted by its
chosen predictor, the val-loss chains taking the law's loss at the model (and its
bootstrap) as their step 1; a bits-per-byte column, or an accuracy of a downstream.json
written before predictors, goes through its link as below.

The plan's predicted loss goes through each task's pooled link (cdlaw.tasks.links). The
95% band goes through both fits' bootstraps: refit b of the law scores the plan's
(N, D, D′), and refit b of the link (cycled when it has fewer) turns that loss into the
metric; the 2.5th and 97.5th percentiles of those are the band. So it holds the law's
uncertainty at the plan and the link's, but not the plan's optimism (docs/plan.md) nor a
change of link beyond the losses the runs reached, which the prediction names instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from cdlaw.fit.forecast import Forecast, forecast
from cdlaw.fit.predictor_fits import TaskPredictors
from cdlaw.plan.checks import law_strategy
from cdlaw.plan.result import Plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NONE
from cdlaw.system.errors import BadInput
from cdlaw.tasks.columns import columns_text
from cdlaw.tasks.downstream_json import Downstream, TaskLink

# The predictors whose step 1 is a law's validation loss at the model (the rest read the
# model's N and compute against the runs they were fitted to).
LAW_CHAINS = ("val-loss", "val-loss-exp")


@dataclass(frozen=True)
class TaskPrediction:
    """A task metric at a plan. The plan's JSON "tasks"[]."""

    column: str  # task_<task>_<metric>
    task: str
    metric: str  # bpb | acc | acc_norm
    value: float  # the pooled link at the plan's predicted loss
    ci95: tuple[float, float] | None  # through both bootstraps; None: see no_band_reason
    no_band_reason: str | None
    beyond_runs: str | None  # the plan's loss outside the losses the link was fitted to

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "ci95": list(self.ci95) if self.ci95 else None}


def read_links(
    path: str | None, task: str | None = None
) -> tuple[list[TaskLink], list[TaskPredictors], str | None]:
    """The links and the task predictors of a downstream.json (`plan --link`; one task's with
    `task`), read once, and why the file is not of the runs beside it as they are now
    (stale_links_file; None: current); ([], [], None) for none. BadInput for a file that is
    missing or unreadable, or a task it does not hold."""
    if path is None:
        if task is not None:
            raise BadInput("--task goes with --link: name the downstream.json to predict it with")
        return [], [], None
    from pathlib import Path

    from cdlaw.tasks.downstream_json import stale_links_file

    if not Path(path).is_file():
        raise BadInput(f"--link {path} does not exist; write it with `cdlaw downstream RUNS`")
    d = Downstream.read(path)
    return d.link(task), task_predictors(d, task), stale_links_file(Path(path), d)


def task_predictors(d: Downstream, task: str | None = None) -> list[TaskPredictors]:
    """The task predictors of a downstream.json (one task's with `task`)."""
    return [tp for tp in d.predictors if task is None or task in (tp.task, tp.column)]


def forecast_tasks(
    predictors: list[TaskPredictors],
    source: PlanningLaw | None,
    n_params: float,
    fresh_tokens: float,
    derived_tokens: float = 0.0,
    strategy: str = NONE,
) -> list[Forecast]:
    """Each accuracy at the model (N, D, D′, strategy) by its chosen predictor, with its
    95% band; with a law, the val-loss chains' step 1 is the law's loss (and its bootstrap
    refits') at the model. Accuracies no predictor can reach are left out."""
    loss, losses = None, None
    if source is not None:
        loss, losses = _law_at(source, n_params, fresh_tokens, derived_tokens, strategy)
    return _forecasts(predictors, n_params, fresh_tokens + derived_tokens, loss, losses)


def _law_at(
    source: PlanningLaw, n_params: float, fresh: float, derived: float, strategy: str
) -> tuple[float, np.ndarray | None]:
    """The law's loss at the model, and its bootstrap refits' (None for fewer than 2)."""
    s = NONE if derived == 0 else strategy
    loss = float(source.law.loss(n_params, fresh, derived, s))
    if len(source.bootstrap) < 2:
        return loss, None
    return loss, np.array([float(b.loss(n_params, fresh, derived, s)) for b in source.bootstrap])


def _forecasts(predictors, n_params, tokens, loss, losses) -> list[Forecast]:
    out = []
    for tp in predictors:
        f = forecast(tp, n_params, tokens, loss, losses)
        if f is not None:
            out.append(f)
    return out


def with_tasks(
    plan: Plan,
    source: PlanningLaw,
    links: list[TaskLink],
    predictors: list[TaskPredictors] | None = None,
    stale: str | None = None,
) -> Plan:
    """The plan with its predicted task metrics (Plan.tasks) and a warning per link the
    plan's loss lies outside of, after `stale` (read_links: the file is older than its
    runs). An accuracy with predictors is forecast by them (forecast_tasks, as `cdlaw
    predict` does); the rest through their links. Where the plan's own loss band was
    refused (not determined: its refits disagree, or the loss is above ln V), no task
    metric gets a band either: one would rest on the losses the plan judged meaningless."""
    best = plan.best
    s = law_strategy(best.strategy, plan.strategy)
    loss, losses = _law_at(source, best.n_params, best.fresh_tokens, best.derived_tokens, s)
    tokens = best.fresh_tokens + best.derived_tokens
    by_column = {
        f.column: f for f in _forecasts(predictors or [], best.n_params, tokens, loss, losses)
    }
    preds: list[TaskPrediction | Forecast] = [
        by_column.pop(lk.column)
        if lk.column in by_column
        else predict_task(plan, source, lk, losses)
        for lk in links
    ]
    preds += list(by_column.values())  # an average over tasks has no link of its own
    if plan.predicted_loss_ci95 is None and losses is not None:  # refused, not missing
        said = (plan.no_band_reason or "").removeprefix("not determined: ")
        why = f"not determined, as for the plan's loss: {said}"
        preds = [dataclasses.replace(p, ci95=None, no_band_reason=why) for p in preds]
    beyond: dict[str, list[str]] = {}  # one warning per sentence, naming its columns
    for p in preds:
        if p.beyond_runs:
            beyond.setdefault(p.beyond_runs, []).append(p.column)
    for column, why in loss_beyond_links(preds, links, loss).items():
        beyond.setdefault(why, []).append(column)
    named = (f"{columns_text(cols, len(preds))}: {why}" for why, cols in beyond.items())
    notes = (*filter(None, [stale]), *named)
    notes += tuple(w for lk in links if (w := _strategies_differ(lk, plan.strategy)))
    tasks = tuple(p.to_dict() for p in preds)
    return dataclasses.replace(plan, tasks=tasks, warnings=plan.warnings + notes)


def loss_beyond_links(
    forecasts: list, links: list[TaskLink], loss: float | None, whose: str = "the plan's"
) -> dict[str, str]:
    """{column: why} for the accuracies forecast through a validation-loss chain (val-loss,
    val-loss-exp) at a law's `loss` outside the losses their task's runs reached (the
    column's link's loss_range, the same runs): their link is read beyond its data, as a
    bits-per-byte link's is (predict_task); the N and compute factors do not show it when
    the law puts a model inside the runs' sizes below every loss they reached."""
    if loss is None:
        return {}
    ranges = {lk.column: lk.loss_range for lk in links}
    out = {}
    for f in forecasts:
        if getattr(f, "predictor", None) in LAW_CHAINS and f.column in ranges:
            lo, hi = ranges[f.column]
            if not lo <= loss <= hi:
                out[f.column] = _outside(loss, lo, hi, whose)
    return out


def _outside(loss: float, lo: float, hi: float, whose: str = "the plan's") -> str:
    return (
        f"{whose} loss {loss:.4g} lies outside the runs' losses {lo:.4g}–{hi:.4g} "
        "the links were fitted to: their metric there is an extrapolation"
    )


def _strategies_differ(link: TaskLink, strategy: str) -> str | None:
    """A warning when the link's collapse test found the strategies apart: the pooled link
    then mis-states a plan of one strategy by about its shift."""
    c = link.collapse
    if c is None or c.collapses or strategy not in c.shift:
        return None
    return (
        f"{link.column}: the strategies' runs do not share one link (F = {c.f:.3g}, "
        f"p = {c.p_value:.2g}; shifts in nats of loss vs {c.reference}: "
        + ", ".join(f"{s} {d:+.3g}" for s, d in c.shift.items() if s != c.reference)
        + (
            f"): the pooled link mixes them, so its prediction for this {strategy} plan (the "
            "reference, shift 0) is off by part of the others' shifts"
            if strategy == c.reference
            else f"): the pooled link's prediction for this {strategy} plan is off by about "
            "its shift"
        )
    )


def predict_task(
    plan: Plan, source: PlanningLaw, link: TaskLink, losses: np.ndarray | None
) -> TaskPrediction:
    """One link's metric at the plan, with its band (module doc); `losses`: the law's
    bootstrap refits' losses at the plan (_law_at)."""
    loss = plan.predicted_loss
    ci, why = None, None
    if losses is not None and len(link.bootstrap) >= 2:
        metrics = np.array(
            [link.predict(x, link.bootstrap[i % len(link.bootstrap)]) for i, x in enumerate(losses)]
        ).ravel()
        metrics = metrics[np.isfinite(metrics)]
        if metrics.size >= 2:
            lo, hi = np.percentile(metrics, [2.5, 97.5])
            ci = (float(lo), float(hi))
    if ci is None:
        why = (
            source.why_no_band()
            if losses is None
            else "the link has no bootstrap refits; run `cdlaw downstream --bootstrap 200`"
        )
    lo_run, hi_run = link.loss_range
    beyond = None if lo_run <= loss <= hi_run else _outside(loss, lo_run, hi_run)
    value = float(link.predict(loss))
    return TaskPrediction(link.column, link.task, link.metric, value, ci, why, beyond)
