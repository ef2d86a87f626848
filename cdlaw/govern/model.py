"""Which model predicts a run's endings, and the one entry point that governs a run.

    decision = decide(curve, source, options)       # source: the CD law, or None

Two models predict the loss a run ends at: the run's own curve law (Tissue et al. 2024
and the multi-power law fitted to its curve with its planned lr schedule:
cdlaw.govern.curve_governor), and the WSD relation (the CD law calibrated through the
stable-to-cooled ratio cdlaw's WSD sweeps measure: cdlaw.govern.governor). The relation
is kept only where it predicted held-out runs better: cdlaw's own WSD runs of the setup
its ratio was measured on (docs/results.md), or a ratio the user fitted on their own sweep
(--cooldown-from). Everything else, and every run another trainer logged, is governed by
its curve law. `--model curve|relation` overrides the choice.
"""

from __future__ import annotations

from collections.abc import Callable

from cdlaw.govern.cooldown import NEAR_N
from cdlaw.govern.curve import Curve
from cdlaw.govern.decision import Decision, GovernOptions
from cdlaw.plan.result import Plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.system.errors import BadInput

RELATION, CURVE = "WSD relation", "curve law"


def choose_model(curve: Curve, options: GovernOptions) -> tuple[str, str]:
    """(RELATION or CURVE, why) for this run."""
    if options.model == "relation":
        return RELATION, "--model relation"
    if options.model == "curve":
        return CURVE, "--model curve"
    if options.cooldown_from:
        return RELATION, "the stable-to-cooled ratio fitted on your WSD sweep (--cooldown-from)"
    config = curve.config or {}
    train = config.get("train") or {}
    ratio = options.cooldown
    if train.get("schedule") == "wsd" and ratio.n_params is not None:
        lo, hi = ratio.n_params
        n = float(config.get("n_params") or 0)
        lrs = [at for at, *_ in ratio.by_lr]
        same_lr = any(abs(float(train.get("lr", 0)) - at) <= 0.01 * at for at in lrs)
        if lo / NEAR_N <= n <= hi * NEAR_N and same_lr:
            return RELATION, (
                f"a cdlaw WSD run of the setup the stable-to-cooled ratio was measured on "
                f"({ratio.source}), where it predicts held-out branches better than the curve laws"
            )
    return CURVE, "the run's own curve and planned lr schedule"


def decide(
    curve: Curve,
    source: PlanningLaw | None,
    options: GovernOptions,
    budget_plan: Plan | None = None,
    reread: Callable[[str], Curve] | None = None,
) -> Decision:
    """The decision under the model choose_model picks; budget_plan as govern() takes it;
    reread(column) reads the run again at another loss column (a run folder's validation
    loss, evaluated too rarely for a curve law, gives way to its training loss)."""
    from dataclasses import replace

    from cdlaw.govern.logs import MIN_LOSS_POINTS

    model, why = choose_model(curve, options)
    if model == RELATION:
        from cdlaw.govern.curve import check_stable
        from cdlaw.govern.governor import govern

        if source is None:
            raise BadInput("the WSD relation needs the CD law: give --law (a fit.json or a preset)")
        decision = govern(check_stable(curve), source, options, budget_plan)
        return replace(decision, model=RELATION, model_reason=why)
    from cdlaw.govern.curve_governor import govern_curve

    if reread is not None and curve.config and curve.loss_column == "val_loss":
        if len(curve.loss) < MIN_LOSS_POINTS:
            said = (
                f"{len(curve.loss)} validation losses are too few for the curve law: governed "
                "on the training loss (train_loss)"
            )
            curve = reread("train_loss")
            curve = replace(curve, warnings=(*curve.warnings, said))
    return replace(govern_curve(curve, source, options, budget_plan), model_reason=why)
