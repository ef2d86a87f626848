"""Laws compared on runs none of them saw: each model size predicted by a fit without it.

One panel per law (from `cdlaw compare`, compare.json + compare_rows.parquet): observed
against predicted loss for every left-out row; the largest size — an extrapolation in N,
the error that ranks the laws — is drawn with black edges. The panel title gives the
law's held-out and leave-one-size-out log-RMSE; the winner's title says so.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import style


def compare_figure(comparison: dict, rows):
    """Observed against left-out predicted loss, one panel per law, ranked by held-out error."""
    from matplotlib.lines import Line2D

    scores = sorted(comparison["laws"], key=lambda s: _key(s["heldout_rmse_log"]))
    n = len(scores)
    ncols = min(3, n)
    nrows = -(-n // ncols)
    fig, axes = style.new_figure(nrows, ncols, panel=(3.2, 3.0))
    finite = rows[np.isfinite(rows["predicted"])]
    lo = float(min(finite["loss"].min(), finite["predicted"].min())) if len(finite) else 0.0
    hi = float(max(finite["loss"].max(), finite["predicted"].max())) if len(finite) else 1.0
    pad = 0.05 * (hi - lo) + 1e-3
    for i, score in enumerate(scores):
        ax = axes[i // ncols][i % ncols]
        mine = finite[finite["law"] == score["law"]]
        for s in style.strategy_order(mine["strategy"].unique()):
            st = style.strategy_style(s, finite["strategy"].unique())
            m = mine[mine["strategy"] == s]
            big = m["largest"].to_numpy(bool)
            for part, edge, size in ((m[~big], "none", 18), (m[big], "black", 30)):
                ax.scatter(part["loss"], part["predicted"], color=st["color"], marker=st["marker"],
                           s=size, edgecolor=edge, linewidth=0.7, zorder=4, label=s,
                           gid=f"{score['law']}:{s}")  # fmt: skip
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="0.4", linewidth=1,
                linestyle=(0, (3, 2)), zorder=1)  # fmt: skip
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_aspect("equal", adjustable="box")
        won = " (best)" if score["law"] == comparison.get("winner") else ""
        ax.set_title(
            f"{score['law']}{won}\nheld-out {score['heldout_rmse_log']:.4f} · "
            f"left-out sizes {score['loso_rmse_log']:.4f}",
            fontsize=8.5,
        )
        ax.set_xlabel("observed " + style.LOSS_LABEL, fontsize=7.5)
        ax.set_ylabel("predicted without its size", fontsize=7.5)
        ax.tick_params(labelsize=7)
        ax.grid(True, color="0.92", linewidth=0.6, zorder=0)
    for j in range(n, nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    handles, _labels = style.dedupe(*axes[0][0].get_legend_handles_labels())
    handles.append(Line2D([], [], linestyle="", marker="o", markerfacecolor="0.7",
                          markeredgecolor="black", label="largest size (extrapolation)"))  # fmt: skip
    handles.append(Line2D([], [], color="0.4", linestyle=(0, (3, 2)), label="perfect prediction"))
    caption = (
        f"{comparison.get('n_rows')} rows · Huber δ {comparison.get('huber_delta')} · "
        f"seed noise {_noise(comparison.get('seed_noise'))} · {comparison.get('verdict', '')} · "
        f"source {comparison.get('source') or 'unknown'}"
    )
    return style.finish(
        fig, "Laws compared on model sizes they never saw", caption, handles,
        [h.get_label() for h in handles],
    )  # fmt: skip


def _key(x) -> float:
    return float(x) if x is not None and np.isfinite(float(x)) else np.inf


def _noise(x) -> str:
    return "unknown" if x is None else f"{float(x):.4f}"
