"""Load a table of runs for fitting: a runs folder or any CSV / parquet (docs/files.md).

Every table goes through `read_columns`, which finds cdlaw's columns under the names
tables use (SPELLINGS: `params`, `unique_tokens`, `D'`, …), derives D′ from `epochs` or
total `tokens` when the table has no D′ column, and reads numbers as the command line does
(`70M`); then through `prepare_runs`, which checks it and puts it in one shape: the
required columns as floats / strategy names, a stable `row_id` per input row, the derived
columns `derived_ratio` and `tokens_per_param`, and finished runs only. Anything wrong
raises BadInput with one sentence naming the file, column and line (CSV) or row (parquet).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.errors import BadInput
from cdlaw.law import STRATEGIES
from cdlaw.units import parse_number, plain

REQUIRED = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "loss")
CELL = ("n_params", "fresh_tokens", "derived_tokens", "strategy")  # what defines a cell
SELECT = ("min", "mean", "none")
TABLE_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")

# The names a table may give each column, compared ignoring case and surrounding spaces
# (docs/files.md). The first is cdlaw's own; a table's column is renamed to it.
SPELLINGS = {
    "n_params": ("n_params", "params", "parameters", "n"),
    "fresh_tokens": ("fresh_tokens", "unique_tokens", "d"),
    "derived_tokens": ("derived_tokens", "d_prime", "dprime", "d'", "d′"),
    "strategy": ("strategy",),
    "loss": ("loss",),
    "lr": ("lr", "learning_rate"),
    "weight_decay": ("weight_decay", "wd"),
    "seed": ("seed",),
    "status": ("status",),
}
# Columns that give D′ when the table has none, kept under their own names: every token
# trained (D + D′, whatever the strategy), or passes over D (D′ = (epochs − 1)·D, which
# only repetition means). With a D′ column too, they must agree with it.
TOKENS = ("tokens", "total_tokens", "tokens_trained")
EPOCHS = ("epochs",)
AGREE = 0.01  # relative tolerance of that agreement: tables print rounded epochs
SYMBOL = {"n_params": "N", "fresh_tokens": "D", "derived_tokens": "D′"}
NUMERIC = ("n_params", "fresh_tokens", "derived_tokens", "loss")

READING = ("rows_are", "cdlaw_columns", "spelled")  # attrs of a table being read
log = logging.getLogger("cdlaw.table")


def load_runs(path: str | Path) -> pd.DataFrame:
    """Read a runs folder's summary.parquet, or a .csv / .parquet table, and prepare it.

    Rows whose `status` is not "done" are left out; how many is in df.attrs["not_done"].
    """
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
            return prepare_runs(df, name=str(file))
    return prepare_runs(read_table(file), name=str(file))


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


def read_table(file: Path) -> pd.DataFrame:
    """A .csv, .tsv or .parquet file as a frame whose index is where each row is in the
    file: its line for text (the header is line 1; empty lines are skipped but counted),
    its 1-based row for parquet. BadInput (one sentence) if it cannot be read."""
    suffix = file.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            df = pd.read_csv(file, sep="\t" if suffix == ".tsv" else ",", skip_blank_lines=False)
            df.index = df.index + 2
            df = df.dropna(how="all")  # an empty line holds no run
            df.attrs["rows_are"] = "line"
        elif suffix in (".parquet", ".pq"):
            df = pd.read_parquet(file)
            df.index = np.arange(1, len(df) + 1)
            df.attrs["rows_are"] = "row"
        else:
            raise BadInput(
                f"{file} is neither a runs folder nor a .csv/.parquet table (got {suffix or 'no suffix'!r})"
            )
    except BadInput:
        raise
    except Exception as e:  # a damaged or unreadable file is the user's input too
        detail = " ".join(str(e).split())[:200]  # one line, however the reader put it
        raise BadInput(f"cannot read {file}: {type(e).__name__}: {detail}") from None
    return df


def read_columns(df: pd.DataFrame, name: str = "table") -> pd.DataFrame:
    """The table with cdlaw's columns (n_params, fresh_tokens, derived_tokens, strategy,
    loss, and lr, weight_decay, seed, status where given) found under any of SPELLINGS,
    the four numbers read as floats as the command line reads them (25M, 3B), and D′ and
    the strategy made where the table lacks them. Idempotent.

    D′ comes from the table's D′ column, else from total tokens − D, else from
    (epochs − 1)·D (repetition rows only). Without a strategy column a run with D′ = 0 is
    strategy none and one with D′ > 0 repetition: the repeated tokens of the CD paper and
    Muennighoff et al. How each column was read is logged (logger "cdlaw.table", one line)
    when it was not as named. Raises BadInput for two columns of one meaning, epochs or
    tokens that disagree with D′, a cell that is not a number, or a column lacking.
    """
    if df.attrs.get("cdlaw_columns"):
        return df
    if not df.attrs.get("rows_are"):  # a frame, not a file: rows by their 1-based place
        df = df.set_axis(np.arange(1, len(df) + 1), axis=0)
        df.attrs["rows_are"] = "row"
    found = {key: _columns_named(df, key, names, name) for key, names in SPELLINGS.items()}
    sources = {
        "tokens": _columns_named(df, "tokens (D + D′)", TOKENS, name),
        "epochs": _columns_named(df, "epochs", EPOCHS, name),
    }
    df = df.rename(columns={col: key for key, col in found.items() if col not in (None, key)})
    missing = [k for k in ("n_params", "fresh_tokens") if found[k] is None]
    if found["derived_tokens"] is None and not any(sources.values()):
        missing.append("derived_tokens")
    missing += ["loss"] if found["loss"] is None else []
    if missing:
        raise BadInput(
            f"{name} lacks the column(s) {', '.join(missing)}; a run table needs N "
            "(n_params or params), D (fresh_tokens or unique_tokens), D′ (derived_tokens, "
            "epochs, or total tokens; derived_tokens = 0 for one-epoch runs) and loss, "
            "under the names docs/files.md lists"
        )
    done = (
        df["status"].astype(str).str.strip().str.lower() == "done"
        if "status" in df.columns
        else pd.Series(True, index=df.index)
    ).to_numpy()
    for col in [c for c in NUMERIC if c in df.columns]:
        df[col] = _numeric(df, col, found[col] or col, name, done)
    # The column D′ comes from must hold numbers; one only checked against it need not.
    source = found["derived_tokens"] or sources["tokens"] or sources["epochs"]
    given = {
        col: _numeric(df, col, col, name, done) if col == source else _numbers(df[col])
        for col in sources.values()
        if col is not None
    }
    how = _derive(df, found, sources, given, done, name)
    renamed = [k for k, col in found.items() if col not in (None, k)]
    if "strategy" not in df.columns:
        Dp = df["derived_tokens"].to_numpy(float)
        df["strategy"] = np.where(Dp > 0, "repetition", "none")
        said = (
            "none (no strategy column; every run has D′ = 0)"
            if not (Dp > 0).any()
            else "repetition (no strategy column; the tokens beyond D repeat it)"
            if found["derived_tokens"] is None
            else "repetition (no strategy column; D′ read as repeated tokens, as in the CD "
            "paper and Muennighoff et al.)"
        )
    elif renamed or found["derived_tokens"] is None:
        said = str(found["strategy"])
    else:  # every column as cdlaw names it: nothing to say
        said = None
    if said is not None:
        parts = [f"{SYMBOL[k]} ← {found[k]}" for k in ("n_params", "fresh_tokens")]
        parts += [f"D′ ← {how}", f"strategy ← {said}", f"loss ← {found['loss']}"]
        parts += [f"{k} ← {found[k]}" for k in renamed if k not in (*SYMBOL, "strategy", "loss")]
        log.info("read %s: %s", name, ", ".join(parts))
    df.attrs["cdlaw_columns"] = True
    df.attrs["spelled"] = {k: str(col) for k, col in found.items() if col is not None}
    if found["derived_tokens"] is None:
        df.attrs["spelled"]["derived_tokens"] = f"D′ = {how}"
    return df


def _derive(df: pd.DataFrame, found: dict, sources: dict, given: dict, done, name: str) -> str:
    """Fill in df["derived_tokens"] from total tokens or epochs when the table has no D′
    column, check that those columns agree with D′ where both are given (within AGREE),
    and return how D′ was read, for the note."""
    D = df["fresh_tokens"].to_numpy(float)
    fresh, tokens, epochs = found["fresh_tokens"], sources["tokens"], sources["epochs"]
    strategy = (
        df["strategy"].astype(str).str.strip().str.lower().to_numpy()
        if "strategy" in df.columns
        else np.full(len(df), "repetition")
    )
    repeats = np.isin(strategy, ("repetition", "none"))  # where epochs say what D′ is
    if found["derived_tokens"] is not None:
        how = str(found["derived_tokens"])
    elif tokens is not None:
        short = done & (given[tokens].to_numpy() < D)
        if short.any():
            raise BadInput(
                f"{name} {_where(df, short)}: {tokens} must be at least {fresh} (every "
                f"token trained, D + D′), got {given[tokens][short].iloc[0]:g}"
            )
        df["derived_tokens"] = given[tokens].to_numpy() - D
        how = f"{tokens} − {fresh}"
    else:
        e = given[epochs].to_numpy()
        other = done & ~repeats & np.isfinite(e)
        if other.any():
            raise BadInput(
                f"{name} {_where(df, other)}: epochs give D′ = (epochs − 1)·D for repetition "
                f"only, and this run is {plain(df['strategy'][other].iloc[0])}; give its "
                "derived tokens in a derived_tokens column"
            )
        low = done & (e < 1)
        if low.any():
            raise BadInput(
                f"{name} {_where(df, low)}: epochs must be at least 1 (one pass over D), "
                f"got {given[epochs][low].iloc[0]:g}"
            )
        df["derived_tokens"] = (e - 1) * D
        how = f"(epochs − 1) · {fresh}"
    Dp = df["derived_tokens"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        for col, total, rows in ((tokens, D + Dp, done), (epochs, (D + Dp) / D, done & repeats)):
            if col is None:
                continue
            v = given[col].to_numpy()
            off = rows & np.isfinite(v) & np.isfinite(total) & (abs(v - total) > AGREE * total)
            if off.any():
                i = np.flatnonzero(off)[0]
                what = f"{fresh} + {how}" if col == tokens else f"({fresh} + {how})/{fresh}"
                raise BadInput(
                    f"{name} {_where(df, off)}: {col} is {v[i]:g} but {what} is "
                    f"{total[i]:g}; the two columns disagree, so drop one or correct it"
                )
    return how


def _columns_named(df: pd.DataFrame, what: str, names, name: str):
    """The one column of df spelled as one of names (case and spaces aside), or None;
    BadInput when two are."""
    cols = [c for c in df.columns if str(c).strip().lower() in names]
    label = f"{SYMBOL[what]} ({what})" if what in SYMBOL else what
    if len(cols) > 1:
        raise BadInput(
            f"{name} has {len(cols)} columns that each read as {label}: "
            f"{', '.join(map(repr, cols))}; keep one of them"
        )
    return cols[0] if cols else None


def _numeric(df: pd.DataFrame, col: str, shown: str, name: str, done) -> pd.Series:
    """df[col] as floats (25M and 3B as the command line reads them); BadInput naming the
    first finished run whose cell is not a number (shown: the column as the table names it)."""
    values = _numbers(df[col])
    bad = (values.isna() & df[col].notna()).to_numpy() & done
    if bad.any():
        like = "" if col == "loss" else " such as 3e9 or 70M"
        raise BadInput(
            f"{name} {_where(df, bad)}: {shown} must be a number{like}, got "
            f"{plain(df[col][bad].iloc[0])}"
        )
    return values


def prepare_runs(df: pd.DataFrame, name: str = "table") -> pd.DataFrame:
    """Check a table of runs and add row_id, derived_ratio, tokens_per_param (idempotent).

    A row with derived_tokens = 0 is a one-epoch run: its strategy becomes "none" (it
    anchors L_1ep for every strategy). A "none" row with derived tokens is an error.
    """
    if df.attrs.get("cdlaw_prepared"):
        return df
    df = read_columns(df, name).copy()
    if "row_id" in df.columns and _unique_ints(df["row_id"]):
        df["row_id"] = _numbers(df["row_id"]).astype(np.int64)
    else:
        df["row_id"] = np.arange(len(df), dtype=np.int64)  # the row's place in the input

    not_done = 0
    if "status" in df.columns:
        done = df["status"].astype(str).str.strip().str.lower() == "done"
        not_done = int((~done).sum())
        df = df[done]

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
                f"{name} {_where(df, bad)}: {spelled.get(col, col)} must be {rule}, got "
                f"{plain(df[col][bad].iloc[0])}"
            )

    strategy = df["strategy"].astype(str).str.strip().str.lower()
    strategy[df["strategy"].isna()] = "nan"
    bad = ~strategy.isin(STRATEGIES)
    if bad.any():
        raise BadInput(
            f"{name} {_where(df, bad)}: strategy {plain(df['strategy'][bad].iloc[0])} is not one "
            f"of {', '.join(STRATEGIES)}"
        )
    undeclared = (strategy == "none").to_numpy() & (df["derived_tokens"].to_numpy() > 0)
    if undeclared.any():
        raise BadInput(
            f"{name} {_where(df, undeclared)}: strategy is none but derived_tokens is "
            f"{df['derived_tokens'][undeclared].iloc[0]:g}; a run with derived tokens is repetition "
            "or paraphrase"
        )
    strategy[df["derived_tokens"] == 0] = "none"
    df["strategy"] = strategy.astype(str)
    if len(df) == 0:
        raise BadInput(f"{name} has no finished runs to fit (status 'done')")

    df["derived_ratio"] = df["derived_tokens"] / df["fresh_tokens"]
    df["tokens_per_param"] = df["fresh_tokens"] / df["n_params"]
    df = df.reset_index(drop=True)
    for key in READING:  # rows renumbered, columns renamed: what only messages needed
        df.attrs.pop(key, None)
    df.attrs.update(cdlaw_prepared=True, not_done=not_done, source=name)
    return df


def select_cells(df: pd.DataFrame, how: str = "min") -> pd.DataFrame:
    """Reduce rows that differ only in lr / weight_decay / seed to one per cell (docs/files.md).

    "min" keeps the run with the lowest loss (the best hyperparameters, as the papers do);
    "mean" averages the losses (the row keeps the first row_id of its cell, and columns
    that vary inside the cell become NaN); "none" keeps every row. Adds `n_in_cell`.
    """
    if how not in SELECT:
        raise BadInput(f"--select must be one of {', '.join(SELECT)}, not {how!r}")
    df = prepare_runs(df)
    attrs = dict(df.attrs)
    keys = list(CELL)
    sizes = df.groupby(keys, sort=False)["loss"].transform("size")
    if how == "none":
        out = df.assign(n_in_cell=sizes.astype(np.int64))
    elif how == "min":
        best = df.groupby(keys, sort=False)["loss"].idxmin()
        out = df.loc[np.sort(best.to_numpy())].assign(n_in_cell=sizes)
    else:
        groups = df.groupby(keys, sort=False)
        first = (groups["row_id"].transform("min") == df["row_id"]).to_numpy()
        out = df[first].assign(loss=groups["loss"].transform("mean")[first], n_in_cell=sizes)
        fixed = {*keys, "loss", "row_id", "derived_ratio", "tokens_per_param"}
        for col in [c for c in df.columns if c not in fixed]:
            varies = groups[col].transform(lambda s: s.nunique(dropna=False) > 1)[first]
            if varies.any():
                numeric = pd.api.types.is_numeric_dtype(out[col])
                out[col] = out[col].astype(float if numeric else object)
                out.loc[varies.to_numpy(), col] = np.nan
    out = out.reset_index(drop=True)
    out["n_in_cell"] = out["n_in_cell"].astype(np.int64)
    out.attrs.update(attrs)
    out.attrs["select"] = how
    return out


def seed_noise(df: pd.DataFrame) -> dict | None:
    """The seed-to-seed scatter of log loss: the floor under any fit's log-RMSE.

    Runs of one cell that differ only in `seed` (same lr and weight_decay) are replicates;
    their log losses scatter around the cell's mean by the training noise alone, which no
    law can fit. Returns the pooled standard deviation of log loss over such groups,
    sqrt(Σ (log L − cell mean)² / Σ (n − 1)), with the number of groups and runs, or None
    when the table has no replicates. A fit to single runs cannot beat it; a fit to
    `--select mean` cells of n seeds has a floor of about sd/√n.
    """
    df = prepare_runs(df)
    df = df[~_duplicated(df)]  # an exact copy of a run is not another seed
    cols = [c for c in (*CELL, "lr", "weight_decay") if c in df.columns]
    logs = np.log(df["loss"].to_numpy(float))
    groups = df.assign(_log=logs).groupby(cols, dropna=False, sort=False)["_log"]
    n = groups.transform("size").to_numpy()
    if not (n > 1).any():
        return None
    dev = (logs - groups.transform("mean").to_numpy())[n > 1]
    sizes = groups.size()
    sizes = sizes[sizes > 1]
    dof = int((sizes - 1).sum())
    return {
        "sd_log": float(np.sqrt(np.sum(dev**2) / dof)),
        "n_groups": len(sizes),
        "n_runs": int(sizes.sum()),
    }


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


def _numbers(col: pd.Series) -> pd.Series:
    """The column as floats, NaN where a cell is not a number (any cell, any type); text
    such as 70M or 3B is read as the command line reads it (cdlaw.units.parse_number)."""
    try:
        values = pd.to_numeric(col, errors="coerce").astype(float)
    except (TypeError, ValueError, OverflowError):  # e.g. an int beyond float's range
        values = pd.Series([_number(v) for v in col], index=col.index, dtype=float)
    text = (values.isna() & col.map(lambda v: isinstance(v, str))).to_numpy()
    if text.any():
        values[text] = np.array([_number(v) for v in col[text]], dtype=float)
    return values


def _number(v) -> float:
    if isinstance(v, str):
        try:
            return parse_number(v)
        except BadInput:
            return math.nan
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _unique_ints(col: pd.Series) -> bool:
    values = _numbers(col)
    return bool(
        values.notna().all()
        and (values % 1 == 0).all()
        and (values.abs() < 2**53).all()  # whole numbers a float holds exactly
        and values.is_unique
        and len(values) > 0
    )


def _where(df: pd.DataFrame, bad) -> str:
    """Where the first bad row is in the input, for a message: "line 7" of a CSV file,
    "row 6" (1-based) of a parquet file or a frame (read_table, read_columns)."""
    i = np.flatnonzero(np.asarray(bad, bool))[0]
    return f"{df.attrs.get('rows_are', 'row')} {df.index[i]}"


def describe_range(values) -> str:
    """'30M' or '14M–600M' for a message."""
    from cdlaw.units import format_number

    v = np.unique(np.asarray(values, dtype=float))
    if len(v) == 0:
        return "none"
    return format_number(v[0]) if len(v) == 1 else f"{format_number(v[0])}–{format_number(v[-1])}"
