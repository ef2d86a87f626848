"""How `cdlaw plan` writes a plan's numbers in words, shared by its one-budget panel
(cdlaw.cli.plan) and its --frontier table (cdlaw.cli.plan_frontier)."""

from __future__ import annotations

import math

from cdlaw.units import format_number as fmt


def tokens_text(x: float) -> str:
    """A token count, or "unlimited" for an unlimited corpus."""
    return fmt(x) if math.isfinite(x) else "unlimited"


def gap_text(x: float, digits: int) -> str:
    """A loss difference with its sign; rounding noise shows as +0 rather than -0."""
    return f"{round(x, digits) + 0.0:+.{digits}f}"
