"""One look for every cdlaw figure: palette, markers, captions, legends outside the data.

Colours are Okabe & Ito's colour-blind-safe set ("Color Universal Design", 2008). Each
strategy also gets its own marker and line style, so a figure printed in grey or read
by a colour-blind reader still tells the strategies apart. Band fills differ in
lightness and hatch for the same reason.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from cdlaw.strategies import NONE, PARAPHRASE, REPETITION, ordered
from cdlaw.units import format_number

# Okabe–Ito.
BLACK, ORANGE, SKY, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = (
    "#000000",
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#F0E442",
    "#0072B2",
    "#D55E00",
    "#CC79A7",
)

# Orange and blue are far apart in lightness (grey ~160 vs ~90), black is darkest.
STRATEGY_STYLE = {
    NONE: {"color": BLACK, "marker": "o", "linestyle": ":"},
    REPETITION: {"color": ORANGE, "marker": "s", "linestyle": "--"},
    PARAPHRASE: {"color": BLUE, "marker": "^", "linestyle": "-"},
}
# Every other strategy (any name: cdlaw.strategies) takes a spare style: the rest of
# Okabe–Ito, then Paul Tol's colour-blind-safe "muted" set; past those the colours come
# round again with another marker, so styles stay distinct for 12 × 8 strategies.
SPARE_COLORS = (GREEN, VERMILLION, PURPLE, SKY, "#882255", "#44AA99", "#999933", "#332288",
                "#CC6677", "#117733", "#88CCEE", "#DDCC77")  # fmt: skip
SPARE_MARKERS = ("D", "v", "P", "X", "*", "h", "<", ">")
SPARE_LINESTYLES = ("-.", (0, (5, 1, 1, 1)), (0, (1, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (5, 2)))

# The three regime bands (docs/regimes.md) (compute, data, model), light to dark in grey.
BAND_STYLE = {
    "compute-bound": {"facecolor": SKY, "alpha": 0.16, "hatch": None},
    "data-bound": {"facecolor": YELLOW, "alpha": 0.35, "hatch": "//"},
    "model-bound": {"facecolor": "#808080", "alpha": 0.30, "hatch": ".."},
}
# Distinct line styles for a handful of model sizes or plan kinds.
LINESTYLES: list[Any] = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 2))]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
# Sequential and monotonic in lightness, so it reads in grey too; the palest yellow of
# viridis is cut off because it vanishes on white.
CMAP = "viridis"
CMAP_TOP = 0.82

# The most entries one legend holds: past it, values go in bins or on a colourbar.
MAX_LEGEND = 8

LOSS_LABEL = "validation loss (nats/token)"
# Training curves draw both losses on one axis; the legend tells them apart.
CURVE_LOSS_LABEL = "val. / train loss (nats/token)"


def sequential_cmap():
    """viridis without its last, near-white yellow."""
    import matplotlib as mpl
    from matplotlib.colors import ListedColormap

    base = mpl.colormaps[CMAP]
    return ListedColormap(base(np.linspace(0.0, CMAP_TOP, 256)), name="viridis_cut")


def strategy_style(name: str, among: Iterable[str] | None = None) -> dict:
    """Colour, marker and line style of strategy `name`, for any name.

    none, repetition and paraphrase always look the same. Any other strategy takes the
    i-th spare style, i its place among the other strategies of `among` (the strategies a
    figure draws, in strategy_order), so no two strategies of one figure look alike.
    Without `among` its place comes from its name: the same in every figure, though two
    names may then share a colour.
    """
    if name in STRATEGY_STYLE:
        return dict(STRATEGY_STYLE[name])
    others = [s for s in strategy_order(among or ()) if s not in STRATEGY_STYLE]
    if name in others:
        i = others.index(name)
    else:
        i = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "little")
        i %= len(SPARE_COLORS)
    colors, markers = len(SPARE_COLORS), len(SPARE_MARKERS)
    return {
        "color": SPARE_COLORS[i % colors],
        "marker": SPARE_MARKERS[(i + i // colors) % markers],
        "linestyle": SPARE_LINESTYLES[i % len(SPARE_LINESTYLES)],
    }


def strategy_styles(names) -> dict[str, dict]:
    """strategy_style of each of `names`, all told apart: what a figure drawing these
    strategies looks each one up in."""
    names = strategy_order(names)
    return {s: strategy_style(s, names) for s in names}


def strategy_order(names) -> list[str]:
    """none, repetition, paraphrase first, then the rest alphabetically."""
    return list(ordered(names))


def tokens(x: float) -> str:
    return format_number(float(x), 3)


def size(n: float) -> str:
    """A model size as people say it: 14M, 1.2B."""
    return format_number(float(n), 3)


def fit_caption(fit: dict | None, extra: str = "") -> str:
    """One line naming the fit a figure came from: law form, rows, rmse_log, source."""
    if not fit:
        text = "no fit (run `cdlaw fit` first)"
    else:
        parts = [f"fit: {fit.get('law', 'cd')} law"]
        if fit.get("n_rows") is not None:
            used = fit.get("n_used", fit["n_rows"])
            parts.append(f"n_rows {fit['n_rows']} ({used} used)")
        if fit.get("rmse_log") is not None:
            parts.append(f"rmse_log {float(fit['rmse_log']):.4f}")
        holdout = fit.get("holdout")
        if holdout and holdout.get("rmse_log") is not None:
            parts.append(f"held-out rmse_log {float(holdout['rmse_log']):.4f}")
        parts.append(f"source {fit.get('source') or 'unknown'}")
        text = " · ".join(parts)
    return f"{text} · {extra}" if extra else text


def wrap_caption(text: str, width: int) -> str:
    """Break a " · "-separated caption into lines of at most `width` characters, between parts."""
    lines: list[str] = []
    for part in text.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "\n".join(lines)


def new_figure(
    nrows: int, ncols: int, panel: tuple[float, float] = (3.6, 2.9), side: float = 1.8, **kw
):
    """A figure on the Agg canvas with constrained layout (outside legends never clip);
    side: inches beside the panels for the legend (and a colourbar).

    Built without pyplot: no global figure registry to leak into, no GUI backend.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel[0] * ncols + side, panel[1] * nrows + 1.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def finish(fig, title: str, caption: str, handles=None, labels=None, ncol: int = 1):
    """Title on top, the fit caption underneath, one legend outside the panels (labels:
    each handle's own, get_label(), unless given)."""
    # Left-aligned, so a long title never runs under the legend on the right.
    fig.suptitle(title, fontsize=12, fontweight="bold", x=0.01, ha="left", gid="title")
    # supxlabel sits under the panels and constrained layout makes room for it.
    fig.supxlabel(
        wrap_caption(caption, int(fig.get_figwidth() * 15)),
        fontsize=7.5,
        color="0.25",
        gid="caption",
    )
    if handles:
        from matplotlib.legend_handler import HandlerTuple

        fig.legend(
            handles,
            labels if labels is not None else [h.get_label() for h in handles],
            loc="outside right center",
            fontsize=8,
            frameon=False,
            ncol=ncol,
            handler_map={Beside: HandlerTuple(ndivide=None), tuple: HandlerTuple(ndivide=1)},
        )
    return fig


