"""R* = K·(D/N)^ρ·N^σ per strategy: how many passes' worth of derived tokens still pay off.

Left: R* against D/N at three model sizes; middle: R* against N at three values of D/N;
right (when the law has both repetition and paraphrase): the (N, D/N) plane split where
paraphrasing beats repetition. η grows with R* at every r, so paraphrasing beats
repetition exactly where R*_paraphrase > R*_repetition, for every amount of derived data.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import style
from cdlaw.law import Law

# mathtext, as a paper typesets them
RSTAR = r"$R^*$"
FORMULA = r"$R^* = K\,(D/N)^{\rho}\,N^{\sigma}$"
RATIO_LABEL = r"$\log_{10}\,(R^*_{\mathrm{paraphrase}}\,/\,R^*_{\mathrm{repetition}})$"


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


def paraphrase_wins(law: Law, n_params, tokens_per_param):
    """True where R*_paraphrase > R*_repetition (so η_paraphrase > η_repetition at every r)."""
    n = np.asarray(n_params, dtype=float)
    d = n * np.asarray(tokens_per_param, dtype=float)
    return law.rstar(n, d, "paraphrase") > law.rstar(n, d, "repetition")


def _rstar_lines(ax, law: Law, strategies, x_grid, refs, along_ratio: bool) -> None:
    """R* per strategy against D/N at each reference size (along_ratio), or against N at
    each reference D/N; line styles tell the references apart."""
    for s in strategies:
        st = style.strategy_style(s)
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
    """Legend entries of the curve panels: a colour per strategy, a line style per reference."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=style.strategy_style(s)["color"], linewidth=2, label=s)
        for s in strategies
    ]
    handles += [
        Line2D(
            [], [], color="0.3", linestyle=style.LINESTYLES[i], label=f"left: N = {style.size(n)}"
        )
        for i, n in enumerate(n_refs)
    ]
    handles += [
        Line2D([], [], color="0.3", linestyle=style.LINESTYLES[i], label=f"middle: D/N = {t:.3g}")
        for i, t in enumerate(t_refs)
    ]
    return handles


def _winner_map(ax, law: Law, n_grid, t_grid):
    """The (N, D/N) plane coloured by log R*_paraphrase/R*_repetition, hatched where
    paraphrasing wins, with the line of equal R*; returns the colour mesh."""
    NN, TT = np.meshgrid(n_grid, t_grid)
    ratio = np.log10(law.rstar(NN, NN * TT, "paraphrase") / law.rstar(NN, NN * TT, "repetition"))
    lim = float(np.nanmax(np.abs(ratio))) or 1.0
    mesh = ax.pcolormesh(
        NN,
        TT,
        ratio,
        cmap=style.diverging_cmap(),
        vmin=-lim,
        vmax=lim,
        shading="auto",
        rasterized=True,
    )
    wins = ratio > 0
    if wins.any():
        hatched = ax.contourf(
            NN, TT, wins.astype(float), levels=[0.5, 1.5], colors="none", hatches=["///"]
        )
        hatched.set_gid("paraphrase-wins")
    if wins.any() and (~wins).any():
        equal = ax.contour(NN, TT, ratio, levels=[0.0], colors="black", linewidths=1.6)
        equal.set_gid("equal-rstar")
    return mesh


def _winner_panel(fig, ax, law: Law, n_grid, t_grid, runs) -> list:
    """The right panel: where paraphrasing beats repetition, and the runs' cells on it;
    returns its legend entries."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = []
    mesh = _winner_map(ax, law, n_grid, t_grid)
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
    ax.set_title("where paraphrasing beats repetition", fontsize=9)
    ax.tick_params(labelsize=7)
    cbar = fig.colorbar(mesh, ax=ax, pad=0.02)
    cbar.set_label(RATIO_LABEL, fontsize=8)
    cbar.ax.tick_params(labelsize=7)
    handles.append(
        Patch(
            facecolor="white",
            edgecolor="black",
            hatch="///",
            label="right: paraphrase beats repetition",
        )
    )
    handles.append(Line2D([], [], color="black", linewidth=1.6, label=f"right: equal {RSTAR}"))
    return handles


def rstar_figure(law: Law, rows=None, fit: dict | None = None):
    """R* over model size and D/N per strategy, marking where paraphrasing wins."""
    strategies = style.strategy_order(law.strategies)
    both = {"repetition", "paraphrase"} <= set(strategies)
    fig, axes = style.new_figure(1, 3 if both else 2, panel=(3.7, 3.2))
    (n_lo, n_hi), (t_lo, t_hi), runs = _ranges(law, rows, fit)
    n_grid = np.geomspace(n_lo / 3, n_hi * 3, 120)
    t_grid = np.geomspace(t_lo / 3, t_hi * 3, 120)
    n_refs = np.unique([n_lo, float(np.sqrt(n_lo * n_hi)), n_hi])
    t_refs = np.unique([t_lo, float(np.sqrt(t_lo * t_hi)), t_hi])

    _rstar_lines(axes[0, 0], law, strategies, t_grid, n_refs, along_ratio=True)
    _rstar_lines(axes[0, 1], law, strategies, n_grid, t_refs, along_ratio=False)
    _curve_axes(axes)
    handles = _curve_key(strategies, n_refs, t_refs)
    if both:
        handles += _winner_panel(fig, axes[0, 2], law, n_grid, t_grid, runs)
    return style.finish(
        fig,
        f"{FORMULA}: how long derived tokens keep their worth",
        style.fit_caption(fit),
        handles,
        [h.get_label() for h in handles],
    )
