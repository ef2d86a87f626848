"""η, the worth of a derived token relative to a fresh one, against r = D′/D.

One panel per strategy (PANELS_PER_ROW to a row). Points are the empirical η of each run (docs/files.md: the fresh data
its observed gain over one epoch was worth); lines are the fitted η(r) of each (N, D)
cell. Colour is D/N (viridis: ordered in lightness, so it reads in grey); marker and
line style are the model size, or a span of sizes when there are more than the legend
holds. The η axis holds η = 0, η = 1, every fitted curve and the bulk of the runs
(outliers.bounded_limits); a run far outside is a triangle at the edge, counted in the legend.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import outliers, style
from cdlaw.law import Law

PANELS_PER_ROW = 4
NEVER_OUTLIERS = (-1.0, 2.0)
KEY_ENTRIES = 4  # after the sizes: empirical η, not used, fitted η(r), η = 1


def eta_limits(etas, curves=(), margin: float = 0.06) -> tuple[float, float]:
    """y-limits holding η = 0, the η = 1 reference, every fitted curve and the bulk of the
    runs' finite η (outliers.bulk_range), with a margin of `margin` times that span on each
    side so no point sits on an edge. An η between −1 and 2 is never an outlier: it is
    on the scale of the η = 0 and η = 1 references."""
    return outliers.bounded_limits(
        etas, keep=[[0.0, 1.0], *curves], margin=margin, near=NEVER_OUTLIERS
    )


def _eta_runs(law: Law, rows):
    """The runs with derived tokens to draw, and their strategies: those the law knows,
    or every strategy when it knows none of them."""
    derived = rows[(rows["derived_tokens"] > 0) & rows["strategy"].isin(list(law.strategies))]
    strategies = style.strategy_order(derived["strategy"].unique())
    if not strategies:  # runs with derived tokens, but of strategies the law does not know
        derived = rows[rows["derived_tokens"] > 0]
        strategies = style.strategy_order(derived["strategy"].unique())
    return derived, strategies


def _eta_panel(ax, law: Law, pts, s: str, sizes, colour_of, marker_of, line_of) -> list:
    """One strategy: the fitted η(r) of each (N, D) cell and every run's empirical η;
    returns the curves' values (what the η axis must hold)."""
    r_lo, r_hi = pts["derived_ratio"].min() / 2, pts["derived_ratio"].max() * 2
    grid = np.geomspace(r_lo, r_hi, 200)
    curves = []
    if s in law.strategies:
        for (n, d), _ in pts.groupby(["n_params", "fresh_tokens"]):
            curves.append(law.eta(n, d, grid, s))
            ax.plot(
                grid,
                curves[-1],
                color=colour_of(d / n),
                linestyle=line_of[n],
                linewidth=1.3,
                zorder=2,
                gid=f"eta:{n:g}:{d:g}",
            )
    for n in sizes:
        p = pts[pts["n_params"] == n]
        if not len(p):
            continue
        style.scatter_runs(
            ax,
            p["derived_ratio"],
            p["empirical_eta"],
            p["used"],
            colour_of(p["tokens_per_param"].to_numpy()),
            marker_of[n],
            34,
            f"{n:g}",
            ring=1.3,
        )
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle=(0, (2, 2)), zorder=1)
    ax.set_xscale("log")
    ax.set_xlim(r_lo, r_hi)
    style.log_axis(ax, "x", style.plain)
    ax.set_title(f"{s}", fontsize=10)
    ax.set_xlabel("derived ratio r = D′/D (tokens per fresh token)", fontsize=8)
    ax.set_ylabel(r"$\eta$, value of a derived token (fresh token = 1)", fontsize=8)
    ax.tick_params(labelsize=7)
    return curves


def _eta_key(groups, marker_of, line_of) -> list:
    """A marker and line style per model size (or span of sizes), then what points and
    lines mean."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D(
            [],
            [],
            color="0.35",
            marker=marker_of[g[0]],
            linestyle=line_of[g[0]],
            markeredgecolor="black",
            markersize=6,
            label=style.sizes_label(g),
        )
        for g in groups
    ]
    handles += [
        Line2D(
            [],
            [],
            linestyle="",
            marker="o",
            markerfacecolor="0.5",
            markeredgecolor="black",
            label=r"empirical $\eta$ of a run",
        ),
        style.unused_handle("run not used in the fit", ring=None),
        Line2D([], [], color="0.35", linewidth=1.3, label=r"fitted $\eta(r)$ of the run's (N, D)"),
        Line2D(
            [],
            [],
            color="0.5",
            linewidth=0.8,
            linestyle=(0, (2, 2)),
            label=r"$\eta = 1$: as good as fresh",
        ),
    ]
    return handles


def eta_figure(law: Law, rows, fit: dict | None = None):
    """Empirical η against r with the fitted η curves, one panel per strategy."""
    import matplotlib as mpl

    derived, strategies = _eta_runs(law, rows)
    ncols = min(len(strategies), PANELS_PER_ROW)
    nrows = -(-len(strategies) // ncols)
    # A single panel is too narrow to lend the colourbar and the legend their room.
    side = 4.4 if ncols == 1 else 1.8
    fig, axes = style.new_figure(nrows, ncols, panel=(4.2, 3.4), side=side, sharey=True)
    tpp = derived["tokens_per_param"]
    norm = mpl.colors.LogNorm(tpp.min() / 1.05, tpp.max() * 1.05)
    cmap = style.sequential_cmap()
    sizes = sorted(derived["n_params"].unique())
    # One marker per size while the legend holds them all (with room for the outliers'
    # entry), else per span of sizes.
    groups = style.size_bins(sizes, style.MAX_LEGEND - KEY_ENTRIES - 1)
    marker_of, line_of = {}, {}
    for i, g in enumerate(groups):
        for n in g:
            marker_of[n] = style.MARKERS[i % len(style.MARKERS)]
            line_of[n] = style.LINESTYLES[i % len(style.LINESTYLES)]

    curves = []
    for ax, s in zip(axes.flat, strategies, strict=False):
        pts = derived[derived["strategy"] == s]
        curves += _eta_panel(ax, law, pts, s, sizes, lambda t: cmap(norm(t)), marker_of, line_of)
        ax.title.set_color(style.strategy_style(s, strategies)["color"])
    for ax in axes.flat[len(strategies) :]:
        ax.set_axis_off()
    drawn = derived[derived["strategy"].isin(strategies)]
    axes[0, 0].set_ylim(*eta_limits(drawn["empirical_eta"].to_numpy(), curves))
    marked = []
    for ax, s in zip(axes.flat, strategies, strict=False):
        pts = drawn[drawn["strategy"] == s]
        colours = cmap(norm(pts["tokens_per_param"].to_numpy()))
        marked += [outliers.mark_outside(ax, pts["derived_ratio"], pts["empirical_eta"], colours)]
    outside = np.concatenate(marked) if marked else np.array([])

    sm = mpl.cm.ScalarMappable(norm=norm, cmap=cmap)
    cbar = fig.colorbar(sm, ax=axes[0, -1], location="right", pad=0.02)
    cbar.set_label("fresh tokens per parameter, D/N (tokens/param)", fontsize=8)
    cbar.ax.tick_params(labelsize=7, which="both")
    style.log_axis(cbar.ax, "y", style.plain)

    handles = _eta_key(groups, marker_of, line_of)
    if len(outside):
        handles.append(outliers.outside_handle(outside, "run", "η"))
    return style.finish(
        fig,
        "Worth of a derived token, η, against the derived ratio r = D′/D",
        style.fit_caption(fit),
        handles,
    )
