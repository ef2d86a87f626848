"""`cdlaw predict`: what one model, not trained, scores on each task."""

from __future__ import annotations

import typer

from cdlaw.cli import NUMBER, app, number, out, print_json


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
        "none", "--strategy", help="The strategy that made D′ (repetition, paraphrase, …)."
    ),
    law: str = typer.Option(
        None,
        "--law",
        help="A fit.json (or preset): the val-loss chains then take its loss at the model, "
        "and its bootstrap, as their step 1.",
    ),
    task: str = typer.Option(None, "--task", help="This task only (e.g. hellaswag)."),
    json_out: bool = typer.Option(False, "--json", help="Print only the JSON on stdout."),
) -> None:
    """Predict each task's accuracy of one model (N, D, D′, strategy) with its 95% band, by
    the predictor `cdlaw downstream` chose for the task, and say how far beyond the runs
    it extrapolates (docs/downstream.md). `cdlaw plan --link` predicts through the same path.

    Example: cdlaw predict --downstream runs/demo/downstream.json --n-params 7B --fresh-tokens 140B
    """
    from pathlib import Path

    from cdlaw.errors import BadInput
    from cdlaw.plan.source import load_law
    from cdlaw.plan.tasks import forecast_tasks, read_predictors

    if not Path(downstream).is_file():
        raise BadInput(
            f"--downstream {downstream} does not exist; write it with `cdlaw downstream RUNS`"
        )
    predictors = read_predictors(downstream, task)
    if not predictors:
        raise BadInput(
            f"{downstream} holds no task predictors{f' for {task!r}' if task else ''}; "
            "write it again with `cdlaw downstream RUNS` (accuracy columns get predictors)"
        )
    N = number(n_params, "--n-params")
    D = number(fresh_tokens, "--fresh-tokens")
    Dp = number(derived_tokens, "--derived-tokens")
    if N <= 0 or D <= 0 or Dp < 0:
        raise BadInput("--n-params and --fresh-tokens must be positive, --derived-tokens ≥ 0")
    source = load_law(law) if law else None
    forecasts = forecast_tasks(predictors, source, N, D, Dp, strategy.strip().lower())
    if json_out:
        print_json(
            {
                "n_params": N,
                "fresh_tokens": D,
                "derived_tokens": Dp,
                "strategy": strategy,
                "law": law,
                "tasks": [f.to_dict() for f in forecasts],
            }
        )
        return
    _render(forecasts, N, D, Dp)


def _render(forecasts, N, D, Dp) -> None:
    from rich import box
    from rich.table import Table

    from cdlaw.units import format_number

    t = Table(
        title=f"predicted at N {format_number(N)}, D {format_number(D)}, D′ {format_number(Dp)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for c in ("task", "metric", "predicted", "95% band", "by", "held-out err", "beyond runs"):
        t.add_column(
            c, justify="right" if c in ("predicted", "95% band", "held-out err") else "left"
        )
    for f in forecasts:
        band = f"{f.ci95[0]:.4f} – {f.ci95[1]:.4f}" if f.ci95 else "none"
        err = "-" if f.heldout_error is None else f"{f.heldout_error:.4f}"
        t.add_row(
            f.task, f.metric, f"{f.value:.4f}", band, f.predictor, err, f.beyond_runs or "within"
        )
    out.print(t)
    if forecasts:
        out.print(f"chosen by: {forecasts[0].chosen_by}", highlight=False)
