"""The schedule-aware loss-curve laws: a run's loss at step s from its learning rates.

- Tissue, Wang & Wang 2024, "Scaling Law with Learning Rate Annealing", arXiv 2408.11029:

      L(s) = L0 + A·S1^(−α) − C·S2,   S1 = Σ_{i≤s} η_i (forward area),
      S2 = Σ_{i≤s} m_i,  m_i = λ·m_{i−1} + (η_{i−1} − η_i)  (annealing area with momentum:
      a drop of the lr is felt over 1/(1 − λ) steps; λ = 0.999 as the paper uses, or
      longer for a long, gradual decay: `tissue_momentum`);

- Luo et al. 2025, "A Multi-Power Law for Loss Curve Prediction Across Learning Rate
  Schedules", arXiv 2503.12811:

      L(t) = L0 + A·(S1(t) + S_W)^(−α) − LD(t),
      LD(t) = B·Σ_{k≤t} (η_{k−1} − η_k)·G(η_k^(−γ)·S_k(t)),  S_k(t) = Σ_{k≤τ≤t} η_τ,
      G(x) = 1 − (C·x + 1)^(−β),

  S1 + S_W being every step's lr, warmup included.

Both are L0 + A·S1^(−α) − B·X(s), with X the annealing feature of the schedule (S2, or
the multi-power sum with its shape C, β, γ fixed at MULTIPOWER_SHAPE), and B·X saturating
at B·(η_peak − η)·unit: `unit` is 1/(1 − λ) for S2 and 1 for the multi-power sum (G → 1).
`gain` = B·η_peak·unit is the loss an anneal from the peak to zero removes, in nats.

Only drops of the lr count as annealing (η_{k−1} − η_k > 0): a warmup's rise is not one.
Given α, the law is linear in (L0, A, B), so `fit_law` profiles α and solves the rest by
least squares on relative residuals (Huber-weighted), with a Gaussian prior on the gain:
a curve that has not annealed yet says nothing about it (docs/govern.md). Pure numpy/scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize_scalar

TISSUE = "tissue2024"
MULTIPOWER = "multipower2025"
LAWS = (TISSUE, MULTIPOWER)
TISSUE_MOMENTUM = 0.999
# The steps a drop of the lr takes to be felt, 1/(1 − λ), as a share of the steps the
# schedule spends decaying (at least the paper's 1,000): a cosine over 70K steps is felt
# over thousands of steps, not one thousand. The memory that fits Luo et al.'s whole
# cosine curves best is 2–13% of their decay, longer at larger sizes: this is its median
# over the 100M and 400M curves (benchmarks/bench_curves.py `prior`, docs/results.md).
MEMORY_PER_DECAY = 0.1
# C, β, γ of the multi-power law: the means of Luo et al.'s own fits at 25M, 100M and 400M
# (2.066/2.132/2.025, 0.583/0.598/0.594, 0.641/0.655/0.635: one shape at every size).
MULTIPOWER_SHAPE = (2.074, 0.592, 0.644)
# The drops of a long schedule are merged into at most this many groups for the
# multi-power sum (a group's drops at its last step): its cost is queries × groups.
MAX_DROP_GROUPS = 6000
HUBER = 1.345  # Huber's constant, in robust standard deviations of the relative residual
ALPHA_RANGE = (0.02, 2.0)


def drops(lr: np.ndarray) -> np.ndarray:
    """η_{i−1} − η_i per step (0 at the first and wherever the lr rises: warmup)."""
    d = np.zeros(len(lr))
    d[1:] = lr[:-1] - lr[1:]
    return np.maximum(d, 0.0)


def forward_area(lr: np.ndarray) -> np.ndarray:
    """S1 after each step: the cumulative sum of the lr."""
    return np.cumsum(lr)


def decay_steps(lr: np.ndarray) -> int:
    """The steps a per-step schedule spends decaying: after its peak, those strictly
    between its peak and its final lr (1% of the drop from either), so a sudden drop
    counts none and a cosine all of its decay."""
    if not len(lr):
        return 0
    tail = lr[int(np.argmax(lr)) :]
    hi, lo = float(tail[0]), float(np.min(tail))
    margin = 0.01 * (hi - lo)
    return int(np.sum((tail > lo + margin) & (tail < hi - margin)))


def tissue_momentum(lr: np.ndarray, per_decay: float = MEMORY_PER_DECAY) -> float:
    """λ of Tissue et al.'s annealing area for the planned per-step schedule lr: a memory
    1/(1 − λ) of per_decay × its decay steps, at least the paper's λ."""
    memory = max(1.0 / (1.0 - TISSUE_MOMENTUM), per_decay * decay_steps(lr))
    return 1.0 - 1.0 / memory


