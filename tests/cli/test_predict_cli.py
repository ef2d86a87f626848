"""`cdlaw downstream` (its predictors checked on sizes held out), `cdlaw predict` and `cdlaw
plan --link` on a ladder with checkpoints planted from a known two-step task law
(tests/helpers/taskladder.py)."""

import json
import re
from pathlib import Path

import pytest
from taskladder import END_FRACS, two_step

from cdlaw.fit.io import output_paths, write_fit
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs


@pytest.fixture(scope="module")
def ladder(tmp_path_factory) -> Path:
    """The ladder as a table with its fit.json beside it (the law on final rows only); its
    runs evaluated four times in their last fifth, so the step-to-step noise is measured."""
    path = tmp_path_factory.mktemp("ladder") / "ladder.csv"
    two_step(fracs=END_FRACS).to_csv(path, index=False)
    fit = fit_law(load_runs(path), "chinchilla", bootstrap=8, n_starts=64, source=str(path))
    write_fit(fit, *output_paths(path))
    return path


def test_downstream_prints_each_predictors_error_the_choice_the_spread_and_the_noise(cdlaw, ladder):
    code, out, err = cdlaw("downstream", ladder, "--bootstrap", 20, "--chance", "quiz=0.25")
    assert code == 0, err
    words = " ".join(out.split())
    assert (
        "mean |error| on the runs held out (N = 6.4e+08 held out; N ≥ 3.2e+08 held out; 40 "
        "tokens per parameter held out)" in words
    )
    table = out[out.index("task predictors") :]  # after the links' own table
    header = next(line for line in table.splitlines() if line.strip().startswith("task  "))
    assert header.split() == [
        "task", "chance", "task-loss", "val-loss", "val-loss-exp", "direct", "spread",
    ]  # fmt: skip
    row = next(line for line in table.splitlines() if line.strip().startswith("quiz"))
    cells = row.split()[2:]  # "quiz acc", then chance, one cell per predictor, the spread
    assert cells[0] == "0.25" and all(re.fullmatch(r"0\.\d{4}\*?", c) for c in cells[1:5])
    assert re.fullmatch(r"0\.\d{3}", cells[5])
    marked = zip(header.split()[2:6], cells[1:5], strict=True)
    (chosen,) = [p for p, c in marked if c.endswith("*")]
    assert chosen == "task-loss" and "* chosen by the bounded default: no other" in words
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["task", "noise"])
    assert lines[at].split() == [
        "task",
        "noise",
        "from",
        "items",
        "rise",
        "rise/noise",
        "supported",
    ]
    row = lines[at + 2].split()
    assert row[:2] == ["quiz", "acc"] and row[3:5] == ["checkpoints", "2000"] and row[-1] == "yes"
    assert "fitted to 108 evaluations of 18 runs, checkpoints included" in out
    d = json.loads(ladder.with_name("ladder.downstream.json").read_text())
    (tp,) = d["predictors"]
    assert tp["n_runs"] == 18 and tp["n_evals"] == 108 and tp["heldout_n"] == 640e6
    assert tp["noise"]["items"] == 2000 and tp["noise"]["supported"] and len(tp["checks"]) == 3
    assert all(f["heldout_error"] is not None for f in tp["fits"].values() if not f["why_not"])


