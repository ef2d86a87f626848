"""Ladders of runs from a known two-step task law, the planted truth the task predictors
(cdlaw.fit.predictors) must recover.

`two_step`: bpb(N, D) = E + A/N^α + B/D^β (Bhagia et al.'s step 1) and an accuracy that is
a sigmoid of it, floor 0.25 (step 2), scored on ITEMS items (binomial noise); every run is
evaluated at a quarter, half and three quarters of its tokens (checkpoint rows) and at the
end, or at END_FRACS, three checkpoints in its last fifth, where a test needs the
step-to-step noise (cdlaw.fit.task_noise). The validation loss is 2·bpb. `direct`: the accuracy is Krajewski et al.'s power law of
log accuracy in compute, the same at every ratio of tokens per parameter, while the loss
differs by ratio at equal compute: no single link from loss to accuracy holds, the direct
fit does.
"""

import numpy as np
import pandas as pd

STEP1 = {"E": 0.6, "A": 300.0, "alpha": 0.3, "B": 400.0, "beta": 0.3}
STEP2 = {"a": 0.7, "x0": 2.0, "k": -4.0, "b": 0.25}
ITEMS = 2000
SIZES = (20e6, 40e6, 80e6, 160e6, 320e6, 640e6)
RATIOS = (10, 20, 40)


def true_bpb(N, T):
    s = STEP1
    return s["E"] + s["A"] * np.asarray(N) ** -s["alpha"] + s["B"] * np.asarray(T) ** -s["beta"]


def true_acc(N, T):
    s = STEP2
    return s["b"] + s["a"] / (1 + np.exp(-s["k"] * (true_bpb(N, T) - s["x0"])))


DIRECT = {"logA": 13.5, "alpha": 0.33, "b": 0.25}  # −log q = e^logA·C^−α, q above chance


def true_direct(N, T):
    d = DIRECT
    u = np.exp(d["logA"] - d["alpha"] * np.log(6 * np.asarray(N) * T))
    return d["b"] + (1 - d["b"]) * np.exp(-u)


FRACS = (0.25, 0.5, 0.75, 1.0)  # each run's evaluations, as shares of its tokens
END_FRACS = (0.25, 0.5, 0.85, 0.9, 0.95, 1.0)  # dense at the end: step-to-step noise measured


def two_step(seed: int = 0, direct: bool = False, fracs=FRACS) -> pd.DataFrame:
    """The ladder: SIZES × RATIOS, each run evaluated at `fracs` of its tokens (the last, 1,
    its end; the rest checkpoints)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in SIZES:
        for r in RATIOS:
            D = r * N
            for frac in fracs:
                T = frac * D
                bpb = float(true_bpb(N, T)) * np.exp(rng.normal(0, 0.003))
                if direct:  # the loss favours long runs at equal compute; accuracy does not
                    bpb *= 1 + 0.15 * np.log(r / 20)
                p = float(true_direct(N, T) if direct else true_acc(N, T))
                rows.append({
                    "n_params": N, "fresh_tokens": D, "derived_tokens": 0.0, "strategy": "none",
                    "seed": 0, "loss": 2 * bpb, "status": "done", "checkpoint": frac < 1,
                    "tokens_trained": T, "task_quiz_acc": rng.binomial(ITEMS, p) / ITEMS,
                    "task_quiz_bpb": bpb,
                })  # fmt: skip
    return pd.DataFrame(rows)
