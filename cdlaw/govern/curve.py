"""A run's curve so far, read from wherever it was logged, and checked before it is governed.

    curve = read_curve(Path("runs/demo/17506c0701eb"))          # a cdlaw run folder
    curve = read_curve(Path("log.csv"), CurveOptions(batch_tokens=262144))

A cdlaw run folder gives its `metrics.parquet` (validation loss where the run evaluated
it, else its training loss) and, from `config.json`, N, D, the strategy, the planned
tokens, the WSD decay fraction and the vocabulary. Any other run gives a .csv / .tsv /
.parquet table, or a TensorBoard log folder when the tensorboard extra is installed, with
a tokens column (or steps, times `--batch-tokens`), a loss column and, ideally, the
learning rate. What is known about the run beyond its curve comes with the options.

Bad input is one sentence and exit 2 (cdlaw.errors.BadInput): no tokens or steps, tokens
that do not increase, a loss more than 5% above ln V (not nats per token), a stable phase
with fewer than MIN_STABLE_POINTS points after warmup.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.errors import BadInput
from cdlaw.fit.columns import SPELLINGS, numbers, read_table

# The columns a log may name each quantity, compared ignoring case; the first that has a
# finite value wins (a cdlaw run's val_loss before its train_loss).
TOKEN_COLUMNS = (
    "tokens_seen",
    "tokens",
    "token",
    "num_tokens",
    "consumed_tokens",
    "tokens_trained",
)
# Loggers' spellings after the plain ones: Hugging Face's Trainer (train/global_step,
# eval/loss, train/learning_rate), Lightning's LearningRateMonitor (lr-AdamW, lr-SGD, …).
STEP_COLUMNS = (
    "step",
    "steps",
    "global_step",
    "iteration",
    "iter",
    "trainer/global_step",
    "train/global_step",
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
    "lm_loss",
)
LR_COLUMNS = (
    *SPELLINGS["lr"],
    "train/lr",
    "train/learning_rate",
    "optimizer/lr",
    "optim/lr",
    "lr-adamw",
    "lr-adam",
    "lr-sgd",
)
# A point is in the stable phase when its lr is within this of the peak.
STABLE_LR = 1e-3
# The fewest stable-phase points (after warmup, at or past a quarter of the tokens seen)
# an offset and its spread can be calibrated from.
MIN_STABLE_POINTS = 3
CALIBRATION_FROM = 0.25  # calibrate on points at or past this share of the tokens seen
# A model at initialisation logs about ln V (a little above it: 6.255 at V = 512 on the
# demo's first step); a loss in bits is 1.44 ln V, a sum far more.
ABOVE_LN_V = 1.05


@dataclass(frozen=True)
class CurveOptions:
    """How to read a log, where the log does not say (None: from the log). What the run
    is (N, D, …) beyond its config comes with the governor's options (GovernOptions)."""

    batch_tokens: float | None = None  # tokens per optimizer step, when the log has steps
    loss_column: str | None = None  # force a column (e.g. train_loss)
    lr_column: str | None = None  # force the learning rate's column
    vocab_size: int | None = None  # V, for the ln V check (default: a run folder's config)
    # V of the law's fitted runs, where the fit records one: the check's V for a log that
    # does not say its own (the law's losses, and so the run's, are over that vocabulary)
    law_vocab_size: int | None = None


@dataclass(frozen=True)
class Curve:
    """A run's curve so far (tokens strictly increasing, loss in nats per token) and what a
    run folder's config says about the run; `stable` marks the points at the peak lr after
    warmup."""

    tokens: np.ndarray
    loss: np.ndarray
    lr: np.ndarray | None
    source: str
    loss_column: str
    n_params: float | None = None
    fresh_tokens: float | None = None
    strategy: str | None = None
    planned_tokens: float | None = None  # D + D′ the run is scheduled for
    decay_frac: float | None = None  # the WSD cooldown's share of a run's tokens
    warnings: tuple[str, ...] = ()  # what reading the log left out or assumed

    @property
    def stable(self) -> np.ndarray:
        """Points logged at the peak learning rate, past warmup (every point without lr)."""
        if self.lr is None:
            return np.ones(len(self.tokens), dtype=bool)
        peak = float(np.nanmax(self.lr))
        at_peak = self.lr >= (1 - STABLE_LR) * peak
        first = int(np.argmax(at_peak))
        after = np.arange(len(self.lr)) >= first
        return at_peak & after

    @property
    def tokens_now(self) -> float:
        """The last stable point's tokens: where the run would start its cooldown now."""
        return float(self.tokens[self.stable][-1])

    @property
    def cooling(self) -> bool:
        """Whether the last logged point is already below the peak lr (the run is decaying)."""
        return bool(not self.stable[-1])

    def calibration_points(self) -> np.ndarray:
        """Indices of the stable points the offset is calibrated on."""
        idx = np.flatnonzero(self.stable)
        return idx[self.tokens[idx] >= CALIBRATION_FROM * self.tokens_now]


