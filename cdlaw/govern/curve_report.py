"""What a decision under the curve law says: its lines of reasons (the model's) and its
figure's data (Decision.curve). cdlaw.govern.curve_governor calls both."""

from __future__ import annotations

import numpy as np

from cdlaw.govern.curve_run import CurveRun

PLANNED_POINTS = 80  # points of the predicted continuation along the planned schedule
UNANNEALED = 0.05  # a curve whose lr has dropped less than this share has not annealed


def explain(run: CurveRun) -> list[str]:
    """The curve law's lines: what it was fitted to, its gain, and what the curve leaves
    to the prior."""
    cont = run.cont
    fits = "; ".join(
        f"{law}: L0 {f.L0:.3f}, α {f.alpha:.3f}, gain {f.gain:.3f} nats"
        for law, f in cont.fits.items()
    )
    lines = [
        f"the run's curve law ({cont.law}, fitted to its {len(cont.fit_steps)} points past "
        f"20% of its steps, on {run.plan.source}): {fits}"
    ]
    if cont.annealed < UNANNEALED:
        lines.append(
            "the curve has not annealed yet, so the gain a cooldown brings is the prior's "
            "(what 27 published runs measured), and the bands carry its spread"
        )
    else:
        lines.append(f"the lr has dropped {cont.annealed:.0%} from its peak so far")
    return lines


def curve_data(run: CurveRun, ends, k, lo, hi, gains) -> dict:
    """The figure's data: the observed curve, the fitted points, the predicted continuation
    along the planned schedule with its band, and for each end the loss it ends at (with
    its band) and G, against where the run ends (stable_tokens: the end, under a curve
    law). Positions are tokens where the run's tokens per step are known, else steps."""

    def x(step):
        tokens = run.tokens(step)
        return np.asarray(step if tokens is None else tokens, dtype=float)

    ahead = np.unique(np.round(np.linspace(run.now, run.plan.steps, PLANNED_POINTS)).astype(int))
    w = run.weights
    point, p_lo, p_hi = run.cont.predict_at(
        run.plan.lr, ahead, None if w is None else w[: run.plan.steps]
    )
    observed = run.curve.tokens if run.curve.tokens is not None else run.steps
    if run.tokens_per_step is None:
        observed = run.steps
    return {
        "observed_tokens": np.asarray(observed, dtype=float),
        "observed_loss": run.curve.loss,
        "calibration_tokens": x(run.cont.fit_steps),
        "calibration_loss": run.cont.fit_loss,
        "planned_tokens": x(ahead),
        "planned_loss": point,
        "planned_lo": p_lo,
        "planned_hi": p_hi,
        "end_tokens": x(ends),
        "stable_tokens": x(ends),
        "cooled_loss": k,
        "cooled_lo": lo,
        "cooled_hi": hi,
        "gain": np.full(len(ends), np.nan) if gains is None else gains,
    }
