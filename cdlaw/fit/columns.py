"""cdlaw's columns in a table of runs, under whatever names the table gives them
(docs/files.md, "Tables that `cdlaw fit` accepts").

    df = read_columns(read_table(Path("runs.csv")), "runs.csv")

`read_table` reads a CSV / TSV / parquet file with each row indexed by where it is in the
file (its line, or its 1-based row), so that every message can point at it; `read_columns`
finds cdlaw's columns under any of SPELLINGS (`params`, `unique_tokens`, `D'`, …), derives
D′ from `epochs` or total `tokens` when the table has no D′ column, and reads numbers as
the command line does (`70M`). cdlaw.fit.table checks and shapes the result.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.strategies import (
    FRESH_ONLY,
    NONE,
    PARAPHRASE,
    REPETITION,
    REPETITION_SPELLINGS,
    canonical,
)
from cdlaw.system.errors import BadInput
from cdlaw.units import counted, parse_number, plain

# The names a table may give each column, compared ignoring case and surrounding spaces
# (docs/files.md). The first is cdlaw's own; a table's column is renamed to it.
SPELLINGS = {
    "n_params": ("n_params", "params", "parameters", "n", "model_size", "model size"),
    "fresh_tokens": ("fresh_tokens", "unique_tokens", "d", "d_tokens"),
    "derived_tokens": ("derived_tokens", "d_prime", "dprime", "d'", "d′", "d_prime_tokens"),
    "strategy": ("strategy",),
    "loss": ("loss",),
    "lr": ("lr", "learning_rate"),
    "weight_decay": ("weight_decay", "wd"),
    "seed": ("seed",),
    "status": ("status",),
}
# The loss under a validation loss's names, read only where the table has no `loss`
# column (a table may log both, and its `loss` is the one it means).
VALIDATION_LOSS = ("val_loss", "validation_loss", "eval_loss")
# Words in a column's values that say it holds each run's strategy (under another name).
STRATEGY_WORDS = (REPETITION, *REPETITION_SPELLINGS, PARAPHRASE, "paraphrases")
# Columns that give D′ when the table has none, kept under their own names: every token
# trained (D + D′, whatever the strategy), or passes over D (D′ = (epochs − 1)·D, which
# only repetition means). With a D′ column too, they must agree with it.
TOKENS = ("tokens", "total_tokens", "tokens_trained")
EPOCHS = ("epochs",)
# A row that is an intermediate evaluation of a run (its N, D, D′ the run's own; its loss
# and task metrics at that point): the law fits final rows only, the task links every row.
CHECKPOINT = ("checkpoint", "is_checkpoint")
# Training compute, which gives D = C / (6N) for a one-epoch table without tokens (the
# Chinchilla figure's runs as Besiroglu et al. 2024 extracted them: size, FLOPs, loss).
FLOPS = ("flops", "training_flops", "training flop", "training flops", "train_flops")
AGREE = 0.01  # relative tolerance of that agreement: tables print rounded epochs
SYMBOL = {"n_params": "N", "fresh_tokens": "D", "derived_tokens": "D′"}
NUMERIC = ("n_params", "fresh_tokens", "derived_tokens", "loss")

READING = ("rows_are", "cdlaw_columns", "spelled")  # attrs of a table being read
log = logging.getLogger("cdlaw.table")


def read_table(file: Path) -> pd.DataFrame:
    """A .csv, .tsv or .parquet file as a frame whose index is where each row is in the
    file: its line for text (the header is line 1; empty lines are skipped but counted),
    its 1-based row for parquet. BadInput (one sentence) if it cannot be read."""
    suffix = file.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            df = pd.read_csv(file, sep="\t" if suffix == ".tsv" else ",", skip_blank_lines=False)
            if len(df.columns) == 1 and ";" in str(df.columns[0]):  # a spreadsheet's export
                df = pd.read_csv(file, sep=";", skip_blank_lines=False)
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
    except pd.errors.EmptyDataError:
        raise BadInput(
            f"{file} is empty: a table of runs needs a header line and a row per run "
            "(docs/files.md lists the columns)"
        ) from None
    except Exception as e:  # a damaged or unreadable file is the user's input too
        detail = " ".join(str(e).split())[:200]  # one line, however the reader put it
        raise BadInput(f"cannot read {file}: {type(e).__name__}: {detail}") from None
    return df


def read_columns(df: pd.DataFrame, name: str = "table", quiet: bool = False) -> pd.DataFrame:
    """The table with cdlaw's columns (n_params, fresh_tokens, derived_tokens, strategy,
    loss, and lr, weight_decay, seed, status where given) found under any of SPELLINGS,
    the four numbers read as floats as the command line reads them (25M, 3B), and D′ and
    the strategy made where the table lacks them. Idempotent.

    D′ comes from the table's D′ column, else from total tokens − D, else from
    (epochs − 1)·D (repetition rows only). Without a strategy column a run with D′ = 0 is
    strategy none and one with D′ > 0 repetition: the repeated tokens of the CD paper and
    Muennighoff et al. How each column was read is logged (logger "cdlaw.table", one line)
    when it was not as named, unless `quiet`. Raises BadInput for two columns of one
    meaning, epochs or tokens that disagree with D′, a cell that is not a number, or a
    column lacking.
    """
    if df.attrs.get("cdlaw_columns"):
        return df
    if not df.attrs.get("rows_are"):  # a frame, not a file: rows by their 1-based place
        df = df.set_axis(np.arange(1, len(df) + 1), axis=0)
        df.attrs["rows_are"] = "row"
    found = {key: _columns_named(df, key, names, name) for key, names in SPELLINGS.items()}
    if found["loss"] is None:
        found["loss"] = _columns_named(df, "loss", VALIDATION_LOSS, name)
    if found["strategy"] is None:
        _no_strategy_elsewhere(df, name)
    sources = {
        "tokens": _columns_named(df, "tokens (D + D′)", TOKENS, name),
        "epochs": _columns_named(df, "epochs", EPOCHS, name),
    }
    found |= _tokens_from_flops(df, found, sources, name)
    df = df.rename(columns={col: key for key, col in found.items() if col not in (None, key)})
    missing = [k for k in ("n_params", "fresh_tokens") if found[k] is None]
    if found["derived_tokens"] is None and not any(sources.values()):
        missing.append("derived_tokens")
    missing += ["loss"] if found["loss"] is None else []
    if missing:
        raise BadInput(
            f"{name} lacks the column(s) {', '.join(missing)}{_near_misses(df, missing)}; a "
            "run table needs N (n_params or params), D (fresh_tokens or unique_tokens), D′ "
            "(derived_tokens, epochs, or total tokens; derived_tokens = 0 for one-epoch "
            "runs) and loss, under the names docs/files.md lists"
        )
    done = finished(df).to_numpy()
    for col in [c for c in NUMERIC if c in df.columns]:
        df[col] = _numeric(df, col, found[col] or col, name, done)
    # The column D′ comes from must hold numbers; one only checked against it need not.
    source = found["derived_tokens"] or sources["tokens"] or sources["epochs"]
    given = {
        col: _numeric(df, col, col, name, done) if col == source else numbers(df[col])
        for col in sources.values()
        if col is not None
    }
    how = _derive(df, found, sources, given, done, name)
    renamed = [k for k, col in found.items() if col not in (None, k)]
    if "strategy" not in df.columns:
        Dp = df["derived_tokens"].to_numpy(float)
        df["strategy"] = np.where(Dp > 0, REPETITION, NONE)
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
    if said is not None and not quiet:
        parts = [f"{SYMBOL[k]} ← {found[k]}" for k in ("n_params", "fresh_tokens")]
        parts += [f"D′ ← {how}", f"strategy ← {said}", f"loss ← {found['loss']}"]
        parts += [f"{k} ← {found[k]}" for k in renamed if k not in (*SYMBOL, "strategy", "loss")]
        log.info("read %s: %s", name, ", ".join(parts))
    df.attrs["cdlaw_columns"] = True
    df.attrs["spelled"] = {k: str(col) for k, col in found.items() if col is not None}
    if found["derived_tokens"] is None:
        df.attrs["spelled"]["derived_tokens"] = f"D′ = {how}"
    return df


def _no_strategy_elsewhere(df: pd.DataFrame, name: str) -> None:
    """BadInput when a table without a strategy column holds the runs' strategies in
    another (the CD paper's release calls it `source`): read as repetition, its
    paraphrase runs would be fitted as repeats without a word."""
    for col in df.columns:
        if pd.api.types.is_numeric_dtype(df[col]):  # numbers and booleans name no strategy
            continue
        values = set(df[col].dropna().astype(str).str.strip().str.lower())
        if values & set(STRATEGY_WORDS):
            shown = ", ".join(sorted(values)[:4]) + (", …" if len(values) > 4 else "")
            raise BadInput(
                f"{name} has no strategy column, but its column {str(col)!r} names strategies "
                f"({shown}): rename it strategy, or every run with D′ > 0 is read as repetition"
            )


def _tokens_from_flops(df: pd.DataFrame, found: dict, sources: dict, name: str) -> dict:
    """Fill in D = C / (6N) and D′ = 0 from a table's training FLOPs C when it gives N and
    no tokens (neither D, D′, tokens nor epochs): C = 6ND holds for one pass over fresh
    data, as Chinchilla's and Besiroglu et al.'s readings of its runs assume. Returns how
    D and D′ were read ({} when not so), for the note; BadInput when a row names a derived
    strategy, whose FLOPs do not say its D′."""
    flops, n = _columns_named(df, "training FLOPs", FLOPS, name), found["n_params"]
    given = [found["fresh_tokens"], found["derived_tokens"], *sources.values()]
    if flops is None or n is None or any(col is not None for col in given):
        return {}
    strategy = found["strategy"]
    if strategy is not None:  # a one-epoch label (none, 1epoch, fresh) reads as none
        labels = df[strategy].fillna("").astype(str).str.strip().str.lower()
        derived = labels.isin(STRATEGY_WORDS).to_numpy() & finished(df).to_numpy()
        if derived.any():
            raise BadInput(
                f"{name} {where(df, derived)}: {flops} gives D = C / (6N) only for one-epoch "
                f"runs, and this run is {plain(df[strategy][derived].iloc[0])}; give its "
                "fresh and derived tokens in fresh_tokens and derived_tokens columns"
            )
    done = finished(df).to_numpy()
    N = _numeric(df, n, n, name, done)
    C = _numeric(df, flops, flops, name, done)
    df["fresh_tokens"] = C / (6 * N)
    df["derived_tokens"] = 0.0
    return {
        "fresh_tokens": f"{flops} / (6 · {n})",
        "derived_tokens": "0 (no tokens given: every token of C = 6ND fresh)",
    }


def _near_misses(df: pd.DataFrame, missing: list[str]) -> str:
    """' (is 'fresh_token' fresh_tokens misspelt? rename it)' for the table's columns that look like a missing one's
    spellings (a typo such as fresh_token), or ''."""
    import difflib

    spellings = {
        spelling: key
        for key in missing
        for spelling in (
            *SPELLINGS.get(key, ()),
            *(TOKENS + EPOCHS if key == "derived_tokens" else ()),
        )
        if len(spelling) > 2  # n, d, d' would match any short name
    }
    guesses, total = [], None
    for col in map(str, df.columns):
        if col.strip().lower() in TOKENS:
            total = col  # every token trained, spelt as it should be
            continue
        near = difflib.get_close_matches(col.strip().lower(), spellings, n=1, cutoff=0.8)
        if near:
            guesses.append(f"is {col!r} {spellings[near[0]]} misspelt?")
    if not guesses and total is not None and "fresh_tokens" in missing:
        # the usual published table (params, tokens, loss): one-epoch runs, D = their tokens
        return f" (if the runs are one epoch, their {total!r} is D: rename it fresh_tokens)"
    return f" ({' '.join(guesses)} rename it)" if guesses else ""


def _derive(df: pd.DataFrame, found: dict, sources: dict, given: dict, done, name: str) -> str:
    """Fill in df["derived_tokens"] from total tokens or epochs when the table has no D′
    column, check that those columns agree with D′ where both are given (within AGREE),
    and return how D′ was read, for the note."""
    D = df["fresh_tokens"].to_numpy(float)
    fresh, tokens, epochs = found["fresh_tokens"], sources["tokens"], sources["epochs"]
    strategy = (
        df["strategy"].astype(str).str.strip().str.lower().map(canonical).to_numpy()
        if "strategy" in df.columns
        else np.full(len(df), REPETITION)
    )
    repeats = np.isin(strategy, FRESH_ONLY)  # where epochs say what D′ is
    if found["derived_tokens"] is not None:
        how = str(found["derived_tokens"])
    elif tokens is not None:
        short = done & (given[tokens].to_numpy() < D)
        if short.any():
            raise BadInput(
                f"{name} {where(df, short)}: {tokens} must be at least {fresh} (every "
                f"token trained, D + D′), got {given[tokens][short].iloc[0]:g}"
            )
        df["derived_tokens"] = given[tokens].to_numpy() - D
        how = f"{tokens} − {fresh}"
    else:
        e = given[epochs].to_numpy()
        other = done & ~repeats & np.isfinite(e)
        if other.any():
            raise BadInput(
                f"{name} {where(df, other)}: epochs give D′ = (epochs − 1)·D for repetition "
                f"only, and this run is {plain(df['strategy'][other].iloc[0])}; give its "
                "derived tokens in a derived_tokens column"
            )
        low = done & (e < 1)
        if low.any():
            raise BadInput(
                f"{name} {where(df, low)}: epochs must be at least 1 (one pass over D), "
                f"got {given[epochs][low].iloc[0]:g}"
            )
        df["derived_tokens"] = (e - 1) * D
        how = f"(epochs − 1) · {fresh}"
    Dp = df["derived_tokens"].to_numpy(float)
    done = done & ~checkpoint_rows(df)  # a checkpoint has trained fewer tokens than its run
    done = done & ~(Dp < 0)  # refused as a negative D′ (prepare_runs), not as a disagreement
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
                    f"{name} {where(df, off)}: {col} is {v[i]:g} but {what} is "
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
    values = numbers(df[col])
    bad = (values.isna() & df[col].notna()).to_numpy() & done
    if bad.any():
        like = "" if col == "loss" else " such as 3e9 or 70M"
        got = df[col][bad].iloc[0]
        comma = " (a decimal comma? write 3.5, not 3,5)" if "," in str(got) else ""
        raise BadInput(
            f"{name} {where(df, bad)}: {shown} must be a number{like}, got {plain(got)}{comma}"
        )
    return values


def numbers(col: pd.Series) -> pd.Series:
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


def where(df: pd.DataFrame, bad) -> str:
    """Where the first bad row is in the input, for a message: "line 7" of a CSV file,
    "row 6" (1-based) of a parquet file or a frame (read_table, read_columns)."""
    i = np.flatnonzero(np.asarray(bad, bool))[0]
    return f"{df.attrs.get('rows_are', 'row')} {df.index[i]}"


def checkpoint_rows(df: pd.DataFrame) -> np.ndarray:
    """Which rows are intermediate evaluations: a `checkpoint` column (or `is_checkpoint`)
    that reads true (true, yes, 1; case aside). No such column: none are."""
    cols = [c for c in df.columns if str(c).strip().lower() in CHECKPOINT]
    if not cols:
        return np.zeros(len(df), bool)
    v = df[cols[0]]
    if v.dtype == bool:
        return v.fillna(False).to_numpy(bool)
    text = v.astype(str).str.strip().str.lower()
    return text.isin(("true", "yes", "1", "1.0")).to_numpy(bool)


def finished(df: pd.DataFrame) -> pd.Series:
    """Which rows are finished runs, the ones a fit or a figure uses: status "done" in any
    case and spacing, or no status given (no column, or a blank cell)."""
    if "status" not in df.columns:
        return pd.Series(True, index=df.index)
    status = df["status"]
    return status.isna() | status.astype(str).str.strip().str.lower().isin(("done", ""))


FINISHED_RUN = (
    "a finished run is a row with its n_params, fresh_tokens, derived_tokens and final loss, "
    "and a status of done (or none given)"
)


def no_finished_runs(df: pd.DataFrame, name: str) -> str:
    """Why table `df` (every row, as read) has no finished run to fit, and what one is:
    no rows, only checkpoints, or only runs of other statuses (named, most common first)."""
    if not len(df):
        return f"{name} holds no runs, only its header: {FINISHED_RUN}"
    done = finished(df)
    if done.any():  # every finished row is a checkpoint
        return (
            f"every row of {name} is a checkpoint (an evaluation during training, its "
            f"checkpoint column true): {FINISHED_RUN}, its checkpoint column false"
        )
    statuses = list(df["status"][~done].astype(str).str.strip().value_counts().index)
    shown = ", ".join(map(repr, statuses[:3])) + (", …" if len(statuses) > 3 else "")
    folder = Path(name).parent if Path(name).name == "summary.parquet" else None
    status = f"; `cdlaw status {folder}` shows where its runs stand" if folder else ""
    return (
        f"none of the {counted(len(df), 'run')} in {name} is finished (status {shown}): "
        f"{FINISHED_RUN}{status}"
    )
