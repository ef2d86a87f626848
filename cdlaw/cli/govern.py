"""`cdlaw govern`: continue, switch strategy or cool down now, from a run's curve so far
(docs/govern.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cdlaw.cli import NUMBER, app, count, number, say
from cdlaw.system.atomic import check_out_path
from cdlaw.system.errors import BadInput

if TYPE_CHECKING:
    from cdlaw.govern.curve import CurveOptions
    from cdlaw.govern.decision import GovernOptions
    from cdlaw.govern.watch import Watch
    from cdlaw.plan.source import PlanningLaw


@app.command()
def govern(
    run: Path = typer.Argument(..., metavar="RUN", help="A cdlaw run folder, any trainer's log (.csv/.tsv/.parquet: a W&B export, a CSV logger's table; Hugging Face's trainer_state.json), or a TensorBoard log folder."),
    budget_flops: str = typer.Option(None, "--budget-flops", metavar=NUMBER, help="The compute C the run may spend, e.g. 2e12 (with --unique-tokens and a law: weigh FLOPs against the plan's λ(C); without: predict the endings only)."),
    unique_tokens: str = typer.Option(None, "--unique-tokens", metavar=NUMBER, help="Unique tokens U, e.g. 96K."),
    law: str = typer.Option(None, "--law", help="A fit.json from `cdlaw fit`, or a preset (qin2026, …); default: the runs folder's fit.json above RUN."),
    schedule: str = typer.Option(None, "--schedule", help="The planned lr schedule: cosine, linear, wsd, 1-sqrt or constant (with --planned-tokens, --warmup, --final-lr-ratio); default: --schedule-file, the run's config, else the log's lr column."),
    schedule_file: Path = typer.Option(None, "--schedule-file", help="The planned lr to the run's end: a .csv/.parquet of step (or tokens) and lr, at any spacing (interpolated)."),
    warmup: float = typer.Option(None, "--warmup", help="Warmup steps of --schedule (below 1: a share of the planned steps)."),
    final_lr_ratio: float = typer.Option(None, "--final-lr-ratio", help="The last lr over the peak (default: 0.1 for cosine, else 0)."),
    n_params: str = typer.Option(None, "--n-params", metavar=NUMBER, help="The run's N (non-embedding parameters), where its log does not say."),
    fresh_tokens: str = typer.Option(None, "--fresh-tokens", metavar=NUMBER, help="The run's fresh tokens D (default: its config, else U)."),
    strategy: str = typer.Option(None, "--strategy", help="How the run makes tokens past D: repetition, paraphrase, … (default: its config, else repetition)."),
    planned_tokens: str = typer.Option(None, "--planned-tokens", metavar=NUMBER, help="The tokens the run is scheduled for (default: its config or trainer_state.json's max_steps, else C/6N for a WSD run)."),
    decay_frac: float = typer.Option(None, "--decay-frac", help="A cooldown's share of a run's steps (default: its config, else 0.2); with no schedule, a WSD run's."),
    batch_tokens: str = typer.Option(None, "--batch-tokens", metavar=NUMBER, help="Tokens per step, when the log counts steps only (batch size × sequence length)."),
    loss_column: str = typer.Option(None, "--loss-column", help="The loss column to read (default: the first with 16 numbers of val_loss, eval_loss, eval/loss, …, loss, train_loss, train/loss, …)."),
    lr_column: str = typer.Option(None, "--lr-column", help="The learning rate's column (default: lr, learning_rate, train/learning_rate, optim/learning_rate_group0, lr-AdamW, …)."),
    step_column: str = typer.Option(None, "--step-column", help="The optimizer step's column (default: train/global_step, trainer/global_step, global_step, step, …, _step)."),
    tokens_column: str = typer.Option(None, "--tokens-column", help="The tokens seen's column (default: tokens_seen, tokens, …, throughput/total_tokens, num_input_tokens_seen)."),
    model: str = typer.Option("auto", "--model", help="What predicts the endings: auto, curve (the run's own curve law) or relation (the CD law and the WSD stable-to-cooled ratio)."),
    vocab_size: str = typer.Option(None, "--vocab-size", metavar=NUMBER, help="V: refuse a loss more than 5% above ln V (default: the run's config, else the law's runs')."),
    extrapolate: bool = typer.Option(False, "--extrapolate", help="Govern a run (and plan a budget) beyond the extrapolation limit of the law's fitted range, with a warning."),
    cooldown_from: Path = typer.Option(None, "--cooldown-from", help="A runs folder of a WSD sweep with shared trunks: fit the stable-to-cooled ratio from its branches (and govern by the WSD relation)."),
    figure: Path = typer.Option(None, "--figure", help="Also draw the curve, its predicted continuation and where G_t meets λ (.png, .pdf, .svg)."),
    watch: bool = typer.Option(False, "--watch", help="Re-read the log every --every seconds and decide again when it grows (Ctrl-C to stop)."),
    every: float = typer.Option(60.0, "--every", help="Seconds between readings with --watch."),
    reads: str = typer.Option(None, "--reads", metavar=NUMBER, help="With --watch: stop after this many readings."),
    json_out: bool = typer.Option(False, "--json", help="Print only JSON on stdout (with --watch: one JSON line per decision)."),
) -> None:  # fmt: skip
    """Predict how a run ends, from its own curve and planned lr schedule, and with a budget
    decide: continue, switch strategy or cool down now.

    The run's curve is fitted by schedule-aware curve laws (Tissue et al. 2024, Luo et
    al. 2025) on its planned schedule; they predict the loss at the planned end, after a
    cooldown started now, and at every end between, each with a 95% band. With a budget
    and a law, G_t = −dL/dFLOPs along those ends is compared with λ(C) = −dL*/dC of the
    plan's frontier; past the run's D, the CD law says what each token is still worth.

    Example: cdlaw govern wandb_export.csv --schedule cosine --warmup 2000 --final-lr-ratio 0.1 --planned-tokens 256B
    Example: cdlaw govern runs/demo/17506c0701eb --budget-flops 2e12 --unique-tokens 96K
    """
    from cdlaw.cli.govern_show import draw, render
    from cdlaw.govern.watch import decisions

    request = _request(
        run, budget_flops, unique_tokens, law, n_params, fresh_tokens, strategy, planned_tokens,
        decay_frac, batch_tokens, loss_column, lr_column, vocab_size, extrapolate, cooldown_from,
        figure, watch, every, reads, (schedule, schedule_file, warmup, final_lr_ratio, model),
        (step_column, tokens_column),
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

    source: PlanningLaw | None  # None: no budget, and no law beside the run
    options: GovernOptions
    curve_options: CurveOptions
    watch: Watch


def _request(
    run, budget_flops, unique_tokens, law, n_params, fresh_tokens, strategy, planned_tokens,
    decay_frac, batch_tokens, loss_column, lr_column, vocab_size, extrapolate, cooldown_from,
    figure, watch, every, reads, plan, axes,
) -> _Request:  # fmt: skip
    """The command line as a _Request (BadInput naming the option at fault)."""
    from cdlaw.cli.runs_now import checked_law
    from cdlaw.govern.cooldown import DEMO, fit_cooldown
    from cdlaw.govern.curve import CurveOptions
    from cdlaw.govern.decision import MODELS, GovernOptions
    from cdlaw.govern.lr_plan import SHAPES
    from cdlaw.govern.watch import Watch
    from cdlaw.plan.requests import positive

    def maybe(text, what):
        return None if text is None else positive(number(text, what), what)

    schedule, schedule_file, warmup, final_lr_ratio, model = plan
    if schedule is not None and schedule not in SHAPES:
        raise BadInput(
            f"--schedule {schedule!r} is none of {', '.join(SHAPES)}; or give --schedule-file"
        )
    if schedule is not None and schedule_file is not None:
        raise BadInput("give --schedule or --schedule-file, not both")
    if model not in MODELS:
        raise BadInput(f"--model {model!r} is none of {', '.join(MODELS)}")
    if (budget_flops is None) != (unique_tokens is None):
        raise BadInput("--budget-flops and --unique-tokens go together: give both, or neither")
    curve_options = CurveOptions(
        batch_tokens=maybe(batch_tokens, "--batch-tokens"),
        loss_column=loss_column,
        lr_column=lr_column,
        step_column=axes[0],
        tokens_column=axes[1],
        vocab_size=None if vocab_size is None else count(vocab_size, "--vocab-size"),
    )
    options = GovernOptions(
        budget_flops=None if budget_flops is None else number(budget_flops, "--budget-flops"),
        unique_tokens=None if unique_tokens is None else number(unique_tokens, "--unique-tokens"),
        n_params=maybe(n_params, "--n-params"),
        fresh_tokens=maybe(fresh_tokens, "--fresh-tokens"),
        strategy=strategy,
        planned_tokens=maybe(planned_tokens, "--planned-tokens"),
        decay_frac=decay_frac,
        cooldown=DEMO if cooldown_from is None else fit_cooldown(cooldown_from),
        extrapolate=extrapolate,
        schedule=schedule,
        schedule_file=schedule_file,
        warmup=warmup,
        final_lr_ratio=final_lr_ratio,
        batch_tokens=maybe(batch_tokens, "--batch-tokens"),
        model=model,
        cooldown_from=cooldown_from is not None,
    )
    if decay_frac is not None and not 0 < decay_frac < 1:
        raise BadInput(f"--decay-frac {decay_frac} must be between 0 and 1, e.g. 0.2")
    if figure is not None and figure.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise BadInput(f"--figure {figure} must end in .png, .pdf or .svg")
    if figure is not None:
        check_out_path(figure, "--figure")
    n_reads = None if reads is None else count(reads, "--reads")
    if not watch and reads is not None:
        raise BadInput("--reads counts readings of --watch: give --watch too, or leave it out")
    if watch and not (math.isfinite(every) and every >= 0):
        raise BadInput(f"--every {every:g} must be a number of seconds ≥ 0, e.g. 60")
    found = law or _default_law(run, required=budget_flops is not None or model == "relation")
    source = None if found is None else checked_law(str(found))
    if source is not None and source.data_range is not None:
        curve_options = replace(curve_options, law_vocab_size=source.data_range.vocab_size)
    return _Request(source, options, curve_options, Watch(watch, every, n_reads))


def _default_law(run: Path, required: bool) -> Path | None:
    """The fit.json of the runs folder RUN sits in (None if there is none, BadInput naming
    --law when a budget needs one)."""
    if (run / "summary.parquet").is_file() and not (run / "metrics.parquet").is_file():
        some = next((p.parent.name for p in sorted(run.glob("*/metrics.parquet"))), "<run_id>")
        raise BadInput(
            f"{run} is the runs folder of a sweep, not one run: give one of its run folders "
            f"(e.g. {run / some}), or a run's log"
        )
    for folder in (run.parent, run.parent.parent) if run.is_dir() else (run.parent,):
        if (folder / "fit.json").is_file():
            return folder / "fit.json"
    if not required:
        return None
    raise BadInput(
        f"no fit.json beside {run}: give the law with --law (a fit.json from `cdlaw fit`, "
        "or a preset such as qin2026)"
    )
