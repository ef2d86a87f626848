"""Compare laws on the same runs, by how well each predicts runs it never saw (docs/fit.md).

    comparison = compare_laws(df, laws=None, huber_delta=0.1, budget_flops=..., unique_tokens=...)
    comparison.to_dict()      # compare.json
    comparison.rows           # compare_rows.parquet: each left-out row, predicted by each law

For every law the table can identify, with the same rows, cell selection and Huber δ:
- one fit to every row (a law blind to derived tokens counts them as fresh): parameters, log-RMSE, the Huber objective, AIC and BIC (from the
  Gaussian likelihood of the log residuals, k = the law's parameter count);
- one fit per model size left out, predicting that size's rows: the leave-one-size-out
  log-RMSE pools them; the largest size's alone is the held-out (extrapolation) error;
- with a budget, the plan each law gives for it.
The winner is the law with the lowest held-out error; the summary says when the runner-up
is within the seed noise floor (the log-loss scatter between replicate seeds), where the
data cannot tell the two apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.findings import DataRange
from cdlaw.plan.source import PlanningLaw, comparison_outputs
from cdlaw.system.atomic import (
    check_writable,
    write_json_atomic,
    write_parquet_atomic,
)
from cdlaw.system.errors import BadInput

ROW_COLUMNS = ["law", "row_id", "n_params", "fresh_tokens", "derived_tokens", "strategy", "loss",
               "predicted", "largest"]  # fmt: skip
REFIT_STARTS = 64  # fresh starts of each left-out refit, beside the full fit's own optimum


@dataclass
class LawScore:
    law: str
    n_params: int  # fitted parameters (k of AIC/BIC)
    params: dict  # the full fit's public parameters (fit.json's params + strategies)
    rmse_log: float  # in sample
    objective: float  # Σ Huber(log residual), the same δ for every law
    aic: float
    bic: float
    heldout_rmse_log: float  # the largest size, predicted by a fit without it
    loso_rmse_log: float  # every size, each predicted by a fit without it (pooled)
    converged: bool
    plan: dict | None = None
    skipped_sizes: list[float] = field(default_factory=list)  # sizes whose refit could not run

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class Comparison:
    scores: list[LawScore]
    skipped: dict[str, str]  # law -> why it could not be fitted to this table
    huber_delta: float
    n_rows: int
    seed_noise: float | None  # log-RMSE floor of replicate seeds, when the table has them
    source: str
    rows: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    select: str = "mean"  # how the runs became rows (cdlaw.fit.cells.select_cells)
    # the compared rows' digest (cdlaw.fit.table.rows_digest), by which plot and report
    # tell a comparison of runs since changed; None for one written before it was recorded
    rows_digest: str | None = None
    warnings: list[str] = field(default_factory=list)  # of the rows (cdlaw.fit.cells.mixed_cells)

    @property
    def winner(self) -> str:
        return min(self.scores, key=lambda s: _finite(s.heldout_rmse_log)).law

    def verdict(self) -> str:
        """One sentence: which law predicts the held-out size best, and by how much."""
        ranked = sorted(self.scores, key=lambda s: _finite(s.heldout_rmse_log))
        best = ranked[0]
        if len(ranked) == 1:
            return f"{best.law} is the only law this table can identify"
        gap = ranked[1].heldout_rmse_log - best.heldout_rmse_log
        floor = self.seed_noise
        within = floor is not None and gap < floor
        text = (
            f"{best.law} predicts the held-out largest size best (log-RMSE "
            f"{best.heldout_rmse_log:.4f}, {ranked[1].law} {ranked[1].heldout_rmse_log:.4f})"
        )
        if within:
            return text + f"; the difference is inside the seed noise floor ({floor:.4f}): a tie"
        if floor is None:
            return text + "; the table has no replicate seeds to say whether that is noise"
        return text + f", by more than the seed noise floor ({floor:.4f})"

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "huber_delta": self.huber_delta,
            "n_rows": self.n_rows,
            "select": self.select,
            "rows_digest": self.rows_digest,
            "seed_noise": self.seed_noise,
            "winner": self.winner,
            "verdict": self.verdict(),
            "laws": [s.to_dict() for s in self.scores],
            "skipped": self.skipped,
            "warnings": self.warnings,
        }


def _finite(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def _params(fitted) -> dict:
    d = fitted.law.to_dict()
    return {"params": d["params"], "strategies": d["strategies"]}


def compare_laws(
    df: pd.DataFrame,
    laws: tuple[str, ...] | None = None,
    huber_delta: float = 0.1,
    n_starts: int = 512,
    select: str = "mean",
    seed: int = 0,
    budget_flops: float | None = None,
    unique_tokens: float | None = None,
    source: str = "",
    progress=None,
    extrapolate: bool = True,
    left_out: str = "each",
) -> Comparison:
    """Fit every law (default: all known) to the same rows and score each; see the module doc.
    left_out "largest" refits only without the largest size (its held-out error ranks the
    laws; the leave-one-size-out error is then that size's alone), "each" without each."""
    from cdlaw.fit.cells import mixed_cells, seed_noise, select_cells
    from cdlaw.fit.procedure import fit_law
    from cdlaw.fit.summary import data_range
    from cdlaw.fit.table import prepare_runs, rows_digest
    from cdlaw.laws import LAWS

    names = tuple(laws or LAWS)
    unknown = [n for n in names if n not in LAWS]
    if unknown:
        raise BadInput(f"unknown law {unknown[0]!r}; known laws: {', '.join(LAWS)}, or all")
    prepared = prepare_runs(df)
    cells = select_cells(prepared, select)
    noise = seed_noise(prepared)
    floor = None if noise is None else float(noise.sd_log)
    sizes = np.sort(cells["n_params"].unique())
    scores, skipped, predicted = [], {}, []
    common = dict(huber_delta=huber_delta, select="none", seed=seed)
    for i, name in enumerate(names):
        if progress:
            progress("laws", i, len(names))
        # A law blind to derived tokens (Chinchilla) sees the same rows with D′ counted as
        # fresh: the baseline a team has without a data-constrained law.
        naive = not LAWS[name].uses_derived
        try:
            full = fit_law(cells, law=name, n_starts=n_starts, naive=naive, **common)
        except BadInput as e:
            skipped[name] = str(e)
            continue
        refit = sizes[-1:] if left_out == "largest" else sizes
        table, lost = _left_out_predictions(full, cells, refit, naive, n_starts, common)
        predicted.append(table)
        scores.append(_score(full, name, table, lost))
    if not scores:
        first = next(iter(skipped.items()))
        raise BadInput(f"no law could be fitted to {source or 'the table'}: {first[0]}: {first[1]}")
    comparison = Comparison(
        scores,
        skipped,
        float(huber_delta),
        len(cells),
        floor,
        source,
        pd.concat(predicted, ignore_index=True) if predicted else pd.DataFrame(),
        select,
        rows_digest(cells),
        mixed_cells(prepared, select),
    )
    if budget_flops is not None:
        attach_plans(comparison, budget_flops, unique_tokens, data_range(cells), extrapolate)
    return comparison


def _left_out_predictions(full, cells, sizes, naive, n_starts, common):
    """Each size's rows predicted by a refit without that size (warm-started at the full
    fit), as compare_rows.parquet has them, and the sizes whose refit could not run."""
    from cdlaw.fit.procedure import fit_law
    from cdlaw.fit.summary import predict_rows

    name = full.law.form
    lost, left_out = [], []
    for size in sizes:
        train = cells[cells["n_params"] != size]
        test = cells[cells["n_params"] == size]
        try:
            starts = min(n_starts, REFIT_STARTS)
            part = fit_law(train, law=name, n_starts=starts, naive=naive,
                           warm_starts=(full.law,), **common)  # fmt: skip
        except BadInput:
            lost.append(float(size))
            continue
        pred = predict_rows(part.law, test, naive)
        kept = test.assign(law=name, predicted=pred, largest=size == sizes[-1])
        left_out.append(kept[ROW_COLUMNS])
    return (pd.concat(left_out) if left_out else pd.DataFrame()), lost


def _score(full, name: str, table: pd.DataFrame, lost: list[float]) -> LawScore:
    """In-sample fit (log-RMSE, objective, AIC, BIC) and the left-out errors of one law."""
    used = full.rows["used"].to_numpy(bool)
    res = full.rows["residual_log"].to_numpy()[used]
    n, k = len(res), len(full.param_names)
    rss = float(np.sum(res**2))
    loglik = -0.5 * n * (math.log(2 * math.pi * rss / n) + 1) if n and rss > 0 else math.nan
    err = np.log(table["loss"]) - np.log(table["predicted"]) if len(table) else pd.Series()
    big = table["largest"].to_numpy() if len(table) else np.array([], bool)
    return LawScore(
        law=name,
        n_params=k,
        params=_params(full),
        rmse_log=full.rmse_log,
        objective=full.objective,
        aic=2 * k - 2 * loglik,
        bic=k * math.log(n) - 2 * loglik if n else math.nan,
        heldout_rmse_log=_rmse(err[big]) if big.any() else math.nan,
        loso_rmse_log=_rmse(err),
        converged=bool(full.optimizer is not None and full.optimizer.success),
        skipped_sizes=lost,
    )


def _rmse(err) -> float:
    err = np.asarray(err, dtype=float)
    return float(np.sqrt(np.mean(err**2))) if len(err) else math.nan


def attach_plans(
    comparison: Comparison,
    budget_flops: float,
    unique_tokens: float | None,
    data_range: DataRange | None = None,
    extrapolate: bool = True,
) -> None:
    """Each law's plan for the budget (law_plan), or why it has none; under the rows'
    data_range, through the same guard as `cdlaw plan`: with extrapolate False a law whose
    plan is beyond the limit has that sentence as its error, and when every law's is,
    BeyondLimit is raised (nothing is written)."""
    from cdlaw.law import Law
    from cdlaw.plan.guard import BeyondLimit
    from cdlaw.plan.laws import law_plan
    from cdlaw.plan.planner import plan

    beyond = []
    for score in comparison.scores:
        law = Law.from_dict({"law": score.law, **score.params})
        try:
            score.plan = law_plan(
                law, budget_flops, unique_tokens, data_range, plan, extrapolate, comparison.source
            )
        except BeyondLimit as e:
            score.plan = {"error": str(e), "beyond_limit": True}
            beyond.append(e)
    if beyond and len(beyond) == len(comparison.scores):
        raise beyond[0]


def compare_and_write(
    path, out=None, before_write=None, **options
) -> tuple[Comparison, Path, Path]:
    """Load PATH (a runs folder or a table), compare the laws, write compare.json and
    compare_rows.parquet (nothing is written when anything fails before)."""
    from cdlaw.fit.table import load_runs

    json_path, rows_path = comparison_outputs(path, out)
    runs = load_runs(path)
    check_writable(json_path, rows_path)  # before the fits, which may take minutes
    comparison = compare_laws(runs, source=str(path), **options)
    if before_write is not None:
        before_write(comparison)
    write_comparison(comparison, json_path, rows_path)
    return comparison, json_path, rows_path


def write_comparison(comparison: Comparison, json_path: Path, rows_path: Path) -> None:
    """compare_rows.parquet, then compare.json (last: its presence means both are whole)."""
    write_parquet_atomic(Path(rows_path), comparison.rows.reset_index(drop=True))
    write_json_atomic(Path(json_path), comparison.to_dict())


def law_of_runs(path, progress=None) -> PlanningLaw:
    """`cdlaw plan --law RUNS` (a table or a runs folder): every law compared on the runs
    (each refitted without the largest size, whose error ranks them: compare_laws), the
    winner fitted with cdlaw fit's bootstrap, and the comparison kept for the law note.
    Nothing is written; `cdlaw compare` and `cdlaw fit` save both."""
    from dataclasses import replace

    from cdlaw.fit.procedure import DEFAULT_BOOTSTRAP, DEFAULT_STARTS, fit_law
    from cdlaw.fit.table import load_runs
    from cdlaw.laws import LAWS

    runs = load_runs(path)
    comparison = compare_laws(
        runs, n_starts=DEFAULT_STARTS, source=str(path), progress=progress, left_out="largest"
    )
    winner = comparison.winner
    fit = fit_law(
        runs,
        winner,
        select=comparison.select,  # the rows the laws were compared on
        bootstrap=DEFAULT_BOOTSTRAP,
        naive=not LAWS[winner].uses_derived,  # as compared: derived tokens counted as fresh
        source=str(path),
        progress=progress,
    )
    return replace(
        PlanningLaw.of_fit(fit, str(path)),
        comparison=comparison.to_dict(),
        comparison_path=f"on {path} for this plan, not saved",
    )
