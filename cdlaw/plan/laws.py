"""The law a plan rests on: which law it used and why, and what the competing laws plan.

On Muennighoff et al.'s runs `cdlaw compare` ranks the CD law first at extrapolating
(held-out log-RMSE 0.078 against Muennighoff's 0.214), yet the laws' plans for one budget
span N 942M to 15.4B: the answer depends on the law more than on the fit's own noise.
Where a comparison of the fit's runs sits beside it (compare.json, `cdlaw compare`),
every law of it plans the same budget, each allocation is scored by the plan's law, and
those above the plan's band are named:

    note = law_note(source, budget, unique, plan_best, band)    # a LawNote, or None

cdlaw.plan.planner attaches it to the Plan (`laws`); `plan` and `report` print its text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from cdlaw.fit.findings import DataRange
from cdlaw.law import Law
from cdlaw.plan.guard import BeyondLimit
from cdlaw.plan.result import Allocation, LawNote
from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NONE, REPETITION
from cdlaw.system.errors import BadInput
from cdlaw.units import counted


def why_this_law(used: str, comparison: dict) -> tuple[str, str]:
    """(the comparison's winner, why the plan's law: a clause that follows its name)."""
    scores = {s["law"]: s for s in comparison.get("laws") or [] if isinstance(s, dict)}
    winner = str(comparison.get("winner") or "")
    if used not in scores or winner not in scores:
        return winner, ", the fit's (the comparison did not rank it)"
    err = {law: float(s.get("heldout_rmse_log", math.nan)) for law, s in scores.items()}
    tie = " (a tie within the seed noise)" if "a tie" in str(comparison.get("verdict")) else ""
    if used == winner:
        rest = sorted((law for law in err if law != used), key=lambda k: _finite(err[k]))
        against = f"; {rest[0]} {err[rest[0]]:.4f}" if rest else ""
        return winner, (
            ", which `cdlaw compare` ranks first at predicting the held-out largest size "
            f"(log-RMSE {err[used]:.4f}{against}){tie}"
        )
    return winner, (
        f", the fit's, though `cdlaw compare` ranks {winner} first at predicting the held-out "
        f"largest size (log-RMSE {err[winner]:.4f}; {used} {err[used]:.4f}){tie}: fit "
        f"--law {winner} to plan with it"
    )


def _finite(x: float) -> float:
    return x if math.isfinite(x) else math.inf


def law_note(
    source: PlanningLaw,
    budget_flops: float,
    unique_tokens: float,
    best: Allocation,
    band: tuple[float, float] | None,
    plan: Callable[..., Any],
) -> LawNote | None:
    """The note for a plan whose source carries a comparison; None without one (or where no
    compared law could plan this budget). plan: cdlaw.plan.planner.plan (passed in: the
    planner calls this)."""
    comparison = source.comparison
    if not comparison:
        return None
    plans = {}
    for score in comparison.get("laws") or []:
        try:
            law = Law.from_dict({"law": score["law"], **score["params"]})
        except (KeyError, TypeError, ValueError):
            continue
        unique = None if math.isinf(unique_tokens) else unique_tokens
        p = law_plan(law, budget_flops, unique, source.data_range, plan, extrapolate=True)
        if "error" in p:
            continue
        strategy = p["strategy"]
        known = strategy == NONE or source.law.knows_strategy(strategy)
        under = (
            float(source.law.loss(p["n_params"], p["fresh_tokens"], p["derived_tokens"], strategy))
            if known
            else None
        )
        keys = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "uses", "predicted_loss")
        plans[score["law"]] = {**{k: p[k] for k in keys}, "loss_under_plan": under}
    if not plans:
        return None
    ceiling = band[1] if band is not None else None
    beyond = tuple(
        law
        for law, p in plans.items()
        if ceiling is not None
        and p["loss_under_plan"] is not None
        and p["loss_under_plan"] > ceiling
    )
    n = [p["n_params"] for p in plans.values()]
    winner, why = why_this_law(source.law.form, comparison)
    return LawNote(
        source.law.form,
        winner,
        why,
        plans,
        (min(n), max(n)),
        beyond,
        ceiling,
        str(source.comparison_path or comparison.get("source") or "compare.json"),
    )


def law_plan(
    law,
    budget_flops: float,
    unique_tokens: float | None,
    data_range: DataRange | None,
    plan: Callable[..., Any],
    extrapolate: bool = True,
    name: str = "",
) -> dict:
    """One compared law's plan of the budget as compare.json keeps it (cdlaw.plan.compare),
    or {"error": why} where it cannot plan; BeyondLimit (from extrapolate False) is raised.
    A law blind to derived tokens was fitted with them counted as fresh, so it plans as it
    was fitted: its optimum with every token fresh, the tokens past the unique ones
    repeated, and its predicted loss the one it believes (`repeats_counted_as_fresh`;
    `cdlaw plan`'s naive baseline). plan: cdlaw.plan.planner.plan (passed in, since the
    planner calls this module)."""
    source = PlanningLaw(name or law.form, law, data_range)
    naive = not law.form_decl.uses_derived  # fitted naive (compare_laws): plans naive
    try:
        p = plan(source, budget_flops, None if naive else unique_tokens, extrapolate=extrapolate)
    except BeyondLimit:
        raise
    except BadInput as e:
        return {"error": str(e)}
    best = p.best
    out = {
        "n_params": best.n_params,
        "fresh_tokens": best.fresh_tokens,
        "strategy": best.strategy,
        "derived_tokens": best.derived_tokens,
        "epochs": best.epochs,
        "uses": best.uses,  # epochs of repetition, passes of any other strategy
        "predicted_loss": best.predicted_loss,
        "extrapolated": list(p.extrapolated),
    }
    if naive and unique_tokens is not None:
        out.update(_repeated(best.tokens_trained, unique_tokens))
    return out


def _repeated(tokens: float, unique_tokens: float) -> dict:
    """A naive plan's tokens on `unique_tokens` unique ones: the rest are repeats."""
    derived = max(tokens - unique_tokens, 0.0)
    epochs = tokens / min(tokens, unique_tokens)
    return {
        "fresh_tokens": min(tokens, unique_tokens),
        "strategy": REPETITION if derived > 0 else NONE,
        "derived_tokens": derived,
        "epochs": epochs,
        "uses": counted(epochs, "epoch"),
        "repeats_counted_as_fresh": True,
    }
