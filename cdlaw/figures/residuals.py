"""How well the fit predicts each run: predicted against observed, residual against N.

Held-out runs (the largest size, with `cdlaw fit --holdout-largest`) are ringed: they
measure extrapolation, which is what a scaling law is for. Runs dropped as outliers are
crosses. The residual axis holds zero and the bulk of the residuals; a run far outside
is a triangle at the edge, counted in the legend (outliers.bounded_limits).
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import outliers, style


def _run_points(ax, x, y, m, held, dropped, st: dict, s: str) -> None:
    """One strategy's runs on one axis: used ones filled, dropped ones crosses, held-out
    ones ringed."""
    x, y = np.asarray(x), np.asarray(y)
    ok = m & ~dropped
    ax.scatter(
        x[ok],
        y[ok],
        color=st["color"],
        marker=st["marker"],
        s=28,
        edgecolor="black",
        linewidth=0.5,
        zorder=4,
        label=s,
        gid=f"runs:{s}",
    )
    ax.scatter(
        x[m & dropped],
        y[m & dropped],
        color=st["color"],
        marker="x",
        s=36,
        linewidth=1.4,
        zorder=4,
        gid=f"dropped:{s}",
    )
    ax.scatter(
        x[m & held],
        y[m & held],
        facecolor="none",
        edgecolor="black",
        marker="o",
        s=140,
        linewidth=1.4,
        zorder=5,
        gid=f"heldout:{s}",
    )


def _predicted_axes(ax_pv, rows) -> None:
    """Predicted against observed: the line y = x on square axes holding every run."""
    lo = float(np.nanmin([rows["loss"].min(), rows["predicted_loss"].min()]))
    hi = float(np.nanmax([rows["loss"].max(), rows["predicted_loss"].max()]))
    pad = 0.05 * (hi - lo) + 1e-3
    ax_pv.plot(
        [lo - pad, hi + pad],
        [lo - pad, hi + pad],
        color="0.4",
        linewidth=1,
        linestyle=(0, (3, 2)),
        zorder=1,
    )
    ax_pv.set_xlim(lo - pad, hi + pad)
    ax_pv.set_ylim(lo - pad, hi + pad)
    ax_pv.set_aspect("equal", adjustable="box")
    ax_pv.set_xlabel("observed " + style.LOSS_LABEL, fontsize=8)
    ax_pv.set_ylabel("predicted " + style.LOSS_LABEL, fontsize=8)
    ax_pv.set_title("predicted against observed", fontsize=9)


def _residual_axes(ax_res, rows, dodged) -> np.ndarray:
    """Residual against N: the zero line on a log axis of model sizes, the residual axis
    bounded to the bulk; returns the residuals off it (marked at its edge)."""
    ax_res.axhline(0.0, color="0.4", linewidth=1, linestyle=(0, (3, 2)), zorder=1)
    res = rows["residual_log"].to_numpy(float)
    ax_res.set_ylim(*outliers.bounded_limits(res, keep=[[0.0]], margin=0.08))
    off = outliers.mark_outside(ax_res, dodged, res)
    ax_res.set_xscale("log")
    x_lo, x_hi = style.pad_log_range(rows["n_params"], 1.6)
    ax_res.set_xlim(x_lo, x_hi)
    style.log_axis(ax_res, "x")
    ax_res.set_xlabel("model size, N (parameters)", fontsize=8)
    ax_res.set_ylabel("residual, log(observed / predicted) (log ratio)", fontsize=8)
    ax_res.set_title("residual against model size", fontsize=9)
    return off


def _residuals_key(ax_pv, rows, held, dropped) -> list:
    """The strategies, the perfect-prediction line, and the held-out and dropped marks."""
    from matplotlib.lines import Line2D

    handles, _ = style.dedupe(*ax_pv.get_legend_handles_labels())
    handles += [Line2D([], [], color="0.4", linestyle=(0, (3, 2)), label="perfect prediction")]
    if held.any():
        n_held = ", ".join(style.size(n) for n in sorted(rows.loc[held, "n_params"].unique()))
        handles.append(
            Line2D(
                [],
                [],
                linestyle="",
                marker="o",
                markersize=11,
                markerfacecolor="none",
                markeredgecolor="black",
                label=f"held out (N = {n_held})",
            )
        )
    if dropped.any():
        handles.append(
            Line2D([], [], linestyle="", marker="x", color="0.3", label="dropped as an outlier")
        )
    return handles


def residuals_figure(rows, fit: dict | None = None):
    """Predicted against observed loss (y = x is perfect), and log residuals against N."""
    rows = rows[np.isfinite(rows["predicted_loss"])]
    fig, axes = style.new_figure(1, 2, panel=(3.9, 3.4))
    ax_pv, ax_res = axes[0]
    held = rows["heldout"].to_numpy(bool)
    dropped = ~rows["used"].to_numpy(bool) & ~held
    order = style.strategy_order(rows["strategy"].unique())
    dodged = rows["n_params"].to_numpy(float).copy()
    for i, s in enumerate(order):
        st = style.strategy_style(s, order)
        m = (rows["strategy"] == s).to_numpy()
        # Strategies side by side at each model size (a few percent apart on the log axis).
        dodge = 1.07 ** (i - (len(order) - 1) / 2)
        _run_points(ax_pv, rows["loss"], rows["predicted_loss"], m, held, dropped, st, s)
        dodged[m] *= dodge
        _run_points(ax_res, dodged, rows["residual_log"], m, held, dropped, st, s)
    _predicted_axes(ax_pv, rows)
    off = _residual_axes(ax_res, rows, dodged)
    for ax in axes[0]:
        ax.tick_params(labelsize=7)
        ax.grid(True, color="0.92", linewidth=0.6, zorder=0)

    handles = _residuals_key(ax_pv, rows, held, dropped)
    if len(off):
        handles.append(outliers.outside_handle(off, "run", "residual"))
    return style.finish(
        fig,
        "Residuals: the fit against every run",
        style.fit_caption(fit),
        handles,
    )
