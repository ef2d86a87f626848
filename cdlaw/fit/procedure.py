"""Fit a scaling law to a table of runs, as carefully as the papers did (docs/law.md, docs/files.md, docs/fit.md).

    result = fit_law(df, law="cd", method="joint", bootstrap=200)
    result.law            # a cdlaw.law.Law
    result.to_dict()      # fit.json (docs/files.md)
    result.rows           # fit_rows.parquet: per-row prediction, residual, η, regime

The objective is the Huber loss of log-loss residuals, summed over rows, in log-space
parameters (E = e^e, ...). It is minimised with L-BFGS from a grid of starting points
(the CD paper used 6,144), all run at once by cdlaw.fit.optim, and the best few are
polished with scipy's L-BFGS-B. No hidden state: everything a fit did is in its result.

Checks before fitting are in cdlaw.fit.checks, the summaries of a finished fit in
cdlaw.fit.summary, the bootstrap refits in cdlaw.fit.bootstrap, and fit.json /
fit_rows.parquet I/O in cdlaw.fit.io; this module is the procedure, read straight down
(names imported from those modules are re-exported); the search itself is cdlaw.fit.search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw import law as lawlib
from cdlaw.fit import vector as fitvec
from cdlaw.fit.bootstrap import refit_resamples
from cdlaw.fit.cells import duplicate_rows, mixed_cells, seed_noise, select_cells
from cdlaw.fit.checks import (
    check_columns,
    check_identifiable,
    check_memory,
    check_options,
    fixed_values,
    unit_warnings,
)
from cdlaw.fit.findings import Holdout, OptimizerReport, SeedNoise
from cdlaw.fit.io import FitResult, output_paths, write_fit
from cdlaw.fit.problem import Problem, build_problem
from cdlaw.fit.projection import Projection
from cdlaw.fit.search import Progress, Solution, boot_starts, search, solve
from cdlaw.fit.starts import start_axes, start_grid, warm_start_points
from cdlaw.fit.summary import (
    data_range,
    model_floor_at_sizes,
    params_at_bound,
    percentile_intervals,
    predict_rows,
    rows_table,
    rstar_at_median,
)
from cdlaw.fit.table import prepare_runs, rows_digest
from cdlaw.fit.threads import with_single_threaded_blas
from cdlaw.laws import as_law_form
from cdlaw.laws.form import LawForm
from cdlaw.strategies import ordered
from cdlaw.system.errors import BadInput
from cdlaw.units import counted

# Starts of the search. With E, A, B solved, 256 grid points over the other axes cover
# them more densely than the CD paper's 6,144 over all eight (3⁸ = 6,561 points, 3⁵ = 243
# of them once E, A, B are solved); every table measured reaches the same optimum with
# 64 (docs/fit.md).
DEFAULT_STARTS = 256
# Bootstrap refits `cdlaw fit` makes unless told (--bootstrap 0: none): every plan from a
# fit then has its 95% band. Fewer than 50 give rough intervals (a warning says so).
DEFAULT_BOOTSTRAP = 200


def objective(law: lawlib.Law, df: pd.DataFrame, huber_delta: float | None = None) -> float:
    """The fit's objective for given constants on a table: Σ huber(log L_obs − log L_pred)."""
    from cdlaw.fit.problem import huber

    df = prepare_runs(df)
    delta = law.form_decl.huber_delta if huber_delta is None else huber_delta
    pred = predict_rows(law, df)
    return float(huber(np.log(df["loss"].to_numpy()) - np.log(pred), delta).sum())


# ---------------------------------------------------------------------------------------
# The fit, end to end.
# ---------------------------------------------------------------------------------------


