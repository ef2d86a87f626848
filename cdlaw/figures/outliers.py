"""Axes bounded to the bulk of the points and the law; outliers marked at the edge.

    ax.set_ylim(*bounded_limits(loss, keep=[law_curve]))   # the bulk and the law in view
    off = mark_outside(ax, x, loss)                          # the rest: triangles at the edge
    handles.append(outside_handle(off, "run", "loss"))       # counted in the legend

A point is an outlier by Tukey's far-out fences; one that would not squash the rest still
comes back into view. The look (colours, legend handles) is cdlaw.figures.style's.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import style

# Tukey's far-out fences: a point more than this many interquartile ranges beyond the
# quartiles is an outlier, drawn at the axis edge rather than stretching the axis.
FENCE = 3.0
# ... unless the axis holding them spans at most this factor times the bulk's.
OUTLIER_ROOM = 2.0


def bulk_range(values, fence: float = FENCE, log: bool = False) -> tuple[float, float] | None:
    """The smallest and largest of `values` inside Tukey's fences (fence interquartile
    ranges beyond the quartiles; on log10 of the values when log), or None when no value
    is finite. With four values or fewer every one is the bulk."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if not len(v):
        return None
    w = np.log10(v) if log else v
    if len(w) > 4:
        q1, q3 = np.percentile(w, [25, 75])
        spread = max(q3 - q1, 1e-12)
        inside = (w >= q1 - fence * spread) & (w <= q3 + fence * spread)
        v = v[inside]
    return float(v.min()), float(v.max())


def bounded_limits(points, keep=(), margin: float = 0.06, log: bool = False, near=None):
    """Axis limits holding the bulk of `points` (bulk_range) and every value of `keep` (the
    fitted curves and reference lines: the law is always in view), padded by margin of the
    span on each side (in log10 when log). Points beyond the bulk come back into view,
    nearest first, while the axis spans at most OUTLIER_ROOM times the span without them:
    only runs that would squash the rest go to the edge (mark_outside). near: (lo, hi),
    a window no point inside of is an outlier (η in [−1, 2])."""
    parts = [np.asarray(k, dtype=float).ravel() for k in keep]
    bulk = bulk_range(points, log=log)
    if near is not None:
        p = np.asarray(points, dtype=float)
        parts.append(p[(p >= near[0]) & (p <= near[1])])
    lo, hi = _span([*parts, np.asarray(bulk if bulk is not None else [])], log)
    # Back into view, nearest first, every point that widens the axis by less than
    # OUTLIER_ROOM in all.
    to = np.log10 if log else (lambda v: v)
    room = OUTLIER_ROOM * (to(hi) - to(lo))
    v = np.asarray(points, dtype=float)
    v = v[np.isfinite(v) & ((v > 0) if log else True) & ((v < lo) | (v > hi))]
    for x in sorted(v, key=lambda x: max(to(lo) - to(x), to(x) - to(hi))):
        if max(to(hi), to(x)) - min(to(lo), to(x)) <= room:
            lo, hi = min(lo, x), max(hi, x)
    if log:
        a, b = np.log10(lo), np.log10(hi)
        pad = margin * (b - a) or 0.05
        return 10 ** (a - pad), 10 ** (b + pad)
    pad = margin * (hi - lo) or 0.05 * (abs(hi) or 1.0)
    return lo - pad, hi + pad


def _span(parts, log: bool) -> tuple[float, float]:
    v = np.concatenate([np.ravel(p) for p in parts]) if parts else np.array([1.0])
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    return (float(v.min()), float(v.max())) if len(v) else (1.0, 1.0)


def mark_outside(ax, x, y, colour="0.6", size: float = 46, gid: str = "outside") -> np.ndarray:
    """Points whose y lies beyond the axis' limits, drawn as triangles edged in vermillion
    just inside the edge they passed (▲ at the top, ▼ at the bottom) at their own x; returns
    their values. Call after the y-limits are final. colour: one colour or one per point. The triangles' collections
    have the gids "<gid>:above" and "<gid>:below"."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    lo, hi = ax.get_ylim()
    log = ax.get_yscale() == "log"
    to = np.log10 if log else (lambda v: v)
    back = (lambda v: 10**v) if log else (lambda v: v)
    span = to(hi) - to(lo)
    per_point = not isinstance(colour, str) and np.ndim(colour) == 2
    off = []
    for side, mask, edge, marker in (
        ("above", y > hi, back(to(hi) - 0.035 * span), "^"),
        ("below", y < lo, back(to(lo) + 0.035 * span), "v"),
    ):
        mask = mask & np.isfinite(y)
        if not mask.any():
            continue
        off.append(y[mask])
        ax.scatter(
            x[mask],
            np.full(int(mask.sum()), edge),
            marker=marker,
            s=size,
            facecolor=np.asarray(colour)[mask] if per_point else colour,
            edgecolor=style.VERMILLION,
            linewidth=1.4,
            zorder=6,
            gid=f"{gid}:{side}",
        )
        ax.set_ylim(lo, hi)
    return np.concatenate(off) if off else np.array([])


def outside_handle(values, what: str = "run", name: str = ""):
    """The legend's entry for mark_outside's triangles (values: what mark_outside returned
    for every panel), labelled with their count and how far out they lie."""
    from matplotlib.lines import Line2D

    up, down = (
        Line2D(
            [],
            [],
            linestyle="",
            marker=m,
            markerfacecolor="0.6",
            markeredgecolor=style.VERMILLION,
            markeredgewidth=1.4,
        )
        for m in ("^", "v")
    )
    values = np.sort(np.asarray(values, dtype=float))
    s = "" if len(values) == 1 else "s"
    where = f"{values[0]:.3g}" if len(values) == 1 else f"{values[0]:.3g} to {values[-1]:.3g}"
    handle = style.Beside((up, down))
    handle.label = f"{len(values)} {what}{s} off the axis, at its edge ({name} {where})"
    return handle
