"""downstream.json: the task links `cdlaw downstream` fits (cdlaw.tasks.links), as typed
objects every later stage reads (docs/files.md).

    result = Downstream.read("runs/demo/downstream.json")
    link = result.link("world_mc")[0]        # a TaskLink
    link.predict([2.1, 1.9]); link.verdict(); link.collapse.p_value

Each object is a dataclass documented field by field; to_dict() is its entry in the file,
from_dict reads it back (BadInput naming the file when it cannot).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.link import LINK_FORMS, sigmoid_at_bound
from cdlaw.fit.predictor_fits import TaskPredictors
from cdlaw.system.errors import BadInput

ALPHA = 0.05  # the collapse test's level


@dataclass(frozen=True)
class Collapse:
    """Do the strategies' runs fall on one curve? downstream.json links[].collapse."""

    reference: str  # the strategy every shift is measured from
    shift: dict[str, float]  # strategy -> δ in nats (reference: 0); δ > 0: more ability per nat
    shift_se: dict[str, float]  # its standard error (from the shifted fit's Jacobian)
    f: float  # the extra-sum-of-squares F statistic, pooled curve vs shifted curves
    df: tuple[int, int]  # (q, n − p − q)
    p_value: float
    lr: float  # the likelihood-ratio statistic n·ln(RSS_pooled/RSS_shifted), ~ χ²(q)
    lr_p_value: float
    separate_f: float  # the same test against a separate curve per strategy (NaN: not fitted)
    separate_df: tuple[int, int]
    separate_p_value: float
    heldout_bias: dict[str, float]  # strategy -> mean residual when the pooled fit omits it
    heldout_se: dict[str, float]  # its standard error
    collapses: bool  # p_value ≥ ALPHA: one curve explains every strategy within the noise

    @property
    def undetermined(self) -> list[str]:
        """The strategies whose shift the runs do not pin down (no finite standard error:
        e.g. their runs sit where the link is flat); with any, the test decides nothing."""
        return [
            s for s in self.shift if s != self.reference and not math.isfinite(self.shift_se[s])
        ]

    @property
    def determined(self) -> bool:
        return not self.undetermined and math.isfinite(self.f) and math.isfinite(self.p_value)

    def to_dict(self) -> dict:
        return {
            "reference": self.reference,
            "shift": self.shift,
            "shift_se": self.shift_se,
            "f": self.f,
            "df": list(self.df),
            "p_value": self.p_value,
            "lr": self.lr,
            "lr_p_value": self.lr_p_value,
            "separate_f": self.separate_f,
            "separate_df": list(self.separate_df),
            "separate_p_value": self.separate_p_value,
            "heldout_bias": self.heldout_bias,
            "heldout_se": self.heldout_se,
            "collapses": self.collapses,
            "alpha": ALPHA,
        }


