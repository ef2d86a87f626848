"""A trainer's log as one table, whatever wrote it: a .csv/.tsv/.parquet (a W&B history or
chart export, a Lightning CSVLogger, any table), Hugging Face Trainer's
`trainer_state.json`, or a TensorBoard log folder (the tensorboard extra).

    frame, facts = read_log(Path("wandb_export.csv"))

The frame has one row per logged row (its index: where the row is in the file, for
messages) and the log's own column names, except that a W&B chart export's
"<run> - <metric>" columns are named by their metric and its __MIN/__MAX columns dropped.
`facts` holds what the log says about the run beyond its rows (a trainer_state.json's
max_steps as `planned_steps`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.columns import SPELLINGS
from cdlaw.system.errors import BadInput

# The columns a log may name each quantity, compared ignoring case; the first that has a
# finite value wins (a cdlaw run's val_loss before its train_loss).
TOKEN_COLUMNS = (
    "tokens_seen",
    "tokens",
    "token",
    "num_tokens",
    "consumed_tokens",
    "tokens_trained",
    "total_tokens",
    "throughput/total_tokens",
    "train/tokens",
    "train/tokens_seen",
    "num_input_tokens_seen",
    "train/num_input_tokens_seen",
)
# Optimizer steps before a logger's own counter (W&B's _step counts log calls): Hugging
# Face's Trainer (train/global_step), Lightning (trainer/global_step), OLMo-core, nanoGPT.
STEP_COLUMNS = (
    "train/global_step",
    "trainer/global_step",
    "global_step",
    "step",
    "steps",
    "iteration",
    "iter",
    "train/step",
    "_step",
)
LOSS_COLUMNS = (
    "val_loss",
    "eval_loss",
    "validation_loss",
    "eval/loss",
    "val/loss",
    "validation/loss",
    "loss",
    "train_loss",
    "train/loss",
    "train/ce loss",
    "train/ce_loss",
    "train/crossentropyloss",
    "train/cross_entropy_loss",
    "train/lm_loss",
    "lm_loss",
    "lm loss",
    "train_loss_step",
)
LR_COLUMNS = (
    *SPELLINGS["lr"],
    "train/lr",
    "train/learning_rate",
    "optimizer/lr",
    "optim/lr",
    "optim/learning_rate_group0",
    "optim/lr_group0",
    "learning-rate",
    "lr-adamw",
    "lr-adam",
    "lr-sgd",
)

# A loss column is chosen only if it has this many points (a validation loss evaluated
# rarely gives way to the training loss); else the one with the most.
MIN_LOSS_POINTS = 16
TABLES = (".csv", ".tsv", ".parquet", ".pq")


def read_log(path: Path) -> tuple[pd.DataFrame, dict]:
    """The log at `path` as (frame, facts); BadInput when it is none of the formats."""
    if tensorboard_files(path):
        return tensorboard_frame(path), {}
    if path.is_dir():
        state = path / "trainer_state.json"
        if state.is_file():
            return trainer_state(state)
        raise BadInput(
            f"{path} has no metrics.parquet (a cdlaw run folder), trainer_state.json nor "
            "TensorBoard event files; give a run folder, a .csv/.parquet log, a "
            "trainer_state.json or a TensorBoard log folder"
        )
    if path.suffix.lower() == ".json":
        return trainer_state(path)
    if path.suffix.lower() not in TABLES:
        raise BadInput(
            f"{path} is not a .csv, .tsv or .parquet log nor a trainer_state.json (got "
            f"{path.suffix or 'no suffix'!r}): give one of those, a cdlaw run folder, or a "
            "TensorBoard log folder"
        )
    if path.stat().st_size == 0:
        raise BadInput(
            f"{path} is empty: a log needs a header line (step or tokens, loss, lr) and a row "
            "per logged step"
        )
    from cdlaw.fit.columns import read_table

    return chart_export(read_table(path)), {}


def chart_export(frame: pd.DataFrame) -> pd.DataFrame:
    """A W&B chart export's "<run> - <metric>" columns renamed to the metric, their
    __MIN/__MAX companions dropped; any other table unchanged."""
    names = [str(c) for c in frame.columns]
    if not any(" - " in n for n in names):
        return frame
    keep = [c for c, n in zip(frame.columns, names, strict=True)
            if not n.endswith(("__MIN", "__MAX"))]  # fmt: skip
    out = frame[keep]
    renamed = {c: str(c).rsplit(" - ", 1)[-1] for c in keep}
    if len(set(renamed.values())) < len(renamed):  # two runs' columns: not one run's log
        raise BadInput(
            "the log holds columns of more than one run (W&B's '<run> - <metric>'): export "
            "one run's history"
        )
    return out.rename(columns=renamed)


def trainer_state(path: Path) -> tuple[pd.DataFrame, dict]:
    """Hugging Face Trainer's trainer_state.json: its log_history as rows (training rows
    with loss and learning_rate, evaluation rows with eval_loss), max_steps as the plan."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read {path} as JSON: {' '.join(str(e).split())[:160]}") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list) or not history:
        raise BadInput(
            f"{path} has no log_history: give Hugging Face Trainer's trainer_state.json (in "
            "its output or checkpoint folder), or a .csv of step, loss and lr"
        )
    rows = [r for r in history if isinstance(r, dict)]
    frame = pd.DataFrame(rows)
    frame.index = np.arange(1, len(frame) + 1)
    frame.attrs["rows_are"] = "log_history entry"
    facts = {}
    if isinstance(state.get("max_steps"), int | float) and state["max_steps"] > 0:
        facts["planned_steps"] = int(state["max_steps"])
    return frame, facts


def tensorboard_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if "tfevents" in path.name else []
    return sorted(path.rglob("*tfevents*")) if path.is_dir() else []


def tensorboard_frame(path: Path) -> pd.DataFrame:
    """Every scalar of the event files, one column per tag, one row per step."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        from cdlaw.system.extras import install_advice

        raise BadInput(
            f"{path} is a TensorBoard log, which needs the tensorboard package; install "
            f"{install_advice('tensorboard')}, or export the scalars to a .csv"
        ) from None
    series: dict[str, dict[int, float]] = {}
    for file in tensorboard_files(path):
        acc = EventAccumulator(str(file), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            for ev in acc.Scalars(tag):
                series.setdefault(tag, {})[int(ev.step)] = float(ev.value)
    if not series:
        raise BadInput(f"{path} holds no TensorBoard scalars")
    frame = pd.DataFrame(series).sort_index()
    frame.insert(0, "step", frame.index.to_numpy())
    frame.index = np.arange(1, len(frame) + 1)
    frame.attrs["rows_are"] = "row"
    return frame
