"""Checks on a plan: its 95% bands, where it leaves the fitted range, and law artifacts.

This module's one job is to judge a chosen allocation rather than to find it: score it under
the fit's bootstrap laws (the 95% band of its loss), say how often those laws would decide
otherwise (strategy, N) and how optimistic a plan's own prediction is, say which of its
strategy's parameters the runs left at a bound, and notice when the law would rather swap
fresh tokens for derived ones (an extrapolation artifact). Where a plan leaves the fitted
range, and the one guard: cdlaw.plan.guard. cdlaw.plan.planner calls these; they never
import it at run time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cdlaw.law import Law
from cdlaw.plan import EXTRAPOLATION_LIMIT
from cdlaw.plan.result import Allocation
from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NONE
from cdlaw.units import format_number


def law_strategy(label: str, chosen: str) -> str:
    """The strategy name the law evaluates: the chosen one, or "none" for D′ = 0."""
    return NONE if label == NONE else chosen


def prefers_fewer_fresh_tokens(law: Law, strategy: str, best: Allocation) -> bool:
    """Whether ∂L/∂D > 0 at fixed N and D + D′: the law would rather have fewer fresh tokens.

    A sane law never does (a fresh token is worth at least a derived one), but the CD
    law's saturated data D·(1 + R*) with R* ∝ D^ρ shrinks as D grows when ρ < −1, as the
    qin2026 paraphrase fit does once r is large. The plan keeps the plan's D = min(U, T) (docs/plan.md)
    and says so instead of exploiting it.
    """
    if best.derived_tokens == 0 or strategy == NONE:
        return False
    h = 1e-4 * best.fresh_tokens
    moved = law.loss(best.n_params, best.fresh_tokens - h, best.derived_tokens + h, strategy)
    return float(moved) < best.predicted_loss - 1e-12


def loss_band(
    source: PlanningLaw, best: Allocation, chosen: str, optimism: float | None = None
) -> tuple[float, float] | None:
    """95% band: the plan's (N, D, D′) scored under each bootstrap law, 2.5–97.5 percentiles,
    widened on one side by the plan's optimism o (below) when there is one. Widened, not
    shifted: where runs are few the estimate of the optimism overshoots (docs/plan.md), and
    a band that moves by it would cover less, not more.

    Every bound stays a loss the law family can give, above the floor E of the refits it
    comes from. An optimistic plan (o < 0) raises the upper bound by |o|, which no floor
    limits. A pessimistic one (o > 0) lowers the lower bound, and there o nats is applied
    on each refit's log(L − E) scale, where the law is unbounded: its loss E_b + R_b at the
    plan becomes E_b + R_b·e^(−o/R_b), which is E_b + R_b − o to first order while o ≪ R_b
    and never reaches E_b however large o is (an additive o, far from the data, gave
    bounds below E and below zero)."""
    if len(source.bootstrap) < 2:
        return None
    s = law_strategy(best.strategy, chosen)
    losses, floors = np.array(
        [
            (float(b.loss(best.n_params, best.fresh_tokens, best.derived_tokens, s)), b.params["E"])
            for b in source.bootstrap
        ]
    ).T
    keep = np.isfinite(losses)
    losses, floors = losses[keep], floors[keep]
    if losses.size < 2:
        return None
    lo, hi = np.percentile(losses, [2.5, 97.5])
    if optimism is not None and optimism < 0:
        hi -= optimism
    elif optimism is not None and optimism > 0:
        reducible = np.maximum(losses - floors, 0.0)
        with np.errstate(divide="ignore"):
            lowered = floors + reducible * np.exp(-optimism / reducible)
        lo = np.percentile(lowered, 2.5)  # below lo: each refit's loss is lowered
    return float(lo), float(hi)


def judge_optimism(
    optimism: float | None, best: Allocation, law: Law
) -> tuple[float | None, str | None]:
    """The optimism the bootstrap can support, or None and why ("not determined: …").

    An estimate as large as the plan's whole reducible loss L − E says the refits' own plans
    lie where the fit knows nothing (a small sweep planned far from its runs gave −8.9
    nats on a loss of 2.6): no number is better than that one, and the band it would widen
    is not determined either (loss_interval)."""
    if optimism is None:
        return None, None
    reducible = best.predicted_loss - float(law.params.get("E", 0.0))
    if abs(optimism) < reducible:
        return optimism, None
    return None, (
        f"not determined: the bootstrap refits' own plans disagree with the fit by "
        f"{abs(optimism):.3g} nats, as much as the plan's whole reducible loss L − E = "
        f"{reducible:.3g}: the runs do not pin the loss near this optimum"
    )


def loss_interval(
    source: PlanningLaw,
    best: Allocation,
    chosen: str,
    optimism: float | None,
    optimism_note: str | None,
) -> tuple[tuple[float, float] | None, str | None, list[str]]:
    """The plan's 95% loss band that can be true: (band, why none, warnings).

    loss_band, then made to hold what any true loss does: it contains the predicted loss
    (refits all on one side of it are widened to it), is ≥ 0, and where the fitted runs'
    vocabulary V is known never exceeds ln V, a uniform guess's loss (an upper end above it
    is capped there, with a warning). Not determined, and why, where the optimism is not
    (judge_optimism) or the predicted loss itself is above ln V; without refits, why not
    (PlanningLaw.why_no_band)."""
    point = best.predicted_loss
    rng = source.data_range
    vocab, uniform = (None, None) if rng is None else (rng.vocab_size, rng.uniform_loss)
    if uniform is not None and point > uniform:
        why = (
            f"not determined: the predicted loss {point:.4g} is above ln V = {uniform:.4g}, "
            f"a uniform guess over the runs' {vocab} tokens: the law "
            "is past where it means anything"
        )
        return None, why, [why.removeprefix("not determined: ")]
    if optimism_note is not None:
        return None, optimism_note, []
    band = loss_band(source, best, chosen, optimism)
    if band is None:
        why = source.why_no_band() or "no bootstrap refit gives a finite loss at this plan"
        return None, why, []
    lo, hi = max(min(band[0], point), 0.0), max(band[1], point)
    warnings = []
    if uniform is not None and hi > uniform:
        warnings.append(
            f"the 95% band's upper end {hi:.4g} is capped at ln V = {uniform:.4g}, a uniform "
            f"guess over the runs' {vocab} tokens: the refits disagree "
            "past any loss a trained model gives"
        )
        hi = uniform
    return (lo, hi), None, warnings


def size_interval(
    source: PlanningLaw, band: tuple[float, float] | None, n_params: float
) -> tuple[tuple[float, float] | None, str | None]:
    """The 95% band of N the refits' own plans give, made to hold the plan's N, or None and
    why ("not determined: …") where it reaches beyond the extrapolation limit of the fitted
    sizes: refits planning 44 parameters on runs of 26K–200K say the runs do not pin N."""
    if band is None:
        return None, None
    lo, hi = min(band[0], n_params), max(band[1], n_params)
    rng = source.data_range
    small, large = (rng.n_params if rng is not None else None) or (None, None)
    if small is not None and large is not None:
        if lo < small / EXTRAPOLATION_LIMIT or hi > large * EXTRAPOLATION_LIMIT:
            return None, (
                f"not determined: the bootstrap refits' own plans range over N = "
                f"{format_number(lo)}–{format_number(hi)}, beyond {EXTRAPOLATION_LIMIT:g}× the "
                f"fitted sizes ({format_number(small)}–{format_number(large)}): the runs do "
                "not pin N here"
            )
    return (lo, hi), None


# A bootstrap law's own plan: {strategy: (N, loss, D, D′)}, one entry per strategy searched.
OwnPlan = dict[str, tuple[float, float, float, float]]


def refit_plans(source: PlanningLaw, decide: Callable[[Law], OwnPlan]) -> list[OwnPlan]:
    """Every bootstrap law's own plan by the planner's own search (`decide`), with the
    strategies whose search gave a non-finite number left out."""
    plans = []
    for law in source.bootstrap:
        with np.errstate(all="ignore"):
            plans.append({s: o for s, o in decide(law).items() if np.isfinite(o).all()})
    return plans


def plan_optimism(plans: list[OwnPlan], law: Law) -> float | None:
    """How much lower a plan's predicted loss comes out than the loss it gets, as the
    bootstrap sees it (nats; negative: the prediction is optimistic); None with < 2 plans.

    A plan is the minimum of a fitted law over N and strategy, so it lands where the fit's
    errors happen to be favourable, and its predicted loss is biased low: the optimizer's
    curse (Smith & Winkler 2006, Management Science 52:311). The bootstrap repeats the
    choice with the fit standing in for the truth: each refit b plans for itself (x_b), its
    own prediction L_b(x_b) against the fit's loss there, L̂(x_b). The mean of
    L_b(x_b) − L̂(x_b) is Efron's bootstrap estimate of optimism (1983, JASA 78:316): it
    counts both the selection and any bias of the fit itself at the optimum.
    """
    gaps = []
    for options in plans:
        if not options:
            continue
        s = min(options, key=lambda k: options[k][1])
        n, loss, fresh, derived = options[s]
        with np.errstate(all="ignore"):
            point = float(law.loss(n, fresh, derived, s))
        if np.isfinite(point):
            gaps.append(loss - point)
    return float(np.mean(gaps)) if len(gaps) >= 2 else None


def decision_spread(
    plans: list[OwnPlan], strategies: list[str], chosen: str
) -> tuple[dict[str, float] | None, tuple[float, float] | None]:
    """How sure the plan's decision is, from every bootstrap law's own plan (refit_plans).

    Returns the share of bootstrap laws whose best strategy is each of `strategies` (the
    ones the plan chose among; None with one strategy to choose from; a law under which
    two tie, e.g. with no derived tokens, decides nothing and is not counted) and the 95%
    band (2.5–97.5 percentiles) of the N each would train with the chosen strategy (None
    when N does not vary, i.e. it is fixed). The loss band scores one allocation; this says
    whether the allocation itself would move: a team betting on paraphrase should know when
    a third of equally good fits would repeat instead.
    """
    if len(plans) < 2:
        return None, None
    wins: dict[str, int] = {}
    sizes = []
    for options in plans:
        if not options:
            continue
        if chosen in options:
            sizes.append(options[chosen][0])
        losses = sorted(o[1] for o in options.values())
        if len(losses) > 1 and losses[1] - losses[0] <= 1e-12 * abs(losses[0]):
            continue  # a tie: this law has no preference
        best = min(options, key=lambda s: options[s][1])
        wins[best] = wins.get(best, 0) + 1
    shares = None
    total = sum(wins.values())
    if total >= 2 and len(strategies) >= 2:
        shares = {s: wins.get(s, 0) / total for s in strategies}
    band = None
    if len(sizes) >= 2 and np.ptp(sizes) > 0:
        lo, hi = np.percentile(sizes, [2.5, 97.5])
        band = (float(lo), float(hi))
    return shares, band


def strategy_bounds(at_bound: tuple[str, ...], strategy: str) -> list[tuple[str, str]]:
    """(parameter, "lower bound" | "upper bound") for each of the strategy's parameters in a
    fit's optimizer.at_bound notes ("repetition.sigma (lower bound)"); a vanishing term at
    its floor and a start-grid note are not bounds."""
    out = []
    for note in at_bound:
        if note.startswith(f"{strategy}.") and note.endswith(("(lower bound)", "(upper bound)")):
            name, side = note[:-1].split(" (", 1)
            out.append((name, side))
    return out


def unpinned_warnings(source: PlanningLaw, best: Allocation) -> list[str]:
    """The plan's strategy's parameters that the fit's search left at a bound: its runs do
    not pin that strategy's R*, and the bootstrap refits, which hit the same bound, cannot
    show in the band how far it could be."""
    mine = [
        f"{name} at its {side}" for name, side in strategy_bounds(source.at_bound, best.strategy)
    ]
    if not mine:
        return []
    return [
        f"{best.strategy}'s R* is not pinned by the fitted runs ({', '.join(mine)}), so the "
        f"band leaves out how far it could be: train {best.strategy} runs nearer the plan "
        f"(D′/D {format_number(best.derived_ratio)}) before betting on it"
    ]
