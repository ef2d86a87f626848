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
from cdlaw.errors import BadInput
from cdlaw.fit import vector as fitvec


@dataclass
class FitResult:
    """Everything a fit found and did. to_dict() is fit.json; rows is fit_rows.parquet."""

    law: lawlib.Law
    method: str
    huber_delta: float
    naive: bool
    select: str
    source: str
    param_names: list[str]  # public names, the order of `bootstrap` vectors
    ci95: dict[str, list[float]]
    bootstrap: np.ndarray  # (B, P) public values
    n_rows: int
    n_used: int
    dropped: list[int]
    objective: float
    rmse_log: float
    seed_noise: dict | None  # table.seed_noise: the log-RMSE floor set by replicate seeds
    holdout: dict | None
    optimizer: dict
    data_range: dict | None  # None for a fit.json without one (hand-written)
    model_floor: dict  # E + A/N^α at the table's N, the stable combination (docs/fit.md)
    rstar: dict  # each strategy's R* at the table's median cell
    regime_counts: dict[str, int]
    warnings: list[str]
    rows: pd.DataFrame | None = field(default=None, repr=False)  # None when read from fit.json

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
            "holdout": self.holdout,
            "optimizer": self.optimizer,
            "data_range": self.data_range,
            "bootstrap": self.bootstrap.tolist(),
            "bootstrap_params": list(self.param_names),
            "model_floor": self.model_floor,
            "rstar": self.rstar,
            "regime_counts": self.regime_counts,
            "naive": self.naive,
            "select": self.select,
            "source": self.source,
            "warnings": list(self.warnings),
            "seed_noise": self.seed_noise,
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
        missing = [k for k in lawlib.SHARED_PARAMS if k not in d["params"]]
        if missing:
            raise BadInput(
                f'{where}: "params" lacks {", ".join(missing)}; a fit has E, A, B, alpha and beta.'
            )
        try:
            law = lawlib.Law.from_dict({**d, "source": d.get("source") or where})
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"{where}: not a usable fit: {str(e).strip(chr(39))}.") from None
        _check_domain(law, where)
        names = [str(n) for n in d.get("bootstrap_params") or []]
        try:
            vectors = [
                [math.nan if x is None else float(x) for x in v] for v in d.get("bootstrap") or []
            ]
            bootstrap = np.array(vectors, dtype=float) if vectors else np.empty((0, len(names)))
            if bootstrap.ndim != 2:
                raise ValueError("ragged")
        except (TypeError, ValueError):
            raise BadInput(
                f'{where}: "bootstrap" must be a list of equally long lists of numbers.'
            ) from None
        return cls(
            law=law,
            method=str(d.get("method", "")),
            huber_delta=float(d.get("huber_delta") or math.nan),
            naive=bool(d.get("naive", False)),
            select=str(d.get("select", "")),
            source=str(d.get("source") or where),
            param_names=names,
            ci95=dict(d.get("ci95") or {}),
            bootstrap=bootstrap,
            n_rows=int(d.get("n_rows") or 0),
            n_used=int(d.get("n_used") or 0),
            dropped=list(d.get("dropped") or []),
            objective=float(d.get("objective") or math.nan),
            rmse_log=float(d.get("rmse_log") or math.nan),
            seed_noise=d.get("seed_noise"),
            holdout=d.get("holdout"),
            optimizer=dict(d.get("optimizer") or {}),
            data_range=d.get("data_range"),
            model_floor=dict(d.get("model_floor") or {}),
            rstar=dict(d.get("rstar") or {}),
            regime_counts=dict(d.get("regime_counts") or {}),
            warnings=list(d.get("warnings") or []),
        )

    @classmethod
    def read(cls, path: str | Path) -> FitResult:
        """Read a fit.json that `cdlaw fit` wrote; BadInput when it is not one."""
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BadInput(f"{path}: not a readable JSON fit file ({e}).") from None
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
        form, strategies = self.law.form, list(self.law.strategies)
        known = fitvec.fit_vector_names(form, strategies)
        unknown = [n for n in self.param_names if n not in known]
        if unknown:
            return [], [
                f"bootstrap parameter {unknown[0]!r} is not one of this {form} law's "
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
            if not all(math.isfinite(values[k]) for k in lawlib.SHARED_PARAMS):
                continue
            laws.append(
                fitvec.law_from_public_vector(
                    form, strategies, [values[n] for n in known], "bootstrap"
                )
            )
        return laws, []


def _check_domain(law: lawlib.Law, where: str) -> None:
    """Parameters a law can be planned with: finite, E ≥ 0, A, B > 0, exponents ≥ 0."""
    for name in lawlib.SHARED_PARAMS:
        value = getattr(law, name)
        if not math.isfinite(value):
            raise BadInput(f"{where}: parameter {name} is not a finite number.")
        if value < 0 or (name in ("A", "B") and value == 0):
            need = "≥ 0" if name in ("E", "alpha", "beta") else "> 0"
            raise BadInput(f"{where}: parameter {name} = {value:g} must be {need}.")
    for strategy, params in law.strategies.items():
        for name, value in params.items():
            if not math.isfinite(value):
                raise BadInput(f"{where}: parameter {strategy}.{name} is not a finite number.")
    if law.form != "chinchilla" and not law.strategies:
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
        if out.exists() and out.is_dir():
            raise BadInput(f"--out {out} is a folder; give a file name such as {out / 'fit.json'}")
        return out, out.with_name(out.stem + "_rows.parquet")
    if path.is_dir():
        return path / "fit.json", path / "fit_rows.parquet"
    return path.with_name(path.stem + ".fit.json"), path.with_name(path.stem + ".fit_rows.parquet")


def write_fit(result: FitResult, json_path: str | Path, rows_path: str | Path) -> None:
    """Write fit_rows.parquet, then fit.json (each atomically; fit.json last)."""
    from cdlaw.atomic import write_json_atomic, write_parquet_atomic

    write_parquet_atomic(rows_path, result.rows)
    write_json_atomic(json_path, result.to_dict())
