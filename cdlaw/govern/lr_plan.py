"""A run's planned learning-rate schedule, step by step to its planned end, and the
schedules of the other ways it could end (a cooldown started now, an earlier stop).

    plan = named_plan("cosine", steps=163_000, warmup=2_000, final_ratio=0.1, peak=3e-4)
    plan = file_plan(Path("schedule.csv"), tokens_per_step=None)   # step (or tokens), lr
    plan = config_plan(config)                    # a cdlaw run folder's config.json
    plan = inferred_plan(steps, lr, planned_steps=None, final_ratio=None)  # from a log's lr
    lr = plan.ending(now=80_000, end=100_000)      # follow the plan, then cool down

`lr[s − 1]` is the lr of step s. The shapes (warmup linear from peak/warmup to the peak):
cosine and linear decay from the end of warmup to `final` at the last step; wsd and 1-sqrt
hold the peak, then decay over the last `decay_frac` of the steps (linearly, or as
1 − √progress: Hägele et al. 2024, arXiv 2405.18392); constant holds the peak. cosine and
wsd are cdlaw's own schedules (cdlaw.schedule.lr_at). A wsd or constant plan is
`extendable`: its stable phase may go on past the plan, so a later end is a longer stable
phase; any other plan's lr is held at its last value beyond its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdlaw.system.errors import BadInput

SHAPES = ("cosine", "linear", "wsd", "1-sqrt", "constant")
DEFAULT_DECAY_FRAC = 0.2  # a cooldown's share of a run's steps, when the plan does not say
# A plan's lr is given relative to its peak when no lr is known (a named shape and a log
# without an lr column): the multi-power law's shape constants are read at this peak,
# the lr of the runs they were fitted on (Luo et al. 2025).
NOMINAL_PEAK = 3e-4
# The inferred shape must match the logged lr within this share of the peak, every point.
SHAPE_MATCH = 0.01


@dataclass(frozen=True)
class LrPlan:
    """The planned lr of every step (lr[s − 1] at step s) and how the run may end."""

    lr: np.ndarray
    shape: str  # one of SHAPES, or "file"
    source: str  # where the plan came from, in words
    peak: float
    final: float  # the lr a cooldown ends at
    decay_frac: float  # the share of an ending's steps its cooldown takes
    extendable: bool  # the stable phase may go on past the plan (wsd, constant)
    nominal: bool = False  # the lr is relative (peak = NOMINAL_PEAK), not the run's own

    @property
    def steps(self) -> int:
        return len(self.lr)

    def trunk(self, steps: int) -> np.ndarray:
        """The lr of steps 1..steps before any cooldown: the plan's own up to its decay
        (its stable phase held for an extendable plan), then its last lr held."""
        if self.extendable:
            lr = self.lr.copy()
            lr[int(np.argmax(lr >= self.peak)) :] = self.peak
        else:
            lr = self.lr
        if steps <= len(lr):
            return lr[:steps].copy()
        return np.concatenate([lr, np.full(steps - len(lr), lr[-1])])

    def ending(self, now: int, end: int) -> np.ndarray:
        """The schedule of a run that ends at step `end` (after `now`). An extendable plan
        holds its stable phase to max(now, end·(1 − decay_frac)), then cools down to
        `final` (as 1 − √progress for a 1-sqrt plan, else linearly). Any other plan keeps
        its own steps to now and then runs the rest of its planned decay, compressed or
        stretched to end at `end`. At the plan's own end both are the plan."""
        end = max(int(end), 1)
        if end == self.steps:
            return self.lr.copy()
        if not self.extendable:
            now = min(int(now), self.steps, end)
            rest = self.lr[now - 1 :] if now > 0 else self.lr
            at = np.arange(1, end - now + 1) * (len(rest) - 1) / max(end - now, 1)
            tail = np.interp(at, np.arange(len(rest)), rest)
            return np.concatenate([self.lr[:now], tail])
        start = min(max(int(now), round(end * (1 - self.decay_frac))), end)
        lr = self.trunk(end)
        if end > start:
            top = lr[start - 1] if start > 0 else self.peak
            p = np.arange(1, end - start + 1) / (end - start)
            fall = np.sqrt(p) if self.shape == "1-sqrt" else p
            lr[start:] = top + (min(self.final, top) - top) * fall
        return lr


