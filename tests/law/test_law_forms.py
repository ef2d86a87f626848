"""A law is data (cdlaw.laws): a toy law declared here in a few lines is fitted like the
registered ones, every registered form's analytic gradient matches central differences of
its public loss, and an unknown law is refused by name (docs/law.md, "Adding a law")."""

import pickle

import numpy as np
import pandas as pd
import pytest

from cdlaw.fit import vector as fitvec
from cdlaw.fit.procedure import fit_law
from cdlaw.law import PRESETS, Law
from cdlaw.laws import LAWS, get_law_form
from cdlaw.laws import chinchilla as chin
from cdlaw.laws.form import LawForm, Rows, numerical_log_loss
from cdlaw.system.errors import BadInput


# The toy law: derived tokens count as fresh ones. No analytic gradient is declared, so the
# fit differentiates its loss numerically; its parameters are Chinchilla's, so it borrows
# their bounds, centring and start axes.
def toy_loss(p, N, D, Dp):
    return p["E"] + p["A"] / N ** p["alpha"] + p["B"] / (D + Dp) ** p["beta"]


TOY = LawForm(
    name="toy",
    source="this test",
    shared=chin.SHARED,
    loss=toy_loss,
    model_floor=chin.model_floor,
    log_params=chin.LOG_PARAMS,
    bounds=chin.BOUNDS,
    centring=chin.CENTRING,
    start_axes=chin.START_AXES,
)
TRUTH = {"E": 1.6, "A": 420.0, "B": 900.0, "alpha": 0.34, "beta": 0.31}


