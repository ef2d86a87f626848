"""The fit recovers known laws from tables made from them (docs/fit.md), and says what it did.

Tables come from the law itself on a CD-paper-like grid (7 sizes 14M–600M, D from 0.05×
to 16× of 20 tokens per parameter, r up to 60, both strategies) with 0.5% multiplicative
noise, using the qin2026 constants (ρ and σ negative for both strategies).
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from lawtables import MULTIPLES, RATIOS, SIZES, TRUE, law_loss, make_table
from scipy.optimize import minimize

from cdlaw.fit import vector as fitvec
from cdlaw.fit.findings import DataRange
from cdlaw.fit.io import FitResult
from cdlaw.fit.optim import minimize_batched
from cdlaw.fit.problem import huber
from cdlaw.fit.procedure import DEFAULT_STARTS, fit_law, objective
from cdlaw.fit.threads import single_threaded_blas
from cdlaw.law import PRESETS, Law
from cdlaw.laws import chinchilla
from cdlaw.plan.planner import plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.sweep.simulate import Simulation, simulated_result
from cdlaw.sweep.spec import load_sweep
from cdlaw.system.errors import BadInput

MEDIAN_CELL = (100e6, 20 * 100e6)  # the grid's median size and tokens per parameter
STARTS = 128  # a small start grid keeps tests fast; test_default_grid_* checks the default


def true_values(law):
    v = dict(law.params)
    for s, p in law.strategies.items():
        v.update({f"{s}.{k}": x for k, x in p.items()})
    return v


@pytest.fixture(scope="module")
def noisy():
    df = make_table(seed=0, n_derived=120)
    return df, fit_law(df, n_starts=STARTS, bootstrap=100, seed=0)


# ---------------------------------------------------------------------------------------
# The batched law and the batched optimiser against plain references.
# ---------------------------------------------------------------------------------------

MUENNIGHOFF = Law(
    "muennighoff", {"E": 1.87, "A": 520.8, "B": 1487.7, "alpha": 0.35, "beta": 0.33},
    {"repetition": {"rstar_d": 15.4, "rstar_n": 5.3}, "paraphrase": {"rstar_d": 7.0, "rstar_n": 5.3}},
)  # fmt: skip


@pytest.mark.parametrize("law", [TRUE, MUENNIGHOFF, PRESETS["chinchilla-hoffmann"]])
def test_batched_log_loss_matches_law_and_finite_differences(law):
    df = make_table(law if law.strategies else TRUE, noise=0, n_derived=60)
    df = df.sort_values(
        "strategy", key=lambda s: s.map({"none": 0, "repetition": 1, "paraphrase": 2})
    )
    strategies = ("repetition", "paraphrase") if law.strategies else ()
    sl = [slice(63, 63 + int((df.strategy == s).sum())) for s in strategies]
    if len(sl) == 2:
        sl[1] = slice(sl[0].stop, sl[0].stop + sl[1].stop - sl[1].start)
    logN, logD = np.log(df["n_params"].to_numpy()), np.log(df["fresh_tokens"].to_numpy())
    ratio = (df["derived_tokens"] / df["fresh_tokens"]).to_numpy()
    if not strategies:
        ratio = 0 * ratio
    theta = fitvec.law_to_fit_vector(law, strategies)
    logL, _ = fitvec.batched_log_loss(law.form, theta[None], logN, logD, ratio, sl)
    want = law_loss(law, df.assign(strategy=df.strategy if strategies else "none"))
    np.testing.assert_allclose(np.exp(logL[0]), want, rtol=1e-13)
    if law.form == "muennighoff":  # the excess-parameter branch is exercised
        nstar = chinchilla.chinchilla_optimal_n_for_data(
            df.fresh_tokens,
            law.params["A"],
            law.params["B"],
            law.params["alpha"],
            law.params["beta"],
        )
        assert 0 < np.mean(df.n_params > nstar) < 1

    rng = np.random.default_rng(1)
    thetas = theta + rng.normal(0, 0.05, (3, theta.size))
    w = rng.normal(size=(3, len(df)))
    _, vjp = fitvec.batched_log_loss(law.form, thetas, logN, logD, ratio, sl)
    grad = vjp(w)
    h = 1e-6
    for j in range(theta.size):
        up, down = thetas.copy(), thetas.copy()
        up[:, j] += h
        down[:, j] -= h
        fu, _ = fitvec.batched_log_loss(law.form, up, logN, logD, ratio, sl)
        fd, _ = fitvec.batched_log_loss(law.form, down, logN, logD, ratio, sl)
        np.testing.assert_allclose(
            grad[:, j], ((fu - fd) / (2 * h) * w).sum(1), rtol=2e-6, atol=1e-7
        )


def test_batched_lbfgs_matches_scipy_on_bounded_rosenbrock():
    def fun(x, idx):
        a, b = x[:, 0], x[:, 1]
        f = (1 - a) ** 2 + 100 * (b - a**2) ** 2
        g = np.stack([-2 * (1 - a) - 400 * a * (b - a**2), 200 * (b - a**2)], axis=1)
        return f, g

    x0 = np.array([[-1.2, 1.0], [2.0, 2.0], [0.0, -1.0], [-1.5, 2.5]])
    for lower, upper in (([-2, -2], [2, 3]), ([-2, -2], [0.5, 3])):
        res = minimize_batched(fun, x0, np.array(lower, float), np.array(upper, float))
        for i, start in enumerate(x0):
            with single_threaded_blas():  # scipy's tiny BLAS calls crawl on a busy machine
                ref = minimize(
                    lambda x: tuple(v[0] for v in fun(x[None], None)), start, jac=True,
                    method="L-BFGS-B", bounds=list(zip(lower, upper, strict=True)),
                    options={"ftol": 1e-14, "gtol": 1e-10},
                )  # fmt: skip
            np.testing.assert_allclose(res.x[i], ref.x, atol=1e-5)
            assert res.converged[i]
    assert res.x[:, 0].max() <= 0.5  # the bound holds (the minimum (1, 1) is outside)


# ---------------------------------------------------------------------------------------
# Recovery (the issue's acceptance numbers).
# ---------------------------------------------------------------------------------------


def test_recovers_alpha_beta_and_rstar(noisy):
    _, fit = noisy
    assert abs(fit.law.params["alpha"] - TRUE.params["alpha"]) < 0.02
    assert abs(fit.law.params["beta"] - TRUE.params["beta"]) < 0.02
    for s in ("repetition", "paraphrase"):
        got, want = fit.law.rstar(*MEDIAN_CELL, s), TRUE.rstar(*MEDIAN_CELL, s)
        assert abs(got / want - 1) < 0.10, (s, got, want)
    assert fit.optimizer.success and fit.optimizer.n_converged == STARTS


def test_objective_no_worse_than_the_true_constants(noisy):
    df, fit = noisy
    assert fit.objective <= objective(TRUE, df, 0.1)
    assert fit.objective == pytest.approx(objective(fit.law, df, 0.1), rel=1e-12)
    # the objective is the summed Huber loss of log residuals
    r = np.log(df["loss"].to_numpy()) - np.log(law_loss(fit.law, df))
    assert fit.objective == pytest.approx(huber(r, 0.1).sum(), rel=1e-12)


def test_predicts_unseen_r64_runs_within_one_percent(noisy):
    _, fit = noisy
    N = np.repeat(SIZES, len(MULTIPLES))
    D = 20 * N * np.tile(MULTIPLES, len(SIZES))
    for s in ("repetition", "paraphrase"):
        err = fit.law.loss(N, D, 64 * D, s) / TRUE.loss(N, D, 64 * D, s) - 1
        assert np.max(np.abs(err)) < 0.01, s


def test_bootstrap_intervals_cover_the_truth(noisy):
    """95% intervals: over 2 tables × 11 parameters + R* and E + A/N^α, most cover the truth."""
    truth = true_values(TRUE)
    hits = []
    for seed in (0, 1):
        fit = (
            noisy[1]
            if seed == 0
            else fit_law(make_table(seed=seed), n_starts=32, bootstrap=100, seed=seed)
        )
        hits += [lo <= truth[k] <= hi for k, (lo, hi) in fit.ci95.items()]
        for s in ("repetition", "paraphrase"):
            lo, hi = fit.rstar.strategies[s].ci95
            hits.append(lo <= TRUE.rstar(fit.rstar.n_params, fit.rstar.fresh_tokens, s) <= hi)
        floor = TRUE.loss_model_floor(np.array(fit.model_floor.n_params))
        hits += [lo <= f <= hi for f, (lo, hi) in zip(floor, fit.model_floor.ci95, strict=True)]
    assert np.mean(hits) >= 0.85, np.mean(hits)
    # and the intervals are not absurdly wide: alpha within ±0.05
    assert np.diff(noisy[1].ci95["alpha"])[0] < 0.05


def test_bootstrap_vectors_rebuild_laws(noisy, tmp_path):
    _, fit = noisy
    d = json.loads(json.dumps(fit.to_dict()))
    laws, notes = FitResult.from_dict(d).bootstrap_laws()
    assert notes == []
    assert len(laws) == 100 and d["bootstrap_params"][5] == "repetition.K"
    assert laws[7].strategies["paraphrase"]["rho"] == d["bootstrap"][7][9]
    assert laws[7].params["alpha"] == d["bootstrap"][7][3]


def test_rstar_poorly_identified_when_r_stays_small():
    """R* ≈ 40 everywhere but r ≤ 2: the fit warns, and R*'s interval is wide, not hidden."""
    big = Law(
        "cd", TRUE.params,
        {"repetition": {"K": 40.0 / (20**-0.1), "rho": -0.1, "sigma": 0.0}},
    )  # fmt: skip
    assert big.rstar(*MEDIAN_CELL, "repetition") == pytest.approx(40.0)
    fits = {
        top: fit_law(
            make_table(big, seed=3, n_derived=100, ratios=[r for r in RATIOS if r <= top]),
            n_starts=32, bootstrap=60, seed=3,
        )
        for top in (2, 60)
    }  # fmt: skip
    assert any("repetition: the runs' derived_ratio (at most 2)" in w for w in fits[2].warnings)
    assert not any("barely identified" in w for w in fits[60].warnings)
    (lo, hi), (lo60, hi60) = (fits[t].rstar.strategies["repetition"].ci95 for t in (2, 60))
    assert np.log(hi / lo) > 3 * np.log(hi60 / lo60)
    assert lo <= 40.0 <= hi


