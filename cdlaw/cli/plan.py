"""`cdlaw plan`: the best model size, derived tokens and strategy for a FLOP budget (docs/plan.md)."""

from __future__ import annotations

from dataclasses import dataclass

import typer
from rich import box
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from cdlaw.cli import NUMBER, app, number, out, print_json, say
from cdlaw.cli.option_groups import takes_group
from cdlaw.cli.plan_words import gap_text, say_extrapolated, tokens_text, valley_text
from cdlaw.laws import get_law_form
from cdlaw.plan import EXTRAPOLATION_LIMIT
from cdlaw.system.errors import BadInput
from cdlaw.units import format_number as fmt

LAW = typer.Option(
    "qin2026",
    "--law",
    help="A fit.json from `cdlaw fit`, a preset (qin2026, muennighoff2023, "
    "chinchilla-hoffmann, chinchilla-besiroglu), or runs (a table or runs folder): every "
    "law compared on them and the best fitted, here.",
)
EXTRAPOLATE = typer.Option(
    False,
    "--extrapolate",
    help=f"Plan even beyond {EXTRAPOLATION_LIMIT:g}× the fitted range: N or tokens per "
    f"parameter D/N above {EXTRAPOLATION_LIMIT:g}× the largest fitted or below "
    f"1/{EXTRAPOLATION_LIMIT:g} the smallest, or D′/D above {EXTRAPOLATION_LIMIT:g}× the "
    "largest of its strategy's runs (refused otherwise); the plan then says it is "
    "extrapolated.",
)


@dataclass(frozen=True)
class PlanArgs:
    """How `cdlaw plan` plans a budget beyond its law and strategy: the memory and GPU-hours
    estimate, the regime thresholds, extrapolation (PLAN_OPTIONS, one field per option)."""

    gpu_memory: float | None = None
    gpu_flops: str | None = None
    mfu: float | None = None
    seq_len: int = 4096
    micro_batch: int = 1
    vocab_size: int = 100278
    saturation: float = 0.9
    tolerance: float = 0.01
    extrapolate: bool = False

    def planner_options(self, n_params: str | None) -> dict:
        """planner.plan's keyword options (numbers parsed; BadInput naming the option)."""
        return dict(
            n_params=None if n_params is None else number(n_params, "--n-params"),
            saturation=self.saturation,
            tolerance=self.tolerance,
            gpu_memory_gib=self.gpu_memory,
            gpu_flops=None if self.gpu_flops is None else number(self.gpu_flops, "--gpu-flops"),
            mfu=self.mfu,
            seq_len=self.seq_len,
            micro_batch=self.micro_batch,
            vocab_size=self.vocab_size,
            extrapolate=self.extrapolate,
        )


HOW = PlanArgs()  # the placeholder default of plan's `how` (takes_group replaces it)
# Each PlanArgs field's declaration, in the order --help lists them.
PLAN_OPTIONS = {
    "gpu_memory": typer.Option(None, "--gpu-memory", help="GiB of memory per GPU: say whether training fits."),
    "gpu_flops": typer.Option(None, "--gpu-flops", metavar=NUMBER, help="Peak FLOP/s of one GPU (e.g. 989e12, H100 bf16): GPU hours."),
    "mfu": typer.Option(None, "--mfu", help="Model-FLOPs utilisation in (0, 1] for GPU hours (default 0.4)."),
    "seq_len": typer.Option(4096, "--seq-len", help="Sequence length for activations."),
    "micro_batch": typer.Option(1, "--micro-batch", help="Sequences per GPU per step."),
    "vocab_size": typer.Option(100278, "--vocab-size", help="Vocabulary for embeddings."),
    "saturation": typer.Option(0.9, "--saturation", help="Regime threshold (docs/regimes.md)."),
    "tolerance": typer.Option(0.01, "--tolerance", help="Regime threshold, nats (docs/regimes.md)."),
    "extrapolate": EXTRAPOLATE,
}  # fmt: skip


