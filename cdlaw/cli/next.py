"""`cdlaw next`: the runs that would narrow the plan most per FLOP, as a sweep file (docs/next.md)."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from cdlaw.cli import NUMBER, app, count, err, number, out, print_json, say
from cdlaw.cli.plan import EXTRAPOLATE
from cdlaw.cli.plan_words import say_extrapolated
from cdlaw.system.errors import BadInput
from cdlaw.units import counted


def _default_out(runs: Path) -> Path:
    """RUNS/next-k.toml, k one past the rounds already there; beside a table file otherwise."""
    if runs.is_dir():
        taken = [
            int(m.group(1))
            for p in runs.glob("next-*.toml")
            if (m := re.fullmatch(r"next-(\d+)\.toml", p.name))
        ]
        return runs / f"next-{max(taken, default=0) + 1}.toml"
    return runs.with_name(f"{runs.stem}-next-1.toml")


@app.command(name="next")
def next_runs(
    runs: Path = typer.Argument(..., metavar="RUNS", help="A runs folder (or a .csv/.parquet table) with its fit."),
    budget_flops: str = typer.Option(..., "--budget-flops", metavar=NUMBER, help="The plan's compute C, e.g. 1e21."),
    unique_tokens: str = typer.Option(..., "--unique-tokens", metavar=NUMBER, help="The plan's unique tokens U, e.g. 5e9."),
    n_runs: str = typer.Option(None, "--runs", metavar=NUMBER, help="How many runs to choose (default 4)."),
    flops: str = typer.Option(None, "--flops", metavar=NUMBER, help="Or: the FLOPs the batch may spend, e.g. 1e19."),
    fit: Path = typer.Option(None, "--fit", help="The fit with a bootstrap (default: RUNS/fit.json)."),
    grid: Path = typer.Option(None, "--grid", help="Sweep file whose grid and settings to use (default: RUNS/sweep.toml)."),
    out_file: Path = typer.Option(None, "--out", help="The batch's sweep file (default: RUNS/next-K.toml)."),
    extrapolate: bool = EXTRAPOLATE,
    json_out: bool = typer.Option(False, "--json", help="Print the batch as JSON."),
) -> None:  # fmt: skip
    """Choose the runs that would narrow the plan for C FLOPs and U unique tokens most per FLOP.

    From the fit's bootstrap, each candidate (the grid's unrun cells and cells at the plan's
    tokens per parameter and ratio, at the grid's sizes and, where the grid has one lr for
    every size, at doubling sizes above it) is scored by how much it would shrink the plan's
    loss interval and the chance its strategy or N changes; the best batch is written as a
    sweep file that `cdlaw sweep` runs as is, into RUNS/next-K/, where `cdlaw fit RUNS`
    reads it with the rest. A plan beyond its strategy's runs, or on an R* the fit left at
    a bound, gets a plan check first: the cheapest run at its own ratio.

    Example: cdlaw fit runs/demo --bootstrap 50 && cdlaw next runs/demo --budget-flops 2e12
    --unique-tokens 96K --runs 4 && cdlaw sweep runs/demo/next-1.toml --out runs/demo
    """
    from cdlaw.cli.runs_now import readable_runs
    from cdlaw.design.batch import next_batch
    from cdlaw.fit.cells import stale_fit
    from cdlaw.fit.io import FitResult, output_paths
    from cdlaw.fit.table import load_runs
    from cdlaw.sweep.spec import load_sweep
    from cdlaw.system.atomic import check_out_path, write_text_atomic

    c = number(budget_flops, "--budget-flops")
    u = number(unique_tokens, "--unique-tokens")
    k = None if n_runs is None else _runs(n_runs)
    f = None if flops is None else number(flops, "--flops")
    target = out_file or _default_out(runs)
    if target.suffix != ".toml":
        raise BadInput(f"--out {target} must name a .toml sweep file")
    check_out_path(target, "--out")
    readable_runs(runs)
    table = load_runs(runs)
    fit_path = fit or output_paths(runs)[0]
    if not fit_path.is_file():
        raise BadInput(
            f"no fit at {fit_path}: run `cdlaw fit {runs} --bootstrap 50` first, or give --fit"
        )
    fitted = FitResult.read(fit_path)
    grid_path = _grid_path(runs, grid)
    name = target.stem
    if (stale := stale_fit(table, fitted.to_dict(), runs)) is not None:
        raise BadInput(f"{fit_path}: {stale}")
    batch = next_batch(
        table, fitted, load_sweep(grid_path), c, u, max_runs=k, max_flops=f, name=name,
        extrapolate=extrapolate,
    )  # fmt: skip
    write_text_atomic(target, batch.text)
    _render(batch, target, runs if runs.is_dir() else Path("runs"), json_out)


def _grid_path(runs: Path, grid: Path | None) -> Path:
    """--grid, or the runs folder's own sweep.toml (BadInput where there is neither)."""
    grid_path = grid or (runs / "sweep.toml" if runs.is_dir() else None)
    if grid_path is None:
        raise BadInput(
            f"{runs} is a table, with no sweep file of its own for the candidates' grid and "
            "settings: give one with --grid, e.g. --grid sweeps/demo.toml"
        )
    if not grid_path.is_file():
        raise BadInput(f"no sweep file at {grid_path} for the grid and settings: give --grid")
    return grid_path


def _render(batch, target: Path, sweep_out: Path, json_out: bool) -> None:
    """The plan now and why each run was chosen (stdout, or JSON with --json), the
    warnings, and how to run the batch."""
    from cdlaw.plan.guard import extrapolated_text

    if batch.plan.extrapolated:
        say_extrapolated(extrapolated_text("; ".join(batch.plan.extrapolated)))
    if json_out:
        print_json({**batch.to_dict(), "file": str(target)})
    else:
        p = batch.plan
        band = (
            f" [{p.predicted_loss_ci95[0]:.4g}, {p.predicted_loss_ci95[1]:.4g}]"
            if p.predicted_loss_ci95
            else f" (95% band {p.no_band_reason})"
            if p.no_band_reason and p.no_band_reason.startswith("not determined")
            else ""
        )
        out.print(
            f"plan now: N {p.n_params:.3g}, {p.strategy}, loss {p.predicted_loss:.4g}{band} "
            f"({batch.n_draws} bootstrap refits, {batch.n_candidates} candidates)",
            highlight=False,
        )
        for i, why in enumerate(batch.reasons, 1):
            out.print(f"{i:>3}. {why}", highlight=False)
        out.print(
            f"batch: {counted(len(batch.chosen), 'run')}, {batch.flops:.3g} FLOPs as the law counts "
            f"compute (6·N per token); training them costs {batch.training_flops:.3g} with "
            "attention, which `cdlaw sweep --dry-run` counts",
            highlight=False,
        )
    for w in batch.warnings:
        say("warning", w)
    err.print(f"wrote {target}; run it: cdlaw sweep {target} --out {sweep_out}", highlight=False)


def _runs(text: str) -> int:
    try:
        return count(text, "--runs")
    except BadInput:
        raise BadInput(f"--runs {text}: give a whole number of runs ≥ 1, e.g. --runs 4") from None
