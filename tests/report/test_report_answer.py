"""The top of `cdlaw report` on the demo's real runs: the answer first, tables after.

The runs are examples/demo-runs.csv (72 runs of `make demo`, two seeds for every one-epoch
cell), written as a sweep's runs folder and fitted the way `make demo` fits them (seeds
averaged, `--select mean`) with few starts, so the page is built in seconds. A real
headless Chromium (tests/helpers/reportbrowser.py) opens it at 1280×800 and checks that the
first screen holds the fit's headline and the plan, and that the tables sort.
"""

from __future__ import annotations

import html
import json

import pytest
from reportbrowser import CHROMIUM, open_in_chromium
from runhelpers import write_demo_runs

from cdlaw.fit.io import write_fit
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.report.gather import gather
from cdlaw.report.page import render
from cdlaw.report.tables import cell, format_cell
from cdlaw.units import format_number


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """runs/demo as `make demo` leaves it: summary.parquet, sweep.toml, fit.json (seeds
    averaged), fit_rows.parquet; returns (runs folder, summary)."""
    runs = tmp_path_factory.mktemp("report-answer") / "demo"
    summary = write_demo_runs(runs)
    result = fit_law(load_runs(runs), select="mean", n_starts=64, source=str(runs))
    write_fit(result, runs / "fit.json", runs / "fit_rows.parquet")
    return runs, summary


@pytest.fixture(scope="module")
def report(demo):
    return gather(demo[0])


@pytest.fixture(scope="module")
def page(report, demo):
    path = demo[0] / "report.html"
    text = render(report)
    path.write_text(text)
    return path, text


def test_seed_averaged_rows_name_their_runs_never_nan(page, demo):
    _, text = page
    _, summary = demo
    assert ">nan<" not in text and "nan," not in text
    # every one-epoch cell was trained with seeds 0 and 1 and averaged into one row
    one_epoch = summary[summary["derived_tokens"] == 0]
    cells = one_epoch.groupby(["n_params", "fresh_tokens"])["run_id"].apply(list)
    assert len(cells) == 12
    for ids in cells:
        assert len(ids) == 2
        assert f">mean of 2: {', '.join(ids)}<" in text


def test_no_minus_zero():
    assert format_cell(-0.0) == "0" and format_cell(0.0) == "0"
    assert cell(-0.0) == ("0", 0.0)
    assert format_cell(-0.25) == "-0.25"  # a real negative keeps its sign


def test_the_demo_report_plans_for_the_sweep_files_plan_and_says_so(report, demo):
    """sweeps/demo.toml's [plan] (2e12 FLOPs, 96K unique tokens) is what `make demo`'s plan
    step plans: the page plans the same, names where C and U came from in its first line,
    and draws the frontier for that U with C marked."""
    from cdlaw.plan.planner import plan
    from cdlaw.plan.source import load_law

    runs, _ = demo
    assert (report.budget_flops, report.unique_tokens) == (2e12, 96e3)
    want = plan(load_law(str(runs / "fit.json")), 2e12, 96e3)
    assert report.plan["strategy"] == want.strategy
    assert report.plan["n_params"] == pytest.approx(want.n_params)
    assert report.plan["predicted_loss"] == pytest.approx(want.predicted_loss)
    lead = render(report).split('id="plan"><p>', 1)[1].split("</p>", 1)[0]
    assert lead.startswith(
        "<b>Plan</b> for C = 2e+12 FLOPs and U = 96K unique tokens, both from the sweep "
        "file&#x27;s [plan]: train"
    ), lead
    frontier = report.inputs.frontier
    assert frontier["unique_tokens"] == 96e3 and frontier["budget_flops"] == 2e12
    assert 2e12 in [row["budget_flops"] for row in frontier["rows"]]