@app.command()
@takes_group("how", PlanArgs, PLAN_OPTIONS)
def plan(
    budget_flops: str = typer.Option(None, "--budget-flops", metavar=NUMBER, help="Training compute C = 6·N·(D + D′), e.g. 1e21."),
    unique_tokens: str = typer.Option(None, "--unique-tokens", metavar=NUMBER, help="Unique (fresh) tokens U in the corpus, e.g. 5e9; default unlimited."),
    law: str = LAW,
    strategy: str = typer.Option("auto", "--strategy", help="auto | any strategy the law has parameters for: repetition, paraphrase, … (auto: the lowest loss)."),
    n_params: str = typer.Option(None, "--n-params", metavar=NUMBER, help="Fix the model size N, e.g. 7B; then only the token split is planned."),
    frontier: bool = typer.Option(False, "--frontier", help="Plan every budget of a log-spaced range instead of one."),
    frontier_range: str = typer.Option(None, "--frontier-range", metavar="<number:number>", help="LO:HI budgets of --frontier, e.g. 1e18:1e24. Default: the budgets whose plans stay inside the extrapolation limit of the fitted range (1e18:1e24 for a law without one)."),
    frontier_points: int = typer.Option(13, "--frontier-points", help="Budgets in the range."),
    how: PlanArgs = HOW,  # --gpu-memory … --extrapolate: how the budget is planned
    link: str = typer.Option(None, "--link", help="A downstream.json from `cdlaw downstream`: also predict each task's metric at the plan, with a 95% band through the law's and the link's bootstraps."),
    task: str = typer.Option(None, "--task", help="With --link: this task only (e.g. world_mc)."),
    json_out: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
) -> None:  # fmt: skip
    """Plan N, D′, strategy and epochs for a FLOP budget and a corpus, with the predicted loss.

    Minimises the law's loss over model size under 6·N·(D + D′) = C with D = min(U, C/6N),
    compares it with the naive Chinchilla plan and the four-epoch rule, and names the
    regime (compute-, data- or model-bound).

    With --link, the plan also predicts each task's metric through the link from loss to
    task that `cdlaw downstream` fitted (docs/downstream.md).

    Example: cdlaw plan --budget-flops 1e21 --unique-tokens 5e9 --law qin2026
    Example: cdlaw plan --law runs/demo/fit.json --budget-flops 2e12 --unique-tokens 96K --link runs/demo/downstream.json
    """
    from cdlaw.cli.runs_now import links_of_other_runs, runs_now_warnings
    from cdlaw.plan import planner
    from cdlaw.tasks.plan_metrics import read_links

    if link is not None and frontier:
        raise BadInput("--link predicts task metrics for one plan: drop --frontier or --link")
    links, predictors, stale_links = read_links(link, task)
    stale_links = stale_links or "; ".join(
        runs_now_warnings(link, "downstream.json", "this link file")
    )
    stale_links = "; ".join(filter(None, [stale_links, links_of_other_runs(law, link)]))
    source = _law_of(law, json_out)
    options = how.planner_options(n_params)
    unique = _unique_tokens(unique_tokens, how.seq_len, how.micro_batch, how.vocab_size)
    if frontier:
        if budget_flops is not None:
            raise BadInput(
                "--frontier plans every budget of --frontier-range, so --budget-flops would be "
                "ignored: drop one of them."
            )
        from cdlaw.cli.plan_frontier import plan_frontier

        plan_frontier(source, frontier_range, frontier_points, unique, strategy, options, json_out)
        return
    if budget_flops is None:
        raise BadInput(
            "--budget-flops is required (e.g. --budget-flops 1e21) unless --frontier is given."
        )
    result = planner.plan(
        source, number(budget_flops, "--budget-flops"), unique, strategy, **options
    )
    if links:
        from cdlaw.tasks.plan_metrics import with_tasks

        result = with_tasks(result, source, links, predictors, stale_links)
    if json_out:
        print_json(result.to_dict())
    else:
        _render_plan(result)


def _law_of(law: str, json_out: bool):
    """--law as the planner's PlanningLaw: a preset or fit.json (checked_law), or a table or
    runs folder, whose laws are compared and the best fitted here (law_of_runs: a minute
    or more, with a progress bar on stderr)."""
    from pathlib import Path

    from cdlaw.cli.runs_now import checked_law
    from cdlaw.fit.table import TABLE_SUFFIXES

    runs = Path(law)
    is_runs = runs.is_file() and runs.suffix.lower() in TABLE_SUFFIXES
    if not (is_runs or (runs.is_dir() and (runs / "summary.parquet").is_file())):
        return checked_law(law)
    from cdlaw.cli.progress_bar import StageProgress
    from cdlaw.plan.compare import law_of_runs

    progress = StageProgress()
    try:
        return law_of_runs(runs, progress)
    finally:
        progress.close()


def _unique_tokens(unique_tokens, seq_len: int, micro_batch: int, vocab_size: int):
    """--unique-tokens as a number (None: unlimited), after the shape options are checked;
    fewer tokens than one sequence is a mistake, not a corpus."""
    for name, value in (
        ("--seq-len", seq_len),
        ("--micro-batch", micro_batch),
        ("--vocab-size", vocab_size),
    ):
        if value < 1:
            raise BadInput(f"{name} {value} must be a positive whole number.")
    unique = None if unique_tokens is None else number(unique_tokens, "--unique-tokens")
    if unique is not None and 0 < unique < seq_len:
        raise BadInput(
            f"--unique-tokens {unique_tokens} is fewer tokens than one training sequence "
            f"(--seq-len {seq_len}): give the corpus's unique token count, e.g. 5e9."
        )
    return unique


