"""`cdlaw report`: one self-contained HTML page for a sweep."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import app, err, number


@app.command()
def report(
    runs_dir: Path = typer.Argument(
        ..., help="The runs folder of a sweep (runs/<sweep>).", show_default=False
    ),
    out: Path = typer.Option(
        None,
        "--out",
        help="The HTML file to write. Default: <runs>/report.html.",
        show_default=False,
    ),
    budget_flops: str = typer.Option(
        None,
        "--budget-flops",
        help="Budget of the plan section, e.g. 1e21. Default: 100× the largest run's FLOPs.",
        show_default=False,
    ),
    unique_tokens: str = typer.Option(
        None,
        "--unique-tokens",
        help="Unique tokens of the plan section, e.g. 5e9. Default: the largest fresh_tokens.",
        show_default=False,
    ),
) -> None:
    """Write one self-contained HTML report: settings, runs, fit, regimes, plan and figures.

    Figures are embedded (no network needed to view it). Runs the fit in memory when there
    is no fit.json yet, or says how to make one.

    Example: cdlaw report runs/demo --budget-flops 1e20
    """
    from cdlaw.report.page import write_report

    budget = None if budget_flops is None else number(budget_flops, "--budget-flops")
    unique = None if unique_tokens is None else number(unique_tokens, "--unique-tokens")
    if runs_dir.is_dir() and not (runs_dir / "fit.json").exists():
        err.print(
            f"no fit.json in {runs_dir} yet: fitting the runs for this report (not saved; "
            f"`cdlaw fit {runs_dir}` saves one)",
            highlight=False,
        )
    path = write_report(runs_dir, out, budget, unique)
    err.print(f"wrote the report of {runs_dir}", highlight=False)
    print(path)
