"""Training curves: validation loss against tokens seen, one line per run.

One panel per model size; colour, marker and line style are the strategy. Each run ends
in a marker at its final loss, the number the fit uses. Validation is evaluated every
few hundred steps, so the training loss (metrics.parquet's train_loss, the mean over each
logging interval, logged far more often) is drawn faintly behind it to show the shape of
the run between evaluations. Both share the y axis, so its label names both and the
legend tells them apart.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import style
from cdlaw.units import counted

MAX_PANELS = 6


def _runs_with_curves(metrics: dict, summary) -> list[tuple]:
    """(run_id, metrics, N, strategy) of every run with some finite validation loss; N and
    strategy from summary (NaN and "run" when it does not name the run)."""
    info = {}
    if summary is not None and len(summary) and "run_id" in summary.columns:
        for rec in summary.to_dict("records"):
            info[str(rec["run_id"])] = rec
    runs = []
    for run_id, m in metrics.items():
        if "val_loss" not in m.columns or "tokens_seen" not in m.columns:
            continue
        if not np.isfinite(m["val_loss"].to_numpy(float)).any():
            continue
        rec = info.get(str(run_id), {})
        runs.append((run_id, m, float(rec.get("n_params", np.nan)), rec.get("strategy", "run")))
    return runs


def _panel_sizes(runs: list[tuple]) -> list:
    """The model sizes that get a panel: at most MAX_PANELS, evenly spread ([NaN] for none)."""
    sizes = sorted({n for _, _, n, _ in runs if np.isfinite(n)})
    keys: list = sizes if sizes else [np.nan]
    if len(keys) > MAX_PANELS:
        idx = np.unique(np.round(np.linspace(0, len(keys) - 1, MAX_PANELS)).astype(int))
        keys = [keys[i] for i in idx]
    return keys


def _run_curve(ax, run_id, m, st: dict) -> None:
    """One run: its training loss faint, its validation loss, a marker at its final loss."""
    seen = m["tokens_seen"].to_numpy(float)
    if "train_loss" in m.columns:
        ax.plot(
            seen,
            m["train_loss"].to_numpy(float),
            color=st["color"],
            linewidth=0.6,
            alpha=0.22,
            zorder=1,
            gid=f"train:{run_id}",
        )
    val = m["val_loss"].to_numpy(float)
    ok = np.isfinite(val)
    x, y = seen[ok], val[ok]
    ax.plot(
        x,
        y,
        color=st["color"],
        linestyle=st["linestyle"],
        linewidth=1.1,
        alpha=0.9,
        marker=st["marker"],
        markersize=2.5,
        zorder=3,
        gid=f"run:{run_id}",
    )
    ax.plot(
        x[-1:],
        y[-1:],
        color=st["color"],
        marker=st["marker"],
        markersize=5,
        markeredgecolor="black",
        markeredgewidth=0.5,
        linestyle="",
    )


def _curves_key(strategies: list[str]) -> list:
    """A validation line per strategy, the faint training loss and the final marker."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D(
            [],
            [],
            color=style.strategy_style(s, strategies)["color"],
            linestyle=style.strategy_style(s, strategies)["linestyle"],
            marker=style.strategy_style(s, strategies)["marker"],
            markeredgecolor="black",
            label=f"validation loss, {s}",
        )
        for s in strategies
    ]
    handles.append(
        Line2D([], [], color="0.5", linewidth=0.6, alpha=0.5, label="training loss (faint)")
    )
    handles.append(
        Line2D(
            [],
            [],
            linestyle="",
            marker="o",
            color="0.5",
            markeredgecolor="black",
            label="final validation loss",
        )
    )
    return handles


def curves_figure(metrics: dict, summary=None, fit: dict | None = None):
    """Validation loss against tokens seen for every run with a metrics.parquet."""
    runs = _runs_with_curves(metrics, summary)
    keys = _panel_sizes(runs)
    ncols = int(np.ceil(np.sqrt(len(keys))))
    nrows = -(-len(keys) // ncols)
    fig, axes = style.new_figure(nrows, ncols, panel=(3.5, 2.8))
    strategies = style.strategy_order({s for *_, s in runs})
    shown = 0
    for ax, n in zip(axes.flat, keys, strict=False):
        for run_id, m, rn, s in runs:
            if rn == n or (np.isnan(n) and np.isnan(rn)):
                _run_curve(ax, run_id, m, style.strategy_style(s, strategies))
                shown += 1
        ax.set_xscale("log")
        style.log_axis(ax, "x")
        ax.set_title(f"N = {style.size(n)}" if np.isfinite(n) else "runs", fontsize=9)
        ax.set_xlabel("tokens seen (tokens)", fontsize=8)
        ax.set_ylabel(style.CURVE_LOSS_LABEL, fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(keys) :]:
        ax.set_axis_off()
    handles = _curves_key(strategies)
    return style.finish(
        fig,
        f"Loss during training ({counted(shown, 'run')}): validation, training faint behind it",
        style.fit_caption(fit, counted(len(metrics), "metrics file")),
        handles,
        [h.get_label() for h in handles],
    )
