"""How `cdlaw plan` writes a plan's numbers in words, shared by its one-budget panel
(cdlaw.cli.plan) and its --frontier table (cdlaw.cli.plan_frontier), and the line every
command that plans opens an extrapolated plan with (say_extrapolated)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape

from cdlaw.cli import err
from cdlaw.units import format_number as fmt


def tokens_text(x: float) -> str:
    """A token count, or "unlimited" for an unlimited corpus."""
    return fmt(x) if math.isfinite(x) else "unlimited"


def gap_text(x: float, digits: int) -> str:
    """A loss difference with its sign; rounding noise shows as +0 rather than -0."""
    return f"{round(x, digits) + 0.0:+.{digits}f}"


def say_extrapolated(text: str, console: Console = err) -> None:
    """A plan made beyond the extrapolation limit with --extrapolate, said first in the
    sentence cdlaw.plan.guard.extrapolated_text (or frontier_extrapolated) gives, its
    first word in bold red: on stdout before `plan`'s own panel or table, on stderr for a
    command whose stdout holds another result (report, next, compare)."""
    rest = escape(text).removeprefix("extrapolated")
    console.print(f"[bold red]extrapolated[/]{rest}", highlight=False)


def valley_text(valley) -> str:
    """The plan's valley (cdlaw.plan.result.Valley) in words: the sizes, and the epochs or
    passes they train, whose loss is within the band: what the runs cannot tell apart."""
    small, large = valley.small, valley.large
    a, b = small.uses.split(" ", 1), large.uses.split(" ", 1)
    if small.uses == large.uses:
        uses = small.uses
    elif a[1:] == b[1:]:
        uses = f"{a[0]} – {large.uses}"
    else:
        uses = f"{small.uses} – {large.uses}"
    edge = ", to the edge of the search" if valley.on_edge else ""
    return (
        f"N {fmt(small.n_params)} – {fmt(large.n_params)} ({uses}{edge}): within the 95% "
        f"band (loss ≤ {valley.loss_ceiling:.4f}), so the runs cannot tell these from the plan"
    )
