"""Run tables drawn from a known law on a CD-paper-like grid (7 sizes 14M–600M, D from 0.05×
to 16× of 20 tokens per parameter, r up to 60), for the fit tests."""

import numpy as np
import pandas as pd

from cdlaw.law import PRESETS

SIZES = [14e6, 30e6, 60e6, 100e6, 190e6, 370e6, 600e6]
MULTIPLES = [0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16]  # × 20 tokens per parameter
RATIOS = [1, 2, 4, 8, 16, 32, 60]
TRUE = PRESETS["qin2026"]


def make_table(law=TRUE, noise=0.005, seed=0, n_derived=190, ratios=RATIOS, sizes=SIZES):
    """All one-epoch cells plus n_derived random derived-token cells, losses from `law`."""
    rng = np.random.default_rng(seed)
    one = [(N, 20 * N * m, 0.0, "none") for N in sizes for m in MULTIPLES]
    derived = [
        (N, 20 * N * m, r * 20 * N * m, s)
        for N in sizes
        for m in MULTIPLES
        for s in law.strategies
        for r in ratios
    ]
    if n_derived is not None:
        derived = [derived[i] for i in np.sort(rng.choice(len(derived), n_derived, replace=False))]
    df = pd.DataFrame(
        one + derived, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy"]
    )
    df["loss"] = law_loss(law, df)
    df["loss"] *= np.exp(noise * rng.standard_normal(len(df)))
    return df


def law_loss(law, df):
    out = np.empty(len(df))
    for s in df["strategy"].unique():
        m = (df["strategy"] == s).to_numpy()
        out[m] = law.loss(
            df["n_params"][m].to_numpy(), df["fresh_tokens"][m].to_numpy(),
            df["derived_tokens"][m].to_numpy(), s,
        )  # fmt: skip
    return out
