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
(names imported from those modules are re-exported).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw import law as lawlib
from cdlaw.errors import BadInput
from cdlaw.fit import vector as fitvec
from cdlaw.fit.bootstrap import refit_resamples
from cdlaw.fit.checks import check_columns, check_identifiable, check_options, fixed_values
from cdlaw.fit.findings import Holdout, OptimizerReport
from cdlaw.fit.io import FitResult, output_paths, write_fit
from cdlaw.fit.optim import (
    SEARCH_FTOL,
    SEARCH_GTOL,
    minimize_batched,
    polish,
    projected_gradient,
)
from cdlaw.fit.problem import Problem, build_problem
from cdlaw.fit.starts import start_grid, warm_start_points
from cdlaw.fit.summary import (
    data_range,
    model_floor_at_sizes,
    params_at_bound,
    percentile_intervals,
    predict_rows,
    rows_table,
    rstar_at_median,
)
from cdlaw.fit.table import duplicate_rows, prepare_runs, seed_noise, select_cells
from cdlaw.fit.threads import with_single_threaded_blas
from cdlaw.laws import as_law_form
from cdlaw.laws.form import LawForm
from cdlaw.strategies import ordered

DEFAULT_STARTS = 6144  # the CD paper's grid
N_POLISH = 5  # distinct best minima polished with scipy
STATIONARY = 1e-7  # projected gradient below which a stalled line search is a minimum
SAME_MINIMUM = 1e-3  # two minima closer than this in every coordinate are one

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def _is_new(x: np.ndarray, kept) -> bool:
    """Whether minimum x differs from every one already kept (by SAME_MINIMUM)."""
    return all(np.max(np.abs(x - k)) > SAME_MINIMUM for k in kept)


def objective(law: lawlib.Law, df: pd.DataFrame, huber_delta: float | None = None) -> float:
    """The fit's objective for given constants on a table: Σ huber(log L_obs − log L_pred)."""
    from cdlaw.fit.problem import huber

    df = prepare_runs(df)
    delta = law.form_decl.huber_delta if huber_delta is None else huber_delta
    pred = predict_rows(law, df)
    return float(huber(np.log(df["loss"].to_numpy()) - np.log(pred), delta).sum())


# ---------------------------------------------------------------------------------------
# The search: many starts at once, then the best few polished.
# ---------------------------------------------------------------------------------------


@dataclass
class _Solution:
    z: np.ndarray  # best point, in the problem's coordinates
    f: float
    success: bool
    message: str
    candidates: np.ndarray  # distinct good minima, for warm refits
    n_converged: int
    n_starts: int


