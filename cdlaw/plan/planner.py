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
from dataclasses import replace
from functools import partial

import numpy as np

from cdlaw.errors import BadInput
from cdlaw.law import Law
from cdlaw.laws.chinchilla import chinchilla_loss

# Checks on a chosen plan (its band, range warnings, law artifacts): cdlaw.plan.checks.
from cdlaw.plan.checks import (
    BeyondLimit,
    decision_spread,
    guard,
    judge_optimism,
    law_strategy,
    loss_interval,
    plan_optimism,
    prefers_fewer_fresh_tokens,
    range_warnings,
    refit_plans,
    size_interval,
    unpinned_warnings,
)
from cdlaw.plan.requests import check_options, positive, strategies_to_try

# What a plan is (Allocation, Plan, Frontier and their JSON form): cdlaw.plan.result.
from cdlaw.plan.result import Allocation, Frontier, Plan

# Where the law comes from (a preset or a fit.json, with its bootstrap): cdlaw.plan.source.
from cdlaw.plan.source import PlanningLaw, as_planning_law
from cdlaw.regimes import SATURATION, TOLERANCE, classify

FOUR_EPOCHS = 4.0
# The search for N spans tokens-per-parameter from 1e-6 to 1e10 (8 decades of N) on a grid
# of 0.01 decade, so that no sane law has its optimum off the grid; Brent's method then
# refines between the grid neighbours of the best point.
SEARCH_TOKENS_PER_PARAM = (1e-6, 1e10)
GRID_POINTS_PER_DECADE = 100
# Relative step in C for −dL/dC: the loss changes by ~1e-5 nats, far above rounding (1e-15),
# while the O(h²) truncation error stays ~1e-8 relative.
MARGINAL_STEP = 1e-4
# D′ below this share of D is the optimiser's rounding at the T = U kink (its N is known
# to ~1e-7), not a plan to make derived tokens: such a plan trains D′ = 0, its N as much
# larger as spends the same FLOPs.
DERIVED_NOISE = 1e-5

# ---------------------------------------------------------------------------------------
# The optimisation.
# ---------------------------------------------------------------------------------------


def split_tokens(budget_flops, n_params, unique_tokens):
    """Spend the whole budget at model size N: T = C/(6N), D = min(U, T), D′ = T − D."""
    tokens = np.asarray(budget_flops, dtype=float) / (6.0 * np.asarray(n_params, dtype=float))
    fresh = np.minimum(unique_tokens, tokens)
    return fresh, tokens - fresh


def planned_tokens(law: Law, strategy: str, budget_flops, n_params, unique_tokens):
    """(D, D′) a plan trains at model size N: the whole budget (split_tokens), except that
    a law whose loss rises with D′ (overfitting) never gets more derived tokens than its
    loss minimum at that (N, D): the rest of the budget is better left unspent."""
    fresh, derived = split_tokens(budget_flops, n_params, unique_tokens)
    if law.form_decl.can_overfit and strategy != "none":
        derived = np.minimum(derived, law.best_derived_tokens(n_params, fresh, strategy))
    return fresh, derived


def budget_loss(law: Law, strategy: str, budget_flops, n_params, unique_tokens):
    """The law's loss when the budget is spent at model size N (broadcasts; planned_tokens)."""
    fresh, derived = planned_tokens(law, strategy, budget_flops, n_params, unique_tokens)
    return law.loss(n_params, fresh, derived, strategy)


def optimal_n_params(
    law: Law, strategy: str, budget_flops: float, unique_tokens: float
) -> tuple[float, bool]:
    """argmin over N of budget_loss; and whether it sits on the edge of the search range.

    A coarse log grid finds the basin (robust to the kinks at T = U and, for the
    Muennighoff form, at N = U_N, and to flat stretches where derived tokens saturate);
    bounded Brent refines between the grid neighbours of the best point.
    """
    from scipy.optimize import minimize_scalar

    lo_tpp, hi_tpp = SEARCH_TOKENS_PER_PARAM
    # tokens per param = C/(6N²), so N = sqrt(C/(6·tpp)).
    ln_lo = 0.5 * math.log(budget_flops / (6 * hi_tpp))
    ln_hi = 0.5 * math.log(budget_flops / (6 * lo_tpp))
    n_grid = round((ln_hi - ln_lo) / math.log(10) * GRID_POINTS_PER_DECADE) + 1
    grid = np.linspace(ln_lo, ln_hi, n_grid)

    def f(ln_n):
        return budget_loss(law, strategy, budget_flops, np.exp(ln_n), unique_tokens)

    with np.errstate(all="ignore"):
        values = f(grid)
    values = np.where(np.isfinite(values), values, np.inf)
    i = int(np.argmin(values))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, n_grid - 1)]
    with np.errstate(all="ignore"):
        res = minimize_scalar(
            lambda x: float(f(x)), bounds=(a, b), method="bounded", options={"xatol": 1e-10}
        )
    ln_best = float(res.x) if res.fun <= values[i] else float(grid[i])
    on_edge = i in (0, n_grid - 1)
    return math.exp(ln_best), on_edge


