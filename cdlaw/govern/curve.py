"""A run's curve so far, read from wherever it was logged.

    curve = read_curve(Path("runs/demo/17506c0701eb"))          # a cdlaw run folder
    curve = read_curve(Path("wandb_export.csv"))                # any trainer's log
    curve = read_curve(Path("trainer_state.json"), CurveOptions(batch_tokens=262144))

A cdlaw run folder gives its `metrics.parquet` (validation loss where the run evaluated
it, else its training loss) and, from `config.json`, N, D, the strategy, the planned
tokens, its lr schedule and the vocabulary. Any other run gives a log (cdlaw.govern.logs:
a table, a W&B export, Hugging Face's trainer_state.json, a TensorBoard folder) with a step
or tokens column, a loss column and, ideally, the learning rate; each is found under the
spellings below, or named with --step-column, --tokens-column, --loss-column, --lr-column.
What is known about the run beyond its curve comes with the options.

Bad input is one sentence and exit 2 (cdlaw.system.errors.BadInput): no usable step or tokens
column, steps or tokens that do not increase, a loss more than 5% above ln V (not nats
per token). `check_stable` refuses a curve the WSD relation cannot calibrate on.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.columns import numbers, read_table
from cdlaw.govern.logs import (
    LOSS_COLUMNS,
    LR_COLUMNS,
    MIN_LOSS_POINTS,
    STEP_COLUMNS,
    TOKEN_COLUMNS,
    read_log,
)
from cdlaw.system.errors import BadInput

# A point is in the stable phase when its lr is within this of the peak.
STABLE_LR = 1e-3
# The fewest stable-phase points (after warmup, at or past a quarter of the tokens seen)
# the WSD relation's offset and its spread can be calibrated from.
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
    step_column: str | None = None  # force the optimizer step's column
    tokens_column: str | None = None  # force the tokens seen's column
    vocab_size: int | None = None  # V, for the ln V check (default: a run folder's config)
    # V of the law's fitted runs, where the fit records one: the check's V for a log that
    # does not say its own (the law's losses, and so the run's, are over that vocabulary)
    law_vocab_size: int | None = None


@dataclass(frozen=True)
class Curve:
    """A run's curve so far (loss in nats per token, steps and tokens strictly increasing
    where the log has them: at least one) and what the log or a run folder's config says
    about the run; `stable` marks the points at the peak lr after warmup."""

    tokens: np.ndarray | None
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
    steps: np.ndarray | None = None  # optimizer steps, where the log (or its tokens) say
    planned_steps: int | None = None  # the steps the run is scheduled for
    config: dict | None = None  # a cdlaw run folder's config.json

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens per optimizer step where the log has both (their median ratio)."""
        if self.tokens is None or self.steps is None:
            return None
        return float(np.median(self.tokens / np.maximum(self.steps, 1e-300)))

    @property
    def token_counts(self) -> np.ndarray:
        """The tokens seen at each point; BadInput for a log that counts steps only."""
        if self.tokens is None:
            raise BadInput(
                f"{self.source} counts steps but not tokens: give the tokens per step with "
                "--batch-tokens (batch size × sequence length)"
            )
        return self.tokens

    @property
    def stable(self) -> np.ndarray:
        """Points logged at the peak learning rate, past warmup (every point without lr)."""
        if self.lr is None:
            return np.ones(len(self.loss), dtype=bool)
        peak = float(np.nanmax(self.lr))
        at_peak = self.lr >= (1 - STABLE_LR) * peak
        first = int(np.argmax(at_peak))
        after = np.arange(len(self.lr)) >= first
        return at_peak & after

    @property
    def tokens_now(self) -> float:
        """The last stable point's tokens: where the run would start its cooldown now."""
        return float(self.token_counts[self.stable][-1])

    @property
    def cooling(self) -> bool:
        """Whether the last logged point is already below the peak lr (the run is decaying)."""
        return bool(not self.stable[-1])

    def calibration_points(self) -> np.ndarray:
        """Indices of the stable points the WSD relation's offset is calibrated on."""
        idx = np.flatnonzero(self.stable)
        return idx[self.token_counts[idx] >= CALIBRATION_FROM * self.tokens_now]


