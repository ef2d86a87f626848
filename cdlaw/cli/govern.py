"""`cdlaw govern`: continue, switch strategy or cool down now, from a run's curve so far
(docs/govern.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cdlaw.cli import NUMBER, app, count, number, say
from cdlaw.errors import BadInput

if TYPE_CHECKING:
    from cdlaw.govern.curve import CurveOptions
    from cdlaw.govern.decision import GovernOptions
    from cdlaw.govern.watch import Watch
    from cdlaw.plan.source import PlanningLaw


@app.command()
def govern(
    run: Path = typer.Argument(..., metavar="RUN", help="A cdlaw run folder (metrics.parquet), a .csv/.parquet log of tokens (or steps), loss and lr, or a TensorBoard log folder."),
    budget_flops: str = typer.Option(..., "--budget-flops", metavar=NUMBER, help="The compute C the run may spend, e.g. 2e12."),
    unique_tokens: str = typer.Option(..., "--unique-tokens", metavar=NUMBER, help="Unique tokens U, e.g. 96K."),
    law: str = typer.Option(None, "--law", help="A fit.json from `cdlaw fit`, or a preset (qin2026, …); default: the runs folder's fit.json above RUN."),
    n_params: str = typer.Option(None, "--n-params", metavar=NUMBER, help="The run's N (non-embedding parameters), where its log does not say."),
    fresh_tokens: str = typer.Option(None, "--fresh-tokens", metavar=NUMBER, help="The run's fresh tokens D (default: its config, else U)."),
    strategy: str = typer.Option(None, "--strategy", help="How the run makes tokens past D: repetition, paraphrase, … (default: its config, else repetition)."),
    planned_tokens: str = typer.Option(None, "--planned-tokens", metavar=NUMBER, help="The tokens the run is scheduled for (default: its config, else C/6N)."),
    decay_frac: float = typer.Option(None, "--decay-frac", help="The cooldown's share of a run's tokens (default: its config, else 0.2)."),
    batch_tokens: str = typer.Option(None, "--batch-tokens", metavar=NUMBER, help="Tokens per step, when the log counts steps (batch size × sequence length)."),
    loss_column: str = typer.Option(None, "--loss-column", help="The loss column to read (default: the first with a number of val_loss, eval_loss, validation_loss, eval/loss, val/loss, validation/loss, loss, train_loss, train/loss, lm_loss)."),
    lr_column: str = typer.Option(None, "--lr-column", help="The learning rate's column (default: lr, learning_rate, train/lr, train/learning_rate, optimizer/lr, optim/lr, lr-AdamW, lr-Adam, lr-SGD)."),
    vocab_size: str = typer.Option(None, "--vocab-size", metavar=NUMBER, help="V: refuse a loss more than 5% above ln V (default: the run's config, else the law's runs')."),
    extrapolate: bool = typer.Option(False, "--extrapolate", help="Govern a run (and plan a budget) beyond the extrapolation limit of the law's fitted range, with a warning."),
    cooldown_from: Path = typer.Option(None, "--cooldown-from", help="A runs folder of a WSD sweep with shared trunks: fit the stable-to-cooled ratio from its branches instead of the demo's."),
    figure: Path = typer.Option(None, "--figure", help="Also draw the curve, its predicted continuation and where G_t meets λ (.png, .pdf, .svg)."),
    watch: bool = typer.Option(False, "--watch", help="Re-read the log every --every seconds and decide again when it grows (Ctrl-C to stop)."),
    every: float = typer.Option(60.0, "--every", help="Seconds between readings with --watch."),
    reads: str = typer.Option(None, "--reads", metavar=NUMBER, help="With --watch: stop after this many readings."),
    json_out: bool = typer.Option(False, "--json", help="Print only JSON on stdout (with --watch: one JSON line per decision)."),
) -> None:  # fmt: skip
    """Continue, switch strategy or cool down now: a WSD run's marginal gain per FLOP G_t
    against the plan's λ(C).

    The law is calibrated to the run's stable-phase curve (an offset through the
    stable-to-cooled ratio WSD sweeps measure); G_t = −dL/dFLOPs of its cooled-down loss
    is compared with λ(C) = −dL*/dC of the plan's frontier at the budget. Prints the
    action, G_t with its band, λ, the predicted loss if the run cools down now, at its
    planned end, and if it switches strategy, and when G_t will cross λ.

    Example: cdlaw govern runs/demo/17506c0701eb --budget-flops 2e12 --unique-tokens 96K
    Example: cdlaw govern log.csv --law runs/demo/fit.json --n-params 60K --batch-tokens 256 --budget-flops 2e12 --unique-tokens 96K
    """
    from cdlaw.cli.govern_show import draw, render
    from cdlaw.govern.watch import decisions

    request = _request(
        run, budget_flops, unique_tokens, law, n_params, fresh_tokens, strategy, planned_tokens,
        decay_frac, batch_tokens, loss_column, lr_column, vocab_size, extrapolate, cooldown_from,
        figure, watch, every, reads,
    )  # fmt: skip
    for decision in decisions(
        run, request.source, request.options, request.curve_options, request.watch,
        on_unreadable=lambda e: say("warning", f"{e} (read again in {every:g} s)"),
    ):  # fmt: skip
        render(decision, json_out, one_line=watch)
        if figure is not None:
            draw(decision, figure)


@dataclass(frozen=True)
class _Request:
    """`cdlaw govern`'s options, checked: the law, what the run is, how to read its log."""

    source: PlanningLaw
    options: GovernOptions
    curve_options: CurveOptions
    watch: Watch