@with_single_threaded_blas
def fit_law(
    df: pd.DataFrame,
    law: str | LawForm = "cd",
    method: str = "joint",
    huber_delta: float | None = None,
    n_starts: int = DEFAULT_STARTS,
    drop_outliers: int = 0,
    bootstrap: int = 0,
    holdout_largest: bool = False,
    seed: int = 0,
    naive: bool = False,
    select: str = "auto",
    source: str = "",
    progress: Progress | None = None,
    warm_starts: tuple = (),
) -> FitResult:
    """Fit `law` (a name in cdlaw.laws.LAWS, or a LawForm) to a table of runs; see the
    module doc.

    df: any table load_runs accepts (validated here too). Cells are reduced by `select`.
    A form that ignores derived tokens (chinchilla) fits only D′ = 0 rows, or every row
    with D′ counted as fresh if `naive`.
    holdout_largest fits without the largest N and reports its log-RMSE. drop_outliers
    drops the worst |log residual| row and refits, that many times. bootstrap refits on
    that many resamples of the rows for 95% percentile intervals. Raises BadInput when
    the table cannot identify the law's parameters. warm_starts: Laws that join the starts.
    """
    check_options(law, method, huber_delta, n_starts, drop_outliers, bootstrap, naive)
    check_memory(len(df), int(bootstrap), source or df.attrs.get("source") or "the table")
    form = as_law_form(law)
    delta = float(form.huber_delta if huber_delta is None else huber_delta)
    table = _fit_table(df, form, method, holdout_largest, naive, select, source)
    rng = np.random.default_rng(seed)
    # The search draws from a stream of its own: how many starts it samples (or rows, on a
    # large table) changes no bootstrap resample.
    search = _search(table, method, delta, int(n_starts), warm_starts, rng.spawn(1)[0], progress)
    for _ in range(int(drop_outliers)):
        search = _drop_worst(table, search, method, delta, progress)
    z_boot = np.empty((0, len(table.names)))
    n_boot_ok = 0
    if bootstrap:
        z_boot, n_boot_ok = refit_resamples(
            search.problem, delta, method, boot_starts(search.sol), int(bootstrap), rng, progress
        )
    return _result(table, search, _Boot(int(bootstrap), z_boot, n_boot_ok), method, delta)


# ---------------------------------------------------------------------------------------
# Steps of fit_law.
# ---------------------------------------------------------------------------------------


@dataclass
class _FitTable:
    """The table a fit sees: its cells, which of them are held out or outside the form,
    the rows fitted, and the warnings found so far."""

    form: LawForm
    prepared: pd.DataFrame  # every row, checked
    noise: SeedNoise | None
    cells: pd.DataFrame  # one row per cell (select)
    source: str
    heldout: np.ndarray  # bool per cell: the largest N under --holdout-largest
    form_ok: np.ndarray  # bool per cell: a row the form fits (D′ = 0, or it uses D′, or naive)
    rows: pd.DataFrame  # the cells fitted
    strategies: tuple[str, ...]
    names: list[str]  # the fit vector's names
    naive: bool
    select: str
    warnings: list[str]


@dataclass
class _Search:
    """Where the search left the fit: the rows and problem it ended on (after any dropped
    outliers), its solution, and the counts of the first, full search."""

    rows: pd.DataFrame
    problem: Problem
    sol: Solution
    span: np.ndarray  # the start grid's span, for params_at_bound
    n_started: int
    n_converged: int
    dropped: list[int]  # row_ids dropped as outliers


@dataclass
class _Boot:
    """The bootstrap refits: how many were asked, their points in z, how many converged."""

    n: int
    z: np.ndarray
    n_ok: int


def _fit_table(df, form: LawForm, method, holdout_largest, naive, select, source) -> _FitTable:
    """Check and reduce the table; pick the rows the fit uses."""
    prepared = prepare_runs(df)
    noise = seed_noise(prepared)
    cells = select_cells(prepared, select)
    source = source or cells.attrs.get("source", "")
    check_columns(cells, form, source or "the table")
    warnings = _duplicate_warnings(prepared) + mixed_cells(prepared, select)

    N, Dp = (cells[c].to_numpy(float) for c in ("n_params", "derived_tokens"))
    heldout = np.zeros(len(cells), bool)
    if holdout_largest:
        heldout = N == N.max()
    form_ok = (Dp == 0) | form.uses_derived | naive  # else: D′ = 0 rows only
    rows = cells[~heldout & form_ok]
    if naive:
        rows = rows.assign(effective_fresh=rows["fresh_tokens"] + rows["derived_tokens"])
    strategies = _fitted_strategies(rows, form, source)
    names = form.fit_vector_names(strategies)
    warnings += check_identifiable(rows, form, method, strategies, len(names))
    warnings += unit_warnings(rows)
    return _FitTable(
        form, prepared, noise, cells, source, heldout, form_ok, rows, strategies, names,
        naive, select, warnings,
    )  # fmt: skip


def _search(t: _FitTable, method, delta, n_starts, warm_starts, rng, progress) -> _Search:
    """The full search: the start grid (over the coordinates searched) and the warm starts."""
    problem = _problem(t.form, t.strategies, t.rows, t.naive)
    solved = t.form.linear if method == "joint" and Projection.of(problem) else ()
    grid, span = start_grid(problem, n_starts, rng, start_axes(problem, solved))
    warm = warm_start_points(problem, warm_starts)
    sol = search(problem, delta, method, grid, warm, progress, rng)
    return _Search(t.rows, problem, sol, span, sol.n_starts, sol.n_converged, [])


