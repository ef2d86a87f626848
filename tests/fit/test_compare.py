"""`cdlaw compare` / `cdlaw fit --law all`: every law on the same rows, ranked by held-out error."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from plotdata import SIZES, run_table
from runhelpers import cdlaw

from cdlaw.plan.compare import Comparison, LawScore, compare_laws
from cdlaw.system.errors import BadInput

STARTS = 96  # small start grids keep the test fast


@pytest.fixture(scope="module")
def table():
    return run_table(seed=0)  # the CD paper's law with 0.4% noise, 4 sizes


@pytest.fixture(scope="module")
def comparison(table):
    return compare_laws(table, laws=("cd", "chinchilla"), n_starts=STARTS, select="none")


def test_the_true_law_predicts_the_held_out_size_best(comparison):
    scores = {s.law: s for s in comparison.scores}
    assert comparison.winner == "cd"
    # measured: cd 0.0062, Chinchilla counting derived tokens as fresh 0.0126
    assert scores["cd"].heldout_rmse_log < 0.01 < scores["chinchilla"].heldout_rmse_log
    assert scores["cd"].rmse_log <= scores["cd"].loso_rmse_log  # in sample is easier


def test_every_size_is_predicted_once_per_law_by_a_fit_without_it(comparison, table):
    rows = comparison.rows
    for law in ("cd", "chinchilla"):
        mine = rows[rows["law"] == law]
        assert len(mine) == len(table) and mine["row_id"].is_unique
        assert set(mine.loc[mine["largest"], "n_params"]) == {max(SIZES)}
    cd = rows[rows["law"] == "cd"]
    err = np.log(cd["loss"]) - np.log(cd["predicted"])
    score = next(s for s in comparison.scores if s.law == "cd")
    assert score.loso_rmse_log == pytest.approx(float(np.sqrt(np.mean(err**2))))
    big = cd["largest"].to_numpy()
    assert score.heldout_rmse_log == pytest.approx(float(np.sqrt(np.mean(err[big] ** 2))))


def test_aic_and_bic_follow_from_the_residuals(comparison, table):
    from cdlaw.fit.procedure import fit_law

    score = next(s for s in comparison.scores if s.law == "cd")
    fit = fit_law(table, law="cd", n_starts=STARTS, huber_delta=0.1, select="none")
    res = fit.rows["residual_log"].to_numpy()[fit.rows["used"].to_numpy(bool)]
    n, k, rss = len(res), len(fit.param_names), float(np.sum(res**2))
    loglik = -0.5 * n * (math.log(2 * math.pi * rss / n) + 1)
    assert score.n_params == k == 11
    assert score.aic == pytest.approx(2 * k - 2 * loglik)
    assert score.bic == pytest.approx(k * math.log(n) - 2 * loglik)


def _score(law, heldout):
    return LawScore(law, 5, {}, 0.01, 1.0, 0.0, 0.0, heldout, heldout, True)


@pytest.mark.parametrize(
    "floor, words",
    [(0.01, "inside the seed noise floor"), (0.0001, "by more than"), (None, "no replicate")],
)
def test_the_verdict_says_when_the_difference_is_noise(floor, words):
    c = Comparison([_score("a", 0.020), _score("b", 0.025)], {}, 0.1, 50, floor, "t")
    assert c.winner == "a" and words in c.verdict()


def test_an_unknown_law_names_the_known_ones(table):
    with pytest.raises(BadInput, match=r"known laws: .*cd.*chinchilla"):
        compare_laws(table, laws=("cd", "nope"), n_starts=STARTS)


def test_cli_writes_compare_json_and_rows_and_the_figure(table, tmp_path):
    path = tmp_path / "runs.csv"
    table.to_csv(path, index=False)
    # the plan at 1e21 is N 5.65B, 56× the table's largest size: beyond the limit
    r = cdlaw("compare", path, "--law", "cd,chinchilla", "--starts", STARTS, "--select", "none",
              "--budget-flops", "1e21", "--unique-tokens", "5e9", "--json",
              "--extrapolate")  # fmt: skip
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    written = json.loads((tmp_path / "runs.compare.json").read_text())
    assert printed == written and written["winner"] == "cd"
    plans = {s["law"]: s["plan"] for s in written["laws"]}
    scores = {s["law"]: s["params"] for s in written["laws"]}
    assert plans["cd"]["n_params"] > 0 and plans["cd"]["strategy"] in ("repetition", "paraphrase")
    # Chinchilla was fitted with repeats counted as fresh; it plans so too: its own optimum
    # N for 1e21, every token past the 5e9 unique ones a repeat, the loss it believes
    from cdlaw.law import Law
    from cdlaw.plan.optimum import chinchilla_optimal_n_params

    ch, law = plans["chinchilla"], Law.from_dict({"law": "chinchilla", **scores["chinchilla"]})
    tokens = 1e21 / (6 * ch["n_params"])
    assert ch["repeats_counted_as_fresh"] and ch["strategy"] == "repetition"
    assert ch["n_params"] == pytest.approx(chinchilla_optimal_n_params(law, 1e21), rel=1e-3)
    assert ch["derived_tokens"] == pytest.approx(tokens - 5e9, rel=1e-6)
    assert ch["epochs"] == pytest.approx(tokens / 5e9, rel=1e-6)
    assert ch["predicted_loss"] == pytest.approx(float(law.loss(ch["n_params"], tokens)), rel=1e-9)
    rows = pd.read_parquet(tmp_path / "runs.compare_rows.parquet")
    assert set(rows["law"]) == {"cd", "chinchilla"}
    r = cdlaw("plot", tmp_path / "runs.compare.json", "--kind", "compare", "--out", tmp_path / "f")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "f" / "compare.png").stat().st_size > 10_000
    assert written["select"] == "none" and written["rows_digest"].startswith("sha256:")
    assert cdlaw("plot", path, "--kind", "compare", "--out", tmp_path / "g").returncode == 0
    table.assign(loss=table["loss"] * 1.01).to_csv(path, index=False)  # a run retrained since
    r = cdlaw("plot", path, "--kind", "compare", "--out", tmp_path / "h")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "the comparison's" in said and "cdlaw compare" in said, said


def test_fit_law_all_is_the_comparison(table, tmp_path):
    path = tmp_path / "runs.csv"
    table.to_csv(path, index=False)
    r = cdlaw("fit", path, "--law", "all", "--starts", STARTS, "--select", "none", "--json")
    assert r.returncode == 0, r.stderr
    # the table is the CD law's, which is cd-overfit at λ → 0: either may win on noise
    assert json.loads(r.stdout)["winner"] in ("cd", "cd-overfit")
    assert (tmp_path / "runs.compare.json").exists() and not (tmp_path / "runs.fit.json").exists()


def test_bad_input_writes_nothing(table, tmp_path):
    path = tmp_path / "runs.csv"
    table.to_csv(path, index=False)
    r = cdlaw("compare", path, "--law", "cd,nope")
    assert r.returncode == 2 and "known laws" in r.stderr
    r = cdlaw("compare", path, "--unique-tokens", "5e9")
    assert r.returncode == 2 and "--budget-flops" in r.stderr
    assert not (tmp_path / "runs.compare.json").exists()


def test_the_terminal_tables_fit_an_80_column_terminal(table, monkeypatch):
    from cdlaw.cli import out
    from cdlaw.cli.compare import _render

    comparison = compare_laws(table, laws=("cd", "muennighoff"), n_starts=STARTS, select="none",
                              budget_flops=1e21, unique_tokens=5e9)  # fmt: skip
    monkeypatch.setattr(out, "width", 80)
    with out.capture() as captured:
        _render(comparison)
    text = captured.get()
    tables = text.splitlines()[:-1]  # the verdict after them is a sentence that wraps
    assert "…" not in text and max(map(len, tables)) <= 80
    assert "muennighoff" in text and "predicted loss" in text and "paraphrase" in text


def test_a_comparison_of_cells_that_mix_setups_says_so(table):
    """--select mean reduces each cell's runs; runs on two datasets are not replicates."""
    mixed = pd.concat([table.assign(dataset="c4"), table.assign(dataset="rpj")])
    comparison = compare_laws(mixed, laws=("chinchilla",), n_starts=16, select="mean")
    (warning,) = comparison.warnings
    assert "differ in 'dataset'" in warning and comparison.to_dict()["warnings"] == [warning]
    assert compare_laws(table, laws=("chinchilla",), n_starts=16).warnings == []