def tissue_area(lr: np.ndarray, momentum: float = TISSUE_MOMENTUM) -> np.ndarray:
    """S2 after each step: Σ_{i≤s} m_i, m_i = λ·m_{i−1} + (η_{i−1} − η_i)."""
    return np.cumsum(_momentum(drops(lr), momentum))


MOMENTUM_BLOCK = 4096  # steps per block of the recurrence: λ^(−4096) stays finite


def _momentum(d: np.ndarray, lam: float) -> np.ndarray:
    """m_i = λ·m_{i−1} + d_i, block by block: within a block m = λ^i·Σ_{j≤i} λ^(−j)·d_j plus
    the carry λ^(i+1)·m_before."""
    out = np.empty(len(d))
    carry = 0.0
    for start in range(0, len(d), MOMENTUM_BLOCK):
        block = d[start : start + MOMENTUM_BLOCK]
        i = np.arange(len(block))
        m = lam**i * np.cumsum(block * lam ** (-i)) + carry * lam ** (i + 1)
        out[start : start + len(block)] = m
        carry = float(m[-1])
    return out


def tissue_annealing_area(lr: np.ndarray, momentum: float = TISSUE_MOMENTUM) -> float:
    """S2 at the last step."""
    return float(tissue_area(lr, momentum)[-1]) if len(lr) else 0.0


def multipower_sum(lr: np.ndarray, steps, shape=MULTIPOWER_SHAPE) -> np.ndarray:
    """Σ_{k≤t} (η_{k−1} − η_k)·G(η_k^(−γ)·S_k(t)) at each of `steps` (1-based: step s has
    lr[s − 1]); LD = B times it."""
    C, beta, gamma = shape
    steps = np.asarray(steps, dtype=int)
    d = drops(lr)
    k = np.flatnonzero(d)
    out = np.zeros(len(steps))
    if not len(k):
        return out
    weight, where = d[k], k
    if len(k) > MAX_DROP_GROUPS:  # merge neighbours: far drops have long saturated
        edges = np.linspace(0, len(k), MAX_DROP_GROUPS + 1).astype(int)
        weight = np.add.reduceat(d[k], edges[:-1])
        where = k[edges[1:] - 1]
    cum = np.concatenate([[0.0], np.cumsum(lr)])
    # an lr of 0 would make η^(−γ) infinite: G is then 1 at once, as a floor just above 0 gives
    scale = np.maximum(lr[where], 1e-9 * float(np.max(lr))) ** (-gamma)
    for i in range(0, len(steps), 32):
        q = steps[i : i + 32]
        before = where[None, :] < q[:, None]
        area = np.where(before, cum[q][:, None] - cum[where][None, :], 0.0)
        out[i : i + 32] = ((1 - (C * area * scale + 1) ** (-beta)) * weight).sum(axis=1)
    return out


def multipower_reduction(lr: np.ndarray, B: float, C: float, beta: float, gamma: float) -> float:
    """LD at the last step (Luo et al. 2025)."""
    return float(B * multipower_sum(lr, [len(lr)], (C, beta, gamma))[0]) if len(lr) else 0.0


def annealing(law: str, lr: np.ndarray, steps, momentum: float = TISSUE_MOMENTUM) -> np.ndarray:
    """The law's annealing feature X at `steps` (1-based) of the per-step schedule lr
    (momentum: Tissue et al.'s λ; one run's fit and predictions share one)."""
    steps = np.asarray(steps, dtype=int)
    if law == TISSUE:
        return tissue_area(lr, momentum)[steps - 1]
    return multipower_sum(lr, steps)


