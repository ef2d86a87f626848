"""The compute governor: continue, switch strategy or cool down now, from a run's curve.

    decision = govern(curve, load_law("runs/demo/fit.json"), GovernOptions(2e12, 96_000))

A WSD run in its stable phase can cool down at any point t; it then ends at E = t/(1 − f)
tokens (f the decay fraction) with the cooled-down loss K(E). The law gives K up to a
constant for this run: K(E) = L(N, min(E, D), E − D) + δ, with δ calibrated on the observed
stable-phase losses S through the stable-to-cooled relation (cdlaw.govern.cooldown). The
marginal gain per FLOP of going on is G(t) = −dK/dF, F = 6·N·E; the threshold is the
plan's λ(C) = −dL*/dC at the budget C (cdlaw.plan). A FLOP is worth spending on this run
while it buys at least what a FLOP buys on the compute-optimal frontier: the governor
chooses the end E minimising K(E) + λ·F(E) within the budget, for the run's own strategy
and (for the CD law) for switching the rest of the tokens to each other strategy, and
reports when G will cross λ. Bands come from the fit's bootstrap laws, each calibrated to
the run, widened by the offset's standard error and the relation's held-out spread.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from cdlaw.errors import BadInput
from cdlaw.govern.cooldown import DEMO, Cooldown
from cdlaw.govern.curve import Curve
from cdlaw.law import Law
from cdlaw.plan.result import Plan
from cdlaw.plan.source import PlanningLaw

DEFAULT_DECAY_FRAC = 0.2  # WSD's usual cooldown: the last 20% of the tokens
GRID_POINTS = 400  # end points E on a log grid from the curve's start to the budget
REL_STEP = 1e-4  # relative step in E for the central difference of K
ACTIONS = ("continue", "switch strategy", "cool down now")


@dataclass(frozen=True)
class GovernOptions:
    """The budget and what the run is, where its curve does not say (None: from the curve)."""

    budget_flops: float
    unique_tokens: float
    n_params: float | None = None
    fresh_tokens: float | None = None  # D: the run's unique tokens (default: U)
    strategy: str | None = None  # how the run makes tokens past D (default: repetition)
    planned_tokens: float | None = None  # the run's scheduled D + D′ (default: the budget's)
    decay_frac: float | None = None
    cooldown: Cooldown = DEMO


@dataclass(frozen=True)
class Option:
    """One way to finish the run: where it ends, its loss (95% band) and its cost."""

    name: str  # "cool down now", "planned end", "best stop", "switch to <s>"
    end_tokens: float
    loss: float
    loss_ci95: tuple[float, float] | None
    flops: float
    objective: float  # loss + λ·flops

    def to_dict(self) -> dict:
        return {**asdict(self), "loss_ci95": list(self.loss_ci95) if self.loss_ci95 else None}


@dataclass(frozen=True)
class Decision:
    """What the governor says and why; to_dict() is `cdlaw govern --json`."""

    action: str  # one of ACTIONS
    reasons: tuple[str, ...]
    source: str
    law: str
    n_params: float
    fresh_tokens: float
    strategy: str
    decay_frac: float
    tokens_now: float  # the last stable point: where a cooldown would start
    flops_now: float
    cooling: bool  # the log's last point is already past the peak lr
    gain_now: float  # G_t, nats per FLOP
    gain_now_ci95: tuple[float, float] | None
    threshold: float  # λ(C)
    budget_flops: float
    unique_tokens: float
    plan_n_params: float
    plan_strategy: str
    offset: float  # δ, nats
    offset_se: float
    cross_tokens: float | None  # where G falls to λ (stop point t); None: not within budget
    cross_flops: float | None
    switch_to: str | None
    options: tuple[Option, ...]
    cooldown: dict
    curve: dict = field(default_factory=dict)  # the observed and predicted curves (figure)
    warnings: tuple[str, ...] = ()

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def to_dict(self) -> dict:
        out = {
            k: getattr(self, k)
            for k in (
                "action",
                "source",
                "law",
                "n_params",
                "fresh_tokens",
                "strategy",
                "decay_frac",
                "tokens_now",
                "flops_now",
                "cooling",
                "gain_now",
                "threshold",
                "budget_flops",
                "unique_tokens",
                "plan_n_params",
                "plan_strategy",
                "offset",
                "offset_se",
                "cross_tokens",
                "cross_flops",
                "switch_to",
                "cooldown",
            )
        }
        out["reasons"] = list(self.reasons)
        out["gain_now_ci95"] = list(self.gain_now_ci95) if self.gain_now_ci95 else None
        out["options"] = [o.to_dict() for o in self.options]
        out["curve"] = {k: [float(x) for x in v] for k, v in self.curve.items()}
        out["warnings"] = list(self.warnings)
        return out


# ---------------------------------------------------------------------------------------
# The law along one run.
# ---------------------------------------------------------------------------------------


def law_loss(law: Law, n_params: float, fresh: float, strategy: str, end_tokens):
    """The law's cooled-down loss of the run ending at E tokens (fresh first, then derived)."""
    E = np.asarray(end_tokens, dtype=float)
    return law.loss(n_params, np.minimum(E, fresh), np.maximum(E - fresh, 0.0), strategy)


