"""`cdlaw downstream`, `cdlaw plot --kind downstream`, `cdlaw plan --link` and the report's
downstream section, end to end on runs simulated with a planted shift (tests/helpers)."""

import json
from pathlib import Path

import pytest
from plantedlinks import planted_runs

from cdlaw.fit.io import output_paths, write_fit
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """The planted runs (paraphrase shifted 0.15 nats), fitted as `cdlaw fit` would."""
    path = tmp_path_factory.mktemp("planted") / "runs.parquet"
    planted_runs({"paraphrase": 0.15}).to_parquet(path, index=False)
    fit = fit_law(load_runs(path), bootstrap=8, n_starts=64, source=str(path))
    write_fit(fit, *output_paths(path))
    return path


def test_downstream_prints_links_and_verdicts_and_writes_its_file(cdlaw, table):
    code, out, err = cdlaw("downstream", table, "--bootstrap", 30)
    assert code == 0, err
    assert "quiz" in out and "differ" in out and "task_quiz_acc = " in out
    words = " ".join(out.split())  # the verdicts wrap between words
    assert "shifts in loss vs none" in words and "a rerun with another seed" in words
    written = table.with_name("runs.downstream.json")
    figure = table.with_name("runs.figures") / "downstream.png"
    assert f"wrote {written} and {figure}" in err and figure.stat().st_size > 10_000
    links = json.loads(written.read_text())["links"]
    assert {lk["column"] for lk in links} == {"task_quiz_acc", "task_quiz_bpb"}
    assert all(len(lk["bootstrap"]) == 30 for lk in links)
    code, out, _ = cdlaw("downstream", table, "--task", "quiz", "--bootstrap", 0, "--json",
                         "--out", table.with_name("json.downstream.json"))  # fmt: skip
    assert code == 0 and json.loads(out)["links"][0]["collapse"]["collapses"] is False


@pytest.mark.parametrize(
    "args, says",
    [
        (["--task", "lambada"], "--task 'lambada' is not a task"),
        (["--bootstrap", "-1"], "--bootstrap -1"),
    ],
)
def test_downstream_refuses_in_one_sentence(cdlaw, table, args, says):
    code, out, err = cdlaw("downstream", table, *args)
    assert code == 2 and says in err and err.count("\n") == 1 and out == ""


@pytest.mark.parametrize(
    "value, suffix, place", [(1.7, ".csv", "line 4"), (-0.2, ".parquet", "row 3")]
)
def test_an_accuracy_outside_0_to_1_is_refused_naming_its_row(
    cdlaw, tmp_path, value, suffix, place
):
    runs = planted_runs({"paraphrase": 0.15})
    runs.loc[2, "task_quiz_acc"] = value
    path = tmp_path / f"runs{suffix}"
    runs.to_csv(path, index=False) if suffix == ".csv" else runs.to_parquet(path, index=False)
    code, out, err = cdlaw("downstream", path)
    assert code == 2 and err.count("\n") == 1 and out == "", err
    assert f"{path} {place}: task_quiz_acc must be an accuracy between 0 and 1" in err
    assert f"got {value:g}" in err


def test_runs_without_tasks_are_refused_naming_eval(cdlaw, tmp_path):
    path = tmp_path / "plain.csv"
    planted_runs().drop(columns=["task_quiz_acc", "task_quiz_bpb"]).to_csv(path, index=False)
    code, _, err = cdlaw("downstream", path)
    assert code == 2 and "[eval]" in err and not tmp_path.joinpath("plain.downstream.json").exists()


def test_plot_plan_and_report_read_the_links(cdlaw, table):
    assert cdlaw("downstream", table, "--bootstrap", 20)[0] == 0
    code, out, err = cdlaw("plot", table, "--kind", "downstream")
    assert code == 0, err
    assert Path(out.strip()).name == "downstream.png" and Path(out.strip()).stat().st_size > 10_000
    links = table.with_name("runs.downstream.json")
    fit = table.with_name("runs.fit.json")
    code, out, err = cdlaw("plan", "--law", fit, "--budget-flops", "1e19", "--unique-tokens",
                           "5e9", "--link", links, "--json")  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)
    tasks = {t["column"]: t for t in plan["tasks"]}
    acc = tasks["task_quiz_acc"]
    assert acc["ci95"][0] < acc["value"] < acc["ci95"][1] and 0 < acc["value"] < 1
    apart = [w for w in plan["warnings"] if "do not share one link" in w]
    assert apart and all("none +0" not in w for w in apart)
    assert all(f"for this {plan['strategy']} plan is off by about its shift" in w for w in apart)
    # fresh data without limit: a plan of strategy none, the links' reference
    code, out, err = cdlaw("plan", "--law", fit, "--budget-flops", "1e19", "--link", links,
                           "--json")  # fmt: skip
    assert code == 0, err
    apart = [w for w in json.loads(out)["warnings"] if "do not share one link" in w]
    said = "for this none plan (the reference, shift 0) is off by part of the others' shifts"
    assert apart and all(said in w for w in apart), apart
    code, out, _ = cdlaw("plan", "--law", fit, "--budget-flops", "1e19", "--link", links,
                         "--task", "quiz")  # fmt: skip
    assert code == 0 and "task metrics at the plan's loss" in out
    assert cdlaw("plan", "--budget-flops", "1e19", "--task", "quiz")[0] == 2
    assert cdlaw("plan", "--frontier", "--link", links)[0] == 2
    code, _, err = cdlaw("report", table)
    assert code == 0, err
    html = table.with_name("runs.report.html").read_text()
    assert "Downstream tasks" in html and 'id="fig-downstream"' in html and "at the plan" in html
