"""Plan a training run for a FLOP budget and a corpus: model size, derived tokens, strategy.

Given C FLOPs and U unique tokens, the law's compute is C = 6·N·(D + D′) and a plan spends
every FLOP, so the model size N alone fixes the token count T = C/(6N) — unless the law
knows overfitting (its loss can rise with D′): then D′ stops at the loss minimum at that N
and the rest of the budget is left unspent (planned_tokens). Fresh tokens are
worth at least as much as derived ones (η ≤ 1), so a plan uses D = min(U, T) fresh tokens
and makes up the rest, D′ = T − D, by repeating them or by training on paraphrases of them
(docs/plan.md). What remains is a one-dimensional problem: minimise L(N, D(N), D′(N)) over
log N, per strategy, and (under `auto`) keep the strategy with the lower loss.

The same budget is also planned the two ways a team would without the CD law, each then
scored by the CD law, so the plan's gain over them is explicit:

- naive: Chinchilla's closed-form optimum of the same E, A, B, α, β, counting repeated
  tokens as if they were fresh (Hoffmann et al. 2022, eq. 4);
- four-epoch: the same, but never more than 4 epochs (D′ ≤ 3U), the rest of the budget
  spent on a larger model (Muennighoff et al. 2023: up to ~4 epochs repeated data is
  almost as good as fresh).

Pure numpy + scipy; `plan` and `frontier` are what the CLI and the plots call. What they
return (Allocation, Plan, Frontier, with their JSON form) is cdlaw.plan.result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from cdlaw.law import Law
from cdlaw.laws.chinchilla import chinchilla_loss

# Checks on a chosen plan (its band, law artifacts): cdlaw.plan.checks; where it leaves
# the fitted range, and the one guard: cdlaw.plan.guard.
from cdlaw.plan.checks import (
    decision_spread,
    judge_optimism,
    law_strategy,
    loss_interval,
    plan_optimism,
    prefers_fewer_fresh_tokens,
    refit_plans,
    size_interval,
    unpinned_warnings,
)
from cdlaw.plan.guard import BeyondLimit, guard, range_warnings

# The law the plan rests on, beside the other laws' plans: cdlaw.plan.laws.
from cdlaw.plan.laws import law_note

# The search for N at one strategy: cdlaw.plan.optimum.
from cdlaw.plan.optimum import (
    SEARCH_TOKENS_PER_PARAM,
    allocation,
    chinchilla_optimal_n_params,
    marginal_gain_per_flop,
    optimal_n_params,
)
from cdlaw.plan.requests import check_options, positive, strategies_to_try

# What a plan is (Allocation, Plan, Frontier and their JSON form): cdlaw.plan.result.
from cdlaw.plan.result import Allocation, Frontier, Plan

# Where the law comes from (a preset or a fit.json, with its bootstrap): cdlaw.plan.source.
from cdlaw.plan.source import PlanningLaw, as_planning_law

# The N whose loss is within the plan's band: cdlaw.plan.valley.
from cdlaw.plan.valley import plan_valley
from cdlaw.regimes import SATURATION, TOLERANCE, classify
from cdlaw.strategies import NONE, REPETITION
from cdlaw.system.errors import BadInput

FOUR_EPOCHS = 4.0
GAP_NOISE = 1e-9  # nats: a loss gap below this is float noise between equal allocations


def plan(
    law: Law | PlanningLaw,
    budget_flops: float,
    unique_tokens: float | None = None,
    strategy: str = "auto",
    n_params: float | None = None,
    saturation: float = SATURATION,
    tolerance: float = TOLERANCE,
    gpu_memory_gib: float | None = None,
    gpu_flops: float | None = None,
    mfu: float | None = None,
    seq_len: int | None = None,
    micro_batch: int | None = None,
    vocab_size: int | None = None,
    extrapolate: bool = True,
) -> Plan:
    """The loss-minimising (N, D, D′, strategy) for budget_flops FLOPs and unique_tokens.

    unique_tokens None means unlimited fresh data. With n_params given only the split
    (and, under "auto", the strategy) is decided. The memory / GPU-hours estimate is
    added when any of gpu_memory_gib, gpu_flops, mfu is given (see cdlaw.plan.memory).
    A plan beyond EXTRAPOLATION_LIMIT of the fitted range (checks.beyond_limit) says so in
    Plan.extrapolated; with extrapolate False (`cdlaw plan` without --extrapolate) it is
    refused instead, before the bootstrap refits plan.
    """
    source = law if isinstance(law, PlanningLaw) else as_planning_law(law)
    req = _Request(
        positive(budget_flops, "--budget-flops"),
        math.inf if unique_tokens is None else positive(unique_tokens, "--unique-tokens"),
        strategy,
        None if n_params is None else positive(n_params, "--n-params"),
        saturation,
        tolerance,
        extrapolate,
    )
    check_options(saturation, tolerance, gpu_memory_gib, gpu_flops, mfu)
    choice = _choose(source, req)
    band = _band(source, req, choice)
    valley = None
    if req.n_params is None and band.ci is not None:
        chosen = law_strategy(choice.best.strategy, choice.chosen)
        valley = plan_valley(
            source.law, chosen, req.budget_flops, req.unique, choice.best.n_params, band.ci[1]
        )
    laws = law_note(source, req.budget_flops, req.unique, choice.best, band.ci, plan)
    warnings = _plan_warnings(source, req, choice, band.warnings)
    if laws is not None and laws.differ:
        warnings.append(laws.text())
    memory = None
    if gpu_memory_gib is not None or gpu_flops is not None or mfu is not None:
        from cdlaw.plan.memory import training_cost

        extra = {"seq_len": seq_len, "micro_batch": micro_batch, "vocab_size": vocab_size}
        memory = training_cost(
            choice.best.n_params,
            choice.best.tokens_trained,
            gpu_memory_gib,
            gpu_flops,
            mfu,
            **{k: v for k, v in extra.items() if v is not None},
        ).to_dict()
    return _assemble(source, req, choice, band, warnings, memory, valley, laws)


def frontier(
    law: Law | PlanningLaw,
    budgets,
    unique_tokens: float | None = None,
    strategy: str = "auto",
    **options,
) -> Frontier:
    """plan() at each budget (e.g. np.logspace(18, 24, 13)); options as for plan(). With
    extrapolate False, budgets whose plan is beyond the extrapolation limit are left out
    (Frontier.beyond_limit names them; plan() refuses them before their refits plan), and a
    range with no budget inside it is refused."""
    source = law if isinstance(law, PlanningLaw) else as_planning_law(law)
    plans, beyond = [], []
    for c in map(float, budgets):
        try:
            plans.append(plan(source, c, unique_tokens, strategy, **options))
        except BeyondLimit as e:
            beyond.append((c, e.extrapolated))
    if not plans:
        raise BeyondLimit(beyond[0][1], beyond[0][0])
    unique = None if unique_tokens is None else float(unique_tokens)
    return Frontier(
        source.name,
        source.law.to_dict(),
        unique,
        strategy,
        tuple(plans),
        tuple(c for c, _ in beyond),
    )


def frontier_budgets(lo: float, hi: float, points: int) -> np.ndarray:
    """A log-spaced grid of budgets from lo to hi (both included)."""
    lo, hi = positive(lo, "--frontier-range start"), positive(hi, "--frontier-range end")
    if not hi > lo:
        raise BadInput(f"--frontier-range {lo:g}:{hi:g}: the end must exceed the start.")
    return np.logspace(math.log10(lo), math.log10(hi), frontier_points(points))


def frontier_points(points) -> int:
    """--frontier-points as a count of at least 2 budgets (BadInput otherwise)."""
    if int(points) != points or int(points) < 2:
        raise BadInput(f"--frontier-points {points}: need at least 2 budgets.")
    return int(points)


# ---------------------------------------------------------------------------------------
# Steps of plan().
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Request:
    """What plan() was asked, checked: unique is inf for unlimited fresh data."""

    budget_flops: float
    unique: float
    strategy: str
    n_params: float | None  # fixed by the user, or None to search
    saturation: float
    tolerance: float
    extrapolate: bool


@dataclass
class _Choice:
    """What the search chose: the strategies planned (after the guard), one allocation
    each with its gap to the best, the chosen strategy and its allocation."""

    tried: list[str]
    candidates: dict[str, Allocation]
    chosen: str  # the law's name for the chosen strategy ("none" for a law without any)
    best: Allocation
    on_edge: bool  # some optimum sat on the edge of the search range
    extrapolated: tuple[str, ...]
    left_out: dict[str, str]  # strategy: why the guard left it out


@dataclass
class _Band:
    """How sure the plan is: every bootstrap law's own plan, summarised (cdlaw.plan.checks)."""

    shares: dict[str, float] | None
    n_band: tuple[float, float] | None
    n_no_band: str | None
    optimism: float | None
    optimism_note: str | None
    ci: tuple[float, float] | None
    no_band: str | None
    warnings: list[str]