def read_curve(path: Path, options: CurveOptions | None = None) -> Curve:
    """The curve at `path` (a run folder or any log cdlaw.govern.logs reads); BadInput
    otherwise."""
    options = options or CurveOptions()
    if not path.exists():
        raise BadInput(
            f"{path} does not exist; give a cdlaw run folder, a .csv/.parquet log, a "
            "trainer_state.json or a TensorBoard log folder"
        )
    if path.is_dir() and (path / "metrics.parquet").is_file():
        return _run_folder(path, options)
    frame, facts = read_log(path)
    curve = _from_frame(frame, str(path), options)
    return replace(curve, planned_steps=facts.get("planned_steps"))


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
        planned_steps=config.get("steps"),
        config=config or None,
        warnings=curve.warnings + ((fallback,) if fallback else ()),
    )


def _calibrates(frame: pd.DataFrame, name: str, options: CurveOptions) -> bool:
    """Whether the curve in options.loss_column has enough stable points to calibrate on
    (check_stable): a run's validation loss, evaluated less often than its training loss
    is logged, may not yet."""
    try:
        check_stable(_from_frame(frame, name, options))
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


def _loss_column(frame: pd.DataFrame) -> str | None:
    """The first of LOSS_COLUMNS with MIN_LOSS_POINTS points, else the one with the most."""
    lower = {str(c).strip().lower(): c for c in frame.columns}
    found = [(name, lower[name]) for name in LOSS_COLUMNS if name in lower]
    counts = [(int(np.isfinite(_numbers(frame, col)).sum()), col) for _, col in found]
    for n, col in counts:
        if n >= MIN_LOSS_POINTS:
            return col
    best = max(counts, default=(0, None), key=lambda nc: nc[0])
    return best[1] if best[0] > 0 else None


def _numbers(frame: pd.DataFrame, col) -> np.ndarray:
    """The column as floats, NaN where a cell is no number; 25M read as the command line
    reads it (cdlaw.fit.columns.numbers)."""
    return numbers(frame[col]).to_numpy(float)


def _named(frame: pd.DataFrame, name: str, option: str, want: str | None) -> str | None:
    """The column `want` names (BadInput naming the option when there is none)."""
    if want is None:
        return None
    col = _column(frame, (), want)
    if col is None or not np.isfinite(_numbers(frame, col)).any():
        have = ", ".join(map(str, frame.columns[:12]))
        raise BadInput(
            f"{name} has no {want!r} column with a number in it ({option}); it has {have}"
        )
    return col


def _axes(frame: pd.DataFrame, name: str, options: CurveOptions):
    """(tokens, steps, warnings): the log's tokens and optimizer steps (either may be
    None, not both); steps times --batch-tokens give tokens where the log has none."""
    token_col = _named(frame, name, "--tokens-column", options.tokens_column)
    step_col = _named(frame, name, "--step-column", options.step_column)
    token_col = token_col or (None if options.step_column else _column(frame, TOKEN_COLUMNS))
    step_col = step_col or (None if options.tokens_column else _column(frame, STEP_COLUMNS))
    if token_col is None and step_col is None:
        raise BadInput(
            f"{name} has neither a tokens column ({', '.join(TOKEN_COLUMNS[:3])}, …) nor a "
            "step column (step, train/global_step, _step, …): name one with --tokens-column "
            "or --step-column"
        )
    tokens = None if token_col is None else _numbers(frame, token_col)
    steps = None if step_col is None else _numbers(frame, step_col)
    warnings = []
    if options.batch_tokens is not None:
        if tokens is not None:
            warnings.append(f"--batch-tokens not used: the log counts tokens ({token_col!r})")
        elif steps is not None:
            tokens = steps * options.batch_tokens
    return tokens, steps, warnings


