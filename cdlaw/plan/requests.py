"""What a plan request may ask, checked before any search: positive budgets and sizes,
the options' ranges, and which strategies `--strategy` names for a law (cdlaw.plan.planner
calls these; a bad request is one BadInput sentence)."""

from __future__ import annotations

import math

from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NAME_RULE, NONE, REPETITION, canonical, is_name
from cdlaw.system.errors import BadInput
from cdlaw.units import plain


def positive(value, what: str) -> float:
    """value as a positive finite float, or BadInput naming the option `what`."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{what} must be a number like 1e21 or 25M, not {plain(value)}.") from None
    if not math.isfinite(x) or x <= 0:
        raise BadInput(f"{what} must be a positive number, not {x:g}.")
    return x


def check_options(saturation, tolerance, gpu_memory_gib, gpu_flops, mfu) -> None:
    """BadInput for a regime threshold or GPU option out of its range."""
    if not 0 < saturation < 1:
        raise BadInput(f"--saturation {saturation:g} must lie strictly between 0 and 1.")
    if not tolerance >= 0:
        raise BadInput(f"--tolerance {tolerance:g} must be ≥ 0 nats.")
    if gpu_memory_gib is not None:
        positive(gpu_memory_gib, "--gpu-memory (GiB)")
    if gpu_flops is not None:
        positive(gpu_flops, "--gpu-flops (peak FLOP/s of one GPU, e.g. 989e12)")
    if mfu is not None:
        if not 0 < mfu <= 1:
            raise BadInput(f"--mfu {mfu:g} must lie in (0, 1], e.g. 0.4 for 40% utilisation.")
        if gpu_flops is None:
            raise BadInput(
                f"--mfu {mfu:g} needs --gpu-flops (peak FLOP/s of one GPU, e.g. 989e12 for an "
                "H100 in bf16) to give GPU hours."
            )


def strategies_to_try(source: PlanningLaw, strategy: str) -> list[str]:
    """The strategies to plan for `--strategy` (auto: every one the law has; "none" for a
    law whose derived tokens are worth nothing), or BadInput saying what may be asked."""
    law, strategy = source.law, canonical(strategy)
    if strategy == NONE:
        counts_any = law.form_decl.uses_derived and not law.form_decl.strategy_params
        if not law.strategies and not counts_any:
            return [NONE]  # the only plan this law makes: derived tokens are worth nothing
        raise BadInput(
            "--strategy none is no way to make derived tokens: it is the strategy of runs "
            "that train on fresh tokens alone (D′ = 0). To plan without derived tokens, "
            "leave out --unique-tokens (fresh data without limit) or give a --budget-flops "
            "whose tokens fit in it; to choose how derived tokens are made, give auto or "
            f"one of {', '.join(law.strategies) or 'repetition'}."
        )
    if strategy != "auto" and not is_name(strategy):
        raise BadInput(f"--strategy {strategy!r} is not auto or a strategy's name: {NAME_RULE}.")
    if law.form_decl.uses_derived and not law.form_decl.strategy_params:
        # A law that counts derived tokens but cannot tell strategies apart (practical):
        # repeating is the one that costs nothing beyond training.
        return [REPETITION if strategy == "auto" else strategy]
    if not law.strategies:
        # A chinchilla law (or a fit without D′ rows): derived tokens are worth nothing,
        # so whatever the strategy asked, the law scores the plan as D′ = 0.
        return [NONE]
    if strategy == "auto":
        return list(law.strategies)
    if strategy not in law.strategies:
        have = ", ".join(law.strategies)
        raise BadInput(
            f"--law {source.name} has no {strategy} parameters (it has: {have}); "
            f"use --strategy auto or one of those."
        )
    return [strategy]
