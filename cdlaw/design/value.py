"""What a run would tell about the plan: the bootstrap ensemble, conditioned run by run.

A fit's bootstrap refits are draws of the law's parameters as the data allow them. Each
draw b predicts three things a team bets on, for the budget C and the unique tokens U:

    loss  = log L_b(N*, D*, D′*, s*)   the loss at the current plan (its 95% interval)
    n     = log N*_b(s*)               where draw b would put the model size
    gap   = log L*_b(s') − log L*_b(s*)     which of the plan's strategy s* and its
                                         closest rival s' draw b would choose

and the log loss y_j = log L_b(x_j) of every candidate run x_j. Across the draws these
are correlated: a run whose outcome varies with the plan's loss from draw to draw pins
that loss down. Treating the ensemble as Gaussian, observing y_j with noise σ² (the fit's
residual scatter) shrinks the covariance of everything by the Kalman update

    Σ ← Σ − Σ[:, j] Σ[j, :] / (Σ[j, j] + σ²)

(the ensemble Kalman filter's analysis step; Evensen 2003, Ocean Dynamics 53:343). How
much a run is worth is how much that update lowers

    value = ½·ln(Var(loss)/Var₀(loss)) + min(P(flip), 1 − P(flip)) + ½·P(N* moves by > 10%)

with P(flip) = Φ(−centre / sd(gap)), the chance the draws favour the rival (its centre
placed so that it is, before any run, the plan's bootstrap share of refits choosing the
rival: above ½ where most do), and P(move) = 2Φ(−log 1.1 / sd(n)): the three ways the plan's decision can
be wrong. The strategy term is the chance that whichever strategy the evidence favours is
wrong, so a run that settles the question either way is worth as much. The loss term is the information (nats, Gaussian)
a run gives about the plan's loss, so each halving of its sd is worth the same; the
variance ratio itself made later narrowings worth almost nothing (docs/next.md). A batch is
chosen greedily by value gained per FLOP, each pick conditioning the ones after it, so a
second run that only repeats what the first tells is worth little.

Pure numpy; scipy only for Φ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import norm

N_MOVE = math.log(1.1)  # "N* changes": it moves by more than 10%
N_WEIGHT = 0.5  # a wrong N costs less than a wrong loss or strategy: the optimum is flat in N
MIN_REL = 1e-12  # Var/Var₀ floor: a run that pins the loss exactly is worth 13.8 nats, not ∞


@dataclass(frozen=True)
class Ensemble:
    """Per-draw targets (B × 3; a missing target is a column of zeros) and candidate
    log losses (B × M)."""

    targets: np.ndarray
    candidates: np.ndarray
    gap_mean: float  # the gaps' centre (cdlaw.design.targets): > 0 keeps the plan's strategy

    def __post_init__(self):
        if self.targets.shape[0] != self.candidates.shape[0] or self.targets.shape[0] < 3:
            raise ValueError("targets and candidates need the same (at least 3) draws")


@dataclass(frozen=True)
class Uncertainty:
    """The plan's uncertainty under one covariance."""

    loss_sd: float  # sd of the log loss at the plan: ≈ relative sd of the loss
    n_sd: float  # sd of log N*
    flip: float  # chance the draws favour the rival strategy (may exceed ½)
    n_move: float  # chance N* is off by more than 10%

    def value(self, loss_var0: float) -> float:
        return float(plan_value(self.loss_sd**2, self.flip, self.n_move, loss_var0))


def plan_value(loss_var, flip, n_move, loss_var0: float):
    """What is still unknown about the plan (lower is better; broadcasts):
    ½·ln(Var/Var₀) + min(P(flip), 1 − P(flip)) + ½·P(move), the loss term in nats of
    information."""
    rel = np.maximum(np.asarray(loss_var) / loss_var0, MIN_REL) if loss_var0 > 0 else 1.0
    return 0.5 * np.log(rel) + np.minimum(flip, 1 - np.asarray(flip)) + N_WEIGHT * n_move


@dataclass(frozen=True)
class Pick:
    """One chosen candidate and what it does to the plan's uncertainty."""

    index: int
    flops: float  # its cost given the picks before it (shared prefixes)
    before: Uncertainty
    after: Uncertainty
    gain: float  # value before − after


def uncertainty(cov: np.ndarray, gap_mean: float) -> Uncertainty:
    """Uncertainty from the 3×3 target block of a covariance."""
    loss_sd, n_sd, gap_sd = (math.sqrt(max(float(cov[i, i]), 0.0)) for i in range(3))
    flip = float(norm.cdf(-gap_mean / gap_sd)) if gap_sd > 0 else float(gap_mean < 0)
    n_move = float(2 * norm.cdf(-N_MOVE / n_sd)) if n_sd > 0 else 0.0
    return Uncertainty(loss_sd, n_sd, flip, n_move)


