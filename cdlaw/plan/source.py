"""Where a plan's law comes from: a preset name or a fit.json, with its bootstrap laws.

This module's one job is to turn what `--law` names (a preset such as `qin2026`, or the path
of a fit.json written by `cdlaw fit`) into the PlanningLaw that cdlaw.plan.planner plans with: the
law itself, the data range it was fitted on (so a plan can say when it extrapolates), and
the fit's bootstrap samples read back as laws (the plan's 95% band), with a note when they
cannot be used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cdlaw.fit.cells import stale_fit_file
from cdlaw.fit.findings import DataRange
from cdlaw.fit.io import FitResult
from cdlaw.law import PRESETS, Law
from cdlaw.system.atomic import check_out_path
from cdlaw.system.errors import BadInput

# The range each published law was fitted on, where the paper states it, so a plan can
# say when it extrapolates (the same check a fit.json's "data_range" gives).
PRESET_DATA_RANGE = {
    # Hoffmann et al. 2022, §3: "over 400 language models ranging from 70 million to over
    # 16 billion parameters"; Besiroglu et al. 2024 refit the same runs.
    "chinchilla-hoffmann": DataRange(n_params=(70e6, 16e9)),
    "chinchilla-besiroglu": DataRange(n_params=(70e6, 16e9)),
    # The CD paper's named sizes, 14M to 600M (docs/names.md).
    "qin2026": DataRange(n_params=(14e6, 600e6)),
}


# ---------------------------------------------------------------------------------------
# Where a law comes from: a preset or a fit.json (with its data range and bootstrap).
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanningLaw:
    """A law plus what its fit knows beyond the point estimate."""

    name: str  # preset name or fit.json path
    law: Law
    data_range: DataRange | None = None  # what it was fitted on; None: unknown
    bootstrap: tuple[Law, ...] = ()  # one law per bootstrap sample: the 95% band
    notes: tuple[str, ...] = ()  # why there is no band, if the fit has samples we cannot use
    at_bound: tuple[str, ...] = ()  # the fit's parameters at a bound: what the runs left open
    stale: str | None = None  # why the fit.json is not of the runs beside it as they are now
    # `cdlaw compare`'s compare.json of the same runs, beside the fit (cdlaw.plan.laws), and
    # its path; None where there is none
    comparison: dict | None = None
    comparison_path: str | None = None

    def why_no_band(self) -> str | None:
        """Why a plan under this law has no 95% band, as a clause naming the fix; None when
        it has bootstrap refits to score the plan under."""
        if len(self.bootstrap) >= 2:
            return None
        if self.name in PRESETS:
            return "a preset carries no bootstrap refits; fit a table with `cdlaw fit` for one"
        if self.notes:
            return "the fit's bootstrap refits cannot be read (see the warning)"
        return (
            "the fit has no bootstrap refits; refit without --bootstrap 0 for one "
            "(`cdlaw fit` makes 200 by default)"
        )

    @classmethod
    def of_fit(cls, fit: FitResult, name: str | None = None) -> PlanningLaw:
        """A fit as the planner uses it: the law, its data range, its bootstrap laws and
        the parameters its search left at a bound (the plan warns of its strategy's)."""
        samples, notes = fit.bootstrap_laws()
        at_bound = fit.optimizer.at_bound if fit.optimizer is not None else ()
        name = name or fit.source or "fit"
        return cls(name, fit.law, fit.data_range, tuple(samples), tuple(notes), at_bound)


def load_law(spec: str, check_runs: bool = True) -> PlanningLaw:
    """A preset name (`qin2026`, ...) or the path of a fit.json written by `cdlaw fit`;
    `stale` says when that fit is not of the runs beside it as they are now (unless not
    check_runs: a caller that has refused a stale fit already)."""
    if spec in PRESETS:
        return PlanningLaw(spec, PRESETS[spec], PRESET_DATA_RANGE.get(spec))
    path = Path(spec)
    if not path.is_file():
        valid = ", ".join(PRESETS)
        if path.suffix == ".json" or "/" in spec or path.exists():
            raise BadInput(
                f"--law {spec}: no such fit file; pass the fit.json that `cdlaw fit` wrote "
                f"or a preset ({valid})."
            )
        raise BadInput(f"--law {spec!r} is not a preset ({valid}) nor an existing fit.json path.")
    fit = FitResult.read(path)
    stale = stale_fit_file(path, fit.to_dict()) if check_runs else None
    comparison, where = comparison_beside(path)
    return replace(
        PlanningLaw.of_fit(fit, str(path)),
        stale=stale,
        comparison=comparison,
        comparison_path=where,
    )


def comparison_beside(fit_json: Path) -> tuple[dict | None, str | None]:
    """The compare.json `cdlaw compare` wrote for the runs a fit.json sits beside (the runs
    folder's compare.json, t.compare.json beside t.fit.json), read; (None, None) where there
    is none or it cannot be read."""
    import json

    from cdlaw.fit.table import runs_beside

    runs = runs_beside(fit_json, "fit.json")
    if runs is None:
        return None, None
    path = comparison_outputs(runs)[0]
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, None
    return (
        (d, str(path)) if isinstance(d, dict) and isinstance(d.get("laws"), list) else (None, None)
    )


def as_planning_law(law: Law) -> PlanningLaw:
    """A bare Law: a preset keeps its name and published range; any other is just itself."""
    preset = next((name for name, p in PRESETS.items() if p == law), None)
    return load_law(preset) if preset else PlanningLaw(law.source or law.form, law)


def with_fitted_range(
    law: Law, fit: dict | None, name: str, bootstrap: bool = False
) -> PlanningLaw:
    """A law with the data range a fit.json's dict records (`data_range`, with the runs'
    vocabulary), and with `bootstrap` its bootstrap laws too (a plan's band and valley):
    what a figure or a report plans with, under the same extrapolation limit as `cdlaw
    plan`. A law without a fit gets a preset's range or none."""
    fitted = (fit or {}).get("data_range")
    if fitted is None:
        return as_planning_law(law)
    samples: list[Law] = []
    if bootstrap and fit and fit.get("bootstrap"):
        try:
            samples, _ = FitResult.from_dict(fit, name).bootstrap_laws()
        except BadInput:  # a hand-written fit whose refits cannot be read: no band
            samples = []
    return PlanningLaw(name, law, DataRange.from_dict(fitted, name), tuple(samples))


def comparison_outputs(path: str | Path, out: str | Path | None = None) -> tuple[Path, Path]:
    """Where a comparison of PATH is written: <runs>/compare.json (+ compare_rows.parquet),
    t.compare.json beside a table t.csv, or --out X.json (+ X_rows.parquet)."""
    path = Path(path)
    if out is not None:
        out = Path(out)
        if out.suffix.lower() != ".json" or out.is_dir():
            raise BadInput(f"--out must name a .json file (compare.json), not {str(out)!r}")
        check_out_path(out, "--out")
        return out, out.with_name(out.stem + "_rows.parquet")
    if path.is_dir():
        return path / "compare.json", path / "compare_rows.parquet"
    stem = path.with_name(path.stem)
    return Path(f"{stem}.compare.json"), Path(f"{stem}.compare_rows.parquet")
