"""Simulated runs: each run's loss drawn from a known law instead of trained.

`cdlaw sweep FILE --executor simulate --law PRESET|FIT.json --noise 0.01` writes the same
run folders, result rows, summary and FLOP accounting as real runs, in a fraction of a
second per run, so that an experiment can be planned, a fit checked for how well it
recovers a known law, and a benchmark run, before any compute is spent. Every simulated
row says `device = "simulated"`, and `cdlaw fit` warns when it fits such rows.

Noise is multiplicative and seeded, so the same sweep always gets the same losses:

    loss = L_law(N, D, D′) · exp(noise · z_cell + seed_noise · z_run),   z ~ N(0, 1)

z_cell is drawn per cell (N, D, D′, strategy, lr, weight decay: what the law sees and the
hyperparameters a researcher tunes), so replicate seeds of a cell share it; z_run is drawn
per run (its run_id, which includes the seed), so `seed_noise` sets the scatter between
replicate seeds that `cdlaw fit` reports as its seed-noise floor.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cdlaw.config import RunConfig, to_dict
from cdlaw.law import Law
from cdlaw.shapes import count_params
from cdlaw.system.atomic import write_json_atomic, write_parquet_atomic
from cdlaw.system.errors import BadInput
from cdlaw.train.result import SIMULATED_DEVICE, result_row, run_facts


@dataclass(frozen=True)
class Simulation:
    """The law runs are drawn from, and the noise on top of it."""

    law: Law
    law_name: str  # a preset name or the fit.json it came from, recorded in every row
    noise: float = 0.0  # log-sd shared by a cell's seeds
    seed_noise: float = 0.0  # log-sd of each run on its own
    noise_seed: int = 0  # seeds both draws

    def __post_init__(self):
        for name, value in (("--noise", self.noise), ("--seed-noise", self.seed_noise)):
            if not (math.isfinite(value) and 0 <= value < 1):
                raise BadInput(f"{name} {value} must be a log-sd in [0, 1), e.g. 0.01 for 1%.")

    @property
    def key(self) -> str:
        """What a simulated run's losses depend on, recorded as its corpus_key: a sweep with
        another law or noise (or a real sweep) refuses its runs instead of mixing them."""
        spec = [self.law.to_dict() | {"source": ""}, self.noise, self.seed_noise, self.noise_seed]
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]
        return f"simulated:{digest}"


def check_strategies(sim: Simulation, runs: list[RunConfig]) -> None:
    """BadInput when a run's strategy has no parameters in the simulating law."""
    law = sim.law
    for strategy in sorted({cfg.strategy for cfg in runs}):
        if not law.knows_strategy(strategy):
            have = ", ".join(law.strategies) or "none"
            raise BadInput(
                f"the {sim.law_name} law has no parameters for strategy {strategy!r} (it has: "
                f"{have}); simulate with a law that has them, or drop {strategy} from the grid."
            )


def _normal(*key) -> float:
    """A standard normal draw determined by key (stable across runs, machines and versions)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).digest()
    return float(np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal())


def simulated_loss(sim: Simulation, cfg: RunConfig) -> float:
    """The loss the law predicts for this run, times its seeded noise."""
    check_strategies(sim, [cfg])
    n_params = count_params(cfg.model).n_params
    strategy = cfg.strategy
    mean = float(sim.law.loss(n_params, cfg.fresh_tokens, cfg.derived_tokens, strategy))
    cell = (
        sim.noise_seed,
        n_params,
        cfg.fresh_tokens,
        cfg.derived_tokens,
        strategy,
        cfg.train.lr,
        cfg.train.weight_decay,
    )
    z_cell = _normal("cell", *cell) if sim.noise else 0.0
    z_run = _normal("run", sim.noise_seed, cfg.run_id) if sim.seed_noise else 0.0
    return mean * math.exp(sim.noise * z_cell + sim.seed_noise * z_run)


def simulated_result(sim: Simulation, cfg: RunConfig) -> dict:
    """A finished run's result row, as the trainer writes it, with a simulated loss."""
    loss = simulated_loss(sim, cfg)
    facts = run_facts(cfg)
    row = result_row(
        cfg,
        status="done",
        loss=loss,
        steps=facts["steps"],
        tokens_seen=cfg.tokens_trained,
        device=SIMULATED_DEVICE,
        precision="",
        stream_info={"corpus": f"simulated: {sim.law_name}", "corpus_key": sim.key},
    )
    row["simulated_law"] = sim.law_name
    row["simulated_noise"] = sim.noise
    row["simulated_seed_noise"] = sim.seed_noise
    return row


def metrics_rows(cfg: RunConfig, row: dict) -> list[dict]:
    """metrics.parquet of a simulated run: its one final evaluation."""
    return [
        {
            "run_id": cfg.run_id,
            "step": row["steps"],
            "tokens_seen": cfg.tokens_trained,
            "epoch": row["epochs"],
            "lr": float("nan"),
            "train_loss": float("nan"),
            "val_loss": row["loss"],
            "grad_norm": float("nan"),
            "flops": row["flops"],
            "elapsed_s": 0.0,
        }
    ]


def simulate_run(sim: Simulation, cfg: RunConfig, run_dir) -> dict:
    """Write a simulated run's folder as a trained run's (config.json, metrics.parquet, then
    result.json last) and return its result row. No checkpoint and no model/: nothing was
    trained."""
    from pathlib import Path

    run_dir = Path(run_dir)
    config = {**to_dict(cfg), "run_id": cfg.run_id, "exec": {"device": SIMULATED_DEVICE}}
    config["simulation"] = {
        "law": sim.law_name,
        "noise": sim.noise,
        "seed_noise": sim.seed_noise,
        "noise_seed": sim.noise_seed,
    }
    write_json_atomic(run_dir / "config.json", config)
    row = simulated_result(sim, cfg)
    write_parquet_atomic(run_dir / "metrics.parquet", pd.DataFrame(metrics_rows(cfg, row)))
    write_json_atomic(run_dir / "result.json", row)
    return row
