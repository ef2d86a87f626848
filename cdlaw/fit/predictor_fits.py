"""What a task predictor's fit holds (cdlaw.fit.predictors fits them, cdlaw.fit.forecast
predicts with them): downstream.json "predictors"[], typed. Each to_dict() is its entry in
the file and from_dict reads it back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cdlaw.fit.curves import CURVES, POWER_PARAMS, power_nd
from cdlaw.fit.task_noise import TaskNoise

PREDICTORS = ("task-loss", "val-loss", "val-loss-exp", "direct")
# the bounded default, in order: the OLMo ladder's two steps through the task's own loss,
# else through the validation loss, else the direct fit (val-loss-exp is never the default)
DEFAULTS = ("task-loss", "val-loss", "direct")
RATIO_TOL = 0.1  # runs within 10% of a ratio of tokens per parameter share a direct fit
AVERAGE = "average"


# ---------------------------------------------------------------------------------------
# What a fit holds
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CurveFit:
    """One fitted curve and its bootstrap refits, in its form's parameter order."""

    form: str  # power_nd | sigmoid | exp_decay
    x: str  # what it is a function of: "N, D" | "loss" | a bpb column | "log10_flops"
    theta: list[float]
    bootstrap: list[list[float]]
    fixed: dict[str, float] = field(default_factory=dict)  # parameters held (the floor)
    ratio: float | None = None  # direct fits: the tokens per parameter of their runs

    @property
    def params(self) -> tuple[str, ...]:
        return POWER_PARAMS if self.form == "power_nd" else CURVE_FORMS[self.form].params

    def values(self, theta: np.ndarray, x) -> np.ndarray:
        """The curve for each row of theta (B, P) at x ((N, D) for power_nd): (B, n)."""
        if self.form == "power_nd":
            return power_nd(theta, x[0], x[1])
        return CURVE_FORMS[self.form].f(theta, np.atleast_1d(np.asarray(x, float)))

    def to_dict(self) -> dict:
        return {
            "form": self.form,
            "x": self.x,
            "params": dict(zip(self.params, self.theta, strict=True)),
            "fixed": self.fixed,
            "ratio": self.ratio,
            "bootstrap": self.bootstrap,
        }

    @classmethod
    def from_dict(cls, d: dict) -> CurveFit:
        """The curve of a downstream.json; ValueError for a link that could print an
        accuracy above 1 or below 0 (out_of_bounds)."""
        form = str(d["form"])
        names = POWER_PARAMS if form == "power_nd" else CURVE_FORMS[form].params
        c = cls(
            form,
            str(d["x"]),
            [float(d["params"][n]) for n in names],
            [[float(v) for v in b] for b in d.get("bootstrap") or []],
            {str(k): float(v) for k, v in (d.get("fixed") or {}).items()},
            None if d.get("ratio") is None else float(d["ratio"]),
        )
        for theta in [c.theta, *c.bootstrap]:
            if why := out_of_bounds(form, theta):
                raise ValueError(f"a {form} link {why}: refused")
        return c


CURVE_FORMS = CURVES


def out_of_bounds(form: str, theta) -> str | None:
    """Why a link's parameters let it leave [0, 1] (its floor below 0, its ceiling above 1),
    or None: a sigmoid's floor b and ceiling a + b, the capped exponential's floor 1 − ε and
    its share s of ε regained at its lowest loss, the direct fit's floor b. Every link is
    fitted inside these bounds; one read from a file is checked against them."""
    t = [float(v) for v in theta]
    tol = 1e-9
    if form == "sigmoid":
        a, b = t[0], t[3]
        lo, hi = min(b, a + b), max(b, a + b)
    elif form == "exp_decay":
        eps, share = t[0], t[1]
        if not -tol <= share <= 1 + tol:
            return f"regains a share {share:.4g} of its error at its lowest loss, outside [0, 1]"
        lo, hi = 1.0 - eps, 1.0 - eps + eps * share
    elif form == "logacc_power":
        lo, hi = t[2], 1.0
    else:
        return None
    if lo < -tol or hi > 1 + tol:
        return f"spans accuracies {lo:.4g} to {hi:.4g}, beyond [0, 1]"
    return None


