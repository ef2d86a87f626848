"""`cdlaw plan --frontier`: the budgets of a range (or the range the fit supports), planned
and shown as one table (docs/plan.md#--frontier)."""

from __future__ import annotations

import math

from rich import box
from rich.table import Table

from cdlaw.cli import number, out, print_json, say
from cdlaw.cli.plan_words import gap_text, say_extrapolated, tokens_text
from cdlaw.plan import EXTRAPOLATION_LIMIT
from cdlaw.strategies import NONE, PARAPHRASE, REPETITION
from cdlaw.system.errors import BadInput
from cdlaw.units import format_number as fmt

# --frontier's budgets for a law without a fitted range, which limits nothing.
DEFAULT_FRONTIER = (1e18, 1e24)


def parse_frontier_range(text: str, points: int):
    """--frontier-range LO:HI as `points` log-spaced budgets (shared with `cdlaw plot`)."""
    from cdlaw.plan import planner

    lo, sep, hi = text.partition(":")
    if not sep:
        raise BadInput(f"--frontier-range {text!r} must look like 1e18:1e24.")
    return planner.frontier_budgets(
        number(lo, "--frontier-range start"), number(hi, "--frontier-range end"), points
    )


def plan_frontier(source, frontier_range, points, unique, strategy, options, json_out) -> None:
    """--frontier: plan every budget of the range and show them (or their JSON)."""
    from cdlaw.plan import planner

    if frontier_range is None:
        from cdlaw.plan.support import supported_budgets

        budgets = supported_budgets(source, unique, strategy, points, **options)
        if budgets is None:
            budgets = planner.frontier_budgets(*DEFAULT_FRONTIER, points)
        else:
            say(
                "note",
                f"budgets {budgets[0]:.3g} to {budgets[-1]:.3g} FLOPs: the range whose plans "
                f"stay inside the {EXTRAPOLATION_LIMIT:g}× extrapolation limit of the fitted "
                "range (--frontier-range to choose others)",
            )
    else:
        budgets = parse_frontier_range(frontier_range, points)
    result = planner.frontier(source, budgets, unique, strategy, **options)
    if result.beyond_limit:
        say(
            "note",
            f"{len(result.beyond_limit)} budget(s) "
            f"({', '.join(f'{c:.3g}' for c in result.beyond_limit)} FLOPs) left out: their "
            f"plans lie beyond the {EXTRAPOLATION_LIMIT:g}× extrapolation limit of the "
            "fitted range; pass --extrapolate to plan them anyway",
        )
    if json_out:
        print_json(result.to_dict())
    else:
        render_frontier(result.plans, source.name, unique, strategy)


def render_frontier(plans, law: str, unique, strategy: str) -> None:
    from cdlaw.plan.guard import frontier_extrapolated

    line = frontier_extrapolated(plans)
    if line:
        say_extrapolated(line, out)
    same_d = len({p.fresh_tokens for p in plans}) == 1
    title = f"frontier: law {law}, U = {tokens_text(math.inf if unique is None else unique)} unique tokens"
    title += f", strategy {strategy}" + (
        f"; D = {fmt(plans[0].fresh_tokens)} in every row" if same_d else ""
    )
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        collapse_padding=True,
    )
    cols = [
        "C",
        "N",
        *([] if same_d else ["D"]),
        "D′",
        "uses",
        "loss",
        "regime",
        "gain 2×C",
        "naive",
        "≤4 ep",
    ]
    for col in cols:
        t.add_column(col, justify="left" if col in ("uses", "regime") else "right")
    short = {REPETITION: "rep", PARAPHRASE: "para", NONE: "none"}
    for p in plans:
        uses = short.get(p.strategy, p.strategy) + (
            "" if p.strategy == NONE else f" {p.best.uses_count:.3g}×"
        )
        t.add_row(
            f"{p.budget_flops:.2g}".replace("e+", "e"),
            fmt(p.n_params),
            *([] if same_d else [fmt(p.fresh_tokens)]),
            fmt(p.derived_tokens),
            uses,
            f"{p.predicted_loss:.4f}",
            p.regime.removesuffix("-bound"),
            f"{p.marginal_gain_per_doubling:.4f}",
            gap_text(p.naive.loss_gap, 3),
            gap_text(p.four_epoch.loss_gap, 3),
        )
    out.print(t)
    out.print(
        "uses: epochs (rep) or passes of derived tokens (para and the rest); gain 2×C: nats the loss drops if C doubles; "
        "naive, ≤4 ep: their loss minus the plan's",
        highlight=False,
    )
    # a warning of every budget (the law's: a stale fit, unreadable refits) is said once
    every = [w for w in plans[0].warnings if all(w in p.warnings for p in plans)] if plans else []
    for w in every:
        say("warning", w)
    for p in plans:
        for w in p.warnings:
            if w not in every:
                say(f"warning (C = {p.budget_flops:.3g})", w)
