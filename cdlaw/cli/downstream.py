"""`cdlaw downstream`: what the loss buys per task, and whether every strategy buys it alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cdlaw.cli import app, err, out, print_json, say

if TYPE_CHECKING:
    from cdlaw.tasks.links import PredictOptions


@app.command()
def downstream(
    path: str = typer.Argument(..., metavar="RUNS_OR_TABLE", help="A runs folder (its summary.parquet) or a .csv/.parquet table of runs with task columns (task_TASK_METRIC)."),
    task: str = typer.Option(None, "--task", help="Fit this task only (its name, e.g. world_mc); default: every task."),
    bootstrap: int = typer.Option(200, "--bootstrap", help="Bootstrap refits of each link (runs resampled): its 95% band."),
    seed: int = typer.Option(0, "--seed", help="Seeds the bootstrap's resampling."),
    out_path: str = typer.Option(None, "--out", help="Where to write the links (default: RUNS/downstream.json, or T.downstream.json beside a table T.csv).", show_default=False),
    json_out: bool = typer.Option(False, "--json", help="Print only downstream.json on stdout."),
    holdout: bool = typer.Option(True, "--holdout/--no-holdout", help="Check each task's predictors on larger sizes (and longer runs) held out and choose one by it; --no-holdout: the bounded default, unchecked."),
    holdout_largest: bool = typer.Option(False, "--holdout-largest", hidden=True, help="The check, made by default."),
    chance: list[str] = typer.Option([], "--chance", help="A task's chance level, TASK=P (repeatable); known benchmarks' are built in."),
    average: str = typer.Option(None, "--average", help="Comma-separated tasks whose mean accuracy is predicted too (default: every acc task)."),
) -> None:  # fmt: skip
    """Fit, per task, the link from validation loss to the task's metric, and test whether the
    strategies' runs fall on one curve.

    Bits per byte get a shifted power law, accuracies the OLMo ladder's sigmoid; each link
    is fitted to every finished run, to each strategy's runs, and with one shift in loss
    per strategy, which an F test compares with the pooled curve (docs/downstream.md).
    Prints each link, its RMSE beside the seed noise, and the collapse verdict; writes
    downstream.json, which `cdlaw plot --kind downstream`, `cdlaw report` and `cdlaw plan
    --link` read, and its figure (RUNS/figures/downstream.png, or T.figures/ beside a table).

    Example: cdlaw downstream runs/demo --task world_mc
    """
    from cdlaw.cli.predictor_table import predict_options
    from cdlaw.system.atomic import check_out_path
    from cdlaw.system.errors import BadInput
    from cdlaw.tasks.downstream_json import downstream_path

    if bootstrap < 0:
        raise BadInput(f"--bootstrap {bootstrap} must be 0 or more refits")
    target = downstream_path(path, out_path)
    if out_path is not None:
        check_out_path(target, "--out", example="downstream.json")
    request = _Request(
        path, task, bootstrap, seed, target, out_path is None,
        predict_options(holdout or holdout_largest, chance, average, path),
    )  # fmt: skip
    result, runs = _fit(request)
    _show(result, json_out)
    figure = _write(result, runs, request)
    err.print(f"wrote {target} and {figure}", highlight=False)


@dataclass(frozen=True)
class _Request:
    """What `cdlaw downstream` was asked, checked."""

    path: str
    task: str | None
    bootstrap: int
    seed: int
    target: Path  # downstream.json
    figure_beside_runs: bool  # no --out: the figure goes where the runs' figures go
    predict: PredictOptions


def _fit(request: _Request):
    """The links of every task (fit_downstream) on the runs and their checkpoints; BadInput
    when no task can be linked. Returns (result, runs)."""
    from cdlaw.cli.runs_now import readable_runs
    from cdlaw.fit.checkpoints import with_checkpoints
    from cdlaw.fit.table import load_runs
    from cdlaw.sweep.summary import folder_warnings
    from cdlaw.system.errors import BadInput
    from cdlaw.tasks.links import fit_downstream

    path = request.path
    readable_runs(path)
    for w in folder_warnings(
        Path(path), "this link file", tasks=True
    ):  # of runs no longer as they were
        say("warning", w)
    runs = with_checkpoints(path, load_runs(path, checkpoints=True))
    result = fit_downstream(
        runs, request.task, request.bootstrap, request.seed, source=str(path),
        predict=request.predict,
    )  # fmt: skip
    if not result.links:
        why = "; ".join(f"{c}: {w}" for c, w in result.skipped.items())
        raise BadInput(f"no task of {path} can be linked to the loss ({why})")
    return result, runs


def _show(result, json_out: bool) -> None:
    """downstream.json on stdout, or the links' table and the predictors'."""
    from cdlaw.cli.predictor_table import render_predictors

    if json_out:
        print_json(result.to_dict())
    else:
        _render(result)
        render_predictors(result.predictors)


def _write(result, runs, request: _Request) -> Path:
    """Write downstream.json and its figure; returns the figure's path."""
    from cdlaw.figures.downstream import write_downstream_figure

    result.write(request.target)
    beside = request.path if request.figure_beside_runs else request.target
    return write_downstream_figure(result, runs, beside)


def _word(lk) -> str:
    """The collapse verdict in a word or two."""
    if not lk.follows_loss:
        return "no trend"
    if lk.collapse is None:
        return "-"
    if not lk.collapse.determined:
        return "undetermined"
    return "one curve" if lk.collapse.collapses else "differ"


def _render(result) -> None:
    """A table of links (fit against seed noise, collapse test), then each link with its
    numbers and its verdict in one sentence."""
    from cdlaw.cli.narrow_table import narrow_table

    # Each cell whole on one line, within 80 columns (a long task name is cut; the link's
    # form is in its equation below the table). A link is fitted to every evaluation:
    # each run's end and its checkpoints.
    rows = [
        [
            lk.task,
            lk.metric,
            str(lk.n_runs),
            f"{lk.rmse:.3g}",
            "-" if lk.seed_sd is None else f"{lk.seed_sd:.3g}",
            "-" if lk.collapse is None else f"{lk.collapse.f:.3g}",
            "-" if lk.collapse is None else f"{lk.collapse.p_value:.2g}",
            _word(lk),
        ]
        for lk in result.links
    ]
    headers = ["task", "metric", "evals", "RMSE", "seed sd", "F", "p", "strategies"]
    title = f"{result.n_runs} runs of {result.source}; strategies: {', '.join(result.strategies)}"
    table = narrow_table(headers, rows, left=(0, 1, 7), title=title, title_justify="left")
    out.print(table)
    import textwrap

    # The verdicts are sentences: wrapped between words at the console's width (80 on a
    # pipe), indented under their equation.
    width = max(out.width, 60)
    for lk in result.links:
        equation = f"{lk.column} = {lk.equation()}"
        if len(equation) > width:  # a long task name: the equation on a line of its own
            equation = f"{lk.column} =\n    {lk.equation()}"
        out.print(equation, highlight=False)
        for line in textwrap.wrap(lk.verdict(), width, initial_indent="  ",
                                  subsequent_indent="    "):  # fmt: skip
            out.print(line, highlight=False)
    for col, why in result.skipped.items():
        out.print(f"no link for {col}: {why}", highlight=False)
