"""Runs simulated from a known law and known links from loss to task metrics: the planted
truth the downstream tests recover (cdlaw.tasks.links, `cdlaw downstream`, plan --link).

The losses are the qin2026 law's at the CD paper's sizes (14M–190M, D = 20 and 80 tokens
per parameter, r = 0 (two seeds), 1, 3, 7, 15 for each strategy: repetition and
paraphrase, and a third, self-distill, given an R* of its own) times a 1% log-normal draw; the accuracy is a binomial draw of ITEMS items around the sigmoid link, the bits per
byte a 1% draw around the power link, both at loss − shift[strategy].
"""

import numpy as np
import pandas as pd

from cdlaw.fit.link import LINK_FORMS
from cdlaw.law import PRESETS, Law

SIGMOID = {"a": 0.6, "L0": 3.5, "k": -3.0, "b": 0.25}
POWER = {"E": 0.3, "K": 0.25, "kappa": 1.5}
ITEMS = 400
QIN = PRESETS["qin2026"]
SELF_DISTILL = {"K": float(np.exp(4.0)), "rho": -0.15, "sigma": -0.05}
LAW = Law("cd", QIN.params, {**QIN.strategies, "self-distill": SELF_DISTILL})


def planted_runs(
    shift: dict | None = None, seed: int = 0, strategies=("repetition", "paraphrase")
) -> pd.DataFrame:
    """A summary-like table with task columns task_quiz_acc and task_quiz_bpb: 20 one-epoch
    runs (10 cells, two seeds) and 40 runs per strategy of `strategies`."""
    shift = shift or {}
    rng = np.random.default_rng(seed)
    law = LAW
    sig, power = LINK_FORMS["sigmoid"], LINK_FORMS["power"]
    rows = []
    for N in (14e6, 30e6, 60e6, 100e6, 190e6):
        for D in (20 * N, 80 * N):
            for s, ratios in (("none", (0,)), *[(s, (1, 3, 7, 15)) for s in strategies]):
                for r in ratios:
                    for seed_ in (0, 1) if s == "none" else (0,):
                        loss = float(law.loss(N, D, r * D, s)) * np.exp(rng.normal(0, 0.01))
                        x = loss - shift.get(s, 0.0)
                        p = float(sig.predict(list(SIGMOID.values()), x))
                        bpb = float(power.predict(list(POWER.values()), x))
                        rows.append({
                            "run_id": f"r{len(rows):03d}", "n_params": N, "fresh_tokens": D,
                            "derived_tokens": r * D, "strategy": s, "seed": seed_, "lr": 1e-3,
                            "weight_decay": 0.1, "loss": loss, "status": "done",
                            "task_quiz_acc": rng.binomial(ITEMS, p) / ITEMS,
                            "task_quiz_bpb": bpb * np.exp(rng.normal(0, 0.01)),
                        })  # fmt: skip
    return pd.DataFrame(rows)
