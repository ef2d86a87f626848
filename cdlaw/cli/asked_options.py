"""--budget-flops and --unique-tokens of the commands that plan for a runs folder (`cdlaw
report`, `cdlaw plot`), declared once: their plan is for these, else for the sweep file's
[plan] (cdlaw.plan.question), else for a default each command names.

    @app.command()
    @takes_group("asked", PlanArgs, plan_options("the largest run's compute", "..."))
    def report(path: Path = ..., asked: PlanArgs = ASKED, ...):
        budget_flops, unique_tokens = asked.numbers()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

from cdlaw.cli import NUMBER, number


@dataclass(frozen=True)
class PlanArgs:
    """The options as given (each field one option, same name); None: not given."""

    budget_flops: str | None = None
    unique_tokens: str | None = None

    def numbers(self) -> tuple[float | None, float | None]:
        """(C, U) as numbers (1e21, 96K), None where not given; BadInput for text that is
        no number (cdlaw.plan.question checks that each is positive)."""
        c, u = self.budget_flops, self.unique_tokens
        return (
            None if c is None else number(c, "--budget-flops"),
            None if u is None else number(u, "--unique-tokens"),
        )


ASKED = PlanArgs()  # the placeholder default of a command's `asked` (takes_group replaces it)


def plan_options(budget_default: str, unique_default: str, use: str = "") -> dict[str, Any]:
    """The two options, each saying what its command does when neither it nor the sweep
    file's [plan] gives a value; `use`: what the command does with them, after "e.g."."""
    return {
        "budget_flops": typer.Option(
            None,
            "--budget-flops",
            metavar=NUMBER,
            help=f"The plan's compute C, e.g. 2e12{use}. Default: budget_flops in the sweep "
            f"file's [plan]; else {budget_default}.",
            show_default=False,
        ),
        "unique_tokens": typer.Option(
            None,
            "--unique-tokens",
            metavar=NUMBER,
            help=f"The plan's unique tokens U, e.g. 96K{use}. Default: unique_tokens in the "
            f"sweep file's [plan]; else {unique_default}.",
            show_default=False,
        ),
    }