def test_without_a_plan_asked_the_page_says_which_u_and_c_it_took(demo, tmp_path):
    """The demo's runs without the sweep file's [plan]: U is the runs' largest D and C the
    largest budget inside the fitted range, each named as such in the plan's first line."""
    import shutil

    runs, summary = demo
    bare = tmp_path / "demo"
    shutil.copytree(runs, bare)
    toml = bare / "sweep.toml"
    toml.write_text(toml.read_text().split("\n[plan]")[0])
    report = gather(bare)
    fit = json.loads((bare / "fit.json").read_text())
    rng = fit["data_range"]
    p = report.plan
    largest = float((6 * summary["n_params"] * summary["tokens_trained"]).max())
    # the demo's largest run is already planned inside the range: the budget is its compute
    assert report.budget_flops == pytest.approx(largest)
    assert report.unique_tokens == summary["fresh_tokens"].max()
    assert rng["n_params"][0] <= p["n_params"] <= rng["n_params"][1]
    assert p["derived_tokens"] / p["fresh_tokens"] <= rng["derived_ratio"][1]
    lo, hi = rng["tokens_per_param"]
    assert lo <= p["fresh_tokens"] / p["n_params"] <= hi
    assert not [w for w in p["warnings"] if "fitted" in w]
    assert "its plan stays inside the fitted range" in report.budget_note
    lead = render(report).split('id="plan"><p>', 1)[1].split("</p>", 1)[0]
    assert (
        "FLOPs (the largest inside the fitted range) and U = 384K unique tokens (the "
        "runs&#x27; largest D: no --unique-tokens or [plan] names U): train"
    ) in lead, lead
    assert report.inputs.frontier["unique_tokens"] == 384e3


def test_answer_leads_and_the_toml_comes_last(page, report):
    _, text = page
    where = {
        "fit headline": text.index('id="fit-headline"'),
        "plan": text.index('id="plan"'),
        "loss figure": text.index('<img alt="loss figure"'),
        "eta figure": text.index('<img alt="eta figure"'),
        "rstar figure": text.index('<img alt="rstar figure"'),
        "frontier figure": text.index('<img alt="frontier figure"'),
        "fit details": text.index('<section id="fit">'),
        "regimes": text.index('<section id="regimes">'),
        "runs": text.index('<section id="runs">'),
        "sweep.toml": text.index("<pre>"),
    }
    assert list(where.values()) == sorted(where.values()), where
    assert text.rindex("</table>") < where["sweep.toml"]
    # the headline: law, log-RMSE against the seed noise, held-out check (or how to get one)
    headline = text[where["fit headline"] : where["plan"]]
    fit = report.inputs.fit
    assert (
        "the cd law" in headline and f"log-RMSE <b>{format_cell(fit['rmse_log'])}</b>" in headline
    )
    ratio = fit["rmse_log"] / fit["seed_noise"]["sd_log"]
    assert f"{ratio:.2g}× the seed noise ({format_cell(fit['seed_noise']['sd_log'])}" in headline
    assert "no held-out check" in headline and "--holdout-largest" in headline
    plan = text[where["plan"] : where["loss figure"]]
    assert f"<b>N = {format_number(report.plan['n_params'])}</b>" in plan
    assert html.escape(report.budget_note) in plan


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)

FIRST_SCREEN = """(() => {
  const box = id => { const r = document.getElementById(id).getBoundingClientRect();
                      return [r.top, r.bottom, r.left, r.right]; };
  const lead = document.querySelector("#plan p").getBoundingClientRect();
  const hit = document.elementFromPoint(lead.left + 5, lead.top + lead.height / 2);
  return {plan: box("plan"), fit: box("fit-headline"), height: innerHeight, width: innerWidth,
          scrolled: scrollY, text: document.getElementById("plan").innerText,
          visible: !!hit && document.getElementById("plan").contains(hit)};
})()"""

