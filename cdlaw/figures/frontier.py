"""The compute frontier from `cdlaw plan --frontier`: the best plan at each budget.

Four panels against the budget C (FLOPs): model size N*, derived tokens D′, passes over
the unique data, and predicted loss. Where the plans have a 95% band, the N and the passes
whose loss is within it (each plan's valley) are shaded around the plan's line. The plan, made with the law of the frontier's fit
(named in the legend), is drawn against the same budget planned naively (Chinchilla,
repeats counted as fresh) and by the four-epoch rule, each scored by that law, so the gap
is the value of planning with it. The plan's derived tokens are drawn only when it has
some: a law that gives them no worth (chinchilla) never plans any.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cdlaw.figures import style
from cdlaw.laws import LAWS
from cdlaw.strategies import NONE

# "plan" is labelled with its law's name in the figure (plan_label).
PLANS: dict[str, dict[str, Any]] = {
    "plan": {"label": "plan", "color": style.BLACK, "linestyle": "-", "marker": "o"},
    "naive": {
        "label": "naive Chinchilla plan",
        "color": style.VERMILLION,
        "linestyle": "--",
        "marker": "s",
    },
    "four_epoch": {
        "label": "four-epoch rule",
        "color": style.GREEN,
        "linestyle": "-.",
        "marker": "D",
    },
}


# The plan's valley (sky, light): apart from the grey of sizes outside the fitted runs.
VALLEY: dict[str, Any] = {"facecolor": style.SKY, "alpha": 0.3}


def _unique(frontier: dict) -> float:
    """Unique tokens U; null in the JSON means unlimited fresh data."""
    u = frontier.get("unique_tokens")
    return float("inf") if u is None else float(u)


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def plan_law(frontier: dict, fit: dict | None = None) -> str:
    """The name of the law the frontier was planned with, as fit.json's "law" spells it."""
    named = frontier.get("law")
    for d in (frontier.get("law_params"), named if isinstance(named, dict) else None):
        if isinstance(d, dict) and d.get("law"):
            return str(d["law"])
    rows = frontier.get("rows") or []
    if rows and isinstance(rows[0], dict) and rows[0].get("law_form"):
        return str(rows[0]["law_form"])
    return str((fit or {}).get("law") or "cd")


def plan_has_derived(law: str, plan: dict[str, np.ndarray]) -> bool:
    """Whether the plan spends any budget on derived tokens. A law that gives them no
    worth never does: what its rows carry is rounding left when D reaches U."""
    form = LAWS.get(law)
    if form is not None and not form.uses_derived:
        return False
    return bool((plan["derived_tokens"] > 0).any())


def frontier_table(frontier: dict) -> dict[str, dict[str, np.ndarray]]:
    """Per plan kind (plan, naive, four_epoch): arrays of budget, N, D, D′, passes, loss.

    Fresh tokens of the contrast plans are recomputed from the budget when a row omits
    them: D = min(U, C/(6N)), D′ = C/(6N) − D (docs/plan.md).
    """
    U = _unique(frontier)
    out: dict[str, dict[str, list]] = {k: {} for k in PLANS}
    for row in frontier["rows"]:
        C = float(row["budget_flops"])
        for kind in PLANS:
            p = row if kind == "plan" else row.get(kind)
            if not p:
                continue
            n = _num(p.get("n_params"))
            total = C / (6 * n)
            fresh = _num(p["fresh_tokens"]) if p.get("fresh_tokens") is not None else min(U, total)
            if p.get("derived_tokens") is not None:
                derived = _num(p["derived_tokens"])
            else:
                derived = total - fresh
            cols = out[kind]
            for key, v in (
                ("budget_flops", C),
                ("n_params", n),
                ("fresh_tokens", fresh),
                ("derived_tokens", derived),
                ("passes", (fresh + derived) / fresh),
                ("predicted_loss", _num(p.get("predicted_loss"))),
            ):
                cols.setdefault(key, []).append(v)
            cols.setdefault("strategy", []).append(p.get("strategy", row.get("strategy", "")))
        for key, v in _valley_ends(row.get("valley")).items():  # beside the plan's own
            out["plan"].setdefault(key, []).append(v)
    return {k: {c: np.asarray(v) for c, v in cols.items()} for k, cols in out.items() if cols}


