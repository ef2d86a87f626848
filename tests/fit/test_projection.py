"""The fit's search with E, A, B solved (cdlaw.fit.projection), and tables of any size: the
coefficients are the non-negative least-squares solution, the reduced objective's gradient
is right, a planted law is recovered by the projection alone, and a table of many distinct
rows is searched on a sample, fitted on every row, with nothing of size rows × rows."""

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from lawtables import TRUE, make_table
from scipy.optimize import nnls

from cdlaw.fit import search as searchlib
from cdlaw.fit.problem import build_problem
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.projection import Projection, solve_coefficients
from cdlaw.fit.starts import start_axes, start_grid
from cdlaw.fit.vector import law_to_fit_vector
from cdlaw.law import PRESETS
from cdlaw.laws.form import PerSize

# the tables of any size are the ones benchmarks/bench_fit_rows.py times
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_fit_rows import law_table


def problem_of(df, form="cd"):
    strategies = ("repetition", "paraphrase") if form == "cd" else ()
    if form != "cd":
        df = df[df["derived_tokens"] == 0]
    return build_problem(
        form, strategies, df["n_params"], df["fresh_tokens"], df["derived_tokens"],
        df["strategy"], df["loss"], np.arange(len(df)),
    )  # fmt: skip


def test_coefficients_are_the_nonnegative_least_squares_solution():
    rng = np.random.default_rng(0)
    X = np.abs(rng.standard_normal((300, 40, 3)))
    X[:100, :, 1] = X[:100, :, 0] * 0.5  # a singular pair: that subset is never chosen
    truth = rng.standard_normal((300, 3))
    truth[150:] = np.abs(truth[150:]) + 0.5  # these fit with every coefficient free
    y = 0.1 * rng.standard_normal((300, 40)) + np.einsum("snk,sk->sn", X, truth)
    c = solve_coefficients(np.einsum("snj,snk->sjk", X, X), np.einsum("snj,sn->sj", X, y))
    zeros = 0
    for s in range(300):
        want, _ = nnls(X[s], y[s])
        got = np.sum((X[s] @ c[s] - y[s]) ** 2)
        assert got == pytest.approx(np.sum((X[s] @ want - y[s]) ** 2), rel=1e-9, abs=1e-12)
        assert np.all(c[s] >= 0)
        zeros += int(np.any(c[s] == 0))
    assert 30 < zeros < 200  # both kinds of solution were exercised


@pytest.mark.parametrize("form", ["cd", "chinchilla"])
def test_projected_gradient_matches_finite_differences(form):
    p = problem_of(make_table(noise=0.01, n_derived=80), form)
    projection = Projection.of(p)
    grid, _ = start_grid(p, 12, np.random.default_rng(0), start_axes(p, p.form.linear))
    x = grid[:, projection.free]
    fun = projection.objective()
    f, g = fun(x, np.arange(len(x)))
    h = 1e-6
    for j in range(x.shape[1]):
        up, down = x.copy(), x.copy()
        up[:, j] += h
        down[:, j] -= h
        numeric = (fun(up, None)[0] - fun(down, None)[0]) / (2 * h)
        np.testing.assert_allclose(g[:, j], numeric, rtol=1e-5, atol=1e-7 * np.abs(f).max())


@pytest.mark.parametrize("form", ["cd", "chinchilla"])
def test_the_projection_alone_recovers_a_planted_law(form):
    """At the planted nonlinear parameters the reduced objective is 0 and the solved
    coefficients are the planted E, A, B; away from them it is positive."""
    law = TRUE if form == "cd" else PRESETS["chinchilla-hoffmann"]
    p = problem_of(make_table(law=TRUE, noise=0.0, n_derived=80), form)
    if form == "chinchilla":
        p = build_problem(form, (), np.exp(p.logN), np.exp(p.logD), 0 * p.logD,
                          ["none"] * len(p.y), law.loss(np.exp(p.logN), np.exp(p.logD)),
                          p.row_ids)  # fmt: skip
    projection = Projection.of(p)
    z = p.z(law_to_fit_vector(law, list(p.strategies)))
    x = z[None, projection.free]
    f, _ = projection.objective()(x, np.zeros(1, int))
    assert f[0] < 1e-24
    np.testing.assert_allclose(projection.complete(x)[0], z, rtol=1e-9, atol=1e-9)
    off = x.copy()
    off[0, 0] += 0.01  # alpha
    assert projection.objective()(off, np.zeros(1, int))[0][0] > 1e-8


def test_sizes_are_summed_without_a_rows_by_sizes_array():
    rng = np.random.default_rng(0)
    logN = np.log(rng.choice(np.geomspace(1e6, 1e9, 500), 3000))
    w = rng.standard_normal((4, 3000))
    sizes = PerSize(logN)
    assert len(sizes.lNu) > PerSize.SMALL and not hasattr(sizes, "indicator")
    want = np.stack([[w[s, logN == v].sum() for v in sizes.lNu] for s in range(4)])
    np.testing.assert_allclose(sizes.sum(w), want, rtol=1e-12)
    # a million distinct sizes: memory in proportion to the rows (an (n, n) array of
    # indicators would take 8 TB)
    tracemalloc.start()
    big = PerSize(np.log(rng.uniform(1e6, 1e9, 1_000_000)))
    big.sum(np.ones((1, 1_000_000)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100e6


def test_a_large_table_is_searched_on_a_sample_and_fitted_on_every_row(monkeypatch):
    monkeypatch.setattr(searchlib, "SEARCH_ROWS", 240)
    monkeypatch.setattr(searchlib, "MIN_SAMPLED", 60)
    df = law_table(1200, noise=0.0)
    df = df.drop(df.index[df["strategy"] == "paraphrase"][90:]).reset_index(drop=True)
    p = problem_of(df)  # a strategy with few rows: the sample still holds 60 of them
    keep = searchlib.sample_rows(p, 240, np.random.default_rng(0))
    per_group = [int(keep[p.ratio == 0].sum())] + [int(keep[sl].sum()) for sl in p.slices]
    assert min(per_group) >= 60 and abs(sum(per_group) - 240) <= 60
    fit = fit_law(df, n_starts=32)
    assert fit.n_used == len(df) and fit.rmse_log < 1e-6
    for k in ("alpha", "beta"):
        assert fit.law.params[k] == pytest.approx(TRUE.params[k], rel=1e-5)