@pytest.mark.slow
def test_default_grid_gives_the_same_fit(noisy):
    """The default grid, and one eight times denser, find the same minimum as the small
    test grid."""
    df, fit = noisy
    for n in (DEFAULT_STARTS, 8 * DEFAULT_STARTS):
        full = fit_law(df, seed=0, n_starts=n)
        assert full.optimizer.n_starts == n
        assert full.optimizer.n_converged > 0.95 * n
        assert full.objective == pytest.approx(fit.objective, rel=1e-9)
        assert full.law.params["alpha"] == pytest.approx(fit.law.params["alpha"], abs=1e-4)
        for s in ("repetition", "paraphrase"):
            assert full.law.rstar(*MEDIAN_CELL, s) == pytest.approx(
                fit.law.rstar(*MEDIAN_CELL, s), rel=1e-3
            )


# ---------------------------------------------------------------------------------------
# Methods and forms.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["joint", "staged"])
def test_joint_and_staged_recover_noiseless_law(method):
    df = make_table(noise=0.0, seed=4)
    fit = fit_law(df, method=method, n_starts=64)
    assert (
        abs(fit.law.params["alpha"] - TRUE.params["alpha"]) < 0.005
        and abs(fit.law.params["beta"] - TRUE.params["beta"]) < 0.005
    )
    for s in ("repetition", "paraphrase"):
        assert fit.law.rstar(*MEDIAN_CELL, s) == pytest.approx(
            TRUE.rstar(*MEDIAN_CELL, s), rel=0.02
        )
    assert fit.rmse_log < 1e-4
    assert fit.method == method


