"""The ensemble `cdlaw next` reasons with: what each bootstrap draw says about the plan
and about every candidate run (cdlaw.design.value explains how it is used)."""

from __future__ import annotations

import math

import numpy as np

from cdlaw.design.value import Ensemble
from cdlaw.law import Law
from cdlaw.plan.optimum import budget_loss, optimal_n_params
from cdlaw.plan.result import Allocation
from cdlaw.strategies import NONE


def best_loss(
    law: Law, strategy: str, budget_flops: float, unique_tokens: float
) -> tuple[float, float]:
    """(N*, L*) of `law` for the budget when it must use `strategy`."""
    n, _ = optimal_n_params(law, strategy, budget_flops, unique_tokens)
    return n, float(budget_loss(law, strategy, budget_flops, n, unique_tokens))


def rival_strategy(
    law: Law, strategy: str, budget_flops: float, unique_tokens: float
) -> str | None:
    """The strategy whose optimum comes closest to the plan's `strategy` under `law` (the
    decision most likely to flip); None when the law has no other."""
    others = [s for s in law.strategies if s != strategy]
    if strategy == NONE or not others:
        return None
    return min(others, key=lambda s: best_loss(law, s, budget_flops, unique_tokens)[1])


def draw_targets(
    law: Law,
    best: Allocation,
    strategy: str,
    rival: str | None,
    budget_flops: float,
    unique_tokens: float,
) -> tuple[float, float, float]:
    """(log loss at the plan, log N*, strategy gap) under one law. The gap is
    log L*(rival) − log L*(strategy), each at its own optimal N: its sign is the decision
    between the plan's strategy and its closest rival (0 without a rival)."""
    loss = math.log(
        float(law.loss(best.n_params, best.fresh_tokens, best.derived_tokens, strategy))
    )
    n_best, loss_best = best_loss(law, strategy, budget_flops, unique_tokens)
    gap = 0.0
    if rival is not None and law.knows_strategy(rival):
        gap = math.log(best_loss(law, rival, budget_flops, unique_tokens)[1]) - math.log(loss_best)
    return loss, math.log(n_best), gap


def candidate_log_losses(law: Law, cells: list[tuple[float, float, float, str]]) -> np.ndarray:
    """log L(N, D, D′, strategy) of each candidate cell under one law."""
    out = np.empty(len(cells))
    for i, (n, d, dp, s) in enumerate(cells):
        strategy = s if law.knows_strategy(s) or s == NONE else NONE
        out[i] = float(law.loss(n, d, dp if strategy != NONE else 0.0, strategy))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(out)


def build_ensemble(
    point: Law,
    draws: list[Law],
    best: Allocation,
    strategy: str,
    budget_flops: float,
    unique_tokens: float,
    cells: list[tuple[float, float, float, str]],
) -> tuple[Ensemble, int]:
    """The Ensemble over the draws whose predictions are all finite; and how many were dropped."""
    targets, preds = [], []
    rival = rival_strategy(point, strategy, budget_flops, unique_tokens)
    for law in draws:
        with np.errstate(all="ignore"):
            t = draw_targets(law, best, strategy, rival, budget_flops, unique_tokens)
            y = candidate_log_losses(law, cells)
        if all(math.isfinite(v) for v in t) and np.isfinite(y).all():
            targets.append(t)
            preds.append(y)
    ens = Ensemble(
        np.array(targets, dtype=float).reshape(len(targets), 3),
        np.array(preds, dtype=float).reshape(len(preds), len(cells)),
        gap_centre(np.array([t[2] for t in targets])),
    )
    return ens, len(draws) - len(targets)


def gap_centre(gaps: np.ndarray) -> float:
    """The centre of the normal approximation of the draws' strategy gaps whose spread is
    theirs (sd), placed so that its tail below 0 is the share of draws that choose the
    rival: P(flip) before any run is the bootstrap share `cdlaw plan` reports (the draws'
    mean would not do: their gaps are skewed, 62% against 54% on the demo's fit)."""
    from scipy.stats import norm

    if len(gaps) < 2:
        return float(gaps.mean()) if len(gaps) else math.nan
    sd = float(gaps.std(ddof=1))
    if sd == 0:
        return float(gaps.mean())
    share = float(np.clip((gaps < 0).mean(), 0.5 / len(gaps), 1 - 0.5 / len(gaps)))
    return -sd * float(norm.ppf(share))