def read_curve(path: Path, options: CurveOptions | None = None) -> Curve:
    """The curve at `path` (run folder, table or TensorBoard folder), checked; BadInput
    otherwise."""
    options = options or CurveOptions()
    if not path.exists():
        raise BadInput(
            f"{path} does not exist; give a cdlaw run folder, a .csv/.parquet log or a "
            "TensorBoard log folder"
        )
    if path.is_dir() and (path / "metrics.parquet").is_file():
        curve = _run_folder(path, options)
    elif _tensorboard_files(path):
        curve = _from_frame(_tensorboard_frame(path), str(path), options)
    elif path.is_dir():
        raise BadInput(
            f"{path} has no metrics.parquet (a cdlaw run folder) nor TensorBoard event files; "
            "give a run folder, a .csv/.parquet log, or a TensorBoard log folder"
        )
    else:
        curve = _from_frame(_read_log(path), str(path), options)
    return check_curve(curve)


def _read_log(path: Path) -> pd.DataFrame:
    """A .csv/.tsv/.parquet log as read_table reads it, refused in a log's words."""
    from cdlaw.fit.table import TABLE_SUFFIXES

    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise BadInput(
            f"{path} is not a .csv, .tsv or .parquet log (got {path.suffix or 'no suffix'!r}): "
            "give one of those, a cdlaw run folder, or a TensorBoard log folder"
        )
    if path.stat().st_size == 0:
        raise BadInput(
            f"{path} is empty: a log needs a header line (tokens or step, loss, lr) and a row "
            "per evaluation"
        )
    return read_table(path)


def _run_folder(path: Path, options: CurveOptions) -> Curve:
    """A cdlaw run: metrics.parquet, and what config.json says about the run."""
    frame = read_table(path / "metrics.parquet")
    config: dict = {}
    if (path / "config.json").is_file():
        try:
            config = json.loads((path / "config.json").read_text())
        except (OSError, ValueError):
            config = {}
    name = str(path / "metrics.parquet")
    fallback = None
    if options.loss_column is None and "val_loss" in frame.columns:
        val = replace(options, loss_column="val_loss", vocab_size=None, law_vocab_size=None)
        if _calibrates(frame, name, val):
            options = replace(options, loss_column="val_loss")
        else:
            options = replace(options, loss_column="train_loss")
            fallback = (
                f"too few validation losses in the stable phase yet: governed on the training "
                f"loss (train_loss); --loss-column val_loss once it has {MIN_STABLE_POINTS}"
            )
    train, data = config.get("train", {}), config.get("data", {})
    if options.vocab_size is None:
        options = replace(options, vocab_size=data.get("vocab_size"))
    curve = _from_frame(frame, name, options)
    return replace(
        curve,
        n_params=config.get("n_params"),
        fresh_tokens=config.get("fresh_tokens"),
        strategy=config.get("strategy"),
        planned_tokens=(
            config["fresh_tokens"] + config.get("derived_tokens", 0)
            if "fresh_tokens" in config
            else None
        ),
        decay_frac=train.get("decay_frac") if train.get("schedule") == "wsd" else None,
        warnings=curve.warnings + ((fallback,) if fallback else ()),
    )


