"""What the compute governor is asked (GovernOptions) and what it says (Decision, with one
Option per way to finish the run); cdlaw.govern.governor fills them, `cdlaw govern` renders
them. Dataclasses only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from cdlaw.govern.cooldown import DEMO, Cooldown

ACTIONS = ("continue", "switch strategy", "cool down now")


@dataclass(frozen=True)
class GovernOptions:
    """The budget and what the run is, where its curve does not say (None: from the curve)."""

    budget_flops: float
    unique_tokens: float
    n_params: float | None = None
    fresh_tokens: float | None = None  # D: the run's unique tokens (default: U)
    strategy: str | None = None  # how the run makes tokens past D (default: repetition)
    planned_tokens: float | None = None  # the run's scheduled D + D′ (default: the budget's)
    decay_frac: float | None = None
    cooldown: Cooldown = DEMO
    extrapolate: bool = False  # govern beyond the law's extrapolation limit (--extrapolate)


@dataclass(frozen=True)
class Option:
    """One way to finish the run: where it ends, its loss (95% band) and its cost."""

    name: str  # "cool down now", "planned end", "best stop", "switch to <s>"
    end_tokens: float
    loss: float
    loss_ci95: tuple[float, float] | None
    flops: float
    objective: float  # loss + λ·flops

    def to_dict(self) -> dict:
        return {**asdict(self), "loss_ci95": list(self.loss_ci95) if self.loss_ci95 else None}


@dataclass(frozen=True)
class Decision:
    """What the governor says and why; to_dict() is `cdlaw govern --json`."""

    action: str  # one of ACTIONS
    reasons: tuple[str, ...]
    source: str
    loss_column: str  # the log's column the run's curve was read from
    law: str
    n_params: float
    fresh_tokens: float
    strategy: str
    decay_frac: float
    tokens_now: float  # the last stable point: where a cooldown would start
    flops_now: float
    cooling: bool  # the log's last point is already past the peak lr
    gain_now: float  # G_t, nats per FLOP
    gain_now_ci95: tuple[float, float] | None
    threshold: float  # λ(C)
    budget_flops: float
    unique_tokens: float
    plan_n_params: float
    plan_strategy: str
    offset: float  # δ, nats
    offset_se: float
    cross_tokens: float | None  # where G falls to λ (stop point t); None: not within budget
    cross_flops: float | None
    switch_to: str | None
    options: tuple[Option, ...]
    cooldown: dict
    curve: dict = field(default_factory=dict)  # the observed and predicted curves (figure)
    warnings: tuple[str, ...] = ()

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def to_dict(self) -> dict:
        out = {
            k: getattr(self, k)
            for k in (
                "action",
                "source",
                "loss_column",
                "law",
                "n_params",
                "fresh_tokens",
                "strategy",
                "decay_frac",
                "tokens_now",
                "flops_now",
                "cooling",
                "gain_now",
                "threshold",
                "budget_flops",
                "unique_tokens",
                "plan_n_params",
                "plan_strategy",
                "offset",
                "offset_se",
                "cross_tokens",
                "cross_flops",
                "switch_to",
                "cooldown",
            )
        }
        out["reasons"] = list(self.reasons)
        out["gain_now_ci95"] = list(self.gain_now_ci95) if self.gain_now_ci95 else None
        out["options"] = [o.to_dict() for o in self.options]
        out["curve"] = {k: [float(x) for x in v] for k, v in self.curve.items()}
        out["warnings"] = list(self.warnings)
        return out