def switched_loss(law: Law, n_params, fresh, strategy, other, switch_tokens, end_tokens):
    """The CD law's loss if the run trains `strategy` up to switch_tokens, then `other`.

    The run's state is its effective data D_eff: the switch carries the gain made so far,
    D·R*·(1 − e^(−r/R*)) on `strategy`, over to `other` as the ratio r_o that gives `other`
    the same gain, and the rest of the tokens continue from there on `other`'s curve. So a
    switch helps only towards a strategy whose derived tokens still add more per token
    (a larger R*), and never past its own saturation D·(1 + R*_o) (docs/govern.md, limits).
    """
    E = np.asarray(end_tokens, dtype=float)
    seen = np.minimum(E, fresh)
    own = max(switch_tokens - fresh, 0.0)
    rest = np.maximum(E - max(switch_tokens, fresh), 0.0)
    gain = float(law.effective_data(n_params, fresh, own, strategy)) - fresh
    cap = fresh * float(law.rstar(n_params, fresh, other))
    if gain >= cap:  # `other` saturates below what the run has: its tokens add nothing
        total = np.full(E.shape, gain)
    else:
        start = -fresh * float(law.rstar(n_params, fresh, other)) * math.log1p(-gain / cap)
        total = law.effective_data(n_params, fresh, start + rest, other) - fresh
    total = np.where(E > max(switch_tokens, fresh), total, 0.0)
    before = law.loss(n_params, seen, np.maximum(E - fresh, 0.0), strategy)
    after = law.loss(n_params, seen + total, 0.0, "none")
    return np.where(E > max(switch_tokens, fresh), after, before)


def gain_per_flop(curve_of_e, end_tokens, n_params: float) -> np.ndarray:
    """−dK/dF with F = 6·N·E, by a central difference in E."""
    E = np.asarray(end_tokens, dtype=float)
    h = REL_STEP
    up, down = curve_of_e(E * (1 + h)), curve_of_e(E * (1 - h))
    return -(up - down) / (2 * h * E) / (6.0 * n_params)


def calibrate(law_at_stop, curve: Curve, cooldown: Cooldown, decay_frac: float):
    """(δ, its standard error): the mean over the calibration points of the cooled-down loss
    the relation gives minus the law's, at the end each point would cool down to."""
    idx = curve.calibration_points()
    t = curve.tokens[idx]
    resid = cooldown.cooled(curve.loss[idx]) - law_at_stop(t / (1 - decay_frac))
    delta = float(np.mean(resid))
    se = float(np.std(resid, ddof=1) / math.sqrt(len(resid))) if len(resid) > 1 else 0.0
    return delta, se


