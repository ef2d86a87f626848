"""Load a table of runs for fitting: a runs folder or any CSV / parquet (docs/files.md).

Every table goes through cdlaw.fit.columns.read_columns (cdlaw's columns under the names
tables use, numbers read as the command line reads them), then through `prepare_runs`,
which checks it and puts it in one shape: the
required columns as floats / strategy names, a stable `row_id` per input row, the derived
columns `derived_ratio` and `tokens_per_param`, and finished runs only. Anything wrong
raises BadInput with one sentence naming the file, column and line (CSV) or row (parquet).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.columns import (
    READING,
    checkpoint_rows,
    finished,
    log,
    no_finished_runs,
    numbers,
    read_columns,
    read_table,
    where,
)
from cdlaw.strategies import NAME_RULE, NONE, canonical, is_name
from cdlaw.system.errors import BadInput
from cdlaw.units import format_number, plain

REQUIRED = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "loss")
CELL = ("n_params", "fresh_tokens", "derived_tokens", "strategy")  # what defines a cell
TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")


def load_runs(path: str | Path, checkpoints: bool = False, quiet: bool = False) -> pd.DataFrame:
    """Read a runs folder's summary.parquet, or a .csv / .parquet table, and prepare it.

    Rows whose `status` is not "done" are left out; how many is in df.attrs["not_done"].
    Rows marked as intermediate evaluations (a true `checkpoint` column) are left out too
    unless `checkpoints`, which keeps them with a boolean `checkpoint` column (the task
    links of `cdlaw downstream` fit them; a law fits final rows only). `quiet`: as in
    prepare_runs, for a check that only compares the runs with a file made from them."""
    path = Path(path)
    if not path.exists():
        raise BadInput(f"{path} does not exist; give a runs folder or a .csv/.parquet table")
    if path.is_dir():
        file = path / "summary.parquet"
        if not file.exists():
            raise BadInput(
                f"runs folder {path} has no summary.parquet yet; finish some runs with "
                "`cdlaw sweep`, or give a .csv/.parquet table"
            )
    else:
        file = path
    if path.is_dir():
        rounds = round_folders(path)
        if rounds:  # later rounds (`cdlaw next`) sit inside the first: one table of all
            frames = [read_table(f) for f in (file, *(r / "summary.parquet" for r in rounds))]
            df = pd.concat(frames, ignore_index=True)
            df.attrs = {"rounds": [r.name for r in rounds]}  # rows of several files: by place
            return prepare_runs(df, str(file), checkpoints, quiet)
    return prepare_runs(read_table(file), str(file), checkpoints, quiet)


def round_folders(path: Path) -> list[Path]:
    """The rounds inside a runs folder: sub-folders that are runs folders themselves (a
    sweep.toml and a summary.parquet), as `cdlaw next` and `cdlaw sweep --adaptive` make
    them; in round order (next-2 before next-10)."""
    subs = [p for p in path.iterdir() if p.is_dir() and (p / "sweep.toml").is_file()]
    subs = [p for p in subs if (p / "summary.parquet").is_file()]

    def order(p: Path):
        digits = "".join(ch for ch in p.name if ch.isdigit())
        return (int(digits) if digits else -1, p.name)

    return sorted(subs, key=order)


def prepare_runs(
    df: pd.DataFrame, name: str = "table", checkpoints: bool = False, quiet: bool = False
) -> pd.DataFrame:
    """Check a table of runs and add row_id, derived_ratio, tokens_per_param (idempotent).
    Checkpoint rows (cdlaw.fit.columns.checkpoint_rows) are dropped, or with `checkpoints`
    kept and marked in a boolean `checkpoint` column. Unless `quiet`, how its columns were
    read and any loss above ln V are said (logged) here.

    A row with derived_tokens = 0 is a one-epoch run: its strategy becomes "none" (it
    anchors L_1ep for every strategy). A "none" row with derived tokens is an error.
    """
    if df.attrs.get("cdlaw_prepared"):
        return df
    df = read_columns(df, name, quiet).copy()
    if "row_id" in df.columns and _unique_ints(df["row_id"]):
        df["row_id"] = numbers(df["row_id"]).astype(np.int64)
    else:
        df["row_id"] = np.arange(len(df), dtype=np.int64)  # the row's place in the input

    not_done, given = 0, df
    if "status" in df.columns:
        done = finished(df)
        not_done = int((~done).sum())
        df = df[done]
    ckpt = checkpoint_rows(df)
    if not len(df) or (ckpt.all() and not checkpoints):
        raise BadInput(no_finished_runs(given, name))
    df = df.assign(checkpoint=ckpt) if checkpoints else df[~ckpt]

    spelled = df.attrs.get("spelled", {})  # each column as the table names it
    for col, rule, ok in (
        ("n_params", "a positive finite number", lambda v: np.isfinite(v) & (v > 0)),
        ("fresh_tokens", "a positive finite number", lambda v: np.isfinite(v) & (v > 0)),
        ("loss", "a positive finite number (nats per token)", lambda v: np.isfinite(v) & (v > 0)),
        ("derived_tokens", "a finite number ≥ 0", lambda v: np.isfinite(v) & (v >= 0)),
    ):
        bad = ~ok(df[col].to_numpy())
        if bad.any():
            raise BadInput(
                f"{name} {where(df, bad)}: {spelled.get(col, col)} must be {rule}, got "
                f"{plain(df[col][bad].iloc[0])}"
            )

    _check_task_metrics(df, name)
    if not quiet:
        above_uniform(df, name)  # said once, here, as the table is read

    strategy = df["strategy"].astype(str).str.strip().str.lower()
    strategy[df["strategy"].isna()] = "nan"
    strategy = strategy.map(canonical)  # after the fill: a blank cell is no spelling
    # A run without derived tokens is strategy none whatever its label (1epoch, fresh, …).
    fresh_only = (df["derived_tokens"] == 0).to_numpy()
    bad = ~strategy.map(lambda s: s == NONE or is_name(s)).to_numpy(bool) & ~fresh_only
    if bad.any():
        raise BadInput(
            f"{name} {where(df, bad)}: strategy {plain(df['strategy'][bad].iloc[0])} is neither "
            f"none nor a derived strategy's name ({NAME_RULE}, like self-distill)"
        )
    undeclared = (strategy == NONE).to_numpy() & (df["derived_tokens"].to_numpy() > 0)
    if undeclared.any():
        raise BadInput(
            f"{name} {where(df, undeclared)}: strategy is none but derived_tokens is "
            f"{df['derived_tokens'][undeclared].iloc[0]:g}; a run with derived tokens names the "
            "strategy that made them (repetition, paraphrase or another)"
        )
    strategy[df["derived_tokens"] == 0] = NONE
    df["strategy"] = strategy.astype(str)

    df["derived_ratio"] = df["derived_tokens"] / df["fresh_tokens"]
    df["tokens_per_param"] = df["fresh_tokens"] / df["n_params"]
    df = df.reset_index(drop=True)
    for key in READING:  # rows renumbered, columns renamed: what only messages needed
        df.attrs.pop(key, None)
    df.attrs.update(cdlaw_prepared=True, not_done=not_done, source=name)
    return df


# What a task metric can be (cdlaw.tasks.columns); a blank cell is a task not scored.
TASK_METRIC_RULES = {
    "acc": ("an accuracy between 0 and 1 (a percentage? divide it by 100)", 0.0, 1.0),
    "acc_norm": ("an accuracy between 0 and 1 (a percentage? divide it by 100)", 0.0, 1.0),
    "bpb": ("a number of bits per byte ≥ 0", 0.0, np.inf),
}


def _check_task_metrics(df: pd.DataFrame, name: str) -> None:
    """BadInput naming the first row whose task metric cannot be one (an accuracy of 1.7)."""
    from cdlaw.tasks.columns import parse_column

    for col in df.columns:
        parsed = parse_column(str(col))
        if parsed is None or parsed[1] not in TASK_METRIC_RULES:
            continue
        rule, lo, hi = TASK_METRIC_RULES[parsed[1]]
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
        given = df[col].notna().to_numpy()
        bad = given & ~((values >= lo) & (values <= hi))  # NaN from text is bad too
        if bad.any():
            raise BadInput(
                f"{name} {where(df, bad)}: {col} must be {rule}, got {plain(df[col][bad].iloc[0])}"
            )


def above_uniform(df: pd.DataFrame, name: str) -> str | None:
    """Log (and return) the sentence flagging runs whose loss is above ln V, the loss of a
    uniform guess over their vocabulary (their `vocab_size`); None when there are none or
    the table records no vocabulary; prepare_runs calls it as it reads a table. No trained
    model does worse than guessing: such a run is broken, or simulated from a law far
    outside the range it was fitted on."""
    if "vocab_size" not in df.columns:
        return None
    vocab = pd.to_numeric(df["vocab_size"], errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = np.log(vocab)
    over = np.isfinite(bound) & (vocab > 1) & (df["loss"].to_numpy(float) > bound)
    if not over.any():
        return None
    i = int(np.argmax(np.where(over, df["loss"].to_numpy(float) - bound, -np.inf)))
    worst = f"{df['loss'].iloc[i]:.4g} nats at {where(df, np.arange(len(df)) == i)}"
    text = (
        f"{name}: {int(over.sum())} run(s) have a loss above ln V, a uniform guess over their "
        f"vocabulary (worst: {worst}, against ln {vocab[i]:.0f} = {bound[i]:.4g}): no trained "
        "model does worse than guessing, so check those runs (or the simulated law's range) "
        "before trusting a fit of them"
    )
    log.warning("warning: %s", text)
    return text


# What a fit's rows digest covers: each cell's coordinates and loss. Losses to 12
# significant digits, so that a mean of replicate seeds summed in another row order (a
# summary rewritten) digests the same.
DIGESTED = (*CELL, "loss")


def rows_digest(cells: pd.DataFrame, extra: tuple[str, ...] = ()) -> str:
    """A digest of the rows a fit was fitted on (select_cells' output): sha256 of each
    row's N, D, D′, strategy and loss (and the `extra` columns: a task link's metrics), in
    any row order. fit.json keeps it as `rows_digest`; stale_fit compares the runs as they
    are now against it (downstream.json: cdlaw.tasks.downstream_json.stale_links)."""
    cols = [c for c in (*DIGESTED, *extra) if c in cells.columns]

    def cell(v) -> str:
        return f"{float(v):.12g}" if isinstance(v, (int, float, np.number)) else str(v)

    lines = sorted(
        "\t".join(cell(v) for v in row) for row in cells[cols].itertuples(index=False, name=None)
    )
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def runs_beside(made: Path, name: str) -> Path | None:
    """The runs that a file cdlaw writes beside them (`name`: fit.json, downstream.json) was
    made from: <runs>/NAME → the runs folder (with its summary.parquet), t.NAME → the table
    t.csv (or .parquet, …) beside it; None for a file written elsewhere (--out)."""
    made = Path(made)
    if made.name == name:
        return made.parent if (made.parent / "summary.parquet").is_file() else None
    if not made.name.endswith("." + name):
        return None
    tables = [made.with_name(made.name[: -len(name) - 1] + s) for s in TABLE_SUFFIXES]
    return next((t for t in tables if t.is_file()), None)


def _unique_ints(col: pd.Series) -> bool:
    values = numbers(col)
    return bool(
        values.notna().all()
        and (values % 1 == 0).all()
        and (values.abs() < 2**53).all()  # whole numbers a float holds exactly
        and values.is_unique
        and len(values) > 0
    )


def describe_range(values) -> str:
    """'30M' or '14M–600M' for a message."""

    v = np.unique(np.asarray(values, dtype=float))
    if len(v) == 0:
        return "none"
    return format_number(v[0]) if len(v) == 1 else f"{format_number(v[0])}–{format_number(v[-1])}"


def table_vocab_size(rows: pd.DataFrame) -> int | None:
    """The one vocabulary size V of a table's runs (its `vocab_size` column), or None where
    the table has no such column, a blank one, or runs of several vocabularies."""
    if "vocab_size" not in rows.columns:
        return None
    values = pd.to_numeric(rows["vocab_size"], errors="coerce").dropna().unique()
    if len(values) != 1 or not float(values[0]).is_integer() or values[0] < 2:
        return None
    return int(values[0])
