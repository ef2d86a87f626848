"""The one-dimensional search a plan makes: the model size N that minimises the law's
loss when a budget is spent at N (docs/plan.md).

    n, on_edge = optimal_n_params(law, "repetition", 1e21, 5e9)
    a = allocation(law, "repetition", 1e21, n, 5e9, "cd-optimal")   # an Allocation

A plan spends every FLOP (split_tokens) unless its law overfits (planned_tokens);
budget_loss is the loss along that path, optimal_n_params its minimum.
cdlaw.plan.planner builds plans from these.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from cdlaw.law import Law
from cdlaw.plan.result import Allocation
from cdlaw.strategies import NONE, REPETITION

# The search for N spans tokens-per-parameter from 1e-6 to 1e10 (8 decades of N) on a grid
# of 0.01 decade, so that no sane law has its optimum off the grid; Brent's method then
# refines between the grid neighbours of the best point.
SEARCH_TOKENS_PER_PARAM = (1e-6, 1e10)
GRID_POINTS_PER_DECADE = 100
# Relative step in C for −dL/dC: the loss changes by ~1e-5 nats, far above rounding (1e-15),
# while the O(h²) truncation error stays ~1e-8 relative.
MARGINAL_STEP = 1e-4
# D′ below this share of D is the optimiser's rounding at the T = U kink (its N is known
# to ~1e-7), not a plan to make derived tokens: such a plan trains D′ = 0, its N as much
# larger as spends the same FLOPs.
DERIVED_NOISE = 1e-5


def split_tokens(budget_flops, n_params, unique_tokens):
    """Spend the whole budget at model size N: T = C/(6N), D = min(U, T), D′ = T − D."""
    tokens = np.asarray(budget_flops, dtype=float) / (6.0 * np.asarray(n_params, dtype=float))
    fresh = np.minimum(unique_tokens, tokens)
    return fresh, tokens - fresh


def planned_tokens(law: Law, strategy: str, budget_flops, n_params, unique_tokens):
    """(D, D′) a plan trains at model size N: the whole budget (split_tokens), except that
    a law whose loss rises with D′ (overfitting) never gets more derived tokens than its
    loss minimum at that (N, D): the rest of the budget is better left unspent."""
    fresh, derived = split_tokens(budget_flops, n_params, unique_tokens)
    if law.form_decl.can_overfit and strategy != NONE:
        derived = np.minimum(derived, law.best_derived_tokens(n_params, fresh, strategy))
    return fresh, derived


def budget_loss(law: Law, strategy: str, budget_flops, n_params, unique_tokens):
    """The law's loss when the budget is spent at model size N (broadcasts; planned_tokens)."""
    fresh, derived = planned_tokens(law, strategy, budget_flops, n_params, unique_tokens)
    return law.loss(n_params, fresh, derived, strategy)


def optimal_n_params(
    law: Law, strategy: str, budget_flops: float, unique_tokens: float
) -> tuple[float, bool]:
    """argmin over N of budget_loss; and whether it sits on the edge of the search range.

    A coarse log grid finds the basin (robust to the kinks at T = U and, for the
    Muennighoff form, at N = U_N, and to flat stretches where derived tokens saturate);
    bounded Brent refines between the grid neighbours of the best point.
    """
    from scipy.optimize import minimize_scalar

    grid = search_grid(budget_flops)
    n_grid = len(grid)

    def f(ln_n):
        return budget_loss(law, strategy, budget_flops, np.exp(ln_n), unique_tokens)

    with np.errstate(all="ignore"):
        values = f(grid)
    values = np.where(np.isfinite(values), values, np.inf)
    i = int(np.argmin(values))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, n_grid - 1)]
    with np.errstate(all="ignore"):
        res = minimize_scalar(
            lambda x: float(f(x)), bounds=(a, b), method="bounded", options={"xatol": 1e-10}
        )
    ln_best = float(res.x) if res.fun <= values[i] else float(grid[i])
    on_edge = i in (0, n_grid - 1)
    return math.exp(ln_best), on_edge


def search_grid(budget_flops: float) -> np.ndarray:
    """log N of the search's grid for a budget: SEARCH_TOKENS_PER_PARAM at
    GRID_POINTS_PER_DECADE (tokens per parameter = C/(6N²), so N = sqrt(C/(6·tpp)))."""
    lo_tpp, hi_tpp = SEARCH_TOKENS_PER_PARAM
    ln_lo = 0.5 * math.log(budget_flops / (6 * hi_tpp))
    ln_hi = 0.5 * math.log(budget_flops / (6 * lo_tpp))
    n_grid = round((ln_hi - ln_lo) / math.log(10) * GRID_POINTS_PER_DECADE) + 1
    return np.linspace(ln_lo, ln_hi, n_grid)


def allocation(
    law, strategy, budget_flops, n_params, unique_tokens, rule, whole_budget=False
) -> Allocation:
    """The allocation at model size N: planned_tokens, or with whole_budget every FLOP spent
    (the baselines: a team without the law trains every token it can afford)."""
    spend = split_tokens if whole_budget else partial(planned_tokens, law, strategy)
    fresh, derived = (float(x) for x in spend(budget_flops, n_params, unique_tokens))
    if 0 < derived < DERIVED_NOISE * fresh:  # the same FLOPs, all on fresh tokens
        n_params, derived = n_params * (fresh + derived) / fresh, 0.0
    loss = float(law.loss(n_params, fresh, derived, strategy))
    label = NONE if derived == 0 else (strategy if strategy != NONE else REPETITION)
    return Allocation(rule, float(n_params), fresh, derived, label, loss)


def marginal_gain_per_flop(law, strategy, budget_flops, n_params, unique_tokens) -> float:
    """−dL*/dC at the optimum, for the compute governor (docs/plan.md).

    Along the optimal path N*(C), dL*/dC = ∂L/∂C at fixed N* because ∂L/∂N = 0 there
    (envelope theorem), so a central difference at fixed N gives the derivative of the
    optimal loss without re-optimising (and so without the optimiser's noise). With N
    fixed by the user the path is the fixed-N one, and the same formula is exact.
    """
    h = MARGINAL_STEP
    up = budget_loss(law, strategy, budget_flops * (1 + h), n_params, unique_tokens)
    down = budget_loss(law, strategy, budget_flops * (1 - h), n_params, unique_tokens)
    drop = float(down - up)
    return drop / (2 * h * budget_flops) if drop else 0.0  # saturated: 0, never -0.0


def chinchilla_optimal_n_params(law: Law, budget_flops: float) -> float:
    """N* = G·(C/6)^(β/(α+β)), G = (αA/(βB))^(1/(α+β)) (Hoffmann et al. 2022, eq. 4)."""
    a, b = law.params["alpha"], law.params["beta"]
    G = (a * law.params["A"] / (b * law.params["B"])) ** (1 / (a + b))
    return G * (budget_flops / 6) ** (b / (a + b))
