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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cdlaw.govern.bands import grid_band, loss_floor, point_band
from cdlaw.govern.cooldown import Cooldown
from cdlaw.govern.curve import Curve

# What the governor is asked and says: cdlaw.govern.decision; the law along the run:
# cdlaw.govern.run_loss.
from cdlaw.govern.decision import Decision, GovernOptions, Option
from cdlaw.govern.reasons import reasons as explain
from cdlaw.govern.run_loss import calibrate, crossing, gain_per_flop, law_loss, switched_loss
from cdlaw.law import Law
from cdlaw.plan.guard import check_model
from cdlaw.plan.result import Plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NONE, REPETITION
from cdlaw.system.errors import BadInput
from cdlaw.units import format_apart

DEFAULT_DECAY_FRAC = 0.2  # WSD's usual cooldown: the last 20% of the tokens
GRID_POINTS = 400  # end points E on a log grid from the curve's start to the budget
# A switch of strategy changes the run's data, so it is advised only when the law and at
# least this share of its bootstrap laws score it better than staying (docs/govern.md).
SWITCH_SUPPORT = 0.95
# An offset larger than this share of the run's loss says the law does not describe the
# run: its G_t is the law's slope, not the run's (a warning).
LARGE_OFFSET = 0.1


# ---------------------------------------------------------------------------------------
# The decision.
# ---------------------------------------------------------------------------------------


def _need(value: float | None) -> float:
    """A value the WSD relation has always set (an end's tokens and FLOPs, the budget)."""
    if value is None:
        raise BadInput(
            "the WSD relation weighs a run's FLOPs against the plan's λ(C): give "
            "--budget-flops and --unique-tokens"
        )
    return value


def _resolve(curve: Curve, law: Law, options: GovernOptions):
    """(N, D, strategy, planned tokens, f, warnings) from the options, else the curve."""
    warnings = list(curve.warnings)
    n = options.n_params or curve.n_params
    if not n:
        raise BadInput(
            f"{curve.source} does not say the model size: give --n-params (non-embedding "
            "parameters, e.g. 60K)"
        )
    fresh = options.fresh_tokens or curve.fresh_tokens or _need(options.unique_tokens)
    if fresh > _need(options.unique_tokens) * (1 + 1e-9):
        raise BadInput(
            f"the run's fresh tokens D = {fresh:.4g} exceed --unique-tokens {options.unique_tokens:.4g}: "
            "give the unique tokens the run draws from (or its D with --fresh-tokens)"
        )
    strategy = options.strategy or curve.strategy or REPETITION
    if strategy == NONE:  # a one-epoch run that goes on past D repeats its tokens
        strategy = REPETITION
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
    return float(n), float(_need(fresh)), strategy, planned, float(f), warnings


def govern(
    curve: Curve, source: PlanningLaw, options: GovernOptions, budget_plan: Plan | None = None
) -> Decision:
    """The governor's decision for `curve` under `source`'s law, budget and unique tokens;
    budget_plan: plan_budget(source, options) where the caller has it (--watch plans once)."""
    run = _frame(curve, source, options, budget_plan)
    cal = _calibrate(curve, source, options, run)
    ends = _endings(source.law, run, cal)
    _check_losses(curve, run, cal, ends)
    gains = _gains(source.law, run, cal)
    action = _action(run, ends, gains)
    if curve.cooling:
        run.warnings.append(
            "the log's last point is already below the peak lr: this is the decision at the "
            "end of its stable phase"
        )
    return _decision(curve, source, options, run, cal, ends, gains, action)


# ---------------------------------------------------------------------------------------
# Steps of govern().
# ---------------------------------------------------------------------------------------


@dataclass
class _Frame:
    """The run as the governor sees it: what it is, where it stands, the budget's λ and the
    grid of ends E it scores."""

    n: float
    fresh: float
    strategy: str
    f: float  # decay fraction
    planned: float  # the scheduled end, tokens
    plan: Plan  # the plan at the budget
    lam: float  # λ(C)
    t_now: float  # tokens at the last stable point
    e_now: float  # where a cooldown now would end
    e_budget: float
    grid: np.ndarray  # ends E, log-spaced
    inside: np.ndarray  # bool: ends ahead of now and within the budget (the ones scored)
    warnings: list[str]

    def own(self, lw: Law) -> Callable:
        """E → lw's cooled-down loss of this run on its own strategy."""
        return lambda E: law_loss(lw, self.n, self.fresh, self.strategy, E)


