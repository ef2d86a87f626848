"""The planner (docs/plan.md): published optima, closed forms, and the shape of the plan."""

import json
import math

import numpy as np
import pytest

from cdlaw.law import PRESETS, Law
from cdlaw.laws.chinchilla import chinchilla_loss
from cdlaw.plan.memory import GIB, activation_bytes, model_shape, training_cost
from cdlaw.plan.optimum import budget_loss, chinchilla_optimal_n_params
from cdlaw.plan.planner import frontier, plan
from cdlaw.plan.result import Plan
from cdlaw.plan.source import load_law
from cdlaw.regimes import classify
from cdlaw.system.errors import BadInput

QIN = PRESETS["qin2026"]
MUENNIGHOFF = PRESETS["muennighoff2023"]

# ---------------------------------------------------------------------------------------
# Muennighoff et al. 2023: the datablations README (github.com/huggingface/datablations,
# README.md, section "Parametric Fit").
# ---------------------------------------------------------------------------------------

# The README's constants, in log space: a, b, e, alpha, beta, rd_star, rn_star.
README_CONSTANTS = [6.255414, 7.3049974, 0.6254804, 0.3526596, 0.3526596, 15.387756, 5.309743]


def readme_law() -> Law:
    a, b, e, alpha, beta, rd, rn = README_CONSTANTS
    return Law(
        "muennighoff",
        {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta},
        {"repetition": {"rstar_d": rd, "rstar_n": rn}},
    )


def test_muennighoff_law_reproduces_the_readme_losses():
    # README: scaling_law(N, D, U) with D = all training tokens and U the unique ones:
    #   scaling_law(6.34e9, 242e9, 25e9) -> 2.2256440889984477  (Figure 1, right)
    #   scaling_law(8.67e9, 178e9, 25e9) -> 2.2269634075087867
    # In cdlaw's names: fresh_tokens = U, derived_tokens = D − U.
    law = readme_law()
    for n, d, want in [(6.34e9, 242e9, 2.2256440889984477), (8.67e9, 178e9, 2.2269634075087867)]:
        assert law.loss(n, 25e9, d - 25e9, "repetition") == pytest.approx(want, rel=1e-13)
        # The preset rounds E, A, B to the paper's printed digits: 5e-5 nats off.
        assert MUENNIGHOFF.loss(n, 25e9, d - 25e9, "repetition") == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("law", [MUENNIGHOFF, readme_law()], ids=["preset", "readme-constants"])
def test_muennighoff_reproduces_the_readme_optimal_allocation(law):
    # README: optimal_allocation(8.67e9, 178e9, 25e9) searches model sizes at fixed N·D
    # (= C/6, i.e. fixed compute) with U = 25B unique tokens and prints
    #   "Optimal configuration: ... -> 227B tokens, 9.1 epochs, 6.8B parameters".
    # Its D is all tokens, U = min(U, D) and the rest repeats: exactly plan()'s
    # D = min(U, C/6N), D′ = C/6N − D, so the budget is C = 6·8.67e9·178e9.
    C, U = 6 * 8.67e9 * 178e9, 25e9
    p = plan(law, C, U, "repetition")
    tokens = p.fresh_tokens + p.derived_tokens
    assert round(tokens / 1e9) == 227
    assert round(tokens / U, 1) == 9.1 and round(p.epochs, 1) == 9.1
    assert round(p.n_params / 1e9, 1) == 6.8
    assert p.strategy == "repetition" and p.fresh_tokens == U

    # The README's own grid search (N = N_BASE/i and N_BASE·i, i in linspace(1.0001, 3, 500)),
    # run on the same law, finds nothing better and lands within one grid step.
    i = np.linspace(1.0001, 3, 500)
    n_grid = np.concatenate([8.67e9 / i, 8.67e9 * i])
    losses = budget_loss(law, "repetition", C, n_grid, U)
    assert losses.min() >= p.predicted_loss - 1e-12
    assert n_grid[np.argmin(losses)] == pytest.approx(p.n_params, rel=0.01)


# ---------------------------------------------------------------------------------------
# Chinchilla closed form and the CD law's reduction to it.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["chinchilla-hoffmann", "chinchilla-besiroglu"])
@pytest.mark.parametrize("C", [1e18, 1e21, 1e24])
def test_chinchilla_presets_match_the_closed_form(name, C):
    law = PRESETS[name]
    a, b = law.params["alpha"], law.params["beta"]
    G = (a * law.params["A"] / (b * law.params["B"])) ** (1 / (a + b))
    n_star = G * (C / 6) ** (b / (a + b))
    p = plan(law, C)  # unlimited unique tokens
    assert p.n_params == pytest.approx(n_star, rel=1e-6)
    assert p.fresh_tokens == pytest.approx(C / (6 * n_star), rel=1e-6)
    assert p.derived_tokens == 0 and p.strategy == "none" and p.epochs == 1
    assert p.naive.n_params == pytest.approx(n_star, rel=1e-14)
    assert p.naive.loss_gap == pytest.approx(0, abs=1e-12)


def test_a_law_without_derived_tokens_says_it_cannot_weigh_repeats():
    """Capped by U, a Chinchilla law plans one epoch and scores repeats as worthless: the
    plan says why, rather than calling the derived tokens saturated."""
    law = PRESETS["chinchilla-hoffmann"]
    capped = plan(law, 1e24, 1e11)
    assert capped.fresh_tokens == pytest.approx(1e11) and capped.derived_tokens == 0
    assert capped.naive.derived_tokens > 0  # the repeats it scores at no value
    assert any("gives derived tokens no value, so this plan stops at one epoch" in w
               for w in capped.warnings)  # fmt: skip
    free = plan(law, 1e24, 1e14)  # U does not bind: nothing to say
    assert not any("derived tokens no value" in w for w in free.warnings)
    cd = plan(QIN, 1e24, 1e11)  # a law that weighs repeats plans them
    assert not any("derived tokens no value" in w for w in cd.warnings)