SORT = """(() => {
  const t = document.querySelector("#runs table.sortable");
  const heads = Array.from(t.tHead.rows[0].cells).map(c => c.textContent);
  const th = name => t.tHead.rows[0].cells[heads.indexOf(name)];
  const col = name => Array.from(t.tBodies[0].rows).map(r => r.cells[heads.indexOf(name)]);
  th("n_params").click();
  const up = col("n_params").map(c => parseFloat(c.getAttribute("data-v")));
  const shown = col("n_params").map(c => c.textContent);
  th("n_params").click();
  const down = col("n_params").map(c => parseFloat(c.getAttribute("data-v")));
  th("strategy").click();
  const strategy = col("strategy").map(c => c.textContent);
  const box = t.closest(".scroll");
  return {up, down, shown, strategy, sort: th("strategy").getAttribute("aria-sort"),
          scrolls: box.scrollHeight > box.clientHeight, overflow: getComputedStyle(box).overflowY,
          regimes: document.querySelectorAll("#regimes table.sortable").length};
})()"""


@needs_chromium
def test_chromium_first_screen_holds_the_plan_and_tables_sort(page, report, tmp_path):
    path, _ = page
    got = open_in_chromium(
        path, tmp_path / "profile", (1280, 800), {"first": FIRST_SCREEN, "sort": SORT}
    )
    assert got["errors"] == []
    first = got["values"]["first"]
    assert (first["width"], first["height"], first["scrolled"]) == (1280, 800, 0)
    top, bottom, left, right = first["plan"]
    # the whole plan (sentence, contrast table, why this budget) in the first screen
    assert 0 < top and bottom <= 800 and 0 <= left and right <= 1280, first
    assert first["fit"][1] <= top and first["visible"]
    p = report.plan
    for want in (
        f"N = {format_number(p['n_params'])}",
        f"D = {format_number(p['fresh_tokens'])}",
        f"predicted loss {format_cell(p['predicted_loss'])}",
        "naive Chinchilla",
        "four-epoch rule",
    ):
        assert want in first["text"], want

    s = got["values"]["sort"]
    assert s["up"] == sorted(s["up"]) and s["down"] == sorted(s["down"], reverse=True)
    assert len(set(s["up"])) == 3 and len(s["up"]) == 72
    # sorted by value, not by text: 26.3K < 60.5K < 200K
    assert list(dict.fromkeys(s["shown"])) == ["26.3K", "60.5K", "200K"]
    assert s["strategy"] == sorted(s["strategy"]) and s["sort"] == "ascending"
    assert s["scrolls"] and s["overflow"] == "auto" and s["regimes"] == 1


def test_the_plan_says_how_often_the_refits_own_plans_agree():
    from cdlaw.law import PRESETS, Law
    from cdlaw.plan.planner import plan
    from cdlaw.plan.source import PlanningLaw
    from cdlaw.report.answer import _decision_note

    q = PRESETS["qin2026"]
    strategies = {s: dict(p) for s, p in q.strategies.items()}
    strategies["repetition"]["K"] /= 100  # this refit would paraphrase
    flipped = Law("cd", q.params, strategies)
    p = plan(PlanningLaw("x", q, None, (q, q, q, flipped)), 1e21, 5e9).to_dict()
    note = _decision_note(p)
    lo, hi = p["n_params_ci95"]
    assert p["strategy"] == "repetition" and "repetition in 75% of them" in note
    assert f"N from {format_number(lo)} to {format_number(hi)} (95%)" in note
    side = "below" if p["optimism"] < 0 else "above"  # a size and a side, never a sign
    assert f"their own predictions {format_cell(abs(p['optimism']))} nats {side}" in note
    assert _decision_note({**p, "strategy_share": None, "n_params_ci95": None,
                           "optimism": None}) == ""  # fmt: skip


def test_the_plans_table_says_how_each_makes_its_derived_tokens_as_plan_does(page, report):
    """One `uses` column, as `cdlaw plan` prints it: epochs of repetition, passes of any
    other strategy; no repetition row with "0 passes" beside its epochs."""
    _, text = page
    table = text[text.index("loss above the plan") - 600 :].split("</table>")[0]
    assert ">uses<" in table
    p = report.plan
    want = f"{format_cell(p['epochs'])} epochs" if p["strategy"] == "repetition" else "passes"
    assert want in table and ">4 epochs<" in table  # the four-epoch rule's row
    assert "passes (D′/D)" not in table