@dataclass(frozen=True)
class PredictorFit:
    """One predictor of one task: its step 1 (None for `direct`), its link (one per ratio
    for `direct`), its held-out error; `why_not` when it could not be fitted."""

    name: str
    step1: CurveFit | None = None
    links: tuple[CurveFit, ...] = ()
    heldout_error: float | None = None  # mean |predicted − observed| at the held-out size
    heldout_runs: int = 0
    # how far the held-out checks extrapolated, in decades: log10 of the larger of the N
    # factor and the compute factor over the runs fitted, the largest over the checks
    heldout_span: float | None = None
    why_not: str | None = None
    # each held-out check: {"held_out": what it held out, "error", "runs", "span"}
    checks: tuple[dict, ...] = ()

    @property
    def per_decade(self) -> float | None:
        """The held-out error per decade of extrapolation, the largest over the checks: how
        fast the form's error grew beyond the runs it was fitted to."""
        rates = [
            c["error"] / c["span"]
            for c in self.checks
            if c["span"] > 0 and c["error"] == c["error"]
        ]  # NaN: a check where it could not predict
        if rates:
            return max(rates)
        if self.heldout_error and self.heldout_span:
            return self.heldout_error / self.heldout_span
        return None

    @property
    def ok(self) -> bool:
        return self.why_not is None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "step1": None if self.step1 is None else self.step1.to_dict(),
            "links": [c.to_dict() for c in self.links],
            "heldout_error": self.heldout_error,
            "heldout_runs": self.heldout_runs,
            "heldout_span": self.heldout_span,
            "why_not": self.why_not,
            "checks": list(self.checks),
        }

    @classmethod
    def from_dict(cls, d: dict) -> PredictorFit:
        return cls(
            str(d["name"]),
            None if d.get("step1") is None else CurveFit.from_dict(d["step1"]),
            tuple(CurveFit.from_dict(c) for c in d.get("links") or []),
            None if d.get("heldout_error") is None else float(d["heldout_error"]),
            int(d.get("heldout_runs") or 0),
            None if d.get("heldout_span") is None else float(d["heldout_span"]),
            d.get("why_not"),
            tuple(_check_of(c) for c in d.get("checks") or []),
        )


def _check_of(c: dict) -> dict:
    """One held-out check of a predictor, from downstream.json."""
    return {
        "held_out": str(c["held_out"]),
        "error": math.nan if c.get("error") is None else float(c["error"]),
        "runs": int(c["runs"]),
        "span": float(c["span"]),
    }


@dataclass(frozen=True)
class TaskPredictors:
    """Every predictor of one accuracy column, and which one predicts. downstream.json
    "predictors"[]."""

    column: str  # task_<task>_<metric>, or average_acc
    task: str
    metric: str
    chance: float | None  # the sigmoid's floor; None: fitted
    fits: dict[str, PredictorFit]
    chosen: str | None  # the predictor forecasts use
    chosen_by: str  # why: better beyond the noise on the checks, or the bounded default
    heldout_n: float | None  # the largest N, held out by the first check (None: no check)
    n_max: float  # the largest N the predictors were fitted to
    flops_max: float  # the largest compute 6N(D + D′) among those runs
    n_runs: int  # final rows
    n_evals: int  # every evaluation, checkpoints included
    tasks: list[str] = field(default_factory=list)  # for the average: the tasks averaged
    noise: TaskNoise | None = None  # the metric's noise (cdlaw.fit.task_noise)
    checks: list[str] = field(default_factory=list)  # each held-out check, in words
    # the predictors' disagreement on the runs held out: the mean over those runs of the
    # largest minus the smallest prediction of the chosen predictor and the credible others
    # (cdlaw.fit.predictor_choice.credible); None: no check, or one credible predictor
    spread: float | None = None

    def to_dict(self) -> dict:
        return {
            "column": self.column,
            "task": self.task,
            "metric": self.metric,
            "chance": self.chance,
            "chosen": self.chosen,
            "chosen_by": self.chosen_by,
            "heldout_n": self.heldout_n,
            "n_max": self.n_max,
            "flops_max": self.flops_max,
            "n_runs": self.n_runs,
            "n_evals": self.n_evals,
            "tasks": self.tasks,
            "noise": None if self.noise is None else self.noise.to_dict(),
            "checks": self.checks,
            "spread": self.spread,
            "fits": {k: f.to_dict() for k, f in self.fits.items()},
        }

    @classmethod
    def from_dict(cls, d: dict) -> TaskPredictors:
        return cls(
            str(d["column"]),
            str(d["task"]),
            str(d["metric"]),
            None if d.get("chance") is None else float(d["chance"]),
            {k: PredictorFit.from_dict(f) for k, f in (d.get("fits") or {}).items()},
            d.get("chosen"),
            str(d.get("chosen_by") or ""),
            None if d.get("heldout_n") is None else float(d["heldout_n"]),
            float(d["n_max"]),
            float(d["flops_max"]),
            int(d.get("n_runs") or 0),
            int(d.get("n_evals") or 0),
            [str(t) for t in d.get("tasks") or []],
            None if not d.get("noise") else TaskNoise.from_dict(d["noise"]),
            [str(c) for c in d.get("checks") or []],
            None if d.get("spread") is None else float(d["spread"]),
        )
