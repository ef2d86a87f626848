"""A fit's result and its files: FitResult is fit.json (to_dict / from_dict / read); rows
are fit_rows.parquet.

One owner of the format: the fit writes it through FitResult.to_dict, and plan, plot and
report read it back through FitResult.from_dict (the bootstrap refits, as Laws, through
FitResult.bootstrap_laws). output_paths names the two files for a runs folder, a table
file or --out; write_fit writes them atomically (fit.json last). The fit itself lives in
cdlaw.fit.procedure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw import law as lawlib
from cdlaw.fit import vector as fitvec
from cdlaw.fit.findings import (
    DataRange,
    Holdout,
    ModelFloor,
    OptimizerReport,
    RStarAtMedian,
    SeedNoise,
)
from cdlaw.laws import LAWS
from cdlaw.strategies import NAME_RULE, REPETITION_SPELLINGS, is_name
from cdlaw.system.atomic import check_out_path
from cdlaw.system.errors import BadInput
from cdlaw.units import plain


@dataclass
class FitResult:
    """Everything a fit found and did. to_dict() is fit.json (docs/files.md, key by key);
    rows is fit_rows.parquet. A part a fit.json may lack (hand-written) is None."""

    law: lawlib.Law  # the fitted constants ("law", "params", "strategies")
    method: str  # joint | staged
    huber_delta: float  # δ of the Huber loss on log residuals
    naive: bool  # a chinchilla fit that counted derived tokens as fresh
    select: str  # how replicate runs were reduced: min | mean | none
    source: str  # the path that was fitted
    param_names: list[str]  # public names, the order of `bootstrap` vectors
    ci95: dict[str, list[float]]  # {name: [2.5, 97.5] percentiles of the refits}
    bootstrap: np.ndarray  # (B, P) public values of the bootstrap refits
    n_rows: int  # rows after --select
    n_used: int  # rows the final fit used
    dropped: list[int]  # row_ids removed by --drop-outliers, in order
    objective: float  # the summed Huber loss at the optimum
    rmse_log: float  # log-RMSE over the used rows
    seed_noise: SeedNoise | None  # the log-RMSE floor set by replicate seeds, if any
    holdout: Holdout | None  # the held-out largest size (--holdout-largest)
    optimizer: OptimizerReport | None
    data_range: DataRange | None  # what a plan is checked against
    model_floor: ModelFloor | None  # E + A/N^α at the fitted sizes
    rstar: RStarAtMedian | None  # R* at the median cell; None for a form without R*
    regime_counts: dict[str, int]  # {regime: count} over the used rows (observed loss)
    warnings: list[str]  # every warning the fit printed
    rows: pd.DataFrame | None = field(default=None, repr=False)  # None when read from fit.json
    # the fitted rows' digest (cdlaw.fit.table.rows_digest), by which report, plot and next
    # tell a fit of the runs as they are from an older one; None: a file without one
    rows_digest: str | None = None
    # the finished runs the fit read, before --select reduced each cell's replicates to one
    # row (cells.replicates_text says how); None: a file from before it was recorded
    n_runs: int | None = None

    def to_dict(self) -> dict:
        d = self.law.to_dict()
        return {
            "law": d["law"],
            "method": self.method,
            "huber_delta": self.huber_delta,
            "params": d["params"],
            "strategies": d["strategies"],
            "ci95": self.ci95,
            "n_rows": self.n_rows,
            "n_used": self.n_used,
            "dropped": [int(i) for i in self.dropped],
            "objective": self.objective,
            "rmse_log": self.rmse_log,
            "holdout": _part(self.holdout, None),
            "optimizer": _part(self.optimizer, {}),
            "data_range": _part(self.data_range, None),
            "bootstrap": self.bootstrap.tolist(),
            "bootstrap_params": list(self.param_names),
            "model_floor": _part(self.model_floor, {}),
            "rstar": _part(self.rstar, {}),
            "regime_counts": self.regime_counts,
            "naive": self.naive,
            "select": self.select,
            "source": self.source,
            "warnings": list(self.warnings),
            "seed_noise": _part(self.seed_noise, None),
            "rows_digest": self.rows_digest,
            "n_runs": self.n_runs,
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "fit.json") -> FitResult:
        """A fit.json read back (rows is None). Raises BadInput naming `where` when the file
        is not a fit a plan can trust: missing or non-finite parameters, parameters outside
        the law's domain, or a law with derived-token terms but no strategy."""
        if not isinstance(d, dict) or not isinstance(d.get("params"), dict):
            raise BadInput(
                f'{where}: not a fit (no "params" object with E, A, B, alpha, beta); '
                "make one with `cdlaw fit RUNS_DIR`."
            )
        name = d.get("law", "cd")
        if not isinstance(name, str) or name not in LAWS:
            raise BadInput(
                f"{where}: not a usable fit: unknown law form {name!r}; valid: {', '.join(LAWS)}."
            )
        shared = LAWS[name].shared
        missing = [k for k in shared if k not in d["params"]]
        if missing:
            raise BadInput(
                f'{where}: "params" lacks {", ".join(missing)}; a fit has '
                f"{', '.join(shared[:-1])} and {shared[-1]}."
            )
        strategies = d.get("strategies") or {}
        if not isinstance(strategies, dict) or not all(
            isinstance(p, dict) for p in strategies.values()
        ):
            raise BadInput(
                f'{where}: "strategies" must map each strategy to an object of its parameters.'
            )
        params = {k: _parameter(d["params"][k], k, where) for k in shared}
        strategies = {
            str(s): {str(k): _parameter(v, f"{s}.{k}", where) for k, v in p.items()}
            for s, p in strategies.items()
        }
        source = d.get("source") or where
        try:
            law = lawlib.Law(name, params, strategies, str(source))
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"{where}: not a usable fit: {str(e).strip(chr(39))}.") from None
        _check_domain(law, where)
        names = [str(n) for n in _field(d, "bootstrap_params", list, where)]
        try:
            vectors = [
                [math.nan if x is None else float(x) for x in _as_list(v)]
                for v in _as_list(d.get("bootstrap") or [])
            ]
            bootstrap = np.array(vectors, dtype=float) if vectors else np.empty((0, len(names)))
            if bootstrap.ndim != 2:
                raise ValueError("ragged")
        except (TypeError, ValueError, OverflowError):
            raise BadInput(
                f'{where}: "bootstrap" must be a list of equally long lists of numbers.'
            ) from None
        data_range = d.get("data_range")
        data_range = None if data_range is None else DataRange.from_dict(data_range, where)
        return cls(
            law=law,
            method=str(d.get("method", "")),
            huber_delta=_scalar(d, "huber_delta", float, where),
            naive=bool(d.get("naive", False)),
            select=str(d.get("select", "")),
            source=str(source),
            param_names=names,
            ci95=_field(d, "ci95", dict, where),
            bootstrap=bootstrap,
            n_rows=int(_scalar(d, "n_rows", int, where)),
            n_used=int(_scalar(d, "n_used", int, where)),
            dropped=_row_ids(_field(d, "dropped", list, where), where),
            objective=_scalar(d, "objective", float, where),
            rmse_log=_scalar(d, "rmse_log", float, where),
            seed_noise=_read_part(SeedNoise, d, "seed_noise", where),
            holdout=_read_part(Holdout, d, "holdout", where),
            optimizer=_read_part(OptimizerReport, d, "optimizer", where),
            data_range=data_range,
            model_floor=_read_part(ModelFloor, d, "model_floor", where),
            rstar=_read_part(RStarAtMedian, d, "rstar", where),
            regime_counts=_field(d, "regime_counts", dict, where),
            warnings=[str(w) for w in _field(d, "warnings", list, where)],
            rows_digest=d["rows_digest"] if isinstance(d.get("rows_digest"), str) else None,
            n_runs=d["n_runs"] if isinstance(d.get("n_runs"), int) else None,
        )

    @classmethod
    def read(cls, path: str | Path) -> FitResult:
        """Read a fit.json that `cdlaw fit` wrote; BadInput when it is not one."""
        path = Path(path)
        if path.suffix.lower() in (".csv", ".tsv", ".parquet", ".pq"):
            runs = path.parent if path.name == "summary.parquet" else path  # a runs folder's
            raise BadInput(
                f"{path} is a table of runs, not a fit: fit it first (`cdlaw fit {runs}` "
                f"writes {output_paths(runs)[0]}) and pass that"
            )
        try:
            d = json.loads(path.read_text(), object_pairs_hook=_once_each)
        except _NamedTwice as e:
            raise BadInput(
                f"{path}: names {e.args[0]!r} twice in one object (two strategies with one "
                "name?); keep one."
            ) from None
        except (OSError, ValueError, RecursionError) as e:  # ValueError: not UTF-8 or JSON
            detail = " ".join(str(e).split())[:200]
            raise BadInput(f"{path}: not a readable JSON fit file ({detail}).") from None
        return cls.from_dict(d, str(path))

    def bootstrap_laws(self) -> tuple[list[lawlib.Law], list[str]]:
        """The bootstrap refits as Laws (for 95% bands), and why there are none if so.

        Vectors are named by bootstrap_params, in cdlaw.fit.vector.fit_vector_names' public
        names; a parameter a vector does not carry keeps its point estimate. A sample with
        a non-finite E, A, B, alpha or beta is skipped.
        """
        if not len(self.bootstrap):
            return [], []
        if not self.param_names:
            return [], ["the fit's bootstrap samples carry no bootstrap_params names: no 95% band"]
        form, strategies = self.law.form_decl, list(self.law.strategies)
        known = form.fit_vector_names(strategies)
        unknown = [n for n in self.param_names if n not in known]
        if unknown:
            return [], [
                f"bootstrap parameter {unknown[0]!r} is not one of this {form.name} law's "
                f"({', '.join(known)}): no 95% band"
            ]
        if self.bootstrap.shape[1] != len(self.param_names):
            return [], [
                f"bootstrap vectors have {self.bootstrap.shape[1]} values for "
                f"{len(self.param_names)} names: no 95% band"
            ]
        point = dict(zip(known, fitvec.law_to_public_vector(self.law, strategies), strict=True))
        laws = []
        for vector in self.bootstrap:
            values = {**point, **dict(zip(self.param_names, vector.tolist(), strict=True))}
            if not all(math.isfinite(values[k]) for k in form.shared):
                continue
            laws.append(
                fitvec.law_from_public_vector(
                    form, strategies, [values[n] for n in known], "bootstrap"
                )
            )
        return laws, []


