"""The typed parts of a fit's result (FitResult's fields), each with its fit.json form.

Each part is a frozen dataclass documented field by field; to_dict() is its entry in
fit.json (docs/files.md), key for key in the order the file has always had, and
from_dict(d, where) reads one back: a key it lacks takes the value below (NaN or 0),
and a value that is not the right kind raises BadInput naming `where`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from cdlaw.system.errors import BadInput
from cdlaw.units import plain

Bounds = tuple[float | None, float | None]  # [low, high]; None: open (a hand-written file)


@dataclass(frozen=True)
class SeedNoise:
    """The seed-to-seed scatter of log loss: the floor under any fit's log-RMSE
    (cdlaw.fit.cells.seed_noise). fit.json "seed_noise"."""

    sd_log: float  # pooled standard deviation of log loss between replicate seeds
    n_groups: int  # cells with at least two replicate runs
    n_runs: int  # runs in those cells
    # the table has a seed column (cdlaw's own runs do); False: the runs of one cell may
    # differ in more than their seed (a published table of runs on several datasets)
    seeds_named: bool = True

    def to_dict(self) -> dict:
        return _by_field(self)

    @classmethod
    def from_dict(cls, d: dict, where: str) -> SeedNoise:
        return cls(
            _num(d, "sd_log", where),
            _count(d, "n_groups", where),
            _count(d, "n_runs", where),
            bool(d.get("seeds_named", True)),
        )


def seed_noise_between(noise: dict) -> str:
    """What fit.json's "seed_noise" (a dict) scatters between, in words."""
    if noise.get("seeds_named", True):
        return "between replicate seeds"
    return (
        "between runs of one cell (the table has no seed column: they may differ in more "
        "than their seed, e.g. their data)"
    )


@dataclass(frozen=True)
class Holdout:
    """The held-out largest model size (`--holdout-largest`). fit.json "holdout"."""

    n_params: float  # the size left out of the fit
    n_rows: int  # its rows the fit could have used
    rmse_log: float  # log-RMSE of the fitted law on them (NaN without any)

    def to_dict(self) -> dict:
        return _by_field(self)

    @classmethod
    def from_dict(cls, d: dict, where: str) -> Holdout:
        return cls(
            _num(d, "n_params", where), _count(d, "n_rows", where), _num(d, "rmse_log", where)
        )


@dataclass(frozen=True)
class OptimizerReport:
    """How the search went (docs/fit.md). fit.json "optimizer"."""

    success: bool  # the polished best minimum converged
    message: str  # scipy's message for it, with the largest projected gradient
    n_starts: int  # starting points of the full search
    n_converged: int  # of them, those stopped by ftol / gtol
    at_bound: tuple[str, ...]  # parameters at a bound or outside the start grid, as warned
    bootstrap_converged: int  # bootstrap refits that converged

    def to_dict(self) -> dict:
        return _by_field(self) | {"at_bound": list(self.at_bound)}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> OptimizerReport:
        at_bound = d.get("at_bound") or []
        if not isinstance(at_bound, list):
            raise BadInput(f'{where}: "at_bound" must be a list, not {type(at_bound).__name__}.')
        return cls(
            success=bool(d.get("success", False)),
            message=str(d.get("message", "")),
            n_starts=_count(d, "n_starts", where),
            n_converged=_count(d, "n_converged", where),
            at_bound=tuple(str(p) for p in at_bound),
            bootstrap_converged=_count(d, "bootstrap_converged", where),
        )


RANGE_COLUMNS = ("n_params", "fresh_tokens", "derived_ratio", "tokens_per_param")


@dataclass(frozen=True)
class DataRange:
    """[min, max] of each coordinate a plan is checked against, over the fitted rows, and
    per strategy the same over its own runs (a fit gives each strategy its derived ratios
    [0, max]: the one-epoch runs anchor r = 0). fit.json "data_range"; cdlaw.plan.guard
    reads it in its to_dict() form. A coordinate is None where the file has no pair."""

    n_params: Bounds | None = None
    fresh_tokens: Bounds | None = None
    derived_ratio: Bounds | None = None  # D′/D
    tokens_per_param: Bounds | None = None  # D/N
    strategies: Mapping[str, DataRange] = field(default_factory=dict)  # per strategy's runs
    # the tokenizer's vocabulary V of every fitted run, where the table records one (its
    # `vocab_size` column, one value): ln V, a uniform guess's loss, bounds every loss band
    vocab_size: int | None = None

    def to_dict(self) -> dict:
        out: dict = {
            c: list(getattr(self, c)) for c in RANGE_COLUMNS if getattr(self, c) is not None
        }
        if self.vocab_size is not None:
            out["vocab_size"] = self.vocab_size
        return out | {s: r.to_dict() for s, r in self.strategies.items()}

    @property
    def uniform_loss(self) -> float | None:
        """ln V: the loss of a uniform guess over the vocabulary (None where V is unknown)."""
        return None if self.vocab_size is None else math.log(self.vocab_size)

    @classmethod
    def from_dict(cls, d, where: str) -> DataRange:
        """Each [low, high] pair (numbers or nulls) of the four coordinates, and each object
        as a strategy's own ranges; any other entry is what a plan skips, though a pair of
        anything but numbers is refused under any name."""
        if not isinstance(d, dict):
            raise BadInput(f'{where}: "data_range" must be an object of [low, high] ranges.')
        bounds: dict = {}
        per = {}
        for key, value in d.items():
            if key == "vocab_size":
                if not (isinstance(value, int) and not isinstance(value, bool) and value > 1):
                    raise BadInput(
                        f'{where}: "data_range" "vocab_size" must be a whole number above 1 '
                        f"(the tokenizer's vocabulary), not {value!r}."
                    )
                bounds["vocab_size"] = value
            elif isinstance(value, dict):
                per[str(key)] = cls.from_dict(value, where)
            elif isinstance(value, list) and len(value) == 2:
                pair = tuple(_bound(b, key, where) for b in value)
                if key in RANGE_COLUMNS:
                    bounds[key] = pair
        return cls(**bounds, strategies=per)


