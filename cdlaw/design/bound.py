"""How well could any set of runs costing F FLOPs know the plan's loss? A lower bound.

Near the true law θ, a fit's prediction at the plan moves linearly with its parameters,
and a least-squares fit of runs x_1…x_n, each observed with log-noise σ, knows it with

    Var(log L̂(plan)) ≈ σ² · gᵀ (Σ_j J_j J_jᵀ)⁻¹ g,   J_j = ∂ log L(x_j)/∂θ,  g = ∂ log L(plan)/∂θ

(the delta method; Cramér–Rao for Gaussian noise). Choosing the runs that make it small
within a FLOP budget is c-optimal design (Elfving 1952; Pukelsheim, *Optimal Design of
Experiments*, 1993, ch. 2). Let each candidate enter with a weight 0 ≤ w_j ≤ 1 instead of
0 or 1: the problem becomes convex (the matrix-fractional function gᵀM(w)⁻¹g is convex in
w), Frank–Wolfe solves it with a fractional knapsack at each step, and its duality gap
certifies how far the relaxed optimum can lie below the last iterate. No 0/1 design
within the budget, however chosen, has a smaller linearised variance than that certified
bound: it is what an experimenter who knew the true law could reach, at best, with those
candidates. (Replicates are not a way around it where each cell's noise is shared by its
seeds, as in `cdlaw sweep --executor simulate`.)

Pure numpy. Used by benchmarks/bound_next.py to say what `cdlaw adapt` could
have reached at 3% of a grid's FLOPs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cdlaw.design.targets import candidate_log_losses
from cdlaw.fit.vector import fit_vector_to_public, law_from_public_vector, law_to_fit_vector
from cdlaw.law import Law

Cell = tuple[float, float, float, str]  # (N, D, D′, strategy)
REL_STEP = 1e-5  # central differences: step 1e-5·|θ_i| (1e-5 near 0)


def log_loss_jacobian(law: Law, cells: list[Cell]) -> np.ndarray:
    """∂ log L(cell)/∂θ for every cell (rows) and entry of the law's fit vector (columns,
    in fit_vector_names order: log E, log A, …, a tied parameter once), by central
    differences. The fit's own parameters, so the bound counts the freedom a fit has; and
    the variance is the same in any smooth one-to-one parameterisation."""
    strategies = list(law.strategies)
    theta = law_to_fit_vector(law, strategies)

    def log_losses(t: np.ndarray) -> np.ndarray:
        public = fit_vector_to_public(law.form_decl, strategies, t)
        return candidate_log_losses(
            law_from_public_vector(law.form_decl, strategies, public), cells
        )

    out = np.empty((len(cells), len(theta)))
    for i in range(len(theta)):
        h = REL_STEP * max(abs(float(theta[i])), 1.0)
        step = np.zeros(len(theta))
        step[i] = h
        out[:, i] = (log_losses(theta + step) - log_losses(theta - step)) / (2 * h)
    return out


def _column_scale(jac: np.ndarray) -> np.ndarray:
    """1/‖column‖ (1 for a zero column). Parameters live on wildly different scales (the
    CD paper's paraphrase K is 4.7e11, so ∂/∂K is ~1e-12 for a caller that differentiates
    in K rather than log K): rescaling the columns leaves
    gᵀM⁻¹g unchanged and keeps M's eigenvalues comparable."""
    norms = np.linalg.norm(jac, axis=0)
    return np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 1.0)


def design_variance(jac: np.ndarray, g: np.ndarray) -> float:
    """gᵀ (Σ_j J_j J_jᵀ)⁺ g: the plan's log-loss variance in units of σ². inf where g
    leans on a direction the runs leave unmeasured (it is not estimable from them)."""
    scale = _column_scale(jac)
    js, gs = jac * scale, g * scale
    values, vectors = np.linalg.eigh(js.T @ js)
    seen = values > 1e-12 * max(float(values.max()), 1e-300)
    proj = vectors.T @ gs
    if np.any(np.abs(proj[~seen]) > 1e-8 * max(float(np.linalg.norm(gs)), 1e-300)):
        return math.inf
    return float(np.sum(proj[seen] ** 2 / values[seen]))


@dataclass(frozen=True)
class Bound:
    """The relaxed c-optimal design within a budget, in units of σ (multiply by the noise)."""

    sd: float  # sqrt of the variance of the last relaxed design (an upper bound on the optimum)
    lower_sd: float  # certified: no design within the budget has a smaller sd
    weights: np.ndarray  # the relaxed design, one weight per candidate


def _knapsack(score: np.ndarray, cost: np.ndarray, budget: float) -> np.ndarray:
    """argmax Σ score·w over 0 ≤ w ≤ 1, cost·w ≤ budget: best score per FLOP first."""
    w = np.zeros(len(score))
    left = budget
    for j in np.argsort(-score / cost, kind="stable"):
        if score[j] <= 0 or left <= 0:
            break
        w[j] = min(1.0, left / cost[j])
        left -= w[j] * cost[j]
    return w


def _variance_and_gradient(jac: np.ndarray, g: np.ndarray, w: np.ndarray):
    """gᵀM(w)⁻¹g and u = J·M(w)⁻¹g (the variance's gradient in w is −u²)."""
    mg = np.linalg.solve((jac * w[:, None]).T @ jac, g)
    return float(g @ mg), jac @ mg


def c_optimal_bound(
    jac: np.ndarray,
    g: np.ndarray,
    cost: np.ndarray,
    budget: float,
    iterations: int = 3000,
) -> Bound:
    """Frank–Wolfe on min gᵀM(w)⁻¹g, 0 ≤ w ≤ 1, cost·w ≤ budget (module doc).

    The gradient of the variance in w_j is −(J_jᵀM⁻¹g)², so each step moves toward the
    fractional knapsack that maximises Σ w_j (J_jᵀM⁻¹g)². It starts from every candidate
    at the weight the budget allows uniformly, so the candidates must measure every
    parameter."""
    cost = np.asarray(cost, dtype=float)
    scale = _column_scale(jac)  # the same variance, better conditioned
    jac, g = jac * scale, g * scale
    w = np.full(len(cost), min(1.0, budget / cost.sum()))
    for k in range(iterations):
        _, u = _variance_and_gradient(jac, g, w)
        w = w + 2.0 / (k + 3) * (_knapsack(u**2, cost, budget) - w)
    var, u = _variance_and_gradient(jac, g, w)
    # convexity: f(w*) ≥ f(w) + ∇f(w)·(s − w) for the minimiser s of the linearisation
    gap = float((u**2) @ (_knapsack(u**2, cost, budget) - w))
    return Bound(math.sqrt(var), math.sqrt(max(var - gap, 0.0)), w)