def test_chinchilla_recovers_hoffmann_constants_from_one_epoch_rows():
    hoffmann = PRESETS["chinchilla-hoffmann"]
    df = make_table(law=TRUE, noise=0.0, seed=5)
    one = df["derived_tokens"] == 0
    df.loc[one, "loss"] = hoffmann.loss(
        df.n_params[one].to_numpy(), df.fresh_tokens[one].to_numpy()
    )
    fit = fit_law(df, law="chinchilla", n_starts=64)
    assert fit.huber_delta == 1e-3
    for k in ("E", "A", "B", "alpha", "beta"):
        assert fit.law.params[k] == pytest.approx(hoffmann.params[k], rel=1e-3), k
    assert fit.n_used == int(one.sum()) and not fit.rows.loc[~one.to_numpy(), "used"].any()
    assert any(w.startswith("not fitted: ") for w in fit.warnings)


def test_naive_chinchilla_counts_derived_tokens_as_fresh():
    df = make_table(noise=0.0, seed=6)
    fit = fit_law(df, law="chinchilla", naive=True, n_starts=64)
    assert fit.n_used == len(df) and fit.naive
    rows = fit.rows
    want = fit.law.loss(rows.n_params, rows.fresh_tokens + rows.derived_tokens)
    np.testing.assert_allclose(rows["predicted_loss"], want, rtol=1e-12)
    # treating repeats as fresh misfits the saturating runs the cd law fits exactly
    assert fit.rmse_log > 0.01