def unit(law: str, momentum: float = TISSUE_MOMENTUM) -> float:
    """X per unit of lr dropped, once saturated (gain = B·η_peak·unit)."""
    return 1.0 / (1.0 - momentum) if law == TISSUE else 1.0


def base_loss(params, s1):
    """L0 + A·S1^(−α): the stable-phase part both laws share."""
    L0, A, alpha = params
    return L0 + A * np.asarray(s1, dtype=float) ** (-alpha)


@dataclass(frozen=True)
class LawFit:
    """One law fitted to one curve: L(s) = L0 + A·S1^(−α) − B·X(s).

    sigma: the robust sd of the relative residuals; rho: their lag-1 autocorrelation
    (a smoothed or slowly wandering curve has rho near 1); gain_unit: η_peak·unit, so the
    gain in nats is B·gain_unit."""

    law: str
    L0: float
    A: float
    alpha: float
    B: float
    gain_unit: float
    sigma: float
    rho: float

    @property
    def gain(self) -> float:
        return self.B * self.gain_unit

    def loss(self, s1, x) -> np.ndarray:
        s1 = np.asarray(s1, dtype=float)
        return self.L0 + self.A * s1 ** (-self.alpha) - self.B * np.asarray(x, dtype=float)


@dataclass(frozen=True)
class GainPrior:
    """A Gaussian prior on the gain (nats an anneal from the peak to zero removes)."""

    mean: float
    sd: float


def _solve(s1, x, y, alpha, w, prior_row):
    """(L0, A, B) ≥ 0 minimising Σ w·((L − y)/y)² plus the prior's row."""
    X = np.column_stack([np.ones_like(s1), s1 ** (-alpha), -x]) / y[:, None]
    t = np.ones_like(y)
    sw = np.sqrt(w)
    X, t = X * sw[:, None], t * sw
    if prior_row is not None:
        X = np.vstack([X, prior_row[0]])
        t = np.append(t, prior_row[1])
    return nonnegative_lstsq(X, t)


def nonnegative_lstsq(X: np.ndarray, t: np.ndarray) -> np.ndarray:
    """argmin ‖X·p − t‖ over p ≥ 0 for a few columns: the unconstrained solution if it is
    feasible, else the best feasible solution on a subset of the columns (the optimum of a
    non-negative least-squares problem is the unconstrained optimum on its free set)."""
    G, b = X.T @ X, X.T @ t
    k = X.shape[1]
    best, best_cost = np.zeros(k), float(t @ t)
    for mask in range((1 << k) - 1, 0, -1):
        free = [i for i in range(k) if mask >> i & 1]
        try:
            p_free = np.linalg.solve(G[np.ix_(free, free)], b[free])
        except np.linalg.LinAlgError:
            continue
        if (p_free < 0).any():
            continue
        p = np.zeros(k)
        p[free] = p_free
        cost = float(np.sum((X @ p - t) ** 2))
        if cost < best_cost - 1e-15 * max(best_cost, 1.0):
            best, best_cost = p, cost
        if mask == (1 << k) - 1:
            return p  # the unconstrained optimum is feasible
    return best


def _fit_alpha(s1, x, y, alpha, prior: GainPrior | None, gain_unit: float, sigma0: float, weights):
    """The Huber-weighted fit at one α, each point's Huber weight times its weight in
    `weights`: (cost, (L0, A, B), sigma, residuals)."""
    w = weights.copy()
    sigma = sigma0
    for _ in range(3):
        row = None
        if prior is not None:  # (gain − mean)/sd in units of the residuals' sigma
            k = sigma / prior.sd
            row = (np.array([0.0, 0.0, gain_unit * k]), prior.mean * k)
        p = _solve(s1, x, y, alpha, w, row)
        res = (p[0] + p[1] * s1 ** (-alpha) - p[2] * x) / y - 1
        sigma = max(1.4826 * float(np.percentile(np.abs(res), 50, method="nearest")), 1e-6)
        c = HUBER * sigma
        w = weights * np.where(np.abs(res) <= c, 1.0, c / np.maximum(np.abs(res), 1e-300))
    cost = float(np.sum(w * res**2))
    if prior is not None:
        cost += (sigma * (p[2] * gain_unit - prior.mean) / prior.sd) ** 2
    return cost, p, sigma, res