def _choose(source: PlanningLaw, req: _Request) -> _Choice:
    """Each strategy's best allocation, the guard (checks.guard: refused, or under `auto`
    planned among those inside it), and the lowest loss among what is left."""
    law = source.law
    tried = strategies_to_try(source, req.strategy)
    candidates = {}
    on_edge = False
    for s in tried:
        if req.n_params is None:
            n, edge = optimal_n_params(law, s, req.budget_flops, req.unique)
            on_edge |= edge
            rule = "cd-optimal"
        else:
            n, rule = req.n_params, "fixed-n_params"
        candidates[s] = allocation(law, s, req.budget_flops, n, req.unique, rule)
    extrapolated, left_out = guard(source, candidates, req.strategy, req.extrapolate)
    tried = [s for s in tried if s not in left_out]
    candidates = {s: a for s, a in candidates.items() if s not in left_out}
    chosen = min(candidates, key=lambda s: candidates[s].predicted_loss)
    best = candidates[chosen]
    for s, a in candidates.items():
        candidates[s] = _with_gap(a, best.predicted_loss)
    return _Choice(tried, candidates, chosen, best, on_edge, extrapolated, left_out)


def _band(source: PlanningLaw, req: _Request, choice: _Choice) -> _Band:
    """Every bootstrap law plans for itself (the same search, each allocation made as the
    plan's own): how sure the decision is, and how optimistic the plan."""
    best, chosen = choice.best, choice.chosen

    def decide(under: Law) -> dict[str, tuple[float, float, float, float]]:
        """{strategy: (N, loss, D, D′)} under another law."""
        out = {}
        for s in choice.tried:
            n = (
                req.n_params
                if req.n_params is not None
                else optimal_n_params(under, s, req.budget_flops, req.unique)[0]
            )
            a = allocation(under, s, req.budget_flops, n, req.unique, best.rule)
            out[s] = (a.n_params, a.predicted_loss, a.fresh_tokens, a.derived_tokens)
        return out

    own = refit_plans(source, decide)
    shares, n_band = decision_spread(own, choice.tried, chosen)
    n_band, n_no_band = size_interval(source, n_band, best.n_params)
    optimism, optimism_note = judge_optimism(plan_optimism(own, source.law), best, source.law)
    ci, no_band, band_warnings = loss_interval(source, best, chosen, optimism, optimism_note)
    if best.strategy == NONE:  # no derived tokens: no strategy to decide
        shares = None
    return _Band(shares, n_band, n_no_band, optimism, optimism_note, ci, no_band, band_warnings)