def _part(part, empty):
    """A part's fit.json entry: its to_dict(), or what the file says for none."""
    return empty if part is None else part.to_dict()


def _read_part(kind, d: dict, key: str, where: str):
    """An optional object of fit.json as its typed part; None when absent, null or {}."""
    value = _field(d, key, dict, where)
    return kind.from_dict(value, where) if value else None


def _parameter(value, name: str, where: str) -> float:
    """A law parameter as a float; BadInput naming it when it is not a number."""
    if isinstance(value, bool):
        value = None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        shown = name if name.isprintable() and name.strip() == name else repr(name)
        raise BadInput(f"{where}: parameter {shown} is not a finite number.") from None


def _scalar(d: dict, key: str, kind, where: str):
    """An optional number of fit.json (NaN, or 0 for counts, when absent or null)."""
    value = d.get(key)
    if value is None:
        return 0 if kind is int else math.nan
    try:
        if isinstance(value, bool):
            raise TypeError(key)
        number = float(value)
        if kind is int and number != int(number):
            raise ValueError(key)
        return int(number) if kind is int else number
    except (TypeError, ValueError, OverflowError):
        what = "a whole number" if kind is int else "a number"
        raise BadInput(f'{where}: "{key}" must be {what}, not {plain(value)}.') from None


def _field(d: dict, key: str, kind, where: str):
    """An optional object (dict) or list of fit.json; empty when absent or null."""
    value = d.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        what = "an object" if kind is dict else "a list"
        raise BadInput(f'{where}: "{key}" must be {what}, not {type(value).__name__}.')
    return kind(value)


