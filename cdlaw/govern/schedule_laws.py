"""The published schedule-aware loss-curve laws the governor's relation was compared with.

Both describe a run's loss at step s from its learning rates η_1 … η_s alone:

- Tissue, Wang & Wang 2024, "Scaling Law with Learning Rate Annealing", arXiv 2408.11029:

      L(s) = L0 + A·S1^(−α) − C·S2,   S1 = Σ_{i≤s} η_i (forward area),
      S2 = Σ_{i≤s} m_i,  m_i = λ·m_{i−1} + (η_{i−1} − η_i)  (annealing area with momentum,
      λ = 0.999 as the paper uses);

- Luo et al. 2025, "A Multi-Power Law for Loss Curve Prediction Across Learning Rate
  Schedules", arXiv 2503.12811:

      L(t) = L0 + A·(S1(t) + S_W)^(−α) − LD(t),
      LD(t) = B·Σ_{k≤t} (η_{k−1} − η_k)·G(η_k^(−γ)·S_k(t)),  S_k(t) = Σ_{k≤τ≤t} η_τ,
      G(x) = 1 − (C·x + 1)^(−β),

  S1 + S_W being every step's lr, warmup included.

In a stable phase (η constant) both reduce to L0 + A·S1^(−α): that part is fitted to a run's
own curve (fit_base), and the annealing part (C; or B, C, β, γ) to other runs' cooldowns
(benchmarks/bench_govern.py). Warmup steps add to S1 but not to the annealing sums (their
lr rises). Pure numpy and scipy.
"""

from __future__ import annotations

import math

import numpy as np

TISSUE_MOMENTUM = 0.999


def drops(lr: np.ndarray) -> np.ndarray:
    """η_{i−1} − η_i per step (0 at the first and wherever the lr rises: warmup)."""
    d = np.zeros(len(lr))
    d[1:] = lr[:-1] - lr[1:]
    return np.maximum(d, 0.0)


def forward_area(lr: np.ndarray) -> np.ndarray:
    """S1 after each step: the cumulative sum of the lr."""
    return np.cumsum(lr)


def tissue_annealing_area(lr: np.ndarray, momentum: float = TISSUE_MOMENTUM) -> float:
    """S2 at the last step: Σ m_i with m_i = λ·m_{i−1} + (η_{i−1} − η_i)."""
    d = drops(lr)
    n = len(d)
    if not d.any():
        return 0.0
    # m_i = Σ_{j≤i} λ^(i−j)·d_j, so Σ_i m_i = Σ_j d_j·(1 − λ^(n−j))/(1 − λ)
    j = np.arange(n)
    return float(np.sum(d * (1 - momentum ** (n - j)) / (1 - momentum)))


def multipower_reduction(lr: np.ndarray, B: float, C: float, beta: float, gamma: float) -> float:
    """LD at the last step (Luo et al. 2025)."""
    d = drops(lr)
    k = np.flatnonzero(d)
    if not len(k):
        return 0.0
    suffix = np.cumsum(lr[::-1])[::-1]  # S_k = Σ_{τ≥k} η_τ
    x = lr[k] ** (-gamma) * suffix[k]
    return float(B * np.sum(d[k] * (1 - (C * x + 1) ** (-beta))))


def base_loss(params, s1):
    """L0 + A·S1^(−α): the stable-phase part both laws share."""
    L0, A, alpha = params
    return L0 + A * np.asarray(s1, dtype=float) ** (-alpha)


def fit_base(s1: np.ndarray, loss: np.ndarray) -> tuple[float, float, float]:
    """(L0, A, α) by least squares on a stable-phase curve; L0 kept in [0, min loss)."""
    from scipy.optimize import least_squares

    s1 = np.asarray(s1, dtype=float)
    loss = np.asarray(loss, dtype=float)
    top = float(loss.min()) * 0.999

    def resid(p):
        return base_loss((p[0], math.exp(p[1]), p[2]), s1) - loss

    best = None
    for alpha0 in (0.2, 0.5, 1.0):
        for share in (0.3, 0.7):
            L0 = share * top
            A0 = max(float(loss[0] - L0), 1e-6) * float(s1[0]) ** alpha0
            r = least_squares(
                resid,
                [L0, math.log(A0), alpha0],
                bounds=([0.0, -50.0, 1e-3], [top, 50.0, 3.0]),
            )
            if best is None or r.cost < best.cost:
                best = r
    assert best is not None
    return float(best.x[0]), float(math.exp(best.x[1])), float(best.x[2])
