"""What `cdlaw downstream` prints of the task predictors (cdlaw.fit.predictors): per task,
each predictor's held-out error and the one chosen. Options parsed here too, so the
command itself stays one call."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cdlaw.cli import out
from cdlaw.system.errors import BadInput

if TYPE_CHECKING:
    from cdlaw.tasks.links import PredictOptions


def predict_options(
    holdout: bool, chance: list[str], average: str | None, path: str = ""
) -> PredictOptions:
    """The options from the command line, with the chance levels of a runs folder's own
    task files (task_file_chance) where --chance gives none; BadInput for a --chance that
    is not TASK=P."""
    from cdlaw.tasks.links import PredictOptions  # scipy loads with the command only

    given: dict[str, float] = task_file_chance(path) if path else {}
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


def task_file_chance(path: str | Path) -> dict[str, float]:
    """{task: chance} of the .jsonl task files a runs folder's sweep.toml names in [eval]
    (relative paths read in the folder the sweep ran in, where its runs record it, else
    the current one): the mean over the items scored (eval.max_items) of 1/(their
    choices), 0 for a cloze. Files that cannot be read are left to the built-in names or a
    fitted floor."""
    import tomllib

    from cdlaw.sweep.summary import sweep_workdir
    from cdlaw.tasks.chance import chance_of_items
    from cdlaw.tasks.files import read_task_file

    sweep = Path(path) / "sweep.toml"
    if not sweep.is_file():
        return {}
    try:
        ev = tomllib.loads(sweep.read_text()).get("eval") or {}
    except (OSError, ValueError):
        return {}
    top = int(ev.get("max_items") or 0)
    root = sweep_workdir(Path(path)) or Path()
    out = {}
    for entry in ev.get("tasks") or []:
        if not str(entry).endswith(".jsonl"):
            continue
        try:
            task = read_task_file(root / Path(entry).expanduser())
        except (BadInput, OSError):
            continue
        out[task.name] = chance_of_items(task.items[:top] if top else task.items)
    return out


def render_predictors(predictors) -> None:
    """Two tables, one row per accuracy: each predictor's held-out error (n/a where it cannot
    be fitted, "fitted" without a check), the one chosen marked *, and the predictors'
    spread on the runs held out; then each task's noise and whether the runs can support a
    prediction. Then why each predictor was chosen, how many evaluations the links were
    fitted to and why any predictor is n/a. Within 80 columns for the built-in tasks."""
    if not predictors:
        return
    from cdlaw.cli.narrow_table import narrow_table
    from cdlaw.fit.predictor_fits import PREDICTORS

    checks: list[str] = next((tp.checks for tp in predictors if tp.checks), [])
    _say(
        f"task predictors: mean |error| on the runs held out ({'; '.join(checks)})"
        if checks
        else "task predictors (no held-out check: too few sizes and ratios to hold any out)"
    )
    rows = []
    for tp in predictors:
        cells = []
        for p in PREDICTORS:
            f = tp.fits[p]
            e = f.heldout_error
            value = "n/a" if not f.ok else "fitted" if e is None else f"{e:.4f}"
            cells.append(value + ("*" if p == tp.chosen else " "))
        chance = "fitted" if tp.chance is None else f"{tp.chance:.3g}"
        spread = "-" if tp.spread is None else f"{tp.spread:.3f}"
        rows.append([f"{tp.task} {tp.metric}", chance, *cells, spread])
    out.print(narrow_table(["task", "chance", *PREDICTORS, "spread"], rows))
    _render_noise(predictors)
    print_chosen_by([(f"{tp.task} {tp.metric}", tp.chosen_by) for tp in predictors], "* ")
    runs, evals = max(tp.n_runs for tp in predictors), max(tp.n_evals for tp in predictors)
    kept = ", checkpoints included" if evals > runs else "; no checkpoint rows"
    out.print(f"links (step 2) fitted to {evals} evaluations of {runs} runs{kept}", highlight=False)
    reasons: dict[tuple[str, str], list[str]] = {}
    for tp in predictors:
        for p in PREDICTORS:
            if not tp.fits[p].ok:
                reasons.setdefault((p, tp.fits[p].why_not), []).append(f"{tp.task} {tp.metric}")
    for (p, why), names in sorted(reasons.items()):
        which = "every task" if len(names) == len(predictors) > 1 else ", ".join(names)
        out.print(f"n/a {p} ({which}): {why}", highlight=False)


def _render_noise(predictors) -> None:
    """Each task's noise (cdlaw.fit.task_noise): its sd and what it was measured from, the
    items its accuracy counts, the final runs' rise and the rise over the noise, and "no"
    where the runs cannot support a prediction."""
    from cdlaw.cli.narrow_table import narrow_table
    from cdlaw.fit.task_noise import MIN_SNR

    rows = []
    for tp in predictors:
        n = tp.noise
        if n is None:
            continue
        rows.append([
            f"{tp.task} {tp.metric}",
            "-" if n.sd is None else f"{n.sd:.4f}",
            n.source if n.sd is not None else "-",
            "-" if n.items is None else str(n.items),
            f"{n.signal:.3f}",
            "-" if n.snr is None else f"{n.snr:.3g}",
            "yes" if n.supported else "no",
        ])  # fmt: skip
    if not rows:
        return
    _say(
        "noise: step to step at the end of runs (or between seeds); a rise over the runs of "
        f"under {MIN_SNR:g}× it cannot support a prediction"
    )
    headers = ["task", "noise", "from", "items", "rise", "rise/noise", "supported"]
    out.print(narrow_table(headers, rows, left=(0, 2, 6)))


def _say(text: str) -> None:
    """A sentence wrapped between words at the console's width."""
    import textwrap

    for line in textwrap.wrap(text, max(out.width, 60), subsequent_indent="  "):
        out.print(line, highlight=False)


def print_chosen_by(rows: list[tuple[str, str]], mark: str = "") -> None:
    """How each row's predictor was chosen, one wrapped line per way: the way most rows
    share alone, every other way with the rows it applies to, so that no line leaves the
    reader to guess which tasks it is about. `rows`: (task metric, chosen_by)."""
    import textwrap

    ways: dict[str, list[str]] = {}
    for name, by in rows:
        ways.setdefault(by, []).append(name)
    common = max(ways, key=lambda by: len(ways[by]))
    for by, names in sorted(ways.items()):
        which = "" if by == common else f" ({', '.join(names)})"
        text = f"{mark}chosen by {by}{which}"
        for line in textwrap.wrap(text, max(out.width, 60), subsequent_indent="  "):
            out.print(line, highlight=False)