def test_muennighoff_form_fits_its_own_law():
    df = make_table(law=MUENNIGHOFF, noise=0.0, seed=7)
    fit = fit_law(df, law="muennighoff", n_starts=64)
    assert fit.objective <= objective(MUENNIGHOFF, df, 1e-3) + 1e-12
    assert fit.law.strategies["repetition"]["rstar_d"] == pytest.approx(15.4, rel=0.05)
    assert fit.law.strategies["paraphrase"]["rstar_d"] == pytest.approx(7.0, rel=0.05)
    assert fit.rmse_log < 1e-3


# ---------------------------------------------------------------------------------------
# Outliers, holdout, outputs.
# ---------------------------------------------------------------------------------------


def test_drop_outliers_removes_the_injected_outlier():
    df = make_table(seed=8)
    df.loc[100, "loss"] *= 1.15
    fit = fit_law(df, n_starts=64, drop_outliers=1)
    assert fit.dropped == [100]
    assert not fit.rows.set_index("row_id").loc[100, "used"]
    assert fit.n_used == len(df) - 1
    assert abs(fit.law.params["alpha"] - TRUE.params["alpha"]) < 0.02


def test_the_data_range_holds_each_strategys_own_derived_ratios():
    from cdlaw.fit.summary import data_range

    df = make_table(ratios=(1, 4, 16), n_derived=None)
    df = df[~((df["strategy"] == "repetition") & (df["derived_tokens"] > 4 * df["fresh_tokens"]))]
    fit = fit_law(df, n_starts=64)
    assert fit.data_range.derived_ratio == (0.0, 16.0)
    assert fit.data_range.strategies["repetition"] == DataRange(derived_ratio=(0.0, 4.0))
    assert fit.data_range.strategies["paraphrase"] == DataRange(derived_ratio=(0.0, 16.0))
    one_epoch = data_range(fit.rows[fit.rows["derived_tokens"] == 0])
    assert set(one_epoch.to_dict()) == {
        "n_params",
        "fresh_tokens",
        "derived_ratio",
        "tokens_per_param",
    }
    assert one_epoch.strategies == {}


def test_holdout_largest_fits_without_it_and_reports_its_error():
    df = make_table(seed=9)
    fit = fit_law(df, n_starts=64, holdout_largest=True)
    held = fit.rows["heldout"].to_numpy()
    assert (fit.rows.loc[held, "n_params"] == 600e6).all() and held.sum() == (
        df.n_params == 600e6
    ).sum()
    assert not fit.rows.loc[held, "used"].any()
    assert fit.data_range.n_params == (14e6, 370e6)
    assert fit.holdout.n_params == 600e6 and fit.holdout.n_rows == held.sum()
    r = fit.rows.loc[held, "residual_log"]
    assert fit.holdout.rmse_log == pytest.approx(np.sqrt(np.mean(r**2)))
    assert fit.holdout.rmse_log < 0.01  # extrapolates one size up within 1%


def test_fit_json_and_rows_follow_the_contract(noisy):
    df, fit = noisy
    d = fit.to_dict()
    spec = ["law", "method", "huber_delta", "params", "strategies", "ci95", "n_rows", "n_used",
            "dropped", "objective", "rmse_log", "holdout", "optimizer", "data_range", "bootstrap"]  # fmt: skip
    assert list(d)[: len(spec)] == spec
    assert set(d["optimizer"]) >= {"success", "message", "n_starts", "at_bound"}
    assert set(d) >= {"bootstrap_params", "warnings", "source", "select"}
    assert d["select"] == "auto" and d["n_rows"] == len(df)
    assert Law.from_dict(d) == fit.law
    cols = ["row_id", "n_params", "fresh_tokens", "derived_tokens", "strategy", "loss",
            "derived_ratio", "tokens_per_param", "predicted_loss", "residual_log", "empirical_eta",
            "regime", "loss_one_epoch", "loss_data_floor", "loss_model_floor",
            "derived_gain_share", "used", "heldout"]  # fmt: skip
    rows = fit.rows
    assert list(rows.columns[: len(cols)]) == cols
    np.testing.assert_allclose(rows.residual_log, np.log(rows.loss / rows.predicted_loss))
    assert rows.loc[rows.derived_tokens == 0, "empirical_eta"].isna().all()
    # empirical η of a derived run tracks the law's η (noise 0.5% moves it a little)
    d1 = rows[(rows.strategy == "repetition") & (rows.derived_ratio == 1)]
    eta = fit.law.eta(d1.n_params, d1.fresh_tokens, 1.0, "repetition")
    assert np.nanmedian(np.abs(d1.empirical_eta - eta)) < 0.2
    assert set(rows.regime) <= {"compute-bound", "data-bound", "model-bound"}
    assert sum(d["regime_counts"].values()) == d["n_used"]
    assert "E, A and alpha trade off" in " ".join(d["warnings"])