def _valley_ends(valley: dict | None) -> dict[str, float]:
    """A plan's valley as the lowest and highest N and passes over the unique data,
    (D + D′)/D; NaN for a plan without one."""
    n = passes = [math.nan, math.nan]
    if isinstance(valley, dict):
        try:
            fresh, derived = valley["fresh_tokens"], valley["derived_tokens"]
            passes = [(float(f) + float(d)) / float(f) for f, d in zip(fresh, derived, strict=True)]
            n = [float(x) for x in valley["n_params"]]
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            n = passes = [math.nan, math.nan]
    return {
        "valley_n_lo": min(n), "valley_n_hi": max(n),
        "valley_passes_lo": min(passes), "valley_passes_hi": max(passes),
    }  # fmt: skip


def _valley_shade(ax_n, ax_e, plan: dict | None) -> bool:
    """Shade each budget's valley (the N, and the passes, whose loss is within the plan's
    95% band) around the plan's line; returns whether any plan had one."""
    if plan is None or "valley_n_lo" not in plan or not np.isfinite(plan["valley_n_lo"]).any():
        return False
    for ax, key in ((ax_n, "valley_n"), (ax_e, "valley_passes")):
        ax.fill_between(
            plan["budget_flops"], plan[key + "_lo"], plan[key + "_hi"],
            **VALLEY, linewidth=0, zorder=1, gid=f"plan:{key}",
        )  # fmt: skip
    return True


def _plan_lines(panels, table: dict, with_derived: bool) -> None:
    """Each plan kind's line in every panel (the plan's D′ only when it has some)."""
    for kind, t in table.items():
        ps = PLANS[kind]
        line = {"color": ps["color"], "linestyle": ps["linestyle"], "linewidth": 1.5}
        for ax, key in panels:
            if kind == "plan" and key == "derived_tokens" and not with_derived:
                continue
            y = t[key]
            if key == "derived_tokens":
                # No derived tokens is no point on a log axis: the line starts where some are.
                y = np.where(y > 0, y, np.nan)
            ax.plot(
                t["budget_flops"],
                y,
                marker=ps["marker"],
                markersize=3.5,
                gid=f"{kind}:{key}",
                **line,
            )


def _strategy_marks(panels, plan: dict) -> None:
    """The plan's chosen strategy, as coloured markers on its own line."""
    strategies = style.strategy_order(set(plan["strategy"]))
    for s in strategies:
        m = plan["strategy"] == s
        st = style.strategy_style(s, strategies)
        for ax, key in panels:
            y = plan[key][m]
            if key == "derived_tokens":
                y = np.where(y > 0, y, np.nan)
            ax.scatter(
                plan["budget_flops"][m],
                y,
                color=st["color"],
                marker=st["marker"],
                s=26,
                edgecolor="black",
                linewidth=0.5,
                zorder=5,
            )


def _label_axes(axes) -> None:
    """Names and scales of the four panels: log where a panel has positive values."""
    ax_n, ax_d, ax_e, ax_l = axes.flat
    for ax, label, log_y in (
        (ax_n, "model size, N* (parameters)", True),
        (ax_d, "derived tokens, D′* (tokens)", True),
        (ax_e, "passes over unique data, (D + D′)/D", True),
        (ax_l, "predicted " + style.LOSS_LABEL, False),
    ):
        ax.set_xscale("log")
        if log_y and any((np.asarray(ln.get_ydata()) > 0).any() for ln in ax.lines):
            ax.set_yscale("log")
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in (ax_e, ax_l):
        ax.set_xlabel("compute budget, C (FLOPs)", fontsize=8)


def _model_size_range(ax_n, table: dict, fit: dict | None) -> bool:
    """Fit N*'s axis to every plan; shade the sizes outside the fitted runs' (above the
    largest, below the smallest), where the plan extrapolates. Returns whether it shaded
    any."""
    ax_n.set_ylim(*style.pad_log_range(np.concatenate([t["n_params"] for t in table.values()])))
    fitted = ((fit or {}).get("data_range") or {}).get("n_params")
    bottom, top = ax_n.get_ylim()
    if not fitted:
        return False
    lo, hi = float(fitted[0]), float(fitted[1])
    if hi < top:
        ax_n.axhspan(hi, top, color="0.9", zorder=0, linewidth=0)
    if lo > bottom:
        ax_n.axhspan(bottom, lo, color="0.9", zorder=0, linewidth=0)
    ax_n.set_ylim(bottom, top)
    return hi < top or lo > bottom


def _tick_axes(axes) -> None:
    """Human ticks on every panel; an empty D′ panel says why it is empty."""
    ax_n, ax_d, ax_e, ax_l = axes.flat
    style.log_axis(ax_n, "y")
    if ax_d.get_yscale() == "log":
        style.log_axis(ax_d, "y")
    else:
        ax_d.text(
            0.5,
            0.75,
            "no derived tokens at any budget:\nthe unique tokens never run out",
            transform=ax_d.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="0.3",
        )
    style.log_axis(ax_e, "y", style.plain)
    style.log_axis(ax_l, "x", style.powers)  # the x axis is shared by all four panels