@dataclass
class _Calibration:
    """The law and each bootstrap law calibrated to the run: (δ, se) each, and the widening
    of every band by the calibration's and the ratio's spread."""

    cooldown: Cooldown
    laws: list[Law]  # the law, then its bootstrap laws
    offsets: list[tuple[float, float]]
    delta: float
    delta_se: float
    widen: float
    floor: float  # the least cooled-down loss the calibrated laws allow (govern.bands)


@dataclass
class _Endings:
    """The ways to finish scored: now, the planned end, the best stop, the best switch."""

    options: list[Option]
    k_grid: np.ndarray  # the law's cooled-down loss along the grid, + δ
    switch_to: str | None
    switch_best: Option | None
    switch_support: float | None  # share of bootstrap laws scoring the switch better; None: none


@dataclass
class _Gains:
    """The gain per FLOP: now (with its band), along the grid, and where it meets λ."""

    now: float
    band: tuple[float, float] | None
    grid: np.ndarray
    cross_e: float | None
    cross_t: float | None


def _frame(curve: Curve, source: PlanningLaw, options: GovernOptions, p: Plan | None) -> _Frame:
    """Resolve the run (options, else its curve), plan the budget where p is None, and lay
    the grid of ends."""
    n, fresh, strategy, planned, f, warnings = _resolve(curve, source.law, options)
    if source.stale:  # a fit.json older than the runs beside it: said first
        warnings.insert(0, source.stale)
    p = p or plan_budget(source, options)
    t_now = curve.tokens_now
    e_now = t_now / (1 - f)
    e_budget = _need(options.budget_flops) / (6.0 * n)
    if planned is None:
        planned = e_budget
    if e_now >= e_budget:
        warnings.append("the budget is spent: a cooldown now already goes past it")
    elif planned < e_now * (1 - 1e-9):
        warnings.append(
            f"the planned end, {planned:.4g} tokens, is behind the run (a cooldown now ends at "
            f"{e_now:.4g}): it is shown for reference"
        )
    elif planned > e_budget * (1 + 1e-9):
        needs, budget = format_apart(6 * n * planned, _need(options.budget_flops))
        warnings.append(
            f"the planned end, {planned:.4g} tokens, needs {needs} FLOPs, more than the "
            f"budget {budget}"
        )
    if not source.law.form_decl.uses_derived and t_now > fresh * (1 + 1e-9):
        raise BadInput(
            f"a {source.law.form} law gives tokens past D no value, and this run is past its "
            f"D = {fresh:.4g} fresh tokens: govern it with a fit of the CD law (or a preset "
            "such as qin2026)"
        )
    end = max(planned, e_now)  # the run's N, D/N and D′/D at its end, as the law sees them
    warnings += check_model(
        source, "the run", n, fresh, max(end - fresh, 0.0), strategy, options.extrapolate
    )
    e_hi = max(e_budget, planned, e_now) * 1.0001
    e_lo = float(curve.token_counts[0]) / (1 - f)
    grid = np.geomspace(e_lo, max(e_hi, e_lo * 1.01), GRID_POINTS)
    ahead = grid >= e_now
    inside = ahead & (grid <= max(e_budget, e_now))
    if not inside.any():
        inside = ahead & (grid == grid[ahead][0])
    lam = float(p.marginal_gain_per_flop)
    return _Frame(
        n, fresh, strategy, f, planned, p, lam, t_now, e_now, e_budget, grid, inside, warnings
    )


def _calibrate(curve: Curve, source: PlanningLaw, options: GovernOptions, run: _Frame):
    """δ for the law and each bootstrap law, on the run's calibration points."""
    peak_lr = None if curve.lr is None else float(np.nanmax(curve.lr))
    cooldown = options.cooldown.for_lr(peak_lr)
    run.warnings += cooldown.unlike(run.n, peak_lr)
    laws = [source.law, *source.bootstrap]
    offsets = [calibrate(run.own(lw), curve, cooldown, run.f) for lw in laws]
    delta, delta_se = offsets[0]
    widen = 1.96 * math.hypot(delta_se, cooldown.sd)
    floor = loss_floor(laws, offsets, run.n)
    return _Calibration(cooldown, laws, offsets, delta, delta_se, widen, floor)


