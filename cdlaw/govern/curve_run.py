"""A run as its curve law governs it: its steps, its planned lr schedule, what a token
is worth to it, and the endings its continuation predicts.

    run = curve_run(curve, source, options)          # cdlaw.govern.curve_governor calls it
    loss, lo, hi = run.end(run.plan.lr)              # the planned end

The planned schedule comes from --schedule-file, else --schedule (with --warmup,
--final-lr-ratio, --planned-tokens), else a cdlaw run's config, else the log's own lr
column (cdlaw.govern.lr_plan); a log that gives none of them is refused. The curve laws
count optimizer steps: the log's, else its tokens over the tokens per step (the log's own
ratio, --batch-tokens, a run's config). Past the run's fresh tokens D each step's lr
counts in the forward area as much as a token is then worth under the CD law's η
(effective_tokens), so a data-constrained run's continuation bends as η says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cdlaw.govern.continuation import Continuation, fit_continuation
from cdlaw.govern.curve import Curve
from cdlaw.govern.decision import GovernOptions
from cdlaw.govern.lr_plan import (
    LrPlan,
    config_plan,
    file_plan,
    inferred_plan,
    named_plan,
)
from cdlaw.govern.run_loss import effective_tokens
from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NONE, REPETITION
from cdlaw.system.errors import BadInput

# Tokens per step assumed for a log that counts tokens only, when nothing says its batch:
# the curve laws' time is the optimizer step (about 1M tokens for a mid-size LLM).
NOMINAL_TOKENS_PER_STEP = 2**20
# The curve laws read the schedule step by step: a plan of more steps than this is refused
# (a run of 100M parameters at 256 tokens per step, not a run anyone trains that way).
MAX_PLAN_STEPS = 5_000_000
LR_AGREES = 0.05  # the log's lr may depart from the plan's by this share of the peak


@dataclass
class CurveRun:
    """The run in steps: where it is (now), its plan, what each step is worth (weights,
    None while every token is fresh), and its continuation."""

    curve: Curve
    steps: np.ndarray  # each logged point's step
    now: int
    plan: LrPlan
    tokens_per_step: float | None
    n: float | None
    fresh: float | None
    strategy: str
    law: PlanningLaw | None
    horizon: int  # the last step any ending reaches
    weights: np.ndarray | None
    cont: Continuation
    warnings: list[str]

    def tokens(self, step) -> np.ndarray | float | None:
        """Tokens at a step (None where the tokens per step are unknown)."""
        if self.tokens_per_step is None:
            return None
        return np.asarray(step, dtype=float) * self.tokens_per_step

    def flops(self, step) -> float | None:
        if self.tokens_per_step is None or self.n is None:
            return None
        return float(6.0 * self.n * step * self.tokens_per_step)

    def end(self, lr: np.ndarray, weights: np.ndarray | None = None):
        """(loss, lo, hi) at the last step of the schedule lr."""
        w = self.weights if weights is None else weights
        return self.cont.predict(lr, None if w is None else _fit(w, len(lr)))

    def switched(self, other: str) -> np.ndarray | None:
        """Each step's worth if the run switches to `other` now (None: no CD law)."""
        if self.weights is None or self.law is None or self.tokens_per_step is None:
            return None
        assert self.n is not None and self.fresh is not None
        at = self.now * self.tokens_per_step
        return _weights(self.law, self.n, self.fresh, self.strategy, self.horizon,
                        self.tokens_per_step, other, at)  # fmt: skip


def curve_run(
    curve: Curve, source: PlanningLaw | None, options: GovernOptions, horizon_steps=None
) -> CurveRun:
    """The run, its plan and its fitted continuation; BadInput naming what is missing."""
    warnings = list(curve.warnings)
    tps = curve.tokens_per_step or options.batch_tokens or _config_batch(curve.config)
    steps = curve.steps
    if steps is None:
        tokens = curve.token_counts
        if tps is None:
            steps = tokens / NOMINAL_TOKENS_PER_STEP
            warnings.append(
                f"the log counts tokens, not steps, and nothing says its batch: the curve laws "
                f"read it at {NOMINAL_TOKENS_PER_STEP:,} tokens per step (--batch-tokens gives "
                "the run's own)"
            )
        else:
            steps = tokens / tps
    now = round(float(steps[-1]))
    plan = resolve_plan(curve, options, steps, tps or NOMINAL_TOKENS_PER_STEP)
    if plan.steps > MAX_PLAN_STEPS:
        raise BadInput(
            f"the planned schedule ({plan.source}) has {plan.steps:,} steps; the curve laws "
            f"read up to {MAX_PLAN_STEPS:,}: check --batch-tokens, or govern it by the WSD "
            "relation (--model relation)"
        )
    if plan.steps < now:
        raise BadInput(
            f"the planned schedule ({plan.source}) ends at step {plan.steps:,}, before the log's "
            f"last step {now:,}: give the schedule to the run's planned end"
        )
    warnings += _lr_check(curve, steps, plan)
    n = options.n_params or curve.n_params
    fresh = options.fresh_tokens or curve.fresh_tokens or options.unique_tokens
    strategy = options.strategy or curve.strategy or REPETITION
    strategy = REPETITION if strategy == NONE else strategy
    horizon = max(plan.steps, int(horizon_steps or 0), now + 1)
    law = source if source is not None and source.law.form_decl.uses_derived else None
    weights = None
    if law is not None and fresh and tps and n and horizon * tps > fresh:
        if not law.law.knows_strategy(strategy):
            raise BadInput(
                f"the law has no parameters for strategy {strategy!r} (it has: "
                f"{', '.join(law.law.strategies) or 'none'}); give --strategy with one it has"
            )
        from cdlaw.plan.guard import check_model

        end = horizon * tps
        warnings += check_model(law, "the run", n, fresh, max(end - fresh, 0.0), strategy,
                                options.extrapolate)  # fmt: skip
        weights = _weights(law, n, fresh, strategy, horizon, tps)
    elif fresh and tps and horizon * tps > fresh * (1 + 1e-9):
        warnings.append(
            f"the run goes past its D = {fresh:.4g} fresh tokens and no CD law says what a "
            "repeated or derived token is worth: its curve law alone predicts it (--law)"
        )
    lr = plan.trunk(horizon)
    cont = fit_continuation(steps, curve.loss, lr, plan.peak,
                            None if weights is None else weights[: len(lr)],
                            refits=options.refits, where=curve.source)  # fmt: skip
    return CurveRun(curve, steps, now, plan, tps, n, fresh, strategy, law, horizon, weights,
                    cont, warnings)  # fmt: skip