# ---------------------------------------------------------------------------------------
# Refusals: the table cannot identify the law, or the options are wrong.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda: make_table(sizes=[30e6], n_derived=None),
            ["1 model size(s) (30M)", "at least 2 distinct n_params"],
        ),
        (
            lambda: make_table().query("strategy != 'paraphrase' or n_params == 60e6"),
            ["strategy paraphrase", "only 1 model size", "K, rho and sigma"],
        ),
        (
            lambda: make_table().query("derived_tokens == 0"),
            ["no runs with derived tokens", "--law chinchilla"],
        ),
    ],
)
def test_refuses_tables_that_cannot_identify_the_law(make, words):
    with pytest.raises(BadInput) as e:
        fit_law(make(), n_starts=8)
    for w in words:
        assert w in str(e.value)


def test_refuses_too_few_rows_and_bad_options():
    def one_epoch(cells):
        N, D = np.array(cells, dtype=float).T
        return pd.DataFrame(dict(n_params=N, fresh_tokens=D, derived_tokens=0.0, strategy="none",
                                 loss=PRESETS["chinchilla-hoffmann"].loss(N, D)))  # fmt: skip

    same_d = one_epoch([(n, 1e9) for n in SIZES])
    with pytest.raises(BadInput, match=r"1 distinct fresh_tokens value.*at least 2 to fit beta"):
        fit_law(same_d, law="chinchilla", n_starts=8)
    six = one_epoch([(1e7, 1e9), (2e7, 2e9), (4e7, 4e9), (1e7, 2e9), (2e7, 4e9), (4e7, 1e9)])
    with pytest.raises(BadInput, match=r"6 usable rows .* at least 7 rows"):
        fit_law(six, law="chinchilla", n_starts=8)
    fit_law(pd.concat([six, one_epoch([(1e7, 4e9)])]), law="chinchilla", n_starts=8)  # 7 is enough
    for kw, match in [
        (dict(law="kaplan"), "--law must be one of"),
        (dict(method="greedy"), "--method must be one of"),
        (dict(huber_delta=-1), "--huber-delta"),
        (dict(naive=True), "--naive"),
        (dict(select="best"), "--select"),
    ]:
        with pytest.raises(BadInput, match=match):
            fit_law(make_table(), **{"n_starts": 8, **kw})
    with pytest.raises(BadInput, match="--starts"):
        fit_law(make_table(), n_starts=0)


def test_two_sizes_or_two_data_sizes_fit_with_a_warning():
    """2 sizes cannot separate E, A and alpha: the fit runs but says so (docs/fit.md)."""
    fit = fit_law(make_table(sizes=[30e6, 60e6], n_derived=100), n_starts=16)
    assert any("only 2 model sizes (30M–60M)" in w for w in fit.warnings)
    N, D = (np.array(v).ravel() for v in np.meshgrid(SIZES[:4], [1e9, 4e9]))
    hoffmann = PRESETS["chinchilla-hoffmann"]
    df = pd.DataFrame(dict(n_params=N, fresh_tokens=D, derived_tokens=0.0, strategy="none",
                           loss=hoffmann.loss(N, D)))  # fmt: skip
    fit = fit_law(df, law="chinchilla", n_starts=8)
    assert any("only 2 fresh_tokens values (1B–4B)" in w for w in fit.warnings)


