"""StageProgress: the rich progress bar that `fit` and `plan --law RUNS` show on stderr
while a fit runs its stages (search, refinement, bootstrap). Pass an instance as the
`progress` callback of cdlaw.fit.procedure.fit_path / fit_law; call close() when done."""

from __future__ import annotations

import time
from typing import Any

from cdlaw.cli import err


class StageProgress:
    """One bar per stage, shown only once the work has run for a second (a quick fit
    prints nothing). Called as progress(stage, done, total)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.bar: Any = None  # a rich Progress once shown
        self.tasks: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.bar is None:
            if not time.monotonic() - self.start >= 1.0:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            )
            self.bar.start()
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"{stage} (starts stopped)", total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.bar, self.start = None, float("inf")  # closed: shown no more