def _check_losses(curve: Curve, run: _Frame, cal: _Calibration, ends: _Endings) -> None:
    """BadInput when the calibrated law predicts a loss ≤ 0 for this run at any end ahead
    of it (the grid's and every option's); a warning when its offset is a large share of
    the run's loss."""
    ahead = run.grid >= run.e_now
    k = np.concatenate([ends.k_grid[ahead], [o.loss for o in ends.options]])
    if not np.isfinite(k).all() or k.min() <= 0:
        at = float(np.nanmin(k)) if np.isfinite(k).any() else math.nan
        raise BadInput(
            f"the law calibrated to this run (offset {cal.delta:+.4g} nats) predicts a loss of "
            f"{at:.4g} nats ahead of it, which no run can reach: it does not describe this "
            "run; give a law fitted on runs like it"
        )
    now = float(curve.loss[curve.calibration_points()][-1])
    if abs(cal.delta) > LARGE_OFFSET * now:
        run.warnings.append(
            f"the law misses this run's curve by {cal.delta:+.3g} nats ({abs(cal.delta) / now:.0%} "
            "of its loss): G_t is the law's slope at this run, which a law this far off may "
            "not share; a law fitted on runs like it is safer"
        )


def _option(name: str, fn, E, run: _Frame, cal: _Calibration) -> Option:
    """One way to end at E: the law's loss + δ, its band over the bootstrap laws (each
    with its own δ) widened by the calibration's and the ratio's spread (govern.bands)."""
    vals = [float(fn(lw)(E)) + d for lw, (d, _) in zip(cal.laws, cal.offsets, strict=True)]
    F = 6.0 * run.n * E
    ci = point_band(vals, cal.widen, cal.floor)
    return Option(name, float(E), vals[0], ci, F, vals[0] + run.lam * F)


def _endings(law: Law, run: _Frame, cal: _Calibration) -> _Endings:
    """Cool down now, the planned end, the best stop in the budget and, for the CD law,
    the best switch of the rest of the tokens to another strategy."""
    grid, inside, lam, n = run.grid, run.inside, run.lam, run.n
    own = run.own
    k_grid = own(law)(grid) + cal.delta
    objective = k_grid + lam * 6.0 * n * grid
    best_i = int(np.flatnonzero(inside)[np.argmin(objective[inside])])
    now = _option("cool down now", own, run.e_now, run, cal)
    # the grid's first end ahead is a little past now: now itself, where that scores better
    best_e = run.e_now if now.objective <= objective[best_i] else max(grid[best_i], run.e_now)
    options = [
        now,
        _option("planned end", own, run.planned, run, cal),
        _option("best stop", own, best_e, run, cal),
    ]
    switch_to, switch_best, support = None, None, None
    if law.form == "cd":
        for other in (s for s in law.strategies if s != run.strategy):
            fn = _switched(other, n, run.fresh, run.strategy, run.t_now)
            obj = fn(law)(grid) + cal.delta + lam * 6.0 * n * grid
            i = int(np.flatnonzero(inside)[np.argmin(obj[inside])])
            o = _option(f"switch to {other}", fn, max(grid[i], run.e_now), run, cal)
            if switch_best is None or o.objective < switch_best.objective:
                switch_to, switch_best = other, o
        # a switch changes nothing before the run passes its D (and now): one ending there
        # is the run's own, and is not shown as a switch
        takes_effect = max(run.t_now, run.fresh) * (1 + 1e-9)
        if switch_best is not None and _need(switch_best.end_tokens) <= takes_effect:
            switch_to, switch_best = None, None
        if switch_best is not None and switch_to is not None:
            options.append(switch_best)
            support = _switch_support(switch_best, switch_to, options[2], run, cal)
    else:
        run.warnings.append(f"a {law.form} law cannot mix strategies: switching is not scored")
    return _Endings(options, k_grid, switch_to, switch_best, support)


def _switch_support(switch: Option, other: str, best: Option, run: _Frame, cal: _Calibration):
    """The share of the bootstrap laws under which ending at switch.end_tokens on `other`
    scores lower in loss + λ·FLOPs than the best stop on the run's own strategy and than
    cooling down now (each law's offset cancels); None without bootstrap laws."""
    if len(cal.laws) < 3:
        return None
    fn = _switched(other, run.n, run.fresh, run.strategy, run.t_now)
    ends = np.array([run.e_now, best.end_tokens])
    price = run.lam * 6.0 * run.n
    wins = [
        float(fn(lw)(switch.end_tokens)) + price * _need(switch.end_tokens)
        < float(np.min(run.own(lw)(ends) + price * ends))
        for lw in cal.laws[1:]
    ]
    return float(np.mean(wins))