def _as_list(value) -> list:
    if not isinstance(value, list):
        raise TypeError(type(value).__name__)
    return value


def _row_ids(values: list, where: str) -> list[int]:
    """ "dropped": the row_id of each row the fit dropped, as whole numbers."""
    out = []
    for v in values:
        try:
            if isinstance(v, bool) or float(v) != int(float(v)):
                raise ValueError(v)
            out.append(int(float(v)))
        except (TypeError, ValueError, OverflowError):
            raise BadInput(
                f'{where}: "dropped" must be a list of row numbers (row_id), not {plain(v)}.'
            ) from None
    return out


class _NamedTwice(ValueError):
    """A JSON object with one key twice (json keeps the last silently)."""


def _once_each(pairs: list[tuple[str, object]]) -> dict:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _NamedTwice(key)
        seen.add(key)
    return dict(pairs)


def _check_domain(law: lawlib.Law, where: str) -> None:
    """Parameters a law can be planned with: finite, each within the sign its form declares
    (positive, nonnegative), every strategy a derived-token strategy, and at least one
    strategy for a form with per-strategy parameters."""
    form = law.form_decl
    for name, value in law.params.items():
        if not math.isfinite(value):
            raise BadInput(f"{where}: parameter {name} is not a finite number.")
        if name in form.nonnegative and value < 0:
            raise BadInput(f"{where}: parameter {name} = {value:g} must be ≥ 0.")
        if name in form.positive and value <= 0:
            raise BadInput(f"{where}: parameter {name} = {value:g} must be > 0.")
    for strategy, params in law.strategies.items():
        if strategy in REPETITION_SPELLINGS:
            raise BadInput(
                f'{where}: strategy {strategy!r} in "strategies" is how tables write '
                "repetition, which a fit now names so: fit the table again."
            )
        if not is_name(strategy):
            raise BadInput(
                f'{where}: strategy {strategy!r} in "strategies" is not a derived strategy\'s '
                f"name ({NAME_RULE})."
            )
        for name, value in params.items():
            if not math.isfinite(value):
                raise BadInput(f"{where}: parameter {strategy}.{name} is not a finite number.")
            if name in form.nonnegative and value < 0:
                raise BadInput(f"{where}: parameter {strategy}.{name} = {value:g} must be ≥ 0.")
            if name in form.positive and value <= 0:
                raise BadInput(f"{where}: parameter {strategy}.{name} = {value:g} must be > 0.")
    if form.strategy_params and not law.strategies:
        raise BadInput(
            f'{where}: a {law.form} law needs parameters for at least one strategy in "strategies".'
        )


