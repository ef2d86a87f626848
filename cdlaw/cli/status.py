"""`cdlaw status`: the runs of a sweep and their states (docs/cli.md)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from cdlaw.cli import app, out, print_json, wide
from cdlaw.units import counted

STATE_STYLE = {
    "done": "green",
    "diverged": "yellow",
    "failed": "red",
    "running": "cyan",
    "partial": "magenta",
    "pending": "dim",
}


@app.command()
def status(
    runs_dir: Path = typer.Argument(
        ..., metavar="RUNS_DIR", help="A sweep folder (runs/SWEEP) or a runs folder."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON on stdout."),
) -> None:
    """Show every run of a sweep: done, diverged, failed, running (locked by a live
    process), partial (a checkpoint to resume from) or pending; and which were trained on
    inputs the sweep no longer reads (a corpus, tokenizer or derived file edited since).

    Example: cdlaw status runs/smoke
    """
    from cdlaw.sweep.summary import sweep_status

    rows = sweep_status(runs_dir)
    if json_out:
        print_json(rows)
        return
    _render(rows, runs_dir)


def _render(rows: list[dict], runs_dir: Path) -> None:
    """The rows as a table, their counts by state, and what is marked."""
    from rich.markup import escape
    from rich.table import Table

    from cdlaw.units import format_number as fmt

    table = Table(title_justify="left", title=f"{runs_dir}: {counted(len(rows), 'run')}")
    for col in (
        "sweep",
        "run_id",
        "size",
        "strategy",
        "N",
        "D",
        "r",
        "tokens",
        "lr",
        "seed",
        "state",
        "loss",
        "progress / note",
    ):
        table.add_column(
            col, justify="right" if col in ("N", "D", "r", "tokens", "loss") else "left"
        )
    for r in rows:
        state = r["state"]
        if r.get("holder"):
            note = r["holder"]
        elif r.get("error"):
            note = str(r["error"])[:60]
        else:
            note = ""
        if r.get("damaged"):  # an unreadable result.json, or a damaged file of a finished run
            note = f"damaged: {', '.join(r['damaged'])} {note}".strip()
        if r.get("tokens_seen") is not None and r.get("tokens_trained"):
            note = f"{r['tokens_seen'] / r['tokens_trained']:.0%} {note}".strip()
        if r.get("rescore"):  # scored on task files edited since: the next sweep rescores
            note = f"old task scores: {', '.join(r['rescore'])} {note}".strip()
        if r.get("changed"):  # trained on inputs the sweep no longer reads
            note = f"inputs changed: {'; '.join(r['changed'])} {note}".strip()
        loss = r.get("loss")
        table.add_row(
            r.get("sweep", ""),
            r["run_id"],
            str(r.get("size", "")),
            r.get("strategy", ""),
            fmt(r["n_params"]) if "n_params" in r else "",
            fmt(r["fresh_tokens"]) if "fresh_tokens" in r else "",
            f"{r['derived_ratio']:g}" if "derived_ratio" in r else "",
            fmt(r["tokens_trained"]) if "tokens_trained" in r else "",
            f"{r['lr']:g}" if "lr" in r else "",
            str(r.get("seed", "")),
            f"[{STATE_STYLE.get(state, '')}]{state}[/]" + ("" if r.get("planned", True) else " *"),
            f"{loss:.4f}" if isinstance(loss, float) and math.isfinite(loss) else "",
            escape(note),  # plain text: "[derived.distill]" is a setting, not markup
        )
    wide(out).print(table)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    out.print(", ".join(f"{n} {s}" for s, n in counts.items()), highlight=False)
    if any(not r.get("planned", True) for r in rows):
        out.print("* not in the sweep's plan (a run folder from an older sweep file)")
    _warn_of_old_inputs(rows)


def _warn_of_old_inputs(rows: list[dict]) -> None:
    """A warning for the runs trained on inputs edited since, one for those scored on task
    files edited since."""
    from cdlaw.cli import say

    changed = [r for r in rows if r.get("changed")]
    if changed:
        say(
            "warning",
            f"{len(changed)} run(s) were trained on other inputs than the sweep reads now "
            f"(e.g. {changed[0]['run_id']}: {'; '.join(changed[0]['changed'])}): their losses, "
            "and a fit of them, are of the old inputs; `cdlaw sweep SWEEP_FILE --restart` "
            "retrains them",
        )
    rescore = [r for r in rows if r.get("rescore")]
    if rescore:
        say(
            "warning",
            f"{len(rescore)} run(s) were scored on task files edited since (e.g. "
            f"{rescore[0]['run_id']}: {', '.join(rescore[0]['rescore'])}): their task scores, "
            "and links of them, are of the old files; `cdlaw sweep SWEEP_FILE` scores them "
            "again without training",
        )