def test_predict_plan_link_and_report_agree_and_bands_widen(cdlaw, ladder):
    from cdlaw.report.gather import gather

    assert cdlaw("downstream", ladder, "--bootstrap", 30)[0] == 0
    links, fit = ladder.with_name("ladder.downstream.json"), ladder.with_name("ladder.fit.json")
    code, out, err = cdlaw("plan", "--law", fit, "--budget-flops", "1e20", "--unique-tokens",
                           "1e12", "--link", links, "--extrapolate", "--json")  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)
    best = plan  # the best allocation's n_params, fresh_tokens, derived_tokens at the top
    planned = {t["column"]: t for t in plan["tasks"]}["task_quiz_acc"]
    report = gather(ladder, budget_flops=1e20, unique_tokens=1e12, extrapolate=True)
    shown = {t["column"]: t for t in report.plan["tasks"]}["task_quiz_acc"]  # its "at the plan"
    assert shown["predictor"] == planned["predictor"]
    assert shown["value"] == pytest.approx(planned["value"])
    # the page's task row names that predictor beside the value, not only the link's formula
    from cdlaw.report.sections import downstream_section
    from cdlaw.report.tables import format_cell

    row = downstream_section(report).split("<td")  # one row: task_quiz_acc's cells
    cells = [c.split(">", 1)[1].split("</td")[0] for c in row[1:]]
    at = cells.index(format_cell(planned["value"]))
    assert cells[at + 1].startswith(f"{planned['predictor']} (held-out error ")
    code, out, err = cdlaw("predict", "--downstream", links, "--law", fit,
                           "--n-params", best["n_params"], "--fresh-tokens", best["fresh_tokens"],
                           "--derived-tokens", best["derived_tokens"], "--json")  # fmt: skip
    assert code == 0, err
    (one,) = json.loads(out)["tasks"]
    assert (
        one["value"] == pytest.approx(planned["value"]) and one["predictor"] == planned["predictor"]
    )
    assert one["ci95"] == pytest.approx(planned["ci95"]) and one["beyond_runs"]
    widths = []
    for n in (1e9, 2e9, 4e9):  # 5 tokens per parameter: below the sigmoid's ceiling
        code, out, _ = cdlaw("predict", "--downstream", links, "--n-params", n,
                             "--fresh-tokens", 5 * n, "--json")  # fmt: skip
        (f,) = json.loads(out)["tasks"]
        widths.append(f["ci95"][1] - f["ci95"][0])
    assert widths[0] < widths[1] < widths[2]
    code, out, _ = cdlaw("predict", "--downstream", links, "--n-params", "1B", "--fresh-tokens",
                         "20B")  # fmt: skip
    assert code == 0 and "quiz" in out and "chosen by" in out and "compute" in out


@pytest.mark.parametrize(
    "args, says",
    [
        (["--n-params", "0", "--fresh-tokens", "1e9"], "--n-params"),
        (["--n-params", "1e9", "--fresh-tokens", "1e9", "--task", "nope"], "no task predictors"),
        (
            ["--n-params", "1e9", "--fresh-tokens", "1e9", "--derived-tokens", "1e9"],
            "needs --strategy",
        ),
        (
            [
                "--n-params",
                "1e9",
                "--fresh-tokens",
                "1e9",
                "--derived-tokens",
                "1e9",
                "--strategy",
                "bogus",
            ],
            "--strategy 'bogus' is not a strategy of the runs",
        ),
        (
            ["--n-params", "1e13", "--fresh-tokens", "1e13", "--law", "chinchilla-hoffmann"],
            "extrapolation limit",
        ),
    ],
)
def test_predict_refuses_in_one_sentence(cdlaw, ladder, args, says):
    assert cdlaw("downstream", ladder, "--bootstrap", 0)[0] == 0
    code, out, err = cdlaw(
        "predict", "--downstream", ladder.with_name("ladder.downstream.json"), *args
    )
    assert code == 2 and says in err and err.count("\n") == 1 and out == ""


def test_a_presets_loss_gives_a_band_around_its_own_point(cdlaw, ladder):
    """A preset law has no bootstrap: the band is the link's refits at the preset's loss,
    not the downstream runs' own step 1 (which gave a band that missed the point)."""
    assert cdlaw("downstream", ladder, "--bootstrap", 20)[0] == 0
    links = ladder.with_name("ladder.downstream.json")
    for law in ("chinchilla-hoffmann", "chinchilla-besiroglu"):
        code, out, err = cdlaw("predict", "--downstream", links, "--law", law, "--n-params",
                               "1B", "--fresh-tokens", "20B", "--json")  # fmt: skip
        assert code == 0, err
        for f in json.loads(out)["tasks"]:
            lo, hi = f["ci95"]
            assert lo <= f["value"] <= hi and hi - lo < 0.2, (law, f)


def test_a_bad_chance_is_refused(cdlaw, ladder):
    code, _, err = cdlaw("downstream", ladder, "--chance", "quiz")
    assert code == 2 and "TASK=P" in err