def fit_law(
    law: str,
    s1: np.ndarray,
    x: np.ndarray,
    loss: np.ndarray,
    peak_lr: float,
    prior: GainPrior | None = None,
    near: float | None = None,
    autocorrelated: bool = True,
    momentum: float = TISSUE_MOMENTUM,
    weights: np.ndarray | None = None,
) -> LawFit:
    """`law` fitted to a curve: s1 and x the forward area and annealing feature at its
    points, loss its loss there; α profiled (a coarse grid then a bounded search, or only
    the search within 1.5× of `near`). With a prior, the curve's points count as the
    independent points their autocorrelation leaves (n·(1 − ρ)/(1 + ρ)): a smooth curve
    is not hundreds of measurements of its gain (autocorrelated=False: the prior is
    taken as given, already shrunk); momentum: the λ x was computed with (Tissue's law);
    weights: each point's weight in the least squares, mean 1 (None: all 1)."""
    s1, x, y = (np.asarray(v, dtype=float) for v in (s1, x, loss))
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    gain_unit = peak_lr * unit(law, momentum)
    rel = np.diff(y) / y[1:]
    sigma0 = max(1.4826 * float(np.median(np.abs(rel - np.median(rel)))) / math.sqrt(2), 1e-5)
    fit = _profile(s1, x, y, prior, gain_unit, sigma0, near, w)
    if prior is not None and fit.rho > 0 and autocorrelated:
        fit = _profile(s1, x, y, shrunk(prior, fit.rho), gain_unit, sigma0, fit.alpha, w)
    return replace(fit, law=law)


def _profile(s1, x, y, prior, gain_unit, sigma0, near, weights) -> LawFit:
    """The fit at the α of least cost: a grid over ALPHA_RANGE then a bounded search
    (near=None), or the search within 1.5× of near."""

    def cost(a):
        return _fit_alpha(s1, x, y, a, prior, gain_unit, sigma0, weights)[0]

    if near is None:
        grid = np.geomspace(*ALPHA_RANGE, 25)
        costs = [cost(a) for a in grid]
        i = int(np.argmin(costs))
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        at, at_cost = float(grid[i]), costs[i]
    else:
        lo, hi = max(near / 1.5, ALPHA_RANGE[0]), min(near * 1.5, ALPHA_RANGE[1])
        at, at_cost = near, cost(near)
    best = minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3})
    alpha = float(best.x) if best.fun <= at_cost else at
    _, p, sigma, res = _fit_alpha(s1, x, y, alpha, prior, gain_unit, sigma0, weights)
    return LawFit("", float(p[0]), float(p[1]), alpha, float(p[2]), gain_unit, sigma, _lag1(res))


def _lag1(res: np.ndarray) -> float:
    """The lag-1 autocorrelation of residuals, in [0, 0.99]."""
    r = res - res.mean()
    denom = float(np.sum(r * r))
    if len(r) < 3 or denom <= 0:
        return 0.0
    return float(np.clip(np.sum(r[1:] * r[:-1]) / denom, 0.0, 0.99))


def with_gain(fit: LawFit, gain: float) -> LawFit:
    """The fit with its gain replaced (B = gain / gain_unit)."""
    return replace(fit, B=gain / fit.gain_unit)


def fit_base(s1: np.ndarray, loss: np.ndarray) -> tuple[float, float, float]:
    """(L0, A, α) on a stable-phase curve (no annealing): fit_law with X = 0."""
    f = fit_law(TISSUE, s1, np.zeros(len(s1)), loss, 1.0)
    return f.L0, f.A, f.alpha


def shrunk(prior: GainPrior, rho: float) -> GainPrior:
    """The prior as fit_law weighs it against a curve whose residuals have lag-1
    autocorrelation rho."""
    return GainPrior(prior.mean, prior.sd * math.sqrt((1 - rho) / (1 + rho)))