def output_paths(path: str | Path, out: str | Path | None = None) -> tuple[Path, Path]:
    """Where a fit of PATH writes: (fit.json, fit_rows.parquet).

    A runs folder: <runs>/fit.json and <runs>/fit_rows.parquet. A table file t.csv:
    t.fit.json and t.fit_rows.parquet beside it. --out X.json: X.json and X_rows.parquet.
    """
    path = Path(path)
    if out is not None:
        out = Path(out)
        if out.suffix.lower() != ".json":
            raise BadInput(f"--out must name a .json file (fit.json), not {str(out)!r}")
        check_out_path(out, "--out", example="fit.json")
        return out, out.with_name(out.stem + "_rows.parquet")
    if path.is_dir():
        return path / "fit.json", path / "fit_rows.parquet"
    return path.with_name(path.stem + ".fit.json"), path.with_name(path.stem + ".fit_rows.parquet")


def write_fit(result: FitResult, json_path: str | Path, rows_path: str | Path) -> None:
    """Write fit_rows.parquet, then fit.json (each atomically; fit.json last).

    fit.json's text is made before either file is written, so a fit that cannot be
    written as JSON leaves no files behind.
    """
    from cdlaw.system.atomic import json_safe, write_parquet_atomic, write_text_atomic

    text = json.dumps(json_safe(result.to_dict()), indent=2, sort_keys=False) + "\n"
    write_parquet_atomic(rows_path, result.rows)
    write_text_atomic(json_path, text)
