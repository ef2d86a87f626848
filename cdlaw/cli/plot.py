"""`cdlaw plot`: figures of the runs, the fit and the frontier."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import app, err, number, print_json
from cdlaw.cli.asked_options import ASKED, PlanArgs, plan_options
from cdlaw.cli.option_groups import takes_group
from cdlaw.cli.plan import EXTRAPOLATE
from cdlaw.units import counted

ASKED_OPTIONS = plan_options("none", "the runs' largest fresh_tokens", ", of the frontier figure")


@app.command()
@takes_group("asked", PlanArgs, ASKED_OPTIONS)
def plot(
    path: Path = typer.Argument(..., metavar="PATH", help="A runs folder, a fit.json, a CSV/parquet table of runs (with a fit.json beside it or --fit), or a frontier JSON from `cdlaw plan --frontier --json`.", show_default=False),
    kind: list[str] = typer.Option(None, "--kind", "-k", help="Figure(s) to draw: loss, eta, rstar, frontier, residuals, curves, compare, downstream; repeat the option or separate with commas. Default: every kind the inputs allow.", show_default=False),
    out: Path = typer.Option(None, "--out", help="Folder for the figures. Default: RUNS/figures for a runs folder; T.figures beside a table T.csv (and beside its T.fit.json or T.compare.json).", show_default=False),
    fmt: str = typer.Option("png", "--format", help="png, svg or pdf."),
    fit: Path = typer.Option(None, "--fit", help="The fit.json to draw the law from (default: fit.json beside PATH).", show_default=False),
    no_title: bool = typer.Option(False, "--no-title", help="Leave out the title (a paper's caption says it)."),
    caption: str = typer.Option(None, "--caption", help="Footer text instead of the line naming the fit; --caption '' leaves it out. The fit's line is kept in the file's metadata either way.", show_default=False),
    dpi: str = typer.Option(None, "--dpi", metavar="<number>", help="Resolution, e.g. 300. Default: 150 for PNG.", show_default=False),
    style: str = typer.Option(None, "--style", help="A matplotlib style name (seaborn-v0_8-paper, ggplot, ...) or style file.", show_default=False),
    frontier_range: str = typer.Option(None, "--frontier-range", metavar="<number:number>", help="LO:HI budgets of the frontier figure, e.g. 1e18:1e24. Default: the budgets whose plans stay inside the extrapolation limit of the fitted range.", show_default=False),
    asked: PlanArgs = ASKED,
    extrapolate: bool = EXTRAPOLATE,
    json_out: bool = typer.Option(False, "--json", help="Print only JSON on stdout: the files written."),
) -> None:  # fmt: skip
    """Draw the figures of a sweep: loss in the regime bands, η, R*, the frontier, residuals, curves, task metrics against loss.

    Writes OUT/KIND.FORMAT for each figure and prints the paths. Fonts are embedded as
    TrueType; each file's metadata names the fit it was drawn from.

    The frontier is drawn for --unique-tokens and marks --budget-flops, else the sweep
    file's [plan], else the runs' largest fresh_tokens (said in its title).

    Example: cdlaw plot runs/demo --kind loss --kind eta --format pdf --no-title --caption ''
    """
    from cdlaw.cli.plan_frontier import parse_frontier_range
    from cdlaw.cli.runs_now import readable_runs
    from cdlaw.figures.output import FigureOptions
    from cdlaw.figures.plot import SUPPORTED_POINTS
    from cdlaw.figures.plot import plot as draw

    kinds = [k.strip() for item in kind or [] for k in item.split(",") if k.strip()]
    options = FigureOptions(
        title=not no_title,
        caption=caption,
        dpi=None if dpi is None else number(dpi, "--dpi"),
        style=style,
    )
    budgets = None
    if frontier_range is not None:
        budgets = parse_frontier_range(frontier_range, SUPPORTED_POINTS)
    budget_flops, unique_tokens = asked.numbers()
    readable_runs(path)
    paths = draw(path, kinds or None, out, fmt.lower(), fit, options, budgets, extrapolate,
                 budget_flops, unique_tokens)  # fmt: skip
    _render(paths, fmt.lower(), json_out)


def _render(paths: list[Path], fmt: str, json_out: bool) -> None:
    """The files written, one per line (or as JSON), and a count on stderr."""
    if json_out:
        print_json({"written": [str(p) for p in paths], "format": fmt})
    else:
        for p in paths:
            print(p)
    err.print(f"wrote {counted(len(paths), 'figure')} to {paths[0].parent}", highlight=False)
