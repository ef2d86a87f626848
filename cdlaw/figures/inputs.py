"""What `cdlaw plot` and `cdlaw report` draw from: runs, fit, fit rows, metrics, frontier.

load_inputs(PATH) reads
- a runs folder (summary.parquet, fit.json, fit_rows.parquet, <run_id>/metrics.parquet),
- a fit.json (with the fit_rows.parquet written beside it, when present),
- a table of runs (CSV or parquet: a published table, or fit_rows.parquet) with the fit
  `cdlaw fit` wrote beside it (t.fit.json or fit.json), or one named with fit_path,
- a frontier JSON written by `cdlaw plan --frontier --json`,
with the task links `cdlaw downstream` wrote beside the runs (downstream.json), and fills in every per-run column the figures need (prepare_rows).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cdlaw.law import Law
from cdlaw.laws import LAWS
from cdlaw.strategies import NONE
from cdlaw.system.errors import BadInput

if TYPE_CHECKING:
    import pandas as pd

    from cdlaw.tasks.links import Downstream


@dataclass
class PlotInputs:
    """Everything a figure may draw from; absent parts are None (or empty)."""

    path: Path
    runs_dir: Path | None = None
    fit: dict | None = None  # fit.json as a dict
    fit_path: Path | None = None  # the file `fit` was read from; None for none, or one made here
    law: Law | None = None
    rows: pd.DataFrame | None = None  # one row per run, fit_rows columns (see prepare_rows)
    summary: pd.DataFrame | None = None  # summary.parquet, or the table of runs as given
    metrics: dict = field(default_factory=dict)  # run_id -> metrics DataFrame
    frontier: dict | None = None  # frontier JSON, or computed by cdlaw.plan.planner
    comparison: dict | None = None  # compare.json (`cdlaw compare`)
    comparison_rows: pd.DataFrame | None = None  # compare_rows.parquet
    # why the comparison is not of the runs as they are now (stale_fit); None: it is, or
    # there are no runs to check it against
    comparison_stale: str | None = None
    downstream: Downstream | None = None  # downstream.json: the task links
    # the runs as `cdlaw fit` reads them (load_runs), where they were read: to check a fit
    # or links beside them, or (cdlaw report) to fit them; None: not read
    runs: pd.DataFrame | None = None
    # the plan the frontier is for (cdlaw.plan.question): its U (None: the runs' largest
    # D, which the figure's title says) and a budget C marked on it (None: none)
    unique_tokens: float | None = None
    budget_flops: float | None = None

    @property
    def out_dir(self) -> Path:
        """Where figures go by default (figures_dir)."""
        return self.runs_dir / "figures" if self.runs_dir is not None else figures_dir(self.path)


# The files a runs folder holds under fixed names: their figures go to <runs>/figures.
RUNS_FOLDER_FILES = frozenset(
    (
        "fit.json",
        "fit_rows.parquet",
        "compare.json",
        "compare_rows.parquet",
        "summary.parquet",
        "downstream.json",
    )
)
# What `cdlaw fit` and `cdlaw compare` append to a table's stem (t.fit.json, t.compare.json).
TABLE_OUTPUT_SUFFIXES = (".fit_rows", ".compare_rows", ".fit", ".compare", ".downstream")


def figures_dir(path: Path) -> Path:
    """The default folder for the figures of an input file, named per table as `cdlaw fit`
    names its outputs: t.csv, t.fit.json and t.compare.json → t.figures/ beside them; a
    frontier f.json → f.figures/; a runs folder's own files (fit.json, …) → figures/ beside
    them, as for the runs folder itself. Two tables in one folder never share a folder."""
    if path.name in RUNS_FOLDER_FILES:
        return path.parent / "figures"
    stem = path.stem
    for suffix in TABLE_OUTPUT_SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
            break
    return path.with_name(stem + ".figures")


# ---------------------------------------------------------------------------------------
# Reading inputs
# ---------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:  # ValueError: not UTF-8 or JSON
        raise BadInput(
            f"{path} is not readable JSON ({' '.join(str(e).split())[:200]}); pass a fit.json "
            "or frontier JSON"
        ) from None
    if not isinstance(obj, dict):
        raise BadInput(f"{path} holds a JSON {type(obj).__name__}, not an object; pass a fit.json")
    return obj


def _law_from_fit(fit: dict, where: Path) -> Law:
    """The law of a fit.json, validated as `cdlaw plan` validates it (FitResult.from_dict);
    its source is the file's own "source", as written."""
    from dataclasses import replace

    from cdlaw.fit.io import FitResult

    law = FitResult.from_dict(fit, str(where)).law
    return replace(law, source=str(fit.get("source") or ""))