def _calibrates(frame: pd.DataFrame, name: str, options: CurveOptions) -> bool:
    """Whether the curve in options.loss_column has enough points to calibrate on
    (check_curve): a run's validation loss, evaluated less often than its training loss
    is logged, may not yet."""
    try:
        check_curve(_from_frame(frame, name, options))
    except BadInput:
        return False
    return True


def _column(frame: pd.DataFrame, names: tuple[str, ...], want: str | None = None) -> str | None:
    """The frame's column for one of `names` (or exactly `want`), ignoring case."""
    lower = {str(c).strip().lower(): c for c in frame.columns}
    if want is not None:
        return lower.get(want.strip().lower())
    for name in names:
        col = lower.get(name)
        if col is not None and np.isfinite(_numbers(frame, col)).any():
            return col
    return None


def _numbers(frame: pd.DataFrame, col) -> np.ndarray:
    """The column as floats, NaN where a cell is no number; 25M read as the command line
    reads it (cdlaw.fit.columns.numbers)."""
    return numbers(frame[col]).to_numpy(float)


def _from_frame(frame: pd.DataFrame, name: str, options: CurveOptions) -> Curve:
    """The curve in a table's columns; the rows keep their place in the file for messages.
    Rows before the first token (step 0) are dropped; the lr is carried forward to rows
    that do not log it (a trainer's evaluation rows)."""
    where = "line" if frame.attrs.get("rows_are") == "line" else "row"
    loss_col = _column(frame, LOSS_COLUMNS, options.loss_column)
    if loss_col is None:
        wanted = options.loss_column or " or ".join(LOSS_COLUMNS)
        raise BadInput(
            f"{name} has no {wanted} column with a number in it; name the loss column "
            "(nats per token) with --loss-column"
        )
    warnings = []
    token_col = _column(frame, TOKEN_COLUMNS)
    if token_col is not None:
        tokens = _numbers(frame, token_col)
        if options.batch_tokens is not None:
            warnings.append(f"--batch-tokens not used: the log counts tokens ({token_col!r})")
    else:
        step_col = _column(frame, STEP_COLUMNS)
        if step_col is None:
            raise BadInput(
                f"{name} has neither a tokens column ({', '.join(TOKEN_COLUMNS[:3])}) nor a "
                "step column: add one, or log tokens seen with the loss"
            )
        if options.batch_tokens is None:
            raise BadInput(
                f"{name} counts steps ({step_col!r}) but not tokens: give the tokens per "
                "step with --batch-tokens (batch size × sequence length)"
            )
        tokens = _numbers(frame, step_col) * options.batch_tokens
    lr = _learning_rate(frame, name, options)
    loss = _numbers(frame, loss_col)
    finite = np.isfinite(loss)
    warnings += _unfinished(loss, tokens, str(loss_col))
    keep = finite & np.isfinite(tokens) & (tokens != 0)  # step 0: before any training
    lines = np.asarray(frame.index)[keep]
    tokens, loss = tokens[keep], loss[keep]
    if lr is not None:
        lr = lr[keep]
    if len(tokens) == 0:
        raise BadInput(f"{name} has no row with both tokens and a finite {loss_col}")
    if (tokens < 0).any():
        i = int(np.argmax(tokens < 0))
        raise BadInput(f"{name} {where} {lines[i]}: tokens must be positive, not {tokens[i]:g}")
    bad = np.flatnonzero(np.diff(tokens) <= 0)
    if len(bad):
        i = bad[0] + 1
        raise BadInput(
            f"{name} {where} {lines[i]}: tokens {tokens[i]:.6g} do not increase (previous "
            f"{tokens[i - 1]:.6g}); give one run's curve, in order, without restarts"
        )
    if (loss <= 0).any():
        i = int(np.argmax(loss <= 0))
        raise BadInput(
            f"{name} {where} {lines[i]}: loss {loss[i]:.4g} is not positive; give the "
            "cross-entropy in nats per token"
        )
    _check_vocabulary(loss, lines, f"{name} {where}", options)
    return Curve(
        tokens=tokens,
        loss=loss,
        lr=lr,
        source=name,
        loss_column=str(loss_col),
        warnings=tuple(warnings),
    )


