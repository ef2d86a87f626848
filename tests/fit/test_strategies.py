"""Any named strategy, from a table to a plan: a planted three-strategy table is recovered
and planned with all three; a strategy cdlaw never heard of fits; bad names and strategies
the rows cannot pin down are one sentence, exit 2, nothing written."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from lawtables import MULTIPLES, SIZES, law_loss
from runhelpers import cdlaw_here

from cdlaw.fit.io import FitResult
from cdlaw.fit.procedure import fit_law
from cdlaw.law import PRESETS, Law
from cdlaw.plan.planner import plan
from cdlaw.system.errors import BadInput

QIN = PRESETS["qin2026"]
# A third kind of derived token, named as a user would: worth most at large N and small D/N,
# where repetition and paraphrase give out (their R* crosses both inside the grid).
SELF_DISTILL = {"K": math.exp(4.0), "rho": -0.15, "sigma": -0.05}
TRUE = Law("cd", QIN.params, {**QIN.strategies, "self-distill": SELF_DISTILL})
STRATEGIES = ["repetition", "paraphrase", "self-distill"]
RATIOS = [1, 2, 4, 8, 16, 32, 60]


def planted(noise=0.005, seed=0, per_strategy=110):
    """Every one-epoch cell of the seven sizes, and per strategy a random `per_strategy` of
    its (N, D, r) cells, losses from TRUE with `noise` log-normal scatter."""
    rng = np.random.default_rng(seed)
    one = [(n, 20 * n * m, 0.0, "none") for n in SIZES for m in MULTIPLES]
    derived = []
    for s in STRATEGIES:
        cells = [
            (n, 20 * n * m, r * 20 * n * m, s) for n in SIZES for m in MULTIPLES for r in RATIOS
        ]
        derived += [cells[i] for i in np.sort(rng.choice(len(cells), per_strategy, replace=False))]
    df = pd.DataFrame(
        one + derived, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy"]
    )
    df["loss"] = law_loss(TRUE, df) * np.exp(noise * rng.standard_normal(len(df)))
    return df


@pytest.fixture(scope="module")
def fitted():
    df = planted()
    return df, fit_law(df, n_starts=128, seed=0)


def test_a_planted_three_strategy_table_is_recovered(fitted):
    _, fit = fitted
    assert list(fit.law.strategies) == STRATEGIES  # built-ins first, then by name
    n, tpp = np.meshgrid(SIZES, [20 * m for m in MULTIPLES])  # the table's range
    for s in STRATEGIES:
        got, want = fit.law.rstar(n, n * tpp, s), TRUE.rstar(n, n * tpp, s)
        worst = float(np.max(np.abs(got / want - 1)))
        assert worst < 0.15, (s, worst)
    assert abs(fit.law.params["beta"] - TRUE.params["beta"]) < 0.03
    assert fit.optimizer.success


def test_the_plan_chooses_among_all_three_and_says_what_each_loses(fitted):
    _, fit = fitted
    budget, unique = 1e21, 2e9  # r ≈ 10 at the optimum: deep in the derived regime
    for law in (TRUE, fit.law):
        p = plan(law, budget, unique)
        assert set(p.candidates) == set(STRATEGIES)
        alone = {s: plan(law, budget, unique, strategy=s).predicted_loss for s in STRATEGIES}
        assert p.strategy == min(alone, key=alone.__getitem__)
        for s, a in p.candidates.items():
            assert a.predicted_loss == pytest.approx(alone[s], rel=1e-9)
            assert a.loss_gap == pytest.approx(alone[s] - p.predicted_loss, abs=1e-12)
    # the fitted law makes the true law's decision
    assert plan(fit.law, budget, unique).strategy == plan(TRUE, budget, unique).strategy


def test_a_strategy_cdlaw_never_heard_of_fits_and_plans_from_the_command_line(
    monkeypatch, capsys, tmp_path
):
    df = planted(noise=0.0, seed=1, per_strategy=60)
    df["strategy"] = df["strategy"].str.replace("self-distill", "Self-Distill ")  # as typed
    df.to_csv(tmp_path / "t.csv", index=False)
    code, _, err = cdlaw_here(monkeypatch, capsys, tmp_path, "fit", "t.csv", "--starts", 64)
    assert code == 0, err
    fit = FitResult.read(tmp_path / "t.fit.json")
    assert list(fit.law.strategies) == STRATEGIES  # "Self-Distill " read as self-distill
    assert "self-distill" in fit.data_range.strategies
    code, out, err = cdlaw_here(
        monkeypatch, capsys, tmp_path, "plan", "--law", "t.fit.json", "--budget-flops", "1e21",
        "--unique-tokens", "2e9", "--strategy", "self-distill", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["strategy"] == "self-distill"


@pytest.mark.parametrize(
    "change, message",
    [
        # one strategy's runs at one size only: its K, rho and sigma cannot be told apart
        (lambda df: df[(df.strategy != "self-distill") | (df.n_params == SIZES[0])],
         "strategy self-distill's runs with derived tokens cover only 1 model size ("),
        (lambda df: df.assign(strategy=df.strategy.replace("self-distill", "self distill")),
         "strategy 'self distill' is neither none nor a derived strategy's name"),
    ],
)  # fmt: skip
def test_bad_strategies_are_one_sentence_and_write_nothing(
    monkeypatch, capsys, tmp_path, change, message
):
    change(planted(noise=0.0, seed=2, per_strategy=40)).to_csv(tmp_path / "t.csv", index=False)
    code, out, err = cdlaw_here(monkeypatch, capsys, tmp_path, "fit", "t.csv", "--starts", 16)
    sentence = " ".join(err.split())
    assert code == 2 and message in sentence and not out, sentence
    assert sentence.count(". ") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_a_fit_json_naming_a_strategy_twice_is_refused(tmp_path):
    text = json.dumps(TRUE.to_dict())
    twice = text.replace('"paraphrase": {', '"repetition": {')  # two "repetition" keys
    path = tmp_path / "fit.json"
    path.write_text(twice)
    with pytest.raises(BadInput, match="names 'repetition' twice in one object"):
        FitResult.read(path)
    path.write_text(json.dumps({**TRUE.to_dict(), "strategies": {"None": SELF_DISTILL}}))
    with pytest.raises(BadInput, match="'None' in \"strategies\" is not a derived strategy"):
        FitResult.read(path)