def _allocation(
    law, strategy, budget_flops, n_params, unique_tokens, rule, whole_budget=False
) -> Allocation:
    """The allocation at model size N: planned_tokens, or with whole_budget every FLOP spent
    (the baselines: a team without the law trains every token it can afford)."""
    spend = split_tokens if whole_budget else partial(planned_tokens, law, strategy)
    fresh, derived = (float(x) for x in spend(budget_flops, n_params, unique_tokens))
    if 0 < derived < DERIVED_NOISE * fresh:  # the same FLOPs, all on fresh tokens
        n_params, derived = n_params * (fresh + derived) / fresh, 0.0
    loss = float(law.loss(n_params, fresh, derived, strategy))
    label = "none" if derived == 0 else (strategy if strategy != "none" else "repetition")
    return Allocation(rule, float(n_params), fresh, derived, label, loss)


def marginal_gain_per_flop(law, strategy, budget_flops, n_params, unique_tokens) -> float:
    """−dL*/dC at the optimum, for the compute governor (docs/plan.md).

    Along the optimal path N*(C), dL*/dC = ∂L/∂C at fixed N* because ∂L/∂N = 0 there
    (envelope theorem), so a central difference at fixed N gives the derivative of the
    optimal loss without re-optimising (and so without the optimiser's noise). With N
    fixed by the user the path is the fixed-N one, and the same formula is exact.
    """
    h = MARGINAL_STEP
    up = budget_loss(law, strategy, budget_flops * (1 + h), n_params, unique_tokens)
    down = budget_loss(law, strategy, budget_flops * (1 - h), n_params, unique_tokens)
    return float(-(up - down) / (2 * h * budget_flops))


def chinchilla_optimal_n_params(law: Law, budget_flops: float) -> float:
    """N* = G·(C/6)^(β/(α+β)), G = (αA/(βB))^(1/(α+β)) (Hoffmann et al. 2022, eq. 4)."""
    a, b = law.params["alpha"], law.params["beta"]
    G = (a * law.params["A"] / (b * law.params["B"])) ** (1 / (a + b))
    return G * (budget_flops / 6) ** (b / (a + b))


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
    law = source.law
    budget_flops = positive(budget_flops, "--budget-flops")
    unique = math.inf if unique_tokens is None else positive(unique_tokens, "--unique-tokens")
    if n_params is not None:
        n_params = positive(n_params, "--n-params")
    check_options(saturation, tolerance, gpu_memory_gib, gpu_flops, mfu)
    tried = strategies_to_try(source, strategy)

    candidates = {}
    on_edge = False
    for s in tried:
        if n_params is None:
            n, edge = optimal_n_params(law, s, budget_flops, unique)
            on_edge |= edge
            rule = "cd-optimal"
        else:
            n, rule = n_params, "fixed-n_params"
        candidates[s] = _allocation(law, s, budget_flops, n, unique, rule)
    # The one guard (checks.guard): refused, or under `auto` planned among those inside it.
    extrapolated, left_out = guard(source, candidates, strategy, extrapolate)
    tried = [s for s in tried if s not in left_out]
    candidates = {s: a for s, a in candidates.items() if s not in left_out}
    # the law's name for the chosen strategy (for a law without strategies: "none")
    chosen = min(candidates, key=lambda s: candidates[s].predicted_loss)
    best = candidates[chosen]

    for s, a in candidates.items():
        candidates[s] = _with_gap(a, best.predicted_loss)

    t = classify(
        law,
        best.n_params,
        best.fresh_tokens,
        best.derived_tokens,
        law_strategy(best.strategy, chosen),
        saturation=saturation,
        tolerance=tolerance,
    )
    naive, four = _baselines(source, chosen, budget_flops, unique, best.predicted_loss)

    def decide(under: Law) -> dict[str, tuple[float, float, float, float]]:
        """The same search under another law, each allocation made as the plan's own
        (_allocation: D′ of rounding noise is none): {strategy: (N, loss, D, D′)}."""
        out = {}
        for s in tried:
            n = (
                n_params
                if n_params is not None
                else optimal_n_params(under, s, budget_flops, unique)[0]
            )
            a = _allocation(under, s, budget_flops, n, unique, best.rule)
            out[s] = (a.n_params, a.predicted_loss, a.fresh_tokens, a.derived_tokens)
        return out

    # Every bootstrap law plans for itself: how sure the decision is, and how optimistic.
    own = refit_plans(source, decide)
    shares, n_band = decision_spread(own, tried, chosen)
    n_band, n_no_band = size_interval(source, n_band, best.n_params)
    optimism, optimism_note = judge_optimism(plan_optimism(own, law), best, law)
    ci, no_band, band_warnings = loss_interval(source, best, chosen, optimism, optimism_note)
    if best.strategy == "none":  # no derived tokens: no strategy to decide
        shares = None
    warnings = [*source.notes, *range_warnings(source, best), *unpinned_warnings(source, best),
                *(f"{s} left out: {why}" for s, why in left_out.items()), *band_warnings]  # fmt: skip
    if on_edge:
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
    unspent = budget_flops - 6.0 * best.n_params * best.tokens_trained
    if unspent > 1e-6 * budget_flops:
        warnings.append(
            f"more derived tokens would raise this law's loss (overfitting): the plan stops at "
            f"the loss minimum, D′ = {best.derived_tokens:.3g}, and leaves {unspent:.3g} of the "
            f"{budget_flops:.3g} FLOPs unspent"
        )
    if not law.form_decl.uses_derived and best.derived_tokens > 0:
        warnings.append(f"a {law.form} law gives derived tokens no value; they only spend FLOPs")
    memory = None
    if gpu_memory_gib is not None or gpu_flops is not None or mfu is not None:
        from cdlaw.plan.memory import training_cost

        extra = {"seq_len": seq_len, "micro_batch": micro_batch, "vocab_size": vocab_size}
        memory = training_cost(
            best.n_params,
            best.tokens_trained,
            gpu_memory_gib,
            gpu_flops,
            mfu,
            **{k: v for k, v in extra.items() if v is not None},
        ).to_dict()
    return Plan(
        law=source.name,
        law_form=law.form,
        law_source=law.source,
        budget_flops=float(budget_flops),
        unique_tokens=unique,
        strategy_requested=strategy,
        n_params_fixed=n_params is not None,
        best=best,
        predicted_loss_ci95=ci,
        no_band_reason=no_band,
        optimism=optimism,
        strategy_share=shares,
        n_params_ci95=n_band,
        regime=str(t.regime[()]),
        loss_one_epoch=float(t.loss_one_epoch[()]),
        loss_data_floor=float(t.loss_data_floor[()]),
        loss_model_floor=float(t.loss_model_floor[()]),
        derived_gain_share=float(t.derived_gain_share[()]),
        saturation=saturation,
        tolerance=tolerance,
        marginal_gain_per_flop=marginal_gain_per_flop(
            law, chosen, budget_flops, best.n_params, unique
        ),
        candidates=candidates,
        naive=naive,
        four_epoch=four,
        memory=memory,
        warnings=tuple(warnings),
        extrapolated=tuple(extrapolated),
        left_out=left_out,
        n_params_no_band_reason=n_no_band,
        optimism_note=optimism_note,
    )


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
    if int(points) < 2:
        raise BadInput(f"--frontier-points {points}: need at least 2 budgets.")
    return np.logspace(math.log10(lo), math.log10(hi), int(points))


