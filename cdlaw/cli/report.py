"""`cdlaw report`: one self-contained HTML page for a sweep."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import app, err, number, print_json


@app.command()
def report(
    runs_dir: Path = typer.Argument(
        ..., metavar="RUNS_DIR", help="The runs folder of a sweep (runs/SWEEP).", show_default=False
    ),
    out: Path = typer.Option(
        None,
        "--out",
        help="The HTML file to write. Default: RUNS_DIR/report.html.",
        show_default=False,
    ),
    budget_flops: str = typer.Option(
        None,
        "--budget-flops",
        metavar="<number>",
        help="Budget of the plan, e.g. 1e21. Default: the largest run's FLOPs, or less where "
        "that plan would leave the fitted range.",
        show_default=False,
    ),
    unique_tokens: str = typer.Option(
        None,
        "--unique-tokens",
        metavar="<number>",
        help="Unique tokens of the plan, e.g. 5e9. Default: the largest fresh_tokens.",
        show_default=False,
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print only JSON on stdout: the file written, budget and plan."
    ),
) -> None:
    """Write one self-contained HTML report: the fit's headline and the plan first, then
    figures, fit details, regimes, runs and the sweep's settings.

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
    path, report = write_report(runs_dir, out, budget, unique)
    err.print(f"wrote the report of {runs_dir}", highlight=False)
    if json_out:
        keys = ("strategy", "n_params", "fresh_tokens", "derived_tokens", "predicted_loss")
        print_json(
            {
                "written": [str(path)],
                "budget_flops": report.budget_flops,
                "unique_tokens": report.unique_tokens,
                "plan": {k: report.plan[k] for k in keys} if report.plan else None,
                "figures": list(report.figures),
                "skipped": report.skipped,
            }
        )
    else:
        print(path)
