"""`cdlaw sweep`: train a grid of runs (docs/cli.md); `--dry-run` shows the plan and its time."""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from cdlaw.cli import NUMBER, app, err, number, print_json, say
from cdlaw.cli.sweep_show import SweepDisplay, duration, render_dry_run


@app.command()
def sweep(
    sweep_file: Path = typer.Argument(
        ..., metavar="SWEEP_FILE", help="The sweep file (TOML), e.g. sweeps/demo.toml."
    ),
    out: Path = typer.Option(Path("runs"), "--out", help="Runs folder: runs go to OUT/SWEEP/."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show the runs and a measured time estimate; train nothing."
    ),
    resume: bool = typer.Option(
        True,
        "--resume/--restart",
        help="Resume (default: skip finished runs, continue interrupted ones) or delete the "
        "sweep's runs and start over.",
    ),
    executor: str = typer.Option(
        "local",
        "--executor",
        help="local, ray, or simulate (each loss drawn from --law with --noise: no training).",
    ),
    jobs: int = typer.Option(
        0, "--jobs", help="Parallel runs (local). Default: one per core (CPU) or per GPU."
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="Ray cluster address (default: start a local Ray)."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    only: str = typer.Option(
        None,
        "--only",
        help="Filter runs, e.g. 'strategy=paraphrase|none' or 'n_params<1e6,seed=0'.",
    ),
    precision: str = typer.Option("auto", "--precision", help="auto, bf16 or fp32."),
    compile: bool = typer.Option(
        False, "--compile", help="torch.compile the model (with --pack, the packed step)."
    ),
    threads: int = typer.Option(0, "--threads", help="Torch threads per run (default: split)."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan or outcome as JSON."),
    pack: str = typer.Option(
        "1",
        "--pack",
        help="auto, or the most runs of one shape to train together in one process (1: each "
        "run alone). Same numbers as alone, several times the tokens/s for small models.",
    ),
    law: str = typer.Option(
        None, "--law", help="With --executor simulate: a preset (qin2026, ...) or a fit.json."
    ),
    noise: float = typer.Option(
        0.0, "--noise", help="Simulate: log-sd of each cell's loss (0.01 = 1%), seeds share it."
    ),
    seed_noise: float = typer.Option(
        0.0, "--seed-noise", help="Simulate: log-sd between replicate seeds of a cell."
    ),
    noise_seed: int = typer.Option(0, "--noise-seed", help="Simulate: seeds the noise."),
    tracker: str = typer.Option(
        "", "--tracker", help="Log runs to tensorboard, wandb or mlflow too (offline, in OUT)."
    ),
    adaptive: bool = typer.Option(False, "--adaptive", help="Seed grid, then fit → next → sweep rounds (docs/next.md)."),
    budget_flops: str = typer.Option(None, "--budget-flops", metavar=NUMBER, help="Adaptive: the plan's compute C."),
    unique_tokens: str = typer.Option(None, "--unique-tokens", metavar=NUMBER, help="Adaptive: the plan's unique tokens U."),
    until: float = typer.Option(0.05, "--until", help="Adaptive: stop when the plan's 95% loss interval is this narrow (nats) and its ratio lies inside its strategy's runs with R* pinned."),
    experiment_flops: str = typer.Option(None, "--experiment-flops", metavar=NUMBER, help="Adaptive: FLOPs all rounds may train."),
    round_runs: int = typer.Option(16, "--round-runs", help="Adaptive: at most this many runs a round."),
    max_rounds: int = typer.Option(5, "--max-rounds", help="Adaptive: at most this many rounds after the seed grid."),
    grid: Path = typer.Option(None, "--grid", help="Adaptive: the sweep file rounds choose cells from (default: FILE)."),
    fit_law: str = typer.Option("cd", "--fit-law", help="Adaptive: the law each round fits."),
) -> None:  # fmt: skip
    """Train every run of a sweep file, resuming where it stopped.

    Runs land in OUT/SWEEP/RUN_ID/; OUT/SWEEP/summary.parquet has one row per run.
    Exit code 1 if any run failed (diverged runs are results, not failures).

    Example: cdlaw sweep sweeps/smoke.toml --dry-run && cdlaw sweep sweeps/smoke.toml

    Small models: cdlaw sweep sweeps/demo.toml --pack auto (runs of one shape train together
    in one process; the dry run shows the packs and their measured speed-up).

    Plan an experiment before training it: cdlaw sweep sweeps/qin2026-small.toml --executor
    simulate --law qin2026 --noise 0.01 --out sim (a known law's losses, seeded noise).

    Adaptive: cdlaw sweep sweeps/qin2026-seed.toml --adaptive --budget-flops 1e21
    --unique-tokens 5e9 --grid sweeps/qin2026-grid.toml --experiment-flops 6.7e20
    --executor simulate --law qin2026 --noise 0.02 --out sim
    """
    from cdlaw.cli import require_ray_extra, require_train_extra
    from cdlaw.config import ExecConfig
    from cdlaw.errors import BadInput
    from cdlaw.sweep.pack.groups import parse_pack
    from cdlaw.train.trackers import tracker_names

    pack_size = parse_pack(pack)  # --pack 0: refused before anything else

    simulation = None
    if executor == "simulate" or law is not None:
        simulation = _simulation(executor, law, noise, seed_noise, noise_seed, dry_run)
    else:
        if executor == "ray":  # before training or a dry run: cdlaw[ray] brings train too
            require_ray_extra()
        require_train_extra("sweep")

    if device != "auto" and not (device == "cpu" or device.startswith("cuda")):
        raise BadInput(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")
    if threads < 0:
        raise BadInput(f"--threads must be ≥ 0, got {threads}")
    trackers = tracker_names(tracker)  # a missing package: refused now, dry run included
    exec_cfg = ExecConfig(
        device=device, precision=precision, compile=compile, threads=threads, trackers=trackers
    )

    if adaptive:
        from cdlaw.cli.next import run_adaptive_command

        if dry_run or not resume or only:
            raise BadInput(
                "--adaptive runs its rounds itself: drop --dry-run, --restart and --only"
            )
        need = {"--budget-flops": budget_flops, "--unique-tokens": unique_tokens}
        for flag, value in need.items():
            if value is None:
                raise BadInput(f"--adaptive needs {flag} (the plan the rounds should pin down)")
        options = {
            "budget_flops": number(budget_flops, "--budget-flops"),
            "unique_tokens": number(unique_tokens, "--unique-tokens"),
            "until": until,
            "max_flops": None
            if experiment_flops is None
            else number(experiment_flops, "--experiment-flops"),
            "round_runs": round_runs,
            "max_rounds": max_rounds,
            "law": fit_law,
            "grid_path": grid,
        }
        sweep_kw = {
            "executor": executor,
            "jobs": jobs,
            "exec_cfg": exec_cfg,
            "simulation": simulation,
            "pack": pack_size,
        }
        run_adaptive_command(sweep_file, out, options, json_out, **sweep_kw)
        return
    for flag, value in {
        "--budget-flops": budget_flops,
        "--unique-tokens": unique_tokens,
        "--grid": grid,
        "--experiment-flops": experiment_flops,
    }.items():
        if value is not None:
            raise BadInput(f"{flag} is for --adaptive; add --adaptive or drop {flag}")

    if dry_run:
        from cdlaw.sweep.dryrun import dry_run_sweep

        plan = dry_run_sweep(
            sweep_file,
            out,
            only=only,
            executor=executor,
            jobs=jobs,
            exec_cfg=exec_cfg,
            pack=pack_size,
        )
        if json_out:
            print_json(
                {
                    "sweep": plan.plan.sweep.name,
                    "runs": plan.rows,
                    "serial_seconds": plan.serial_seconds,
                    "wall_seconds": plan.wall_seconds,
                    "jobs": plan.jobs,
                    "threads": plan.threads,
                    "device": plan.device,
                    "calibration": plan.calibration,
                    "notes": plan.notes,
                    "share": plan.plan.sweep.share,
                    "flops": plan.flops,
                    "flops_alone": plan.flops_alone,
                    "serial_seconds_alone": plan.serial_seconds_alone,
                    "wall_seconds_alone": plan.wall_seconds_alone,
                    "packs": plan.packs,
                    "pack_probes": plan.pack_probes,
                    "pack_gains": plan.pack_gains,
                    "wall_seconds_unpacked": plan.wall_seconds_unpacked,
                }
            )
        else:
            render_dry_run(plan)
        return

    from cdlaw.sweep.runner import run_sweep

    display = SweepDisplay(live=err.is_terminal and not json_out)
    try:
        outcome = run_sweep(
            sweep_file,
            out,
            only=only,
            restart=not resume,
            executor=executor,
            jobs=jobs,
            ray_address=ray_address,
            exec_cfg=exec_cfg,
            on_event=display,
            simulation=simulation,
            pack=pack_size,
        )
    except SystemExit as e:  # SIGTERM: the runner let the runs checkpoint, then exits 143
        display.stop()
        if e.code == 128 + signal.SIGTERM:
            again = f"cdlaw sweep {sweep_file}" + ("" if out == Path("runs") else f" --out {out}")
            err.print(display.stopped_line(again), highlight=False)
        raise
    finally:
        display.stop()
    counts = {}
    for status in outcome.statuses.values():
        counts[status or "unfinished"] = counts.get(status or "unfinished", 0) + 1
    if json_out:
        print_json(
            {
                "sweep": outcome.plan.sweep.name,
                "sweep_dir": str(outcome.plan.sweep_dir),
                "runs": len(outcome.statuses),
                "trained": outcome.trained,
                "statuses": outcome.statuses,
                "counts": counts,
                "failures": outcome.failures,
                "wall_seconds": outcome.wall_seconds,
                "jobs": outcome.jobs,
                "threads": outcome.threads,
                "packs": outcome.packs,
            }
        )
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    took = duration(outcome.wall_seconds)
    if simulation:  # drawn from the law in this process: no jobs or threads to report
        how = f"simulated {len(outcome.trained)} from {simulation.law_name} in {took}"
    else:
        how = (
            f"trained {len(outcome.trained)} here in {took} with {outcome.jobs} job(s) × "
            f"{outcome.threads} thread(s)"
        )
    err.print(
        f"sweep {outcome.plan.sweep.name}: {len(outcome.statuses)} runs ({parts}); {how}; "
        f"summary: {outcome.plan.sweep_dir / 'summary.parquet'}",
        highlight=False,
    )
    for failure in outcome.failures:
        say(f"failed {failure['run_id']}", failure["error"], style="red")
    if outcome.exit_code:
        # SystemExit, not typer.Exit: cdlaw.cli.main runs click with standalone_mode=False,
        # where click turns typer.Exit into a return value that main() does not exit with.
        raise SystemExit(outcome.exit_code)


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
