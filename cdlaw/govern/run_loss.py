"""The law along one run: its cooled-down loss K(E) at each end E, on its own strategy or
switched to another part-way, the gain per FLOP −dK/dF, and the offset δ that calibrates
the law to the run's observed stable-phase losses (docs/govern.md).

    K = law_loss(law, n_params, fresh, "repetition", end_tokens)
    delta, se = calibrate(lambda E: law_loss(law, n, D, s, E), curve, cooldown, 0.2)
"""

from __future__ import annotations

import math

import numpy as np

from cdlaw.govern.cooldown import Cooldown
from cdlaw.govern.curve import Curve
from cdlaw.law import Law
from cdlaw.strategies import NONE

REL_STEP = 1e-4  # relative step in E for the central difference of K


def law_loss(law: Law, n_params: float, fresh: float, strategy: str, end_tokens):
    """The law's cooled-down loss of the run ending at E tokens (fresh first, then derived)."""
    E = np.asarray(end_tokens, dtype=float)
    return law.loss(n_params, np.minimum(E, fresh), np.maximum(E - fresh, 0.0), strategy)


def switched_loss(law: Law, n_params, fresh, strategy, other, switch_tokens, end_tokens):
    """The CD law's loss if the run trains `strategy` up to switch_tokens, then `other`.

    The run's state is its effective data D_eff: the switch carries the gain made so far,
    D·R*·(1 − e^(−r/R*)) on `strategy`, over to `other` as the ratio r_o that gives `other`
    the same gain, and the rest of the tokens continue from there on `other`'s curve. So a
    switch helps only towards a strategy whose derived tokens still add more per token
    (a larger R*), and never past its own saturation D·(1 + R*_o) (docs/govern.md, limits).
    """
    E = np.asarray(end_tokens, dtype=float)
    seen = np.minimum(E, fresh)
    own = max(switch_tokens - fresh, 0.0)
    rest = np.maximum(E - max(switch_tokens, fresh), 0.0)
    gain = float(law.effective_data(n_params, fresh, own, strategy)) - fresh
    cap = fresh * float(law.rstar(n_params, fresh, other))
    if gain >= cap:  # `other` saturates below what the run has: its tokens add nothing
        total = np.full(E.shape, gain)
    else:
        start = -fresh * float(law.rstar(n_params, fresh, other)) * math.log1p(-gain / cap)
        total = law.effective_data(n_params, fresh, start + rest, other) - fresh
    total = np.where(E > max(switch_tokens, fresh), total, 0.0)
    before = law.loss(n_params, seen, np.maximum(E - fresh, 0.0), strategy)
    after = law.loss(n_params, seen + total, 0.0, NONE)
    return np.where(E > max(switch_tokens, fresh), after, before)


def gain_per_flop(curve_of_e, end_tokens, n_params: float) -> np.ndarray:
    """−dK/dF with F = 6·N·E, by a central difference in E."""
    E = np.asarray(end_tokens, dtype=float)
    h = REL_STEP
    up, down = curve_of_e(E * (1 + h)), curve_of_e(E * (1 - h))
    return -(up - down) / (2 * h * E) / (6.0 * n_params)


def calibrate(law_at_stop, curve: Curve, cooldown: Cooldown, decay_frac: float):
    """(δ, its standard error): the mean over the calibration points of the cooled-down loss
    the relation gives minus the law's, at the end each point would cool down to."""
    idx = curve.calibration_points()
    t = curve.tokens[idx]
    resid = cooldown.cooled(curve.loss[idx]) - law_at_stop(t / (1 - decay_frac))
    delta = float(np.mean(resid))
    se = float(np.std(resid, ddof=1) / math.sqrt(len(resid))) if len(resid) > 1 else 0.0
    return delta, se