def ensemble_covariance(ens: Ensemble) -> np.ndarray:
    """Covariance of [targets, candidates] across the draws ((3 + M) × (3 + M))."""
    z = np.hstack([ens.targets, ens.candidates])
    z = z - z.mean(axis=0)
    return z.T @ z / (len(z) - 1)


def _after_each(cov: np.ndarray, noise_var: float, gap_mean: float, cand: np.ndarray):
    """The target variances after observing each candidate alone (vectorised)."""
    denom = np.diag(cov)[cand] + noise_var
    drops = cov[:3][:, cand] ** 2 / denom  # (3, k)
    var = np.diag(cov)[:3, None] - drops
    var = np.maximum(var, 0.0)
    loss_sd, n_sd, gap_sd = np.sqrt(var)
    with np.errstate(divide="ignore", invalid="ignore"):
        flip = np.where(gap_sd > 0, norm.cdf(-gap_mean / gap_sd), float(gap_mean < 0))
        move = np.where(n_sd > 0, 2 * norm.cdf(-N_MOVE / n_sd), 0.0)
    return loss_sd, n_sd, flip, move


def choose(
    ens: Ensemble,
    noise_sd: float,
    cost: Callable[[list[int]], npt.ArrayLike],
    max_runs: int | None = None,
    max_flops: float | None = None,
    first: tuple[int, ...] = (),
) -> list[Pick]:
    """The batch: greedy by value per FLOP; with a FLOP budget, the better of that and
    greedy by value alone. Both start with the candidates in `first` (each taken if it
    fits): runs chosen for a reason the ensemble cannot see (cdlaw.design.batch).

    Value per FLOP alone can spend a budget on many tiny runs that each tell little,
    while one large run near the plan would have told more; taking the better of the two
    greedy batches is the classic remedy for budgeted choices with diminishing returns
    (Khuller, Moss, Naor 1999; Krause & Guestrin 2005), within a constant factor of the
    best batch.
    """
    picks = greedy(ens, noise_sd, cost, max_runs, max_flops, per_flop=True, first=first)
    if max_flops is None:
        return picks
    other = greedy(ens, noise_sd, cost, max_runs, max_flops, per_flop=False, first=first)
    return other if sum(p.gain for p in other) > sum(p.gain for p in picks) else picks


def greedy(
    ens: Ensemble,
    noise_sd: float,
    cost: Callable[[list[int]], npt.ArrayLike],
    max_runs: int | None = None,
    max_flops: float | None = None,
    per_flop: bool = True,
    first: tuple[int, ...] = (),
) -> list[Pick]:
    """Greedy batch: at each step the candidate with the most value gained (per FLOP).

    cost(picked) gives every candidate's FLOPs if added to `picked` (indices into the
    candidates), so shared prefixes make a branch of a picked run cheap. The candidates
    in `first` come first, whatever they gain, each if it fits. Stops at max_runs picks,
    when no candidate fits in what is left of max_flops, or when no candidate gains anything.
    """
    if max_runs is None and max_flops is None:
        raise ValueError("choose needs max_runs or max_flops")
    cov = ensemble_covariance(ens)
    noise_var = float(noise_sd) ** 2
    m = ens.candidates.shape[1]
    loss_var0 = float(cov[0, 0])
    picked: list[int] = []
    taken = np.zeros(m, dtype=bool)
    picks: list[Pick] = []
    spent = 0.0
    while max_runs is None or len(picks) < max_runs:
        free = np.flatnonzero(~taken)
        if not free.size:
            break
        flops = np.asarray(cost(picked), dtype=float)[free]
        fits = np.isfinite(flops) & (flops > 0)
        if max_flops is not None:
            fits &= spent + flops <= max_flops
        if not fits.any():
            break
        before = uncertainty(cov[:3, :3], ens.gap_mean)
        loss_sd, _, flip, move = _after_each(cov, noise_var, ens.gap_mean, free + 3)
        gain = before.value(loss_var0) - plan_value(loss_sd**2, flip, move, loss_var0)
        score = np.where(fits, gain / flops if per_flop else gain, -np.inf)
        forced = [k for k in first if not taken[k] and fits[np.searchsorted(free, k)]]
        if forced:
            best = int(np.searchsorted(free, forced[0]))
        else:
            first = ()  # a forced run that does not fit is not waited for
            best = int(np.argmax(score))
            if not gain[best] > 1e-9 or not np.isfinite(score[best]):
                break
        j = int(free[best]) + 3
        col = cov[:, j].copy()
        cov = cov - np.outer(col, col) / (cov[j, j] + noise_var)
        after = uncertainty(cov[:3, :3], ens.gap_mean)
        picks.append(Pick(int(free[best]), float(flops[best]), before, after, float(gain[best])))
        picked.append(int(free[best]))
        taken[free[best]] = True
        spent += float(flops[best])
    return picks
