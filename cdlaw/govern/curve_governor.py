"""The governor under the run's own curve law: the loss at every way the run could end,
and, with a budget, whether a FLOP more on it buys what a FLOP buys on the frontier.

    decision = govern_curve(curve, source, GovernOptions(2e19, 5e9, schedule="cosine", ...))

The ends are scored as cdlaw.govern.governor scores them under the WSD relation, with
K(E) the continuation's loss (cdlaw.govern.curve_run): a run ending at step E follows its
planned schedule to max(now, E·(1 − f)), then cools down to the plan's final lr (a
cooldown started now is the end E = now/(1 − f); the planned end is the planned schedule
itself). With a budget C and a law, G = −dK/dF along those ends meets λ(C) where the best
stop lies; a switch of strategy (the CD law only) changes what each token past D is worth.
Without a budget the endings are predicted and nothing is weighed against FLOPs.
"""

from __future__ import annotations

import numpy as np

from cdlaw.govern.curve import Curve
from cdlaw.govern.curve_run import CurveRun, cooldown_steps, curve_run
from cdlaw.govern.decision import Decision, GovernOptions, Option
from cdlaw.govern.governor import SWITCH_SUPPORT, plan_budget
from cdlaw.govern.reasons import reasons
from cdlaw.govern.run_loss import crossing
from cdlaw.plan.result import Plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.system.errors import BadInput

GRID_POINTS = 40  # ends scored between a cooldown now and the last end allowed


def govern_curve(
    curve: Curve,
    source: PlanningLaw | None,
    options: GovernOptions,
    budget_plan: Plan | None = None,
) -> Decision:
    """The decision for `curve` under its own curve law (source: the CD law for λ and η,
    None without one); budget_plan as cdlaw.govern.governor.govern takes it."""
    lam, plan = 0.0, None
    budget_steps = None
    if options.budget_flops is not None:
        plan, lam = _threshold(source, options, budget_plan)
    run = curve_run(curve, source, options, _budget_steps(curve, options))
    if options.budget_flops is not None:
        per_step = run.flops(1)
        if per_step is None:
            raise BadInput(
                "weighing FLOPs needs the run's N and tokens: give --n-params, and "
                "--batch-tokens where the log counts steps only"
            )
        budget_steps = int(options.budget_flops / per_step)
    ends = _ends(run, budget_steps)
    rows = [run.end(run.plan.ending(run.now, e)) for e in ends]
    k = np.array([r[0] for r in rows])
    lo, hi = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    flops = np.array([run.flops(e) or np.nan for e in ends])
    price = np.where(np.isfinite(flops), lam * flops, 0.0)
    inside = ends <= (budget_steps or ends[-1])
    inside[0] = True
    best = int(np.argmin(np.where(inside, k + price, np.inf)))
    now = _option("cool down now", run, int(ends[0]), rows[0], lam)
    planned = _option("planned end", run, run.plan.steps, run.end(run.plan.lr), lam)
    best_opt = _option("best stop", run, int(ends[best]), rows[best], lam)
    options_out = [now, planned, best_opt]
    switch_to, switch, support = _switch(run, ends, inside, lam, source, options)
    if switch is not None:
        options_out.append(switch)
    gains = -np.gradient(k, flops) if np.isfinite(flops).all() and len(k) > 1 else None
    g_now = None if gains is None else float(gains[0])
    cross_e = None
    if gains is not None and options.budget_flops is not None:
        e_tok = np.asarray(run.tokens(ends), dtype=float)
        cross_e = crossing(e_tok, gains, lam, g_now, e_tok[0], e_tok[0] * budget_steps / ends[0])
    action = _action(run, options, now, best_opt, switch, support, g_now, lam, budget_steps)
    return _decision(run, options, source, plan, lam, action, options_out, switch_to, support,
                     ends, k, lo, hi, gains, cross_e)  # fmt: skip


def _threshold(source, options, budget_plan) -> tuple[Plan, float]:
    if source is None:
        raise BadInput(
            "a budget is weighed against the plan's λ(C), which needs a law: give --law (a "
            "fit.json or a preset such as qin2026), or leave out --budget-flops"
        )
    if options.unique_tokens is None:
        raise BadInput("a budget needs the corpus: give --unique-tokens with --budget-flops")
    plan = budget_plan or plan_budget(source, options)
    return plan, float(plan.marginal_gain_per_flop)


def _budget_steps(curve: Curve, options: GovernOptions) -> int | None:
    """The steps the budget allows, where N and the tokens per step are known already."""
    n = options.n_params or curve.n_params
    tps = curve.tokens_per_step or options.batch_tokens
    if options.budget_flops is None or not n or not tps:
        return None
    return int(options.budget_flops / (6.0 * n * tps))