@dataclass(frozen=True)
class TaskLink:
    """One task metric's link from validation loss. downstream.json "links"[]."""

    column: str  # task_<task>_<metric>
    task: str
    metric: str  # bpb | acc | acc_norm
    form: str  # power | sigmoid (cdlaw.fit.link.LINK_FORMS)
    params: dict[str, float]  # the pooled link's parameters, by the form's names
    ci95: dict[str, list[float]]  # {name: [2.5, 97.5] percentiles of the bootstrap refits}
    n_runs: int  # finished runs with a finite loss and metric
    rmse: float  # of the pooled link, in the metric's units
    seed_sd: float | None  # pooled sd of the metric between runs differing only in seed
    seed_groups: int  # replicate groups behind seed_sd
    loss_range: tuple[float, float]  # validation losses of the runs fitted
    metric_range: tuple[float, float]
    per_strategy: dict[str, dict]  # strategy -> {params, rmse, n_runs}
    collapse: Collapse | None  # None with runs of one strategy, or no trend to test
    bootstrap: list[list[float]] = field(default_factory=list)  # refits' params, form order
    # the link against a constant (the metric's mean): F and p of the extra-sum-of-squares
    # test; p ≥ ALPHA: the metric does not follow the loss beyond its noise
    trend_f: float = math.nan
    trend_p_value: float = math.nan
    # the runs name their seeds (cdlaw's own do); False: seed_sd is the scatter between
    # runs of one cell, which may differ in more than their seed (a published table)
    seeds_named: bool = True

    @property
    def follows_loss(self) -> bool:
        return bool(self.trend_p_value < ALPHA)

    @property
    def formula(self) -> str:
        return LINK_FORMS[self.form].formula

    def predict(self, loss, params: dict | list | None = None) -> np.ndarray:
        """The metric at each validation loss, by the pooled link (or `params`)."""
        form = LINK_FORMS[self.form]
        p = self.params if params is None else params
        theta = [p[n] for n in form.params] if isinstance(p, dict) else p
        return form.predict(theta, np.asarray(loss, dtype=float))

    def equation(self) -> str:
        """The pooled link with its numbers, e.g. 0.41 / (1 + exp(3.2·(L − 2.9))) + 0.25."""
        p = {k: (0.0 if abs(v) < 1e-9 else v) for k, v in self.params.items()}  # 1e-21 is 0
        if self.form == "power":
            return f"{p['E']:.4g} + {p['K']:.4g}·L^{p['kappa']:.4g}"
        return f"{p['a']:.4g} / (1 + exp({-p['k']:.4g}·(L − {p['L0']:.4g}))) + {p['b']:.4g}"

    def verdict(self) -> str:
        """One sentence: the fit against the seed noise, and the collapse test."""
        scatter = (
            "a rerun with another seed scatters by"
            if self.seeds_named
            else "runs of one cell (no seed column: they may differ in more than their seed) "
            "scatter by"
        )
        noise = (
            f"the link predicts a run within RMSE {self.rmse:.3g}, {scatter} {self.seed_sd:.3g}"
            if self.seed_sd
            else f"RMSE {self.rmse:.3g} (no replicate seeds to compare with)"
        )
        c = self.collapse
        trend = f"F = {self.trend_f:.3g}, p = {self.trend_p_value:.2g} against a constant"
        if not self.follows_loss:
            return f"{noise}; the metric does not follow the loss beyond its noise ({trend}): no collapse to test"
        bound = sigmoid_at_bound(self.params, self.loss_range) if self.form == "sigmoid" else ""
        if bound:  # the runs pin the metric where they are, not the shape the bound set
            noise += f"; {bound}"
        if c is None:
            return f"{noise}; one strategy only, nothing to compare"
        if not c.determined:
            which = ", ".join(c.undetermined)
            why = (
                f"the runs do not pin down the shift in loss of {which} (its standard error "
                "is not finite: its runs sit where the link is flat, or are too few)"
                if which
                else "the test has no finite F (too few runs for its degrees of freedom)"
            )
            return f"{noise}; one curve or not is not determined: {why}"
        shifts = ", ".join(
            f"{s} {c.shift[s]:+.3f} ± {c.shift_se[s]:.3f}" for s in c.shift if s != c.reference
        )
        test = f"F({c.df[0]}, {c.df[1]}) = {c.f:.3g}, p = {c.p_value:.3g}"
        if c.collapses:
            say = "one curve: no strategy's shift exceeds the noise"
        else:
            say = "the strategies differ"
        return f"{noise}; {say} ({test}; shifts in loss vs {c.reference}, nats: {shifts})"

    def to_dict(self) -> dict:
        return {
            "column": self.column,
            "task": self.task,
            "metric": self.metric,
            "form": self.form,
            "formula": self.formula,
            "params": self.params,
            "ci95": self.ci95,
            "n_runs": self.n_runs,
            "rmse": self.rmse,
            "seed_sd": self.seed_sd,
            "seed_groups": self.seed_groups,
            "seeds_named": self.seeds_named,
            "loss_range": list(self.loss_range),
            "metric_range": list(self.metric_range),
            "per_strategy": self.per_strategy,
            "trend_f": self.trend_f,
            "trend_p_value": self.trend_p_value,
            "collapse": None if self.collapse is None else self.collapse.to_dict(),
            "verdict": self.verdict(),
            "bootstrap_params": list(LINK_FORMS[self.form].params),
            "bootstrap": self.bootstrap,
        }

    @classmethod
    def from_dict(cls, d: dict, where: str) -> TaskLink:
        try:
            form = LINK_FORMS[d["form"]]
            params = {n: float(d["params"][n]) for n in form.params}
            c = d.get("collapse")
            collapse = None
            if c:
                keys = [f.name for f in Collapse.__dataclass_fields__.values()]
                collapse = Collapse(**{k: c[k] for k in keys if k in c})
            return cls(
                column=str(d["column"]),
                task=str(d["task"]),
                metric=str(d["metric"]),
                form=form.name,
                params=params,
                ci95=d.get("ci95") or {},
                n_runs=int(d.get("n_runs") or 0),
                rmse=_num(d.get("rmse")),
                seed_sd=None if d.get("seed_sd") is None else float(d["seed_sd"]),
                seed_groups=int(d.get("seed_groups") or 0),
                loss_range=_pair(d.get("loss_range")),
                metric_range=_pair(d.get("metric_range")),
                per_strategy=d.get("per_strategy") or {},
                collapse=collapse,
                bootstrap=[[float(x) for x in b] for b in d.get("bootstrap") or []],
                trend_f=_num(d.get("trend_f")),
                trend_p_value=_num(d.get("trend_p_value")),
                seeds_named=bool(d.get("seeds_named", True)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(
                f"{where}: a link is not readable ({type(e).__name__}: {e}); write it again "
                "with `cdlaw downstream`"
            ) from None


@dataclass
class Downstream:
    """Every task link of a table of runs: downstream.json (docs/files.md)."""

    source: str  # the runs folder or table the links were fitted to
    n_runs: int  # finished runs in it
    strategies: list[str]  # the strategies among them
    links: list[TaskLink]
    skipped: dict[str, str] = field(default_factory=dict)  # column -> why no link
    warnings: list[str] = field(default_factory=list)
    # each accuracy's predictors of a model not trained (cdlaw.fit.predictors)
    predictors: list[TaskPredictors] = field(default_factory=list)
    # the runs' digest (links_digest: the final rows' N, D, D′, strategy, loss and every
    # task column), by which report and plot tell links of the runs as they are from older
    # ones; None: a file without one
    rows_digest: str | None = None

    def link(self, task: str | None = None) -> list[TaskLink]:
        """The links of one task (every link when None); BadInput naming the tasks there are."""
        if task is None:
            return self.links
        found = [lk for lk in self.links if task in (lk.task, lk.column)]
        if not found:
            have = ", ".join(sorted({lk.task for lk in self.links})) or "none"
            raise BadInput(f"--task {task!r} has no link in {self.source}; tasks there: {have}")
        return found

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "n_runs": self.n_runs,
            "strategies": self.strategies,
            "links": [lk.to_dict() for lk in self.links],
            "skipped": self.skipped,
            "warnings": self.warnings,
            "predictors": [tp.to_dict() for tp in self.predictors],
            "rows_digest": self.rows_digest,
        }

    def write(self, path: str | Path) -> Path:
        from cdlaw.system.atomic import write_json_atomic

        return write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> Downstream:
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise BadInput(
                f"{path} is not a readable downstream.json ({e}); write one with "
                "`cdlaw downstream RUNS`"
            ) from None
        if not isinstance(d, dict) or not isinstance(d.get("links"), list):
            raise BadInput(f"{path} is not a downstream.json (no links); use `cdlaw downstream`")
        links = [TaskLink.from_dict(lk, str(path)) for lk in d["links"]]
        try:
            predictors = [TaskPredictors.from_dict(tp) for tp in d.get("predictors") or []]
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(
                f"{path}: a task's predictors are not readable ({type(e).__name__}: {e}); "
                "write it again with `cdlaw downstream`"
            ) from None
        return cls(
            str(d.get("source") or path),
            int(d.get("n_runs") or 0),
            list(d.get("strategies") or []),
            links,
            dict(d.get("skipped") or {}),
            list(d.get("warnings") or []),
            predictors,
            d["rows_digest"] if isinstance(d.get("rows_digest"), str) else None,
        )


def links_digest(runs: pd.DataFrame) -> str:
    """The digest of what task links are fitted on: the final runs (checkpoint rows left
    out), each with its N, D, D′, strategy, loss and every task column."""
    from cdlaw.fit.table import rows_digest
    from cdlaw.tasks.columns import parse_column

    if "checkpoint" in runs.columns:
        runs = runs[~runs["checkpoint"].astype(bool)]
    tasks = tuple(sorted(str(c) for c in runs.columns if parse_column(str(c))))
    return rows_digest(runs, tasks)


def stale_links(runs: pd.DataFrame, downstream: Downstream, where) -> str | None:
    """Why `downstream` (read from `where`) is not of the runs `runs` as they are now (a
    run's loss or a task metric changed since: a task file edited and the runs scored
    again, a run retrained, one added or removed), or None; a file without a digest is
    not checked."""
    if downstream.rows_digest is None or links_digest(runs) == downstream.rows_digest:
        return None
    return (
        f"{where} links other runs than {downstream.source} holds now (a loss or a task "
        f"metric changed since, e.g. a task file edited): fit them again (`cdlaw downstream "
        f"{downstream.source}`)"
    )


def _num(x) -> float:
    return math.nan if x is None else float(x)


def _pair(x) -> tuple[float, float]:
    lo, hi = x or (None, None)
    return _num(lo), _num(hi)


# ---------------------------------------------------------------------------------------
# Where downstream.json goes
# ---------------------------------------------------------------------------------------


def stale_links_file(path: Path, downstream: Downstream) -> str | None:
    """stale_links for a downstream.json against the runs it sits beside (a runs folder's,
    or t.downstream.json beside t.csv); None when current, elsewhere, or unreadable."""
    from cdlaw.fit.table import load_runs, runs_beside

    runs = runs_beside(Path(path), "downstream.json")
    if runs is None:
        return None
    try:
        return stale_links(load_runs(runs, quiet=True), downstream, path)
    except BadInput:
        return None  # the runs as they are cannot be read: nothing to compare with


def downstream_path(path: str | Path, out: str | Path | None = None) -> Path:
    """<runs>/downstream.json for a runs folder, t.downstream.json beside a table t.csv."""
    if out is not None:
        return Path(out)
    path = Path(path)
    if path.is_dir():
        return path / "downstream.json"
    return path.with_name(path.stem + ".downstream.json")
