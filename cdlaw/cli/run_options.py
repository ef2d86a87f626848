"""The options a sweep's runs train with, declared once for `cdlaw sweep` and `cdlaw adapt`,
and the one function that turns them into SweepOptions.

    @app.command()
    @takes_run_options
    def adapt(..., run: RunArgs, extrapolate: bool = EXTRAPOLATE, ...):
        options = run.sweep_options("adapt")

takes_run_options (cdlaw.cli.option_groups) puts RUN_OPTIONS in the command line where the command's `run`
parameter stands (in RUN_OPTIONS order) and hands them to it as one RunArgs; `cdlaw sweep`,
which interleaves them with its own options, builds its RunArgs itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import typer

from cdlaw.cli.option_groups import takes_group

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


@dataclass(frozen=True)
class RunArgs:
    """RUN_OPTIONS as given on a command line (each field one option, same name)."""

    executor: str = "local"
    jobs: int = 0
    law: str | None = None
    noise: float = 0.0
    seed_noise: float = 0.0
    noise_seed: int = 0
    pack: str = "1"
    device: str = "auto"
    precision: str = "auto"
    threads: int = 0
    compile: bool = False
    tracker: str = ""

    def sweep_options(self, command: str, dry_run: bool = False, **more):
        """The SweepOptions of `cdlaw COMMAND` (sweep_options), with `more` of its own."""
        return sweep_options(command, dry_run=dry_run, **asdict(self), **more)


RUN = RunArgs()  # the placeholder default of a command's `run` (takes_run_options replaces it)

# Each RunArgs field's command-line declaration, in the order --help lists them.
RUN_OPTIONS: dict[str, Any] = {
    "executor": EXECUTOR,
    "jobs": JOBS,
    "law": LAW,
    "noise": NOISE,
    "seed_noise": SEED_NOISE,
    "noise_seed": NOISE_SEED,
    "pack": PACK,
    "device": DEVICE,
    "precision": PRECISION,
    "threads": THREADS,
    "compile": COMPILE,
    "tracker": TRACKER,
}
takes_run_options = takes_group("run", RunArgs, RUN_OPTIONS)


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
    from cdlaw.plan.source import load_law
    from cdlaw.sweep.simulate import Simulation
    from cdlaw.system.errors import BadInput

    if executor != "simulate":
        raise BadInput(f"--law is for --executor simulate, not --executor {executor}.")
    if law is None:
        raise BadInput("--executor simulate needs --law: a preset (e.g. qin2026) or a fit.json.")
    if dry_run:
        raise BadInput("a simulated sweep takes seconds: run it without --dry-run.")
    source = load_law(law)
    return Simulation(source.law, source.name, noise, seed_noise, noise_seed)
