"""Why the governor decides as it does, in words: the lines of Decision.reasons (the why
first, then the numbers it rests on). cdlaw.govern.governor calls it with its results."""

from __future__ import annotations

import math
from collections.abc import Sequence

from cdlaw.govern.decision import Option


def reasons(
    action: str,
    options: Sequence[Option],
    gain: float,
    lam: float,
    cross_t: float | None,
    t_now: float,
    strategy: str,
    budget_flops: float,
    switch: tuple[str | None, Option | None, float | None],
    delta: float | None,
    needed: float,
    model_line: str | None = None,
) -> list[str]:
    """The lines that explain the action: why first, then the numbers it rests on.
    options: cool down now, planned end, best stop (Decision.options' first three);
    switch: (strategy, its best ending, the share of bootstrap laws backing it); needed:
    the share a switch needs (cdlaw.govern.governor.SWITCH_SUPPORT); delta: the WSD
    relation's offset (None under a curve law); model_line: what predicted the ends."""
    now, planned, best = options[0], options[1], options[2]
    g, (switch_to, switch_best, support) = gain, switch
    ratio = g / lam if lam > 0 else math.inf
    spent = now.flops is not None and now.flops >= budget_flops
    if action == "switch strategy" and switch_best is not None:
        why = (
            f"switching the rest of the tokens to {switch_to} scores {switch_best.objective:.4f} "
            f"in loss + λ·FLOPs against {min(best.objective, now.objective):.4f} on {strategy}"
        )
    elif action == "cool down now" and spent:
        why = (
            f"the budget is spent: a cooldown now ends at {now.end_tokens:.4g} tokens, "
            f"{now.flops:.3g} FLOPs of the {budget_flops:.3g} budgeted"
        )
    elif action == "cool down now" and g < lam:
        why = (
            f"a FLOP here buys {ratio:.2g}× what it buys on the frontier: below λ(C), so the "
            "rest of the budget is worth more elsewhere"
        )
    elif action == "cool down now":
        why = "going on would not lower loss + λ·FLOPs within the budget"
    else:
        why = (
            f"a FLOP here still buys {ratio:.2g}× what it buys on the frontier: going on to "
            f"{best.end_tokens:.4g} tokens lowers loss + λ·FLOPs by "
            f"{now.objective - best.objective:.4f}"
        )
    lines = [
        why,
        f"G_t = {g:.3g} nats/FLOP now; λ(C) = {lam:.3g}",
        f"cool down now: loss {now.loss:.4f}; at the planned end: {planned.loss:.4f}",
    ]
    if spent:
        lines.append("G_t meets λ: the budget is spent")
    elif cross_t is None:
        lines.append("G_t stays above λ up to the budget")
    elif cross_t <= t_now:
        lines.append(f"G_t fell below λ at {cross_t:.4g} tokens (now {t_now:.4g})")
    else:
        lines.append(f"G_t will cross λ at {cross_t:.4g} tokens (now {t_now:.4g})")
    if switch_best is not None:
        lines.append(
            f"switching the rest to {switch_to}: loss {switch_best.loss:.4f} at "
            f"{switch_best.end_tokens:.4g} tokens"
        )
        better = min(best.objective, now.objective) - switch_best.objective
        if action != "switch strategy" and better > 0 and support is not None:
            lines.append(
                f"switching scores {better:.4f} lower, but only {support:.0%} of the bootstrap "
                f"laws agree (a switch needs {needed:.0%}): not worth a change of data"
            )
    if delta is not None:
        lines.append(f"the law calibrated to this run: offset {delta:+.4f} nats")
    if model_line:
        lines.append(model_line)
    return lines
