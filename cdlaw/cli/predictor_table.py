"""What `cdlaw downstream` prints of the task predictors (cdlaw.fit.predictors): per task,
each predictor's held-out error and the one chosen. Options parsed here too, so the
command itself stays one call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdlaw.cli import out
from cdlaw.errors import BadInput

if TYPE_CHECKING:
    from cdlaw.fit.downstream import PredictOptions


def predict_options(holdout: bool, chance: list[str], average: str | None) -> PredictOptions:
    """The options from the command line; BadInput for a --chance that is not TASK=P."""
    from cdlaw.fit.downstream import PredictOptions  # scipy loads with the command only

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
    """One line per accuracy: each predictor's held-out error (n/a where it cannot be
    fitted, "fitted" without the check) and the one chosen; then how it was chosen and why
    any predictor is n/a. Plain lines, so long task names stay whole at any width."""
    if not predictors:
        return
    from cdlaw.fit.predictor_fits import PREDICTORS

    held = next((tp.heldout_n for tp in predictors if tp.heldout_n), None)
    out.print(
        f"task predictors, mean |error| on the runs of N = {held:.3g}, held out:"
        if held
        else "task predictors (no held-out check: --holdout-largest makes one):",
        highlight=False,
    )
    width = max(len(f"{tp.task} {tp.metric}") for tp in predictors)
    for tp in predictors:
        cells = []
        for p in PREDICTORS:
            f = tp.fits[p]
            e = f.heldout_error
            cells.append(f"{p} {'n/a' if not f.ok else 'fitted' if e is None else f'{e:.4f}'}")
        chance = "fitted" if tp.chance is None else f"{tp.chance:.3g}"
        name = f"{tp.task} {tp.metric}".ljust(width)
        out.print(
            f"  {name}  chance {chance:<6}  {', '.join(cells)}  -> {tp.chosen or 'none'}",
            highlight=False,
        )
    for by in sorted({tp.chosen_by for tp in predictors}):
        out.print(f"chosen by {by}", highlight=False)
    reasons = {
        f"{p}: {tp.fits[p].why_not}" for tp in predictors for p in PREDICTORS if not tp.fits[p].ok
    }
    for r in sorted(reasons):
        out.print(f"n/a {r}", highlight=False)
