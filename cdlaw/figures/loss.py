"""Loss against tokens: the CD paper's panels in the regime bands, or one axis per table.

Which layout a table gets (is_sweep): a CD sweep (an (N, D) cell holds several runs, some
with derived tokens) gets the CD paper's signature figure; any other table (a Chinchilla
table: no derived tokens, or one run per cell) gets loss against tokens on one axis, one
colour per model size (cdlaw.figures.sizes).

The CD figure: one panel per (model size N, fresh tokens D) cell: rows are model sizes,
columns the cell's fresh-token budgets from small to large. In a panel every run starts
at D tokens (one epoch, L_1ep) and derived tokens move it right and down towards the
data floor L_D; L_N is the floor of the model size itself. The bands (docs/regimes.md):

    compute-bound   L_D < L ≤ L_1ep   more derived tokens (compute) still help
    data-bound      L_N < L ≤ L_D     only more fresh data helps
    model-bound     L ≤ L_N           only a larger model helps

L_D depends on the strategy; the bands use the lowest floor among the strategies drawn
(what the data could give with the best use of compute, as `cdlaw.regimes` does for runs
without derived tokens), and each strategy's own floor is a dashed line in its colour.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import style
from cdlaw.figures.inputs import is_naive
from cdlaw.law import Law
from cdlaw.strategies import NONE

MAX_ROWS, MAX_COLS = 5, 4
# Labels the panels draw with and the legend (_merged_key) pairs up.
ONE_EPOCH = r"$L_{\mathrm{1ep}}$: one epoch, no derived tokens"
MODEL_FLOOR = r"$L_N$: model floor"
ONE_EPOCH_RUNS = "runs, none (D′ = 0)"
DATA_FLOOR = r"$L_D$: data floor, "  # then the strategy


def is_sweep(rows) -> bool:
    """Whether rows are a CD sweep: some (N, D) cell holds more than one run, one of them
    with derived tokens. Only then do panels per (N, D) cell have curves to show."""
    cells = rows.groupby(["n_params", "fresh_tokens"])["derived_tokens"].agg(["max", "size"])
    return bool(((cells["max"] > 0) & (cells["size"] > 1)).any())


def loss_cells(rows, max_rows: int = MAX_ROWS, max_cols: int = MAX_COLS):
    """The (N, D) cells to draw, as the rows of a full grid [[(N, D), ...], ...], and how
    many cells were left out.

    Cells with derived-token runs carry the story; cells with only one-epoch runs are
    drawn only when no cell has derived tokens. When every cell fits a grid with one row
    per model size and no gaps (each size the same number of fresh-token budgets), that
    is the grid. Otherwise the panels are the cells with the most runs (a cell of one run
    shows no curve), spread over the sizes where counts tie, in reading order of (N, D),
    as many as fill whole rows.
    """
    runs = rows.groupby(["n_params", "fresh_tokens"])["derived_tokens"].agg(["max", "size"])
    if (runs["max"] > 0).any():
        runs = runs[runs["max"] > 0]
    counts = {(float(n), float(d)): int(k) for (n, d), k in runs["size"].items()}
    by_n: dict[float, list[float]] = {}
    for n, d in sorted(counts):
        by_n.setdefault(n, []).append(d)
    widths = {len(ds) for ds in by_n.values()}
    if len(by_n) <= max_rows and len(widths) == 1 and widths.pop() <= max_cols:
        return [[(n, d) for d in ds] for n, ds in by_n.items()], 0
    chosen = _most_runs(counts, max_rows * max_cols)
    n_cols = min(max_cols, len(chosen))
    chosen = sorted(chosen[: len(chosen) // n_cols * n_cols])
    grid = [chosen[i : i + n_cols] for i in range(0, len(chosen), n_cols)]
    return grid, len(counts) - len(chosen)


def _most_runs(counts: dict, k: int) -> list:
    """Up to k cells, most runs first; among equal counts the size with fewest cells
    chosen so far, then the smaller N and D. Cells of one run only when too few have more."""
    pool = (
        {c: m for c, m in counts.items() if m > 1}
        if sum(m > 1 for m in counts.values()) >= 4
        else dict(counts)
    )
    chosen: list = []
    per_n: dict[float, int] = {}
    while pool and len(chosen) < k:
        best = min(pool, key=lambda c: (-pool[c], per_n.get(c[0], 0), c))
        chosen.append(best)
        per_n[best[0]] = per_n.get(best[0], 0) + 1
        del pool[best]
    return chosen


def _data_floors(law: Law, n: float, d: float, strategies: list[str]) -> dict[str, float]:
    """Each drawn strategy's data floor L_D, for the strategies the law has parameters for."""
    floors = {}
    for s in strategies:
        if s == NONE:
            continue
        try:
            floors[s] = float(law.loss_data_floor(n, d, s))
        except KeyError:
            pass  # a strategy the law has no parameters for: its points are drawn, no curve
    return floors


