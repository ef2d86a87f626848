"""How `cdlaw sweep` shows itself: the dry run's table, durations, and the live display of a
sweep (SweepDisplay); kept apart so that cli/sweep.py stays a parser."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from cdlaw.cli import err, print_json, say
from cdlaw.cli.progress_lines import ProgressLines
from cdlaw.units import counted

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def render_dry_run(plan) -> None:
    """The plan on stdout (a result, not progress); its notes on stderr."""
    from cdlaw.cli import out as human
    from cdlaw.cli import wide
    from cdlaw.units import format_number as fmt

    wide(human).print(_runs_table(plan))
    for c in plan.calibration:
        human.print(
            f"calibration: N = {fmt(c['n_params'])}: {c['tokens_per_second']:,.0f} tokens/s "
            f"({c['steps_timed']} steps), setup {c['setup_s']:.1f}s"
            + (f", compile {c['compile_s']:.1f}s once a shape" if c.get("compile_s") else ""),
            highlight=False,
        )
    human.print(
        f"estimated time on {plan.device}: {duration(plan.wall_seconds)} with {plan.jobs} job(s) "
        f"× {plan.threads} thread(s) ({duration(plan.serial_seconds)} of runs to do)",
        highlight=False,
    )
    if plan.plan.sweep.share:
        forks = sum(
            1 for r in plan.rows if r["fork_parent"] and r["state"] not in ("done", "diverged")
        )
        human.print(_shared_line(plan, forks), highlight=False)
    if plan.packs:
        human.print(pack_line(plan.packs, plan.pack_gains), highlight=False)
        human.print(
            f"packed: an estimated {duration(plan.wall_seconds)} if every pack stays full, "
            f"instead of {duration(plan.wall_seconds_unpacked)} with each run alone",
            highlight=False,
        )
    for note in plan.notes:
        say("note", note)


def _shared_line(plan, forks: int) -> str:
    """What sharing prefixes saves: FLOPs (6·N and attention per token, as the table's
    column) and the estimated time, each said once where it is the same either way."""
    if not forks:
        return (
            f"shared prefixes: no run forks from a trunk here; {plan.flops:.2e} FLOPs to "
            "train (6·N per token and attention)"
        )
    ratio = plan.flops / plan.flops_alone if plan.flops_alone else math.nan
    shared, alone = (
        duration(plan.wall_seconds_unpacked or plan.wall_seconds),
        duration(plan.wall_seconds_alone),
    )
    time = (
        f"an estimated {shared} instead of {alone}"
        if shared != alone
        else f"the estimated time, {shared}, is the same: the longest run sets it"
    )
    return (
        f"shared prefixes: {forks} run(s) fork from a trunk; {plan.flops:.2e} FLOPs to "
        f"train (6·N per token and attention) instead of {plan.flops_alone:.2e} "
        f"({ratio:.2f}×); {time}"
    )


def _runs_table(plan):
    """The dry run's table: one row per run, with its state and estimated time (and its
    fork, where runs share prefixes)."""
    from rich.table import Table

    from cdlaw.units import format_number as fmt

    table = Table(
        title=f"sweep {plan.plan.sweep.name}: {counted(len(plan.rows), 'run')}",
        title_justify="left",
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
            duration(r["est_seconds"]),
            *(
                (r["fork_parent"] or "-", str(r["fork_step"]) if r["fork_parent"] else "-")
                if shared
                else ()
            ),
        )
    return table


def dry_run_json(plan) -> dict:
    """`cdlaw sweep --dry-run --json`: the DryRun as plain data."""
    return {
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


def render_outcome(outcome, simulation, json_out: bool) -> None:
    """What a sweep did: the JSON on stdout (--json), one line on stderr, then each failure."""
    counts: dict[str, int] = {}
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
        f"sweep {outcome.plan.sweep.name}: {counted(len(outcome.statuses), 'run')} ({parts}); {how}; "
        f"summary: {outcome.plan.sweep_dir / 'summary.parquet'}",
        highlight=False,
    )
    for failure in outcome.failures:
        say(f"failed {failure['run_id']}", failure["error"], style="red")


def pack_line(sizes: dict[str, int], gains: dict[str, float]) -> str:
    """`packs (most runs per pack): 20K ×16 (4.4× tokens/s measured), 200K ×4 (2.1× …)`."""
    parts = []
    for label, k in sizes.items():
        gain = f" ({gains[label]:.1f}× tokens/s measured)" if label in gains else ""
        parts.append(f"{label} ×{k}{gain}")
    return "packs (most runs per pack): " + ", ".join(parts)


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
        self.progress: Progress | None = None  # once the first run starts (live mode)
        self.overall: TaskID | None = None
        self.tasks: dict[str, TaskID] = {}
        self.started = time.monotonic()
        self.sweep_dir = ""
        # Runs finished before this sweep got to them are counted quietly, then said in one
        # line; after that every finished run is a line of its own (those another process
        # finished too), so that [k/total] counts up by one, line after line.
        self.scheduling = False
        self.lines = ProgressLines()  # in a log: about ten lines per run
        self.begun: set[str] = set()  # runs said to start (a packed run starts once a pack)

    def __call__(self, event) -> None:
        from cdlaw.sweep import events as ev

        if isinstance(event, ev.SweepPlanned):
            # a new sweep (`cdlaw adapt`'s next round): its own runs, counted from zero
            self.stop()
            self.finished, self.seen, self.begun, self.tasks = set(), {}, set(), {}
            self.scheduling = False
            self.facts = {f["run_id"]: f for f in event.runs}
            self.work = {
                k: f["tokens_trained"] * f["flops_per_token"] for k, f in self.facts.items()
            }
            self.total = len(self.facts)
            self.sweep_dir = event.sweep_dir
            err.print(
                f"sweep {event.sweep}: {counted(self.total, 'run')} → {event.sweep_dir}",
                highlight=False,
            )
            return
        if isinstance(event, ev.PacksChosen):
            err.print(pack_line(event.sizes, event.gains), highlight=False)
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
            if rid in self.begun:  # a packed run going on in a re-formed pack
                return
            self.begun.add(rid)
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
            held = f"{event.run_id} is held by pid {event.pid} on {event.host}"
            self._say(f"waiting: {held}" if event.waits else f"left: {held}, whose run it is now")
        elif isinstance(event, ev.RunRetried):
            self._say(f"retry: {event.run_id} stopped ({event.reason}); it resumes")

    def _say(self, line: str) -> None:
        (self.progress.console if self.progress else err).print(line, highlight=False)

    def _count(self) -> str:
        return f"  [{len(self.finished)}/{self.total}]"

    def stopped_line(self, again: str, by: str = "SIGTERM") -> str:
        """What a sweep stopped by a signal (`by`: SIGTERM, Ctrl-C) kept, and how to go on."""
        where = f" in {self.sweep_dir}" if self.sweep_dir else ""
        return (
            f"stopped by {by}: {len(self.finished)} of {self.total} runs are finished and "
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
            f"runs {len(self.finished)}/{self.total}", total=sum(self.work.values()) or 1, stats=""
        )
        self._update_overall()  # the work already done, e.g. of runs a resumed sweep found
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
        if self.progress is not None and self.overall is not None:
            self.progress.update(
                self.overall,
                completed=self._work_done(),
                description=f"runs {len(self.finished)}/{self.total}",
            )

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