def _frontier_legend(
    table, law: str, plan, with_derived: bool, U: float, shade: bool, valley: bool = False
) -> list:
    """The plan kinds drawn, the plan's strategies, the unique tokens and the shadings."""
    from matplotlib.lines import Line2D

    handles: list[Any] = [
        Line2D(
            [],
            [],
            color=p["color"],
            linestyle=p["linestyle"],
            marker=p["marker"],
            markersize=4,
            label=plan_label(law, with_derived) if k == "plan" else p["label"],
        )
        for k, p in PLANS.items()
        if k in table
    ]
    if with_derived:
        handles += [
            Line2D(
                [],
                [],
                linestyle="",
                color=look["color"],
                marker=look["marker"],
                markeredgecolor="black",
                label=f"plan uses {s}" if s != NONE else "plan: fresh tokens only",
            )
            for s, look in style.strategy_styles(set(plan["strategy"])).items()
        ]
    if np.isfinite(U):
        handles.append(
            Line2D(
                [],
                [],
                color="0.4",
                linestyle=(0, (1, 1)),
                label=f"unique tokens, U = {style.tokens(U)}",
            )
        )
    from matplotlib.patches import Patch

    if valley:
        handles.append(Patch(**VALLEY, label="valley: N whose loss is within the 95% band"))
    if shade:
        handles.append(Patch(facecolor="0.9", label="N outside the fitted runs' sizes"))
    return handles


def _caption_fit(frontier: dict, fit: dict | None, law: str) -> dict | None:
    """The fit the caption names: fit, or for a frontier JSON from a preset, the law it
    was planned with."""
    if fit:
        return fit
    params = frontier.get("law_params") or {}
    name = frontier.get("law")
    if isinstance(name, dict):
        return {"law": law, "source": name.get("source")}
    return {"law": law, "source": params.get("source") or name}


def frontier_figure(frontier: dict, fit: dict | None = None, rows=None, u_note: str = ""):
    """N*, D′*, passes and predicted loss against budget: the plan vs naive and four-epoch.

    Each plan's line in a panel has the gid "<kind>:<column>" (plan:n_params, naive:…); a
    budget asked for (the JSON's "budget_flops") is a vertical line in every panel, gid
    "budget". u_note: why U is what it is, in the title ("the runs' largest D").
    """
    table = frontier_table(frontier)
    U = _unique(frontier)
    law = plan_law(frontier, fit)
    plan = table.get("plan")
    with_derived = plan is not None and plan_has_derived(law, plan)
    fig, axes = style.new_figure(2, 2, panel=(3.8, 2.9), sharex=True)
    ax_n, ax_d, ax_e, ax_l = axes.flat
    panels = (
        (ax_n, "n_params"),
        (ax_d, "derived_tokens"),
        (ax_e, "passes"),
        (ax_l, "predicted_loss"),
    )
    _plan_lines(panels, table, with_derived)
    if with_derived and plan is not None:
        _strategy_marks(panels, plan)
    if np.isfinite(U):
        ax_d.axhline(U, color="0.4", linewidth=1.0, linestyle=(0, (1, 1)))
    asked = frontier.get("budget_flops")
    if asked:
        for ax in axes.flat:
            ax.axvline(float(asked), color=style.PURPLE, linewidth=1, linestyle="--", gid="budget")
    valley = _valley_shade(ax_n, ax_e, plan)
    _label_axes(axes)
    shade = _model_size_range(ax_n, table, fit)
    _tick_axes(axes)

    handles = _frontier_legend(table, law, plan, with_derived, U, shade, valley)
    if asked:
        from matplotlib.lines import Line2D

        label = f"the plan's budget, C = {style.powers(float(asked))} FLOPs"
        handles.append(Line2D([], [], color=style.PURPLE, linestyle="--", label=label))
    u_text = "unlimited" if not np.isfinite(U) else style.tokens(U)
    why = f" ({u_note})" if u_note else ""
    return style.finish(
        fig,
        f"Compute frontier with U = {u_text} unique tokens{why}",
        style.fit_caption(
            _caption_fit(frontier, fit, law), f"strategy {frontier.get('strategy', 'auto')}"
        ),
        handles,
        [h.get_label() for h in handles],
    )


def plan_label(law: str, with_derived: bool) -> str:
    """The legend's name of the plan: the law it was made with."""
    return f"plan with the {law} law" + ("" if with_derived else " (no derived tokens)")
