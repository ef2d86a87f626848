"""The law a plan rests on (cdlaw.plan.laws): with a comparison beside the fit, the plan
says which law it used and why, where the compared laws plan the same budget, and whether
their plans lie beyond its band; a planted disagreement is reported, a planted agreement
is not; `plan --law RUNS` compares the laws itself and plans with the winner."""

import json
import sys

import pytest
from lawtables import TRUE, make_table

from cdlaw.cli import main
from cdlaw.fit.io import write_fit
from cdlaw.fit.procedure import fit_law
from cdlaw.law import Law
from cdlaw.plan.planner import plan
from cdlaw.plan.result import Plan
from cdlaw.plan.source import load_law

BUDGET, UNIQUE = 1e20, 2e9


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A table t.csv with its fit t.fit.json (bootstrap) beside it."""
    folder = tmp_path_factory.mktemp("laws")
    table = make_table(seed=2, n_derived=60)
    table.to_csv(folder / "t.csv", index=False)
    fit = fit_law(table, n_starts=16, bootstrap=30, source=str(folder / "t.csv"))
    write_fit(fit, folder / "t.fit.json", folder / "t.fit_rows.parquet")
    return folder, fit


def comparison(folder, laws: dict[str, Law], errors: dict[str, float], verdict: str = ""):
    """A compare.json beside the fit: each law's constants and held-out error."""
    winner = min(errors, key=errors.__getitem__)
    scores = [
        {"law": law.form if name == law.form else name, "params": {
            "params": law.params, "strategies": law.strategies}, "heldout_rmse_log": errors[name]}
        for name, law in laws.items()
    ]  # fmt: skip
    d = {"source": str(folder / "t.csv"), "winner": winner, "verdict": verdict, "laws": scores}
    (folder / "t.compare.json").write_text(json.dumps(d))


def test_a_planted_law_disagreement_is_reported(fitted):
    folder, fit = fitted
    # a chinchilla law whose plan (N 1.8B) lies just above the band under the cd law's (N 0.97B)
    other = Law("chinchilla", dict(fit.law.params, alpha=0.3, A=fit.law.params["A"] * 3), {})
    comparison(folder, {"cd": fit.law, "chinchilla": other}, {"cd": 0.01, "chinchilla": 0.05})
    p = plan(load_law(str(folder / "t.fit.json")), BUDGET, UNIQUE)
    note = p.laws
    assert note is not None and note.used == "cd" and note.winner == "cd"
    assert note.differ and note.beyond_band == ("chinchilla",)
    n = {law: q["n_params"] for law, q in note.plans.items()}
    assert n["cd"] == pytest.approx(p.n_params, rel=1e-3)  # the same law, the same plan
    assert note.n_params_range == (min(n.values()), max(n.values()))
    assert 0 < note.plans["chinchilla"]["loss_under_plan"] - p.predicted_loss_ci95[1] < 0.05
    assert n["chinchilla"] > 1.5 * n["cd"]
    text = note.text()
    assert "ranks first at predicting the held-out largest size (log-RMSE 0.0100" in text
    assert "chinchilla's lies above the plan's 95% band" in text
    assert "depends on the law" in text and any("depends on the law" in w for w in p.warnings)
    assert Plan.from_dict(json.loads(json.dumps(p.to_dict()))).to_dict() == p.to_dict()


def test_a_planted_agreement_is_not_a_disagreement(fitted):
    """Another law's plan at another N (565M against 0.97B) that the cd law scores within
    its band: the runs cannot tell the two plans apart, so the law does not matter here."""
    folder, fit = fitted
    other = Law("chinchilla", dict(fit.law.params, alpha=0.35, A=fit.law.params["A"] * 3), {})
    comparison(folder, {"cd": fit.law, "chinchilla": other}, {"cd": 0.02, "chinchilla": 0.01})
    p = plan(load_law(str(folder / "t.fit.json")), BUDGET, UNIQUE)
    assert p.laws.plans["chinchilla"]["n_params"] < 0.7 * p.n_params
    assert not p.laws.differ and "does not hang on the law" in p.laws.text()
    assert "ranks chinchilla first" in p.laws.text() and "fit --law chinchilla" in p.laws.text()
    assert not any("depends on the law" in w for w in p.warnings)


def test_no_comparison_beside_the_fit_no_note(fitted, tmp_path):
    _, fit = fitted
    write_fit(fit, tmp_path / "fit.json", tmp_path / "fit_rows.parquet")
    assert plan(load_law(str(tmp_path / "fit.json")), BUDGET, UNIQUE).laws is None


def test_plan_of_runs_compares_the_laws_and_plans_with_the_winner(monkeypatch, capsys, tmp_path):
    from cdlaw.fit import procedure

    monkeypatch.setattr(procedure, "DEFAULT_STARTS", 16)
    monkeypatch.setattr(procedure, "DEFAULT_BOOTSTRAP", 20)
    path = tmp_path / "runs.csv"
    make_table(law=TRUE, seed=3, n_derived=60).to_csv(path, index=False)
    args = ["--budget-flops", str(BUDGET), "--unique-tokens", str(UNIQUE), "--json"]
    monkeypatch.setattr(sys, "argv", ["cdlaw", "plan", "--law", str(path), *args])
    with pytest.raises(SystemExit) as e:
        main()
    got = json.loads(capsys.readouterr().out)
    assert (e.value.code or 0) == 0
    laws = got["laws"]
    assert got["law_form"] == laws["used"] == laws["winner"]
    assert {"cd", "muennighoff", "chinchilla"} <= set(laws["plans"])
    assert got["predicted_loss_ci95"] is not None and got["valley"] is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv"]  # nothing written