def named_plan(
    shape: str,
    steps: int,
    warmup: float = 0.0,
    final_ratio: float | None = None,
    peak: float | None = None,
    decay_frac: float | None = None,
) -> LrPlan:
    """One of SHAPES over `steps` steps; warmup in steps (below 1: a share of the steps);
    final_ratio the last lr over the peak (default 0.1 for cosine, else 0); peak the lr
    (None: relative, at NOMINAL_PEAK)."""
    if shape not in SHAPES:
        raise BadInput(
            f"--schedule {shape!r} is none of {', '.join(SHAPES)}; or give --schedule-file"
        )
    if steps < 2:
        raise BadInput(
            f"the planned run has {steps} step(s): give --planned-tokens (or steps) past the log's end"
        )
    if not 0 <= warmup < steps:
        raise BadInput(f"--warmup {warmup:g} must be ≥ 0 and below the planned {steps} steps")
    if final_ratio is None:
        final_ratio = 0.1 if shape == "cosine" else 0.0
    if not 0 <= final_ratio <= 1:
        raise BadInput(f"--final-lr-ratio {final_ratio:g} must lie in [0, 1], e.g. 0.1")
    f = DEFAULT_DECAY_FRAC if decay_frac is None else decay_frac
    if not 0 < f < 1:
        raise BadInput(f"--decay-frac {f} must be between 0 and 1, e.g. 0.2")
    top = NOMINAL_PEAK if peak is None else peak
    w = round(warmup * steps) if 0 < warmup < 1 else int(warmup)
    s = np.arange(steps, dtype=float)
    lr = np.full(steps, top)
    p = np.clip((s - w) / max(1, steps - 1 - w), 0.0, 1.0)
    end = top * final_ratio
    if shape == "cosine":
        lr = end + (top - end) * 0.5 * (1 + np.cos(math.pi * p))
    elif shape == "linear":
        lr = top + (end - top) * p
    elif shape in ("wsd", "1-sqrt"):
        start = max(w, steps - max(1, round(f * steps)))
        q = np.clip((s - start + 1) / max(1, steps - start), 0.0, 1.0)
        lr = top + (end - top) * (np.sqrt(q) if shape == "1-sqrt" else q)
    if w:
        lr[:w] = top * (np.arange(w) + 1) / w
    source = f"{shape}, {steps:,} steps, warmup {w:,}, final lr {final_ratio:g}× the peak"
    extendable = shape in ("wsd", "1-sqrt", "constant")
    return LrPlan(lr, shape, source, top, end, f, extendable, nominal=peak is None)


def config_plan(config: dict) -> LrPlan | None:
    """A cdlaw run's plan from its config.json (cdlaw.schedule.lr_at); None without one."""
    from cdlaw.config import TrainConfig
    from cdlaw.schedule import lr_at

    train, steps = config.get("train"), config.get("steps")
    if not isinstance(train, dict) or not steps:
        return None
    from dataclasses import fields

    known = {f.name for f in fields(TrainConfig)}
    cfg = TrainConfig(**{k: v for k, v in train.items() if k in known})
    lr = np.fromiter((lr_at(s, int(steps), cfg) for s in range(int(steps))), float, int(steps))
    f = cfg.decay_frac if cfg.schedule == "wsd" else DEFAULT_DECAY_FRAC
    source = f"the run's config ({cfg.schedule}, {int(steps):,} steps)"
    return LrPlan(lr, cfg.schedule, source, cfg.lr, cfg.lr * cfg.final_lr_frac, f,
                  cfg.schedule == "wsd")  # fmt: skip


def file_plan(path: Path, tokens_per_step: float | None, decay_frac: float | None) -> LrPlan:
    """A schedule file: a step (or tokens) column and an lr column, at any spacing; the lr
    is interpolated linearly between its rows and held at its first before them."""
    from cdlaw.fit.columns import numbers, read_table

    if not path.is_file():
        raise BadInput(
            f"--schedule-file {path} does not exist; give a .csv or .parquet of step and lr"
        )
    frame = read_table(path)
    lower = {str(c).strip().lower(): c for c in frame.columns}
    lr_col = next((lower[c] for c in ("lr", "learning_rate") if c in lower), None)
    step_col = next((lower[c] for c in ("step", "steps", "global_step") if c in lower), None)
    tok_col = next((lower[c] for c in ("tokens", "tokens_seen") if c in lower), None)
    if lr_col is None or (step_col is None and tok_col is None):
        raise BadInput(
            f"--schedule-file {path} needs a step (or tokens) column and an lr column; it has "
            f"{', '.join(map(str, frame.columns))}"
        )
    lr = numbers(frame[lr_col]).to_numpy(float)
    if step_col is not None:
        at = numbers(frame[step_col]).to_numpy(float)
    elif tokens_per_step:
        at = numbers(frame[tok_col]).to_numpy(float) / tokens_per_step
    else:
        raise BadInput(
            f"--schedule-file {path} counts tokens, and the log does not say tokens per step: "
            "give --batch-tokens, or a step column"
        )
    ok = np.isfinite(lr) & np.isfinite(at)
    at, lr = at[ok], lr[ok]
    if len(at) < 2 or (np.diff(at) <= 0).any() or (lr < 0).any():
        raise BadInput(f"--schedule-file {path} needs at least 2 rows, steps increasing and lr ≥ 0")
    steps = round(at[-1])
    lr_steps = np.interp(np.arange(1, steps + 1), at, lr)
    peak = float(lr_steps.max())
    if peak <= 0:
        raise BadInput(f"--schedule-file {path}: every lr is 0")
    f = DEFAULT_DECAY_FRAC if decay_frac is None else decay_frac
    source = f"{path} ({steps:,} steps)"
    return LrPlan(lr_steps, "file", source, peak, float(lr_steps[-1]), f, False)