def _result(t: _FitTable, search: _Search, boot: _Boot, method: str, delta: float) -> FitResult:
    """The finished fit: laws from the solution and refits, the rows table, the summaries
    and every warning."""
    form, strategies, names, rows, cells = t.form, t.strategies, t.names, search.rows, t.cells
    problem, sol = search.problem, search.sol
    public = fitvec.fit_vector_to_public(form, strategies, problem.theta(sol.z))
    fitted = fitvec.law_from_public_vector(form, strategies, public, source=t.source)
    z_public = (
        fitvec.fit_vector_to_public(form, strategies, problem.theta(boot.z)) if boot.n else boot.z
    )
    boot_laws = [fitvec.law_from_public_vector(form, strategies, v) for v in z_public]

    at_bound = params_at_bound(sol.z, problem, search.span, names)
    warnings = t.warnings
    warnings += _fit_warnings(at_bound, boot.n, boot.n_ok, cells, t.prepared)
    if (~t.form_ok & ~t.heldout).any():
        warnings.append(
            f"not fitted: {counted(int((~t.form_ok & ~t.heldout).sum()), 'row')} with derived "
            f"tokens ({form.name} uses D′ = 0 rows; --naive counts D′ as fresh)"
        )

    used = (
        cells["row_id"].isin(rows["row_id"]).to_numpy()
        & ~cells["row_id"].isin(search.dropped).to_numpy()
    )
    table = rows_table(cells, fitted, t.naive, used, t.heldout)
    res_used = table["residual_log"].to_numpy()[used]
    rstar = rstar_at_median(fitted, boot_laws, rows, strategies, warnings)
    return FitResult(
        law=fitted,
        method=method,
        huber_delta=delta,
        naive=t.naive,
        select=t.select,
        source=t.source,
        param_names=names,
        ci95=percentile_intervals(names, z_public),
        bootstrap=z_public,
        n_rows=len(cells),
        n_used=int(used.sum()),
        dropped=search.dropped,
        objective=sol.f,
        rmse_log=float(np.sqrt(np.mean(res_used**2))),
        seed_noise=t.noise,
        holdout=_holdout(t, table),
        optimizer=OptimizerReport(
            success=sol.success,
            message=sol.message,
            n_starts=search.n_started,
            n_converged=search.n_converged,
            at_bound=tuple(at_bound),
            bootstrap_converged=boot.n_ok,
        ),
        data_range=data_range(rows),
        model_floor=model_floor_at_sizes(fitted, boot_laws, np.unique(rows["n_params"])),
        rstar=rstar,
        regime_counts={str(k): int(v) for k, v in table.loc[used, "regime"].value_counts().items()},
        warnings=warnings,
        rows=table,
        rows_digest=rows_digest(cells),
        n_runs=len(t.prepared),
    )


def _holdout(t: _FitTable, table: pd.DataFrame) -> Holdout | None:
    """--holdout-largest: the log-RMSE on the largest size's rows the form fits."""
    if not t.heldout.any():
        return None
    N = t.cells["n_params"].to_numpy(float)
    r = table["residual_log"].to_numpy()[t.heldout & t.form_ok]
    rmse = float(np.sqrt(np.mean(r**2))) if len(r) else float("nan")
    return Holdout(float(N.max()), len(r), rmse)


def _duplicate_warnings(prepared: pd.DataFrame) -> list[str]:
    copies = duplicate_rows(prepared)
    if not copies:
        return []
    return [
        f"{copies} rows are exact duplicates of another row (every column equal); "
        "the seed-noise estimate counts each run once"
        if copies > 1
        else "1 row is an exact duplicate of another row (every column equal); "
        "the seed-noise estimate counts each run once"
    ]


def default_law(rows: pd.DataFrame) -> str:
    """The law a table of runs is fitted with unless told: "cd", or "chinchilla" where no
    run has derived tokens (the cd law's special case, and the law it then asks for)."""
    return "cd" if (rows["derived_tokens"] > 0).any() else "chinchilla"


def fit_command(path, rows: pd.DataFrame | None) -> str:
    """The `cdlaw fit` command that fits these runs (`rows` as load_runs gives them; None:
    not read), with --law chinchilla where default_law says so."""
    one_epoch = rows is not None and len(rows) and default_law(rows) == "chinchilla"
    return f"cdlaw fit {path}" + (" --law chinchilla" if one_epoch else "")