def test_a_runs_folders_own_task_file_gives_the_chance_level(cdlaw, tmp_path):
    """The task file the sweep named has three choices per item: its floor is 1/3."""
    (tmp_path / "tasks").mkdir()
    item = {"context": "The sky is", "choices": [" blue", " green", " red"], "gold": 0}
    (tmp_path / "tasks" / "quiz.jsonl").write_text(json.dumps(item) + "\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "sweep.toml").write_text('[eval]\ntasks = ["tasks/quiz.jsonl"]\n')  # from cwd
    final = two_step()
    final[~final["checkpoint"]].drop(columns="checkpoint").to_parquet(runs / "summary.parquet")
    code, out, err = cdlaw("downstream", runs, "--bootstrap", 0)
    assert code == 0, err
    (tp,) = json.loads((runs / "downstream.json").read_text())["predictors"]
    assert tp["chance"] == pytest.approx(1 / 3)
    row = next(line for line in out.splitlines() if line.strip().startswith("quiz acc"))
    assert row.split()[2] == "0.333"
    # the default choice's reason wraps within 80 columns
    assert max(map(len, out[out.index("task predictors") :].splitlines())) <= 80


def test_what_downstream_and_predict_print_fits_80_columns(cdlaw, ladder):
    """The links' table, their verdicts, the predictors' table and the forecasts: every line
    within the 80 columns of a pipe, each predictor's error and the chosen one in a row."""
    code, out, err = cdlaw("downstream", ladder, "--bootstrap", 10, "--chance", "quiz=0.25")
    assert code == 0, err
    assert max(map(len, out.splitlines()[1:])) <= 80, out  # the first names the path
    assert "one strategy only, nothing to compare" in " ".join(out.split())  # wrapped at words
    links = ladder.with_name("ladder.downstream.json")
    code, out, err = cdlaw("predict", "--downstream", links, "--n-params", "4B",
                           "--fresh-tokens", "80B")  # fmt: skip
    assert code == 0, err
    assert max(map(len, out.splitlines())) <= 80, out
    row = next(line for line in out.splitlines() if line.strip().startswith("quiz acc"))
    value, low, _, high, by, heldout, spread = row.split()[2:]
    value = value.rstrip("!")  # marked where the runs cannot support it
    assert float(low) <= float(value) <= float(high) and float(heldout) > 0 and float(spread) >= 0
    assert by in ("task-loss", "val-loss", "val-loss-exp", "direct")
    assert "beyond the runs: N 6.25× and compute" in out


def test_predict_wraps_a_long_reason_for_the_choice_within_80_columns(cdlaw, ladder, tmp_path):
    assert cdlaw("downstream", ladder, "--bootstrap", 0)[0] == 0
    d = json.loads(ladder.with_name("ladder.downstream.json").read_text())
    d["predictors"][0]["chosen_by"] = "the least held-out error at N = 6.4e+08 " + "word " * 30
    links = tmp_path / "long.downstream.json"
    links.write_text(json.dumps(d))
    code, out, err = cdlaw("predict", "--downstream", links, "--n-params", "1B",
                           "--fresh-tokens", "20B")  # fmt: skip
    assert code == 0, err
    assert max(map(len, out.splitlines())) <= 80 and "chosen by the least" in out, out


def test_files_older_than_their_runs_are_warned_of(cdlaw, ladder, tmp_path):
    """A run of the ladder retrained since its fit.json and downstream.json were written:
    predict and plan warn of each file, first, naming the refit; current files are quiet."""
    import pandas as pd

    copy = tmp_path / "copy" / "ladder.csv"
    copy.parent.mkdir()
    copy.write_bytes(ladder.read_bytes())
    fit = fit_law(load_runs(copy), "chinchilla", bootstrap=4, n_starts=16, source=str(copy))
    write_fit(fit, *output_paths(copy))
    assert cdlaw("downstream", copy, "--bootstrap", 0)[0] == 0
    links, law = copy.with_name("ladder.downstream.json"), copy.with_name("ladder.fit.json")
    model = ["--n-params", "1B", "--fresh-tokens", "20B", "--extrapolate", "--json"]
    plan = ["plan", "--law", law, "--budget-flops", "1e20", "--unique-tokens", "1e12", "--json"]
    code, out, err = cdlaw("predict", "--downstream", links, "--law", law, *model)
    assert code == 0 and json.loads(out)["warnings"] == [] and "warning" not in err, err
    assert not any("refit" in w for w in json.loads(cdlaw(*plan)[1])["warnings"])
    table = pd.read_csv(copy)
    final = table.index[~table["checkpoint"].astype(bool)][-1]
    table.loc[final, "loss"] += 0.05  # the largest run retrained: another loss, other scores
    table.loc[final, "task_quiz_acc"] -= 0.01
    table.to_csv(copy, index=False)
    code, out, err = cdlaw("predict", "--downstream", links, "--law", law, *model)
    said = json.loads(out)["warnings"]
    assert code == 0 and len(said) == 2 and said == [" ".join(s.split()) for s in said]
    assert said[0].startswith(f"{links} links other runs than") and "cdlaw downstream" in said[0]
    assert said[1].startswith(f"{law}: the fit's") and "refit it first (`cdlaw fit" in said[1]
    assert " ".join(err.split()).count("warning:") == 2
    assert json.loads(cdlaw(*plan)[1])["warnings"][0] == said[1]
    linked = json.loads(cdlaw(*plan, "--link", links, "--extrapolate")[1])["warnings"]
    assert said[0] in linked and said[1] in linked  # plan --link: both files
    code, _, err = cdlaw("plan", "--law", law, "--frontier", "--unique-tokens", "1e12")
    said = " ".join(err.split())
    assert code == 0 and said.count("the fit's") == 1 and f"warning: {law}: the fit's" in said


def test_a_model_far_beyond_the_ladder_is_warned_of_without_a_law(cdlaw, ladder):
    """No --law, so no guard refuses: beyond the 30× limit in N or compute it warns."""
    assert cdlaw("downstream", ladder, "--bootstrap", 0)[0] == 0
    links = ladder.with_name("ladder.downstream.json")
    code, out, err = cdlaw("predict", "--downstream", links, "--n-params", "1B",
                           "--fresh-tokens", "20B", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["warnings"] == [], err
    code, out, err = cdlaw("predict", "--downstream", links, "--n-params", "1T",
                           "--fresh-tokens", "20T", "--json")  # fmt: skip
    (said,) = json.loads(out)["warnings"]
    assert code == 0 and "the largest run in N or compute, beyond the 30× limit" in said


def test_each_way_a_predictor_was_chosen_names_the_tasks_it_is_about(capsys):
    from cdlaw.cli.predictor_table import print_chosen_by

    print_chosen_by([("a acc", "least error"), ("b acc", "least error"),
                     ("c acc", "least error, among those that level off")], "* ")  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "* chosen by least error",
        "* chosen by least error, among those that level off (c acc)",
    ]


def test_a_long_task_name_gives_way_to_the_numbers_within_80_columns(cdlaw, tmp_path):
    """Gadre et al.'s task names run to 40 characters: the name is cut, never a number."""
    long = "bigbench_conceptual_combinations_and_more"
    table = two_step()
    table.columns = [c.replace("task_quiz_", f"task_{long}_") for c in table.columns]
    path = tmp_path / "long.csv"
    table.to_csv(path, index=False)
    fit = fit_law(load_runs(path), "chinchilla", bootstrap=8, n_starts=64, source=str(path))
    write_fit(fit, *output_paths(path))
    code, out, err = cdlaw("downstream", path, "--bootstrap", 10)
    assert code == 0, err
    assert max(map(len, out.splitlines()[1:])) <= 80, out  # the first names the path
    rows = [line for line in out.splitlines() if line.strip().startswith("bigbench_")]
    assert len(rows) == 4 and all("…" in row for row in rows), out  # 2 links, 1 predictor, noise
    code, out, err = cdlaw("predict", "--downstream", path.with_name("long.downstream.json"),
                           "--n-params", "1B", "--fresh-tokens", "20B")  # fmt: skip
    assert code == 0, err
    assert max(map(len, out.splitlines())) <= 80, out
    row = next(line for line in out.splitlines() if line.strip().startswith("bigbench_"))
    assert "…" in row and re.search(r"0\.\d{4} – 0\.\d{4} +\S+ +0\.\d{4} +0\.\d{3}$", row.rstrip())


def test_with_a_law_the_predictors_that_read_n_are_still_held_to_the_limit(cdlaw, ladder,
                                                                            tmp_path):  # fmt: skip
    """--law guards the loss the val-loss chains read; task-loss reads N and compute
    against the ladder, so a model far beyond it is warned of with a law too. A preset law
    (a paper's runs) with a ladder's links is warned of: their losses are not one scale."""
    assert cdlaw("downstream", ladder, "--bootstrap", 0)[0] == 0
    d = json.loads(ladder.with_name("ladder.downstream.json").read_text())
    d["predictors"][0]["chosen"] = "task-loss"
    links = tmp_path / "task-loss.downstream.json"
    links.write_text(json.dumps(d))
    law = ladder.with_name("ladder.fit.json")
    far = ("--n-params", "1T", "--fresh-tokens", "20T", "--extrapolate", "--json")
    code, out, err = cdlaw("predict", "--downstream", links, "--law", law, *far)
    assert code == 0, err
    said = json.loads(out)["warnings"]
    assert any("the largest run in N or compute, beyond the 30× limit" in w for w in said), said
    mine = ladder.with_name("ladder.downstream.json")
    code, out, err = cdlaw("predict", "--downstream", mine, "--law", "qin2026",
                           "--n-params", "100M", "--fresh-tokens", "2B", "--json")  # fmt: skip
    assert code == 0, err
    assert any("the law qin2026 is a paper's fit" in w for w in json.loads(out)["warnings"])
    code, out, err = cdlaw("predict", "--downstream", mine, "--law", law,
                           "--n-params", "600M", "--fresh-tokens", "12B", "--json")  # fmt: skip
    assert not any("a paper's fit" in w for w in json.loads(out)["warnings"])  # its own runs


def test_a_task_the_runs_cannot_support_is_marked_in_predict_and_plan(cdlaw, tmp_path):
    """An accuracy that barely rises over the ladder, within a few steps of its own noise:
    `downstream` says no, `predict` and `plan --link` mark it with ! and say why."""
    import numpy as np

    table = two_step(fracs=END_FRACS)
    rng = np.random.default_rng(5)
    ramp = (np.log(table["n_params"]) - np.log(20e6)) / np.log(32)  # 0 to 1 over the ladder
    table["task_quiz_acc"] = 0.3 + 0.02 * ramp + rng.normal(0, 0.01, len(table))
    path = tmp_path / "flat.csv"
    table.to_csv(path, index=False)
    fit = fit_law(load_runs(path), "chinchilla", bootstrap=4, n_starts=32, source=str(path))
    write_fit(fit, *output_paths(path))
    code, out, err = cdlaw("downstream", path, "--bootstrap", 10, "--chance", "quiz=0.25")
    assert code == 0, err
    noise = out[out.index("noise: step to step") :].splitlines()
    row = next(line.split() for line in noise if line.split()[:2] == ["quiz", "acc"])
    assert row[3] == "checkpoints" and float(row[-2]) < 10 and row[-1] == "no"
    links = path.with_name("flat.downstream.json")
    code, out, err = cdlaw("predict", "--downstream", links, "--n-params", "1B",
                           "--fresh-tokens", "20B")  # fmt: skip
    assert code == 0, err
    words = " ".join(out.split())
    assert re.search(r"quiz acc 0\.\d{4}!", words) and "the runs cannot support" in words
    code, out, err = cdlaw("plan", "--law", path.with_name("flat.fit.json"), "--budget-flops",
                           "1e20", "--unique-tokens", "1e12", "--link", links, "--extrapolate")  # fmt: skip
    assert code == 0, err
    assert re.search(r"quiz +acc +0\.\d{4}!", out) and "task's noise" in " ".join(out.split())
    from cdlaw.report.gather import gather
    from cdlaw.report.sections import downstream_section

    page = downstream_section(gather(path, budget_flops=1e20, unique_tokens=1e12, extrapolate=True))
    assert "the runs cannot support it: the final runs rise by" in page
