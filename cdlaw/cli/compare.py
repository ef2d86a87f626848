"""`cdlaw compare`: fit every law to the same runs and rank them by held-out error (docs/fit.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import NUMBER, app, count, err, number, out, print_json, say
from cdlaw.cli.plan import EXTRAPOLATE
from cdlaw.cli.plan_words import say_extrapolated


@app.command()
def compare(
    path: str = typer.Argument(
        ..., metavar="PATH", help="A runs folder (its summary.parquet) or a .csv/.parquet table."
    ),
    law: str = typer.Option(
        "all", "--law", help="Laws to compare, comma-separated (e.g. cd,cd-overfit), or all."
    ),
    huber_delta: float = typer.Option(
        0.1, "--huber-delta", help="One Huber δ on log residuals for every law."
    ),
    select: str = typer.Option(
        "mean", "--select", help="Runs differing only in lr/weight_decay/seed: min | mean | none."
    ),
    starts: str = typer.Option(
        "512",
        "--starts",
        metavar=NUMBER,
        help="Starts of each full fit's grid (each left-out refit: 64 + its optimum).",
    ),
    budget_flops: str = typer.Option(
        None,
        "--budget-flops",
        metavar=NUMBER,
        help="Also plan this budget with every law (e.g. 2e12).",
    ),
    unique_tokens: str = typer.Option(
        None,
        "--unique-tokens",
        metavar=NUMBER,
        help="Unique tokens for the plans, e.g. 96K (default: unlimited).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the start-grid samples."),
    extrapolate: bool = EXTRAPOLATE,
    out_path: str = typer.Option(
        None, "--out", help="FILE.json to write; the rows go to FILE_rows.parquet beside it."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print only compare.json on stdout."),
) -> None:
    """Fit every law to the same rows and rank them by how well they predict unseen runs.

    Per law: in-sample log-RMSE, the Huber objective, AIC/BIC, the log-RMSE of the
    largest model size predicted by a fit without it (the winner is the lowest), the
    leave-one-size-out log-RMSE, and with --budget-flops each law's plan. Writes
    compare.json and compare_rows.parquet (each left-out row, predicted by each law).
    `cdlaw fit PATH --law all` does the same.

    Example: cdlaw compare runs/demo --budget-flops 2e12 --unique-tokens 96K
    """
    run_comparison(
        path,
        law=law,
        huber_delta=huber_delta,
        select=select,
        starts=starts,
        budget_flops=budget_flops,
        unique_tokens=unique_tokens,
        seed=seed,
        out_path=out_path,
        json_out=json_out,
        extrapolate=extrapolate,
    )


def run_comparison(
    path: str,
    *,
    law: str,
    huber_delta: float,
    select: str,
    starts: str,
    seed: int,
    out_path: str | None,
    json_out: bool,
    budget_flops: str | None = None,
    unique_tokens: str | None = None,
    extrapolate: bool = False,
) -> None:
    """Compare the laws of `law` ("all" or comma-separated names) on PATH, show the result
    (the tables, or compare.json with json_out) and write compare.json; the options are
    `cdlaw compare`'s, as typed (numbers as text), shared with `cdlaw fit --law all`."""
    from cdlaw.plan.compare import compare_and_write
    from cdlaw.system.errors import BadInput

    n_starts = count(starts, "--starts")
    laws = None if law == "all" else tuple(x.strip() for x in law.split(",") if x.strip())
    from cdlaw.plan.requests import positive

    budget = None if budget_flops is None else number(budget_flops, "--budget-flops")
    unique = None if unique_tokens is None else number(unique_tokens, "--unique-tokens")
    budget = None if budget is None else positive(budget, "--budget-flops")
    unique = None if unique is None else positive(unique, "--unique-tokens")
    if unique is not None and budget is None:
        raise BadInput("--unique-tokens goes with --budget-flops: give the budget to plan")

    from cdlaw.cli.runs_now import readable_runs
    from cdlaw.sweep.summary import folder_warnings

    readable_runs(path)
    for w in folder_warnings(Path(path), "this comparison"):  # of runs no longer as they were
        say("warning", w)

    def show(comparison) -> None:
        if json_out:
            print_json(comparison.to_dict())
        else:
            _render(comparison)

    _, json_path, rows_path = compare_and_write(
        path,
        out=out_path,
        before_write=show,
        laws=laws,
        huber_delta=huber_delta,
        n_starts=n_starts,
        select=select,
        seed=seed,
        budget_flops=budget,
        unique_tokens=unique,
        extrapolate=extrapolate,
    )
    err.print(f"wrote {json_path} and {rows_path}", highlight=False)


def _render(comparison) -> None:
    """Two tables that each fit an 80-column terminal: how well each law fits and predicts
    (best held-out first), then, with a budget, what each law would train."""
    from rich import box
    from rich.table import Table

    from cdlaw.plan.guard import extrapolated_text
    from cdlaw.units import format_number as fmt

    scores = sorted(comparison.scores, key=lambda s: s.heldout_rmse_log)
    fits = Table(
        title=f"{comparison.n_rows} rows, Huber δ {comparison.huber_delta:g}",
        title_justify="left",
        box=box.SIMPLE,
        caption="held out: the largest size; LOSO: leave one size out (log-RMSE)",
        caption_justify="left",
        pad_edge=False,
    )
    for c in ("law", "k", "log-RMSE", "objective", "AIC", "BIC", "held out", "LOSO"):
        fits.add_column(c, justify="left" if c == "law" else "right")
    for s in scores:
        fits.add_row(s.law, str(s.n_params), f"{s.rmse_log:.4f}", f"{s.objective:.4g}",
                     f"{s.aic:.1f}", f"{s.bic:.1f}", f"{s.heldout_rmse_log:.4f}",
                     f"{s.loso_rmse_log:.4f}")  # fmt: skip
    out.print(fits)
    if not any(s.plan for s in scores):
        return
    plans = Table(title="each law's plan", title_justify="left", box=box.SIMPLE, pad_edge=False)
    for c in ("law", "N", "strategy", "D′", "uses", "predicted loss"):
        plans.add_column(c, justify="left" if c in ("law", "strategy") else "right")
    for s in scores:
        p = s.plan or {}
        if p.get("beyond_limit"):
            plans.add_row(s.law, "-", "beyond the limit (below)", "", "", "")
        elif "error" in p:
            plans.add_row(s.law, "-", p["error"], "", "", "")
        elif p:
            plans.add_row(s.law, fmt(p["n_params"]), p["strategy"], fmt(p["derived_tokens"]),
                          p["uses"], f"{p['predicted_loss']:.4f}")  # fmt: skip
    out.print(plans)
    naive = [s.law for s in scores if (s.plan or {}).get("repeats_counted_as_fresh")]
    if naive:
        out.print(
            f"{', '.join(naive)}: fitted and planned with repeats counted as fresh tokens (no "
            "derived-token term); its loss is what it expects, which repetition does not give",
            highlight=False,
        )
    for s in scores:
        if (s.plan or {}).get("beyond_limit"):
            say("warning", f"{s.law}: {s.plan['error']}")
        elif (s.plan or {}).get("extrapolated"):
            where = "; ".join(s.plan["extrapolated"])
            say_extrapolated(extrapolated_text(f"{s.law}: {where}"))
    for name, why in comparison.skipped.items():
        out.print(f"not fitted: {name}: {why}", highlight=False)
    out.print(comparison.verdict(), highlight=False)
    for w in comparison.warnings:
        say("warning", w)