@pytest.mark.parametrize("headroom", [1.0, 1.5, 1e3])
def test_cd_plan_with_enough_data_is_the_chinchilla_plan(headroom):
    C = 1e21
    n_star = chinchilla_optimal_n_params(QIN, C)
    U = headroom * C / (6 * n_star)  # U ≥ C/(6N*)
    p = plan(QIN, C, U)
    assert p.n_params == pytest.approx(n_star, rel=1e-6)
    assert p.derived_tokens == 0 and p.strategy == "none"
    want = chinchilla_loss(n_star, C / (6 * n_star), **QIN.params)
    assert p.predicted_loss == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------------------------------
# The plan is an optimum, and moves the right way.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "law,strategy,C,U",
    [
        (QIN, "repetition", 1e21, 5e9),
        (QIN, "paraphrase", 1e21, 5e9),
        (QIN, "paraphrase", 1e19, 1e8),
        (QIN, "repetition", 1e18, 1e12),
        (MUENNIGHOFF, "repetition", 1e22, 25e9),
        (PRESETS["chinchilla-besiroglu"], "auto", 1e20, 1e9),
    ],
)
def test_plan_is_a_true_minimum(law, strategy, C, U):
    p = plan(law, C, U, strategy)
    s = "none" if strategy == "auto" else strategy
    for factor in (0.95, 1.05):
        assert budget_loss(law, s, C, p.n_params * factor, U) > p.predicted_loss
    # and the plan spends exactly the budget
    assert 6 * p.n_params * (p.fresh_tokens + p.derived_tokens) == pytest.approx(C, rel=1e-12)


@pytest.mark.parametrize("law", [QIN, MUENNIGHOFF], ids=["qin2026", "muennighoff2023"])
def test_less_unique_data_means_more_epochs_and_higher_loss(law):
    C = 1e21
    t_star = C / (6 * chinchilla_optimal_n_params(law, C))  # the tokens Chinchilla wants
    unique = np.geomspace(2 * t_star, 1e7, 25)
    plans = [plan(law, C, u, "repetition") for u in unique]
    derived = np.array([p.derived_tokens for p in plans])
    epochs = np.array([p.epochs for p in plans])
    ratio = np.array([p.derived_tokens / p.fresh_tokens for p in plans])
    loss = np.array([p.predicted_loss for p in plans])
    assert derived[0] == 0 and epochs[0] == 1  # more unique data than Chinchilla wants
    assert np.all(np.diff(loss) >= 0) and np.all(np.diff(loss[2:]) > 0)
    assert np.all(np.diff(epochs[2:]) > 0) and np.all(np.diff(ratio[2:]) > 0)
    assert epochs[-1] > 100
    # D′ grows as the data constraint starts to bind; far below, the model grows and the
    # total token count falls faster than U, so D′ itself peaks (epochs keep growing).
    onset = [
        plan(law, C, u, "repetition").derived_tokens for u in np.geomspace(t_star, t_star / 4, 6)
    ]
    assert np.all(np.diff(onset) > 0)


def test_qin2026_paraphrase_artifact_is_flagged():
    # qin2026's paraphrase rho = −1.30 < −1: far beyond its fitted r, D(1 + R*) falls as D
    # grows, so the law "prefers" a smaller corpus. Wherever the planned loss falls as U
    # shrinks, the plan must say so.
    C = 1e21
    plans = [plan(QIN, C, u, "paraphrase") for u in np.geomspace(1e11, 1e7, 17)]
    flagged = [any("fresh tokens were swapped" in w for w in p.warnings) for p in plans]
    for prev, cur, flag in zip(plans[:-1], plans[1:], flagged[1:], strict=True):
        if cur.predicted_loss < prev.predicted_loss:
            assert flag
    assert not any(flagged[:5]) and all(flagged[-5:])
    assert "rho = -1.3 < -1" in plans[-1].warnings[-1]


@pytest.mark.parametrize("C,U,winner", [(1e21, 5e9, "repetition"), (1e19, 1e8, "paraphrase")])
def test_auto_picks_the_strategy_with_the_lower_loss(C, U, winner):
    p = plan(QIN, C, U, "auto")
    single = {s: plan(QIN, C, U, s) for s in ("repetition", "paraphrase")}
    assert p.strategy == winner
    assert p.predicted_loss == min(q.predicted_loss for q in single.values())
    assert p.n_params == single[winner].n_params
    for s, q in single.items():
        assert p.candidates[s].predicted_loss == q.predicted_loss
        assert p.candidates[s].loss_gap == pytest.approx(q.predicted_loss - p.predicted_loss)
    loser = "paraphrase" if winner == "repetition" else "repetition"
    assert p.candidates[loser].loss_gap > 0.01


def test_epochs_and_paraphrase_passes():
    rep = plan(QIN, 1e21, 5e9, "repetition")
    assert rep.epochs == pytest.approx((rep.fresh_tokens + rep.derived_tokens) / 5e9, rel=1e-15)
    assert rep.paraphrase_passes == 0
    par = plan(QIN, 1e21, 5e9, "paraphrase")
    assert par.paraphrase_passes == pytest.approx(par.derived_tokens / 5e9, rel=1e-15)
    assert par.epochs == 1