# ---------------------------------------------------------------------------------------
# The decision.
# ---------------------------------------------------------------------------------------


def _resolve(curve: Curve, law: Law, options: GovernOptions):
    """(N, D, strategy, planned tokens, f, warnings) from the options, else the curve."""
    warnings = []
    n = options.n_params or curve.n_params
    if not n:
        raise BadInput(
            f"{curve.source} does not say the model size: give --n-params (non-embedding "
            "parameters, e.g. 60K)"
        )
    fresh = options.fresh_tokens or curve.fresh_tokens or options.unique_tokens
    strategy = options.strategy or curve.strategy or "repetition"
    if strategy == "none":  # a one-epoch run that goes on past D repeats its tokens
        strategy = "repetition"
    if not law.knows_strategy(strategy):
        have = ", ".join(law.strategies) or "none"
        raise BadInput(
            f"the law has no parameters for strategy {strategy!r} (it has: {have}); give "
            "--strategy with one it has"
        )
    f = options.decay_frac if options.decay_frac is not None else curve.decay_frac
    if f is None:
        f = DEFAULT_DECAY_FRAC
        warnings.append(f"the log does not say its cooldown length: assumed the last {f:.0%}")
    if not 0 < f < 1:
        raise BadInput(f"--decay-frac {f} must be between 0 and 1, e.g. 0.2")
    planned = options.planned_tokens or curve.planned_tokens
    if curve.lr is None:
        warnings.append("the log has no learning rate: every point taken as the stable phase")
    return float(n), float(fresh), strategy, planned, float(f), warnings


