"""`cdlaw predict`: what one model, not trained, scores on each task."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import NUMBER, app, number, out, print_json
from cdlaw.strategies import NONE


@app.command()
def predict(
    downstream: str = typer.Option(
        ...,
        "--downstream",
        help="A downstream.json from `cdlaw downstream` (its task predictors).",
    ),
    n_params: str = typer.Option(..., "--n-params", metavar=NUMBER, help="The model's N."),
    fresh_tokens: str = typer.Option(
        ..., "--fresh-tokens", metavar=NUMBER, help="Its fresh tokens D."
    ),
    derived_tokens: str = typer.Option(
        "0", "--derived-tokens", metavar=NUMBER, help="Its derived tokens D′ (default 0)."
    ),
    strategy: str = typer.Option(
        NONE, "--strategy", help="The strategy that made D′ (repetition, paraphrase, …)."
    ),
    law: str = typer.Option(
        None,
        "--law",
        help="A fit.json (or preset): the val-loss chains then take its loss at the model, "
        "and its bootstrap, as their step 1.",
    ),
    task: str = typer.Option(None, "--task", help="This task only (e.g. hellaswag)."),
    extrapolate: bool = typer.Option(
        False,
        "--extrapolate",
        help="With --law: take its loss at a model beyond the extrapolation limit of its "
        "fitted range (a warning instead of a refusal, as `cdlaw plan --extrapolate`).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print only the JSON on stdout."),
) -> None:
    """Predict each task's accuracy of one model (N, D, D′, strategy) with its 95% band, by
    the predictor `cdlaw downstream` chose for the task, and say how far beyond the runs
    it extrapolates (docs/downstream.md). `cdlaw plan --link` predicts through the same path.

    Example: cdlaw predict --downstream runs/demo/downstream.json --n-params 7B --fresh-tokens 140B
    """

    from cdlaw.cli import say
    from cdlaw.cli.runs_now import checked_law
    from cdlaw.system.errors import BadInput
    from cdlaw.tasks.downstream_json import Downstream
    from cdlaw.tasks.plan_metrics import forecast_tasks, task_predictors

    if not Path(downstream).is_file():
        raise BadInput(
            f"--downstream {downstream} does not exist; write it with `cdlaw downstream RUNS`"
        )
    links = Downstream.read(downstream)
    predictors = task_predictors(links, task)
    if not predictors:
        raise BadInput(
            f"{downstream} holds no task predictors{f' for {task!r}' if task else ''}; "
            "write it again with `cdlaw downstream RUNS` (accuracy columns get predictors)"
        )
    N, D, Dp = _model(n_params, fresh_tokens, derived_tokens)
    source = checked_law(law) if law else None
    strategy = _strategy(strategy, Dp, links.strategies, source)
    warnings = _warnings(downstream, links, source, (N, D, Dp, strategy), extrapolate)
    forecasts = forecast_tasks(predictors, source, N, D, Dp, strategy)
    warnings += _beyond(forecasts, links, (N, D, Dp, strategy), source)
    for w in warnings:
        say("warning", w)
    if json_out:
        print_json(
            {
                "n_params": N,
                "fresh_tokens": D,
                "derived_tokens": Dp,
                "strategy": strategy,
                "law": law,
                "tasks": [f.to_dict() for f in forecasts],
                "warnings": warnings,
            }
        )
        return
    _render(forecasts, N, D, Dp, strategy)


def _warnings(downstream: str, links, source, model: tuple, extrapolate: bool) -> list[str]:
    """Files older than the runs beside them first (their numbers are of other runs), then
    the law's guard on the model (N, D, D′, strategy)."""
    from cdlaw.cli.runs_now import links_of_other_runs, runs_now_warnings
    from cdlaw.plan.guard import check_model
    from cdlaw.tasks.downstream_json import stale_links_file

    links_stale = stale_links_file(Path(downstream), links)
    if links_stale is None:  # the runs are the ones linked: were they trained as they read now?
        links_stale = "; ".join(runs_now_warnings(downstream, "downstream.json", "this link file"))
    other = None if source is None else links_of_other_runs(source.name, downstream)
    stale = [links_stale, source and source.stale, other]
    warnings = [w for w in stale if w]
    if source is not None:
        n, d, dp, strategy = model
        warnings += check_model(source, "the model", n, d, dp, strategy, extrapolate)
    return warnings


def _beyond(forecasts, links, model: tuple, source) -> list[str]:
    """How far beyond its runs each forecast reads: without a law, every predictor against
    the limit (_far_beyond); with one, its guard spoke for the val-loss chains' N and
    compute, so only the others are held to the limit, and the chains' loss to the links'
    range (_loss_beyond)."""
    from cdlaw.tasks.plan_metrics import LAW_CHAINS

    if source is None:
        return _far_beyond(forecasts)
    own = [f for f in forecasts if f.predictor not in LAW_CHAINS]
    return _far_beyond(own, among=len(forecasts)) + _loss_beyond(forecasts, links, model, source)


def _loss_beyond(forecasts, links, model: tuple, source) -> list[str]:
    """The accuracies whose validation-loss chain reads the law's loss at the model beyond
    the losses the runs reached (loss_beyond_links), one warning naming them."""
    from cdlaw.strategies import NONE
    from cdlaw.tasks.columns import columns_text
    from cdlaw.tasks.plan_metrics import loss_beyond_links

    n, d, dp, strategy = model
    loss = float(source.law.loss(n, d, dp, strategy if dp else NONE))
    by: dict[str, list[str]] = {}
    for column, why in loss_beyond_links(forecasts, links.links, loss, "the model's").items():
        by.setdefault(why, []).append(column)
    return [f"{columns_text(cols, len(forecasts))}: {why}" for why, cols in by.items()]