def _plan_warnings(
    source: PlanningLaw, req: _Request, choice: _Choice, band_warnings: list[str]
) -> list[str]:
    """What a chosen plan warns of, in order: a fit older than its runs, the law's notes,
    the fitted range, unpinned parameters, strategies left out, the band, then the plan's
    own shape."""
    law, best, chosen = source.law, choice.best, choice.chosen
    warnings = [*filter(None, [source.stale]), *source.notes]
    warnings += [*range_warnings(source, best), *unpinned_warnings(source, best)]
    warnings += [f"{s} left out: {why}" for s, why in choice.left_out.items()]
    warnings += band_warnings
    if choice.on_edge:
        warnings.append(
            "the optimum sits on the edge of the search range (tokens per parameter "
            f"{SEARCH_TOKENS_PER_PARAM[0]:g} to {SEARCH_TOKENS_PER_PARAM[1]:g}): this law has "
            "no interior optimum for this budget"
        )
    if prefers_fewer_fresh_tokens(law, law_strategy(best.strategy, chosen), best):
        rho = law.strategies.get(chosen, {}).get("rho")
        why = f" (its {chosen} rho = {rho:.3g} < -1)" if rho is not None and rho < -1 else ""
        warnings.append(
            "the law predicts a lower loss if some fresh tokens were swapped for derived ones "
            f"at the same compute{why}: an extrapolation artifact, so trust this plan less"
        )
    budget_flops = req.budget_flops
    unspent = budget_flops - 6.0 * best.n_params * best.tokens_trained
    if unspent > 1e-6 * budget_flops:
        warnings.append(
            f"more derived tokens would raise this law's loss (overfitting): the plan stops at "
            f"the loss minimum, D′ = {best.derived_tokens:.3g}, and leaves {unspent:.3g} of the "
            f"{budget_flops:.3g} FLOPs unspent"
        )
    if not law.form_decl.uses_derived and best.derived_tokens > 0:
        warnings.append(f"a {law.form} law gives derived tokens no value; they only spend FLOPs")
    elif not law.form_decl.uses_derived and best.fresh_tokens >= (1 - 1e-6) * req.unique:
        warnings.append(
            f"a {law.form} law gives derived tokens no value, so this plan stops at one epoch "
            "of U and scores the other ways' repeats as worth nothing; to weigh repeats, fit "
            "a law that has them (--law cd or muennighoff) on runs that repeat"
        )
    return warnings


