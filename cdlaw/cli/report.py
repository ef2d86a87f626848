"""`cdlaw report`: one self-contained HTML page for a sweep or a table of runs."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import app, err, print_json, say
from cdlaw.cli.asked_options import ASKED, PlanArgs, plan_options
from cdlaw.cli.option_groups import takes_group
from cdlaw.cli.plan import EXTRAPOLATE
from cdlaw.cli.plan_words import say_extrapolated

ASKED_OPTIONS = plan_options(
    "the largest run's FLOPs, or less where that plan would leave the fitted range",
    "the runs' largest fresh_tokens",
)


@app.command()
@takes_group("asked", PlanArgs, ASKED_OPTIONS)
def report(
    path: Path = typer.Argument(
        ...,
        metavar="PATH",
        help="The runs folder of a sweep (runs/SWEEP), or a CSV/parquet table of runs.",
        show_default=False,
    ),
    out: Path = typer.Option(
        None,
        "--out",
        help="The HTML file to write. Default: RUNS/report.html, or t.report.html beside a "
        "table t.csv.",
        show_default=False,
    ),
    fit: Path = typer.Option(
        None,
        "--fit",
        help="The fit.json to report (default: RUNS/fit.json, or t.fit.json beside a table).",
        show_default=False,
    ),
    asked: PlanArgs = ASKED,
    extrapolate: bool = EXTRAPOLATE,
    json_out: bool = typer.Option(
        False, "--json", help="Print only JSON on stdout: the file written, budget and plan."
    ),
) -> None:
    """Write one self-contained HTML report: the fit's headline and the plan first, then
    figures, fit details, regimes, runs and the sweep's settings.

    The plan is for --budget-flops and --unique-tokens, else for the sweep file's [plan];
    its first line says which, or which defaults it took.

    Figures are embedded (no network needed to view it). A table of runs is read as `cdlaw
    fit` reads it, with the fit `cdlaw fit` wrote beside it. Runs the fit in memory when
    there is no fit yet, or says how to make one.

    Example: cdlaw report runs/demo --budget-flops 2e12 --unique-tokens 96K
    """
    from cdlaw.cli.runs_now import readable_runs
    from cdlaw.report.page import write_report
    from cdlaw.sweep.summary import folder_warnings

    budget, unique = asked.numbers()
    readable_runs(path)
    runs_warnings = tuple(folder_warnings(path, "this report", tasks=True)) if path.is_dir() else ()
    written, report = write_report(path, out, budget, unique, fit, extrapolate, runs_warnings)
    _say_warnings(report)
    err.print(f"wrote the report of {path}", highlight=False)
    if json_out:
        keys = ("strategy", "n_params", "fresh_tokens", "derived_tokens", "predicted_loss")
        print_json(
            {
                "written": [str(written)],
                "budget_flops": report.budget_flops,
                "unique_tokens": report.unique_tokens,
                "asked_by": report.asked.sources(),
                "plan": {k: report.plan[k] for k in keys} if report.plan else None,
                "figures": list(report.figures),
                "skipped": report.skipped,
            }
        )
    else:
        print(written)


def _say_warnings(report) -> None:
    """The plan's extrapolation and warnings (the runs folder's first), or without a plan
    the runs folder's warnings and why there is none."""
    from cdlaw.plan.guard import extrapolated_text

    plan = report.plan
    if plan and plan["extrapolated"]:
        say_extrapolated(extrapolated_text("; ".join(plan["extrapolated"])))
    for w in plan["warnings"] if plan else report.runs_warnings:
        say("warning", f"the plan: {w}" if plan else w)
    if plan is None and report.plan_note:
        say("note", report.plan_note)