def resolve_plan(curve: Curve, options: GovernOptions, steps: np.ndarray, tps: float) -> LrPlan:
    """The planned schedule: --schedule-file, --schedule, the run's config, the log's lr."""
    planned = _planned_steps(curve, options, tps)
    f = options.decay_frac if options.decay_frac is not None else curve.decay_frac
    peak = None if curve.lr is None else float(np.nanmax(curve.lr))
    if options.schedule_file is not None:
        return file_plan(options.schedule_file, tps, f)
    if options.schedule is not None:
        if planned is None:
            raise BadInput(
                f"--schedule {options.schedule} needs the run's planned length: give "
                "--planned-tokens"
            )
        return named_plan(options.schedule, planned, options.warmup or 0.0,
                          options.final_lr_ratio, peak, f)  # fmt: skip
    if curve.config:
        plan = config_plan(curve.config)
        if plan is not None:
            return plan
    if curve.lr is not None:
        return inferred_plan(steps, curve.lr, planned, options.final_lr_ratio, f, curve.source)
    if options.decay_frac is not None and planned is not None:
        return named_plan("wsd", planned, options.warmup or 0.0, options.final_lr_ratio, None, f)
    raise BadInput(
        f"{curve.source} has no learning-rate column and no schedule was given, so its "
        "continuation cannot be known: give --schedule (cosine, linear, wsd, 1-sqrt, "
        "constant) with --planned-tokens, --schedule-file, or --lr-column"
    )


def _planned_steps(curve: Curve, options: GovernOptions, tps: float) -> int | None:
    if options.planned_tokens is not None:
        return max(round(options.planned_tokens / tps), 2)
    if curve.planned_steps:
        return int(curve.planned_steps)
    if curve.planned_tokens:
        return max(round(curve.planned_tokens / tps), 2)
    if options.budget_flops and options.n_params and options.decay_frac is not None:
        return max(round(options.budget_flops / (6.0 * options.n_params) / tps), 2)
    return None


def _config_batch(config: dict | None) -> float | None:
    if not config:
        return None
    try:
        return float(config["train"]["batch_size"]) * float(config["model"]["seq_len"])
    except (KeyError, TypeError, ValueError):
        return None


def _lr_check(curve: Curve, steps: np.ndarray, plan: LrPlan) -> list[str]:
    """A warning where the log's lr departs from the plan's (a plan that is not the run's)."""
    if curve.lr is None or plan.nominal:
        return []
    at = np.clip(np.round(steps).astype(int), 1, plan.steps) - 1
    gap = np.abs(curve.lr - plan.lr[at]) / plan.peak
    if gap.max() <= LR_AGREES:
        return []
    i = int(np.argmax(gap))
    return [
        f"the log's lr departs from the planned schedule by {gap[i]:.0%} of its peak at step "
        f"{steps[i]:.0f} ({curve.lr[i]:.3g} against {plan.lr[at[i]]:.3g}): is the schedule "
        "the run's?"
    ]


def _weights(law, n, fresh, strategy, horizon, tps, switch_to=None, switch_tokens=0.0):
    """Each step's worth: the slope of D_eff over its tokens (1 while fresh)."""
    tokens = np.arange(horizon + 1, dtype=float) * tps
    deff = effective_tokens(law.law, n, fresh, strategy, tokens, switch_to, switch_tokens)
    return np.diff(deff) / tps


def _fit(w: np.ndarray, n: int) -> np.ndarray:
    """w cut or extended (its last value held) to n steps."""
    if len(w) >= n:
        return w[:n]
    return np.concatenate([w, np.full(n - len(w), w[-1] if len(w) else 1.0)])


def cooldown_steps(run: CurveRun) -> int:
    """Where a cooldown started now ends: now/(1 − f)."""
    return max(math.ceil(run.now / (1 - run.plan.decay_frac)), run.now + 1)
