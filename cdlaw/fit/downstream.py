"""What the loss buys: per task, the link from validation loss to the task's metric, and
whether every strategy's runs fall on one curve (docs/downstream.md).

    result = fit_downstream(load_runs("runs/demo"))    # Downstream: one TaskLink per column
    result.write("runs/demo/downstream.json")
    Downstream.read("runs/demo/downstream.json").links[0].predict([2.1, 1.9])

For each task column of the runs (task_<task>_<metric>, cdlaw.data.tasks) whose metric has a
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

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from cdlaw.errors import BadInput
from cdlaw.fit.link import FORM_OF_METRIC, LINK_FORMS, LinkFit, fit_link

ALPHA = 0.05  # the collapse test's level
REPLICATE_KEYS = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "lr", "weight_decay")


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
    collapse: Collapse | None  # None with runs of one strategy
    bootstrap: list[list[float]] = field(default_factory=list)  # refits' params, form order

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
        p = self.params
        if self.form == "power":
            return f"{p['E']:.4g} + {p['K']:.4g}·L^{p['kappa']:.4g}"
        return f"{p['a']:.4g} / (1 + exp({-p['k']:.4g}·(L − {p['L0']:.4g}))) + {p['b']:.4g}"

    def verdict(self) -> str:
        """One sentence: the fit against the seed noise, and the collapse test."""
        noise = (
            f"the link predicts a run within RMSE {self.rmse:.3g}, a rerun with another seed "
            f"scatters by {self.seed_sd:.3g}"
            if self.seed_sd
            else f"RMSE {self.rmse:.3g} (no replicate seeds to compare with)"
        )
        c = self.collapse
        if c is None:
            return f"{noise}; one strategy only, nothing to compare"
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
            "loss_range": list(self.loss_range),
            "metric_range": list(self.metric_range),
            "per_strategy": self.per_strategy,
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
                loss_range=tuple(d.get("loss_range") or (math.nan, math.nan)),  # type: ignore[arg-type]
                metric_range=tuple(d.get("metric_range") or (math.nan, math.nan)),  # type: ignore[arg-type]
                per_strategy=d.get("per_strategy") or {},
                collapse=collapse,
                bootstrap=[[float(x) for x in b] for b in d.get("bootstrap") or []],
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
        }

    def write(self, path: str | Path) -> Path:
        from cdlaw.atomic import write_json_atomic

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
        return cls(
            str(d.get("source") or path),
            int(d.get("n_runs") or 0),
            list(d.get("strategies") or []),
            links,
            dict(d.get("skipped") or {}),
            list(d.get("warnings") or []),
        )


def _num(x) -> float:
    return math.nan if x is None else float(x)


# ---------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------


def fit_downstream(
    runs: pd.DataFrame,
    task: str | None = None,
    n_boot: int = 100,
    seed: int = 0,
    source: str = "",
) -> Downstream:
    """Every task link of a table of finished runs (cdlaw.fit.table.load_runs), or the links
    of one task. BadInput when the table has no task columns, or not the task asked for."""
    from cdlaw.data.tasks import parse_column

    columns = [c for c in runs.columns if parse_column(str(c))]
    if not columns:
        raise BadInput(
            f"{source or 'the table'} has no task columns (task_<task>_<metric>); name tasks in "
            "the sweep file's [eval] and run the sweep again (docs/downstream.md)"
        )
    if task is not None:
        chosen = [c for c in columns if parse_column(c)[0] == task or c == task]  # type: ignore[index]
        if not chosen:
            have = ", ".join(sorted({parse_column(c)[0] for c in columns}))  # type: ignore[index]
            raise BadInput(
                f"--task {task!r} is not a task of {source or 'the table'}; tasks: {have}"
            )
        columns = chosen
    result = Downstream(source, len(runs), sorted(set(runs["strategy"].astype(str))), [])
    rng = np.random.default_rng(seed)
    for col in columns:
        name, metric = parse_column(col)  # type: ignore[misc]
        form = FORM_OF_METRIC.get(metric)
        rows = runs[np.isfinite(pd.to_numeric(runs[col], errors="coerce"))]
        rows = rows[np.isfinite(rows["loss"].to_numpy(float))]
        why = _why_not(form, rows, col)
        if why:
            result.skipped[col] = why
            continue
        assert form is not None
        result.links.append(_task_link(col, name, metric, form, rows, n_boot, rng))
    return result


def _why_not(form: str | None, rows: pd.DataFrame, col: str) -> str | None:
    if form is None:
        return "no link form for this metric (bpb, acc and acc_norm have one)"
    need = len(LINK_FORMS[form].params) + 2
    if len(rows) < need:
        return f"{len(rows)} run(s) with a finite value; a {form} link needs at least {need}"
    if np.ptp(rows[col].to_numpy(float)) == 0:
        return "the metric is the same in every run"
    return None


def _task_link(col, name, metric, form_name, rows, n_boot, rng) -> TaskLink:
    form = LINK_FORMS[form_name]
    L, y = rows["loss"].to_numpy(float), rows[col].to_numpy(float)
    strategy = rows["strategy"].astype(str).to_numpy()
    pooled = fit_link(form, L, y)
    boot = _bootstrap(form, L, y, pooled, n_boot, rng)
    seed_sd, groups = _seed_noise(rows, col)
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
        collapse=collapse_test(form, L, y, strategy, pooled),
        bootstrap=boot.tolist(),
    )


def _bootstrap(form, L, y, pooled: LinkFit, n_boot: int, rng) -> np.ndarray:
    """Refits to the runs resampled with replacement, each from the full fit: (B, P)."""
    out = []
    for _ in range(n_boot):
        i = rng.integers(0, len(L), len(L))
        out.append(fit_link(form, L[i], y[i], start=pooled.theta).theta)
    return np.array(out).reshape(len(out), len(form.params))


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
    out = {}
    for s in sorted(set(strategy)):
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
    else the first strategy by name."""
    names = sorted(set(strategies))
    return "none" if "none" in names else names[0]


def collapse_test(form, L, y, strategy, pooled: LinkFit) -> Collapse | None:
    """The pooled link against the same link shifted in loss per strategy (module doc)."""
    names = sorted(set(strategy))
    if len(names) < 2:
        return None
    ref = reference_strategy(names)
    order = [ref, *[s for s in names if s != ref]]
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


# ---------------------------------------------------------------------------------------
# Where downstream.json goes
# ---------------------------------------------------------------------------------------


def downstream_path(path: str | Path, out: str | Path | None = None) -> Path:
    """<runs>/downstream.json for a runs folder, t.downstream.json beside a table t.csv."""
    if out is not None:
        return Path(out)
    path = Path(path)
    if path.is_dir():
        return path / "downstream.json"
    return path.with_name(path.stem + ".downstream.json")