UNUSED_LABEL = "hollow: not used in the fit (held out or dropped)"


def scatter_runs(ax, x, y, used, color, marker, size, gid, ring=1.2, label=None, zorder=4):
    """Runs as points: filled and edged in black where the fit used them, hollow rings in
    their colour where it did not (held out or dropped). color is one colour or one per
    point; the two collections have the gids "runs:<gid>" and "unused:<gid>"."""
    used = np.asarray(used, dtype=bool)
    x, y = np.asarray(x), np.asarray(y)
    per_point = not isinstance(color, str) and np.ndim(color) == 2
    ax.scatter(
        x[used],
        y[used],
        facecolor=color[used] if per_point else color,
        marker=marker,
        s=size,
        edgecolor="black",
        linewidth=0.5,
        zorder=zorder,
        label=label,
        gid=f"runs:{gid}",
    )
    ax.scatter(
        x[~used],
        y[~used],
        facecolor="white",
        edgecolor=color[~used] if per_point else color,
        marker=marker,
        s=size,
        linewidth=ring,
        zorder=zorder,
        label="_not used",
        gid=f"unused:{gid}",
    )


def unused_handle(label: str = UNUSED_LABEL, ring: float | None = 1.2):
    """The legend's entry for the hollow points of scatter_runs."""
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        linestyle="",
        marker="o",
        markerfacecolor="white",
        markeredgecolor="0.3",
        markeredgewidth=ring,
        label=label,
    )


