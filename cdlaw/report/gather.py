"""Gathering a `cdlaw report`: read a sweep's runs folder into a Report.

The Report holds the runs and the fit (fitted in memory with cdlaw's defaults when there is
no fit.json), the plan for a default budget, and every figure `cdlaw plot` can draw, as
base64 PNG, or why it was not drawn. cdlaw.report.page renders it as HTML.

Default plan (stated on the page): the largest budget, up to the compute of the sweep's
largest run, whose plan stays inside the fitted range, and the sweep's largest
fresh-token count as unique tokens (cdlaw.report.budget). Any other budget:
--budget-flops / --unique-tokens, or `cdlaw plan`.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from cdlaw.errors import BadInput
from cdlaw.figures.inputs import PlotInputs, load_inputs, prepare_rows
from cdlaw.figures.plot import KINDS, make_figure, why_not
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.plan.planner import plan
from cdlaw.plan.source import PlanningLaw, load_law
from cdlaw.report.budget import (
    LARGEST_RUN,
    budget_inside_range,
    describe,
    largest_fresh_tokens,
    run_compute,
)
from cdlaw.units import format_number

DEFAULT_UNIQUE = "the sweep's largest fresh-token count, the corpus it could use"
FIGURE_DPI = 110  # enough for a screen; keeps the page a few MB at most


@dataclass
class Report:
    """What the page is built from (kept so tests and callers can inspect it)."""

    runs_dir: Path
    inputs: PlotInputs
    fit_note: str = ""  # how the fit was obtained, or why there is none
    plan: dict | None = None
    plan_note: str = ""
    budget_flops: float | None = None
    unique_tokens: float | None = None
    budget_note: str = ""  # where the plan's budget and unique tokens came from
    figures: dict[str, str] = field(default_factory=dict)  # kind -> base64 PNG
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why not drawn


def _fit_now(runs_dir: Path, inputs: PlotInputs) -> str:
    """No fit.json: fit in memory with cdlaw's defaults, and say how to save a fit."""
    how = f"create one with `cdlaw fit {runs_dir}`, then run `cdlaw report {runs_dir}` again"
    try:
        table = load_runs(runs_dir)
        result = fit_law(table, source=str(runs_dir))
    except BadInput as e:
        return f"No fit.json in {runs_dir}, and the runs cannot be fitted yet ({e}); {how}."
    fit = result.to_dict()
    inputs.fit = fit
    inputs.law = result.law
    inputs.rows = prepare_rows(result.rows, inputs.law, fit)
    return (
        f"No fit.json in {runs_dir}: this fit was made for the report with cdlaw's defaults "
        f"and not saved; {how.replace('create one', 'save it')}."
    )


def _plan(runs_dir: Path, report: Report, budget_flops, unique_tokens) -> None:
    """Plan for the given budget, or for the default one (cdlaw.report.budget)."""
    inputs = report.inputs
    compute = run_compute(inputs)
    report.unique_tokens = unique_tokens or largest_fresh_tokens(inputs)
    report.budget_flops = budget_flops or (compute[1] if compute else None)
    unique = "as given (--unique-tokens)" if unique_tokens else DEFAULT_UNIQUE
    why = "as given (--budget-flops)" if budget_flops else LARGEST_RUN

    def note() -> str:
        return (
            f"C = {report.budget_flops:.3g} FLOPs is {why}; "
            f"U = {format_number(report.unique_tokens)} unique tokens is {unique}"
        )

    if report.budget_flops is None or report.unique_tokens is None:
        report.plan_note = "No plan: the sweep has no finished runs to size a budget from."
        return
    if inputs.law is None:
        report.plan_note, report.budget_note = "No plan without a fit.", note()
        return
    fit_path = runs_dir / "fit.json"
    # The planner reads the fit.json itself when there is one, for the bootstrap 95% band;
    # a fit made for the report brings its data range, for the range warnings.
    if fit_path.exists():
        source = load_law(str(fit_path))
    else:
        source = PlanningLaw(str(runs_dir), inputs.law, (inputs.fit or {}).get("data_range"))
    try:
        if budget_flops is None and compute is not None:
            report.budget_flops, inside = budget_inside_range(
                source, *compute, report.unique_tokens
            )
            why = describe(report.budget_flops, compute[1], inside)
        report.plan = plan(source, report.budget_flops, report.unique_tokens).to_dict()
    except BadInput as e:
        report.plan_note = f"No plan: {e}"
        return
    report.budget_note = note()


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def gather(
    runs_dir: str | Path,
    budget_flops: float | None = None,
    unique_tokens: float | None = None,
) -> Report:
    """Read the runs folder, fit if needed, plan, and draw every figure it allows."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise BadInput(f"{runs_dir} is not a folder; pass a runs folder written by `cdlaw sweep`")
    for value, what in ((budget_flops, "--budget-flops"), (unique_tokens, "--unique-tokens")):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise BadInput(f"{what} must be a positive number like 1e21 or 5e9, not {value:g}")
    inputs = load_inputs(runs_dir)
    report = Report(runs_dir, inputs)
    if inputs.fit is None:
        report.fit_note = _fit_now(runs_dir, inputs)
    else:
        report.fit_note = f"From {runs_dir / 'fit.json'}."
    _plan(runs_dir, report, budget_flops, unique_tokens)
    for kind in KINDS:
        reason = why_not(kind, inputs)
        if reason is not None:
            report.skipped[kind] = reason
            continue
        report.figures[kind] = _png(make_figure(kind, inputs))
    return report