def inferred_plan(
    steps: np.ndarray,
    lr: np.ndarray,
    planned_steps: int | None,
    final_ratio: float | None,
    decay_frac: float | None,
    where: str,
) -> LrPlan:
    """The plan a log's own lr column shows: a cosine (its length and final lr read off the
    curve where the planned end is not given), or a linear decay from the end of warmup
    (linear) or later (wsd) whose end or final lr is given. BadInput otherwise, naming
    what to pass."""
    peak = float(np.nanmax(lr))
    at_peak = lr >= (1 - 1e-3) * peak
    warm = int(steps[int(np.argmax(at_peak))])
    decaying = steps[(steps > warm) & ~at_peak]
    if not len(decaying):
        if decay_frac is not None and planned_steps:
            return named_plan("wsd", planned_steps, warm, final_ratio, peak, decay_frac)
        raise BadInput(
            f"{where}: the lr has stayed at its peak, so the log does not say the schedule "
            "ahead: give --schedule (wsd, cosine, linear, 1-sqrt, constant) with "
            "--planned-tokens, or --schedule-file"
        )
    post = steps >= warm
    s, y = steps[post].astype(float), lr[post] / peak
    fit = _cosine(s, y, warm, planned_steps)
    if fit is not None:
        total, ratio = fit
        ratio = ratio if final_ratio is None else final_ratio
        return named_plan("cosine", total, warm, ratio, peak, decay_frac)
    lin = _linear(s, y, int(decaying[0]) - 1, planned_steps, final_ratio)
    if lin is not None:
        total, ratio, start = lin
        # from the end of warmup (within one logging interval): linear; later: WSD
        gap = float(np.median(np.diff(s))) if len(s) > 1 else 1.0
        shape = "linear" if start <= warm + gap else "wsd"
        f = (total - start) / total if shape == "wsd" else decay_frac
        return named_plan(shape, total, warm, ratio, peak, f)
    raise BadInput(
        f"{where}: the lr decays in a shape not recognised as a cosine, or as a linear "
        "decay whose end is known: give --schedule with --planned-tokens and "
        "--final-lr-ratio, or --schedule-file"
    )


def _cosine(s, y, warm, planned) -> tuple[int, float] | None:
    """(steps, final ratio) of the cosine from `warm` that matches y; None if none does."""
    last = float(s[-1])
    totals = [float(planned)] if planned else list(np.geomspace(last + 1, 200 * last, 400))
    best = None
    for T in totals:
        c = 0.5 * (1 + np.cos(math.pi * np.clip((s - warm) / max(T - 1 - warm, 1), 0, 1)))
        if np.ptp(c) < 1e-9:
            continue
        ratio = float(np.clip(np.sum((y - c) * (1 - c)) / np.sum((1 - c) ** 2), 0, 1))
        err = float(np.max(np.abs(c + ratio * (1 - c) - y)))
        if best is None or err < best[0]:
            best = (err, T, ratio)
    if best is None or best[0] > SHAPE_MATCH:
        return None
    if not planned:  # refine T around the grid's best
        from scipy.optimize import minimize_scalar

        def misfit(T):
            c = 0.5 * (1 + np.cos(math.pi * np.clip((s - warm) / max(T - 1 - warm, 1), 0, 1)))
            r = float(np.clip(np.sum((y - c) * (1 - c)) / np.sum((1 - c) ** 2), 0, 1))
            return float(np.sum((c + r * (1 - c) - y) ** 2)), r

        res = minimize_scalar(lambda T: misfit(T)[0], bounds=(best[1] / 1.05, best[1] * 1.05),
                              method="bounded")  # fmt: skip
        return round(res.x), misfit(res.x)[1]
    return round(best[1]), best[2]


def _linear(s, y, first, planned, final_ratio) -> tuple[int, float, float] | None:
    """(steps, final ratio, decay start) of a linear decay through y's points past `first`,
    when its planned end or its final ratio is given; None otherwise or if y is not
    linear there. The decay start is where the line meets the peak."""
    after = s > first
    if after.sum() < 2:
        return None
    slope, at = (float(v) for v in np.polyfit(s[after], y[after], 1))
    if slope >= 0 or np.max(np.abs(at + slope * s[after] - y[after])) > SHAPE_MATCH:
        return None
    start = (1 - at) / slope
    if planned:
        return int(planned), float(max(at + slope * planned, 0.0)), start
    if final_ratio is not None:
        return round((final_ratio - at) / slope), final_ratio, start
    return None
