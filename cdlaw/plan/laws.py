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

from cdlaw.law import Law
from cdlaw.plan.result import Allocation, LawNote
from cdlaw.plan.source import PlanningLaw


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
) -> LawNote | None:
    """The note for a plan whose source carries a comparison; None without one (or where no
    compared law could plan this budget)."""
    from cdlaw.plan.compare import law_plan

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
        p = law_plan(law, budget_flops, unique, source.data_range, extrapolate=True)
        if "error" in p:
            continue
        strategy = p["strategy"]
        known = strategy == "none" or source.law.knows_strategy(strategy)
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


def law_of_runs(path, progress=None) -> PlanningLaw:
    """`cdlaw plan --law RUNS` (a table or a runs folder): every law compared on the runs
    (each refitted without the largest size, whose error ranks them: compare_laws), the
    winner fitted with cdlaw fit's bootstrap, and the comparison kept for the law note.
    Nothing is written; `cdlaw compare` and `cdlaw fit` save both."""
    from dataclasses import replace

    from cdlaw.fit.procedure import DEFAULT_BOOTSTRAP, DEFAULT_STARTS, fit_law
    from cdlaw.fit.table import load_runs
    from cdlaw.laws import LAWS
    from cdlaw.plan.compare import compare_laws

    runs = load_runs(path)
    comparison = compare_laws(
        runs, n_starts=DEFAULT_STARTS, source=str(path), progress=progress, left_out="largest"
    )
    winner = comparison.winner
    fit = fit_law(
        runs,
        winner,
        select=comparison.select,  # the rows the laws were compared on
        bootstrap=DEFAULT_BOOTSTRAP,
        naive=not LAWS[winner].uses_derived,  # as compared: derived tokens counted as fresh
        source=str(path),
        progress=progress,
    )
    return replace(
        PlanningLaw.of_fit(fit, str(path)),
        comparison=comparison.to_dict(),
        comparison_path=f"on {path} for this plan, not saved",
    )