def _request(
    run, budget_flops, unique_tokens, law, n_params, fresh_tokens, strategy, planned_tokens,
    decay_frac, batch_tokens, loss_column, lr_column, vocab_size, extrapolate, cooldown_from,
    figure, watch, every, reads,
) -> _Request:  # fmt: skip
    """The command line as a _Request (BadInput naming the option at fault)."""
    from cdlaw.cli.runs_now import checked_law
    from cdlaw.govern.cooldown import DEMO, fit_cooldown
    from cdlaw.govern.curve import CurveOptions
    from cdlaw.govern.decision import GovernOptions
    from cdlaw.govern.watch import Watch
    from cdlaw.plan.requests import positive

    def maybe(text, what):
        return None if text is None else positive(number(text, what), what)

    curve_options = CurveOptions(
        batch_tokens=maybe(batch_tokens, "--batch-tokens"),
        loss_column=loss_column,
        lr_column=lr_column,
        vocab_size=None if vocab_size is None else count(vocab_size, "--vocab-size"),
    )
    options = GovernOptions(
        budget_flops=number(budget_flops, "--budget-flops"),
        unique_tokens=number(unique_tokens, "--unique-tokens"),
        n_params=maybe(n_params, "--n-params"),
        fresh_tokens=maybe(fresh_tokens, "--fresh-tokens"),
        strategy=strategy,
        planned_tokens=maybe(planned_tokens, "--planned-tokens"),
        decay_frac=decay_frac,
        cooldown=DEMO if cooldown_from is None else fit_cooldown(cooldown_from),
        extrapolate=extrapolate,
    )
    if figure is not None and figure.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise BadInput(f"--figure {figure} must end in .png, .pdf or .svg")
    n_reads = None if reads is None else count(reads, "--reads")
    if not watch and reads is not None:
        raise BadInput("--reads counts readings of --watch: give --watch too, or leave it out")
    if watch and not (math.isfinite(every) and every >= 0):
        raise BadInput(f"--every {every:g} must be a number of seconds ≥ 0, e.g. 60")
    source = checked_law(law or str(_default_law(run)))
    if source.data_range is not None:
        curve_options = replace(curve_options, law_vocab_size=source.data_range.vocab_size)
    return _Request(source, options, curve_options, Watch(watch, every, n_reads))


def _default_law(run: Path) -> Path:
    """The fit.json of the runs folder RUN sits in (BadInput naming --law otherwise)."""
    if (run / "summary.parquet").is_file() and not (run / "metrics.parquet").is_file():
        some = next((p.parent.name for p in sorted(run.glob("*/metrics.parquet"))), "<run_id>")
        raise BadInput(
            f"{run} is the runs folder of a sweep, not one run: give one of its run folders "
            f"(e.g. {run / some}), or a run's log"
        )
    for folder in (run.parent, run.parent.parent) if run.is_dir() else (run.parent,):
        if (folder / "fit.json").is_file():
            return folder / "fit.json"
    raise BadInput(
        f"no fit.json beside {run}: give the law with --law (a fit.json from `cdlaw fit`, "
        "or a preset such as qin2026)"
    )
