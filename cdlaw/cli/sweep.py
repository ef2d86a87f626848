"""`cdlaw sweep`: train a grid of runs (docs/cli.md); `--dry-run` shows the plan and its time."""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from cdlaw.cli import app, err, print_json
from cdlaw.cli.sweep_show import SweepDisplay, dry_run_json, render_dry_run, render_outcome

# The options a sweep's runs train with, shared by `cdlaw sweep` and `cdlaw adapt`.
OUT = typer.Option(Path("runs"), "--out", help="Runs folder: runs go to OUT/SWEEP/.")
EXECUTOR = typer.Option("local", "--executor", help="local, ray, or simulate (each loss drawn from --law with --noise: no training).")  # fmt: skip
JOBS = typer.Option(0, "--jobs", help="Parallel runs (local). Default: one per core (CPU) or per GPU.")  # fmt: skip
DEVICE = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N.")
PRECISION = typer.Option("auto", "--precision", help="auto, bf16 or fp32.")
COMPILE = typer.Option(False, "--compile", help="torch.compile the model (with --pack, the packed step).")  # fmt: skip
THREADS = typer.Option(0, "--threads", help="Torch threads per run (default: split).")
PACK = typer.Option("1", "--pack", help="auto, or the most runs of one shape to train together in one process (1: each run alone). Same numbers as alone, several times the tokens/s for small models.")  # fmt: skip
LAW = typer.Option(None, "--law", help="With --executor simulate: a preset (qin2026, ...) or a fit.json.")  # fmt: skip
NOISE = typer.Option(0.0, "--noise", help="Simulate: log-sd of each cell's loss (0.01 = 1%), seeds share it.")  # fmt: skip
SEED_NOISE = typer.Option(0.0, "--seed-noise", help="Simulate: log-sd between replicate seeds of a cell.")  # fmt: skip
NOISE_SEED = typer.Option(0, "--noise-seed", help="Simulate: seeds the noise.")
TRACKER = typer.Option("", "--tracker", help="Log runs to tensorboard, wandb or mlflow too (offline, in OUT).")  # fmt: skip


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
    options = sweep_options(
        "sweep", executor=executor, law=law, noise=noise, seed_noise=seed_noise,
        noise_seed=noise_seed, dry_run=dry_run, only=only, restart=not resume, jobs=jobs,
        ray_address=ray_address, device=device, precision=precision, compile=compile,
        threads=threads, tracker=tracker, pack=pack,
    )  # fmt: skip
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
    try:
        outcome = run_sweep(sweep_file, out, options, on_event=display)
    except SystemExit as e:  # SIGTERM: the runner let the runs checkpoint, then exits 143
        display.stop()
        if e.code == 128 + signal.SIGTERM:
            again = f"cdlaw sweep {sweep_file}" + ("" if out == Path("runs") else f" --out {out}")
            err.print(display.stopped_line(again), highlight=False)
        raise
    finally:
        display.stop()
    render_outcome(outcome, options.simulation, json_out)
    if outcome.exit_code:
        # SystemExit, not typer.Exit: cdlaw.cli.main runs click with standalone_mode=False,
        # where click turns typer.Exit into a return value that main() does not exit with.
        raise SystemExit(outcome.exit_code)


def sweep_options(
    command: str,
    *,
    executor: str,
    law: str | None,
    noise: float,
    seed_noise: float,
    noise_seed: int,
    dry_run: bool = False,
    **fields,
):
    """The SweepOptions of `cdlaw COMMAND`, after what the executor needs is checked: the
    Simulation --law, --noise, --seed-noise and --noise-seed ask for, or the train extra
    (and Ray) it imports. `fields`: the rest, as SweepOptions.from_cli takes them."""
    from cdlaw.cli import require_ray_extra, require_train_extra
    from cdlaw.sweep.options import SweepOptions

    simulation = None
    if executor == "simulate" or law is not None:
        simulation = _simulation(executor, law, noise, seed_noise, noise_seed, dry_run)
    else:
        if executor == "ray":  # before training or a dry run: cdlaw[ray] brings train too
            require_ray_extra()
        require_train_extra(command)
    return SweepOptions.from_cli(executor=executor, simulation=simulation, **fields)


def _simulation(executor: str, law: str | None, noise, seed_noise, noise_seed, dry_run: bool):
    """The Simulation `--executor simulate --law L --noise σ` asks for (BadInput if it is not
    one)."""
    from cdlaw.errors import BadInput
    from cdlaw.plan.source import load_law
    from cdlaw.sweep.simulate import Simulation

    if executor != "simulate":
        raise BadInput(f"--law is for --executor simulate, not --executor {executor}.")
    if law is None:
        raise BadInput("--executor simulate needs --law: a preset (e.g. qin2026) or a fit.json.")
    if dry_run:
        raise BadInput("a simulated sweep takes seconds: run it without --dry-run.")
    source = load_law(law)
    return Simulation(source.law, source.name, noise, seed_noise, noise_seed)