def test_a_declared_strategy_reports_its_derived_passes():
    law = Law("cd", QIN.params, {**QIN.strategies, "distill": QIN.strategies["paraphrase"]})
    dis = plan(law, 1e21, 5e9, "distill")
    assert dis.derived_tokens > 0 and dis.paraphrase_passes == 0 and dis.epochs == 1
    assert dis.derived_passes == pytest.approx(dis.derived_tokens / 5e9, rel=1e-15)
    got = dis.to_dict()
    assert got["derived_passes"] == dis.derived_passes and got["paraphrase_passes"] == 0
    assert got["candidates"]["distill"]["derived_passes"] == dis.derived_passes
    assert Plan.from_dict(got).to_dict() == got
    # none, repetition and paraphrase plans read as they always have: no new key
    par = plan(QIN, 1e21, 5e9, "paraphrase")
    assert par.derived_passes == par.paraphrase_passes > 0
    assert "derived_passes" not in json.dumps(par.to_dict())
    assert plan(QIN, 1e21, 5e9, "repetition").derived_passes == 0


def test_fixed_n_params_decides_only_the_split():
    C, U, N = 1e21, 5e9, 2e9
    p = plan(QIN, C, U, n_params=N)
    assert p.n_params == N and p.n_params_fixed
    assert p.fresh_tokens == U and p.derived_tokens == pytest.approx(C / (6 * N) - U, rel=1e-15)
    assert p.predicted_loss == min(
        float(QIN.loss(N, U, C / (6 * N) - U, s)) for s in ("repetition", "paraphrase")
    )
    small = plan(QIN, 1e18, 5e9, n_params=1e8)  # C/(6N) < U: no derived tokens
    assert small.derived_tokens == 0 and small.fresh_tokens == pytest.approx(1e18 / 6e8)


def test_marginal_gain_is_the_slope_of_the_optimal_loss():
    for law, C, U in [
        (QIN, 1e21, 5e9),
        (QIN, 1e19, 1e8),
        (PRESETS["chinchilla-hoffmann"], 1e22, None),
    ]:
        p = plan(law, C, U)
        assert p.marginal_gain_per_flop > 0
        h = 1e-3
        up, down = plan(law, C * (1 + h), U), plan(law, C * (1 - h), U)
        want = -(up.predicted_loss - down.predicted_loss) / (2 * h * C)
        assert p.marginal_gain_per_flop == pytest.approx(want, rel=1e-4)
        assert p.marginal_gain_per_doubling == pytest.approx(want * C * math.log(2), rel=1e-4)
    # Chinchilla: L*(C) = E + k·C^(−αβ/(α+β)), so −dL*/dC = (αβ/(α+β))·(L* − E)/C exactly.
    law = PRESETS["chinchilla-hoffmann"]
    p = plan(law, 1e22)
    a, b = law.params["alpha"], law.params["beta"]
    want = a * b / (a + b) * (p.predicted_loss - law.params["E"]) / 1e22
    assert p.marginal_gain_per_flop == pytest.approx(want, rel=1e-6)


def test_naive_and_four_epoch_baselines():
    C, U = 1e21, 5e9
    p = plan(QIN, C, U)
    n_naive = chinchilla_optimal_n_params(QIN, C)
    t_naive = C / (6 * n_naive)
    assert p.naive.n_params == n_naive and p.naive.fresh_tokens == U
    assert p.naive.derived_tokens == pytest.approx(t_naive - U, rel=1e-14)
    assert p.naive.strategy == "repetition" and p.naive.epochs > 4
    # the naive planner believes every token is fresh; the CD law disagrees
    believed = chinchilla_loss(n_naive, t_naive, **QIN.params)
    assert p.naive.believed_loss == pytest.approx(believed, rel=1e-14)
    assert p.naive.predicted_loss == pytest.approx(
        float(QIN.loss(n_naive, U, t_naive - U, "repetition")), rel=1e-14
    )
    assert p.naive.predicted_loss > p.naive.believed_loss
    # four epochs at most, the rest in N
    assert p.four_epoch.epochs == pytest.approx(4, rel=1e-14)
    assert p.four_epoch.n_params == pytest.approx(C / (6 * 4 * U), rel=1e-14)
    for a in (p.naive, p.four_epoch):
        assert a.loss_gap == pytest.approx(a.predicted_loss - p.predicted_loss, rel=1e-14)
        assert a.loss_gap > 0.01  # at 7.5 epochs, both rules leave real loss on the table
    # where Chinchilla already wants ≤ 4 epochs, the four-epoch rule is the naive plan
    q = plan(QIN, 1e21, 0.3 * t_naive)
    assert q.four_epoch.n_params == q.naive.n_params


def test_regime_is_classify_at_the_plan():
    for C, U in [(1e21, 5e9), (1e23, 5e9), (1e20, None)]:
        p = plan(QIN, C, U, saturation=0.8, tolerance=0.02)
        s = "none" if p.strategy == "none" else p.strategy
        t = classify(
            QIN, p.n_params, p.fresh_tokens, p.derived_tokens, s, saturation=0.8, tolerance=0.02
        )
        assert p.regime == t.regime[()]
        assert (p.loss_one_epoch, p.loss_data_floor, p.loss_model_floor) == (
            t.loss_one_epoch[()],
            t.loss_data_floor[()],
            t.loss_model_floor[()],
        )
        assert (p.saturation, p.tolerance) == (0.8, 0.02)
    assert plan(QIN, 1e21, 5e9).regime == "compute-bound"
    assert plan(QIN, 1e23, 5e9).regime == "data-bound"


def test_frontier_is_plan_at_each_budget():
    budgets = np.logspace(18, 24, 7)
    rows = frontier(QIN, budgets, 5e9, "auto").plans
    assert [r.budget_flops for r in rows] == list(budgets)
    assert np.all(np.diff([r.predicted_loss for r in rows]) < 0)
    assert np.all(np.diff([r.n_params for r in rows]) > 0)
    assert rows[3].to_dict() == plan(QIN, budgets[3], 5e9).to_dict()


def test_plan_round_trips_through_json():
    for p in (
        plan(QIN, 1e21, 5e9, gpu_memory_gib=80, gpu_flops=989e12, mfu=0.4),
        plan(PRESETS["chinchilla-hoffmann"], 1e20),
        plan(QIN, 1e20, 1e9, "paraphrase", n_params=3e8),
    ):
        d = json.loads(json.dumps(p.to_dict()))
        back = Plan.from_dict(d)
        assert back.to_dict() == d
        assert back.n_params == p.n_params and back.naive == p.naive
        assert back.candidates == p.candidates


