"""cdlaw.design.bound: the linearised c-optimal design bound benchmarks/bound_next.py prints."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cdlaw.design.bound import c_optimal_bound, design_variance, log_loss_jacobian
from cdlaw.fit.vector import fit_vector_names
from cdlaw.law import PRESETS, Law


def test_relaxed_design_has_the_closed_form_optimum():
    # two independent measurements of θ1 and θ2, target θ1 + θ2: Var = 1/w1 + 1/w2.
    # Costs 1 and 4, budget 2: Lagrange gives w2 = w1/2, so w = (2/3, 1/3) and Var = 4.5.
    jac, g = np.eye(2), np.ones(2)
    b = c_optimal_bound(jac, g, np.array([1.0, 4.0]), budget=2.0)
    assert b.lower_sd <= math.sqrt(4.5) + 1e-9 <= b.sd + 1e-9
    assert b.sd == pytest.approx(math.sqrt(4.5), rel=2e-3)
    assert b.lower_sd == pytest.approx(math.sqrt(4.5), rel=2e-3)
    assert b.weights == pytest.approx([2 / 3, 1 / 3], abs=0.02)
    # stopped early, the design is worse than the optimum, yet the certified floor is not above it
    rough = c_optimal_bound(jac, g, np.array([1.0, 4.0]), budget=2.0, iterations=1)
    assert rough.lower_sd <= math.sqrt(4.5) < rough.sd


def test_no_design_within_the_budget_beats_the_certified_bound():
    rng = np.random.default_rng(3)
    jac = rng.normal(size=(12, 3))
    g = rng.normal(size=3)
    cost = rng.uniform(1, 5, size=12)
    budget = 10.0
    b = c_optimal_bound(jac, g, cost, budget)
    best = math.inf
    for k in range(3, 13):
        for design in itertools.combinations(range(12), k):
            if cost[list(design)].sum() <= budget:
                best = min(best, design_variance(jac[list(design)], g))
    assert b.lower_sd <= math.sqrt(best)
    # and the relaxation is not vacuous: it sits within a few percent of the best 0/1 design
    assert b.lower_sd > 0.8 * math.sqrt(best)
    # a budget that buys everything: the bound is every candidate's own variance
    everything = c_optimal_bound(jac, g, cost, budget=cost.sum() + 1)
    assert everything.lower_sd == pytest.approx(math.sqrt(design_variance(jac, g)), rel=1e-3)


def test_jacobian_of_log_loss_is_the_laws_derivative():
    law = PRESETS["qin2026"]
    n, d = 1e8, 2e9
    cells = [(n, d, 0.0, "none"), (n, d, 4 * d, "repetition")]
    jac = log_loss_jacobian(law, cells)
    col = {name: i for i, name in enumerate(fit_vector_names(law.form, list(law.strategies)))}
    loss = float(law.loss(n, d))
    data_term = law.params["B"] / d ** law.params["beta"]
    # the fit's coordinates: log E (so ∂ log L/∂ log E = E/L), β as it is
    assert jac[0, col["E"]] == pytest.approx(law.params["E"] / loss, rel=1e-6)
    assert jac[0, col["beta"]] == pytest.approx(-math.log(d) * data_term / loss, rel=1e-6)
    # a run without derived tokens tells nothing about R*; a repetition run nothing of paraphrase's
    assert np.all(jac[0, 5:] == 0)
    assert jac[1, col["repetition.K"]] != 0
    assert np.all(jac[1, [col[f"paraphrase.{k}"] for k in ("K", "rho", "sigma")]] == 0)


def test_a_tied_parameter_is_one_column():
    # muennighoff's R*_N is one value for every strategy, as the fit has it: a column each
    # strategy would add a freedom no fit has, and lower the bound for nothing
    m = PRESETS["muennighoff2023"]
    rep = m.strategies["repetition"]
    law = Law(m.form, params=m.params, strategies={"repetition": rep, "paraphrase": dict(rep)})
    cells = [(1e9, 1e8, 4e8, "repetition"), (1e9, 1e8, 4e8, "paraphrase")]  # excess N: R*_N acts
    jac = log_loss_jacobian(law, cells)
    names = fit_vector_names(law.form, list(law.strategies))
    assert jac.shape == (2, len(names)) and names.count("rstar_n") == 1
    assert np.all(jac[:, names.index("rstar_n")] != 0)


def test_an_unmeasured_direction_has_infinite_variance():
    jac = np.array([[1.0, 0.0], [2.0, 0.0]])
    assert design_variance(jac, np.array([0.0, 1.0])) == math.inf
    assert design_variance(jac, np.array([1.0, 0.0])) == pytest.approx(0.2)


def test_a_parameter_on_a_tiny_scale_still_counts():
    # the CD paper's paraphrase K is 4.7e11, so ∂ log L/∂K is ~1e-12: the same design with
    # that column (and g's entry) scaled must give the same variance, not drop the direction
    rng = np.random.default_rng(0)
    jac, g = rng.normal(size=(20, 4)), rng.normal(size=4)
    tiny = np.array([1.0, 1.0, 1.0, 1e-12])
    # θ₄ = 1e12·θ₄′: ∂/∂θ₄ = 1e-12·∂/∂θ₄′, for the runs and the plan alike
    assert design_variance(jac * tiny, g * tiny) == pytest.approx(design_variance(jac, g), rel=1e-9)
    cost = rng.uniform(1, 2, size=20)
    a = c_optimal_bound(jac * tiny, g * tiny, cost, budget=8.0, iterations=300)
    b = c_optimal_bound(jac, g, cost, budget=8.0, iterations=300)
    assert a.sd == pytest.approx(b.sd, rel=1e-6)
