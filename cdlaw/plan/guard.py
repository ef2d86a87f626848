"""Where a plan, or one model, leaves the data its law was fitted on, and the one guard
every command applies to it: range warnings (range_excess, range_warnings), the
extrapolation limit (beyond_limit, guard for a plan's candidates, check_model for one
model: `cdlaw govern`'s run, `cdlaw predict`'s model) and what is said of a plan beyond
it (BeyondLimit, extrapolated_text). cdlaw.plan.planner calls these; they never import it.
"""

from __future__ import annotations

import math

from cdlaw.plan import EXTRAPOLATION_LIMIT
from cdlaw.plan.result import Allocation
from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NONE
from cdlaw.system.errors import BadInput
from cdlaw.units import format_number, grouped


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


def _times(ratio: float) -> str:
    """1.005×, 7.38×, 126×, 2,710×, 6.8e+143×: readable at any size, and never a bare "1×"
    for a plan just past the data (201K against 200K is 1.005×)."""
    if ratio < 1.1:
        return f"{ratio:.4f}".rstrip("0").rstrip(".") + "×"
    return f"{ratio:.3g}×" if ratio < 1000 else f"{grouped(ratio)}×"


def _distinct(value: float, bound: float) -> tuple[str, str]:
    """value and bound at 3 significant digits, or at as many more (up to 6) as it takes to
    tell them apart: a plan 0.08% past the data reads "318.25B … (318B)", never "318B is
    1.0008× … (318B)"."""
    for digits in range(3, 7):
        shown, limit = format_number(value, digits), format_number(bound, digits)
        if shown != limit:
            break
    return shown, limit