def read_table(path: Path):
    """A CSV or parquet table of runs with cdlaw's column names, read as `cdlaw fit` reads
    it (cdlaw.fit.columns.read_columns: the spellings of docs/files.md, 70M as a number)."""
    from cdlaw.fit.columns import read_columns
    from cdlaw.fit.columns import read_table as read_file

    return read_columns(read_file(path), str(path))


def _read_comparison(inputs: PlotInputs, path: Path, rows_path: Path) -> None:
    """compare.json and the left-out predictions beside it (`cdlaw compare`)."""
    import pandas as pd

    inputs.comparison = _read_json(path)
    if not rows_path.is_file():
        raise BadInput(f"{rows_path} is missing beside {path}; run `cdlaw compare` again")
    inputs.comparison_rows = pd.read_parquet(rows_path)


def _read_runs_summary(runs_dir: Path):
    """summary.parquet, or the result.json of every finished run when it is not built yet."""
    import pandas as pd

    summary = runs_dir / "summary.parquet"
    if summary.exists():
        return pd.read_parquet(summary)
    results = sorted(runs_dir.glob("*/result.json"))
    if results:
        return pd.DataFrame([json.loads(p.read_text()) for p in results])
    return None


def _read_metrics(runs_dir: Path) -> dict:
    import pandas as pd

    out = {}
    for p in sorted(runs_dir.glob("*/metrics.parquet")):
        try:
            out[p.parent.name] = pd.read_parquet(p)
        except (OSError, ValueError):
            continue  # a run being written right now; its curve will show next time
    return out


def _read_downstream(inputs: PlotInputs, path: Path) -> None:
    """The task links `cdlaw downstream` wrote beside the runs, when it has."""
    if path.is_file():
        from cdlaw.tasks.downstream_json import Downstream

        inputs.downstream = Downstream.read(path)


def is_naive(fit: dict | None) -> bool:
    """A `cdlaw fit --law chinchilla --naive` fit: derived tokens were counted as fresh (only
    a law that ignores derived tokens fits that way)."""
    form = LAWS.get(str((fit or {}).get("law")))
    return bool((fit or {}).get("naive")) and form is not None and not form.uses_derived


