"""`cdlaw plot`'s frontier is for the plan a user asked about: --unique-tokens and
--budget-flops, else the sweep file's [plan], else the runs' largest D, which its title
then names. The budget asked for is planned and marked in every panel."""

from __future__ import annotations

import json

import plotdata
import pytest
from PIL import Image

from cdlaw.figures.inputs import load_inputs
from cdlaw.figures.plot import make_figure

U, C = 1e9, 1e18  # inside the synthetic runs' range: D up to 2e9, runs up to 1.9e19 FLOPs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return plotdata.write_runs(tmp_path_factory.mktemp("plot-plan"))


def title(png) -> str:
    return Image.open(png).text["Title"]


def test_plot_draws_the_frontier_for_the_plan_asked(cdlaw, runs, tmp_path):
    out = tmp_path / "asked"
    code, stdout, err = cdlaw("plot", runs, "--kind", "frontier", "--out", out,
                              "--unique-tokens", "1e9", "--budget-flops", "1e18", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(stdout)["written"] == [str(out / "frontier.png")]
    assert title(out / "frontier.png") == "Compute frontier with U = 1B unique tokens"
    code, _, err = cdlaw("plot", runs, "--kind", "frontier", "--out", tmp_path / "default")
    assert code == 0, err
    assert title(tmp_path / "default" / "frontier.png") == (
        "Compute frontier with U = 2B unique tokens (the runs' largest D)"
    )


def test_the_budget_asked_is_planned_and_marked_in_every_panel(runs):
    inputs = load_inputs(runs)
    inputs.unique_tokens, inputs.budget_flops = U, C
    fig = make_figure("frontier", inputs)
    assert inputs.frontier["unique_tokens"] == U and inputs.frontier["budget_flops"] == C
    assert C in [row["budget_flops"] for row in inputs.frontier["rows"]]
    marks = [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "budget"]
    assert len(marks) == 4 and {tuple(ln.get_xdata()) for ln in marks} == {(C, C)}


def test_a_sweep_files_plan_is_the_frontiers_unless_the_options_say_otherwise(
    cdlaw, runs, tmp_path
):
    import shutil

    folder = tmp_path / "synthetic"
    shutil.copytree(runs, folder)
    toml = folder / "sweep.toml"
    toml.write_text(toml.read_text() + "\n[plan]\nbudget_flops = 1e18\nunique_tokens = '1B'\n")
    code, _, err = cdlaw("plot", folder, "--kind", "frontier")
    assert code == 0, err
    assert (
        title(folder / "figures" / "frontier.png") == "Compute frontier with U = 1B unique tokens"
    )
    code, _, err = cdlaw("plot", folder, "--kind", "frontier", "--unique-tokens", "500M")
    assert code == 0, err
    assert title(folder / "figures" / "frontier.png").startswith("Compute frontier with U = 500M")


def test_a_plan_for_no_frontier_is_refused(cdlaw, runs, tmp_path):
    code, _, err = cdlaw("plot", runs, "--kind", "loss", "--budget-flops", "1e18",
                         "--out", tmp_path / "f")  # fmt: skip
    assert code == 2 and " ".join(err.split()) == (
        "error: --budget-flops set the frontier's plan: add --kind frontier, or leave it out"
    )
    code, _, err = cdlaw("plot", runs, "--kind", "frontier", "--unique-tokens", "-5")
    assert code == 2 and "--unique-tokens must be a positive number" in err, err
    assert not (tmp_path / "f").exists()