def govern(
    curve: Curve, source: PlanningLaw, options: GovernOptions, budget_plan: Plan | None = None
) -> Decision:
    """The governor's decision for `curve` under `source`'s law, budget and unique tokens;
    budget_plan: plan_budget(source, options) where the caller has it (--watch plans once)."""
    law = source.law
    n, fresh, strategy, planned, f, warnings = _resolve(curve, law, options)
    C = options.budget_flops
    p = budget_plan or plan_budget(source, options)
    lam = float(p.marginal_gain_per_flop)
    t_now = curve.tokens_now
    e_now = t_now / (1 - f)
    e_budget = C / (6.0 * n)
    if planned is None:
        planned = e_budget
    if e_now >= e_budget:
        warnings.append("the budget is spent: a cooldown now already goes past it")
    e_hi = max(e_budget, planned, e_now) * 1.0001
    e_lo = float(curve.tokens[0]) / (1 - f)
    grid = np.geomspace(e_lo, max(e_hi, e_lo * 1.01), GRID_POINTS)
    ahead = grid >= e_now

    def own(lw: Law):
        return lambda E: law_loss(lw, n, fresh, strategy, E)

    cooldown = options.cooldown.for_lr(None if curve.lr is None else float(np.nanmax(curve.lr)))
    laws = [law, *source.bootstrap]
    offsets = [calibrate(own(lw), curve, cooldown, f) for lw in laws]
    delta, delta_se = offsets[0]
    widen = 1.96 * math.hypot(delta_se, cooldown.sd)

    def option(name, fn, E) -> Option:
        """One way to end at E: the law's loss + δ, its band over the bootstrap laws (each
        with its own δ) widened by the calibration's and the ratio's spread."""
        vals = [float(fn(lw)(E)) + d for lw, (d, _) in zip(laws, offsets, strict=True)]
        loss, lo, hi = vals[0], vals[0], vals[0]
        if len(vals) >= 3:
            lo, hi = np.percentile(vals[1:], [2.5, 97.5])
        ci = (float(min(lo, loss) - widen), float(max(hi, loss) + widen))
        F = 6.0 * n * E
        return Option(name, float(E), loss, ci, F, loss + lam * F)

    k_grid = own(law)(grid) + delta
    objective = k_grid + lam * 6.0 * n * grid
    inside = ahead & (grid <= max(e_budget, e_now))
    if not inside.any():
        inside = ahead & (grid == grid[ahead][0])
    best_i = int(np.flatnonzero(inside)[np.argmin(objective[inside])])
    options_out = [
        option("cool down now", own, e_now),
        option("planned end", own, planned),
        option("best stop", own, max(grid[best_i], e_now)),
    ]
    switch_to, switch_best = None, None
    if law.form == "cd":
        for other in (s for s in law.strategies if s != strategy):
            fn = _switched(other, n, fresh, strategy, t_now)
            obj = fn(law)(grid) + delta + lam * 6.0 * n * grid
            i = int(np.flatnonzero(inside)[np.argmin(obj[inside])])
            o = option(f"switch to {other}", fn, max(grid[i], e_now))
            if switch_best is None or o.objective < switch_best.objective:
                switch_to, switch_best = other, o
        if switch_best is not None:
            options_out.append(switch_best)
    else:
        warnings.append(f"a {law.form} law cannot mix strategies: switching is not scored")

    gains = [float(gain_per_flop(own(lw), e_now, n)) for lw in laws]
    g_now = gains[0]
    g_band = None
    if len(gains) >= 3:
        lo, hi = np.percentile(gains[1:], [2.5, 97.5])
        g_band = (float(min(lo, g_now)), float(max(hi, g_now)))
    g_grid = gain_per_flop(own(law), grid, n)
    cross_e = _crossing(grid, g_grid, lam, g_now, e_now, e_budget)
    cross_t = None if cross_e is None else cross_e * (1 - f)

    best = options_out[2]
    stop_now = g_now < lam or best.end_tokens <= e_now * (1 + 1e-9) or e_now >= e_budget
    worth_switching = (
        switch_best is not None
        and switch_best.end_tokens > e_now * (1 + 1e-6)
        and switch_best.objective < min(best.objective, options_out[0].objective)
    )
    if worth_switching:
        action = "switch strategy"
    elif stop_now:
        action = "cool down now"
    else:
        action = "continue"
    reasons = _reasons(
        action, g_now, lam, options_out, switch_to, switch_best, cross_t, t_now, strategy, delta
    )
    curve_out = {
        "observed_tokens": curve.tokens,
        "observed_loss": curve.loss,
        "calibration_tokens": curve.tokens[curve.calibration_points()],
        "end_tokens": grid,
        "cooled_loss": k_grid,
        "stable_tokens": grid * (1 - f),
        "stable_loss": cooldown.stable(k_grid),
        "gain": g_grid,
        **_grid_band(laws, offsets, own, grid, widen),
    }
    if curve.cooling:
        warnings.append(
            "the log's last point is already below the peak lr: this is the decision at the "
            "end of its stable phase"
        )
    return Decision(
        action=action,
        reasons=tuple(reasons),
        source=curve.source,
        law=source.name,
        n_params=n,
        fresh_tokens=fresh,
        strategy=strategy,
        decay_frac=f,
        tokens_now=t_now,
        flops_now=6.0 * n * t_now,
        cooling=curve.cooling,
        gain_now=g_now,
        gain_now_ci95=g_band,
        threshold=lam,
        budget_flops=C,
        unique_tokens=options.unique_tokens,
        plan_n_params=p.n_params,
        plan_strategy=p.strategy,
        offset=delta,
        offset_se=delta_se,
        cross_tokens=cross_t,
        cross_flops=None if cross_e is None else 6.0 * n * cross_e,
        switch_to=switch_to if action == "switch strategy" else None,
        options=tuple(options_out),
        cooldown=cooldown.to_dict(),
        curve=curve_out,
        warnings=tuple(warnings),
    )


def plan_budget(source: PlanningLaw, options: GovernOptions) -> Plan:
    """The plan at the budget: its λ(C) is the governor's threshold."""
    from cdlaw.plan.planner import plan

    return plan(source, options.budget_flops, options.unique_tokens)


