"""Planted parameters of the overfitting-aware laws and a demo-like grid, for their tests."""

import numpy as np

from cdlaw.laws.practical import uninformed_loss

L0 = uninformed_loss(512)  # the demo's 512-token vocabulary
PRACTICAL = dict(E=1.0, a=100.0, b=80.0, alpha=0.5, beta=0.45, c=0.2, gamma=0.6, delta=0.5)
SHARED = dict(E=1.0, A=60.0, B=150.0, alpha=0.45, beta=0.40, mu=0.5)
PER_STRATEGY = [  # repetition, paraphrase
    dict(K=np.exp(2.5), rho=-0.3, sigma=-0.05, lam=0.012),
    dict(K=np.exp(3.0), rho=-0.2, sigma=-0.08, lam=0.008),
]

# A demo-like grid: 5 sizes from 2e4 to 2e6 parameters, D from 0.5× to 20× N, r up to 31.
SIZES = np.geomspace(2e4, 2e6, 5)
TOKENS_PER_PARAM = np.array([0.5, 1, 2, 5, 10, 20])
RATIOS = np.array([1, 2, 3, 5, 7, 11, 15, 23, 31.0])