def _loss_limits(cell, L_N: float, L_1ep: float) -> tuple[float, float]:
    """The panel's loss range: every run and both floors, padded."""
    losses = cell["loss"].to_numpy()
    y_lo = min(L_N, losses.min())
    y_hi = max(L_1ep, losses.max())
    pad = 0.12 * (y_hi - y_lo) + 1e-3
    return y_lo - pad, y_hi + pad


def _bands(ax, xs, ylim, L_D: float, L_1ep: float, L_N: float) -> None:
    """The compute-, data- and model-bound bands, each named at the right edge when tall enough."""
    from matplotlib.transforms import blended_transform_factory

    y_lo, y_hi = ylim
    for name, lo, hi in (
        ("compute-bound", L_D, L_1ep),
        ("data-bound", L_N, L_D),
        ("model-bound", y_lo, L_N),
    ):
        b = style.BAND_STYLE[name]
        ax.fill_between(
            xs,
            lo,
            hi,
            facecolor=b["facecolor"],
            alpha=b["alpha"],
            hatch=b["hatch"],
            edgecolor="0.55",
            linewidth=0,
            label=name,
            gid=f"band:{name}",
            zorder=0,
        )
        if hi - lo > 0.06 * (y_hi - y_lo):
            # The band's name at the right edge, where no run sits (x_hi is past every run).
            ax.text(
                0.985,
                (lo + hi) / 2,
                name,
                transform=blended_transform_factory(ax.transAxes, ax.transData),
                ha="right",
                va="center",
                fontsize=6.5,
                color="0.2",
                zorder=1,
            )


def _overfit_bands(ax, law: Law, n: float, d: float, floors: dict, x_hi: float, look) -> None:
    """The fourth regime: past each strategy's loss minimum in D′, more tokens raise the loss."""
    for s in floors:
        x_best = d + float(law.best_derived_tokens(n, d, s))
        if np.isfinite(x_best) and x_best < x_hi:
            ax.axvspan(
                x_best,
                x_hi,
                facecolor=look[s]["color"],
                alpha=0.10,
                hatch="\\\\",
                edgecolor="0.6",
                linewidth=0,
                label=f"overfit: more derived tokens raise the loss ({s})",
                gid=f"band:overfit:{s}",
                zorder=0,
            )


def _floor_lines(ax, L_1ep: float, L_N: float, floors: dict, look) -> None:
    """L_1ep, L_N and each strategy's data floor L_D as horizontal lines."""
    ax.axhline(
        L_1ep,
        color="0.3",
        linewidth=1.0,
        label=ONE_EPOCH,
        gid="L_1ep",
    )
    ax.axhline(
        L_N,
        color="black",
        linewidth=1.0,
        linestyle=(0, (1, 1)),
        label=MODEL_FLOOR,
        gid="L_N",
    )
    for s, floor in floors.items():
        st = look[s]
        ax.axhline(
            floor,
            color=st["color"],
            linewidth=1.0,
            linestyle=(0, (6, 1.5, 1, 1.5)),
            label=DATA_FLOOR + s,
            gid=f"L_D:{s}",
        )


def _fits_and_runs(ax, law: Law, cell, n, d, x_hi, strategies, floors, naive: bool, look):
    """The fitted curves from one epoch out to x_hi, and each strategy's runs on top."""
    grid = np.geomspace(d, x_hi, 200)
    if naive:
        # A naive Chinchilla fit reads D + D′ as fresh tokens: one curve for every strategy.
        ax.plot(
            grid,
            law.loss(n, grid, 0.0, NONE),
            color=style.BLACK,
            linestyle="--",
            linewidth=1.4,
            label="fit, every token counted as fresh (naive)",
            gid="fit:naive",
        )
    for s in strategies:
        st = look[s]
        if s in floors and not naive:
            ax.plot(
                grid,
                law.loss(n, d, grid - d, s),
                color=st["color"],
                linestyle=st["linestyle"],
                linewidth=1.6,
                label=f"fit, {s}",
                gid=f"fit:{s}",
            )
        pts = cell[cell["strategy"] == s]
        style.scatter_runs(
            ax,
            pts["tokens_trained"],
            pts["loss"],
            pts["used"],
            st["color"],
            st["marker"],
            30,
            s,
            label=ONE_EPOCH_RUNS if s == NONE else f"runs, {s}",
            zorder=5,
        )


