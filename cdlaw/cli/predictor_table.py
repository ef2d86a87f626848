"""What `cdlaw downstream` prints of the task predictors (cdlaw.fit.predictors): per task,
each predictor's held-out error and the one chosen. Options parsed here too, so the
command itself stays one call."""

from __future__ import annotations

from cdlaw.cli import out
from cdlaw.errors import BadInput
from cdlaw.fit.downstream import PredictOptions
from cdlaw.fit.predictor_fits import PREDICTORS


def predict_options(holdout: bool, chance: list[str], average: str | None) -> PredictOptions:
    """The options from the command line; BadInput for a --chance that is not TASK=P."""
    given: dict[str, float] = {}
    for item in chance or []:
        name, eq, value = item.partition("=")
        try:
            p = float(value)
        except ValueError:
            p = float("nan")
        if not eq or not name.strip() or not 0 <= p < 1:
            raise BadInput(
                f"--chance {item!r} must be TASK=P with P in [0, 1), e.g. --chance hellaswag=0.25"
            )
        given[name.strip()] = p
    tasks = [t.strip() for t in average.split(",") if t.strip()] if average else None
    return PredictOptions(holdout, given, tasks)


def render_predictors(predictors) -> None:
    """One table: per accuracy, each predictor's held-out error (or why it has none), the
    chosen one; then one line saying how it was chosen."""
    if not predictors:
        return
    from rich import box
    from rich.table import Table

    held = next((tp.heldout_n for tp in predictors if tp.heldout_n), None)
    title = (
        f"task predictors: mean |error| on the runs of N = {held:.3g}, held out"
        if held
        else "task predictors (no held-out check: --holdout-largest makes one)"
    )
    t = Table(title=title, title_justify="left", box=box.SIMPLE, pad_edge=False)
    t.add_column("task")
    t.add_column("metric")
    t.add_column("chance", justify="right")
    for p in PREDICTORS:
        t.add_column(p, justify="right")
    t.add_column("chosen")
    for tp in predictors:
        cells = []
        for p in PREDICTORS:
            f = tp.fits[p]
            if not f.ok:
                cells.append("n/a")
            elif f.heldout_error is None:
                cells.append("fitted")
            else:
                cells.append(f"{f.heldout_error:.4f}")
        chance = "fitted" if tp.chance is None else f"{tp.chance:.3g}"
        t.add_row(tp.task, tp.metric, chance, *cells, tp.chosen or "none")
    out.print(t)
    chosen_by = {tp.chosen_by for tp in predictors}
    for by in sorted(chosen_by):
        out.print(f"chosen by {by}", highlight=False)
    reasons = {
        f"{p}: {tp.fits[p].why_not}" for tp in predictors for p in PREDICTORS if not tp.fits[p].ok
    }
    for r in sorted(reasons):
        out.print(f"n/a {r}", highlight=False)