def toy_table() -> pd.DataFrame:
    rows = [
        (N, m * 20 * N, r * m * 20 * N, "repetition" if r else "none")
        for N in (14e6, 40e6, 100e6, 300e6)
        for m in (0.1, 0.5, 2.0)
        for r in (0, 1, 4)
    ]
    df = pd.DataFrame(rows, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy"])
    df["loss"] = toy_loss(TRUTH, df["n_params"], df["fresh_tokens"], df["derived_tokens"])
    return df


def test_a_toy_law_declared_in_a_few_lines_is_fitted_and_recovered():
    result = fit_law(toy_table(), law=TOY, n_starts=48)
    assert result.law.form == "toy" and result.law.form_decl is TOY
    assert result.param_names == list(chin.SHARED)
    for k, want in TRUTH.items():
        assert result.law.params[k] == pytest.approx(want, rel=1e-5), k
    assert result.rmse_log < 1e-8
    assert result.to_dict()["law"] == "toy"
    assert result.rstar is None and result.to_dict()["rstar"] == {}  # the toy has no R*


def test_a_law_may_have_other_shared_parameters():
    other = LawForm(
        name="other",
        source="this test",
        shared=("a", "gamma"),
        loss=lambda p, N, D, Dp: p["a"] * N ** -p["gamma"] + 0 * D,
        model_floor=lambda p, N: p["a"] * np.asarray(N, float) ** -p["gamma"],
    )
    law = Law(other, {"a": 2.0, "gamma": 0.5})
    assert law.params == {"a": 2.0, "gamma": 0.5}
    assert law.loss(4.0, 1.0) == pytest.approx(1.0)
    assert law.loss_model_floor(16.0) == pytest.approx(0.5)
    with pytest.raises(AttributeError):
        _ = law.a  # parameters are read from law.params, not as attributes
    with pytest.raises(TypeError, match="missing: gamma"):
        Law(other, {"a": 1.0})
    with pytest.raises(TypeError, match="unknown: E"):
        Law(other, {"a": 1.0, "gamma": 0.5, "E": 1.0})


def test_the_registered_forms_in_order():
    assert list(LAWS) == ["cd", "cd-overfit", "practical", "muennighoff", "chinchilla"]
    assert all(form.name == name for name, form in LAWS.items())
    assert [n for n, form in LAWS.items() if form.can_overfit] == ["cd-overfit"]
    assert all((form.derived_optimum is not None) == form.can_overfit for form in LAWS.values())
    assert LAWS["chinchilla"].rstar is None and not LAWS["chinchilla"].uses_derived


# ---------------------------------------------------------------------------------------
# Analytic gradients against central differences of the public loss.
# ---------------------------------------------------------------------------------------

STRATEGIES = ("repetition", "paraphrase")
MUENNIGHOFF = Law(
    "muennighoff", {"E": 1.87, "A": 520.8, "B": 1487.7, "alpha": 0.35, "beta": 0.33},
    {"repetition": {"rstar_d": 15.4, "rstar_n": 5.3}, "paraphrase": {"rstar_d": 7.0, "rstar_n": 5.3}},
)  # fmt: skip
CD_OVERFIT = Law(
    "cd-overfit", {"E": 1.4, "A": 225.3, "B": 17737.7, "alpha": 0.29, "beta": 0.44, "mu": 0.5},
    {
        "repetition": {"K": 4.6e4, "rho": -0.42, "sigma": -0.40, "lam": 0.012},
        "paraphrase": {"K": 3.0e3, "rho": -0.30, "sigma": -0.20, "lam": 0.008},
    },
)  # fmt: skip
PRACTICAL = Law(
    "practical",
    params=dict(E=1.7, a=300.0, b=900.0, alpha=0.34, beta=0.3, c=0.2, gamma=0.3, delta=0.25)
    | {"L0": np.log(50257)},
)
LAW_OF = {
    "cd": PRESETS["qin2026"],
    "cd-overfit": CD_OVERFIT,
    "practical": PRACTICAL,
    "muennighoff": MUENNIGHOFF,
    "chinchilla": PRESETS["chinchilla-hoffmann"],
}


def gradient_rows() -> Rows:
    """D′ = 0 rows, then each strategy's, over a wide range of tokens per parameter (so
    that some muennighoff rows have more parameters than their data's optimal size)."""
    grid = [(N, tpp * N) for N in (1e7, 6e7, 3e8, 2e9) for tpp in (0.3, 3, 30, 300)]
    logN, logD, ratio, slices = [], [], [], []
    blocks = [[0.0]] + [[1.0, 5.0, 40.0]] * len(STRATEGIES)
    for j, ratios in enumerate(blocks):
        start = len(logN)
        for N, D in grid:
            for r in ratios:
                logN.append(np.log(N))
                logD.append(np.log(D))
                ratio.append(r)
        if j:
            slices.append(slice(start, len(logN)))
    return Rows(np.array(logN), np.array(logD), np.array(ratio), tuple(slices))


@pytest.mark.parametrize("name", list(LAWS))
def test_analytic_vjp_matches_central_differences(name):
    form, rows = LAWS[name], gradient_rows()
    strategies = STRATEGIES if form.strategy_params else ()
    theta = fitvec.law_to_fit_vector(LAW_OF[name], list(strategies))
    rng = np.random.default_rng(7)
    thetas = theta + rng.normal(0, 0.1, (4, theta.size))
    w = rng.normal(size=(4, len(rows.logN)))
    logL, vjp = form.batched_log_loss(thetas, rows)
    ref_logL, ref_vjp = numerical_log_loss(form, thetas, rows)
    np.testing.assert_allclose(logL, ref_logL, rtol=1e-12, atol=1e-12)
    got, want = vjp(w), ref_vjp(w)
    scale = np.abs(want).max(axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale.max())
    if name == "muennighoff":  # the excess-parameter branch is exercised
        law = LAW_OF[name]
        p = law.params
        n_star = chin.chinchilla_optimal_n_for_data(
            np.exp(rows.logD), p["A"], p["B"], p["alpha"], p["beta"]
        )
        assert 0 < np.mean(np.exp(rows.logN) > n_star) < 1


def test_unknown_law_is_refused_by_name():
    with pytest.raises(BadInput) as e:
        get_law_form("nope")
    assert "'nope'" in str(e.value)
    assert all(name in str(e.value) for name in LAWS)


def test_a_law_survives_pickling():
    """Simulated sweeps send their Law to worker processes."""
    for law in PRESETS.values():
        back = pickle.loads(pickle.dumps(law))
        assert back == law and back.form_decl.name == law.form and back.params == law.params
        assert back.loss(1e8, 2e9, 4e9, "repetition") == law.loss(1e8, 2e9, 4e9, "repetition")