def prepare_rows(table, law: Law | None, fit: dict | None = None):
    """The table of runs with every column the figures use, computed where absent.

    Adds (keeping any already there, e.g. from fit_rows.parquet): row_id, tokens_trained,
    derived_ratio, tokens_per_param, predicted_loss, residual_log (log observed − log
    predicted), empirical_eta, regime, loss_one_epoch, loss_data_floor, loss_model_floor,
    derived_gain_share, used, heldout. Runs that did not finish (status ≠ done) or have
    no finite loss are left out.
    """
    import pandas as pd

    from cdlaw.fit.columns import finished
    from cdlaw.law import empirical_eta
    from cdlaw.regimes import classify

    df = table.copy()
    df = df[finished(df)]
    df = df[np.isfinite(pd.to_numeric(df["loss"], errors="coerce"))].reset_index(drop=True)
    for c in ("n_params", "fresh_tokens", "derived_tokens", "loss"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["strategy"] = df["strategy"].fillna(NONE).astype(str)
    N, D, Dp = (df[c].to_numpy() for c in ("n_params", "fresh_tokens", "derived_tokens"))
    if "row_id" not in df.columns:
        df["row_id"] = df["run_id"] if "run_id" in df.columns else np.arange(len(df))
    df["tokens_trained"] = D + Dp
    df["derived_ratio"] = Dp / D
    df["tokens_per_param"] = D / N

    if law is not None:
        n = len(df)
        cols = {
            c: np.full(n, np.nan)
            for c in (
                "predicted_loss",
                "loss_one_epoch",
                "loss_data_floor",
                "loss_model_floor",
                "derived_gain_share",
            )
        }
        regime = np.full(n, "", dtype=object)
        observed = df["loss"].to_numpy()
        for s in df["strategy"].unique():
            m = (df["strategy"] == s).to_numpy()
            try:
                # As fit_rows.parquet does: the run placed in the bands by its observed loss.
                t = classify(law, N[m], D[m], Dp[m], s, loss=observed[m])
                if is_naive(fit):  # a naive Chinchilla fit counts every token as fresh
                    predicted = law.loss(N[m], D[m] + Dp[m], 0.0, NONE)
                else:
                    predicted = law.loss(N[m], D[m], Dp[m], s)
            except KeyError:
                continue  # a strategy this law has no parameters for: no prediction
            cols["predicted_loss"][m] = predicted
            cols["loss_one_epoch"][m] = t.loss_one_epoch
            cols["loss_data_floor"][m] = t.loss_data_floor
            cols["loss_model_floor"][m] = t.loss_model_floor
            cols["derived_gain_share"][m] = t.derived_gain_share
            regime[m] = t.regime
        for c, v in cols.items():
            if c not in df.columns:
                df[c] = v
        if "regime" not in df.columns:
            df["regime"] = regime
        if "residual_log" not in df.columns:
            df["residual_log"] = np.log(df["loss"]) - np.log(df["predicted_loss"])
        if "empirical_eta" not in df.columns:
            df["empirical_eta"] = empirical_eta(law, N, D, Dp, df["loss"].to_numpy())
    if "heldout" not in df.columns:
        holdout = (fit or {}).get("holdout") or {}
        cut = holdout.get("n_params")
        df["heldout"] = (N >= float(cut)) if cut is not None else False
    if "used" not in df.columns:
        dropped = {str(x) for x in (fit or {}).get("dropped") or []}
        df["used"] = ~df["row_id"].astype(str).isin(dropped) & ~df["heldout"].astype(bool)
    df["heldout"] = df["heldout"].astype(bool)
    df["used"] = df["used"].astype(bool)
    return df


def fit_beside(path: Path) -> Path | None:
    """The fit found for PATH when none is named: a runs folder's fit.json; for a table
    t.csv, t.fit.json (what `cdlaw fit t.csv` writes) or the fit.json beside it."""
    if path.is_dir():
        return path / "fit.json" if (path / "fit.json").is_file() else None
    for candidate in (path.with_name(path.stem + ".fit.json"), path.parent / "fit.json"):
        if candidate.exists() and candidate != path:
            return candidate
    return None


def rows_of_fit(fit_path: Path) -> Path:
    """The fit_rows.parquet written with a fit.json, by `cdlaw fit`'s naming rule.

    fit.json → fit_rows.parquet; t.fit.json → t.fit_rows.parquet; X.json → X_rows.parquet.
    """
    name = fit_path.name
    if name == "fit.json":
        return fit_path.with_name("fit_rows.parquet")
    if name.endswith(".fit.json"):
        return fit_path.with_name(name[: -len(".fit.json")] + ".fit_rows.parquet")
    return fit_path.with_name(fit_path.stem + "_rows.parquet")


def _checked_paths(path: Path, fit_path: str | Path | None) -> Path | None:
    """Refuse a PATH or --fit that does not exist; return fit_path as a Path (or None)."""
    if not path.exists():
        raise BadInput(
            f"{path} does not exist; pass a runs folder, a fit.json, a CSV/parquet table or a frontier JSON"
        )
    fit_path = Path(fit_path) if fit_path is not None else None
    if fit_path is not None and not fit_path.is_file():
        raise BadInput(f"--fit {fit_path} does not exist; pass the fit.json `cdlaw fit` wrote")
    return fit_path


def _read_runs_folder(inputs: PlotInputs, path: Path, fit_path: Path | None):
    """A runs folder's comparison, summary and metrics into inputs; returns the fit to
    read (fit_path, or the fit.json beside the runs) and the runs table."""
    inputs.runs_dir = path
    if (path / "compare.json").is_file():
        _read_comparison(inputs, path / "compare.json", path / "compare_rows.parquet")
    inputs.summary = _read_runs_summary(path)
    inputs.metrics = _read_metrics(path)
    _read_downstream(inputs, path / "downstream.json")
    fit_path = fit_path or fit_beside(path)
    if inputs.summary is None and not inputs.metrics and fit_path is None:
        raise BadInput(
            f"{path} holds no runs (no summary.parquet, result.json or metrics.parquet) "
            "and no fit.json; pass a runs folder written by `cdlaw sweep`"
        )
    return fit_path, inputs.summary


def _read_frontier(inputs: PlotInputs, obj: dict, path: Path, fit_path: Path | None):
    """A frontier JSON into inputs; returns the fit to read: fit_path, or the fit.json it
    was planned with. A frontier planned with a law's parameters alone (no fit.json)
    gives inputs that law directly."""
    inputs.frontier = obj
    named = obj.get("law")
    if isinstance(named, str) and named.endswith(".json") and Path(named).is_file():
        return fit_path or Path(named)  # the fit the frontier was planned with
    if fit_path is None:
        law_dict = next((d for d in (obj.get("law_params"), named) if isinstance(d, dict)), None)
        if law_dict is not None and "params" in law_dict:
            src = law_dict.get("source") or ""
            if isinstance(named, str) and named not in src:
                src = f"{named} ({src})" if src else named
            inputs.fit = {**law_dict, "source": src}
            inputs.law = _law_from_fit(law_dict, path)
    return fit_path


def _read_fit(inputs: PlotInputs, fit_path: Path, table):
    """The fit.json and its law into inputs; returns the runs table, the fit's own rows
    where they exist (they carry what the fit did: cells reduced, used, held out)."""
    inputs.fit_path = fit_path
    inputs.fit = _read_json(fit_path)
    inputs.law = _law_from_fit(inputs.fit, fit_path)
    if rows_of_fit(fit_path).exists():
        return read_table(rows_of_fit(fit_path))
    return table


def _refuse_stale(inputs: PlotInputs, path: Path) -> None:
    """BadInput when the fit read (inputs.fit), or the task links read beside PATH, are not
    of PATH's runs as they are now (cdlaw.fit.cells.stale_fit, downstream_json.stale_links):
    a figure or report of them would show numbers of runs the folder no longer holds. A
    comparison of other runs is not drawn (inputs.comparison_stale says why)."""
    from cdlaw.fit.cells import stale_fit
    from cdlaw.fit.table import load_runs, prepare_runs
    from cdlaw.tasks.downstream_json import downstream_path, stale_links

    read = (inputs.fit, inputs.downstream, inputs.comparison)
    if all(x is None for x in read) or (path.is_dir() and not (path / "summary.parquet").is_file()):
        return
    # a table was read already (inputs.summary): prepared as it is, not read a second time
    table = inputs.summary if not path.is_dir() and inputs.summary is not None else None
    runs = inputs.runs = load_runs(path) if table is None else prepare_runs(table, str(path))
    if inputs.comparison is not None:
        inputs.comparison_stale = stale_fit(runs, inputs.comparison, path, "comparison")
    if inputs.fit is not None:
        why = stale_fit(runs, inputs.fit, path)
        if why is not None:
            raise BadInput(f"{inputs.fit_path}: {why}")
    if inputs.downstream is not None:
        why = stale_links(runs, inputs.downstream, downstream_path(path))
        if why is not None:
            raise BadInput(why)


def load_inputs(
    path: str | Path, fit_path: str | Path | None = None, need_fit: bool = True
) -> PlotInputs:
    """Read PATH (runs folder, fit.json, table, or frontier JSON) into PlotInputs.

    A table must have a fit (fit_path, or fit_beside) unless need_fit is False (`cdlaw
    report`, which fits one in memory)."""
    from cdlaw.fit.table import REQUIRED, TABLE_SUFFIXES

    path = Path(path)
    fit_path = _checked_paths(path, fit_path)
    inputs = PlotInputs(path=path)
    table = None

    if path.is_dir():
        fit_path, table = _read_runs_folder(inputs, path, fit_path)
    elif path.suffix.lower() == ".json":
        obj = _read_json(path)
        if "rows" in obj and "unique_tokens" in obj:
            fit_path = _read_frontier(inputs, obj, path, fit_path)
        elif "laws" in obj and "winner" in obj:  # compare.json
            rows = path.with_name(path.name.removesuffix(".json") + "_rows.parquet")
            _read_comparison(inputs, path, rows)
            return inputs
        elif "params" in obj:
            fit_path = fit_path or path
        else:
            raise BadInput(
                f"{path} is neither a fit.json (no 'params') nor a frontier JSON (no 'rows'); "
                "write one with `cdlaw fit` or `cdlaw plan --frontier --json`"
            )
    elif path.suffix.lower() in TABLE_SUFFIXES:
        table = inputs.summary = read_table(path)
        _read_downstream(inputs, path.with_name(path.stem + ".downstream.json"))
        compared = path.with_name(path.stem + ".compare.json")  # `cdlaw compare T.csv`
        if compared.is_file():
            _read_comparison(inputs, compared, path.with_name(path.stem + ".compare_rows.parquet"))
        fit_path = fit_path or fit_beside(path)
        if fit_path is None and need_fit:
            raise BadInput(
                f"no fit.json beside {path}; fit the table first (`cdlaw fit {path}`, with "
                "--law chinchilla if no run has derived tokens) or name the fit with --fit "
                "FIT.json"
            )
    else:
        raise BadInput(
            f"{path}: unknown input {path.suffix!r}; pass a runs folder, fit.json, "
            ".csv/.parquet table or frontier .json"
        )

    runs_read = table is not None
    if fit_path is not None:
        table = _read_fit(inputs, Path(fit_path), table)
    if runs_read:
        _refuse_stale(inputs, path)
    elif fit_path is not None and inputs.fit is not None:  # a fit.json named alone
        from cdlaw.fit.cells import stale_fit_file

        if (why := stale_fit_file(Path(fit_path), inputs.fit)) is not None:
            raise BadInput(why)  # as a plot of the runs beside it refuses it
    if table is not None and len(table):
        missing = [c for c in REQUIRED if c not in table.columns]
        if missing:
            raise BadInput(f"the runs table of {path} lacks column(s) {', '.join(missing)}")
        inputs.rows = prepare_rows(table, inputs.law, inputs.fit)
    return inputs
