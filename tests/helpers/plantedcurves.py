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


def write_planted_sweep(runs, ratio=0.8, steps=(25, 50, 75, 100), warmup_frac=None):
    """A WSD runs folder with one trunk (the longest) and a branch forked at each shorter
    run's decay start: the trunk's validation loss is 4 − 0.3·ln(tokens) (exact under
    log-token interpolation), every run's final loss `ratio` × that at its decay start.
    Warmup: 2 steps, or warmup_frac of each run's steps, its evaluations 1 nat higher."""
    import math

    runs.mkdir(parents=True)
    batch, seq, decay = 4, 8, 0.2
    trunk_steps = max(steps)
    rows = []
    for n_steps in steps:
        run_id = f"run{n_steps:03d}"
        decay_step = n_steps - round(decay * n_steps)
        folder = runs / run_id
        folder.mkdir()
        train = {"schedule": "wsd", "decay_frac": decay, "batch_size": batch, "lr": 0.02,
                 "warmup_steps": 2, "eval_every": 10}  # fmt: skip
        if warmup_frac is not None:
            train.update(warmup_steps=0, warmup_frac=warmup_frac)
        warmup = train["warmup_steps"] or int(warmup_frac * n_steps)
        config = {"steps": n_steps, "train": train, "model": {"seq_len": seq}}
        (folder / "config.json").write_text(json.dumps(config))
        trunk = n_steps == trunk_steps
        step = np.arange(10, n_steps + 1, 10)
        if not trunk:  # a branch holds its trunk's rows before the fork, then its own
            step = np.append(step[step < decay_step], n_steps)
        tokens = step * batch * seq
        stable = 4 - 0.3 * np.log(tokens) + (step <= warmup)
        lr = np.where(step <= decay_step, 0.02, 0.002)
        pd.DataFrame(
            {"step": step, "tokens_seen": tokens, "lr": lr, "val_loss": stable}
        ).to_parquet(folder / "metrics.parquet")
        loss = ratio * (4 - 0.3 * math.log(decay_step * batch * seq))
        rows.append(
            {
                "run_id": run_id,
                "status": "done",
                "n_params": 1000,
                "fresh_tokens": 200,
                "derived_tokens": n_steps * batch * seq - 200,
                "strategy": "repetition",
                "seed": 0,
                "loss": loss,
                "fork_parent": "" if trunk else f"run{trunk_steps:03d}",
                "fork_step": 0 if trunk else decay_step,
            }
        )
    pd.DataFrame(rows).to_parquet(runs / "summary.parquet")
    return runs
