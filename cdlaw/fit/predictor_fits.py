"""What a task predictor's fit holds (cdlaw.fit.predictors fits them, cdlaw.fit.forecast
predicts with them): downstream.json "predictors"[], typed. Each to_dict() is its entry in
the file and from_dict reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cdlaw.fit.curves import EXP_DECAY, POWER_PARAMS, SIGMOID, Curve, power_nd

PREDICTORS = ("task-loss", "val-loss", "val-loss-exp", "direct")
# the predictors whose link levels off (a sigmoid, capped by its floor and height); the
# exponential link of val-loss-exp rises without limit as the loss falls
LEVELS_OFF = ("task-loss", "val-loss", "direct")
TIE_SE = 2.0  # held-out errors closer than this many standard errors of their difference tie
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
        form = str(d["form"])
        names = POWER_PARAMS if form == "power_nd" else CURVE_FORMS[form].params
        return cls(
            form,
            str(d["x"]),
            [float(d["params"][n]) for n in names],
            [[float(v) for v in b] for b in d.get("bootstrap") or []],
            {str(k): float(v) for k, v in (d.get("fixed") or {}).items()},
            None if d.get("ratio") is None else float(d["ratio"]),
        )


CURVE_FORMS: dict[str, Curve] = {"sigmoid": SIGMOID, "exp_decay": EXP_DECAY}


@dataclass(frozen=True)
class PredictorFit:
    """One predictor of one task: its step 1 (None for `direct`), its link (one per ratio
    for `direct`), its held-out error; `why_not` when it could not be fitted."""

    name: str
    step1: CurveFit | None = None
    links: tuple[CurveFit, ...] = ()
    heldout_error: float | None = None  # mean |predicted − observed| at the held-out size
    heldout_runs: int = 0
    # how far the held-out check extrapolated, in decades: log10 of the larger of its N
    # factor and its compute factor over the runs it was fitted to
    heldout_span: float | None = None
    why_not: str | None = None

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
        )


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
    chosen_by: str  # "held-out error at N = …" or why the default
    heldout_n: float | None  # the N held out, when the check was made
    n_max: float  # the largest N the predictors were fitted to
    flops_max: float  # the largest compute 6N(D + D′) among those runs
    n_runs: int  # final rows
    n_evals: int  # every evaluation, checkpoints included
    tasks: list[str] = field(default_factory=list)  # for the average: the tasks averaged

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
        )
