"""Checks on a plan: its 95% bands, where it leaves the fitted range, and law artifacts.

This module's one job is to judge a chosen allocation rather than to find it: score it under
the fit's bootstrap laws (the 95% band of its loss), say how often those laws would decide
otherwise (strategy, N) and how optimistic a plan's own prediction is, say where it leaves
the data the law was fitted on and by how much (and where past the extrapolation limit:
beyond_limit), and notice when the law would rather swap fresh tokens for derived ones (an
extrapolation artifact). cdlaw.plan.planner calls these; they never import it at run time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from cdlaw.errors import BadInput
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


def fitted_range(source: PlanningLaw, strategy: str) -> dict:
    """The data the law was fitted on as a plan of `strategy` sees it: each coordinate's
    [min, max] over every fitted run, with the strategy's own runs' derived ratios (where
    the fit has them) in place of every run's. {} for a law without a data range."""
    if source.data_range is None:
        return {}
    rng = source.data_range.to_dict()
    own = rng.get(strategy)
    rng.update(own if isinstance(own, dict) else {})
    return rng


# An excess over the fitted range smaller than this share of the bound is rounding, not an
# extrapolation: 1e-4 is still told apart at the 6 significant digits _distinct allows.
RANGE_TOLERANCE = 1e-4


def range_warnings(source: PlanningLaw, best: Allocation) -> list[str]:
    """Say where the plan leaves the data the law was fitted on, and by how much."""
    return [text for _, _, text in range_excess(source, best)]


# The coordinates EXTRAPOLATION_LIMIT applies to; D follows from N and D/N.
LIMITED = ("n_params", "tokens_per_param", "derived_ratio")


def beyond_limit(source: PlanningLaw, best: Allocation) -> list[str]:
    """The range warnings of the plan's N, D/N and D′/D that lie more than
    EXTRAPOLATION_LIMIT times beyond the fitted range; D′/D only for a law that gives
    derived tokens a value (a chinchilla law extrapolates nothing by them)."""
    uses_derived = source.law.form_decl.uses_derived
    return [
        text
        for key, factor, text in range_excess(source, best)
        if key in LIMITED
        and factor > EXTRAPOLATION_LIMIT
        and (key != "derived_ratio" or uses_derived)
    ]


def guard(
    source: PlanningLaw,
    candidates: dict[str, Allocation],
    requested: str,
    extrapolate: bool,
    budget_flops: float | None = None,
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The one rule every command that plans goes through: may these allocations, one per
    strategy the planner searched, be planned under `source`? Returns the planned
    allocation's coordinates beyond the extrapolation limit (empty inside it) and, under
    strategy `auto`, the strategies left out with why ({strategy: sentence}).

    With extrapolate False a candidate beyond the limit (beyond_limit) is left out when
    `requested` is "auto" and another strategy's plan stays inside; when none does (or a
    strategy was named) BeyondLimit is raised with the best candidate's coordinates: one
    sentence naming --extrapolate, the same from `plan`, `report`, `plot`, `compare`,
    `next` and `adapt`. With extrapolate True nothing is left out and the best candidate's
    coordinates past the limit come back, for the plan to say it is extrapolated.
    """
    best = min(candidates, key=lambda s: candidates[s].predicted_loss)
    beyond = {s: beyond_limit(source, a) for s, a in candidates.items()}
    if extrapolate:
        return tuple(beyond[best]), {}
    inside = [s for s in candidates if not beyond[s]]
    if not inside or (requested != "auto" and beyond[best]):
        raise BeyondLimit(beyond[best], budget_flops)
    left_out = {
        s: f"its plan is beyond the {EXTRAPOLATION_LIMIT:g}× extrapolation limit "
        f"({'; '.join(beyond[s])}); pass --extrapolate to weigh it too"
        for s in candidates
        if beyond[s]
    }
    return (), left_out


def check_model(
    source: PlanningLaw,
    what: str,
    n_params: float,
    fresh: float,
    derived: float,
    strategy: str,
    extrapolate: bool,
) -> list[str]:
    """guard() for one model rather than a plan: `what` ("the run", "the model") at (N, D,
    D′, strategy) beyond the extrapolation limit of the law's fitted range raises BadInput
    naming --extrapolate, as `cdlaw plan` refuses such a plan; with extrapolate, the
    warning every command then says (empty inside the limit)."""
    model = Allocation("model", n_params, fresh, derived, strategy if derived else NONE, math.nan)
    beyond = beyond_limit(source, model)
    if not beyond:
        return []
    if extrapolate:
        return [extrapolated_text(f"{what}: {'; '.join(beyond)}")]
    raise BadInput(
        f"{what} is beyond the {EXTRAPOLATION_LIMIT:g}× extrapolation limit of the range its "
        f"law was fitted on ({'; '.join(beyond)}): give a law fitted on runs nearer it, or "
        "pass --extrapolate to use it anyway"
    )


def extrapolated_text(where: str) -> str:
    """The line every command says first of a plan made beyond the extrapolation limit with
    --extrapolate, `where` naming the coordinates (or budgets) past it."""
    return f"extrapolated beyond {EXTRAPOLATION_LIMIT:g}× the fitted range (--extrapolate): {where}"


def frontier_extrapolated(plans) -> str | None:
    """extrapolated_text for a frontier's plans beyond the limit; None when none is."""
    beyond = [f"{p.budget_flops:.3g}" for p in plans if p.extrapolated]
    if not beyond:
        return None
    return extrapolated_text(f"the plans at C = {', '.join(beyond)} (see their warnings)")


