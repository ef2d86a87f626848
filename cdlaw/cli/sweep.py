"""`cdlaw sweep`: train a grid of runs (docs/cli.md); `--dry-run` shows the plan and its time."""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from cdlaw.cli import app, err, print_json
from cdlaw.cli.run_options import (
    COMPILE,
    DEVICE,
    EXECUTOR,
    JOBS,
    LAW,
    NOISE,
    NOISE_SEED,
    OUT,
    PACK,
    PRECISION,
    SEED_NOISE,
    THREADS,
    TRACKER,
    RunArgs,
)
from cdlaw.cli.sweep_show import SweepDisplay, dry_run_json, render_dry_run, render_outcome


@app.command()
def sweep(
    sweep_file: Path = typer.Argument(..., metavar="SWEEP_FILE", help="The sweep file (TOML), e.g. sweeps/demo.toml."),
    out: Path = OUT,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the runs and a measured time estimate; train nothing."),
    resume: bool = typer.Option(True, "--resume/--restart", help="Resume (default: skip finished runs, continue interrupted ones) or delete the sweep's runs and start over."),
    executor: str = EXECUTOR,
    jobs: int = JOBS,
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster address (default: start a local Ray)."),
    device: str = DEVICE,
    only: str = typer.Option(None, "--only", help="Filter runs, e.g. 'strategy=paraphrase|none' or 'n_params<1e6,seed=0'."),
    precision: str = PRECISION,
    compile: bool = COMPILE,
    threads: int = THREADS,
    json_out: bool = typer.Option(False, "--json", help="Print the plan or outcome as JSON."),
    pack: str = PACK,
    law: str = LAW,
    noise: float = NOISE,
    seed_noise: float = SEED_NOISE,
    noise_seed: int = NOISE_SEED,
    tracker: str = TRACKER,
) -> None:  # fmt: skip
    """Train every run of a sweep file, resuming where it stopped.

    Runs land in OUT/SWEEP/RUN_ID/; OUT/SWEEP/summary.parquet has one row per run.
    Exit code 1 if any run failed (diverged runs are results, not failures).

    Example: cdlaw sweep sweeps/smoke.toml --dry-run && cdlaw sweep sweeps/smoke.toml

    Small models: cdlaw sweep sweeps/demo.toml --pack auto (runs of one shape train together
    in one process; the dry run shows the packs and their measured speed-up).

    Plan an experiment before training it: cdlaw sweep sweeps/qin2026-small.toml --executor
    simulate --law qin2026 --noise 0.01 --out sim (a known law's losses, seeded noise).

    Rounds that narrow a plan: `cdlaw adapt` (docs/next.md).
    """
    run = RunArgs(
        executor, jobs, law, noise, seed_noise, noise_seed, pack, device, precision, threads,
        compile, tracker,
    )  # fmt: skip
    options = run.sweep_options(
        "sweep", dry_run=dry_run, only=only, restart=not resume, ray_address=ray_address
    )
    if dry_run:
        from cdlaw.sweep.dryrun import dry_run_sweep

        plan = dry_run_sweep(sweep_file, out, options)
        if json_out:
            print_json(dry_run_json(plan))
        else:
            render_dry_run(plan)
        return
    from cdlaw.sweep.runner import run_sweep

    display = SweepDisplay(live=err.is_terminal and not json_out)
    again = f"cdlaw sweep {sweep_file}" + ("" if out == Path("runs") else f" --out {out}")
    try:
        outcome = run_sweep(sweep_file, out, options, on_event=display)
    except SystemExit as e:  # SIGTERM: the runner let the runs checkpoint, then exits 143
        display.stop()
        if e.code == 128 + signal.SIGTERM:
            err.print(display.stopped_line(again), highlight=False)
        raise
    except KeyboardInterrupt:  # Ctrl-C: the same kept runs and checkpoints, the same way on
        display.stop()
        err.print(display.stopped_line(again, "Ctrl-C"), highlight=False)
        raise
    finally:
        display.stop()
    render_outcome(outcome, options.simulation, json_out)
    if outcome.exit_code:
        # SystemExit, not typer.Exit: cdlaw.cli.main runs click with standalone_mode=False,
        # where click turns typer.Exit into a return value that main() does not exit with.
        raise SystemExit(outcome.exit_code)
