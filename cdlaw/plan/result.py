"""What a plan is: the result dataclasses of cdlaw.plan.planner, and their JSON form.

An Allocation is one way of spending a budget, (N, D, D′, strategy) with the CD law's loss
for it; a Plan is the best allocation with the baselines it is compared against and its
regime; a Frontier is plans over a range of budgets. to_dict() gives the names of
docs/names.md and docs/plan.md (what `cdlaw plan --json` prints), and from_dict() reads a
plan back. Dataclasses only: the optimisation that fills them is cdlaw.plan.planner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from cdlaw.strategies import BUILT_IN, FRESH_ONLY, NONE, PARAPHRASE, REPETITION
from cdlaw.units import counted, format_number


@dataclass(frozen=True)
class Allocation:
    """(N, D, D′, strategy) for one budget, and the CD law's loss for it."""

    rule: str  # "cd-optimal", "naive-chinchilla", "four-epoch", or "fixed-n_params"
    n_params: float
    fresh_tokens: float
    derived_tokens: float
    strategy: str  # "none" when D′ = 0
    predicted_loss: float
    loss_gap: float | None = None  # this loss minus the plan's (positive: the plan is better)
    believed_loss: float | None = None  # what the rule itself predicts (naive: Chinchilla)

    @property
    def tokens_trained(self) -> float:
        return self.fresh_tokens + self.derived_tokens

    @property
    def derived_ratio(self) -> float:
        return self.derived_tokens / self.fresh_tokens

    @property
    def epochs(self) -> float:
        """Passes over the fresh tokens: (D + D′)/D for repetition, 1 otherwise."""
        return self.tokens_trained / self.fresh_tokens if self.strategy == REPETITION else 1.0

    @property
    def paraphrase_passes(self) -> float:
        """D′/D for paraphrase: how many corpora's worth of paraphrases; 0 otherwise."""
        return self.derived_ratio if self.strategy == PARAPHRASE else 0.0

    @property
    def derived_passes(self) -> float:
        """D′/D for any strategy but repetition (paraphrase, distill, …): how many passes of
        its derived files (or rendered paraphrases) over D; 0 for repetition and D′ = 0."""
        return self.derived_ratio if self.strategy not in FRESH_ONLY else 0.0

    @property
    def uses_count(self) -> float:
        """The number `uses` says: epochs of repetition, D′/D passes of any other derived
        strategy, 1 for D′ = 0."""
        if self.strategy == REPETITION:
            return self.epochs
        return self.derived_ratio if self.strategy != NONE else 1.0

    @property
    def uses(self) -> str:
        """How the derived tokens are made, in words: '7.53 epochs' (repetition), '4.35
        passes' (D′/D of paraphrase or any other derived strategy), '1 epoch' (D′ = 0)."""
        if self.strategy == NONE:
            return "1 epoch"
        return counted(self.uses_count, "epoch" if self.strategy == REPETITION else "pass")

    def to_dict(self) -> dict:
        """docs/plan.md's names; `derived_passes` only for a strategy beyond the built-in
        ones, so the plans of none, repetition and paraphrase read as they always have."""
        declared = self.strategy not in (NONE, *BUILT_IN)
        return {
            "rule": self.rule,
            "n_params": self.n_params,
            "fresh_tokens": self.fresh_tokens,
            "derived_tokens": self.derived_tokens,
            "tokens_trained": self.tokens_trained,
            "derived_ratio": self.derived_ratio,
            "strategy": self.strategy,
            "epochs": self.epochs,
            "paraphrase_passes": self.paraphrase_passes,
            **({"derived_passes": self.derived_passes} if declared else {}),
            "tokens_per_param": self.fresh_tokens / self.n_params,
            "predicted_loss": self.predicted_loss,
            "loss_gap": self.loss_gap,
            "believed_loss": self.believed_loss,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Allocation:
        values: dict[str, Any] = {f.name: d.get(f.name) for f in fields(cls)}
        return cls(**values)


@dataclass(frozen=True)
class Valley:
    """The ends of the valley: the smallest and the largest N whose loss is within the band,
    as allocations of the plan's budget and strategy (the smaller N trains more tokens:
    more epochs or passes)."""

    small: Allocation  # the smallest N in the valley
    large: Allocation  # the largest
    loss_ceiling: float  # the band's upper end: the loss the valley stays under
    on_edge: bool  # an end is the edge of the planner's search range, not of the valley

    def to_dict(self) -> dict:
        """`valley` in `cdlaw plan --json`: each quantity as [at the small N, at the large N]."""
        ends = (self.small, self.large)
        return {
            "n_params": [a.n_params for a in ends],
            "fresh_tokens": [a.fresh_tokens for a in ends],
            "derived_tokens": [a.derived_tokens for a in ends],
            "tokens_per_param": [a.fresh_tokens / a.n_params for a in ends],
            "epochs": [a.epochs for a in ends],
            "paraphrase_passes": [a.paraphrase_passes for a in ends],
            "derived_ratio": [a.derived_ratio for a in ends],
            "uses": [a.uses for a in ends],
            "predicted_loss": [a.predicted_loss for a in ends],
            "loss_ceiling": self.loss_ceiling,
            "on_edge": self.on_edge,
        }

    @classmethod
    def from_dict(cls, d: dict, strategy: str) -> Valley:
        """Read back to_dict (a plan's strategy names both ends)."""
        ends = [
            Allocation(
                "valley",
                float(d["n_params"][i]),
                float(d["fresh_tokens"][i]),
                float(d["derived_tokens"][i]),
                strategy if float(d["derived_tokens"][i]) > 0 else "none",
                float(d["predicted_loss"][i]),
            )
            for i in (0, 1)
        ]
        return cls(ends[0], ends[1], float(d["loss_ceiling"]), bool(d.get("on_edge", False)))


def _names(laws) -> str:
    """'a', 'a and b', 'a, b and c'."""
    laws = list(laws)
    return laws[0] if len(laws) == 1 else ", ".join(laws[:-1]) + f" and {laws[-1]}"


@dataclass(frozen=True)
class LawNote:
    """How the plan's law was chosen and how far the other laws' plans lie from it.

    plans: per law of the comparison, its own plan of the budget (n_params, strategy,
    uses, predicted_loss: its own loss) and `loss_under_plan`, that allocation's loss under
    the plan's law (None where that law has no parameters for its strategy).
    """

    used: str  # the plan's law form
    winner: str  # the comparison's best law at predicting the held-out largest size
    why: str  # one clause: why the plan's law, as the comparison sees it
    plans: dict[str, dict]
    n_params_range: tuple[float, float]  # the laws' plans' smallest and largest N
    beyond_band: tuple[str, ...]  # laws whose plan loses more than the band under the plan's law
    band_ceiling: float | None  # the plan's band's upper end (None: no band to judge by)
    source: str  # the compare.json read

    @property
    def differ(self) -> bool:
        """Whether the laws' plans differ by more than the band (some plan outside it)."""
        return bool(self.beyond_band)

    def text(self) -> str:
        """The note in words: the law used and why, then the laws' spread."""
        lo, hi = self.n_params_range
        at = {law: p["n_params"] for law, p in self.plans.items()}
        smallest, largest = min(at, key=at.__getitem__), max(at, key=at.__getitem__)
        spread = (
            f"the {len(self.plans)} laws compared ({self.source}) plan this budget at N "
            f"{format_number(lo)} ({smallest}) to {format_number(hi)} ({largest})"
        )
        if self.band_ceiling is None:
            judged = "; without a band, whether that matters is not known"
        elif self.beyond_band:
            verb = "lies" if len(self.beyond_band) == 1 else "lie"
            judged = (
                f"; {_names(self.beyond_band)}'s {verb} above the plan's 95% band under the "
                f"{self.used} law: the plan depends on the law more than on the runs' noise"
            )
        else:
            judged = ", every one within the plan's 95% band: the plan does not hang on the law"
        return (
            f"the plan uses the {self.used} law{self.why}. {spread[0].upper()}{spread[1:]}{judged}"
        )

    @classmethod
    def from_dict(cls, d: dict) -> LawNote:
        """Read back to_dict."""
        ceiling = d.get("band_ceiling")
        return cls(
            str(d["used"]), str(d["winner"]), str(d["why"]), dict(d["plans"]),
            (float(d["n_params_range"][0]), float(d["n_params_range"][1])),
            tuple(d.get("beyond_band") or ()), None if ceiling is None else float(ceiling),
            str(d.get("source", "")),
        )  # fmt: skip

    def to_dict(self) -> dict:
        """`laws` in `cdlaw plan --json`."""
        return {
            "used": self.used,
            "winner": self.winner,
            "why": self.why,
            "plans": self.plans,
            "n_params_range": list(self.n_params_range),
            "beyond_band": list(self.beyond_band),
            "differ": self.differ,
            "band_ceiling": self.band_ceiling,
            "source": self.source,
            "text": self.text(),
        }


@dataclass(frozen=True)
class Plan:
    """The best allocation of a budget under a law, with what it is compared against.

    `to_dict()` uses the names of docs/names.md and docs/plan.md; the regime fields are flat (regime, loss_one_epoch,
    loss_data_floor, loss_model_floor, saturation, tolerance) so that a frontier's rows load
    straight into a table.
    """

    law: str
    law_form: str
    law_source: str
    budget_flops: float
    unique_tokens: float  # math.inf: unlimited
    strategy_requested: str
    n_params_fixed: bool
    best: Allocation
    predicted_loss_ci95: tuple[float, float] | None
    regime: str
    loss_one_epoch: float
    loss_data_floor: float
    loss_model_floor: float
    derived_gain_share: float
    saturation: float
    tolerance: float
    marginal_gain_per_flop: float
    candidates: dict[str, Allocation]
    naive: Allocation
    four_epoch: Allocation
    memory: dict | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # the bootstrap laws' own plans: the share choosing each strategy, the 95% band of N
    strategy_share: dict[str, float] | None = None
    n_params_ci95: tuple[float, float] | None = None
    # the bootstrap's estimate of how much lower the predicted loss is than the loss the
    # plan will get (nats, negative: optimistic); the band is widened by it
    optimism: float | None = None
    # where the plan lies beyond the extrapolation limit of its fitted range (a sentence per
    # coordinate; empty inside it): a plan `cdlaw plan --extrapolate` insisted on
    extrapolated: tuple[str, ...] = ()
    # why predicted_loss_ci95 is None, as a clause naming the fix (None with a band)
    no_band_reason: str | None = None
    # the task metrics this plan predicts through task links (`cdlaw plan --link`): one
    # cdlaw.tasks.plan_metrics.TaskPrediction.to_dict() per link; () without links
    tasks: tuple[dict, ...] = ()
    # under strategy auto, the strategies whose plan lay beyond the extrapolation limit and
    # were left out of the choice: {strategy: why}
    left_out: dict[str, str] = field(default_factory=dict)
    # why n_params_ci95 is None though the refits planned, as a clause (None otherwise)
    n_params_no_band_reason: str | None = None
    # why optimism is None though the refits planned, as a clause (None otherwise)
    optimism_note: str | None = None
    # the model sizes whose loss along the budget is within the band (cdlaw.plan.valley):
    # what the runs cannot tell from the plan; None without a band or with --n-params
    valley: Valley | None = None
    # which law the plan used and why, and the competing laws' plans of the same budget
    # (cdlaw.plan.laws), where a comparison sits beside the fit; None otherwise
    laws: LawNote | None = None

    # The chosen allocation's numbers, read through (docs/plan.md names).
    @property
    def n_params(self) -> float:
        return self.best.n_params

    @property
    def fresh_tokens(self) -> float:
        return self.best.fresh_tokens

    @property
    def derived_tokens(self) -> float:
        return self.best.derived_tokens

    @property
    def strategy(self) -> str:
        return self.best.strategy

    @property
    def predicted_loss(self) -> float:
        return self.best.predicted_loss

    @property
    def epochs(self) -> float:
        return self.best.epochs

    @property
    def strategy_agreement(self) -> float | None:
        """The share of bootstrap refits whose own plan picks this plan's strategy (None:
        no strategy decision, see strategy_share)."""
        return self.strategy_share.get(self.strategy, 0.0) if self.strategy_share else None

    @property
    def paraphrase_passes(self) -> float:
        return self.best.paraphrase_passes

    @property
    def derived_passes(self) -> float:
        return self.best.derived_passes

    @property
    def marginal_gain_per_doubling(self) -> float:
        """−dL/dlog₂C: nats the loss drops if the budget doubles (to first order)."""
        return self.marginal_gain_per_flop * self.budget_flops * math.log(2)

    def to_dict(self) -> dict:
        best = self.best.to_dict()
        best.pop("rule")
        best.pop("loss_gap")
        best.pop("believed_loss")
        return {
            "law": self.law,
            "law_form": self.law_form,
            "law_source": self.law_source,
            "budget_flops": self.budget_flops,
            "unique_tokens": self.unique_tokens if math.isfinite(self.unique_tokens) else None,
            "strategy_requested": self.strategy_requested,
            "n_params_fixed": self.n_params_fixed,
            **best,
            "flops": 6 * self.best.n_params * self.best.tokens_trained,
            "predicted_loss_ci95": list(self.predicted_loss_ci95)
            if self.predicted_loss_ci95
            else None,
            "no_band_reason": self.no_band_reason,
            "optimism": self.optimism,
            "strategy_share": self.strategy_share,
            "n_params_ci95": list(self.n_params_ci95) if self.n_params_ci95 else None,
            "regime": self.regime,
            "loss_one_epoch": self.loss_one_epoch,
            "loss_data_floor": self.loss_data_floor,
            "loss_model_floor": self.loss_model_floor,
            "derived_gain_share": self.derived_gain_share,
            "saturation": self.saturation,
            "tolerance": self.tolerance,
            "marginal_gain_per_flop": self.marginal_gain_per_flop,
            "marginal_gain_per_doubling": self.marginal_gain_per_doubling,
            "candidates": {s: a.to_dict() for s, a in self.candidates.items()},
            "naive": self.naive.to_dict(),
            "four_epoch": self.four_epoch.to_dict(),
            "memory": self.memory,
            "warnings": list(self.warnings),
            "extrapolated": list(self.extrapolated),
            "left_out": dict(self.left_out),
            "n_params_no_band_reason": self.n_params_no_band_reason,
            "optimism_note": self.optimism_note,
            "valley": self.valley.to_dict() if self.valley else None,
            "laws": self.laws.to_dict() if self.laws else None,
            # only with --link, so a plan without links reads as it always has
            **({"tasks": [dict(t) for t in self.tasks]} if self.tasks else {}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        """Read back a plan written by to_dict (e.g. a frontier row of `cdlaw plan --json`)."""
        best = Allocation.from_dict({**d, "rule": _best_rule(d), "loss_gap": None})
        unique = d["unique_tokens"]
        ci = d.get("predicted_loss_ci95")
        return cls(
            law=d["law"],
            law_form=d["law_form"],
            law_source=d["law_source"],
            budget_flops=d["budget_flops"],
            unique_tokens=math.inf if unique is None else unique,
            strategy_requested=d["strategy_requested"],
            n_params_fixed=d["n_params_fixed"],
            best=best,
            predicted_loss_ci95=tuple(ci) if ci else None,
            no_band_reason=d.get("no_band_reason"),
            optimism=d.get("optimism"),
            strategy_share=d.get("strategy_share"),
            n_params_ci95=tuple(d["n_params_ci95"]) if d.get("n_params_ci95") else None,
            regime=d["regime"],
            loss_one_epoch=d["loss_one_epoch"],
            loss_data_floor=d["loss_data_floor"],
            loss_model_floor=d["loss_model_floor"],
            derived_gain_share=d["derived_gain_share"],
            saturation=d["saturation"],
            tolerance=d["tolerance"],
            marginal_gain_per_flop=d["marginal_gain_per_flop"],
            candidates={s: Allocation.from_dict(a) for s, a in d["candidates"].items()},
            naive=Allocation.from_dict(d["naive"]),
            four_epoch=Allocation.from_dict(d["four_epoch"]),
            memory=d.get("memory"),
            warnings=tuple(d.get("warnings") or ()),
            extrapolated=tuple(d.get("extrapolated") or ()),
            tasks=tuple(d.get("tasks") or ()),
            left_out=dict(d.get("left_out") or {}),
            n_params_no_band_reason=d.get("n_params_no_band_reason"),
            optimism_note=d.get("optimism_note"),
            valley=Valley.from_dict(d["valley"], best.strategy) if d.get("valley") else None,
            laws=LawNote.from_dict(d["laws"]) if d.get("laws") else None,
        )


def _best_rule(d: dict) -> str:
    return "fixed-n_params" if d.get("n_params_fixed") else "cd-optimal"


@dataclass(frozen=True)
class Frontier:
    """Plans over a range of budgets; to_dict() is what `cdlaw plan --frontier --json` prints
    and what `cdlaw plot --kind frontier` reads back."""

    law: str  # the preset name or fit.json path the plans used
    law_params: dict  # Law.to_dict() of that law
    unique_tokens: float | None
    strategy: str
    plans: tuple[Plan, ...]
    # Budgets left out because their plan lies beyond the extrapolation limit (empty with
    # --extrapolate, which plans them all and marks each plan's `extrapolated`).
    beyond_limit: tuple[float, ...] = ()

    def to_dict(self) -> dict:
        return {
            "law": self.law,
            "law_params": self.law_params,
            "unique_tokens": self.unique_tokens,
            "strategy": self.strategy,
            "rows": [p.to_dict() for p in self.plans],
            "beyond_limit": list(self.beyond_limit),
        }