def _check_vocabulary(loss: np.ndarray, lines: np.ndarray, at: str, options: CurveOptions) -> None:
    """BadInput at the first loss more than 5% above ln V: not nats per token of a run over
    V tokens (V: --vocab-size or the run's config, else the law's runs')."""
    vocab = options.vocab_size or options.law_vocab_size
    if not vocab:
        return
    above = np.flatnonzero(loss > ABOVE_LN_V * math.log(vocab))
    if len(above):
        i = above[0]
        whose = "" if options.vocab_size else ", the law's runs'; --vocab-size gives the run's own"
        raise BadInput(
            f"{at} {lines[i]}: loss {loss[i]:.4g} is above ln V = {math.log(vocab):.4g} "
            f"(V = {vocab}{whose}), worse than guessing: give nats per token, not bits or a sum"
        )


def _learning_rate(frame: pd.DataFrame, name: str, options: CurveOptions) -> np.ndarray | None:
    """The lr on every row, carried forward (then back) to rows without one; None when
    the log has no lr column (and --lr-column names none)."""
    col = _column(frame, LR_COLUMNS, options.lr_column)
    if col is None:
        if options.lr_column is not None:
            raise BadInput(
                f"{name} has no {options.lr_column!r} column; --lr-column names the learning "
                "rate's column, or leave it out"
            )
        return None
    lr = _numbers(frame, col)
    if not np.isfinite(lr).any():
        raise BadInput(f"{name}'s {col!r} column has no number in it; it cannot be the lr")
    return pd.Series(lr).ffill().bfill().to_numpy(float)


# A log whose loss is at least this dense before its last finite value logs it at every
# row: rows after that without one are a run that stopped making finite losses.
DENSE = 0.9


def _unfinished(loss: np.ndarray, tokens: np.ndarray, column: str) -> list[str]:
    """A warning when the loss turns non-finite in the log's last rows (a diverged run) or
    is infinite anywhere; those points are left out."""
    out = []
    finite = np.isfinite(loss)
    if np.isinf(loss).any():
        out.append(f"{int(np.isinf(loss).sum())} infinite {column} value(s) left out")
    if finite.any():
        last = int(np.flatnonzero(finite)[-1])
        after = ~finite[last + 1 :] & np.isfinite(tokens[last + 1 :])
        if after.any() and finite[: last + 1].mean() >= DENSE:
            out.append(
                f"the log's last {int(after.sum())} row(s) have no finite {column}: has the "
                f"run diverged? Governed on the points up to {tokens[last]:.4g} tokens"
            )
    return out


def check_curve(curve: Curve) -> Curve:
    """BadInput when the stable phase is too short to calibrate on; the curve otherwise."""
    stable = curve.stable
    n = len(curve.calibration_points()) if stable.any() else 0
    if n < MIN_STABLE_POINTS and curve.cooling and stable.sum() < MIN_STABLE_POINTS:
        raise BadInput(
            f"{curve.source}: the learning rate leaves its peak after {int(stable.sum())} "
            f"point(s): the governor needs a WSD run's stable phase at the peak lr (a cosine "
            "schedule decays from its start), or a log of the lr if this one is not it"
        )
    if n < MIN_STABLE_POINTS:
        raise BadInput(
            f"{curve.source}: only {n} {curve.loss_column} point(s) at the peak learning rate "
            f"in the last {1 - CALIBRATION_FROM:.0%} of the tokens seen; calibrating needs "
            f"{MIN_STABLE_POINTS}: let the run go on, log the loss more often, or govern a loss logged more "
            "often (--loss-column)"
        )
    return curve


# ---------------------------------------------------------------------------------------
# TensorBoard logs (the tensorboard extra): scalars by tag into one frame by step.
# ---------------------------------------------------------------------------------------


def _tensorboard_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if "tfevents" in path.name else []
    return sorted(path.rglob("*tfevents*"))


def _tensorboard_frame(path: Path) -> pd.DataFrame:
    """Every scalar of the event files, one column per tag, one row per step."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        from cdlaw.extras import install_advice

        raise BadInput(
            f"{path} is a TensorBoard log, which needs the tensorboard package; install "
            f"{install_advice('tensorboard')}, or export the scalars to a .csv"
        ) from None
    series: dict[str, dict[int, float]] = {}
    for file in _tensorboard_files(path):
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
