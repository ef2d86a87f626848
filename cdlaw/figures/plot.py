"""`cdlaw plot`: decide which figures the inputs allow, draw them, write them.

PATH may be a runs folder, a fit.json, a table of runs with its fit, or a frontier JSON
(see cdlaw.figures.inputs). The figures themselves live in `cdlaw.figures`, one module
per kind; each returns a matplotlib Figure.

    inputs = load_inputs("runs/demo")
    fig = make_figure("loss", inputs)          # a matplotlib Figure, to inspect or save
    plot("runs/demo", ["loss", "eta"])         # → runs/demo/figures/loss.png, eta.png
    plot("t.csv", ["loss"])                    # → t.figures/loss.png (the fit t.fit.json)
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from cdlaw.figures.inputs import PlotInputs, load_inputs
from cdlaw.figures.output import FigureOptions, check_options, figure_context, save_figure
from cdlaw.law import Law
from cdlaw.plan.guard import frontier_extrapolated
from cdlaw.plan.planner import frontier
from cdlaw.plan.question import check_asked, plan_asked
from cdlaw.plan.source import with_fitted_range
from cdlaw.plan.support import supported_budgets
from cdlaw.system.atomic import check_out_path
from cdlaw.system.errors import BadInput

KINDS = ("loss", "eta", "rstar", "frontier", "residuals", "curves", "compare", "downstream")
FORMATS = ("png", "svg", "pdf")
NEED_NO_FIT = {"curves", "compare", "downstream"}


# ---------------------------------------------------------------------------------------
# Which figures the inputs allow, and drawing them
# ---------------------------------------------------------------------------------------


def why_not(kind: str, inputs: PlotInputs) -> str | None:
    """None when `kind` can be drawn from inputs, else the reason it cannot."""
    law, rows = inputs.law, inputs.rows
    # Both commands that draw (plot, report) take --fit.
    from cdlaw.fit.procedure import fit_command

    need_fit = (
        f"it needs a fit: run `{fit_command(inputs.path, inputs.runs)}` first, or pass "
        "--fit FIT.json"
    )
    if kind == "loss" or kind == "residuals":
        if law is None:
            return need_fit
        if rows is None or not len(rows):
            return "it needs a table of runs (summary.parquet, fit_rows.parquet or a CSV)"
        if kind == "residuals" and not np.isfinite(rows["predicted_loss"]).any():
            return "the fit predicts none of the runs' strategies"
        return None
    if kind == "eta":
        if law is None:
            return need_fit
        if law.form_decl.rstar is None or not law.strategies:
            return f"a {law.form} law has no η" + _why_no_rstar(law)
        if rows is None or not (rows["derived_tokens"] > 0).any():
            return "it needs runs with derived tokens (derived_tokens > 0)"
        return None
    if kind == "rstar":
        if law is None:
            return need_fit
        if law.form_decl.rstar is None or not law.strategies:
            return f"a {law.form} law has no R*" + _why_no_rstar(law)
        return None
    if kind == "frontier":
        if inputs.frontier is not None:
            return None
        if law is None:
            return need_fit
        if _unique_tokens(inputs) is None:
            return "no fresh-token count to plan with (no runs and no data_range in the fit)"
        return None
    if kind == "curves":
        if not inputs.metrics:
            return "it needs a runs folder with <run_id>/metrics.parquet"
        return None
    if kind == "compare":
        if inputs.comparison is None:
            return "it needs a comparison of laws: run `cdlaw compare` on the runs first"
        if inputs.comparison_stale is not None:
            return inputs.comparison_stale
        return None
    if kind == "downstream":
        if inputs.downstream is None and not _has_task_columns(inputs):
            return f"it needs task links, and {no_task_columns(inputs.path)}"
        if inputs.downstream is None:
            return f"it needs task links: run `cdlaw downstream {inputs.path}` first"
        if inputs.summary is None or not len(inputs.summary):
            return "it needs the runs the links were fitted to (summary.parquet or a table)"
        if not inputs.downstream.links:
            skipped = "; ".join(f"{c}: {why}" for c, why in inputs.downstream.skipped.items())
            return f"no task column could be linked to the loss ({skipped or 'none'})"
        return None
    raise BadInput(f"unknown figure kind {kind!r}; valid: {', '.join(KINDS)}")


def no_task_columns(path: Path) -> str:
    """Why runs have no task links to draw or report: no run was scored on a task."""
    if Path(path).is_dir():
        return (
            f"no run in {path} was scored on a task (a sweep file's [eval] names the tasks "
            "each run is scored on)"
        )
    return f"{path} has no task columns (task_<task>_<metric>, one per task metric)"


def _has_task_columns(inputs: PlotInputs) -> bool:
    from cdlaw.tasks.columns import task_columns

    return inputs.summary is not None and bool(task_columns(inputs.summary.columns))


def _why_no_rstar(law: Law) -> str:
    if not law.form_decl.uses_derived:
        return " (derived tokens are worth nothing to it)"
    return "" if law.form_decl.rstar is None else " (the fit has no derived-token strategy)"


def available_kinds(inputs: PlotInputs) -> list[str]:
    return [k for k in KINDS if why_not(k, inputs) is None]


def _unique_tokens(inputs: PlotInputs) -> float | None:
    """The frontier's U: as asked, else the runs' (or the fitted range's) largest D."""
    if inputs.unique_tokens is not None:
        return inputs.unique_tokens
    if inputs.rows is not None and len(inputs.rows):
        return float(inputs.rows["fresh_tokens"].max())
    rng = (inputs.fit or {}).get("data_range") or {}
    if rng.get("fresh_tokens"):
        return float(rng["fresh_tokens"][1])
    return None


def _largest_run_flops(inputs: PlotInputs) -> float | None:
    if inputs.rows is not None and len(inputs.rows):
        r = inputs.rows
        return float((6 * r["n_params"] * r["tokens_trained"]).max())
    rng = (inputs.fit or {}).get("data_range") or {}
    if rng.get("n_params") and rng.get("fresh_tokens"):
        ratio = (rng.get("derived_ratio") or [0, 0])[1] or 0
        return 6 * float(rng["n_params"][1]) * float(rng["fresh_tokens"][1]) * (1 + float(ratio))
    return None


def compute_frontier(
    law: Law,
    unique_tokens: float,
    budgets=None,
    strategy: str = "auto",
    fit: dict | None = None,
    extrapolate: bool = False,
    largest_run_flops: float | None = None,
    budget_flops: float | None = None,
) -> dict:
    """The frontier JSON (as `cdlaw plan --frontier --json` prints it), via cdlaw.plan.planner,
    under the fit's data range and bootstrap and the same extrapolation limit as `cdlaw
    plan`. budgets
    None: the range whose plans stay inside the limit (plan.support.supported_budgets), or for a
    law without a fitted range around the largest run's compute (default_budgets).
    budget_flops: a budget asked for, planned among them and named in the JSON
    ("budget_flops"), for the figure to mark."""
    name = (fit or {}).get("source") or law.source or law.form
    # with the fit's bootstrap, each plan has its band and its valley, which the figure shades
    source = with_fitted_range(law, fit, name, bootstrap=True)
    if budgets is None:
        budgets = supported_budgets(source, unique_tokens, strategy, SUPPORTED_POINTS)
    if budgets is None:
        budgets = default_budgets(largest_run_flops or 1e21)
    if budget_flops is not None:
        budgets = sorted({*map(float, budgets), float(budget_flops)})
    result = frontier(
        source, list(map(float, budgets)), unique_tokens, strategy=strategy, extrapolate=extrapolate
    )
    line = frontier_extrapolated(result.plans)
    if line:  # said as `cdlaw plan --frontier` says it
        logging.getLogger("cdlaw.plot").warning(line)
    # The same JSON as `cdlaw plan --frontier --json`, named after the fit it was planned with.
    marked = {} if budget_flops is None else {"budget_flops": float(budget_flops)}
    return {**result.to_dict(), "law": name, **marked}


def default_budgets(largest_run_flops: float, n: int = 16) -> np.ndarray:
    """From 1/100 of the largest run's compute up to 1000× it: the fitted range and beyond."""
    return np.geomspace(largest_run_flops / 100, largest_run_flops * 1e3, n)


# Budgets of a frontier figure over the range its fit supports.
SUPPORTED_POINTS = 16


def make_figure(kind: str, inputs: PlotInputs, budgets=None, extrapolate: bool = False):
    """Draw one figure kind from inputs; raises BadInput saying why when it cannot. budgets
    and extrapolate: the frontier's (`cdlaw plot --frontier-range`, `--extrapolate`)."""
    reason = why_not(kind, inputs)
    if reason is not None:
        raise BadInput(f"cannot draw the {kind!r} figure from {inputs.path}: {reason}")
    law = inputs.law  # why_not has checked that what each kind draws is there
    if kind == "loss":
        from cdlaw.figures.loss import loss_figure

        assert law is not None
        return loss_figure(law, inputs.rows, inputs.fit)
    if kind == "eta":
        from cdlaw.figures.eta import eta_figure

        assert law is not None
        return eta_figure(law, inputs.rows, inputs.fit)
    if kind == "rstar":
        from cdlaw.figures.rstar import rstar_figure

        assert law is not None
        return rstar_figure(law, inputs.rows, inputs.fit)
    if kind == "frontier":
        from cdlaw.figures.frontier import frontier_figure

        u_note = ""  # why this U, where nobody asked for one
        if inputs.frontier is None:
            unique = _unique_tokens(inputs)
            u_note = "the runs' largest D" if inputs.unique_tokens is None else ""
            assert law is not None and unique is not None
            inputs.frontier = compute_frontier(
                law,
                unique,
                budgets,
                fit=inputs.fit,
                extrapolate=extrapolate,
                largest_run_flops=_largest_run_flops(inputs),
                budget_flops=inputs.budget_flops,
            )
        return frontier_figure(inputs.frontier, inputs.fit, inputs.rows, u_note)
    if kind == "residuals":
        from cdlaw.figures.residuals import residuals_figure

        return residuals_figure(inputs.rows, inputs.fit)
    if kind == "curves":
        from cdlaw.figures.curves import curves_figure

        return curves_figure(inputs.metrics, inputs.summary, inputs.fit)
    if kind == "compare":
        from cdlaw.figures.compare import compare_figure

        assert inputs.comparison is not None
        return compare_figure(inputs.comparison, inputs.comparison_rows)
    if kind == "downstream":
        from cdlaw.figures.downstream import downstream_figure

        assert inputs.summary is not None
        return downstream_figure(inputs.downstream, inputs.summary)
    raise BadInput(f"unknown figure kind {kind!r}; valid: {', '.join(KINDS)}")


def _check_asked(kinds, budget_flops, unique_tokens) -> None:
    """BadInput for a C or U that is no positive number, or that no figure asked for uses."""
    given = check_asked(budget_flops, unique_tokens)
    if given and kinds and "frontier" not in kinds:
        raise BadInput(
            f"{' and '.join(given)} set the frontier's plan: add --kind frontier, or leave "
            f"{'them' if len(given) > 1 else 'it'} out"
        )


def _ask(inputs: PlotInputs, budget_flops, unique_tokens) -> None:
    """Put the plan the frontier is for on inputs: as asked, else the sweep file's."""
    if inputs.frontier is not None and unique_tokens is not None:
        raise BadInput(
            f"{inputs.path} is a frontier planned already, for its own U: plan one for "
            "--unique-tokens with `cdlaw plan --frontier --json`"
        )
    asked = plan_asked(inputs.runs_dir or inputs.path, budget_flops, unique_tokens)
    inputs.unique_tokens, inputs.budget_flops = asked.unique_tokens, asked.budget_flops
    if inputs.frontier is not None and asked.budget_flops is not None:
        inputs.frontier = {**inputs.frontier, "budget_flops": asked.budget_flops}


def plot(
    path: str | Path,
    kinds: list[str] | None = None,
    out: str | Path | None = None,
    fmt: str = "png",
    fit_path: str | Path | None = None,
    options: FigureOptions = FigureOptions(),
    budgets=None,
    extrapolate: bool = False,
    budget_flops: float | None = None,
    unique_tokens: float | None = None,
) -> list[Path]:
    """Draw the requested kinds (default: all the inputs allow) and write <out>/<kind>.<fmt>;
    out defaults to <runs>/figures, or t.figures/ beside a table t.csv (figures_dir).

    options: --no-title, --caption, --dpi, --style (cdlaw.figures.output); budgets and
    extrapolate: the frontier's (make_figure); budget_flops and unique_tokens: the plan the
    frontier is for, else the sweep file's [plan] (cdlaw.plan.question): it is drawn for
    that U and marks that C. Every input is checked before any file is written.
    """
    if fmt not in FORMATS:
        raise BadInput(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    check_options(options)
    for k in kinds or []:
        if k not in KINDS:
            import difflib

            near = difflib.get_close_matches(k, KINDS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise BadInput(f"--kind {k!r} is not a figure kind{hint}; valid: {', '.join(KINDS)}")
    if out is not None:
        check_out_path(out, "--out", folder=True)
    # figures drawn from what other commands wrote (compare.json, downstream.json, the
    # runs' curves) need no fit of a table
    _check_asked(kinds, budget_flops, unique_tokens)
    inputs = load_inputs(path, fit_path, need_fit=not set(kinds or KINDS) <= NEED_NO_FIT)
    _ask(inputs, budget_flops, unique_tokens)
    if kinds:
        for k in kinds:
            reason = why_not(k, inputs)
            if reason is not None:
                raise BadInput(f"cannot draw the {k!r} figure from {inputs.path}: {reason}")
    else:
        kinds = available_kinds(inputs)
        if not kinds:
            raise BadInput(
                f"{inputs.path} allows no figure: it needs a fit (`cdlaw fit`) or run metrics"
            )
    out_dir = Path(out) if out is not None else inputs.out_dir
    # Draw everything first, then write: a failure while drawing leaves no partial set.
    # The style must be in force while drawing (it sets fonts, grids, sizes) and saving.
    with figure_context(options.style):
        figures = [(k, make_figure(k, inputs, budgets, extrapolate)) for k in dict.fromkeys(kinds)]
        return [save_figure(fig, out_dir / f"{k}.{fmt}", fmt, options) for k, fig in figures]
