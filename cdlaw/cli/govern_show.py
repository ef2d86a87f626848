"""How `cdlaw govern` shows a Decision: a panel (or JSON) and its warnings, and its figure."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from cdlaw.cli import err, out, print_json, say

ACTION_STYLE = {"continue": "green", "switch strategy": "cyan", "cool down now": "yellow"}


def draw(decision, path: Path) -> None:
    """Write the decision's figure (--figure) to path."""
    from cdlaw.figures.govern import govern_figure
    from cdlaw.figures.output import figure_context, save_figure

    with figure_context():
        save_figure(govern_figure(decision.to_dict()), path, path.suffix.lower()[1:])
    err.print(f"wrote {path}", highlight=False)


def render(d, json_out: bool, one_line: bool) -> None:
    """The decision as a panel, or JSON (one line under --watch); then its warnings."""
    if json_out:
        print_json(d.to_dict(), one_line)
    else:
        out.print(_panel(d))
    for w in d.warnings:
        say("warning", w)


def _loss(o) -> str:
    if o is None:
        return "—"
    band = f" [{o.loss_ci95[0]:.4f}, {o.loss_ci95[1]:.4f}]" if o.loss_ci95 else ""
    if o.end_tokens is None:
        return f"{o.loss:.4f}{band} at step {o.end_step:,.0f}"
    flops = f", {o.flops:.3g} FLOPs" if o.flops is not None else ""
    step = f" (step {o.end_step:,.0f})" if o.end_step is not None else ""
    return f"{o.loss:.4f}{band} at {o.end_tokens:.4g} tokens{step}{flops}"


def _maybe(x, fmt: str = ".3g") -> str:
    return "—" if x is None else format(x, fmt)


def _panel(d) -> Panel:
    t = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    style = ACTION_STYLE.get(d.action, "white")
    what = d.action + (f" → {d.switch_to}" if d.switch_to else "")
    t.add_row(
        "run", f"N {_maybe(d.n_params)}, D {_maybe(d.fresh_tokens)}, {escape(str(d.strategy))}"
    )
    t.add_row("action", f"[bold {style}]{escape(what)}[/]")
    t.add_row("model", escape(f"{d.model}: {d.model_reason}" if d.model_reason else d.model))
    if d.schedule:
        t.add_row("lr schedule", escape(d.schedule))
    if d.threshold is not None and d.gain_now is not None:
        band = f" [{d.gain_now_ci95[0]:.3g}, {d.gain_now_ci95[1]:.3g}]" if d.gain_now_ci95 else ""
        t.add_row(
            "G_t now", f"{d.gain_now:.3g}{band} nats/FLOP at {_maybe(d.tokens_now, '.4g')} tokens"
        )
        t.add_row(
            "threshold λ(C)",
            f"{d.threshold:.3g} nats/FLOP: the plan's −dL*/dC at C = {d.budget_flops:.3g} "
            f"(N {_maybe(d.plan_n_params)}, {d.plan_strategy})",
        )
    else:
        t.add_row(
            "threshold λ(C)",
            "— no budget: the endings are predicted, no FLOPs weighed (--budget-flops)",
        )
    for name in ("cool down now", "planned end", "best stop"):
        t.add_row(name, _loss(d.option(name)))
    switch = next((o for o in d.options if o.name.startswith("switch to")), None)
    if switch is not None:
        t.add_row(escape(switch.name), _loss(switch))
    if d.threshold is not None:
        t.add_row("G_t meets λ", _crossing_text(d))
    if d.offset is not None and d.cooldown is not None:
        t.add_row(
            "calibration",
            f"{escape(d.loss_column)} offset {d.offset:+.4f} ± {d.offset_se:.4f} nats; cooled = "
            f"{d.cooldown['ratio']:.4g} × stable ({escape(d.cooldown['source'])})",
        )
    elif d.curve_laws:
        fits = "; ".join(
            f"{law} α {f['alpha']:.3f}, gain {f['gain']:.3f}" for law, f in d.curve_laws.items()
        )
        t.add_row("curve laws", escape(f"{d.loss_column}: {fits}"))
    t.add_row("why", escape(d.reasons[0]))
    return Panel(t, title=f"cdlaw govern · {escape(d.source)}", title_align="left", expand=False)


def _crossing_text(d) -> str:
    now = d.option("cool down now")
    if now is not None and now.flops is not None and now.flops >= d.budget_flops:
        return "the budget is spent"
    if d.cross_tokens is None:
        return "not before the budget is spent"
    if d.tokens_now is not None and d.cross_tokens <= d.tokens_now:
        return f"already: at {d.cross_tokens:.4g} tokens"
    if d.model == "curve law":
        flops = f", {d.cross_flops:.3g} FLOPs" if d.cross_flops is not None else ""
        return f"for a run that ends at E = {d.cross_tokens:.4g} tokens{flops}"
    flops = f", {d.cross_flops:.3g} FLOPs" if d.cross_flops is not None else ""
    return (
        f"at t = {d.cross_tokens:.4g} tokens; cooling down from there ends at "
        f"{d.cross_tokens / (1 - d.decay_frac):.4g} tokens{flops}"
    )