def test_bootstrap_refits_leave_the_best_fits_basin_when_the_data_do():
    """A simulated table with two nearly equal basins (paraphrase ρ at its bound, or inside):
    the refits start from every distinct minimum, so both basins appear among the draws and
    the plan's interval covers the true loss (from the best fit alone: sd 0.065, a miss)."""
    root = Path(__file__).resolve().parents[2]
    truth = PRESETS["qin2026"]
    sim = Simulation(truth, "qin2026", noise=0.02, noise_seed=3)
    runs = load_sweep(root / "sweeps" / "qin2026-grid.toml").runs(100278)
    grid = pd.DataFrame([simulated_result(sim, r) for r in runs])
    table = grid.sort_values("flops", kind="stable")
    table = table[table["flops"].cumsum() <= 6.75e20]  # the cheapest 3% of the grid
    fit = fit_law(table, "cd", n_starts=256, bootstrap=50, seed=3)
    rho = np.array([law.strategies["paraphrase"]["rho"] for law in fit.bootstrap_laws()[0]])
    assert (rho < -4.9).sum() >= 5 and (rho > -3).sum() >= 5, np.round(rho, 2)
    p = plan(PlanningLaw("x", fit.law, fit.data_range, tuple(fit.bootstrap_laws()[0])), 1e21, 5e9)
    lo, hi = p.predicted_loss_ci95
    assert lo <= truth.loss(p.n_params, p.fresh_tokens, p.derived_tokens, p.strategy) <= hi


def test_staged_bootstrap_refits_converge_and_cover_the_truth(noisy):
    """--method staged's refits (stage 1 then stage 2 from each start) converge, and its
    intervals cover the true parameters about as often as the joint fit's."""
    df, _ = noisy
    fit = fit_law(df, method="staged", n_starts=32, bootstrap=40, seed=0)
    assert fit.optimizer.bootstrap_converged == 40
    truth = true_values(TRUE)
    hits = [lo <= truth[k] <= hi for k, (lo, hi) in fit.ci95.items()]
    assert np.mean(hits) >= 0.8, fit.ci95


def test_each_resample_keeps_its_lowest_objective_refit():
    """Resample b's refits are rows b·M … b·M + M − 1; it keeps the lowest finite objective."""
    from cdlaw.fit.bootstrap import _best_per_resample

    x = np.arange(6.0)[:, None]
    f = np.array([3.0, 1.0, np.nan, 0.5, 2.0, 9.0])  # B = 2 resamples × M = 3 starts
    converged = np.array([True, False, True, True, True, True])
    kept, n_ok = _best_per_resample(x, f, converged, 2, 3)
    assert kept[:, 0].tolist() == [1.0, 3.0] and n_ok == 1


def test_refits_start_once_from_each_distinct_minimum():
    """The best fit first, then each other minimum once, however often the polish found it."""
    from cdlaw.fit.search import Solution, boot_starts

    best, other = np.zeros(3), np.ones(3)
    cands = np.array([best, other, other + 1e-5, best + 1e-5])
    sol = Solution(best, 0.0, True, "", cands, 4, 4)
    assert boot_starts(sol).tolist() == [best.tolist(), other.tolist()]


def test_n_or_d_in_millions_or_a_perplexity_is_fitted_with_a_warning():
    """A power law fits 57.3 (for 57.3M) as well as the count, and a perplexity about as
    well as a loss, so the fit cannot refuse them; it says the constants are then in the
    table's units."""
    N, D = (a.ravel() for a in np.meshgrid([1e7, 3e7, 1e8, 3e8], [1e9, 3e9, 1e10]))
    table = pd.DataFrame({"n_params": N, "fresh_tokens": D, "derived_tokens": 0.0,
                          "loss": 1.7 + 400 / N**0.34 + 400 / D**0.28})  # fmt: skip
    counted = fit_law(table, "chinchilla", n_starts=16)
    assert not any("which no run is" in w for w in counted.warnings)
    millions = fit_law(table.assign(n_params=N / 1e6), "chinchilla", n_starts=16)
    (said,) = [w for w in millions.warnings if "which no run is" in w]
    assert said.startswith("N is as small as 10 parameters") and "n_params in millions" in said
    billions = fit_law(table.assign(fresh_tokens=D / 1e9), "chinchilla", n_starts=16)
    assert any(w.startswith("D is as small as 1 tokens") for w in billions.warnings)
    # the exponents do not see the unit; only A (or B) does
    assert millions.law.params["alpha"] == pytest.approx(counted.law.params["alpha"], rel=1e-3)
    perplexity = fit_law(table.assign(loss=np.exp(table.loss)), "chinchilla", n_starts=16)
    assert any("if the column holds perplexity" in w for w in perplexity.warnings)
    assert not any("perplexity" in w for w in counted.warnings)
