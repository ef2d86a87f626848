"""A run's training curve, metrics.parquet: one row per logged step (docs/files.md).

The loop appends rows as it trains and writes the file at every evaluation and checkpoint
(metrics first, so no checkpoint is newer than its curve); a resumed run, or a branch that
starts from a fork, takes the rows up to its starting step (`resumed_rows`). Every row
names its run (`run_id`), so curves of many runs concatenate into one table; files from
before that column read as they are, and a resumed run stamps its rows with its id.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cdlaw.system.atomic import write_parquet_atomic
from cdlaw.train.damage import metrics_problem, report_damage, set_aside, unreadable

METRIC_COLUMNS = [
    "run_id",
    "step",
    "tokens_seen",
    "epoch",
    "lr",
    "train_loss",
    "val_loss",
    "grad_norm",
    "flops",
    "elapsed_s",
]


def read_metrics(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return pd.read_parquet(path).to_dict("records")


def resumed_rows(path: Path, step: int, logged: list[int], run_id: str) -> list[dict] | None:
    """The metrics rows up to a checkpoint's step (`logged`: the steps that wrote one), each
    stamped with `run_id` (a branch's rows start as its trunk's), or None when
    metrics.parquet cannot give them all: it is set aside and named in one line, and the
    run restarts from step 0 (resuming would leave a hole in its curve)."""
    problem = metrics_problem(path, step, logged)
    if problem is None:
        try:
            return [{**r, "run_id": run_id} for r in read_metrics(path) if r["step"] <= step]
        except Exception as e:  # pyarrow's errors on a damaged column chunk
            problem = unreadable(e)
    aside = f"; set aside as {set_aside(path).name}" if path.exists() else ""
    report_damage(
        f"{path} {problem}{aside}: the run restarts from step 0 (its curve to step {step} is lost)"
    )
    return None


def write_metrics(path: Path, rows: list[dict]) -> None:
    """The rows as metrics.parquet: METRIC_COLUMNS, then the downstream tasks' columns
    (task_<task>_<metric>, NaN where a row did not evaluate them) in their first order."""
    extra = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in METRIC_COLUMNS]
    df = pd.DataFrame(rows, columns=METRIC_COLUMNS + extra)
    write_parquet_atomic(path, df.astype({"step": "int64", "tokens_seen": "int64"}))