def _fitted_strategies(rows: pd.DataFrame, form: LawForm, source: str) -> tuple[str, ...]:
    """The derived strategies with D′ > 0 rows, in strategies.ordered order (repetition,
    paraphrase, then the rest alphabetically); none for a form that ignores derived tokens,
    BadInput for one that needs them but has none."""
    if not form.uses_derived:
        return ()
    strategies = ordered(rows.loc[rows["derived_tokens"] > 0, "strategy"])
    if not strategies:
        raise BadInput(
            f"{source or 'the table'} has no runs with derived tokens (D′ > 0), so the "
            f"{form.name} law has nothing to fit beyond Chinchilla; use --law chinchilla"
        )
    return strategies


def _problem(form: LawForm, strategies, rows: pd.DataFrame, naive: bool) -> Problem:
    """The fit's problem on `rows`; with `naive`, derived tokens count as fresh."""
    fresh = rows["effective_fresh"] if naive else rows["fresh_tokens"]
    return build_problem(
        form,
        strategies,
        rows["n_params"],
        fresh,
        0 * fresh if naive else rows["derived_tokens"],
        rows["strategy"],
        rows["loss"],
        rows["row_id"],
        fixed=fixed_values(rows, form),
    )


def _drop_worst(table: _FitTable, search: _Search, method: str, delta: float, progress) -> _Search:
    """--drop-outliers, once: drop the worst |log residual| row (its row_id joins
    search.dropped) and refit from the last fit's minima."""
    problem, sol, dropped = search.problem, search.sol, search.dropped
    res = np.abs(problem.y - problem.log_loss(sol.z)[0])
    worst = int(np.argmax(res))
    dropped.append(int(problem.row_ids[worst]))
    rows = search.rows[~search.rows["row_id"].isin(dropped)]
    check_identifiable(rows, table.form, method, problem.strategies, len(table.names))
    problem = problem.subset(np.arange(len(problem.y)) != worst)
    sol = solve(problem, delta, method, sol.candidates, progress)
    return replace(search, rows=rows, problem=problem, sol=sol)


def _fit_warnings(at_bound, bootstrap: int, n_boot_ok: int, cells, prepared) -> list[str]:
    """What a finished fit warns of: parameters at a bound, the E–A–α trade-off, the
    bootstrap, runs left out, simulated rows."""
    warnings = []
    if at_bound:
        warnings.append(
            "parameters at a bound or outside the start grid: "
            + ", ".join(at_bound)
            + " (a bound means the data cannot pin it; outside the start grid, the search left "
            "the ranges its starts cover, so a minimum further out was never started near: "
            "its bootstrap interval says how firm it is)"
        )
    warnings.append(
        "E, A and alpha trade off against each other; E + A/N^alpha at the table's sizes "
        "(model_floor) is what the data pin down"
    )
    if bootstrap and n_boot_ok < bootstrap:
        warnings.append(f"{bootstrap - n_boot_ok} of {bootstrap} bootstrap refits did not converge")
    if bootstrap and bootstrap < 50:
        warnings.append(f"only {bootstrap} bootstrap refits: the 95% intervals are rough")
    if cells.attrs.get("not_done"):
        warnings.append(f"{cells.attrs['not_done']} run(s) whose status is not done were left out")
    if "device" in prepared and (prepared["device"].astype(str) == "simulated").any():
        n_sim = int((prepared["device"].astype(str) == "simulated").sum())
        warnings.append(
            f"{n_sim} row(s) are simulated (cdlaw sweep --executor simulate): losses drawn from "
            "a known law, so this fit measures how well that law is recovered, not a model"
        )
    return warnings


def fit_path(
    path,
    out=None,
    before_write: Callable[[FitResult], None] | None = None,
    notes: tuple[str, ...] = (),
    **options,
) -> tuple[FitResult, Path, Path]:
    """Load PATH (runs folder or table), fit, write fit.json + fit_rows.parquet.

    notes: warnings about PATH found outside the fit (cdlaw.sweep.summary.
    folder_warnings), added to the result's.
    Everything is checked before anything is written; before_write(result) (the CLI's
    summary) runs before the files are written, so that a failure there writes nothing.
    Returns (result, json, rows paths).
    """
    from cdlaw.fit.table import load_runs
    from cdlaw.system.atomic import check_writable

    json_path, rows_path = output_paths(path, out)
    df = load_runs(path)
    check_writable(json_path, rows_path)  # before the fit, which may take minutes
    result = fit_law(df, source=str(path), **options)
    result.warnings.extend(notes)
    if before_write is not None:
        before_write(result)
    write_fit(result, json_path, rows_path)
    return result, json_path, rows_path