@dataclass(frozen=True)
class ModelFloor:
    """E + A/N^α at each model size of the fitted rows: the combination a fit pins down
    even when E, A and α trade off (docs/fit.md). fit.json "model_floor"."""

    n_params: tuple[float, ...]  # the sizes, ascending
    loss: tuple[float, ...]  # E + A/N^α at each
    ci95: (
        tuple[tuple[float, float], ...] | None
    )  # per size [2.5, 97.5] percentiles; None without bootstrap

    def to_dict(self) -> dict:
        out: dict = {"n_params": list(self.n_params), "loss": list(self.loss)}
        if self.ci95 is not None:
            out["ci95"] = [list(c) for c in self.ci95]
        return out

    @classmethod
    def from_dict(cls, d: dict, where: str) -> ModelFloor:
        ci = d.get("ci95")
        return cls(
            tuple(_numbers(d, "n_params", where)),
            tuple(_numbers(d, "loss", where)),
            None if ci is None else tuple(_pair(c, where) for c in _as_list(ci, where)),
        )


@dataclass(frozen=True)
class RStarEstimate:
    """One strategy's R* at the median cell."""

    value: float
    ci95: (
        tuple[float, float] | None
    )  # [2.5, 97.5] percentiles of the refits; None without bootstrap

    def to_dict(self) -> dict:
        out: dict = {"value": self.value}
        if self.ci95 is not None:
            out["ci95"] = list(self.ci95)
        return out


@dataclass(frozen=True)
class RStarAtMedian:
    """Each fitted strategy's R* at the table's median cell (median N, median tokens per
    parameter). fit.json "rstar"; a form without R* has none (the file says {})."""

    n_params: float  # N of the median cell
    fresh_tokens: float  # D of the median cell
    strategies: Mapping[str, RStarEstimate]  # in the fit's strategy order

    def to_dict(self) -> dict:
        out: dict = {"n_params": self.n_params, "fresh_tokens": self.fresh_tokens}
        return out | {s: e.to_dict() for s, e in self.strategies.items()}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> RStarAtMedian:
        per = {}
        for s, e in d.items():
            if isinstance(e, dict):
                ci = e.get("ci95")
                per[str(s)] = RStarEstimate(
                    _num(e, "value", where), None if ci is None else _pair(ci, where)
                )
        return cls(_num(d, "n_params", where), _num(d, "fresh_tokens", where), per)


# ---------------------------------------------------------------------------------------
# Reading values back, with one sentence naming the file when one is not what it must be.
# ---------------------------------------------------------------------------------------


def _by_field(part) -> dict:
    """{field: value} in the order the fields are declared (fit.json's order)."""
    return {f.name: getattr(part, f.name) for f in fields(part)}


def _num(d: dict, key: str, where: str) -> float:
    """A number (NaN when absent or null)."""
    value = d.get(key)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not _is_number(value):
        raise BadInput(f'{where}: "{key}" must be a number, not {plain(value)}.')
    return float(value)


def _count(d: dict, key: str, where: str) -> int:
    """A whole number (0 when absent or null)."""
    value = d.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not _is_number(value) or float(value) != int(float(value)):
        raise BadInput(f'{where}: "{key}" must be a whole number, not {plain(value)}.')
    return int(float(value))


def _bound(value, key: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not _is_number(value):
        raise BadInput(
            f'{where}: "data_range" {key} must be [low, high] numbers, not {plain(value)}.'
        )
    return float(value)


def _numbers(d: dict, key: str, where: str) -> list[float]:
    return [_num({key: v}, key, where) for v in _as_list(d.get(key) or [], where)]


def _pair(value, where: str) -> tuple[float, float]:
    values = [_num({"ci95": v}, "ci95", where) for v in _as_list(value, where)]
    if len(values) != 2:
        raise BadInput(f'{where}: "ci95" must be [low, high], not {plain(value)}.')
    return values[0], values[1]


def _as_list(value, where: str) -> list:
    if not isinstance(value, list):
        raise BadInput(f"{where}: expected a list, not {plain(value)}.")
    return value


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True
