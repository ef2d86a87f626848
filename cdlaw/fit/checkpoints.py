"""A runs folder's intermediate task evaluations as checkpoint rows: what `cdlaw downstream`
fits its links to besides each run's end (docs/downstream.md).

    runs = with_checkpoints("runs/demo", load_runs("runs/demo", checkpoints=True))

Each done run's metrics.parquet holds the task columns at every evaluation that scored
them (`[eval] every`); every such row before the run's last step becomes a row of the
table with the run's N, D, D′, strategy, seed, lr and weight decay, `loss` = that row's
validation loss, `tokens_trained` = its tokens seen, and `checkpoint` true. A table file
carries its own checkpoint rows (docs/files.md) and is returned as it is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.table import round_folders
from cdlaw.tasks.columns import parse_column

IDENTITY = ("run_id", "n_params", "fresh_tokens", "derived_tokens", "strategy", "seed", "lr",
            "weight_decay", "status")  # fmt: skip


def with_checkpoints(path: str | Path, runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` (prepared, with its `checkpoint` column) and, for a runs folder, the earlier
    task evaluations of its runs as checkpoint rows. Unreadable curves are skipped: the
    final rows still fit."""
    path = Path(path)
    if not path.is_dir() or "run_id" not in runs.columns:
        return runs
    folders = [path, *round_folders(path)]
    extra = []
    for _, row in runs[~runs["checkpoint"]].iterrows():
        file = next(
            (f / str(row["run_id"]) / "metrics.parquet" for f in folders
             if (f / str(row["run_id"]) / "metrics.parquet").is_file()),
            None,
        )  # fmt: skip
        if file is None:
            continue
        try:
            m = pd.read_parquet(file)
        except (OSError, ValueError):
            continue
        tasks = [c for c in m.columns if parse_column(str(c))]
        if not tasks or "val_loss" not in m.columns or "step" not in m.columns:
            continue
        scored = m[tasks].notna().any(axis=1) & np.isfinite(m["val_loss"].to_numpy(float))
        early = m[scored & (m["step"] < m["step"].max())]
        if early.empty:
            continue
        rows = pd.DataFrame({k: row[k] for k in IDENTITY if k in runs.columns}, index=early.index)
        rows["loss"] = early["val_loss"].to_numpy(float)
        if "tokens_seen" in early.columns:
            rows["tokens_trained"] = early["tokens_seen"].to_numpy(float)
        for c in tasks:
            rows[c] = early[c].to_numpy(float)
        rows["checkpoint"] = True
        extra.append(rows)
    if not extra:
        return runs
    out = pd.concat([runs, *extra], ignore_index=True)
    out["checkpoint"] = out["checkpoint"].astype(bool)
    out.attrs = dict(runs.attrs)
    return out