# ---------------------------------------------------------------------------------------
# Laws from a fit.json: bootstrap band, data-range warnings, and bad input.
# ---------------------------------------------------------------------------------------


def qin_fit(**extra) -> dict:
    return {**QIN.to_dict(), "method": "joint", **extra}


def write(tmp_path, obj, name="fit.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


def widened_band(losses, floors, o) -> tuple[float, float]:
    """docs/plan.md's band: the refits' losses at the plan, 2.5–97.5 percentiles, widened by
    the optimism o on its side: up by |o|, or down on each refit's log(L − E) scale."""
    losses, floors = np.asarray(losses), np.asarray(floors)
    lo, hi = np.percentile(losses, [2.5, 97.5])
    if o < 0:
        return lo, hi - o
    reducible = losses - floors
    return np.percentile(floors + reducible * np.exp(-o / reducible), 2.5), hi


def test_bootstrap_band_scores_the_plan_under_each_sample(tmp_path):
    rng = np.random.default_rng(0)
    names = ["E", "A", "B", "alpha", "beta", "repetition.K", "repetition.rho", "repetition.sigma"]
    point = [*QIN.params.values(), *QIN.strategies["repetition"].values()]
    vectors = [list(np.array(point) * (1 + 0.02 * rng.standard_normal(8))) for _ in range(200)]
    fit = qin_fit(bootstrap=vectors, bootstrap_params=names)
    p = plan(load_law(write(tmp_path, fit)), 1e21, 5e9, "repetition")
    losses, floors = [], []
    for v in vectors:
        d = dict(zip(names, v, strict=True))
        law = Law(
            "cd",
            {k: d[k] for k in ("E", "A", "B", "alpha", "beta")},
            {
                "repetition": {k: d[f"repetition.{k}"] for k in ("K", "rho", "sigma")},
                "paraphrase": QIN.strategies["paraphrase"],
            },
        )
        losses.append(float(law.loss(p.n_params, p.fresh_tokens, p.derived_tokens, "repetition")))
        floors.append(law.params["E"])
    # widened by the plan's optimism, on its side (test_optimism_… below)
    want = widened_band(losses, floors, p.optimism)
    assert p.predicted_loss_ci95 == pytest.approx(want, rel=1e-14)
    assert p.predicted_loss_ci95[0] < p.predicted_loss < p.predicted_loss_ci95[1]

    # names cdlaw never writes (log-space e, a, b): no band, and the plan names the parameter
    log_names = [
        "e",
        "a",
        "b",
        "alpha",
        "beta",
        "repetition.k",
        "repetition.rho",
        "repetition.sigma",
    ]
    fit = qin_fit(bootstrap=vectors, bootstrap_params=log_names)
    q = plan(load_law(write(tmp_path, fit)), 1e21, 5e9, "repetition")
    assert q.predicted_loss_ci95 is None and any("'e'" in w for w in q.warnings)

    # unnamed samples: no band, and the plan says why
    r = plan(load_law(write(tmp_path, qin_fit(bootstrap=vectors))), 1e21, 5e9, "repetition")
    assert r.predicted_loss_ci95 is None and any("bootstrap_params" in w for w in r.warnings)
    assert plan(QIN, 1e21, 5e9).predicted_loss_ci95 is None


def test_bootstrap_band_reads_the_fit_vector_names_of_a_muennighoff_fit(tmp_path):
    from cdlaw.fit.vector import fit_vector_names, law_from_public_vector

    names = fit_vector_names("muennighoff", ["repetition"])
    point = [
        *MUENNIGHOFF.params.values(),
        5.309743,
        15.387756,
    ]
    rng = np.random.default_rng(1)
    vectors = [list(np.array(point) * (1 + 0.03 * rng.standard_normal(7))) for _ in range(50)]
    fit = {**MUENNIGHOFF.to_dict(), "bootstrap": vectors, "bootstrap_params": names}
    p = plan(load_law(write(tmp_path, fit)), 1e22, 25e9)
    losses = [
        float(
            law_from_public_vector("muennighoff", ["repetition"], v).loss(
                p.n_params, p.fresh_tokens, p.derived_tokens, "repetition"
            )
        )
        for v in vectors
    ]
    floors = [v[0] for v in vectors]  # E
    want = widened_band(losses, floors, p.optimism)
    assert p.predicted_loss_ci95 == pytest.approx(want, rel=1e-14)


def test_warns_when_the_plan_leaves_the_fitted_range(tmp_path):
    fit = qin_fit(
        data_range={
            "n_params": [1e7, 6e8],
            "tokens_per_param": [5, 200],
            "derived_ratio": [0, 4],
        }
    )
    p = plan(load_law(write(tmp_path, fit)), 1e21, 5e9, "repetition")
    w = "\n".join(p.warnings)
    assert f"is {p.n_params / 6e8:.3g}× the largest fitted size (600M)" in w
    assert f"is {5 / (p.fresh_tokens / p.n_params):.3g}× below the smallest fitted tokens" in w
    assert f"D′/D = {p.derived_tokens / p.fresh_tokens:.3g} is " in w
    assert len(p.warnings) == 3
    inside = plan(load_law(write(tmp_path, fit)), 1e18, 2e9, "repetition")
    assert inside.warnings == ()


def test_a_plan_just_past_the_fitted_sizes_says_by_how_much(tmp_path):
    # a plan at 1.0066× the largest size once read "is 1× the largest fitted size"
    p0 = plan(QIN, 1e18, 2e9, "repetition")
    top = p0.n_params / 1.0066
    fit = qin_fit(data_range={"n_params": [1e6, top]})
    p = plan(load_law(write(tmp_path, fit)), 1e18, 2e9, "repetition")
    assert p.n_params == pytest.approx(p0.n_params, rel=1e-9)
    assert len(p.warnings) == 1 and "is 1.0066× the largest fitted size" in p.warnings[0]


def test_a_range_warning_never_shows_a_ratio_beside_two_equal_numbers(tmp_path):
    # "318B is 1.0008× the largest fitted (318B)": the numbers get the digits to differ
    import re

    p0 = plan(QIN, 1e18, 2e9, "repetition")
    for excess in (1.0008, 1.03, 2.0):
        fit = qin_fit(data_range={"n_params": [1e6, p0.n_params / excess]})
        (w,) = plan(load_law(write(tmp_path, fit)), 1e18, 2e9, "repetition").warnings
        shown, ratio, bound = re.fullmatch(
            r"N = (\S+) is (\S+)× the largest fitted size \((\S+)\)", w
        ).groups()
        assert shown != bound and float(ratio) == pytest.approx(excess, rel=1e-3), w
    # an excess below rounding is no extrapolation: no warning
    fit = qin_fit(data_range={"n_params": [1e6, p0.n_params / 1.00001]})
    assert plan(load_law(write(tmp_path, fit)), 1e18, 2e9, "repetition").warnings == ()


@pytest.mark.parametrize(
    "coordinate",
    ["n_params above", "n_params below", "tokens_per_param below", "derived_ratio above"],
)
def test_a_plan_past_30x_its_fitted_range_is_refused_unless_insisted_on(tmp_path, coordinate):
    # the demo's fit planned N = 33.2B, 165,767× its largest run, with no more than a warning
    key, side = coordinate.split()
    p0 = plan(QIN, 1e21, 5e9, "repetition")
    value = {"n_params": p0.n_params, "tokens_per_param": p0.fresh_tokens / p0.n_params,
             "derived_ratio": p0.best.derived_ratio}[key]  # fmt: skip

    def fitted(factor):
        bounds = [0, value / factor] if side == "above" else [value * factor, 1e30]
        return load_law(write(tmp_path, qin_fit(data_range={key: bounds})))

    inside = plan(fitted(29), 1e21, 5e9, "repetition", extrapolate=False)  # 29×: a warning
    assert inside.extrapolated == () and len(inside.warnings) == 1
    assert inside.to_dict()["extrapolated"] == []
    with pytest.raises(BadInput) as e:
        plan(fitted(31), 1e21, 5e9, "repetition", extrapolate=False)
    message = str(e.value)
    assert "beyond the 30× extrapolation limit" in message and "--extrapolate" in message
    assert message.count(". ") == 0  # one sentence
    insisted = plan(fitted(31), 1e21, 5e9, "repetition", extrapolate=True)
    assert insisted.extrapolated == (insisted.warnings[0],) and "31×" in insisted.warnings[0]
    assert Plan.from_dict(insisted.to_dict()).extrapolated == insisted.extrapolated


def test_the_derived_ratio_is_checked_against_the_plans_own_strategys_runs(tmp_path):
    # Paraphrase runs went to r = 40, repetition runs only to r = 4: a repetition plan at
    # r ≈ 11 extrapolates repetition's R*, though the table's largest r covers it.
    rng = {"derived_ratio": [0, 40], "repetition": {"derived_ratio": [0, 4]},
           "paraphrase": {"derived_ratio": [0, 40]}}  # fmt: skip
    law = load_law(write(tmp_path, qin_fit(data_range=rng)))
    rep = plan(law, 1e21, 5e9, "repetition")
    r = rep.derived_tokens / rep.fresh_tokens
    assert 4 < r < 40
    assert rep.warnings == (
        f"D′/D = {r:.3g} is {r / 4:.3g}× the largest fitted repetition derived ratio (4)",
    )
    para = plan(law, 1e21, 5e9, "paraphrase")
    assert para.derived_tokens / para.fresh_tokens < 40 and para.warnings == ()


def test_bad_input_is_one_clear_sentence(tmp_path):
    cases = [
        (lambda: plan(QIN, 0), "--budget-flops must be a positive number"),
        (lambda: plan(QIN, -1e21), "--budget-flops must be a positive number"),
        (lambda: plan(QIN, float("nan")), "--budget-flops"),
        (lambda: plan(QIN, 1e21, n_params=0), "--n-params"),
        (lambda: plan(QIN, 1e21, 5e9, mfu=1.5, gpu_flops=1e15), "--mfu 1.5 must lie in (0, 1]"),
        (lambda: plan(QIN, 1e21, 5e9, mfu=0, gpu_flops=1e15), "--mfu 0 must lie in (0, 1]"),
        (lambda: plan(MUENNIGHOFF, 1e21, 5e9, "paraphrase"), "has no paraphrase parameters"),
        (lambda: plan(QIN, 1e21, 5e9, "shuffle"), "has no shuffle parameters (it has: repetition"),
        (
            lambda: plan(QIN, 1e21, 5e9, "Shuffle!"),
            "--strategy 'Shuffle!' is not auto or a strategy's name",
        ),
        (lambda: load_law("qin2027"), "is not a preset (chinchilla-hoffmann"),
        (lambda: load_law(str(tmp_path / "nope.json")), "no such fit file"),
        (lambda: load_law(write(tmp_path, "{oops", "broken.json")), "not a readable JSON"),
        (lambda: load_law(write(tmp_path, {"rows": 3}, "other.json")), "not a fit"),
        (lambda: load_law(write(tmp_path, {"params": {"E": 1}}, "half.json")), "lacks A, B"),
    ]
    for call, text in cases:
        with pytest.raises(BadInput) as e:
            call()
        msg = str(e.value)
        assert text in msg, msg
        assert "\n" not in msg and msg.endswith(".")
    no_paraphrase = qin_fit(strategies={"repetition": QIN.strategies["repetition"]})
    source = load_law(write(tmp_path, no_paraphrase))
    with pytest.raises(BadInput, match="has no paraphrase parameters"):
        plan(source, 1e21, 5e9, "paraphrase")
    assert plan(source, 1e21, 5e9).strategy == "repetition"


# ---------------------------------------------------------------------------------------
# Memory and GPU hours.
# ---------------------------------------------------------------------------------------


def test_memory_and_gpu_hours_by_hand():
    N, T, V = 4e9, 4e10, 100278
    c = training_cost(N, T, gpu_memory_gib=80, gpu_flops=989e12, mfu=0.4)
    s = c.shape
    assert c.n_params_total == N + V * s.d_model
    assert c.weights_gib == pytest.approx(2 * c.n_params_total / GIB)
    assert c.gradients_gib == pytest.approx(2 * c.n_params_total / GIB)
    assert c.optimizer_gib == pytest.approx(12 * c.n_params_total / GIB)  # fp32 master + m + v
    per_token = s.n_layers * 2 * (10 * s.d_model + 4 * s.mlp_hidden) + 4 * s.d_model
    chunk = 2**24 // V  # tokens per chunk of the LM head and its loss (cdlaw.shapes)
    assert activation_bytes(s, V, 4096) == per_token * 4096 + 8 * chunk * V
    assert c.activations_gib == pytest.approx(activation_bytes(s, V, 4096) / GIB)
    assert c.total_gib == pytest.approx(16 * c.n_params_total / GIB + c.activations_gib)
    assert c.fits is False and c.total_gib > 80
    states = 16 * c.n_params_total / GIB
    assert c.min_gpus_sharded == math.ceil(states / (80 - c.activations_gib))
    assert c.gpu_hours == pytest.approx(6 * N * T / (989e12 * 0.4) / 3600, rel=1e-14)
    attn = 12 * s.n_layers * s.d_model * 4096 * T
    assert c.gpu_hours_with_attention == pytest.approx(
        (6 * N * T + attn) / (989e12 * 0.4) / 3600, rel=1e-14
    )
    assert training_cost(1e8, 2e9, gpu_memory_gib=80).fits is True
    assert training_cost(1e8, 2e9, gpu_memory_gib=80).gpu_hours is None


def test_the_logits_in_memory_are_one_chunk_whatever_the_micro_batch():
    """The loss goes through the LM head in chunks (cdlaw.shapes.CHUNK_LOGITS): from one
    micro-batch row to 32 the activations grow by the layers' per-token bytes alone, and
    the logits are one chunk's, 8 bytes each (128 MiB), not 32 × 4096 tokens' of a 100k
    vocabulary (24 GiB in bf16 alone); a micro-batch whose logits fit in one chunk holds
    them whole."""
    one, many = (training_cost(1e8, 2e9, micro_batch=m) for m in (1, 32))
    s, V = one.shape, one.vocab_size
    per_token = s.n_layers * 2 * (10 * s.d_model + 4 * s.mlp_hidden) + 4 * s.d_model
    grown = (many.activations_gib - one.activations_gib) * GIB
    assert grown == pytest.approx(31 * 4096 * per_token)
    logits = many.activations_gib * GIB - 32 * 4096 * per_token
    assert logits == pytest.approx(8 * (2**24 // V) * V) and logits < 2**27
    small = activation_bytes(s, 512, 64)  # 64 tokens × 512: one chunk's worth, held whole
    assert small == 64 * per_token + 8 * 64 * 512


def test_model_shape_uses_the_sweep_ladder_and_falls_back_to_aspect_ratio():
    from cdlaw.shapes import count_params

    s = model_shape(3.7e8)
    assert s.source.startswith("cdlaw.shapes")
    assert count_params(s, 100278).n_params == pytest.approx(3.7e8, rel=0.1)
    tiny = model_shape(1e5)  # below the ladder for a 100k vocabulary: aspect-ratio rule
    assert tiny.source.startswith("aspect ratio") and tiny.d_model == 64 * tiny.n_layers


def test_plan_carries_the_memory_estimate():
    p = plan(QIN, 1e21, 5e9, gpu_memory_gib=80, gpu_flops=989e12)
    m = p.memory
    assert m["mfu"] == 0.4 and m["n_params"] == p.n_params
    assert m["gpu_hours"] == pytest.approx(1e21 / (989e12 * 0.4) / 3600, rel=1e-12)
    assert "16 bytes/param" in m["precision"]
    assert plan(QIN, 1e21, 5e9).memory is None


@pytest.mark.parametrize(
    ("law", "strategy"), [(QIN, "repetition"), (QIN, "paraphrase"), (MUENNIGHOFF, "auto")]
)
def test_flops_count_derived_tokens_too(law, strategy):
    # data-constrained: the plan trains on D′ > 0 derived tokens beyond its U fresh ones
    for budget in (1e21, 3e22):
        p = plan(law, budget, 2e9, strategy)
        d = p.to_dict()
        assert d["derived_tokens"] > 0 and d["fresh_tokens"] == 2e9
        assert d["tokens_trained"] == d["fresh_tokens"] + d["derived_tokens"]
        assert d["flops"] == pytest.approx(6 * d["n_params"] * d["tokens_trained"], rel=1e-12)
        assert d["flops"] == pytest.approx(budget, rel=1e-9)
        assert Plan.from_dict(d).to_dict()["flops"] == d["flops"]


def _draws_with_flips(n_draws: int, n_flipped: int) -> list[Law]:
    """qin2026 with a 1% jitter of K per draw; in n_flipped draws repetition's K is cut 100×."""
    rng = np.random.default_rng(1)
    draws = []
    for i in range(n_draws):
        strategies = {s: dict(p) for s, p in QIN.strategies.items()}
        for p in strategies.values():
            p["K"] *= 1 + 0.01 * rng.standard_normal()
        if i < n_flipped:
            strategies["repetition"]["K"] /= 100
        draws.append(Law("cd", QIN.params, strategies))
    return draws


def _brute_force_plan(law: Law, strategy: str, C: float, U: float) -> tuple[float, float]:
    """(N*, L*) by a dense log grid over N: the planner's answer, found another way."""
    n = np.exp(np.linspace(math.log(1e7), math.log(1e11), 40_001))
    losses = budget_loss(law, strategy, C, n, U)
    i = int(np.nanargmin(losses))
    return float(n[i]), float(losses[i])


def test_decision_spread_is_each_bootstrap_laws_own_plan():
    from cdlaw.plan.source import PlanningLaw

    C, U = 1e21, 5e9
    assert plan(QIN, C, U).strategy == "repetition"
    draws = _draws_with_flips(20, 6)
    p = plan(PlanningLaw("x", QIN, None, tuple(draws)), C, U)
    own = [{s: _brute_force_plan(d, s, C, U) for s in ("repetition", "paraphrase")} for d in draws]
    winners = [min(o, key=lambda s: o[s][1]) for o in own]
    assert winners.count("paraphrase") == 6  # the 100× smaller repetition K flips the choice
    assert p.strategy == "repetition"
    assert p.strategy_share == {"repetition": 0.7, "paraphrase": 0.3}
    assert p.strategy_agreement == 0.7  # the chosen strategy's share
    sizes = [o["repetition"][0] for o in own]
    assert p.n_params_ci95 == pytest.approx(tuple(np.percentile(sizes, [2.5, 97.5])), rel=1e-3)
    lo, hi = p.n_params_ci95
    assert lo < hi  # the repetition N of the flipped draws differs from the others'

    forced = plan(PlanningLaw("x", QIN, None, tuple(draws)), C, U, "paraphrase")
    assert forced.strategy_share is None and forced.n_params_ci95 is not None
    fixed = plan(PlanningLaw("x", QIN, None, tuple(draws)), C, U, n_params=3e9)
    assert fixed.n_params_ci95 is None and fixed.strategy_share == {"repetition": 0.7,
                                                                     "paraphrase": 0.3}  # fmt: skip
    assert plan(QIN, C, U).strategy_share is None  # no bootstrap, no spread
    fresh = plan(PlanningLaw("x", QIN, None, tuple(draws)), 1e18, 1e12)  # data to spare
    assert fresh.strategy == "none" and fresh.strategy_share is None

    d = json.loads(json.dumps(p.to_dict()))
    assert Plan.from_dict(d).to_dict() == d


def test_a_plan_with_no_derived_tokens_has_no_strategy_to_decide():
    # U just above the law's own compute-optimal D: the plan spends nothing derived. Refits
    # with half of A want a smaller model and more tokens than U, so they do spend derived
    # tokens and prefer a strategy (7 repetition, 3 paraphrase) — which decides nothing for
    # a plan that repeats and paraphrases nothing.
    from cdlaw.plan.source import PlanningLaw

    C = 1e21
    U = 1.05 * plan(QIN, C, 1e15).fresh_tokens
    draws = [
        Law("cd", {**d.params, "A": 0.5 * d.params["A"]}, d.strategies)
        for d in _draws_with_flips(10, 3)
    ]
    assert plan(draws[0], C, U).derived_tokens > 0  # the refits do want derived tokens
    p = plan(PlanningLaw("x", QIN, None, tuple(draws)), C, U)
    assert p.strategy == "none" and p.derived_tokens == 0
    assert p.strategy_share is None


def test_a_refit_under_which_the_strategies_tie_decides_nothing():
    from cdlaw.plan.checks import decision_spread

    plans = [
        {"repetition": (1e9, 2.0, 0, 0), "paraphrase": (2e9, 2.0, 0, 0)},  # a tie: no preference
        {"repetition": (1e9, 2.0, 0, 0), "paraphrase": (2e9, 1.9, 0, 0)},
        {"repetition": (3e9, 1.8, 0, 0), "paraphrase": (2e9, 1.9, 0, 0)},
        {"repetition": (5e9, 1.7, 0, 0), "paraphrase": (2e9, 1.9, 0, 0)},
    ]  # fmt: skip
    shares, band = decision_spread(plans, ["repetition", "paraphrase"], "repetition")
    assert shares == {"repetition": 2 / 3, "paraphrase": 1 / 3}
    assert band == pytest.approx(tuple(np.percentile([1e9, 1e9, 3e9, 5e9], [2.5, 97.5])))


def _draws_jittered(n_draws: int, sd: float) -> list[Law]:
    """qin2026 with each strategy's K scaled by exp(±sd·z), in mirrored pairs: draws
    spread evenly around the law, as bootstrap refits around a fit."""
    rng = np.random.default_rng(7)
    draws = []
    for _ in range(n_draws // 2):
        z = rng.standard_normal(2)
        for sign in (1, -1):
            strategies = {s: dict(p) for s, p in QIN.strategies.items()}
            for zi, p in zip(z, strategies.values(), strict=True):
                p["K"] *= math.exp(sign * sd * zi)
            draws.append(Law("cd", QIN.params, strategies))
    return draws


def test_optimism_is_each_refits_own_prediction_against_the_fit_at_its_plan():
    from cdlaw.plan.source import PlanningLaw

    C, U = 1e21, 5e9
    draws = _draws_jittered(20, 1.0)
    p = plan(PlanningLaw("x", QIN, None, tuple(draws)), C, U)
    gaps = []
    for d in draws:  # each draw's own plan, found by brute force, scored by the fit (QIN)
        own = {s: _brute_force_plan(d, s, C, U) for s in ("repetition", "paraphrase")}
        s = min(own, key=lambda k: own[k][1])
        n, loss = own[s]
        gaps.append(loss - float(budget_loss(QIN, s, C, n, U)))
    assert p.optimism == pytest.approx(np.mean(gaps), rel=1e-4)
    assert abs(p.optimism) > 1e-3
    # the band: the draws' losses at the plan, widened upward by the optimism
    at_plan = [float(d.loss(p.n_params, p.fresh_tokens, p.derived_tokens, p.strategy))
               for d in draws]  # fmt: skip
    lo, hi = np.percentile(at_plan, [2.5, 97.5])
    assert p.predicted_loss_ci95 == pytest.approx((lo, hi - p.optimism), rel=1e-12)
    assert Plan.from_dict(json.loads(json.dumps(p.to_dict()))).optimism == p.optimism


def test_a_plan_chosen_among_noisy_refits_is_optimistic():
    """The optimizer's curse: refits spread evenly around the law, each planning for
    itself, predict less than the law gives at their plans; refits equal to the law, none."""
    from cdlaw.plan.source import PlanningLaw

    C, U = 1e21, 5e9
    spread = plan(PlanningLaw("x", QIN, None, tuple(_draws_jittered(40, 1.0))), C, U)
    assert spread.optimism < 0
    assert spread.predicted_loss_ci95[1] - spread.predicted_loss_ci95[0] > 0
    same = plan(PlanningLaw("x", QIN, None, (QIN,) * 4), C, U)
    assert same.optimism == pytest.approx(0.0, abs=1e-12)
    assert same.predicted_loss_ci95 == pytest.approx((same.predicted_loss,) * 2, rel=1e-12)
    assert plan(QIN, C, U).optimism is None  # no bootstrap, no estimate


def test_an_optimism_as_large_as_the_reducible_loss_is_not_determined():
    """Refits that predict far more than the fit at their own plans (an optimism larger
    than the reducible loss at the plan, as far from the runs) once pushed the band's lower
    bound below every refit's E, and later gave a band that excluded the predicted loss:
    the bootstrap cannot support a number there, so neither the optimism nor the band it
    would widen is given, and each says why."""
    from cdlaw.plan.source import PlanningLaw

    C, U = 1e21, 5e9
    draws = [
        Law("cd", {**QIN.params, "E": QIN.params["E"] + 2 + 0.01 * k}, QIN.strategies)
        for k in range(-5, 5)
    ]
    p = plan(PlanningLaw("x", QIN, None, tuple(draws)), C, U)
    assert p.optimism is None and p.predicted_loss_ci95 is None
    assert p.optimism_note.startswith("not determined: the bootstrap refits' own plans")
    assert "reducible loss L − E" in p.optimism_note and p.no_band_reason == p.optimism_note


def test_a_pessimistic_band_stays_above_the_floor_of_the_refits_it_comes_from():
    """A pessimistic optimism smaller than the reducible loss lowers the band's lower end on
    each refit's log(L − E) scale: never below a refit's E, never above the point."""
    from cdlaw.plan.source import PlanningLaw

    C, U = 1e21, 5e9
    draws = [
        Law("cd", {**QIN.params, "E": QIN.params["E"] + 0.05 + 0.01 * k}, QIN.strategies)
        for k in range(-5, 5)
    ]
    p = plan(PlanningLaw("x", QIN, None, tuple(draws)), C, U)
    assert 0 < p.optimism < p.predicted_loss - QIN.params["E"]
    lo, hi = p.predicted_loss_ci95
    at_plan = [float(d.loss(p.n_params, p.fresh_tokens, p.derived_tokens, p.strategy))
               for d in draws]  # fmt: skip
    raw = widened_band(at_plan, [d.params["E"] for d in draws], p.optimism)
    assert min(d.params["E"] for d in draws) < lo <= p.predicted_loss <= hi
    assert (lo, hi) == pytest.approx((min(raw[0], p.predicted_loss), raw[1]))


def test_the_optimism_row_says_which_way_the_refits_lean(tmp_path, monkeypatch):
    import dataclasses

    from cdlaw.cli import out
    from cdlaw.cli.plan import _render_plan
    from cdlaw.report.answer import _decision_note

    p = plan(QIN, 1e21, 5e9)
    monkeypatch.setattr(out, "width", 200)
    said = {}
    for o in (-0.03, 0.03):
        with out.capture() as captured:
            _render_plan(dataclasses.replace(p, optimism=o))
        said[o] = " ".join(captured.get().split())
    assert "predict this much less than the fit" in said[-0.03] and "curse" not in said[-0.03]
    assert "predict 0.0300 nats more than the fit" in said[0.03] and "errs low" not in said[0.03]
    assert "runs 0.0300 nats low" in said[-0.03] and "-0.03" not in said[-0.03]  # no sign
    assert "biased low" in _decision_note({**p.to_dict(), "optimism": -0.03})
    assert "biased low" not in _decision_note({**p.to_dict(), "optimism": 0.03})


def test_a_plan_warns_when_its_strategys_rstar_sits_at_a_bound_of_the_fit(tmp_path):
    from cdlaw.units import format_number

    at_bound = ["E (lower bound)", "repetition.sigma (lower bound)", "repetition.K (upper bound)",
                "paraphrase.rho (outside the start grid)"]  # fmt: skip
    law = load_law(write(tmp_path, qin_fit(optimizer={"success": True, "at_bound": at_bound})))
    rep = plan(law, 1e21, 5e9, "repetition")
    assert rep.warnings == (
        "repetition's R* is not pinned by the fitted runs (repetition.sigma at its lower "
        "bound, repetition.K at its upper bound), so the band leaves out how far it could be: train repetition runs nearer "
        f"the plan (D′/D {format_number(rep.best.derived_ratio)}) before betting on it",
    )
    assert plan(law, 1e21, 5e9, "paraphrase").warnings == ()  # off the grid is not a bound