# ---------------------------------------------------------------------------------------
# Human output (stdout; warnings on stderr).
# ---------------------------------------------------------------------------------------


def _vs(x: float, threshold: float) -> str:
    return "<" if x < threshold else "≥"


REGIME_WHY = {
    "compute-bound": "more derived tokens would still lower the loss",
    "data-bound": "derived tokens are saturated; more fresh data would help",
    "model-bound": "derived and fresh data are saturated; only a larger N helps",
}


def _regime_why(p) -> str:
    """REGIME_WHY, but for a law that gives derived tokens no value: nothing saturated."""
    if p.regime == "data-bound" and not get_law_form(p.law_form).uses_derived:
        return f"a {p.law_form} law gives derived tokens no value; more fresh data would help"
    return REGIME_WHY[p.regime]


def _render_plan(p) -> None:
    """The plan's panel, the same budget planned other ways, training cost, warnings."""
    if p.extrapolated:
        from cdlaw.plan.guard import extrapolated_text

        say_extrapolated(extrapolated_text("; ".join(p.extrapolated)), out)
    out.print(_plan_panel(p))
    if p.tasks:
        out.print(_task_table(p))
    out.print(_other_ways(p))
    out.print(
        "naive: Chinchilla's optimum counting repeats as fresh"
        + (f" (it expects {p.naive.believed_loss:.4f})" if p.naive.believed_loss else "")
        + "; ≤ 4 epochs: the same, capped at 4 epochs, the rest spent on N"
        + _beaten_note(p),
        highlight=False,
    )
    if p.memory:
        from cdlaw.cli.plan_cost import render_cost

        render_cost(p.memory)
    for w in p.warnings:
        say("warning", w)


def _plan_panel(p) -> Panel:
    """Budget, N, D, D′, predicted loss with its band, optimism, decision, regime, margin."""
    band = ""
    if p.predicted_loss_ci95:
        lo, hi = p.predicted_loss_ci95
        band = f"  (95% band {lo:.4f} – {hi:.4f})"
    headroom = p.loss_data_floor - p.loss_model_floor
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row(
        "budget",
        f"C = {p.budget_flops:.3g} FLOPs, U = {tokens_text(p.unique_tokens)} unique tokens, "
        f"strategy {p.strategy_requested}",
    )
    n_band = ""
    if p.n_params_ci95:
        n_band = f"  (95% band {fmt(p.n_params_ci95[0])} – {fmt(p.n_params_ci95[1])})"
    t.add_row("model size N", f"[bold]{fmt(p.n_params)}[/] parameters{n_band}")
    if p.valley:
        t.add_row("valley", valley_text(p.valley))
    if p.laws:
        t.add_row("law", escape(p.laws.text()))
    t.add_row(
        "fresh tokens D",
        f"{fmt(p.fresh_tokens)}  ({p.fresh_tokens / p.n_params:.3g} per parameter)",
    )
    t.add_row("derived tokens D′", f"{fmt(p.derived_tokens)}  [cyan]{p.strategy}[/], {p.best.uses}")
    t.add_row("predicted loss", f"[bold]{p.predicted_loss:.4f}[/] nats/token{band}")
    if p.n_params_no_band_reason:
        t.add_row("N band", escape(p.n_params_no_band_reason))
    if p.no_band_reason:
        t.add_row("95% band", escape(_none(p.no_band_reason)))
    if p.optimism_note:
        t.add_row("optimism", escape(p.optimism_note))
    elif p.optimism is not None:
        t.add_row("optimism", _optimism(p.optimism))
    if p.strategy_share:
        others = ", ".join(
            f"{s} {share:.0%}" for s, share in p.strategy_share.items() if s != p.strategy
        )
        t.add_row(
            "decision",
            f"[cyan]{p.strategy}[/] in {p.strategy_agreement:.0%} of the "
            f"bootstrap refits' own plans ({others})",
        )
    t.add_row(
        "regime",
        f"[magenta]{p.regime}[/]: {_regime_why(p)}\n"
        f"L_1ep {p.loss_one_epoch:.4f} · L_D {p.loss_data_floor:.4f} · L_N {p.loss_model_floor:.4f}\n"
        f"derived gain realised {p.derived_gain_share:.3f} "
        f"{_vs(p.derived_gain_share, p.saturation)} saturation {p.saturation:g}\n"
        f"fresh-data headroom L_D − L_N {headroom:.4f} "
        f"{_vs(headroom, p.tolerance)} tolerance {p.tolerance:g}",
    )
    t.add_row(
        "marginal gain",
        f"{_unsigned_zero(f'{p.marginal_gain_per_flop:.3g}')} nats/FLOP; "
        f"{_unsigned_zero(f'{p.marginal_gain_per_doubling:.4f}')} nats if C doubles",
    )
    title = f"cdlaw plan · law {p.law} ({p.law_form})"
    return Panel(t, title=title, title_align="left", expand=False)


