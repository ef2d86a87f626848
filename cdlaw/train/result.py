"""A run's result row: what result.json holds and summary.parquet has one row of.

One builder for every row, so a finished, diverged or failed run has the same columns
with the same meaning: `result_row` is called by the trainer when a run ends and by the
sweep's worker when a run crashes. `run_facts` gives the facts a run has before it
trains (N, D, D′, tokens, FLOPs, steps), for --dry-run, --only and `cdlaw status`.
Torch-free: the sweep reads these without training.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import cdlaw
from cdlaw.config import RunConfig
from cdlaw.shapes import count_params, flops_per_token
from cdlaw.strategies import PARAPHRASE

# The columns every result row has, finished or failed (a trained run adds a few more:
# paraphrase_passes, mlp_hidden, size, steps, flops_with_attention, precision, corpus_key).
SUMMARY_COLUMNS = tuple(
    """run_id sweep strategy n_params n_params_total fresh_tokens derived_tokens tokens_trained
    derived_ratio epochs tokens_per_param lr weight_decay seed d_model n_layers n_heads seq_len
    batch_tokens vocab_size schedule loss train_loss status flops wall_seconds tokens_per_second
    device corpus cdlaw_version""".split()
)
FINISHED = ("done", "diverged", "failed")
SIMULATED_DEVICE = "simulated"  # the device of a run whose loss a law drew: nothing trained


def run_facts(cfg: RunConfig) -> dict:
    """The facts of a run before it trains: N, D, D′, r, tokens, FLOPs, steps."""
    counts = count_params(cfg.model)
    batch_tokens = cfg.train.batch_size * cfg.model.seq_len
    tokens = cfg.tokens_trained
    return {
        "run_id": cfg.run_id,
        "size": cfg.model.size,
        "strategy": cfg.strategy,
        "n_params": counts.n_params,
        "n_params_total": counts.n_params_total,
        "fresh_tokens": cfg.fresh_tokens,
        "derived_tokens": cfg.derived_tokens,
        "derived_ratio": cfg.derived_tokens / cfg.fresh_tokens,
        "epochs": tokens / cfg.fresh_tokens,  # passes over the fresh tokens' worth of data
        "tokens_trained": tokens,
        "tokens_per_param": cfg.fresh_tokens / counts.n_params,
        "flops": 6.0 * counts.n_params * tokens,
        "flops_per_token": flops_per_token(
            counts.n_params, cfg.model.n_layers, cfg.model.d_model, cfg.model.seq_len
        ),
        "steps": math.ceil(tokens / batch_tokens),
        "batch_tokens": batch_tokens,
        "lr": cfg.train.lr,
        "weight_decay": cfg.train.weight_decay,
        "seed": cfg.seed,
    }


def result_row(
    cfg: RunConfig,
    *,
    status: str,
    loss: float = math.nan,
    train_loss: float = math.nan,
    steps: int = 0,
    tokens_seen: int = 0,
    wall_seconds: float = 0.0,
    device: str = "",
    precision: str = "",
    stream_info: dict | None = None,
    error: str | None = None,
    forked_from: dict | None = None,
) -> dict:
    """The result row of a run that ended with `status` (done | diverged | failed).

    `stream_info` is the token stream's account of itself (epochs, paraphrase passes,
    corpus and its key); without it (a run that crashed before its stream was built) the
    counts follow from the config: repetition trains (D + D′)/D epochs, paraphrase one
    epoch of fresh tokens and D′/D passes of paraphrases. `forked_from` ({run, step}): the
    trunk whose state at that step a branch started from (cdlaw.train.forks).
    """
    fork = forked_from or {"run": "", "step": 0}
    counts = count_params(cfg.model)
    model, train = cfg.model, cfg.train
    info = stream_info or {}
    ratio = cfg.derived_tokens / cfg.fresh_tokens
    paraphrase = cfg.strategy == PARAPHRASE
    row = {
        "run_id": cfg.run_id,
        "sweep": cfg.sweep,
        "strategy": cfg.strategy,
        "n_params": counts.n_params,
        "n_params_total": counts.n_params_total,
        "fresh_tokens": cfg.fresh_tokens,
        "derived_tokens": cfg.derived_tokens,
        "tokens_trained": cfg.tokens_trained,
        "derived_ratio": ratio,
        "epochs": info.get("epochs", 1.0 if paraphrase else 1.0 + ratio),
        "paraphrase_passes": info.get("paraphrase_passes", ratio if paraphrase else 0.0),
        "tokens_per_param": cfg.fresh_tokens / counts.n_params,
        "lr": train.lr,
        "weight_decay": train.weight_decay,
        "seed": cfg.seed,
        "d_model": model.d_model,
        "n_layers": model.n_layers,
        "n_heads": model.n_heads,
        "mlp_hidden": model.mlp_hidden,
        "seq_len": model.seq_len,
        "batch_tokens": train.batch_size * model.seq_len,
        "vocab_size": model.vocab_size,
        "schedule": train.schedule,
        "size": model.size,
        "loss": loss,
        "train_loss": train_loss,
        "status": status,
        "steps": steps,
        "flops": flops_per_token(counts.n_params) * cfg.tokens_trained,
        "flops_with_attention": flops_per_token(
            counts.n_params, model.n_layers, model.d_model, model.seq_len
        )
        * cfg.tokens_trained,
        "wall_seconds": wall_seconds,
        "tokens_per_second": tokens_seen / wall_seconds if wall_seconds > 0 else math.nan,
        "device": device,
        "precision": precision,
        "corpus": info.get("corpus", cfg.data.corpus),
        "corpus_key": info.get("corpus_key", ""),
        "stream_order": info.get("stream_order", 0),
        "fork_parent": fork["run"],  # "" when the run trained from step 0
        "fork_step": int(fork["step"]),
        "cdlaw_version": cdlaw.__version__,
    }
    if error is not None:
        row["error"] = error
    return row


def read_result(run_dir: Path) -> dict | None:
    """A run's result.json, or None when it has none or it cannot be read: either way the run
    is not done (cdlaw.train.damage sets an unreadable one aside before the run is retrained).

    Readable means a JSON object whose `status` is done, diverged or failed.
    """
    try:
        row = json.loads((Path(run_dir) / "result.json").read_text())
    except (FileNotFoundError, ValueError):  # ValueError: cut short, or not even text
        return None
    return row if isinstance(row, dict) and row.get("status") in FINISHED else None