def _gains(law: Law, run: _Frame, cal: _Calibration) -> _Gains:
    """G now under every law (its band from the bootstrap laws), along the grid, and the
    end where it meets λ."""
    gains = [float(gain_per_flop(run.own(lw), run.e_now, run.n)) for lw in cal.laws]
    g_now = gains[0]
    g_band = None
    if len(gains) >= 3:
        lo, hi = np.percentile(gains[1:], [2.5, 97.5])
        g_band = (float(min(lo, g_now)), float(max(hi, g_now)))
    g_grid = gain_per_flop(run.own(law), run.grid, run.n)
    cross_e = crossing(run.grid, g_grid, run.lam, g_now, run.e_now, run.e_budget)
    cross_t = None if cross_e is None else cross_e * (1 - run.f)
    return _Gains(g_now, g_band, g_grid, cross_e, cross_t)


def _action(run: _Frame, ends: _Endings, gains: _Gains) -> str:
    """Switch when a switch beats stopping and going on; else cool down once G is below λ
    (or the best stop is now, or the budget is spent); else continue."""
    best, now, switch_best = ends.options[2], ends.options[0], ends.switch_best
    e_now = run.e_now
    stop_now = (
        gains.now < run.lam or _need(best.end_tokens) <= e_now * (1 + 1e-9) or e_now >= run.e_budget
    )
    worth_switching = (
        switch_best is not None
        and _need(switch_best.end_tokens) > e_now * (1 + 1e-6)
        and switch_best.objective < min(best.objective, now.objective)
        and (ends.switch_support is None or ends.switch_support >= SWITCH_SUPPORT)
    )
    if worth_switching:
        return "switch strategy"
    return "cool down now" if stop_now else "continue"


def _decision(curve, source, options, run: _Frame, cal: _Calibration, ends, gains, action):
    """The Decision, with its reasons and the curves of its figure."""
    switch = (ends.switch_to, ends.switch_best, ends.switch_support)
    reasons = explain(
        action, ends.options, gains.now, run.lam, gains.cross_t, run.t_now, run.strategy,
        options.budget_flops, switch, cal.delta, SWITCH_SUPPORT,
    )  # fmt: skip
    grid, k_grid = run.grid, ends.k_grid
    curve_out = {
        "observed_tokens": curve.tokens,
        "observed_loss": curve.loss,
        "calibration_tokens": curve.tokens[curve.calibration_points()],
        "end_tokens": grid,
        "cooled_loss": k_grid,
        "stable_tokens": grid * (1 - run.f),
        "stable_loss": cal.cooldown.stable(k_grid),
        "gain": gains.grid,
        **grid_band(cal.laws, cal.offsets, run.own, grid, cal.widen, cal.floor),
    }
    n = run.n
    return Decision(
        action=action,
        reasons=tuple(reasons),
        source=curve.source,
        loss_column=curve.loss_column,
        law=source.name,
        n_params=n,
        fresh_tokens=run.fresh,
        strategy=run.strategy,
        decay_frac=run.f,
        tokens_now=run.t_now,
        flops_now=6.0 * n * run.t_now,
        cooling=curve.cooling,
        gain_now=gains.now,
        gain_now_ci95=gains.band,
        threshold=run.lam,
        budget_flops=options.budget_flops,
        unique_tokens=options.unique_tokens,
        plan_n_params=run.plan.n_params,
        plan_strategy=run.plan.strategy,
        offset=cal.delta,
        offset_se=cal.delta_se,
        cross_tokens=gains.cross_t,
        cross_flops=None if gains.cross_e is None else 6.0 * n * gains.cross_e,
        switch_to=ends.switch_to if action == "switch strategy" else None,
        options=tuple(ends.options),
        cooldown=cal.cooldown.to_dict(),
        curve=curve_out,
        warnings=tuple(run.warnings),
    )


def plan_budget(source: PlanningLaw, options: GovernOptions) -> Plan:
    """The plan at the budget: its λ(C) is the governor's threshold."""
    from cdlaw.plan.planner import plan

    return plan(
        source,
        _need(options.budget_flops),
        _need(options.unique_tokens),
        extrapolate=options.extrapolate,
    )


def _switched(other: str, n: float, fresh: float, strategy: str, t_now: float):
    """law → (E → the loss if the run switches to `other` at t_now and ends at E)."""
    return lambda lw: lambda E: switched_loss(lw, n, fresh, strategy, other, t_now, E)
