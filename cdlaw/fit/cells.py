"""A table's cells: how the runs of one (N, D, D′, strategy) become the rows a fit sees
(`--select`, docs/files.md), what their replicates say of the training noise (the seed
noise floor), and whether a fit is still of the runs it was made from (stale_fit).

    cells = select_cells(prepare_runs(df), "auto")   # one row per cell, with n_in_cell
    noise = seed_noise(df)                            # a SeedNoise, or None
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.findings import SeedNoise
from cdlaw.fit.table import CELL, load_runs, prepare_runs, rows_digest, runs_beside
from cdlaw.system.errors import BadInput
from cdlaw.units import counted, format_number

KEEP_EVERY_RUN = "none"  # --select none: a select mode, not the strategy
AUTO = "auto"  # --select's default: seeds averaged, the best hyperparameters kept
SELECT = ("min", "mean", KEEP_EVERY_RUN, AUTO)
# Columns of a run's hyperparameters: runs of one cell that differ in them are a sweep of
# settings (the best is kept), not replicates (which are averaged).
HYPERPARAMETERS = ("lr", "weight_decay")


def select_cells(df: pd.DataFrame, how: str = AUTO) -> pd.DataFrame:
    """Reduce each cell's rows (runs of one (N, D, D′, strategy): they should differ only in
    lr / weight_decay / seed; mixed_cells says when they do not) to one (docs/files.md).

    "auto" (the default) averages the losses of runs that differ only in their seed (one
    setting's replicates: training noise) and keeps the setting of lr / weight_decay with
    the lowest mean (a sweep of hyperparameters: the best one, as the papers do); without
    those columns it is "mean". "min" keeps the run with the lowest loss; "mean" averages
    every run of the cell; averaged rows keep the first row_id of their runs, and columns
    that vary among them become NaN. "none" keeps every row. Adds `n_in_cell`.
    Which of these predicts runs a fit never saw best: docs/fit.md, section 1.
    """
    if how not in SELECT:
        raise BadInput(f"--select must be one of {', '.join(SELECT)}, not {how!r}")
    df = prepare_runs(df)
    attrs = dict(df.attrs)
    keys = list(CELL)
    sizes = df.groupby(keys, sort=False)["loss"].transform("size")
    if how == KEEP_EVERY_RUN:
        out = df.assign(n_in_cell=sizes.astype(np.int64))
    elif how == "min":
        out = _lowest(df, keys).assign(n_in_cell=sizes)
    elif how == "mean":
        out = _averaged(df, keys).assign(n_in_cell=sizes)
    else:
        settings = [c for c in HYPERPARAMETERS if c in df.columns]
        out = _averaged(df, keys + settings)
        if settings:
            out = _lowest(out, keys)
        out = out.assign(n_in_cell=sizes)  # aligned by index: the kept rows' own
    out = out.reset_index(drop=True)
    out["n_in_cell"] = out["n_in_cell"].astype(np.int64)
    out.attrs.update(attrs)
    out.attrs["select"] = how
    return out


def _lowest(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each group's row with the lowest loss (the row's index kept)."""
    best = df.groupby(keys, sort=False, dropna=False)["loss"].idxmin()
    return df.loc[np.sort(best.to_numpy())]


def _averaged(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each group's first row (by row_id, its index kept) with the group's mean loss; the
    columns that vary inside a group become NaN."""
    groups = df.groupby(keys, sort=False, dropna=False)
    first = (groups["row_id"].transform("min") == df["row_id"]).to_numpy()
    out = df[first].assign(loss=groups["loss"].transform("mean")[first])
    if len(out) == len(df):  # no group of two: nothing varies
        return out
    fixed = {*keys, "loss", "row_id", "derived_ratio", "tokens_per_param"}
    for col in [c for c in df.columns if c not in fixed]:
        varies = groups[col].transform("nunique", dropna=False)[first] > 1
        if varies.any():
            numeric = pd.api.types.is_numeric_dtype(out[col])
            out[col] = out[col].astype(float if numeric else object)
            out.loc[varies.to_numpy(), col] = np.nan
    return out


# Text columns that may differ between replicate runs of one setup: which run, where it
# forked from, which sweep (or round) trained it, how it was executed, and the size's
# label ("20K" and "20000" are one shape).
RUN_RECORD_COLUMNS = (
    "run_id", "fork_parent", "sweep", "status", "error", "device", "precision", "host",
    "cdlaw_version", "size",
)  # fmt: skip


def mixed_cells(df: pd.DataFrame, how: str) -> list[str]:
    """A warning when --select `how` (min, mean) reduces cells whose runs differ in a text
    column beyond lr, weight decay and seed (a `dataset`, a `tokenizer`): they are then
    not replicates of one setup, and the lowest (or mean) loss mixes setups. Columns that
    record a run (RUN_RECORD_COLUMNS) or name each row apart (an id) do not count. []
    for --select none, or cells of one setup."""
    if how == KEEP_EVERY_RUN:
        return []
    df = prepare_runs(df)
    text = [
        c
        for c in df.columns
        if c not in (*CELL, *RUN_RECORD_COLUMNS)
        and not pd.api.types.is_numeric_dtype(df[c])
        and df[c].nunique(dropna=False) < len(df)
    ]
    groups = df.groupby(list(CELL), sort=False)
    for col in text:
        counts = groups[col].nunique(dropna=False)
        mixed = counts[counts > 1]
        if len(mixed):
            key = mixed.index[0]
            n, d, dp, strategy = key
            values = sorted(map(str, groups.get_group(key)[col].unique()))
            cell = f"N {format_number(float(n))}, D {format_number(float(d))}, D′ "
            cell += f"{format_number(float(dp))}, {strategy}"
            return [
                f"--select {how} reduced {counted(len(df), 'run')} to "
                f"{counted(groups.ngroups, 'cell')} of (N, D, D′, strategy), but the runs of "
                f"{len(mixed)} cell(s) differ in {col!r} too (e.g. {cell}: {', '.join(values[:3])}): "
                "if they are not replicates of one setup, fit each setup on its own (or --select none)"
            ]
    return []


def stale_fit(df: pd.DataFrame, fit: dict, path, what: str = "fit") -> str | None:
    """Why `fit` (fit.json as a dict, or FitResult.to_dict(); with what="comparison", a
    compare.json) is not of the runs `df` of PATH as they are now, or None: under its own
    --select (replicate seeds averaged by `--select mean` are one row) the table gives
    another number of rows (`n_rows`), or other rows (a run's loss or coordinates changed,
    one retrained) than its `rows_digest` records. A file without a digest is checked by
    its row count alone, one without either (hand-written) not at all."""
    n_rows, digest = fit.get("n_rows"), fit.get("rows_digest")
    if not isinstance(n_rows, int):
        return None
    # each command's default when the file was written without a select (older fits: min)
    default = "mean" if what == "comparison" else "min"
    how = fit.get("select") if fit.get("select") in SELECT else default
    cells = select_cells(df, str(how))
    boot = fit.get("bootstrap")
    again = f" --bootstrap {len(boot)}" if isinstance(boot, list) and boot else ""
    law = f" --law {fit['law']}" if fit.get("law") not in (None, "cd") else ""
    refit = f"refit it first (`cdlaw fit {path}{law} --select {how}{again}`)"
    if what == "comparison":
        refit = f"compare them again (`cdlaw compare {path} --select {how}`)"
    if len(cells) != n_rows:
        return (
            f"the {what} has {counted(n_rows, 'row')} but {path} now gives {len(cells)} "
            f"(--select {how}): {refit}"
        )
    if isinstance(digest, str) and rows_digest(cells) != digest:
        return (
            f"the {what}'s {n_rows} rows are not {path}'s runs as they are now (a loss or a "
            f"run's coordinates changed since, e.g. a run retrained): {refit}"
        )
    return None


def stale_fit_file(fit_json: Path, fit: dict) -> str | None:
    """stale_fit for a fit.json against the runs it sits beside (runs_beside), as a warning
    naming the file; None when it is current, elsewhere, or its runs cannot be read."""
    runs = runs_beside(fit_json, "fit.json")
    if runs is None:
        return None
    try:
        why = stale_fit(load_runs(runs, quiet=True), fit, runs)
    except BadInput:
        return None  # the runs as they are cannot be read: nothing to compare with
    return f"{fit_json}: {why}" if why else None


def seed_noise(df: pd.DataFrame) -> SeedNoise | None:
    """The seed-to-seed scatter of log loss: the floor under any fit's log-RMSE.

    Runs of one cell that differ only in `seed` (same lr and weight_decay) are replicates;
    two runs of one seed (a cell trained by two sweeps) count once;
    their log losses scatter around the cell's mean by the training noise alone, which no
    law can fit. Returns the pooled standard deviation of log loss over such groups,
    sqrt(Σ (log L − cell mean)² / Σ (n − 1)), with the number of groups and runs, or None
    when the table has no replicates. A fit to single runs cannot beat it; a fit to
    `--select mean` cells of n seeds has a floor of about sd/√n.
    """
    df = prepare_runs(df)
    df = df[~_duplicated(df)]  # an exact copy of a run is not another seed
    cols = [c for c in (*CELL, "lr", "weight_decay") if c in df.columns]
    if "seed" in df.columns:  # one seed trained twice (two sweeps, two run ids): one run
        df = df.drop_duplicates(subset=[*cols, "seed"])
    logs = np.log(df["loss"].to_numpy(float))
    groups = df.assign(_log=logs).groupby(cols, dropna=False, sort=False)["_log"]
    n = groups.transform("size").to_numpy()
    if not (n > 1).any():
        return None
    dev = (logs - groups.transform("mean").to_numpy())[n > 1]
    sizes = groups.size()
    sizes = sizes[sizes > 1]
    dof = int((sizes - 1).sum())
    sd = float(np.sqrt(np.sum(dev**2) / dof))
    return SeedNoise(sd, len(sizes), int(sizes.sum()), "seed" in df.columns)


def duplicate_rows(df: pd.DataFrame) -> int:
    """How many rows are exact copies of an earlier row (every column equal but row_id,
    the row's place in the input): a table pasted twice, not replicate seeds."""
    return int(_duplicated(prepare_runs(df)).sum())


def _duplicated(df: pd.DataFrame) -> np.ndarray:
    cols = [c for c in df.columns if c != "row_id"]
    try:
        return df.duplicated(subset=cols).to_numpy()
    except TypeError:  # unhashable cells (lists read from parquet): compare their text
        return df[cols].astype(str).duplicated().to_numpy()


def replicates_text(n_runs: int | None, n_rows: int, select: str) -> str:
    """How a fit's rows came from the runs it read, in words: "231 of 296 rows: 65
    replicates collapsed by --select min (the lowest loss of each cell)". n_runs None: a
    fit.json from before it was recorded."""
    if n_runs is None:
        return f"{n_rows} rows"
    if select == KEEP_EVERY_RUN:
        return f"all {n_runs} rows (--select none: each replicate fitted as it is)"
    if n_runs == n_rows:
        return f"all {n_runs} rows (no two runs of one cell)"
    how = {
        "min": "the lowest loss of each cell",
        "mean": "the mean loss of each cell",
        "auto": "each cell's seeds averaged; where its runs differ in lr or weight_decay, "
        "the best setting's",
    }.get(select, select)
    gone = n_runs - n_rows
    return (
        f"{n_rows} of {n_runs} rows: {gone} replicate{'s' if gone != 1 else ''} collapsed by "
        f"--select {select} ({how})"
    )