def dedupe(handles, labels):
    """Keep the first handle of each label, in order."""
    seen: dict[str, object] = {}
    for h, lab in zip(handles, labels, strict=False):
        if lab and not lab.startswith("_") and lab not in seen:
            seen[lab] = h
    return list(seen.values()), list(seen)


def plain(x: float) -> str:
    """A plain number for ratios and counts: 0.5, 20, 1e+03."""
    return f"{x:g}"


def powers(x: float) -> str:
    """A power of ten as mathtext, 10¹⁸ or 3×10²⁰ (what a paper prints, not "1e18")."""
    exponent = math.floor(math.log10(x) + 1e-9)
    mantissa = x / 10.0**exponent
    if abs(mantissa - round(mantissa)) < 1e-6:
        mantissa = round(mantissa)
    if mantissa == 1:
        return rf"$\mathdefault{{10^{{{exponent}}}}}$"
    return rf"$\mathdefault{{{mantissa:g}\times10^{{{exponent}}}}}$"


def log_axis(ax, axis: str = "x", fmt=tokens) -> None:
    """Human tick labels on a log axis (10M, 1B; or 2, 5, 10), denser on short ranges.

    Call after the axis limits are final: the tick spacing depends on the range.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    decades = float(np.log10(hi / lo)) if lo > 0 and hi > lo else 10.0
    subs: tuple[float, ...]
    if decades < 0.6:
        subs = tuple(range(1, 10))
    elif decades < 1.6:
        subs = (1.0, 2.0, 5.0)
    elif decades < 3.2:
        subs = (1.0, 3.0)
    else:
        subs = (1.0,)
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(lambda v, _: fmt(v) if v > 0 else ""))
    target.set_minor_formatter(NullFormatter())
    if decades > 3.2:
        # Minor ticks add nothing a reader needs across many decades, and cost draw time.
        from matplotlib.ticker import NullLocator

        target.set_minor_locator(NullLocator())


def pad_log_range(values, factor: float = 1.3) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return float(v.min() / factor), float(v.max() * factor)


class Beside(tuple):
    """A legend handle of several markers drawn side by side (finish's legend draws a
    plain tuple of handles one over another: a run's marker on its fitted line); its
    label, where it carries one, reads as an artist's does (get_label)."""

    label = ""

    def get_label(self) -> str:
        return self.label


def size_bins(n_params, k: int) -> list[np.ndarray]:
    """The distinct model sizes in at most k groups: one size per group when there are k
    or fewer, else k log-even spans of N (empty spans dropped)."""
    sizes = np.unique(np.asarray(n_params, dtype=float))
    if len(sizes) <= k:
        return [sizes[i : i + 1] for i in range(len(sizes))]
    edges = np.geomspace(sizes[0], sizes[-1], k + 1)
    span = np.clip(np.searchsorted(edges, sizes, side="right") - 1, 0, k - 1)
    return [sizes[span == i] for i in range(k) if (span == i).any()]


def sizes_label(sizes, note: str = "") -> str:
    """N = 14M for one size, N = 14M–60M (3 sizes) for a group, with `note` after the
    count: N = 14M–60M (3 sizes, fit at 30M)."""
    if len(sizes) == 1:
        return f"N = {size(sizes[0])}"
    count = f"{len(sizes)} sizes, {note}" if note else f"{len(sizes)} sizes"
    return f"N = {size(sizes[0])}–{size(sizes[-1])} ({count})"
