"""R* = K·(D/N)^ρ·N^σ per strategy: how many passes' worth of derived tokens still pay off.

Left: R* against D/N at three model sizes; middle: R* against N at three values of D/N;
right (when the law has two strategies or more): the (N, D/N) plane coloured by the
strategy with the largest R*. η grows with R* at every r, so that strategy's derived
tokens are worth the most there, for every amount of derived data. The shade deepens with
its lead over the runner-up, log₁₀(R*_best/R*_next); black lines are where two strategies
tie.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cdlaw.figures import style
from cdlaw.law import Law

# mathtext, as a paper typesets them
RSTAR = r"$R^*$"
FORMULA = r"$R^* = K\,(D/N)^{\rho}\,N^{\sigma}$"
LEAD_LABEL = r"$\log_{10}\,(R^*_{\mathrm{best}}\,/\,R^*_{\mathrm{next}})$"
LINE_NAMES = ("solid", "dashed", "dotted")  # style.LINESTYLES[:3], for the legend's words
HATCHES = ("", "///", "\\\\", "xx", "..", "++", "oo", "--")  # one per strategy, for grey prints


def _ranges(law: Law, rows, fit: dict | None):
    """Model sizes and D/N to draw over: the runs' range (or the fit's), padded a little."""
    if rows is not None and len(rows):
        n = rows["n_params"].to_numpy(float)
        tpp = rows["tokens_per_param"].to_numpy(float)
        cells = rows[["n_params", "tokens_per_param"]].drop_duplicates()
        return (n.min(), n.max()), (tpp.min(), tpp.max()), cells
    rng = (fit or {}).get("data_range") or {}
    if rng.get("n_params") and rng.get("fresh_tokens"):
        n_lo, n_hi = map(float, rng["n_params"])
        d_lo, d_hi = map(float, rng["fresh_tokens"])
        return (n_lo, n_hi), (d_lo / n_hi, d_hi / n_lo), None
    # A bare law: the sizes of the CD paper's sweep and a wide band of D/N.
    return (1.4e7, 6e8), (1.0, 200.0), None


def best_strategy(law: Law, strategies, n_params, tokens_per_param):
    """Per point, the index into `strategies` of the one with the largest R* (so the
    largest η at every r), and its lead: log₁₀ R*_best/R*_next (0 with one strategy)."""
    n = np.asarray(n_params, dtype=float)
    d = n * np.asarray(tokens_per_param, dtype=float)
    logs = np.log10(np.stack([np.broadcast_to(law.rstar(n, d, s), n.shape) for s in strategies]))
    ranked = np.sort(logs, axis=0)
    lead = ranked[-1] - ranked[-2] if len(strategies) > 1 else np.zeros(n.shape)
    return np.argmax(logs, axis=0), lead


def _rstar_lines(ax, law: Law, strategies, x_grid, refs, along_ratio: bool) -> None:
    """R* per strategy against D/N at each reference size (along_ratio), or against N at
    each reference D/N; line styles tell the references apart."""
    for s in strategies:
        st = style.strategy_style(s, strategies)
        for i, ref in enumerate(refs):
            if along_ratio:
                rstar = law.rstar(ref, ref * x_grid, s)
            else:
                rstar = law.rstar(x_grid, x_grid * ref, s)
            ax.plot(
                x_grid,
                rstar,
                color=st["color"],
                linestyle=style.LINESTYLES[i],
                linewidth=1.5,
            )


def _curve_axes(axes) -> None:
    """Titles, names and log scales of the two R* curve panels."""
    axes[0, 0].set_xlabel("fresh tokens per parameter, D/N (tokens/param)", fontsize=8)
    axes[0, 0].set_title(f"{RSTAR} against D/N", fontsize=9)
    axes[0, 1].set_xlabel("model size, N (parameters)", fontsize=8)
    axes[0, 1].set_title(f"{RSTAR} against model size", fontsize=9)
    for ax in axes[0, :2]:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylabel(f"{RSTAR} (passes over D that still pay off)", fontsize=8)
        ax.tick_params(labelsize=7)
        style.log_axis(ax, "y", style.plain)
    style.log_axis(axes[0, 0], "x", style.plain)
    style.log_axis(axes[0, 1], "x")


def _curve_key(strategies, n_refs, t_refs) -> list:
    """Legend entries of the curve panels: a colour per strategy, then one entry per panel
    holding its reference lines' styles side by side."""
    from matplotlib.lines import Line2D

    handles: list[Any] = [
        Line2D([], [], color=style.strategy_style(s, strategies)["color"], linewidth=2, label=s)
        for s in strategies
    ]
    for where, refs, show in (
        ("left: N =", n_refs, style.size),
        ("middle: D/N =", t_refs, lambda t: f"{t:.3g}"),
    ):
        styles = style.Beside(
            Line2D([], [], color="0.3", linestyle=style.LINESTYLES[i]) for i in range(len(refs))
        )
        named = (f"{show(r)} ({LINE_NAMES[i]})" for i, r in enumerate(refs))
        styles.label = f"{where} {', '.join(named)}"
        handles.append(styles)
    return handles