def _unsigned_zero(text: str) -> str:
    """A number that rounds to zero, shown without the sign of its rounding noise."""
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def _none(reason: str) -> str:
    """Why a band is missing: "not determined: …" as given, any other reason as "none: …"."""
    return reason if reason.startswith("not determined") else f"none: {reason}"


def _optimism(o: float) -> str:
    """The optimism row, as a size and a direction in words, never a signed number to
    puzzle over (o < 0: the prediction runs low)."""
    if o < 0:
        return (
            f"the prediction runs {-o:.4f} nats low: the bootstrap refits' own plans predict "
            "this much less than the fit expects at them (a plan lands where the fit errs "
            "low); the band's upper end is widened by it"
        )
    return (
        f"none: the bootstrap refits' own plans predict {o:.4f} nats more than the fit "
        "expects at them (no sign of the optimizer's curse); the band's lower end is "
        "widened by it"
    )


def _task_table(p) -> Table:
    """Each task's metric predicted at the plan (law → loss → link), with its band."""
    t = Table(
        title=f"task metrics at the plan's loss {p.predicted_loss:.4f} (--link)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in ("task", "metric", "predicted", "95% band", "by"):
        t.add_column(col, justify="left" if col in ("task", "metric", "by") else "right")
    for x in p.tasks:
        none = "not determined" if (x["no_band_reason"] or "").startswith("not det") else "none"
        band = f"{x['ci95'][0]:.4f} – {x['ci95'][1]:.4f}" if x["ci95"] else none
        mark = "!" if x.get("unsupported") else ""  # the runs cannot support it (its noise)
        t.add_row(
            x["task"], x["metric"], f"{x['value']:.4f}{mark}", band, x.get("predictor", "link")
        )
    if any(x.get("unsupported") for x in p.tasks):
        t.caption = (
            "! the runs' rise is within a few steps of the task's noise: see cdlaw downstream"
        )
        t.caption_justify = "left"
    return t


def _other_ways(p) -> Table:
    """The plan beside the other strategies, the naive plan and the four-epoch rule."""
    c = Table(
        title="the same budget, other ways, each scored by the law",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("", "N", "D", "D′", "strategy", "uses", "loss", "gap"):
        c.add_column(col, justify="left" if col in ("", "strategy", "uses") else "right")
    rows = [("plan", p.best)]
    # the other strategies, where they lose (under auto the plan is the best of them),
    # closest first
    losers = sorted((a.loss_gap, s) for s, a in p.candidates.items() if a.loss_gap > 0)
    rows += [(s, p.candidates[s]) for _, s in losers]
    rows += [("naive", p.naive), ("≤ 4 epochs", p.four_epoch)]
    for name, a in rows:
        gap = "—" if a is p.best else gap_text(a.predicted_loss - p.predicted_loss, 4)
        c.add_row(
            name,
            fmt(a.n_params),
            fmt(a.fresh_tokens),
            fmt(a.derived_tokens),
            a.strategy,
            a.uses,
            f"{a.predicted_loss:.4f}",
            gap,
        )
    return c


def _beaten_note(p) -> str:
    """Why a baseline can beat the plan (a negative gap): it picks its own N and strategy,
    which --n-params or --strategy took from the plan."""
    beaten = [n for n, a in (("naive", p.naive), ("≤ 4 epochs", p.four_epoch)) if a.loss_gap < 0]
    if not beaten:
        return ""
    held = []
    if p.n_params_fixed:
        held.append(f"N at {fmt(p.best.n_params)}")
    if p.strategy_requested != "auto":
        held.append(f"the strategy {p.strategy_requested}")
    verb = "beats" if len(beaten) == 1 else "beat"
    return (
        f"; {' and '.join(beaten)} {verb} the plan (a negative gap): "
        "the baselines choose their own N and repeat data, while this plan holds "
        f"{' and '.join(held) or 'its constraints'}"
    )