class BeyondLimit(BadInput):
    """A plan beyond the extrapolation limit, refused (plan(..., extrapolate=False)):
    `extrapolated` holds its range warnings past the limit (beyond_limit); the message is
    one sentence, naming the budget where one is given (a frontier's)."""

    def __init__(self, extrapolated, budget_flops: float | None = None):
        self.extrapolated = tuple(extrapolated)
        at, narrow = "", ""
        if budget_flops is not None:
            at, narrow = f"at C = {budget_flops:.3g} ", "narrow --frontier-range, "
        super().__init__(
            f"the plan {at}is beyond the {EXTRAPOLATION_LIMIT:g}× extrapolation limit of the "
            f"range its law was fitted on ({'; '.join(self.extrapolated)}): fit runs nearer "
            f"it, {narrow}or pass --extrapolate to plan it anyway"
        )


def range_excess(source: PlanningLaw, best: Allocation) -> list[tuple[str, float, str]]:
    """(coordinate, factor beyond the fitted range, sentence) for each of the plan's N, D/N,
    D and D′/D outside the data the law was fitted on; the factor is ∞ for a coordinate
    the fit saw only at 0."""
    rng = fitted_range(source, best.strategy)
    per = source.data_range.strategies if source.data_range is not None else {}
    own = per[best.strategy].to_dict() if best.strategy in per else {}
    checks = [
        ("n_params", "N", best.n_params, "size"),
        ("tokens_per_param", "D/N", best.fresh_tokens / best.n_params, "tokens per parameter"),
        ("fresh_tokens", "D", best.fresh_tokens, "fresh-token count"),
        ("derived_ratio", "D′/D", best.derived_ratio, "derived ratio"),
    ]
    out = []
    for key, symbol, value, what in checks:
        bounds = rng.get(key)
        if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
            continue
        lo, hi = (None if b is None else float(b) for b in bounds)
        if key in own:
            what = f"{best.strategy} {what}"
        if hi is not None and value > hi * (1 + RANGE_TOLERANCE):
            if hi > 0:
                shown, bound = _distinct(value, hi)
                text = (
                    f"{symbol} = {shown} is {_times(value / hi)} the largest fitted {what} "
                    f"({bound})"
                )
                out.append((key, value / hi, text))
            else:
                text = f"{symbol} = {format_number(value)} but the fit saw only {symbol} = 0"
                out.append((key, math.inf, text))
        elif lo is not None and lo > 0 and 0 < value < lo * (1 - RANGE_TOLERANCE):
            shown, bound = _distinct(value, lo)
            text = (
                f"{symbol} = {shown} is {_times(lo / value)} below the smallest fitted {what} "
                f"({bound})"
            )
            out.append((key, lo / value, text))
    return out


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


def _times(ratio: float) -> str:
    """1.005×, 7.38×, 126×, 2,710×: readable at any size, and never a bare "1×" for a plan
    just past the data (201K against 200K is 1.005×)."""
    if ratio < 1.1:
        return f"{ratio:.4f}".rstrip("0").rstrip(".") + "×"
    return f"{ratio:.3g}×" if ratio < 1000 else f"{ratio:,.0f}×"


def _distinct(value: float, bound: float) -> tuple[str, str]:
    """value and bound at 3 significant digits, or at as many more (up to 6) as it takes to
    tell them apart: a plan 0.08% past the data reads "318.25B … (318B)", never "318B is
    1.0008× … (318B)"."""
    for digits in range(3, 7):
        shown, limit = format_number(value, digits), format_number(bound, digits)
        if shown != limit:
            break
    return shown, limit
