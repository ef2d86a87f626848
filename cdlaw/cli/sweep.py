"""`cdlaw sweep`: train a grid of runs (docs/cli.md); `--dry-run` shows the plan and its time."""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import typer

from cdlaw.cli import app, err, print_json, say
from cdlaw.cli.progress_lines import ProgressLines


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
    compile: bool = typer.Option(False, "--compile", help="torch.compile the model."),
    threads: int = typer.Option(0, "--threads", help="Torch threads per run (default: split)."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan or outcome as JSON."),
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
) -> None:
    """Train every run of a sweep file, resuming where it stopped.

    Runs land in OUT/SWEEP/RUN_ID/; OUT/SWEEP/summary.parquet has one row per run.
    Exit code 1 if any run failed (diverged runs are results, not failures).

    Example: cdlaw sweep sweeps/smoke.toml --dry-run && cdlaw sweep sweeps/smoke.toml

    Plan an experiment before training it: cdlaw sweep sweeps/qin2026-small.toml --executor
    simulate --law qin2026 --noise 0.01 --out sim (a known law's losses, seeded noise).
    """
    from cdlaw.cli import require_ray_extra, require_train_extra
    from cdlaw.config import ExecConfig
    from cdlaw.errors import BadInput
    from cdlaw.train.trackers import tracker_names

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

    if dry_run:
        from cdlaw.sweep.dryrun import dry_run_sweep

        plan = dry_run_sweep(
            sweep_file, out, only=only, executor=executor, jobs=jobs, exec_cfg=exec_cfg
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
                }
            )
        else:
            _render_dry_run(plan)
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
            }
        )
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    how = (
        f"simulated {len(outcome.trained)} from {simulation.law_name}"
        if simulation
        else f"trained {len(outcome.trained)} here"
    )
    err.print(
        f"sweep {outcome.plan.sweep.name}: {len(outcome.statuses)} runs ({parts}); {how} in "
        f"{_duration(outcome.wall_seconds)} with {outcome.jobs} job(s) × {outcome.threads} "
        f"thread(s); summary: {outcome.plan.sweep_dir / 'summary.parquet'}",
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


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _render_dry_run(plan) -> None:
    """The plan on stdout (a result, not progress); its notes on stderr."""
    from rich.table import Table

    from cdlaw.cli import out as human
    from cdlaw.cli import wide
    from cdlaw.units import format_number as fmt

    table = Table(
        title=f"sweep {plan.plan.sweep.name}: {len(plan.rows)} runs", title_justify="left"
    )
    shared = any(r["fork_parent"] for r in plan.rows)
    for col in (
        "run_id",
        "size",
        "strategy",
        "N",
        "D",
        "D′",
        "r",
        "tokens",
        "FLOPs",
        "steps",
        "lr",
        "seed",
        "state",
        "est.",
        *(("fork from", "at step") if shared else ()),
    ):
        table.add_column(
            col, justify="left" if col in ("run_id", "size", "strategy", "state") else "right"
        )
    for r in plan.rows:
        table.add_row(
            r["run_id"],
            r["size"],
            r["strategy"],
            fmt(r["n_params"]),
            fmt(r["fresh_tokens"]),
            fmt(r["derived_tokens"]) if r["derived_tokens"] else "0",
            f"{r['derived_ratio']:g}",
            fmt(r["tokens_trained"]),
            f"{r['flops']:.1e}",
            str(r["steps"]),
            f"{r['lr']:g}",
            str(r["seed"]),
            r["state"],
            _duration(r["est_seconds"]),
            *(
                (r["fork_parent"] or "-", str(r["fork_step"]) if r["fork_parent"] else "-")
                if shared
                else ()
            ),
        )
    wide(human).print(table)
    for c in plan.calibration:
        human.print(
            f"calibration: N = {fmt(c['n_params'])}: {c['tokens_per_second']:,.0f} tokens/s "
            f"({c['steps_timed']} steps), setup {c['setup_s']:.1f}s",
            highlight=False,
        )
    human.print(
        f"estimated time on {plan.device}: {_duration(plan.wall_seconds)} with {plan.jobs} job(s) "
        f"× {plan.threads} thread(s) ({_duration(plan.serial_seconds)} of runs to do)",
        highlight=False,
    )
    if plan.plan.sweep.share:
        forks = sum(
            1 for r in plan.rows if r["fork_parent"] and r["state"] not in ("done", "diverged")
        )
        ratio = plan.flops / plan.flops_alone if plan.flops_alone else math.nan
        human.print(
            f"shared prefixes: {forks} run(s) fork from a trunk; {plan.flops:.2e} FLOPs to train "
            f"instead of {plan.flops_alone:.2e} ({ratio:.2f}×), an estimated "
            f"{_duration(plan.wall_seconds)} instead of {_duration(plan.wall_seconds_alone)}",
            highlight=False,
        )
    for note in plan.notes:
        say("note", note)


class SweepDisplay:
    """Progress on stderr: runs done / total with an ETA, and each current run's tokens/s,
    tokens seen and last validation loss. A live rich display on a terminal, else a line
    per run start and end, and about ten per run of its progress (logs, CI)."""

    def __init__(self, live: bool):
        self.live = live
        self.facts: dict[str, dict] = {}
        self.work: dict[str, float] = {}  # run_id -> tokens × FLOPs/token (ETA weights)
        self.seen: dict[str, int] = {}
        self.finished: set[str] = set()
        self.total = 0
        self.progress = None  # a rich Progress once the first run starts (live mode)
        self.overall = None
        self.tasks: dict[str, int] = {}
        self.started = time.monotonic()
        self.sweep_dir = ""
        # Runs finished before this sweep got to them are counted quietly, then said in one
        # line; after that every finished run is a line of its own (those another process
        # finished too), so that [k/total] counts up by one, line after line.
        self.scheduling = False
        self.lines = ProgressLines()  # in a log: about ten lines per run

    def __call__(self, event) -> None:
        from cdlaw.sweep import events as ev

        if isinstance(event, ev.SweepPlanned):
            self.facts = {f["run_id"]: f for f in event.runs}
            self.work = {
                k: f["tokens_trained"] * f["flops_per_token"] for k, f in self.facts.items()
            }
            self.total = len(self.facts)
            self.sweep_dir = event.sweep_dir
            err.print(
                f"sweep {event.sweep}: {self.total} runs → {event.sweep_dir}", highlight=False
            )
            return
        if isinstance(event, ev.RunSkipped):
            self._finish(event.run_id)
            if self.scheduling:  # finished meanwhile by another process sharing the folder
                status = event.status or "finished"
                self._say(f"{status} by another process {self._label(event.run_id)}{self._count()}")
            return
        if not self.scheduling:
            self.scheduling = True
            if self.finished:
                self._say(f"already finished: {len(self.finished)} run(s){self._count()}")
        if isinstance(event, ev.RunStarted):
            rid = event.run_id
            if self.live and self.progress is None:
                self._start_live()  # after the skips, so that they do not count as speed
            f = self.facts.get(rid, {})
            if self.progress is not None:
                self.tasks[rid] = self.progress.add_task(
                    self._label(rid), total=f.get("tokens_trained"), stats=""
                )
            else:
                err.print(f"start {self._label(rid)}", highlight=False)
        elif isinstance(event, ev.RunProgress):
            rid = event.run_id
            self.seen[rid] = event.tokens_seen
            if self.progress is not None and rid in self.tasks:
                from cdlaw.units import format_number as fmt

                f = self.facts.get(rid, {})
                stats = (
                    f"{fmt(self.seen[rid])}/{fmt(f.get('tokens_trained', 0))} tok  "
                    f"{event.tokens_per_second:,.0f} tok/s"
                )
                if math.isfinite(event.val_loss):
                    stats += f"  val {event.val_loss:.3f}"
                self.progress.update(self.tasks[rid], completed=self.seen[rid], stats=stats)
                self._update_overall()
            elif not self.live and (line := self.lines(event)):
                err.print(line, highlight=False)
        elif isinstance(event, ev.RunEnded):
            loss = event.loss
            self._finish(event.run_id)
            loss_s = f" loss {loss:.4f}" if isinstance(loss, float) and math.isfinite(loss) else ""
            self._say(f"{event.status} {self._label(event.run_id)}{loss_s}{self._count()}")
        elif isinstance(event, ev.RunLocked):
            self._say(f"waiting: {event.run_id} is held by pid {event.pid} on {event.host}")
        elif isinstance(event, ev.RunRetried):
            self._say(f"retry: {event.run_id} stopped ({event.reason}); it resumes")

    def _say(self, line: str) -> None:
        (self.progress.console if self.progress else err).print(line, highlight=False)

    def _count(self) -> str:
        return f"  [{len(self.finished)}/{self.total}]"

    def stopped_line(self, again: str) -> str:
        """What a sweep stopped by SIGTERM kept, and how to go on."""
        where = f" in {self.sweep_dir}" if self.sweep_dir else ""
        return (
            f"stopped by SIGTERM: {len(self.finished)} of {self.total} runs are finished and "
            f"kept{where}, and runs in progress resume from their last checkpoint; "
            f"`{again}` resumes the sweep"
        )

    def _label(self, rid: str) -> str:
        f = self.facts.get(rid)
        if not f:
            return rid
        return f"{rid} {f['size']} {f['strategy']} D={f['fresh_tokens']:,} r={f['derived_ratio']:g}"

    def _start_live(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeRemainingColumn(),
            console=err,
        )
        self.overall = self.progress.add_task(
            f"runs {len(self.finished)}/{self.total}",
            total=sum(self.work.values()) or 1,
            completed=self._work_done(),
            stats="",
        )
        self.progress.start()

    def _finish(self, rid: str) -> None:
        self.finished.add(rid)
        self.seen[rid] = self.facts.get(rid, {}).get("tokens_trained", 0)
        if self.progress is not None and rid in self.tasks:
            self.progress.remove_task(self.tasks.pop(rid))
        self._update_overall()

    def _work_done(self) -> float:
        """Work done so far: finished runs whole, running ones by their tokens seen."""
        return sum(
            self.work.get(r, 0)
            * min(1.0, n / max(1, self.facts.get(r, {}).get("tokens_trained", 1)))
            for r, n in self.seen.items()
        )

    def _update_overall(self) -> None:
        if self.progress is not None:
            self.progress.update(
                self.overall,
                completed=self._work_done(),
                description=f"runs {len(self.finished)}/{self.total}",
            )

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
