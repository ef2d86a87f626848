"""What the compute governor is asked (GovernOptions) and what it says (Decision, with one
Option per way to finish the run); cdlaw.govern.governor fills them, `cdlaw govern` renders
them. Dataclasses only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from cdlaw.govern.cooldown import DEMO, Cooldown

ACTIONS = ("continue", "switch strategy", "cool down now")


MODELS = ("auto", "curve", "relation")


@dataclass(frozen=True)
class GovernOptions:
    """The budget and what the run is, where its curve does not say (None: from the curve).
    Without a budget the governor predicts the run's endings and decides nothing on FLOPs."""

    budget_flops: float | None
    unique_tokens: float | None
    n_params: float | None = None
    fresh_tokens: float | None = None  # D: the run's unique tokens (default: U)
    strategy: str | None = None  # how the run makes tokens past D (default: repetition)
    planned_tokens: float | None = None  # the run's scheduled D + D′ (default: the budget's)
    decay_frac: float | None = None
    cooldown: Cooldown = DEMO
    extrapolate: bool = False  # govern beyond the law's extrapolation limit (--extrapolate)
    # The planned lr schedule (cdlaw.govern.lr_plan), where the run's config does not say:
    # a file, or a named shape with its warmup and final lr; else the log's own lr column.
    schedule: str | None = None
    schedule_file: Path | None = None
    warmup: float | None = None  # steps (below 1: a share of the planned steps)
    final_lr_ratio: float | None = None
    batch_tokens: float | None = None  # tokens per step, where the log does not say
    # Which model predicts the ends: the run's curve law, the WSD relation (the CD law and
    # the stable-to-cooled ratio), or auto (cdlaw.govern.model.choose_model)
    model: str = "auto"
    cooldown_from: bool = False  # the ratio was fitted on the user's own sweep
    refits: int = 100  # bootstrap refits of each curve law


@dataclass(frozen=True)
class Option:
    """One way to finish the run: where it ends, its loss (95% band) and its cost."""

    name: str  # "cool down now", "planned end", "best stop", "switch to <s>"
    end_tokens: float | None  # None: a log that counts steps only
    loss: float
    loss_ci95: tuple[float, float] | None
    flops: float | None  # None: N or the tokens unknown
    objective: float  # loss + λ·flops (the loss alone without a budget)
    end_step: float | None = None  # where the curve law governs (steps of the schedule)

    def to_dict(self) -> dict:
        return {**asdict(self), "loss_ci95": list(self.loss_ci95) if self.loss_ci95 else None}


@dataclass(frozen=True)
class Decision:
    """What the governor says and why; to_dict() is `cdlaw govern --json`."""

    action: str  # one of ACTIONS
    reasons: tuple[str, ...]
    source: str
    loss_column: str  # the log's column the run's curve was read from
    law: str | None  # the CD law (a fit.json or a preset); None: none was needed
    n_params: float | None
    fresh_tokens: float | None
    strategy: str | None
    decay_frac: float
    tokens_now: float | None  # the point a cooldown would start from (tokens)
    flops_now: float | None
    cooling: bool  # the log's last point is already past the peak lr
    gain_now: float | None  # G_t, nats per FLOP (None: FLOPs unknown)
    gain_now_ci95: tuple[float, float] | None
    threshold: float | None  # λ(C); None without a budget
    budget_flops: float | None
    unique_tokens: float | None
    plan_n_params: float | None
    plan_strategy: str | None
    offset: float | None  # δ, nats (the WSD relation only)
    offset_se: float | None
    cross_tokens: float | None  # where G falls to λ (stop point t); None: not within budget
    cross_flops: float | None
    switch_to: str | None
    options: tuple[Option, ...]
    cooldown: dict | None  # the stable-to-cooled ratio (the WSD relation only)
    curve: dict = field(default_factory=dict)  # the observed and predicted curves (figure)
    warnings: tuple[str, ...] = ()
    # which model predicted the ends, and why (cdlaw.govern.model); the lr schedule it
    # read them on; the curve laws' fits (the curve law only); the last step seen
    model: str = "WSD relation"
    model_reason: str = ""
    schedule: str | None = None
    curve_laws: dict | None = None
    steps_now: float | None = None

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
                "model",
                "model_reason",
                "schedule",
                "curve_laws",
                "steps_now",
            )
        }
        out["reasons"] = list(self.reasons)
        out["gain_now_ci95"] = list(self.gain_now_ci95) if self.gain_now_ci95 else None
        out["options"] = [o.to_dict() for o in self.options]
        out["curve"] = {k: [float(x) for x in v] for k, v in self.curve.items()}
        out["warnings"] = list(self.warnings)
        return out