def _assemble(
    source: PlanningLaw,
    req: _Request,
    choice: _Choice,
    band: _Band,
    warnings,
    memory,
    valley=None,
    laws=None,
) -> Plan:
    """The Plan: the choice and its band, with the regime it lands in and the baselines."""
    law, best, chosen = source.law, choice.best, choice.chosen
    t = classify(
        law,
        best.n_params,
        best.fresh_tokens,
        best.derived_tokens,
        law_strategy(best.strategy, chosen),
        saturation=req.saturation,
        tolerance=req.tolerance,
    )
    naive, four = _baselines(source, chosen, req.budget_flops, req.unique, best.predicted_loss)
    return Plan(
        law=source.name,
        law_form=law.form,
        law_source=law.source,
        budget_flops=float(req.budget_flops),
        unique_tokens=req.unique,
        strategy_requested=req.strategy,
        n_params_fixed=req.n_params is not None,
        best=best,
        predicted_loss_ci95=band.ci,
        no_band_reason=band.no_band,
        optimism=band.optimism,
        strategy_share=band.shares,
        n_params_ci95=band.n_band,
        regime=str(t.regime[()]),
        loss_one_epoch=float(t.loss_one_epoch[()]),
        loss_data_floor=float(t.loss_data_floor[()]),
        loss_model_floor=float(t.loss_model_floor[()]),
        derived_gain_share=float(t.derived_gain_share[()]),
        saturation=req.saturation,
        tolerance=req.tolerance,
        marginal_gain_per_flop=marginal_gain_per_flop(
            law, chosen, req.budget_flops, best.n_params, req.unique
        ),
        candidates=choice.candidates,
        naive=naive,
        four_epoch=four,
        memory=memory,
        warnings=tuple(warnings),
        extrapolated=tuple(choice.extrapolated),
        left_out=choice.left_out,
        n_params_no_band_reason=band.n_no_band,
        optimism_note=band.optimism_note,
        valley=valley,
        laws=laws,
    )


def _with_gap(a: Allocation, best_loss: float) -> Allocation:
    """The allocation with its loss_gap to the plan; a baseline that is the plan itself
    (the same N and split, reached another way) differs by float noise, and gets 0."""
    gap = a.predicted_loss - best_loss
    return replace(a, loss_gap=0.0 if abs(gap) < GAP_NOISE else gap)


def _baselines(source, chosen, budget_flops, unique, best_loss) -> tuple[Allocation, Allocation]:
    """The budget planned naively (Chinchilla, repeats as fresh) and by the four-epoch rule.

    Both repeat data, so the CD law scores them as repetition (or, for a law without
    repetition parameters, as the plan's own strategy).
    """
    law = source.law
    s = REPETITION if REPETITION in law.strategies else chosen
    chinchilla_shaped = {"E", "A", "B", "alpha", "beta"} <= set(law.params)
    if chinchilla_shaped:
        n_naive = chinchilla_optimal_n_params(law, budget_flops)
    else:  # the same rule for any law: its optimum with every token counted as fresh
        n_naive, _ = optimal_n_params(law, NONE, budget_flops, math.inf)
    naive = allocation(law, s, budget_flops, n_naive, unique, "naive-chinchilla", True)
    # What the naive planner expects: every token counted as fresh.
    if chinchilla_shaped:
        p = law.params
        believed = chinchilla_loss(
            n_naive, naive.tokens_trained, p["E"], p["A"], p["B"], p["alpha"], p["beta"]
        )
    else:
        believed = law.loss(n_naive, naive.tokens_trained, 0.0, NONE)
    naive = replace(naive, believed_loss=float(believed))
    # Four epochs at most: if Chinchilla wants more than 4U tokens, train on 4U and put the
    # rest of the budget into parameters.
    n_four = n_naive
    if naive.tokens_trained > FOUR_EPOCHS * unique:
        n_four = budget_flops / (6 * FOUR_EPOCHS * unique)
    four = allocation(law, s, budget_flops, n_four, unique, "four-epoch", True)
    return _with_gap(naive, best_loss), _with_gap(four, best_loss)
