"""What the loss buys: each task's metric against validation loss, one panel per link.

Runs are coloured and marked by strategy (cdlaw.figures.style); the pooled link is the
black curve with its bootstrap 95% band, each strategy's own link a thin line in its
colour. Where the strategies fall on one curve, their points and thin lines sit on the
black one; a strategy shifted left or right of it buys more or less of the task per nat of
loss. The panel's title gives the collapse test (docs/downstream.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.figures import style

MAX_PANELS = 6
METRIC_LABEL = {
    "bpb": "bits per byte (gold continuation)",
    "acc": "accuracy",
    "acc_norm": "accuracy, per-character normalised",
}


def downstream_figure(result, runs: pd.DataFrame):
    """One panel per link of `result` (cdlaw.tasks.links.Downstream) with the runs of
    `runs` (a summary table with task columns)."""
    from cdlaw.fit.columns import finished

    links = result.links[:MAX_PANELS]
    runs = runs[finished(runs)] if "status" in runs.columns else runs
    ncols = min(3, len(links))
    nrows = math.ceil(len(links) / ncols)
    fig, axes = style.new_figure(nrows, ncols, panel=(3.4, 2.9))
    styles = style.strategy_styles(runs["strategy"].fillna("none").astype(str).unique())
    for i, lk in enumerate(links):
        _panel(axes[i // ncols][i % ncols], lk, runs, styles)
    for j in range(len(links), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    handles, labels = style.dedupe(*axes[0][0].get_legend_handles_labels())
    shown = f"{len(links)} of {len(result.links)} links" if len(result.links) > len(links) else ""
    caption = (
        f"links fitted to {result.n_runs} runs of {result.source} · thin lines: each "
        "strategy's own link · F, p: the strategies shifted in loss against one curve"
    )
    return style.finish(
        fig,
        "Task metric against validation loss, by strategy",
        " · ".join(p for p in (caption, shown) if p),
        handles,
        labels,
    )


def _panel(ax, lk, runs: pd.DataFrame, styles: dict[str, dict]) -> None:
    """One link: the runs by strategy, the pooled curve and band, each strategy's curve."""
    loss = pd.to_numeric(runs["loss"], errors="coerce").to_numpy(float)
    metric = pd.to_numeric(runs.get(lk.column), errors="coerce").to_numpy(float)
    ok = np.isfinite(loss) & np.isfinite(metric)
    strategy = runs["strategy"].fillna("none").astype(str).to_numpy()
    lo, hi = lk.loss_range
    pad = 0.05 * (hi - lo)
    grid = np.linspace(lo - pad, hi + pad, 200)
    if lk.bootstrap:
        curves = np.array([lk.predict(grid, b) for b in lk.bootstrap])
        band = np.nanpercentile(curves, [2.5, 97.5], axis=0)
        ax.fill_between(grid, band[0], band[1], color="0.85", zorder=1, gid="band")
    for s, st in styles.items():
        own = (lk.per_strategy.get(s) or {}).get("params")
        if own:
            ax.plot(grid, lk.predict(grid, own), color=st["color"], linestyle=st["linestyle"],
                    linewidth=1.0, zorder=2, gid=f"link:{s}")  # fmt: skip
        m = ok & (strategy == s)
        ax.scatter(loss[m], metric[m], color=st["color"], marker=st["marker"], s=20,
                   edgecolor="black", linewidth=0.4, zorder=4, label=s, gid=f"runs:{s}")  # fmt: skip
    ax.plot(grid, lk.predict(grid), color="black", linewidth=1.6, zorder=3,
            label="pooled link (95% band shaded)", gid="link:pooled")  # fmt: skip
    ax.set_xlabel(style.LOSS_LABEL, fontsize=8)
    ax.set_ylabel(METRIC_LABEL.get(lk.metric, lk.metric), fontsize=8)
    ax.set_title(f"{lk.task} {lk.metric}: {_test_line(lk)}", fontsize=8.5)
    ax.tick_params(labelsize=7)
    ax.grid(True, color="0.92", linewidth=0.6, zorder=0)


def _test_line(lk) -> str:
    c = lk.collapse
    if not lk.follows_loss:
        return f"no trend beyond noise (p = {lk.trend_p_value:.2g})"
    if c is None:
        return "one strategy"
    word = "one curve" if c.collapses else "strategies differ"
    return f"{word} (F = {c.f:.3g}, p = {c.p_value:.2g})"


def write_downstream_figure(result, runs: pd.DataFrame, path) -> Path:
    """Draw the figure of `result` and the runs it was fitted to, and write it (PNG) beside
    them: <runs>/figures/downstream.png, or t.figures/downstream.png beside a table t.csv."""
    from cdlaw.figures.inputs import figures_dir
    from cdlaw.figures.output import figure_context, save_figure

    path = Path(path)
    folder = path / "figures" if path.is_dir() else figures_dir(path)
    with figure_context():
        return save_figure(downstream_figure(result, runs), folder / "downstream.png", "png")