def _from_frame(frame: pd.DataFrame, name: str, options: CurveOptions) -> Curve:
    """The curve in a table's columns; the rows keep their place in the file for messages.
    Rows before the first step (step 0) are dropped; the lr is carried forward to rows
    that do not log it (a trainer's evaluation rows)."""
    where = frame.attrs.get("rows_are", "row")
    loss_col = _named(frame, name, "--loss-column", options.loss_column) or _loss_column(frame)
    if loss_col is None:
        raise BadInput(
            f"{name} has no loss column ({', '.join(LOSS_COLUMNS[:8])}, …) with a number in "
            "it; name the loss column (nats per token) with --loss-column"
        )
    tokens, steps, warnings = _axes(frame, name, options)
    axis = tokens if tokens is not None else steps
    assert axis is not None
    lr = _learning_rate(frame, name, options)
    loss = _numbers(frame, loss_col)
    warnings += _unfinished(loss, axis, str(loss_col))
    keep = np.isfinite(loss) & np.isfinite(axis) & (axis != 0)  # step 0: before training
    lines = np.asarray(frame.index)[keep]
    loss = loss[keep]
    tokens = None if tokens is None else tokens[keep]
    steps = None if steps is None else steps[keep]
    lr = None if lr is None else lr[keep]
    if len(loss) == 0:
        raise BadInput(f"{name} has no row with both a step (or tokens) and a finite {loss_col}")
    if tokens is not None and steps is not None:  # a row that logs one but not the other
        steps = _filled(steps, tokens)
    for label, values in (("tokens", tokens), ("step", steps)):
        if values is None:
            continue
        if not np.isfinite(values).all():
            i = int(np.argmax(~np.isfinite(values)))
            raise BadInput(
                f"{name} {where} {lines[i]}: no {label} beside the loss; give one run's log"
            )
        if (values < 0).any():
            i = int(np.argmax(values < 0))
            raise BadInput(
                f"{name} {where} {lines[i]}: {label} must be positive, not {values[i]:g}"
            )
        bad = np.flatnonzero(np.diff(values) <= 0)
        if len(bad):
            i = bad[0] + 1
            raise BadInput(
                f"{name} {where} {lines[i]}: {label} {values[i]:.6g} does not increase (previous "
                f"{values[i - 1]:.6g}); give one run's curve, in order, without restarts"
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
        steps=steps,
    )


def _filled(steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The steps, where a row has none, interpolated from its tokens (the two advance
    together); unchanged when every row has one, or fewer than two do."""
    have = np.isfinite(steps)
    if have.all() or have.sum() < 2:
        return steps
    return np.where(have, steps, np.interp(tokens, tokens[have], steps[have]))


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
    col = _named(frame, name, "--lr-column", options.lr_column) or _column(frame, LR_COLUMNS)
    if col is None:
        return None
    lr = _numbers(frame, col)
    return pd.Series(lr).ffill().bfill().to_numpy(float)


# A log whose loss is at least this dense before its last finite value logs it at every
# row: rows after that without one are a run that stopped making finite losses.
DENSE = 0.9


def _unfinished(loss: np.ndarray, axis: np.ndarray, column: str) -> list[str]:
    """A warning when the loss turns non-finite in the log's last rows (a diverged run) or
    is infinite anywhere; those points are left out."""
    out = []
    finite = np.isfinite(loss)
    if np.isinf(loss).any():
        out.append(f"{int(np.isinf(loss).sum())} infinite {column} value(s) left out")
    if finite.any():
        last = int(np.flatnonzero(finite)[-1])
        after = ~finite[last + 1 :] & np.isfinite(axis[last + 1 :])
        if after.any() and finite[: last + 1].mean() >= DENSE:
            out.append(
                f"the log's last {int(after.sum())} row(s) have no finite {column}: has the "
                f"run diverged? Governed on the points up to {axis[last]:.4g}"
            )
    return out


def check_stable(curve: Curve) -> Curve:
    """BadInput when the stable phase is too short for the WSD relation to calibrate on;
    the curve otherwise."""
    stable = curve.stable
    n = len(curve.calibration_points()) if stable.any() else 0
    if n < MIN_STABLE_POINTS and curve.cooling and stable.sum() < MIN_STABLE_POINTS:
        raise BadInput(
            f"{curve.source}: the learning rate leaves its peak after {int(stable.sum())} "
            f"point(s): the WSD relation needs a stable phase at the peak lr; govern it with "
            "its curve law (--model curve)"
        )
    if n < MIN_STABLE_POINTS:
        raise BadInput(
            f"{curve.source}: only {n} {curve.loss_column} point(s) at the peak learning rate "
            f"in the last {1 - CALIBRATION_FROM:.0%} of the tokens seen; calibrating needs "
            f"{MIN_STABLE_POINTS}: let the run go on, log the loss more often, or govern a loss logged more "
            "often (--loss-column)"
        )
    return curve
