"""`cdlaw report`: the page's content, and a real headless Chromium that opens it.

The browser (tests/helpers/reportbrowser.py) is driven through the DevTools protocol over a pipe,
with the standard library only: it loads the file, decodes every image, and we collect
console errors, exceptions and failed loads. tests/report/test_report_answer.py checks the top
of the page (the answer) and the sortable tables on the demo's real runs.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import plotdata
import pytest
from reportbrowser import CHROMIUM, open_in_chromium

from cdlaw.figures.plot import KINDS
from cdlaw.plan.guard import range_warnings
from cdlaw.plan.source import load_law
from cdlaw.report.budget import STEP
from cdlaw.report.gather import gather
from cdlaw.report.page import render, write_report
from cdlaw.system.errors import BadInput


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return plotdata.write_runs(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def report(runs):
    return gather(runs)


@pytest.fixture(scope="module")
def page(report, runs):
    """The page as write_report writes it (the CLI test runs write_report itself)."""
    path = runs / "report.html"
    text = render(report)
    path.write_text(text)
    return path, text


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)


@needs_chromium
def test_chromium_loads_the_report_and_decodes_every_image(page, tmp_path):
    path, _ = page
    # the plan: its box within the first screen of a 1280x800 window
    plan = "(() => { const r = document.getElementById('plan').getBoundingClientRect();"
    plan += " return [r.top, r.bottom, innerHeight]; })()"
    got = open_in_chromium(path, tmp_path / "profile", (1280, 800), {"plan": plan})
    top, bottom, height = got["values"]["plan"]
    assert height == 800 and 0 < top < bottom <= height
    assert got["title"] == "cdlaw report: synthetic"
    assert len(got["images"]) == len(KINDS) == 7  # every figure kind
    for w, h in got["images"]:
        assert w > 400 and h > 300
    assert got["errors"] == []
    # nothing but the file itself was requested: the page is self-contained
    assert [u for u in got["requests"] if not u.startswith(("file:", "data:"))] == []


@needs_chromium
def test_the_browser_check_catches_broken_pages(tmp_path):
    # The check above must be able to fail: a corrupt image and a console error are seen.
    broken = tmp_path / "broken.html"
    bad_png = base64.b64encode(b"\x89PNG\r\n\x1a\nnot really a png").decode()
    broken.write_text(
        f'<!DOCTYPE html><title>x</title><img src="data:image/png;base64,{bad_png}">'
        '<script>console.error("boom")</script>'
    )
    got = open_in_chromium(broken, tmp_path / "profile")
    assert got["images"] == [[0, 0]]
    assert ("console", "boom") in got["errors"]


# ---------------------------------------------------------------------------------------
# What the page says
# ---------------------------------------------------------------------------------------


def test_report_has_settings_runs_fit_regimes_plan_and_figures(page, runs):
    path, text = page
    assert path == runs / "report.html"
    # sweep settings, verbatim
    assert html.escape(plotdata.SWEEP_TOML) in text
    # every run in the run table
    import pandas as pd

    summary = pd.read_parquet(runs / "summary.parquet")
    for run_id in summary["run_id"]:
        assert text.count(f">{run_id}<") == 2  # run table + regime table
    # the fit with its 95% intervals: alpha = 0.289137, CI ±5%
    fit = json.loads((runs / "fit.json").read_text())
    alpha = fit["params"]["alpha"]
    assert re.search(
        rf"<td class=\"l\">alpha</td><td[^>]*>{alpha:.4g}</td><td[^>]*>{alpha * 0.95:.4g}</td>",
        text,
    )
    assert f"{fit['strategies']['paraphrase']['rho']:.4g}" in text
    # regimes with thresholds and floors: the thresholds of docs/regimes.md
    assert "saturation threshold <b>0.9</b>" in text and "<b>0.01</b> nats" in text
    assert text.count('<tr class="compute-bound">') + text.count(
        '<tr class="data-bound">'
    ) + text.count('<tr class="model-bound">') == len(summary)
    # figures: eight PNGs, embedded (the task links in their section, the comparison last)
    imgs = re.findall(
        r'<img alt="(\w+) figure" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text
    )
    assert [k for k, _ in imgs] == ["loss", "eta", "rstar", "downstream", "frontier",
                                    "residuals", "curves", "compare"]  # fmt: skip
    for _, data in imgs:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http://" not in text and "https://" not in text
    # one script, inline (it sorts the tables): nothing is loaded from anywhere
    assert text.count("<script") == text.count("<script>") == 1
    assert all(
        src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]*)"', text)
    )


def test_held_out_check_and_seed_noise_are_shown(tmp_path):
    runs = plotdata.write_runs(tmp_path / "r")
    fit = json.loads((runs / "fit.json").read_text())
    fit["seed_noise"] = {"sd_log": 0.0234, "n_groups": 5, "n_runs": 10}
    (runs / "fit.json").write_text(json.dumps({**fit, "holdout": None}))
    text = render(gather(runs))
    assert re.search(r"held out</td><td[^>]*>none<", text)
    assert "0.0234 between replicate seeds (10 runs in 5 cells)" in text
    # make demo's separate held-out fit, beside fit.json
    holdout = {"n_params": 2e5, "n_rows": 20, "rmse_log": 0.0829}
    (runs / "fit_holdout.json").write_text(json.dumps({**fit, "holdout": holdout}))
    assert re.search(r"held out</td><td[^>]*>N ≥ 200K, rmse_log 0.0829<", render(gather(runs)))


def test_the_headline_says_what_the_seeds_show(tmp_path):
    # Replicates that agree exactly (a simulated sweep without --seed-noise: sd 0) are
    # still replicates; only a table with no two runs differing in seed alone has none.
    runs = plotdata.write_runs(tmp_path / "r")
    fit = json.loads((runs / "fit.json").read_text())

    def headline(noise) -> str:
        (runs / "fit.json").write_text(json.dumps({**fit, "seed_noise": noise}))
        text = render(gather(runs))
        return re.sub(
            "<[^>]+>", "", text[text.index('id="fit-headline"') : text.index('id="plan"')]
        )

    same = headline({"sd_log": 0.0, "n_groups": 12, "n_runs": 24})
    assert "no replicate seeds" not in same
    assert "the replicate seeds (24 runs in 12 cells) have identical losses" in same
    assert "the seed noise (0.0234 between replicate seeds, 24 runs in 12 cells)" in headline(
        {"sd_log": 0.0234, "n_groups": 12, "n_runs": 24}
    )
    assert "no runs that differ only in seed" in headline(None)


def test_a_table_of_runs_is_reported_with_the_fit_beside_it(tmp_path):
    csv, fit = plotdata.write_external(tmp_path)  # published.csv, published.fit.json
    report = gather(csv)
    assert report.inputs.fit_path == fit and report.fit_note == f"From {fit}."
    assert set(report.figures) == {"loss", "eta", "rstar", "frontier", "residuals"}
    assert report.plan is not None
    text = render(report)
    assert "No fit" not in text
    # a table has no sweep file: no settings section, none in the navigation, and its
    # downstream section names what it lacks, not a sweep file's [eval]
    assert 'id="settings"' not in text and "Sweep settings" not in text
    assert f"No task links: {csv} has no task columns (task_&lt;task&gt;_&lt;metric&gt;" in text
    assert "[eval]" not in text.split('id="downstream"', 1)[1].split("</section>", 1)[0]
    assert text.count("<tr>") > 72  # every run of the table in the runs section
    # the page goes beside the table, as the fit did
    done = subprocess.run(
        [sys.executable, "-m", "cdlaw", "report", str(csv)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    path = csv.with_name("published.report.html")
    assert done.stdout.strip() == str(path) and path.is_file()
    # another fit, named
    other = tmp_path / "other.json"
    other.write_text(fit.read_text())
    assert gather(csv, fit_path=other).inputs.fit_path == other
    # a table without a fit: fitted in memory, or as here, why it cannot be
    few = tmp_path / "few.csv"
    pd.read_csv(csv).iloc[:2].to_csv(few, index=False)
    report = gather(few)
    assert report.inputs.fit is None and "No fit beside" in report.fit_note
    assert f"`cdlaw fit {few}`" in report.fit_note


def test_a_table_without_a_fit_is_read_once_and_fitted_after_it_is_checked(tmp_path):
    """`cdlaw report t.csv` in papers' columns, no fit beside it: the table is read once
    (one line says how), then fitted in memory from those rows; a file that is no table is
    refused before any word of fitting."""
    csv, _ = plotdata.write_external(tmp_path)
    table = pd.read_csv(csv)
    papers = tmp_path / "papers" / "runs.csv"
    papers.parent.mkdir()
    table.rename(columns={"n_params": "params", "fresh_tokens": "unique_tokens"}).to_csv(
        papers, index=False
    )
    done = subprocess.run(
        [sys.executable, "-m", "cdlaw", "report", str(papers)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert sum(line.startswith("read ") for line in lines) == 1, done.stderr
    assert sum("fitting the runs for this report" in line for line in lines) == 1
    assert papers.with_name("runs.report.html").is_file()
    text = tmp_path / "runs.txt"
    text.write_text("not a table")
    done = subprocess.run(
        [sys.executable, "-m", "cdlaw", "report", str(text)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "fitting" not in done.stderr, done.stderr


def test_the_advice_to_fit_names_options_report_has(tmp_path):
    import typer

    from cdlaw.cli import app, register_commands

    register_commands()
    command = typer.main.get_command(app).commands["report"]
    options = {o for p in command.params for o in p.opts}
    report = gather(few_runs(tmp_path))
    advice = report.skipped["loss"]
    assert re.findall(r"--[a-z-]+", advice) and set(re.findall(r"--[a-z-]+", advice)) <= options
    assert "--fit" in options


def test_default_plan_is_the_largest_budget_inside_the_fitted_range(report, runs):
    from cdlaw.plan.planner import plan

    largest = max(
        6 * n * f * (1 + r)
        for n in plotdata.SIZES
        for f in (n * t for t in plotdata.TOKENS_PER_PARAM)
        for r in plotdata.RATIOS
    )
    source = load_law(str(runs / "fit.json"))
    unique = max(plotdata.SIZES) * max(plotdata.TOKENS_PER_PARAM)
    assert report.unique_tokens == unique
    # At the largest run's compute this law plans a model 2.8x the largest fitted size, so
    # the page backs off in steps of sqrt(2) to the first budget whose plan stays inside.
    assert range_warnings(source, plan(source, largest, unique).best)
    assert report.budget_flops < largest
    steps = round(math.log(largest / report.budget_flops, STEP))
    assert report.budget_flops == pytest.approx(largest / STEP**steps)
    assert not range_warnings(source, plan(source, report.budget_flops, unique).best)
    assert range_warnings(source, plan(source, report.budget_flops * STEP, unique).best)
    assert report.plan["n_params"] <= max(plotdata.SIZES)
    assert not [w for w in report.plan["warnings"] if "fitted" in w]
    want = plan(source, report.budget_flops, unique)
    assert report.plan["n_params"] == pytest.approx(want.n_params)
    assert report.plan["predicted_loss"] == pytest.approx(want.predicted_loss)
    text = render(report)
    assert (
        html.escape(
            f"C = {report.budget_flops:.3g} FLOPs is the largest budget up to the compute of the "
            f"sweep's largest run ({largest:.3g} FLOPs) whose plan stays inside the fitted range"
        )
        in text
    )
    assert f"{report.plan['predicted_loss']:.4g}" in text
    for name in ("plan (cd law)", "naive Chinchilla", "four-epoch rule"):
        assert f'<td class="l">{name}</td>' in text


def few_runs(tmp_path, n: int = 2):
    """A runs folder of n runs and no fit: too few to identify the law."""
    return plotdata.write_runs(tmp_path, with_fit=False, n_runs=n)


def test_report_without_a_fit_says_how_to_make_one(tmp_path):
    # The fit refuses two runs; the report says so and how to fit, and still shows the runs
    # and their curves.
    runs = few_runs(tmp_path)
    report = gather(runs)
    assert report.inputs.fit is None
    assert f"`cdlaw fit {runs}`" in report.fit_note and "cannot be fitted yet" in report.fit_note
    assert list(report.figures) == ["curves"]
    assert "it needs a fit" in report.skipped["loss"]
    text = render(report)
    assert "No plan without a fit." in text and html.escape(report.fit_note) in text


def test_cli_report_and_bad_input(tmp_path):
    def run(*args):
        cmd = [sys.executable, "-m", "cdlaw", "report", *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        return done.returncode, done.stdout, " ".join(done.stderr.split())  # unwrap rich

    runs = few_runs(tmp_path)
    out = tmp_path / "r.html"
    code, stdout, stderr = run(
        str(runs), "--out", str(out), "--budget-flops", "2e20", "--unique-tokens", "1B"
    )
    assert code == 0, stderr
    assert stdout.strip().splitlines()[-1] == str(out)
    assert "no fit.json" in stderr
    assert (
        "C = 2e+20 FLOPs is as given (--budget-flops); U = 1B unique tokens is as given"
        in out.read_text()
    )
    # --json: only JSON on stdout, saying what was written
    code, stdout, stderr = run(str(runs), "--out", str(tmp_path / "j.html"), "--json")
    assert code == 0, stderr
    got = json.loads(stdout)
    assert got["written"] == [str(tmp_path / "j.html")] and (tmp_path / "j.html").is_file()
    assert got["plan"] is None and got["figures"] == ["curves"] and "loss" in got["skipped"]
    assert got["budget_flops"] == pytest.approx(max(
        6 * r["n_params"] * (r["fresh_tokens"] + r["derived_tokens"])
        for r in plotdata.run_table().iloc[:2].to_dict("records")))  # fmt: skip
    code, _, stderr = run(str(runs), "--out", str(tmp_path / "x.html"), "--budget-flops", "lots")
    assert code == 2 and "--budget-flops" in stderr and "Traceback" not in stderr
    code, _, stderr = run(str(tmp_path / "nope"), "--out", str(tmp_path / "x.html"))
    assert code == 2 and "is neither a runs folder nor a .csv/.parquet table" in stderr
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(BadInput, match="--unique-tokens must be a positive"):
        gather(runs, unique_tokens=-1.0)
    with pytest.raises(BadInput, match="is a folder; give a file name"):
        write_report(runs, tmp_path)


def test_a_table_without_a_fit_or_links_is_checked_once(tmp_path, caplog):
    """The report tries the law's fit and the task links in memory on one reading of the
    table: a loss above ln V is said once, not once for each (it was said twice). Three
    runs, too few to fit the law, keep it quick."""
    table = plotdata.run_table(1).drop(columns=["run_id"]).iloc[:3].copy()
    table["vocab_size"] = 512
    table.loc[0, "loss"] = 7.0  # above ln 512 = 6.24
    table["task_world_mc_acc"] = (1.2 - table["loss"] / 8).clip(0.25, 1.0)
    csv = tmp_path / "t.csv"
    table.to_csv(csv, index=False)
    with caplog.at_level("WARNING", logger="cdlaw"):
        report = gather(csv)
    said = [r.getMessage() for r in caplog.records if "loss above ln V" in r.getMessage()]
    assert len(said) == 1, said
    assert "cannot be fitted yet" in report.fit_note
    assert report.downstream_note.startswith("No downstream.json")  # tried here


def test_the_default_budget_is_found_without_the_bootstrap(report, runs, monkeypatch):
    """Each budget the page tries is planned without the bootstrap refits (only where its
    allocation lies is read); the page plans the budget found once, with them."""
    import dataclasses

    import cdlaw.report.budget as budget

    real, refits = budget.plan, []

    def plan(source, *args, **kwargs):
        refits.append(len(source.bootstrap))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(budget, "plan", plan)
    fitted = load_law(str(runs / "fit.json"))
    source = dataclasses.replace(fitted, bootstrap=(fitted.law,) * 4)  # refits that agree
    found, inside = budget.budget_inside_range(
        source, *budget.run_compute(report.inputs), report.unique_tokens
    )
    assert source.bootstrap and refits and set(refits) == {0}
    assert inside and found == report.budget_flops


def test_links_of_runs_scored_again_since_are_refused(runs, tmp_path):
    """A task file edited and the runs scored again: the downstream.json beside them links
    the old metrics, and the report (as plot) says so instead of showing them."""
    import shutil

    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    gather(copy)  # as written: the links are of these runs
    summary = pd.read_parquet(copy / "summary.parquet")
    column = next(c for c in summary.columns if c.startswith("task_") and c.endswith("_acc"))
    summary.loc[summary.index[0], column] = 0.5 * summary.loc[summary.index[0], column]
    summary.to_parquet(copy / "summary.parquet")
    with pytest.raises(BadInput, match=r"links other runs than .* holds now"):
        gather(copy)


def test_a_cell_of_several_runs_is_named_as_the_fit_reduced_it():
    from cdlaw.report.sections import run_labels

    cell = {"n_params": 1e6, "fresh_tokens": 1e8, "derived_tokens": 0.0, "strategy": "none"}
    summary = pd.DataFrame(
        [{**cell, "run_id": "a", "loss": 3.0}, {**cell, "run_id": "b", "loss": 3.1}]
    )
    rows = pd.DataFrame([{**cell, "row_id": 0, "n_in_cell": 2, "loss": 3.0}])
    assert run_labels(rows, summary, "min") == ["best of 2: a, b"]  # --select min kept one
    assert run_labels(rows, summary, "mean") == ["mean of 2: a, b"]


def test_shares_outside_the_bands_are_named(report):
    """A run whose observed loss is above the law's L_1ep has a derived-gain share below 0,
    and one below L_D a share above 1: the regime table says what such a share means."""
    from dataclasses import replace

    from cdlaw.regimes import classify
    from cdlaw.report.sections import regimes_section

    rows = report.inputs.rows.copy()
    t = classify(report.inputs.law, rows["n_params"], rows["fresh_tokens"],
                 rows["derived_tokens"], rows["strategy"].to_numpy(object))  # fmt: skip
    derived = (rows["derived_tokens"] > 0).to_numpy()
    rows["loss"] = (t.loss_one_epoch + t.loss_data_floor) / 2  # every share ½ …
    rows.loc[derived, "loss"] = t.loss_data_floor[derived] - 0.01  # … but these above 1
    first = rows.index[~derived][0]
    rows.loc[first, "loss"] = t.loss_one_epoch[~derived][0] + 0.01  # and one below 0
    text = regimes_section(replace(report, inputs=replace(report.inputs, rows=rows)))
    said = " ".join(re.sub("<[^>]+>", "", text).split())
    assert f"1 below 0 (a loss above the law's L_1ep) and {derived.sum()} above 1" in said
    rows.loc[:, "loss"] = (t.loss_one_epoch + t.loss_data_floor) / 2
    rows.loc[~derived, "loss"] = t.loss_one_epoch[~derived]  # share 0: inside the bands
    text = regimes_section(replace(report, inputs=replace(report.inputs, rows=rows)))
    assert "outside [0, 1]" not in text


def test_a_table_without_derived_tokens_is_fitted_with_the_chinchilla_law(tmp_path):
    """The cd law has nothing to fit on one-epoch runs and says to use --law chinchilla;
    the report's own fit does so, names the command that saves it, and labels its plan by
    the law that made it."""
    csv = tmp_path / "chinchilla.csv"
    table = pd.read_csv(Path(__file__).parents[2] / "examples" / "chinchilla-besiroglu.csv")
    table.iloc[::3].to_csv(csv, index=False)
    report = gather(csv)
    assert report.inputs.fit["law"] == "chinchilla", report.fit_note
    assert f"save it with `cdlaw fit {csv} --law chinchilla`" in report.fit_note
    assert {"loss", "frontier"} <= set(report.figures) and report.plan is not None
    text = render(report)
    assert '<td class="l">plan (chinchilla law)</td>' in text and "CD law" not in text
    few = tmp_path / "few.csv"  # too few to fit: every advice names the law that would
    table.iloc[:2].to_csv(few, index=False)
    report = gather(few)
    assert report.inputs.fit is None and "cannot be fitted yet" in report.fit_note
    assert f"`cdlaw fit {few} --law chinchilla`" in report.fit_note
    assert f"run `cdlaw fit {few} --law chinchilla` first" in report.skipped["loss"]
