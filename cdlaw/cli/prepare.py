"""`cdlaw prepare`: tokenise a sweep's corpus into its cache ahead of `cdlaw sweep`
(docs/cli.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from cdlaw.cli import app, err, out


@app.command()
def prepare(
    sweep_file: Path = typer.Argument(
        ..., metavar="SWEEP_FILE", help="The sweep file (TOML) whose corpus to prepare."
    ),
    runs: Path = typer.Option(
        Path("runs"), "--out", help="Runs folder: the cache is OUT/.cache, as `cdlaw sweep` uses."
    ),
    workers: int = typer.Option(
        0, "--workers", help="Processes (local) or tasks in flight (ray); 0: one per core."
    ),
    executor: str = typer.Option(
        "local", "--executor", help="local (processes here) or ray (tasks on a Ray cluster)."
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="Ray cluster address (default: start a local Ray)."
    ),
) -> None:
    """Tokenise a sweep's corpus, and the passes of its derived files (paraphrases and
    any declared strategy's), into the cache its runs read, with a progress bar, checking
    the sweep's runs against them as `cdlaw sweep` does; killed and run again, it resumes
    at the first block not yet written. `cdlaw sweep` prepares the same cache on demand:
    this only does it ahead.

    Example: cdlaw prepare sweeps/qin2026-small.toml --workers 16
    """
    from cdlaw.cli import require_corpus_reader, require_ray_extra
    from cdlaw.data.files.block_tokens import Workers
    from cdlaw.sweep.selection import plan_sweep
    from cdlaw.sweep.spec import load_sweep

    if executor == "ray":
        require_ray_extra()
    require_corpus_reader("prepare")
    sweep = load_sweep(sweep_file)
    with _ProgressBar() as bar:
        options = Workers(workers, executor, ray_address, progress=bar.advance)
        options.check()
        pc = plan_sweep(sweep, runs, workers=options).prepared
    assert pc is not None  # plan_sweep reads the corpus unless told not to
    done = bar.said(len(list((pc.root / "train").glob("b?????.npy"))))
    out.print(
        f"{pc.name}: {pc.train_tokens_available:,} training tokens, {len(pc.val_tokens):,} "
        f"validation tokens, vocabulary {pc.vocab_size:,}; cache {pc.root}"
        + (f" ({done})" if done else ""),
        highlight=False,
        soft_wrap=True,
    )


class _ProgressBar:
    """A rich progress bar on stderr: training documents and tokens done, and their rate;
    and one more per derived strategy with passes to tokenise (documents times passes)."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} documents"),
            TextColumn("{task.fields[tokens]:,} tokens"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=err,
            transient=False,
        )
        self.tasks: dict[str, _Task] = {}  # by BlockDone.derived
        self.tokenised = self.cached = 0  # training blocks
        self.seen = False
        self.started = 0.0

    def __enter__(self):
        import time

        self.started = time.monotonic()  # the rate counts reading and splitting the corpus too
        return self

    def __exit__(self, *exc) -> None:
        if self.tasks:
            self.progress.stop()

    def said(self, train_blocks: int) -> str:
        """What this preparation did, for its last line: training blocks tokenised and
        cached (or all cached already, when only derived passes were tokenised), and the
        documents of each strategy's passes tokenised; "" when it did nothing."""
        if not self.seen:
            return ""
        if self.tokenised or self.cached:
            parts = [f"{self.tokenised} blocks tokenised, {self.cached} already cached"]
        else:
            parts = [f"all {train_blocks} training blocks already cached"]
        for strategy, task in self.tasks.items():
            if strategy and task.fresh_documents:
                parts.append(f"{strategy} passes of {task.fresh_documents:,} documents tokenised")
        return "; ".join(parts)

    def advance(self, block, documents: int) -> None:
        import time

        if not self.tasks:  # shown from the first block: a cached corpus shows none
            self.progress.start()
        if block.derived not in self.tasks:
            name = f"{block.derived} passes" if block.derived else "tokenising"
            task_id = self.progress.add_task(name, total=documents, tokens=0, rate="")
            self.tasks[block.derived] = _Task(task_id, time.monotonic())
        self.seen = True
        if not block.derived:
            self.tokenised += not block.cached
            self.cached += block.cached
        task = self.tasks[block.derived]
        task.tokens += block.tokens
        task.fresh_tokens += 0 if block.cached else block.tokens
        task.fresh_documents += 0 if block.cached else block.documents
        started = self.started if not block.derived else task.started
        elapsed = max(time.monotonic() - started, 1e-9)
        rate = f"{task.fresh_tokens / elapsed:,.0f} tokens/s" if task.fresh_tokens else ""
        self.progress.update(task.id, total=documents, advance=block.documents,
                             tokens=task.tokens, rate=rate)  # fmt: skip


@dataclass
class _Task:
    """One bar's counts: its rich task id, when it started, tokens in all and tokenised,
    and documents tokenised."""

    id: Any
    started: float
    tokens: int = 0
    fresh_tokens: int = 0
    fresh_documents: int = 0