def _far_beyond(forecasts, among: int | None = None) -> list[str]:
    """No guard refuses a model for the predictors that read N and compute (all of them
    without --law; with it, those that do not go through its loss): a warning when it lies
    beyond the limit a plan is held to, over the largest run they were fitted to. `among`:
    how many tasks there are in all, when `forecasts` are some of them (then named)."""
    from cdlaw.plan import EXTRAPOLATION_LIMIT
    from cdlaw.tasks.columns import columns_text

    far = max((max(f.n_factor, f.flops_factor) for f in forecasts), default=0.0)
    if far <= EXTRAPOLATION_LIMIT:
        return []
    which = ""
    if among is not None and len(forecasts) < among:
        names = [f"{f.task} {f.metric} ({f.predictor})" for f in forecasts]
        which = f"{columns_text(names, among)}: "
    return [
        f"{which}the model is {far:.3g}× the largest run in N or compute, beyond the "
        f"{EXTRAPOLATION_LIMIT:g}× limit `cdlaw plan` holds a plan to: the bands widen by "
        "the held-out error per decade, but no run tested the predictors' form this far out"
    ]


def _model(n_params: str, fresh_tokens: str, derived_tokens: str) -> tuple[float, float, float]:
    """(N, D, D′) from the command line: N and D positive, D′ ≥ 0 (BadInput otherwise)."""
    from cdlaw.system.errors import BadInput

    N = number(n_params, "--n-params")
    D = number(fresh_tokens, "--fresh-tokens")
    Dp = number(derived_tokens, "--derived-tokens")
    if N <= 0 or D <= 0 or Dp < 0:
        raise BadInput("--n-params and --fresh-tokens must be positive, --derived-tokens ≥ 0")
    return N, D, Dp


def _strategy(text: str, derived: float, runs: list[str], source) -> str:
    """--strategy checked: the strategy that made D′ > 0 (none for D′ = 0), one the
    downstream runs or the law know (BadInput otherwise)."""
    from cdlaw.system.errors import BadInput

    strategy = text.strip().lower()
    if derived == 0:
        return NONE
    if strategy == NONE:
        raise BadInput(
            f"--derived-tokens {derived:g} needs --strategy: how D′ was made "
            f"({', '.join(s for s in runs if s != NONE) or 'repetition, paraphrase, …'})"
        )
    known = set(runs) | (set(source.law.strategies) if source is not None else set())
    if strategy not in known or (source is not None and not source.law.knows_strategy(strategy)):
        have = ", ".join(sorted(known - {NONE})) or "none"
        raise BadInput(
            f"--strategy {strategy!r} is not a strategy of the runs"
            + (" or of the law" if source is not None else "")
            + f" ({have}); give one of those"
        )
    return strategy


def _said(text: str) -> None:
    """A sentence wrapped between words at the console's width."""
    import textwrap

    for line in textwrap.wrap(text, max(out.width, 60), subsequent_indent="  "):
        out.print(line, highlight=False)


def _render(forecasts, N, D, Dp, strategy: str) -> None:
    """A table, one row per task: the prediction (marked ! where the runs cannot support
    it, and why below), its band, the predictor, its held-out error and the predictors'
    spread there; then how each was chosen and how far beyond the runs each extrapolates
    (one line when every task says the same). Within 80 columns for the built-in tasks."""
    from cdlaw.cli.narrow_table import narrow_table
    from cdlaw.units import format_number

    out.print(
        f"predicted at N {format_number(N)}, D {format_number(D)}, D′ {format_number(Dp)}"
        + (f" ({strategy}):" if Dp else ":"),
        highlight=False,
    )
    held_out = any(f.heldout_error is not None for f in forecasts)
    spread = any(f.spread is not None for f in forecasts)
    rows = [
        [
            f"{f.task} {f.metric}",
            f"{f.value:.4f}" + ("!" if f.unsupported else " "),
            f"{f.ci95[0]:.4f} – {f.ci95[1]:.4f}" if f.ci95 else "no band",
            f.predictor,
            *(["-" if f.heldout_error is None else f"{f.heldout_error:.4f}"] if held_out else []),
            *(["-" if f.spread is None else f"{f.spread:.3f}"] if spread else []),
        ]
        for f in forecasts
    ]
    headers = [
        "task", "predicted", "95% band", "by",
        *(["held-out"] if held_out else []), *(["spread"] if spread else []),
    ]  # fmt: skip
    table = narrow_table(headers, rows, left=(0, 3))
    out.print(table)
    for f in forecasts:
        if f.unsupported:
            _said(
                f"! {f.task} {f.metric}: the runs cannot support this prediction: {f.unsupported}"
            )
    from cdlaw.cli.predictor_table import print_chosen_by

    print_chosen_by([(f"{f.task} {f.metric}", f.chosen_by) for f in forecasts])
    where: dict[str | None, list[str]] = {}
    for f in forecasts:
        where.setdefault(f.beyond_runs, []).append(f"{f.task} {f.metric}")
    for text, names in where.items():
        which = "" if len(where) == 1 else f" ({', '.join(names)})"
        line = (
            f"beyond the runs{which}: {text}"
            if text
            else f"within the runs{which}: N and compute inside those fitted"
        )
        out.print(line, highlight=False)
