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


def effective_tokens(
    law: Law, n_params, fresh, strategy, tokens, switch_to=None, switch_tokens=0.0
) -> np.ndarray:
    """D_eff after each of `tokens`: the fresh tokens first, then derived ones at the law's
    η on `strategy`, or from switch_tokens on at `switch_to`'s, the effective data so far
    carried over as switched_loss carries it. Its slope is what a token is worth to the
    run (1 while fresh): the curve laws scale each step's lr by it."""
    t = np.asarray(tokens, dtype=float)
    own = np.minimum(t, fresh) + np.maximum(
        law.effective_data(n_params, fresh, np.maximum(t - fresh, 0.0), strategy) - fresh, 0.0
    )
    if switch_to is None:
        return own
    at = max(switch_tokens, fresh)
    gain = float(law.effective_data(n_params, fresh, at - fresh, strategy)) - fresh
    cap = fresh * float(law.rstar(n_params, fresh, switch_to))
    if gain >= cap:
        after = np.full(t.shape, fresh + gain)
    else:
        start = -cap * math.log1p(-gain / cap)
        rest = np.maximum(t - at, 0.0)
        after = law.effective_data(n_params, fresh, start + rest, switch_to)
    return np.where(t > at, after, own)


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
    t = curve.token_counts[idx]
    resid = cooldown.cooled(curve.loss[idx]) - law_at_stop(t / (1 - decay_frac))
    delta = float(np.mean(resid))
    se = float(np.std(resid, ddof=1) / math.sqrt(len(resid))) if len(resid) > 1 else 0.0
    return delta, se


def crossing(grid, gains, lam, g_now, e_now, e_budget) -> float | None:
    """The end E where G meets λ, log-interpolated: the next crossing ahead when G is still
    above λ (None when it stays above up to the budget), else the last one behind."""
    i_now = int(np.searchsorted(grid, e_now))
    if g_now < lam:
        behind = np.flatnonzero(gains[:i_now] >= lam)
        return float(grid[0]) if not len(behind) else _interp(grid, gains, lam, behind[-1] + 1)
    ahead = np.flatnonzero((gains < lam) & (np.arange(len(grid)) >= i_now))
    if not len(ahead):
        return None
    e = _interp(grid, gains, lam, int(ahead[0]))
    return e if e <= e_budget * (1 + 1e-9) else None


def _interp(grid, gains, lam, i) -> float:
    """Log-linear interpolation of where G crosses λ between grid points i − 1 and i."""
    if i == 0:
        return float(grid[0])
    g0, g1 = gains[i - 1], gains[i]
    x0, x1 = math.log(grid[i - 1]), math.log(grid[i])
    if g0 == g1:
        return float(grid[i])
    w = (g0 - lam) / (g0 - g1)
    return float(math.exp(x0 + min(max(w, 0.0), 1.0) * (x1 - x0)))
