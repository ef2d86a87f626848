"""Files of a fit: where fit.json and fit_rows.parquet go, writing them, reading them back.

One job: the fit's file I/O — output_paths names the two files for a runs folder, a
table file or --out; write_fit writes them atomically (fit.json last); bootstrap_laws
turns a fit.json's bootstrap refits back into Laws for bands in plan and plot. The fit
itself lives in cdlaw.fit.procedure.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cdlaw import law as lawlib
from cdlaw.errors import BadInput

if TYPE_CHECKING:  # for the annotation only: cdlaw.fit.procedure imports this module, not the reverse
    from cdlaw.fit.procedure import FitResult


def bootstrap_laws(fit: dict) -> list[lawlib.Law]:
    """The bootstrap refits of a fit.json as Laws (for bands: plan, plot)."""
    names = fit.get("bootstrap_params") or []
    strategies = list((fit.get("strategies") or {}).keys())
    return [
        lawlib.law_from_public_vector(fit["law"], strategies, v)
        for v in fit.get("bootstrap") or []
        if len(v) == len(names)
    ]


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
