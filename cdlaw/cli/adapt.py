"""`cdlaw adapt`: a seed grid, then fit → next → sweep rounds until the plan is known (docs/next.md)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from cdlaw.cli import NUMBER, app, err, number, out, print_json, say
from cdlaw.cli.plan import EXTRAPOLATE
from cdlaw.cli.run_options import OUT, RUN, RunArgs, takes_run_options
from cdlaw.units import counted


@app.command()
@takes_run_options
def adapt(
    seed_file: Path = typer.Argument(..., metavar="SEED_SWEEP_FILE", help="The seed grid's sweep file, e.g. sweeps/qin2026-seed.toml."),
    budget_flops: str = typer.Option(..., "--budget-flops", metavar=NUMBER, help="The plan's compute C, e.g. 1e21."),
    unique_tokens: str = typer.Option(..., "--unique-tokens", metavar=NUMBER, help="The plan's unique tokens U, e.g. 5e9."),
    until: float = typer.Option(0.05, "--until", help="Stop when the plan's 95% loss interval is this narrow (nats) and its ratio lies inside its strategy's runs with R* pinned."),
    experiment_flops: str = typer.Option(None, "--experiment-flops", metavar=NUMBER, help="FLOPs all rounds may train."),
    round_runs: int = typer.Option(16, "--round-runs", help="At most this many runs a round."),
    max_rounds: int = typer.Option(5, "--max-rounds", help="At most this many rounds after the seed grid."),
    grid: Path = typer.Option(None, "--grid", help="The sweep file rounds choose cells from (default: SEED_SWEEP_FILE)."),
    fit_law: str = typer.Option("cd", "--fit-law", help="The law each round fits."),
    out_dir: Path = OUT,
    run: RunArgs = RUN,  # --executor … --tracker: the options a sweep's runs train with
    extrapolate: bool = EXTRAPOLATE,
    json_out: bool = typer.Option(False, "--json", help="Print the rounds and why they stopped as JSON."),
) -> None:  # fmt: skip
    """Train a seed grid, then fit → next → sweep in rounds until the plan for C FLOPs and
    U unique tokens is known.

    The seed's runs land in OUT/SEED/, round k's batch in OUT/SEED/next-k.toml and its runs
    in OUT/SEED/next-k/; OUT/SEED/rounds.parquet has one row per round. Killed, it resumes.

    Example: cdlaw adapt sweeps/qin2026-seed.toml --budget-flops 1e21 --unique-tokens 5e9
    --grid sweeps/qin2026-grid.toml --experiment-flops 6.7e20 --executor simulate
    --law qin2026 --noise 0.02 --out sim --extrapolate
    """
    from cdlaw.cli.sweep_show import SweepDisplay
    from cdlaw.design.adaptive import run_adaptive

    options = run.sweep_options("adapt")
    c = number(budget_flops, "--budget-flops")
    u = number(unique_tokens, "--unique-tokens")
    max_flops = None if experiment_flops is None else number(experiment_flops, "--experiment-flops")
    display = SweepDisplay(live=False)
    try:
        result = run_adaptive(
            seed_file, out_dir, c, u, until, max_flops=max_flops, round_runs=round_runs,
            max_rounds=max_rounds, law=fit_law, grid_path=grid, sweep_options=options,
            on_event=display, on_round=_say_round, extrapolate=extrapolate,
        )  # fmt: skip
    finally:
        display.stop()
    _render(result, json_out)


def _say_round(r) -> None:
    """One line on stderr per round: its runs, FLOPs and the plan with its interval."""
    band = _band(r)
    agree = "" if math.isnan(r.strategy_agreement) else f" ({r.strategy_agreement:.0%} of refits)"
    err.print(
        f"round {r.round} ({r.sweep}): {counted(r.runs, 'run')}, {r.flops:.3g} FLOPs; plan N {r.n_params:.3g} "
        f"{r.strategy}{agree}, loss {r.predicted_loss:.4g} {band}",
        highlight=False,
    )


def _band(r) -> str:
    """A round's 95% loss band, or that it is not determined (no refits support one)."""
    if not (math.isfinite(r.ci_low) and math.isfinite(r.ci_high)):
        return "(95% band not determined)"
    return f"[{r.ci_low:.4g}, {r.ci_high:.4g}] ({r.width_nats:.3g} nats)"


def _render(result, json_out: bool) -> None:
    """The last plan and why the loop stopped (stdout, or JSON with --json), its warnings,
    and where the rounds and the fit are."""
    last = result.rounds[-1]
    if json_out:
        from dataclasses import asdict

        print_json(
            {
                "folder": str(result.folder),
                "stopped": result.stopped,
                "rounds": [asdict(r) for r in result.rounds],
                "warnings": list(result.warnings),
            }
        )
    else:
        out.print(
            f"adaptive {result.folder}: {counted(len(result.rounds) - 1, 'round')}, "
            f"{counted(last.runs, 'run')}, {last.flops:.3g} "
            f"FLOPs; plan N {last.n_params:.3g} {last.strategy}, loss {last.predicted_loss:.4g} "
            f"{_band(last)}; stopped: {result.stopped}",
            highlight=False,
        )
    for w in result.warnings:  # the plan leaves the runs: say so before anyone bets on it
        say("warning", f"the last plan: {w}")
    err.print(
        f"rounds: {result.folder / 'rounds.parquet'}; fit: {result.folder / 'fit.json'}",
        highlight=False,
    )