def _ends(run: CurveRun, budget_steps: int | None) -> np.ndarray:
    """Ends from a cooldown now to the planned end (and on to the budget, if larger)."""
    first = cooldown_steps(run)
    last = max(run.plan.steps, budget_steps or 0, first)
    grid = np.unique(np.round(np.geomspace(first, last, GRID_POINTS)).astype(int))
    return np.unique(
        np.concatenate([grid, [first], [run.plan.steps] if run.plan.steps >= first else []])
    ).astype(int)


def _option(name: str, run: CurveRun, end: int, row, lam: float) -> Option:
    loss, lo, hi = row
    flops = run.flops(end)
    tokens = run.tokens(end)
    return Option(name, None if tokens is None else float(tokens), float(loss), (float(lo), float(hi)),
                  flops, float(loss) + lam * (flops or 0.0), float(end))  # fmt: skip


def _switch(run: CurveRun, ends, inside, lam, source, options):
    """The best switch of the rest of the tokens to another strategy (the CD law and a
    budget only): (strategy, its option, the share of refits scoring it better)."""
    if source is None or options.budget_flops is None or run.weights is None:
        return None, None, None
    if source.law.form != "cd":
        return None, None, None
    best = None
    for other in (s for s in source.law.strategies if s != run.strategy):
        w = run.switched(other)
        rows = [run.end(run.plan.ending(run.now, e), w) for e in ends]
        obj = np.array(
            [r[0] + lam * (run.flops(e) or 0.0) for r, e in zip(rows, ends, strict=True)]
        )
        i = int(np.argmin(np.where(inside, obj, np.inf)))
        o = _option(f"switch to {other}", run, int(ends[i]), rows[i], lam)
        if best is None or o.objective < best[1].objective:
            best = (other, o, w)
    # a switch changes nothing before the run passes its D: such an ending is its own
    if best is None or (best[1].end_tokens or 0.0) <= max(
        run.fresh or 0.0, float(run.tokens(run.now) or 0.0)
    ):
        return None, None, None
    other, opt, w = best
    own = run.cont.draws_at(run.plan.ending(run.now, int(opt.end_step or 0)), run.weights)
    alt = run.cont.draws_at(run.plan.ending(run.now, int(opt.end_step or 0)), w)
    support = float(np.mean(alt < own)) if len(own) else None
    return other, opt, support


def _action(run, options, now, best, switch, support, g_now, lam, budget_steps) -> str:
    if options.budget_flops is None:
        return "cool down now" if now.loss < best.loss else "continue"
    if (
        switch is not None
        and (switch.end_step or 0) > run.now
        and switch.objective < min(best.objective, now.objective)
        and (support is None or support >= SWITCH_SUPPORT)
    ):
        return "switch strategy"
    spent = budget_steps is not None and now.end_step is not None and now.end_step >= budget_steps
    stop = (g_now is not None and g_now < lam) or (best.end_step or 0) <= (now.end_step or 0)
    return "cool down now" if stop or spent else "continue"


def _decision(run: CurveRun, options, source, plan, lam, action, opts, switch_to, support,
              ends, k, lo, hi, gains, cross_e) -> Decision:  # fmt: skip
    from cdlaw.govern.curve_report import curve_data, explain

    t_now = run.tokens(run.now)
    cross_t = cross_e  # the end where G meets λ
    if options.budget_flops is not None and gains is not None:
        lines = reasons(action, opts, float(gains[0]), lam, cross_t, float(t_now or 0),
                        run.strategy, options.budget_flops,
                        (switch_to, opts[3] if len(opts) > 3 else None, support), None,
                        SWITCH_SUPPORT, explain(run)[0])  # fmt: skip
    else:
        lines = explain(run)
    g_band = None
    return Decision(
        action=action,
        reasons=tuple(lines),
        source=run.curve.source,
        loss_column=run.curve.loss_column,
        law=None if source is None else source.name,
        n_params=run.n,
        fresh_tokens=run.fresh,
        strategy=run.strategy,
        decay_frac=run.plan.decay_frac,
        tokens_now=None if t_now is None else float(t_now),
        flops_now=run.flops(run.now),
        cooling=run.cont.annealed > 1e-3,
        gain_now=None if gains is None else float(gains[0]),
        gain_now_ci95=g_band,
        threshold=lam if options.budget_flops is not None else None,
        budget_flops=options.budget_flops,
        unique_tokens=options.unique_tokens,
        plan_n_params=None if plan is None else plan.n_params,
        plan_strategy=None if plan is None else plan.strategy,
        offset=None,
        offset_se=None,
        cross_tokens=cross_t,
        cross_flops=None if cross_e is None or run.n is None else 6.0 * run.n * cross_e,
        switch_to=switch_to if action == "switch strategy" else None,
        options=tuple(opts),
        cooldown=None,
        curve=curve_data(run, ends, k, lo, hi, gains),
        warnings=tuple(run.warnings),
        model="curve law",
        schedule=run.plan.source,
        curve_laws=run.cont.to_dict(),
        steps_now=float(run.now),
    )
