"""`cdlaw plot`: figures of the runs, the fit and the frontier."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import app, err


@app.command()
def plot(
    path: Path = typer.Argument(
        ...,
        help="A runs folder, a fit.json, a CSV/parquet table of runs (with a fit.json beside "
        "it or --fit), or a frontier JSON from `cdlaw plan --frontier --json`.",
        show_default=False,
    ),
    kind: list[str] = typer.Option(
        None,
        "--kind",
        "-k",
        help="Figure(s) to draw: loss, eta, rstar, frontier, residuals, curves; repeat the "
        "option or separate with commas. Default: every kind the inputs allow.",
        show_default=False,
    ),
    out: Path = typer.Option(
        None, "--out", help="Folder for the figures. Default: <runs>/figures.", show_default=False
    ),
    fmt: str = typer.Option("png", "--format", help="png, svg or pdf."),
    fit: Path = typer.Option(
        None,
        "--fit",
        help="The fit.json to draw the law from (default: fit.json beside PATH).",
        show_default=False,
    ),
) -> None:
    """Draw the figures of a sweep: loss in the regime bands, η, R*, the frontier, residuals, curves.

    Writes OUT/KIND.FORMAT for each figure and prints the paths.

    Example: cdlaw plot runs/demo --kind loss --kind eta --format svg
    """
    from cdlaw.figures.plot import plot as draw

    kinds = [k.strip() for item in kind or [] for k in item.split(",") if k.strip()]
    paths = draw(path, kinds or None, out, fmt.lower(), fit)
    for p in paths:
        print(p)
    err.print(f"wrote {len(paths)} figure(s) to {paths[0].parent}", highlight=False)
