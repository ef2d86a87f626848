"""Decide on a run's log once, or again each time it grows (`cdlaw govern --watch`).

    for decision in decisions(run, source, options, CurveOptions(), Watch(every=60)):
        show(decision)

The budget (if any) is planned at the first decision and reused for every one after. A log that
cannot be read after a first good reading (a growing log caught mid-write) is reported to
`on_unreadable` and read again next time; an unreadable first reading raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cdlaw.govern.curve import Curve, CurveOptions, read_curve
from cdlaw.govern.decision import Decision, GovernOptions
from cdlaw.govern.governor import plan_budget
from cdlaw.govern.model import decide
from cdlaw.plan.source import PlanningLaw
from cdlaw.system.errors import BadInput


@dataclass(frozen=True)
class Watch:
    """How often to read the log: once (watch False), or every `every` seconds until
    `reads` readings (None: until interrupted)."""

    watch: bool = False
    every: float = 60.0
    reads: int | None = None


def _reader(run: Path, curve_options: CurveOptions) -> Callable[[str], Curve]:
    """column → the run read again at that loss column."""
    from dataclasses import replace

    return lambda column: read_curve(run, replace(curve_options, loss_column=column))


def decisions(
    run: Path,
    source: PlanningLaw | None,
    options: GovernOptions,
    curve_options: CurveOptions,
    watch: Watch = Watch(),
    on_unreadable: Callable[[BadInput], None] = lambda e: None,
) -> Iterator[Decision]:
    """One Decision per reading at which the log has grown (the first reading always)."""
    last_tokens = None
    budget_plan = None  # planned at the first reading, the same for every one after
    done = 0
    while True:
        try:
            curve = read_curve(run, curve_options)
        except BadInput as e:
            if last_tokens is None:
                raise
            on_unreadable(e)
            curve = None
        axis = None if curve is None else (curve.steps if curve.tokens is None else curve.tokens)
        if curve is not None and axis is not None and axis[-1] != last_tokens:
            last_tokens = axis[-1]
            if source is not None and options.budget_flops is not None:
                budget_plan = budget_plan or plan_budget(source, options)
            yield decide(curve, source, options, budget_plan, reread=_reader(run, curve_options))
        done += 1
        if not watch.watch or (watch.reads is not None and done >= watch.reads):
            return
        time.sleep(max(watch.every, 0.0))
