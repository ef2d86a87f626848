"""Gathering a `cdlaw report`: read a sweep's runs folder, or a table of runs, into a Report.

The runs and their fit are read as `cdlaw plot` reads them (cdlaw.figures.inputs.load_inputs:
the runs folder's fit.json, the fit beside a table, or the one named). The Report holds
them (the fit made in memory with cdlaw's defaults when there is none), the plan, and every figure `cdlaw plot` can draw, as
base64 PNG, or why it was not drawn. cdlaw.report.page renders it as HTML.

The plan is for the budget and unique tokens asked for (cdlaw.plan.question): by
--budget-flops / --unique-tokens, else by the sweep file's [plan]. What nobody asked for
is a default the page names in its headline: U the runs' largest fresh-token count, C the
largest budget, up to the compute of the sweep's largest run, whose plan stays inside the
fitted range (cdlaw.report.budget).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import io
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cdlaw.figures.inputs import PlotInputs, load_inputs, prepare_rows
from cdlaw.figures.plot import KINDS, make_figure, no_task_columns, why_not
from cdlaw.fit.procedure import DEFAULT_BOOTSTRAP, default_law, fit_command, fit_law
from cdlaw.fit.table import load_runs, prepare_runs
from cdlaw.plan.guard import BeyondLimit
from cdlaw.plan.planner import plan
from cdlaw.plan.question import BUDGET_OPTION, SWEEP_PLAN, UNIQUE_OPTION, PlanAsked, plan_asked
from cdlaw.plan.source import load_law, with_fitted_range
from cdlaw.report.budget import (
    LARGEST_RUN,
    budget_inside_range,
    describe,
    largest_fresh_tokens,
    run_compute,
)
from cdlaw.system.errors import BadInput
from cdlaw.tasks.plan_metrics import with_tasks
from cdlaw.units import format_number

# Why the page plans for this C and U, in its headline (short) and its note (long).
HEADLINE_FROM = {
    BUDGET_OPTION: "as given",
    UNIQUE_OPTION: "as given",
    SWEEP_PLAN: f"from {SWEEP_PLAN}",
}
NOTE_FROM = {
    BUDGET_OPTION: "as given (--budget-flops)",
    UNIQUE_OPTION: "as given (--unique-tokens)",
    SWEEP_PLAN: f"as {SWEEP_PLAN} asks",
}
DEFAULT_UNIQUE = (
    "the runs' largest fresh-token count D, since neither --unique-tokens nor a sweep "
    "file's [plan] names the corpus"
)
DEFAULT_UNIQUE_HEADLINE = "the runs' largest D: no --unique-tokens or [plan] names U"
DEFAULT_BUDGET_HEADLINE = "the largest inside the fitted range"
FIGURE_DPI = 110  # enough for a screen; keeps the page a few MB at most
log = logging.getLogger("cdlaw.report")


@dataclass
class Report:
    """What the page is built from (kept so tests and callers can inspect it)."""

    path: Path  # the runs folder or table of runs
    inputs: PlotInputs
    fit_note: str = ""  # how the fit was obtained, or why there is none
    downstream_note: str = ""  # where the task links came from, or why there are none
    plan: dict | None = None
    plan_note: str = ""
    budget_flops: float | None = None
    unique_tokens: float | None = None
    budget_note: str = ""  # where the plan's budget and unique tokens came from
    budget_from: str = ""  # the same, in a few words for the plan's headline
    unique_from: str = ""
    asked: PlanAsked = field(default_factory=PlanAsked)  # who asked for C and U, if anyone
    figures: dict[str, str] = field(default_factory=dict)  # kind -> base64 PNG
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why not drawn
    # what the runs folder warns of (inputs edited since its runs trained, run folders
    # deleted: cdlaw.sweep.summary.folder_warnings, which the command passes in); the plan
    # warns of them first
    runs_warnings: tuple[str, ...] = ()


def _fit_now(path: Path, inputs: PlotInputs, runs: Callable[[], pd.DataFrame]) -> str:
    """No fit: fit `runs()` (gather's runs table) in memory with cdlaw's defaults (the
    chinchilla law where no run has derived tokens, the cd law's own advice; the bootstrap
    `cdlaw fit` makes, so that the plan has its band), and say how to save a fit."""
    table = runs()
    law, command = default_law(table), fit_command(path, table)
    how = f"create one with `{command}`, then run `cdlaw report {path}` again"
    none = f"No fit.json in {path}" if path.is_dir() else f"No fit beside {path}"
    log.info(
        f"{none.lower()} yet: fitting the runs for this report (not saved; `{command}` saves one)"
    )
    try:
        result = fit_law(table, law, source=str(path), bootstrap=DEFAULT_BOOTSTRAP)
    except BadInput as e:
        return f"{none}, and the runs cannot be fitted yet ({e}); {how}."
    fit = result.to_dict()
    inputs.fit = fit
    inputs.law = result.law
    inputs.rows = prepare_rows(result.rows, inputs.law, fit)
    made = "cdlaw's defaults" if law == "cd" else "the chinchilla law (no run has derived tokens)"
    save = how.replace("create one", "save it")
    return f"{none}: this fit was made for the report with {made} and not saved; {save}."


def _links_now(path: Path, inputs: PlotInputs, runs: Callable[[], pd.DataFrame]) -> str:
    """The task links: downstream.json beside the runs, or fitted here from `runs()` (not
    saved) when the runs have task columns but no links were written; a note saying which."""
    from cdlaw.tasks.columns import task_columns
    from cdlaw.tasks.downstream_json import downstream_path
    from cdlaw.tasks.links import fit_downstream

    if inputs.downstream is not None:
        return f"From {downstream_path(path)}."
    summary = inputs.summary
    if summary is None or not task_columns(summary.columns):
        return f"No task links: {no_task_columns(path)} (docs/downstream.md)."
    try:
        inputs.downstream = fit_downstream(runs(), n_boot=50, source=str(path))
    except BadInput as e:
        return f"The task columns cannot be linked to the loss yet ({e})."
    return (
        f"No downstream.json for {path}: these links were fitted for the report (50 bootstrap "
        f"refits) and not saved; `cdlaw downstream {path}` saves them."
    )


def _plan(report: Report, asked: PlanAsked, extrapolate: bool = False) -> None:
    """Plan for the budget and unique tokens asked (cdlaw.plan.question), or the default
    ones (cdlaw.report.budget), through the same guard as `cdlaw plan`: a budget asked
    with --budget-flops beyond the extrapolation limit is refused (BeyondLimit) unless
    extrapolate; any other says why the page has no plan."""
    inputs = report.inputs
    report.asked = asked
    compute = run_compute(inputs)
    budget_flops = asked.budget_flops
    report.unique_tokens = asked.unique_tokens or largest_fresh_tokens(inputs)
    report.budget_flops = budget_flops or (compute[1] if compute else None)
    unique = NOTE_FROM.get(asked.unique_from, DEFAULT_UNIQUE)
    why = NOTE_FROM.get(asked.budget_from, LARGEST_RUN)
    report.unique_from = HEADLINE_FROM.get(asked.unique_from, DEFAULT_UNIQUE_HEADLINE)
    report.budget_from = HEADLINE_FROM.get(asked.budget_from, DEFAULT_BUDGET_HEADLINE)

    if report.budget_flops is None or report.unique_tokens is None:
        report.plan_note = "No plan: the sweep has no finished runs to size a budget from."
        return

    def note() -> str:  # read when called: the budget may be lowered to the supported range
        budget, unique_n = report.budget_flops, report.unique_tokens
        assert budget is not None and unique_n is not None
        return (
            f"C = {budget:.3g} FLOPs is {why}; "
            f"U = {format_number(unique_n)} unique tokens is {unique}"
        )

    if inputs.law is None:
        report.plan_note, report.budget_note = "No plan without a fit.", note()
        return
    # The planner reads the fit.json itself when there is one, for the bootstrap 95% band;
    # a fit made for the report brings its data range, for the range warnings.
    if inputs.fit_path is not None:
        source = load_law(str(inputs.fit_path), check_runs=False)  # load_inputs checked it
    else:
        source = with_fitted_range(inputs.law, inputs.fit, str(report.path), bootstrap=True)
    if report.runs_warnings:
        source = dataclasses.replace(source, stale="; ".join(report.runs_warnings))
    try:
        if budget_flops is None and compute is not None:
            report.budget_flops, inside = budget_inside_range(
                source, *compute, report.unique_tokens
            )
            why = describe(report.budget_flops, compute[1], inside)
            report.budget_from = DEFAULT_BUDGET_HEADLINE if inside else "the largest run's"
        planned = plan(source, report.budget_flops, report.unique_tokens, extrapolate=extrapolate)
        if inputs.downstream is not None and inputs.downstream.links:
            d = inputs.downstream
            planned = with_tasks(planned, source, d.links, d.predictors)
        report.plan = planned.to_dict()
    except BadInput as e:
        if isinstance(e, BeyondLimit) and asked.budget_from == BUDGET_OPTION:
            raise  # the budget asked for: refused as `cdlaw plan` refuses it
        report.plan_note = f"No plan: {e}"
        return
    report.budget_note = note()


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def gather(
    path: str | Path,
    budget_flops: float | None = None,
    unique_tokens: float | None = None,
    fit_path: str | Path | None = None,
    extrapolate: bool = False,
    runs_warnings: tuple[str, ...] = (),
) -> Report:
    """Read the runs folder or table (and its fit: fit_path, or the one beside it, as `cdlaw
    plot` finds it), fit if there is none, plan, and draw every figure it allows;
    `runs_warnings` (Report.runs_warnings) lead the plan's warnings."""
    from cdlaw.fit.table import TABLE_SUFFIXES

    path = Path(path)
    if not (path.is_dir() or (path.is_file() and path.suffix.lower() in TABLE_SUFFIXES)):
        raise BadInput(
            f"{path} is neither a runs folder nor a .csv/.parquet table of runs; pass the "
            "folder `cdlaw sweep` wrote (runs/SWEEP) or a table"
        )
    asked = plan_asked(path, budget_flops, unique_tokens)
    inputs = load_inputs(path, fit_path, need_fit=False)
    report = Report(path, inputs, runs_warnings=tuple(runs_warnings))

    @functools.cache
    def runs() -> pd.DataFrame:
        """The runs as `cdlaw fit` reads them, checked (and any loss above ln V said) once
        for the fit and the links made here: a runs folder with its rounds, a table from
        the rows load_inputs read (or the runs it checked the fit against)."""
        if inputs.runs is None and path.is_dir():
            inputs.runs = load_runs(path)
        elif inputs.runs is None:
            assert inputs.summary is not None  # a table: load_inputs read it as the summary
            inputs.runs = prepare_runs(inputs.summary, str(path))
        return inputs.runs

    if inputs.fit is None:
        report.fit_note = _fit_now(path, inputs, runs)
    else:
        report.fit_note = f"From {inputs.fit_path}."
    report.downstream_note = _links_now(path, inputs, runs)
    _plan(report, asked, extrapolate)
    # the frontier figure marks the plan's C, for the U asked (or the runs' largest D, as
    # the plan's and the figure's titles say)
    inputs.unique_tokens, inputs.budget_flops = asked.unique_tokens, report.budget_flops
    for kind in KINDS:
        reason = why_not(kind, inputs)
        if reason is not None:
            report.skipped[kind] = reason
            continue
        try:
            report.figures[kind] = _png(make_figure(kind, inputs))
        except BadInput as e:  # a frontier no budget of which the fit supports
            report.skipped[kind] = str(e)
    return report