# ---------------------------------------------------------------------------------------
# Pieces of plan().
# ---------------------------------------------------------------------------------------


def _with_gap(a: Allocation, best_loss: float) -> Allocation:
    return replace(a, loss_gap=a.predicted_loss - best_loss)


def _baselines(source, chosen, budget_flops, unique, best_loss) -> tuple[Allocation, Allocation]:
    """The budget planned naively (Chinchilla, repeats as fresh) and by the four-epoch rule.

    Both repeat data, so the CD law scores them as repetition (or, for a law without
    repetition parameters, as the plan's own strategy).
    """
    law = source.law
    s = "repetition" if "repetition" in law.strategies else chosen
    chinchilla_shaped = {"E", "A", "B", "alpha", "beta"} <= set(law.params)
    if chinchilla_shaped:
        n_naive = chinchilla_optimal_n_params(law, budget_flops)
    else:  # the same rule for any law: its optimum with every token counted as fresh
        n_naive, _ = optimal_n_params(law, "none", budget_flops, math.inf)
    naive = _allocation(law, s, budget_flops, n_naive, unique, "naive-chinchilla", True)
    # What the naive planner expects: every token counted as fresh.
    if chinchilla_shaped:
        p = law.params
        believed = chinchilla_loss(
            n_naive, naive.tokens_trained, p["E"], p["A"], p["B"], p["alpha"], p["beta"]
        )
    else:
        believed = law.loss(n_naive, naive.tokens_trained, 0.0, "none")
    naive = replace(naive, believed_loss=float(believed))
    # Four epochs at most: if Chinchilla wants more than 4U tokens, train on 4U and put the
    # rest of the budget into parameters.
    n_four = n_naive
    if naive.tokens_trained > FOUR_EPOCHS * unique:
        n_four = budget_flops / (6 * FOUR_EPOCHS * unique)
    four = _allocation(law, s, budget_flops, n_four, unique, "four-epoch", True)
    return _with_gap(naive, best_loss), _with_gap(four, best_loss)