def _winner_map(ax, law: Law, strategies, n_grid, t_grid) -> tuple[float, set[str]]:
    """The (N, D/N) plane in the colour of the strategy with the largest R*, deeper where
    it leads by more, hatched per strategy, with the lines where two tie; returns the
    largest lead shown and the strategies that lead somewhere in view."""
    from matplotlib.colors import to_rgb

    NN, TT = np.meshgrid(n_grid, t_grid)
    best, lead = best_strategy(law, strategies, NN, TT)
    top = float(np.nanmax(lead)) if np.isfinite(lead).any() else 0.0
    depth = 0.25 + 0.75 * np.clip(lead / (top or 1.0), 0.0, 1.0)  # a tie keeps a tint
    colours = np.array([to_rgb(style.strategy_style(s, strategies)["color"]) for s in strategies])
    image = 1.0 - depth[..., None] * (1.0 - colours[best])  # the colour, blended with white
    ax.pcolormesh(NN, TT, image, shading="auto", rasterized=True, gid="best-strategy")
    for i, s in enumerate(strategies):
        mine = best == i
        if mine.any() and HATCHES[i % len(HATCHES)]:
            region = ax.contourf(NN, TT, mine.astype(float), levels=[0.5, 1.5], colors="none",
                                 hatches=[HATCHES[i % len(HATCHES)]])  # fmt: skip
            region.set_gid(f"wins:{s}")
    _tie_lines(ax, law, strategies, NN, TT)
    return top, {strategies[i] for i in np.unique(best)}


def _tie_lines(ax, law: Law, strategies, NN, TT) -> None:
    """Black lines where the lead passes from one strategy to another: R*_a = R*_b, drawn
    only where a and b are the two best."""
    logs = {s: np.log10(law.rstar(NN, NN * TT, s)) for s in strategies}
    for i, a in enumerate(strategies):
        for b in strategies[i + 1 :]:
            others = [logs[s] for s in strategies if s not in (a, b)]
            beaten = np.maximum(logs[a], logs[b]) >= np.max(others, axis=0) if others else True
            ratio = np.where(beaten, logs[a] - logs[b], np.nan)
            if (ratio > 0).any() and (ratio < 0).any():
                line = ax.contour(NN, TT, ratio, levels=[0.0], colors="black", linewidths=1.6)
                line.set_gid(f"equal-rstar:{a}:{b}")


def _winner_panel(ax, law: Law, strategies, n_grid, t_grid, runs) -> tuple[dict, list]:
    """The right panel: which strategy's derived tokens are worth most, and the runs' cells
    on it; returns its legend entries: each strategy's region by strategy, then the rest."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    top, leaders = _winner_map(ax, law, strategies, n_grid, t_grid)
    regions = {
        s: Patch(
            facecolor=style.strategy_style(s, strategies)["color"],
            edgecolor="black",
            hatch=HATCHES[i % len(HATCHES)] or None,
            label=f"has the largest {RSTAR}" if s in leaders else "leads nowhere in view",
        )
        for i, s in enumerate(strategies)
    }
    handles: list[Any] = []
    if runs is not None:
        ax.scatter(
            runs["n_params"],
            runs["tokens_per_param"],
            gid="runs",
            marker="o",
            s=22,
            facecolor="white",
            edgecolor="black",
            linewidth=0.8,
            zorder=5,
        )
        handles.append(
            Line2D(
                [],
                [],
                linestyle="",
                marker="o",
                markerfacecolor="white",
                markeredgecolor="black",
                label="right: runs",
            )
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    style.log_axis(ax, "x")
    style.log_axis(ax, "y", style.plain)
    ax.set_xlabel("model size, N (parameters)", fontsize=8)
    ax.set_ylabel("fresh tokens per parameter, D/N (tokens/param)", fontsize=8)
    ax.set_title("where each strategy's derived tokens are worth most", fontsize=9)
    ax.tick_params(labelsize=7)
    handles.append(Line2D([], [], color="black", linewidth=1.6, label=f"right: equal {RSTAR}"))
    handles.append(
        Patch(
            facecolor="0.55",
            edgecolor="none",
            label=f"right: deeper with the lead, {LEAD_LABEL}, up to {top:.2g}",
        )
    )
    return regions, handles


def rstar_figure(law: Law, rows=None, fit: dict | None = None):
    """R* over model size and D/N per strategy, and where each strategy leads."""
    strategies = style.strategy_order(law.strategies)
    several = len(strategies) >= 2
    fig, axes = style.new_figure(1, 3 if several else 2, panel=(3.7, 3.2))
    (n_lo, n_hi), (t_lo, t_hi), runs = _ranges(law, rows, fit)
    n_grid = np.geomspace(n_lo / 3, n_hi * 3, 120)
    t_grid = np.geomspace(t_lo / 3, t_hi * 3, 120)
    n_refs = np.unique([n_lo, float(np.sqrt(n_lo * n_hi)), n_hi])
    t_refs = np.unique([t_lo, float(np.sqrt(t_lo * t_hi)), t_hi])

    _rstar_lines(axes[0, 0], law, strategies, t_grid, n_refs, along_ratio=True)
    _rstar_lines(axes[0, 1], law, strategies, n_grid, t_refs, along_ratio=False)
    _curve_axes(axes)
    handles = _curve_key(strategies, n_refs, t_refs)
    if several:
        regions, rest = _winner_panel(axes[0, 2], law, strategies, n_grid, t_grid, runs)
        handles = [_with_region(h, regions) for h in handles] + rest
    return style.finish(
        fig,
        f"{FORMULA}: how long derived tokens keep their worth",
        style.fit_caption(fit),
        handles,
    )


def _with_region(handle, regions: dict):
    """A strategy's line and its region on the right as one entry, so the legend holds one
    entry per strategy rather than two; any other entry as it is."""
    region = regions.get(handle.get_label())
    if region is None:
        return handle
    both = style.Beside((handle, region))
    both.label = f"{handle.get_label()} (right: {region.get_label()})"
    return both
