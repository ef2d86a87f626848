"""Stable-phase curves drawn from a known law: the governor's planted truth.

The loss a WSD run logs at t tokens in its stable phase is the cooled-down loss it would
end at, K(t/(1 − f)) = L(N, D, D′) + δ, divided by the stable-to-cooled ratio, times
optional log-normal noise. What the governor calibrates (δ), its gain and its crossing
are then known exactly.
"""

import json

import numpy as np
import pandas as pd

from cdlaw.govern.cooldown import Cooldown
from cdlaw.govern.governor import law_loss
from cdlaw.law import PRESETS

LAW = PRESETS["qin2026"]
RATIO = Cooldown(ratio=0.8, sd=0.0, source="planted")


def planted_frame(
    tokens,
    n=100e6,
    fresh=1e9,
    strategy="repetition",
    f=0.2,
    delta=0.02,
    noise=0.0,
    seed=0,
    warmup=3,
    peak_lr=1e-3,
    law=LAW,
    ratio=RATIO,
) -> pd.DataFrame:
    """tokens, loss, lr of a planted stable phase (the first `warmup` rows warming up)."""
    tokens = np.asarray(tokens, dtype=float)
    cooled = law_loss(law, n, fresh, strategy, tokens / (1 - f)) + delta
    rng = np.random.default_rng(seed)
    loss = ratio.stable(cooled) * np.exp(noise * rng.standard_normal(len(tokens)))
    lr = np.full(len(tokens), peak_lr)
    lr[:warmup] = peak_lr * (np.arange(warmup) + 1) / (warmup + 1)
    return pd.DataFrame({"tokens": tokens, "loss": loss, "lr": lr})


def write_run_folder(folder, frame, n, fresh, derived, strategy, f=0.2, vocab=100_000):
    """A cdlaw run folder as the trainer leaves it mid-run: config.json and metrics.parquet
    (the loss as val_loss, evaluated at every row)."""
    folder.mkdir(parents=True)
    batch_tokens = 256
    config = {
        "strategy": strategy,
        "fresh_tokens": int(fresh),
        "derived_tokens": int(derived),
        "n_params": int(n),
        "steps": int(np.ceil((fresh + derived) / batch_tokens)),
        "train": {"schedule": "wsd", "decay_frac": f, "batch_size": 4, "lr": 0.02},
        "data": {"vocab_size": vocab},
        "model": {"seq_len": 64},
    }
    (folder / "config.json").write_text(json.dumps(config))
    metrics = pd.DataFrame(
        {
            "step": (frame["tokens"] / batch_tokens).round().astype(int),
            "tokens_seen": frame["tokens"].astype(int),
            "lr": frame["lr"],
            "train_loss": frame["loss"] + 0.05,
            "val_loss": frame["loss"],
        }
    )
    metrics.to_parquet(folder / "metrics.parquet")
    return folder
