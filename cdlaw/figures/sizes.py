"""Loss against tokens on one axis, one colour per model size: the loss figure of a table
that is no CD sweep (cdlaw.figures.loss.is_sweep), such as Chinchilla's, where most (N, D)
cells hold one run. Sizes past the legend's room go in spans, one colour and one fitted
line (at the span's geometric-mean N) each; the loss axis holds the bulk of the runs and
the law (outliers.bounded_limits), the rest marked at its edge.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import outliers, style
from cdlaw.figures.inputs import is_naive
from cdlaw.law import Law
from cdlaw.units import counted

MAX_SIZE_COLOURS = 8  # colours a reader tells apart in one sequential colormap


def _size_colours(n_groups: int) -> list:
    """One colour per size group, evenly along the sequential colormap (its middle for one)."""
    cmap = style.sequential_cmap()
    return [cmap(x) for x in np.linspace(0.0, 1.0, n_groups)] if n_groups > 1 else [cmap(0.5)]


def _size_group(ax, law: Law, runs, sizes, colour, g: int, strategies: list[str]):
    """One size group's fitted line at D′ = 0 and its runs; returns its legend handle."""
    from matplotlib.lines import Line2D

    n_line = float(sizes[0] if len(sizes) == 1 else np.exp(np.log(sizes).mean()))
    # Across every run of the group, held out and dropped ones too: how far each
    # lies from the law is what the reader compares.
    x = runs["tokens_trained"]
    grid = np.geomspace(x.min() / 1.5, x.max() * 1.5, 100)
    ax.plot(
        grid,
        law.loss_one_epoch(n_line, grid),
        color=colour,
        linewidth=1.4,
        zorder=2,
        gid=f"fit:{n_line!r}",
    )
    for s in strategies:
        pts = runs[runs["strategy"] == s]
        marker = style.strategy_style(s, strategies)["marker"]
        style.scatter_runs(
            ax, pts["tokens_trained"], pts["loss"], pts["used"], colour, marker, 22, f"{s}:{g}"
        )
    return Line2D(
        [],
        [],
        color=colour,
        marker="o",
        markeredgecolor="black",
        markersize=5,
        label=style.sizes_label(sizes, f"fit at {style.size(n_line)}"),
    )


def _sizes_key(rows, strategies: list[str], derived: bool, fit: dict | None) -> list:
    """The legend entries after the sizes: one marker per strategy, the fitted law, hollow."""
    from matplotlib.lines import Line2D

    handles = []
    if len(strategies) > 1:
        handles += [
            Line2D(
                [],
                [],
                linestyle="",
                color="0.5",
                marker=style.strategy_style(s, strategies)["marker"],
                markeredgecolor="black",
                label=f"runs, {s}",
            )
            for s in strategies
        ]
    fitted = "fitted law, every token counted as fresh" if is_naive(fit) else "fitted law"
    handles.append(
        Line2D(
            [],
            [],
            color="0.35",
            linewidth=1.4,
            label=fitted + (" (D′ = 0)" if derived and not is_naive(fit) else ""),
        )
    )
    if (~rows["used"]).any():
        handles.append(style.unused_handle())
    return handles


def sizes_figure(law: Law, rows, fit: dict | None = None):
    """Loss against tokens trained, every run a point coloured by its model size N, and
    the fitted law at D′ = 0 as one line per size (or per span of sizes, when there are
    more than MAX_SIZE_COLOURS: the line at the span's geometric-mean size).

    Line gids: "fit:<N>" at the N it is drawn for; point gids "runs:<strategy>:<group>"
    and "unused:<strategy>:<group>", group counting the size groups from the smallest.
    """
    fig, axes = style.new_figure(1, 1, panel=(6.4, 4.6))
    ax = axes[0, 0]
    strategies = style.strategy_order(rows["strategy"].unique())
    derived = bool((rows["derived_tokens"] > 0).any())
    key = _sizes_key(rows, strategies, derived, fit)
    # The loss axis: the bulk of the runs and the law at every run; the rest at the edge.
    at_runs = law.loss_one_epoch(rows["n_params"].to_numpy(float), rows["tokens_trained"])
    ylim = outliers.bounded_limits(rows["loss"], keep=[at_runs])
    off = (rows["loss"] < ylim[0]) | (rows["loss"] > ylim[1])
    # The sizes take the legend's room the key leaves (one line per size group).
    room = style.MAX_LEGEND - len(key) - int(off.any())
    groups = style.size_bins(rows["n_params"], min(MAX_SIZE_COLOURS, room))
    colours = _size_colours(len(groups))
    handles = [
        _size_group(ax, law, rows[rows["n_params"].isin(sizes)], sizes, colour, g, strategies)
        for g, (sizes, colour) in enumerate(zip(groups, colours, strict=True))
    ]
    ax.set_xscale("log")
    style.log_axis(ax, "x")
    ax.set_ylim(*ylim)
    if off.any():
        colour_of = {n: c for g, c in zip(groups, colours, strict=True) for n in g}
        outside = outliers.mark_outside(
            ax, rows["tokens_trained"], rows["loss"], [colour_of[n] for n in rows["n_params"]]
        )
        key.append(outliers.outside_handle(outside, "run", "loss"))
    axis = "tokens trained, D + D′" if derived else "fresh tokens, D"
    ax.set_xlabel(f"{axis} (tokens)", fontsize=8)
    ax.set_ylabel(style.LOSS_LABEL, fontsize=8)
    ax.tick_params(labelsize=7)

    handles += key
    n_sizes = rows["n_params"].nunique()
    extra = f"{counted(len(rows), 'run')}, {counted(n_sizes, 'model size')}"
    if n_sizes > len(groups):
        extra += f" in {len(groups)} colours"
    return style.finish(
        fig,
        f"Loss against {axis.split(',')[0]}, one colour per model size",
        style.fit_caption(fit, extra),
        handles,
    )