def _switched(other: str, n: float, fresh: float, strategy: str, t_now: float):
    """law → (E → the loss if the run switches to `other` at t_now and ends at E)."""
    return lambda lw: lambda E: switched_loss(lw, n, fresh, strategy, other, t_now, E)


def _grid_band(laws, offsets, own, grid, widen) -> dict:
    """The cooled-down loss's 95% band along the grid (the law's own ± widen alone
    without bootstrap laws)."""
    vals = np.array([own(lw)(grid) + d for lw, (d, _) in zip(laws, offsets, strict=True)])
    if len(vals) >= 3:
        lo, hi = np.percentile(vals[1:], [2.5, 97.5], axis=0)
        lo, hi = np.minimum(lo, vals[0]), np.maximum(hi, vals[0])
    else:
        lo = hi = vals[0]
    return {"cooled_lo": lo - widen, "cooled_hi": hi + widen}


def _crossing(grid, gains, lam, g_now, e_now, e_budget) -> float | None:
    """The end E where G meets λ, log-interpolated: the next crossing ahead when G is still
    above λ (None when it stays above up to the budget), else the last one behind."""
    i_now = int(np.searchsorted(grid, e_now))
    if g_now < lam:
        behind = np.flatnonzero(gains[:i_now] >= lam)
        return float(grid[0]) if not len(behind) else _interp(grid, gains, lam, behind[-1] + 1)
    ahead = np.flatnonzero((gains < lam) & (np.arange(len(grid)) >= i_now))
    if not len(ahead):
        return None
    e = _interp(grid, gains, lam, int(ahead[0]))
    return e if e <= e_budget * (1 + 1e-9) else None


def _interp(grid, gains, lam, i) -> float:
    """Log-linear interpolation of where G crosses λ between grid points i − 1 and i."""
    if i == 0:
        return float(grid[0])
    g0, g1 = gains[i - 1], gains[i]
    x0, x1 = math.log(grid[i - 1]), math.log(grid[i])
    if g0 == g1:
        return float(grid[i])
    w = (g0 - lam) / (g0 - g1)
    return float(math.exp(x0 + min(max(w, 0.0), 1.0) * (x1 - x0)))


def _reasons(action, g, lam, opts, switch_to, switch_best, cross_t, t_now, strategy, delta):
    """The lines that explain the action: why first, then the numbers it rests on."""
    now, planned, best = opts[0], opts[1], opts[2]
    ratio = g / lam if lam > 0 else math.inf
    if action == "switch strategy":
        why = (
            f"switching the rest of the tokens to {switch_to} scores {switch_best.objective:.4f} "
            f"in loss + λ·FLOPs against {min(best.objective, now.objective):.4f} on {strategy}"
        )
    elif action == "cool down now":
        why = (
            f"a FLOP here buys {ratio:.2g}× what it buys on the frontier: below λ(C), so the "
            "rest of the budget is worth more elsewhere"
        )
    else:
        why = (
            f"a FLOP here still buys {ratio:.2g}× what it buys on the frontier: going on to "
            f"{best.end_tokens:.4g} tokens lowers loss + λ·FLOPs by "
            f"{now.objective - best.objective:.4f}"
        )
    lines = [
        why,
        f"G_t = {g:.3g} nats/FLOP now; λ(C) = {lam:.3g}",
        f"cool down now: loss {now.loss:.4f}; at the planned end: {planned.loss:.4f}",
    ]
    if cross_t is None:
        lines.append("G_t stays above λ up to the budget")
    elif cross_t <= t_now:
        lines.append(f"G_t fell below λ at {cross_t:.4g} tokens (now {t_now:.4g})")
    else:
        lines.append(f"G_t will cross λ at {cross_t:.4g} tokens (now {t_now:.4g})")
    if switch_best is not None:
        lines.append(
            f"switching the rest to {switch_to}: loss {switch_best.loss:.4f} at "
            f"{switch_best.end_tokens:.4g} tokens"
        )
    lines.append(f"the law calibrated to this run: offset {delta:+.4f} nats")
    return lines
