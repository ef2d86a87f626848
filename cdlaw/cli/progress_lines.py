"""Plain progress lines for a log: when stderr is no terminal (a redirect, a batch job, CI),
`cdlaw sweep` says each run's step, loss and speed about ten times per run, between its
start and end lines, instead of drawing bars:

    run 3f2a9c0b1d4e step 120/600 loss 3.210 val 3.305 tok/s 14.2K
"""

from __future__ import annotations

import math

from cdlaw.units import format_number

LINES_PER_RUN = 10


class ProgressLines:
    """progress_line(event) -> the line to print for a RunProgress event, or None.

    A run gets a line each time it passes another tenth of its steps. Events may come
    thinned (worker processes send at most two a second), so tenths are crossed, not hit;
    a resumed run says where it stands at its first event."""

    def __init__(self, lines_per_run: int = LINES_PER_RUN):
        self.lines_per_run = lines_per_run
        self.said: dict[str, int] = {}  # run_id -> the last tenth it was said at

    def __call__(self, event) -> str | None:
        part = event.step * self.lines_per_run // max(1, event.steps_total)
        if part <= self.said.get(event.run_id, 0):
            return None
        self.said[event.run_id] = part
        line = f"run {event.run_id} step {event.step}/{event.steps_total}"
        if math.isfinite(event.train_loss):
            line += f" loss {event.train_loss:.3f}"
        if math.isfinite(event.val_loss):
            line += f" val {event.val_loss:.3f}"
        return line + f" tok/s {format_number(event.tokens_per_second)}"
