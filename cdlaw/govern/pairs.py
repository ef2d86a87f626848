"""What a WSD sweep with shared trunks measures about cooldowns: one row per finished run,
the stable-phase loss S at its decay start (read off its trunk's curve) beside its loss K
after the cooldown.

    pairs = cooldown_pairs(Path("runs/demo"))    # columns below; one row per usable run

A branch forks from its trunk at its own decay start, so the trunk's curve is the
branch's stable phase continued with the same tokens; S at the decay start is the
trunk's validation loss there, interpolated in log tokens between the trunk's stable-phase
evaluations (or extrapolated past the last one by at most one evaluation interval). A run
trained past its fork (or from step 0) is its own trunk. Runs whose decay start lies before
the first stable evaluation have no S and are left out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.config import TrainConfig
from cdlaw.schedule import decay_start, warmup_steps
from cdlaw.system.errors import BadInput


@dataclass(frozen=True)
class RunCurve:
    """One finished run of a sweep: its facts and its stable-phase validation curve."""

    run_id: str
    n_params: float
    fresh_tokens: float
    derived_tokens: float
    strategy: str
    seed: int
    lr: float
    loss: float  # after the cooldown
    steps: int
    batch_tokens: int
    decay_step: int  # the first step below the peak lr
    fork_parent: str
    fork_step: int
    train: TrainConfig  # config.json's [train]
    metrics: pd.DataFrame

    @property
    def decay_tokens(self) -> float:
        return float(self.decay_step * self.batch_tokens)

    @property
    def tokens(self) -> float:
        return self.fresh_tokens + self.derived_tokens

    def stable_val(self) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, val_loss) of the evaluations at the peak lr after warmup."""
        m = self.metrics
        ok = np.isfinite(m["val_loss"].to_numpy(float)) & (
            m["step"].to_numpy(int) <= self.decay_step
        )
        ok &= m["step"].to_numpy(int) > warmup_steps(self.steps, self.train)
        return m["tokens_seen"].to_numpy(float)[ok], m["val_loss"].to_numpy(float)[ok]


def read_runs(runs: Path) -> dict[str, RunCurve]:
    """Every done, WSD run of a runs folder with its metrics, by run_id."""
    summary = runs / "summary.parquet"
    if not runs.is_dir():
        raise BadInput(
            f"{runs} does not exist; give the runs folder of a WSD sweep, e.g. runs/demo"
        )
    if not summary.is_file():
        raise BadInput(
            f"{runs} has no summary.parquet: give the runs folder of a WSD sweep "
            "(share = true), e.g. runs/demo"
        )
    out = {}
    for rec in pd.read_parquet(summary).to_dict("records"):
        folder = runs / str(rec["run_id"])
        if rec.get("status") != "done" or not (folder / "metrics.parquet").is_file():
            continue
        config = json.loads((folder / "config.json").read_text())
        if config["train"].get("schedule") != "wsd":
            continue
        train = TrainConfig(**_train_fields(config["train"]))
        steps = int(config["steps"])
        out[str(rec["run_id"])] = RunCurve(
            run_id=str(rec["run_id"]),
            n_params=float(rec["n_params"]),
            fresh_tokens=float(rec["fresh_tokens"]),
            derived_tokens=float(rec["derived_tokens"]),
            strategy=str(rec["strategy"]),
            seed=int(rec["seed"]),
            lr=train.lr,
            loss=float(rec["loss"]),
            steps=steps,
            batch_tokens=train.batch_size * int(config["model"]["seq_len"]),
            decay_step=decay_start(steps, train),
            fork_parent=str(rec.get("fork_parent") or ""),
            fork_step=int(rec.get("fork_step") or 0),
            train=train,
            metrics=pd.read_parquet(folder / "metrics.parquet"),
        )
    return out


def _train_fields(train: dict) -> dict:
    """config.json's [train] as TrainConfig takes it (keys it does not know dropped)."""
    from dataclasses import fields

    known = {f.name for f in fields(TrainConfig)}
    return {k: v for k, v in train.items() if k in known}


def trunk_of(run: RunCurve, runs: dict[str, RunCurve]) -> RunCurve:
    """The run whose curve continues `run`'s stable phase: its fork parent when it forked
    at its own decay start, else itself."""
    parent = runs.get(run.fork_parent)
    if parent is not None and run.fork_step >= run.decay_step:
        return parent
    return run


def stable_at(tokens: np.ndarray, loss: np.ndarray, at: float, gap: float) -> float:
    """The stable-phase loss at `at` tokens: log-token interpolation between evaluations,
    or extrapolation from the last two by at most `gap` tokens; NaN otherwise."""
    if len(tokens) == 0 or at < tokens[0]:
        return math.nan
    if at <= tokens[-1]:
        return float(np.interp(math.log(at), np.log(tokens), loss))
    if len(tokens) < 2 or at - tokens[-1] > gap:
        return math.nan
    x0, x1 = math.log(tokens[-2]), math.log(tokens[-1])
    slope = (loss[-1] - loss[-2]) / (x1 - x0)
    return float(loss[-1] + slope * (math.log(at) - x1))


def cooldown_pairs(runs_dir: Path) -> pd.DataFrame:
    """One row per run with a measurable S: run_id, trunk, n_params, fresh_tokens,
    derived_ratio, strategy, seed, lr, decay_tokens, stable (S), cooled (K)."""
    runs = read_runs(runs_dir)
    rows = []
    for run in runs.values():
        trunk = trunk_of(run, runs)
        tokens, loss = trunk.stable_val()
        gap = float(trunk.train.eval_every * trunk.batch_tokens)
        s = stable_at(tokens, loss, run.decay_tokens, gap)
        if not math.isfinite(s) or not math.isfinite(run.loss):
            continue
        rows.append(
            {
                "run_id": run.run_id,
                "trunk": trunk.run_id,
                "n_params": run.n_params,
                "fresh_tokens": run.fresh_tokens,
                "derived_ratio": run.derived_tokens / run.fresh_tokens,
                "strategy": run.strategy,
                "seed": run.seed,
                "lr": run.lr,
                "decay_tokens": run.decay_tokens,
                "stable": s,
                "cooled": run.loss,
            }
        )
    return pd.DataFrame(rows)
