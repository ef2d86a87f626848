"""Which resource binds a configuration: compute, data or model size (docs/regimes.md).

The CD paper's bands at fixed (N, D): compute-bound L_D < L ≤ L_1ep, data-bound
L_N < L ≤ L_D, model-bound L ≤ L_N. A predicted loss never leaves the compute band, so
cdlaw labels a configuration by what would still lower its loss:

- compute-bound: more derived tokens still help; the realised share of the derived-token
  gain, (L_1ep − L)/(L_1ep − L_D), is below `saturation`;
- data-bound: derived tokens are saturated and fresh data would still gain more than
  `tolerance` nats (L_D − L_N > tolerance);
- model-bound: both are saturated; only a larger N helps;
- overfit (laws whose loss can rise with D′, e.g. cd-overfit): the run has more derived
  tokens than the loss minimum at its (N, D); fewer would do better. Such a law's L_D is
  that minimum, not the D′ → ∞ limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cdlaw.law import Law
from cdlaw.strategies import NONE

SATURATION = 0.9  # share of the derived-token gain that counts as "saturated" (docs/regimes.md)
TOLERANCE = 0.01  # nats of fresh-data gain below which data "no longer binds" (docs/regimes.md)


@dataclass(frozen=True)
class RegimeTable:
    """Per configuration: the regime, the three frontiers and the thresholds used."""

    regime: np.ndarray  # str labels
    loss: np.ndarray
    loss_one_epoch: np.ndarray  # L_1ep
    loss_data_floor: np.ndarray  # L_D
    loss_model_floor: np.ndarray  # L_N
    derived_gain_share: np.ndarray  # (L_1ep − L)/(L_1ep − L_D); 1 where there is no gain to have
    saturation: float
    tolerance: float


def classify(
    law: Law,
    n_params,
    fresh_tokens,
    derived_tokens,
    strategy,
    loss=None,
    saturation: float = SATURATION,
    tolerance: float = TOLERANCE,
) -> RegimeTable:
    """Label each (N, D, D′, strategy) by its binding regime.

    `strategy` is one name or one per row. `loss` defaults to the law's prediction; pass an
    observed loss to place a measured run in the same bands.
    """
    N, D, Dp = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (n_params, fresh_tokens, derived_tokens))
    )
    strat = np.broadcast_to(np.asarray(strategy, dtype=object), N.shape)
    L = np.empty(N.shape)
    L_D = np.empty(N.shape)
    for s in set(strat.ravel().tolist()):
        m = strat == s
        L[m] = law.loss(N[m], D[m], Dp[m], s)
        if s == NONE and law.strategies:
            # A run with no derived tokens could still take either strategy: its floor is
            # the better of the two, so it sits at the top of the compute band.
            L_D[m] = np.min([law.loss_data_floor(N[m], D[m], t) for t in law.strategies], axis=0)
        else:
            L_D[m] = law.loss_data_floor(N[m], D[m], s)
    if loss is not None:
        L = np.broadcast_to(np.asarray(loss, dtype=float), N.shape).copy()
    L_1 = law.loss_one_epoch(N, D)
    L_N = law.loss_model_floor(N)
    span = L_1 - L_D
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(span > 1e-12, (L_1 - L) / span, 1.0)
    regime = np.where(
        share < saturation,
        "compute-bound",
        np.where(L_D - L_N > tolerance, "data-bound", "model-bound"),
    )
    if law.form_decl.can_overfit:  # past the loss minimum in D′: more derived tokens hurt
        best = np.full(N.shape, np.inf)
        for s in set(strat.ravel().tolist()) - {NONE}:
            m = strat == s
            best[m] = law.best_derived_tokens(N[m], D[m], s)
        regime = np.where(Dp > best * (1 + 1e-9), "overfit", regime)
    return RegimeTable(regime.astype(object), L, L_1, L_D, L_N, share, saturation, tolerance)