def _minimise(problem, delta, starts, free, base, progress, label) -> _Solution:
    """Batched L-BFGS from every start over the `free` coordinates, then polish the best."""
    lo, hi = problem.lower[free], problem.upper[free]
    whole = len(free) == problem.n_params
    fun = problem.objective(delta, free=None if whole else free, base=None if whole else base)
    report = None if progress is None else (lambda d, t: progress(label, d, t))
    # Preconditioner from the rows this search sees (base fills the frozen coordinates).
    sample = starts[:: max(1, len(starts) // 64)]
    if not whole:
        full = np.array(np.broadcast_to(base, (len(sample), problem.n_params)))
        full[:, free] = sample
        sample = full
    scale = problem.curvature_scale(sample, free)
    res = minimize_batched(
        fun, starts, lo, hi, ftol=SEARCH_FTOL, gtol=SEARCH_GTOL, scale=scale, progress=report
    )
    order = np.argsort(np.where(np.isfinite(res.f), res.f, np.inf))
    picked: list[int] = []
    for i in order:
        if not np.isfinite(res.f[i]):
            break
        if _is_new(res.x[i], [res.x[j] for j in picked]):
            picked.append(int(i))
        if len(picked) == N_POLISH:
            break
    if not picked:
        raise RuntimeError("every start of the fit gave a non-finite objective")

    def fun1(x):
        f, g = fun(x[None, :], np.zeros(1, dtype=int))
        return float(f[0]), g[0]

    polished = [polish(fun1, res.x[i], lo, hi) for i in picked]
    best = min(polished, key=lambda r: r.fun)
    cands = np.array([r.x for r in sorted(polished, key=lambda r: r.fun)])
    success, message = bool(best.success), str(best.message)
    pg = float(np.abs(projected_gradient(best.x, best.jac, lo, hi)).max())
    if not success and pg <= STATIONARY:
        # scipy's line search stops when no step lowers f in floating point: at a minimum.
        success = True
        message = f"{message.strip()} no representable decrease left (stationary point)"
    message += f"; max projected gradient {pg:.1e}"
    return _Solution(
        best.x,
        float(best.fun),
        success,
        message,
        cands,
        int(res.converged.sum()),
        len(starts),
    )


def _solve(problem: Problem, delta: float, method: str, starts: np.ndarray, progress) -> _Solution:
    """One fit (joint or staged) from a set of starting points in z."""
    P = problem.n_params
    everything = np.arange(P)
    if method == "joint" or len(problem.shared) == P:  # staged needs per-strategy parameters
        return _minimise(problem, delta, starts, everything, None, progress, "multistart")
    shared, per = problem.stages(starts[0])
    one_epoch = problem.ratio == 0
    s1 = _minimise(
        problem.subset(one_epoch),
        delta,
        np.unique(starts[:, shared], axis=0),
        shared,
        starts[0],
        progress,
        "stage 1 (D′ = 0)",
    )
    z = starts[0].copy()
    z[shared] = s1.z
    s2 = _minimise(
        problem.subset(~one_epoch),
        delta,
        np.unique(starts[:, per], axis=0),
        per,
        z,
        progress,
        "stage 2 (per strategy)",
    )
    z[per] = s2.z
    f = float(problem.objective(delta)(z[None], np.zeros(1, int))[0][0])
    cands = np.tile(z, (min(len(s1.candidates), len(s2.candidates)), 1))
    cands[:, shared] = s1.candidates[: len(cands)]
    cands[:, per] = s2.candidates[: len(cands)]
    return _Solution(
        z,
        f,
        s1.success and s2.success,
        f"stage 1: {s1.message}; stage 2: {s2.message}",
        cands,
        s1.n_converged + s2.n_converged,
        s1.n_starts + s2.n_starts,
    )


def _boot_starts(sol: _Solution) -> np.ndarray:
    """The best fit, then the search's other distinct minima: where bootstrap refits start.
    Two polished minima can land on one point; a start is kept only once."""
    starts = [sol.z]
    for c in sol.candidates:
        if _is_new(c, starts):
            starts.append(c)
    return np.array(starts)


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
    select: str = "min",
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
    form = as_law_form(law)
    delta = float(form.huber_delta if huber_delta is None else huber_delta)
    prepared = prepare_runs(df)
    noise = seed_noise(prepared)
    cells = select_cells(prepared, select)
    source = source or cells.attrs.get("source", "")
    check_columns(cells, form, source or "the table")
    rng = np.random.default_rng(seed)
    warnings = _duplicate_warnings(prepared)

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

    problem = _problem(form, strategies, rows, naive)
    starts, span = start_grid(problem, int(n_starts), rng)
    starts = np.vstack([warm_start_points(problem, warm_starts), starts])
    sol = _solve(problem, delta, method, starts, progress)
    n_started, n_converged = sol.n_starts, sol.n_converged  # of the full search
    dropped: list[int] = []
    for _ in range(int(drop_outliers)):
        rows, problem, sol = _drop_worst(
            rows, problem, sol, dropped, form, method, names, delta, progress
        )

    z_boot = np.empty((0, len(names)))
    n_boot_ok = 0
    if bootstrap:
        z_boot, n_boot_ok = refit_resamples(
            problem, delta, method, _boot_starts(sol), int(bootstrap), rng, progress
        )

    public = fitvec.fit_vector_to_public(form, strategies, problem.theta(sol.z))
    fitted = fitvec.law_from_public_vector(form, strategies, public, source=source)
    boot = (
        fitvec.fit_vector_to_public(form, strategies, problem.theta(z_boot))
        if bootstrap
        else z_boot
    )
    boot_laws = [fitvec.law_from_public_vector(form, strategies, v) for v in boot]

    at_bound = params_at_bound(sol.z, problem, span, names)
    warnings += _fit_warnings(at_bound, bootstrap, n_boot_ok, cells, prepared)
    if (~form_ok & ~heldout).any():
        warnings.append(
            f"{int((~form_ok & ~heldout).sum())} rows with derived tokens were not fitted "
            f"({form.name} uses D′ = 0 rows; --naive counts D′ as fresh)"
        )

    used = (
        cells["row_id"].isin(rows["row_id"]).to_numpy() & ~cells["row_id"].isin(dropped).to_numpy()
    )
    table = rows_table(cells, fitted, naive, used, heldout)
    res_used = table["residual_log"].to_numpy()[used]
    rstar = rstar_at_median(fitted, boot_laws, rows, strategies, warnings)
    holdout = None
    if holdout_largest:
        r = table["residual_log"].to_numpy()[heldout & form_ok]
        rmse = float(np.sqrt(np.mean(r**2))) if len(r) else float("nan")
        holdout = Holdout(float(N.max()), len(r), rmse)
    return FitResult(
        law=fitted,
        method=method,
        huber_delta=delta,
        naive=naive,
        select=select,
        source=source,
        param_names=names,
        ci95=percentile_intervals(names, boot),
        bootstrap=boot,
        n_rows=len(cells),
        n_used=int(used.sum()),
        dropped=dropped,
        objective=sol.f,
        rmse_log=float(np.sqrt(np.mean(res_used**2))),
        seed_noise=noise,
        holdout=holdout,
        optimizer=OptimizerReport(
            success=sol.success,
            message=sol.message,
            n_starts=n_started,
            n_converged=n_converged,
            at_bound=tuple(at_bound),
            bootstrap_converged=n_boot_ok,
        ),
        data_range=data_range(rows),
        model_floor=model_floor_at_sizes(fitted, boot_laws, np.unique(rows["n_params"])),
        rstar=rstar,
        regime_counts={str(k): int(v) for k, v in table.loc[used, "regime"].value_counts().items()},
        warnings=warnings,
        rows=table,
    )


# ---------------------------------------------------------------------------------------
# Steps of fit_law.
# ---------------------------------------------------------------------------------------


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


def _drop_worst(rows, problem, sol, dropped, form, method, names, delta, progress):
    """--drop-outliers, once: drop the worst |log residual| row (its row_id joins
    `dropped`) and refit from the last fit's minima. Returns (rows, problem, solution)."""
    res = np.abs(problem.y - problem.log_loss(sol.z)[0])
    worst = int(np.argmax(res))
    dropped.append(int(problem.row_ids[worst]))
    rows = rows[~rows["row_id"].isin(dropped)]
    check_identifiable(rows, form, method, problem.strategies, len(names))
    problem = problem.subset(np.arange(len(problem.y)) != worst)
    return rows, problem, _solve(problem, delta, method, sol.candidates, progress)


def _fit_warnings(at_bound, bootstrap: int, n_boot_ok: int, cells, prepared) -> list[str]:
    """What a finished fit warns of: parameters at a bound, the E–A–α trade-off, the
    bootstrap, runs left out, simulated rows."""
    warnings = []
    if at_bound:
        warnings.append(
            "parameters at a bound or outside the start grid: "
            + ", ".join(at_bound)
            + " (a bound means the data cannot pin it; outside the grid, widen --starts)"
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
    path, out=None, before_write: Callable[[FitResult], None] | None = None, **options
) -> tuple[FitResult, Path, Path]:
    """Load PATH (runs folder or table), fit, write fit.json + fit_rows.parquet.

    Everything is checked before anything is written; before_write(result) (the CLI's
    summary) runs before the files are written, so that a failure there writes nothing.
    Returns (result, json, rows paths).
    """
    from cdlaw.atomic import check_writable
    from cdlaw.fit.table import load_runs

    json_path, rows_path = output_paths(path, out)
    df = load_runs(path)
    check_writable(json_path, rows_path)  # before the fit, which may take minutes
    result = fit_law(df, source=str(path), **options)
    if before_write is not None:
        before_write(result)
    write_fit(result, json_path, rows_path)
    return result, json_path, rows_path
