"""`cdlaw govern`: continue, switch strategy or cool down now, from a run's curve so far
(docs/govern.md)."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from cdlaw.cli import NUMBER, app, count, err, number, out, print_json, say, wide
from cdlaw.errors import BadInput

ACTION_STYLE = {"continue": "green", "switch strategy": "cyan", "cool down now": "yellow"}


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
    loss_column: str = typer.Option(None, "--loss-column", help="The loss column to read (default: val_loss, eval_loss, loss, train_loss: the first there)."),
    vocab_size: str = typer.Option(None, "--vocab-size", metavar=NUMBER, help="V: refuse a loss more than 5% above ln V (default: the run's config)."),
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
    from cdlaw.govern.cooldown import DEMO, fit_cooldown
    from cdlaw.govern.curve import CurveOptions, read_curve
    from cdlaw.govern.governor import GovernOptions, plan_budget
    from cdlaw.govern.governor import govern as decide
    from cdlaw.plan.source import load_law

    def maybe(text, what):
        return None if text is None else number(text, what)

    curve_options = CurveOptions(
        batch_tokens=maybe(batch_tokens, "--batch-tokens"),
        loss_column=loss_column,
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
    )
    if figure is not None and figure.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise BadInput(f"--figure {figure} must end in .png, .pdf or .svg")
    n_reads = None if reads is None else count(reads, "--reads")
    source = load_law(law or str(_default_law(run)))
    last_tokens = None
    budget_plan = None  # planned at the first reading, the same for every one after
    done = 0
    while True:
        try:
            curve = read_curve(run, curve_options)
        except BadInput as e:
            if last_tokens is None:
                raise
            # a growing log can be caught mid-write: say so and read it again next time
            say("warning", f"{e} (read again in {every:g} s)")
            curve = None
        if curve is not None and curve.tokens[-1] != last_tokens:
            last_tokens = curve.tokens[-1]
            budget_plan = budget_plan or plan_budget(source, options)
            decision = decide(curve, source, options, budget_plan)
            _render(decision, json_out, one_line=watch)
            if figure is not None:
                _draw(decision, figure)
        done += 1
        if not watch or (n_reads is not None and done >= n_reads):
            return
        time.sleep(max(every, 0.0))


def _default_law(run: Path) -> Path:
    """The fit.json of the runs folder RUN sits in (BadInput naming --law otherwise)."""
    for folder in (run.parent, run.parent.parent) if run.is_dir() else (run.parent,):
        if (folder / "fit.json").is_file():
            return folder / "fit.json"
    raise BadInput(
        f"no fit.json beside {run}: give the law with --law (a fit.json from `cdlaw fit`, "
        "or a preset such as qin2026)"
    )


def _draw(decision, path: Path) -> None:
    from cdlaw.figures.govern import govern_figure
    from cdlaw.figures.output import figure_context, save_figure

    with figure_context():
        save_figure(govern_figure(decision.to_dict()), path, path.suffix.lower()[1:])
    err.print(f"wrote {path}", highlight=False)


def _render(d, json_out: bool, one_line: bool) -> None:
    if json_out:
        print_json(d.to_dict(), one_line)
    else:
        wide(out).print(_panel(d))
    for w in d.warnings:
        say("warning", w)


def _loss(o) -> str:
    if o is None:
        return "—"
    band = f" [{o.loss_ci95[0]:.4f}, {o.loss_ci95[1]:.4f}]" if o.loss_ci95 else ""
    return f"{o.loss:.4f}{band} at {o.end_tokens:.4g} tokens, {o.flops:.3g} FLOPs"


def _panel(d) -> Panel:
    t = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    style = ACTION_STYLE.get(d.action, "white")
    what = d.action + (f" → {d.switch_to}" if d.switch_to else "")
    t.add_row("action", f"[bold {style}]{escape(what)}[/]")
    band = f" [{d.gain_now_ci95[0]:.3g}, {d.gain_now_ci95[1]:.3g}]" if d.gain_now_ci95 else ""
    t.add_row("G_t now", f"{d.gain_now:.3g}{band} nats/FLOP at {d.tokens_now:.4g} tokens")
    t.add_row(
        "threshold λ(C)",
        f"{d.threshold:.3g} nats/FLOP: the plan's −dL*/dC at C = {d.budget_flops:.3g} "
        f"(N {d.plan_n_params:.3g}, {d.plan_strategy})",
    )
    for name in ("cool down now", "planned end", "best stop"):
        t.add_row(name, _loss(d.option(name)))
    switch = next((o for o in d.options if o.name.startswith("switch to")), None)
    if switch is not None:
        t.add_row(escape(switch.name), _loss(switch))
    if d.cross_tokens is None:
        cross = "not before the budget is spent"
    elif d.cross_tokens <= d.tokens_now:
        cross = f"already: at {d.cross_tokens:.4g} tokens"
    else:
        cross = (
            f"at t = {d.cross_tokens:.4g} tokens; cooling down from there ends at "
            f"{d.cross_tokens / (1 - d.decay_frac):.4g} tokens, {d.cross_flops:.3g} FLOPs"
        )
    t.add_row("G_t meets λ", cross)
    t.add_row(
        "calibration",
        f"offset {d.offset:+.4f} ± {d.offset_se:.4f} nats; cooled = "
        f"{d.cooldown['ratio']:.4g} × stable ({escape(d.cooldown['source'])})",
    )
    t.add_row("why", escape(d.reasons[0]))
    title = (
        f"cdlaw govern · {escape(d.source)} · N {d.n_params:.3g}, D {d.fresh_tokens:.3g}, "
        f"{d.strategy}"
    )
    return Panel(t, title=title, title_align="left", expand=False)