def _panel(ax, law: Law, cell, n: float, d: float, strategies: list[str], naive: bool, look):
    """One (N, D) cell: the regime bands, the floors, the fitted curves and the runs; `look`
    maps each strategy to its style (style.strategy_styles)."""
    L_1ep = float(law.loss_one_epoch(n, d))
    L_N = float(law.loss_model_floor(n))
    floors = _data_floors(law, n, d, strategies)
    L_D = min(floors.values(), default=L_1ep)
    x_lo, x_hi = d / 1.4, max(cell["tokens_trained"].max() * 2.5, d * 8)
    y_lo, y_hi = _loss_limits(cell, L_N, L_1ep)

    # Bands first, so lines and points sit on top.
    _bands(ax, [x_lo, x_hi], (y_lo, y_hi), L_D, L_1ep, L_N)
    if law.form_decl.can_overfit:
        _overfit_bands(ax, law, n, d, floors, x_hi, look)
    _floor_lines(ax, L_1ep, L_N, floors, look)
    _fits_and_runs(ax, law, cell, n, d, x_hi, strategies, floors, naive, look)

    ax.set_xscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    style.log_axis(ax, "x")
    ax.set_title(f"N = {style.size(n)} · D = {style.tokens(d)} (D/N = {d / n:.3g})", fontsize=9)
    ax.set_xlabel("tokens trained, D + D′ (tokens)", fontsize=8)
    ax.set_ylabel(style.LOSS_LABEL, fontsize=8)
    ax.tick_params(labelsize=7)


def loss_figure(law: Law, rows, fit: dict | None = None):
    """Loss against tokens trained per (N, D) cell, with fitted curves and regime bands;
    for a table that is no CD sweep (is_sweep), sizes_figure."""
    if not is_sweep(rows):
        from cdlaw.figures.sizes import sizes_figure

        return sizes_figure(law, rows, fit)
    grid, left_out = loss_cells(rows)
    fig, axes = style.new_figure(len(grid), len(grid[0]), panel=(3.4, 2.7))
    all_strategies = style.strategy_order(rows["strategy"].unique())
    look = style.strategy_styles([*all_strategies, *law.strategies])
    shown = []
    for i, cells in enumerate(grid):
        for j, (n, d) in enumerate(cells):
            cell = rows[(rows["n_params"] == n) & (rows["fresh_tokens"] == d)]
            present = [s for s in all_strategies if s in set(cell["strategy"])]
            _panel(axes[i, j], law, cell, n, d, present, is_naive(fit), look)
            shown.append(cell)

    handles, labels = [], []
    for ax in axes.flat:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    handles, labels = _merged_key(*style.dedupe(handles, labels))
    if any((~cell["used"]).any() for cell in shown):
        handles.append(style.unused_handle())
        labels.append(style.UNUSED_LABEL)
    extra = "bands use the lowest L_D of the strategies shown"
    if left_out:
        extra += f" · {left_out} more (N, D) cell(s) not shown"
    return style.finish(
        fig,
        "Loss against tokens trained, in the compute-, data- and model-bound bands",
        style.fit_caption(fit, extra),
        handles,
        labels,
    )


def _merged_key(handles, labels) -> tuple[list, list]:
    """The legend, one entry per thing a reader looks up: each strategy's runs over its
    fitted curve, the one-epoch runs over L_1ep, one entry for every strategy's L_D (and
    every overfit band), each drawn in its strategy's colour."""
    entry = dict(zip(labels, handles, strict=True))
    out: dict[str, object] = {}
    for label, h in entry.items():
        if label.startswith("fit, ") and not label.startswith("fit, every"):
            continue  # drawn with its strategy's runs
        if label == ONE_EPOCH_RUNS and ONE_EPOCH in entry:
            continue  # drawn with L_1ep
        if label == MODEL_FLOOR and "model-bound" in entry:
            continue  # drawn with the model-bound band, whose top it is
        if label == ONE_EPOCH and ONE_EPOCH_RUNS in entry:
            out[r"$L_{\mathrm{1ep}}$ and runs of one epoch (D′ = 0)"] = (h, entry[ONE_EPOCH_RUNS])
        elif label == "model-bound" and MODEL_FLOOR in entry:
            out[r"model-bound, below $L_N$ (model floor)"] = (h, entry[MODEL_FLOOR])
        elif label.startswith("runs, "):
            s = label[len("runs, ") :]
            fit = entry.get(f"fit, {s}")
            out[f"{s}: runs and fit" if fit else f"{s}: runs"] = (fit, h) if fit else h
        elif label.startswith(DATA_FLOOR):
            floors = [k for k in entry if k.startswith(DATA_FLOOR)]
            if len(floors) == 1:
                out[label] = h
            elif label == floors[0]:
                out[r"$L_D$: data floor, in each strategy's colour"] = style.Beside(
                    entry[k] for k in floors
                )
        elif label.startswith("overfit: "):
            bands = [k for k in entry if k.startswith("overfit: ")]
            if label == bands[0]:
                name = label if len(bands) == 1 else label[: label.rindex(" (")]
                out[name] = style.Beside(entry[k] for k in bands) if len(bands) > 1 else h
        else:
            out[label] = h
    return list(out.values()), list(out)
