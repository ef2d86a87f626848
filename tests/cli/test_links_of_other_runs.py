"""A fit and task links made from different runs: `cdlaw plan --link` and `cdlaw predict`
say so, since a link reads its own runs' validation loss (cdlaw.cli.runs_now)."""

import shutil
from pathlib import Path

from plantedlinks import planted_runs
from runhelpers import cdlaw_here

from cdlaw.cli.runs_now import links_of_other_runs
from cdlaw.fit.table import prepare_runs
from cdlaw.tasks.links import fit_downstream

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_FIT = ROOT / "tests" / "fit" / "golden" / "demo-runs.fit.json"


def project(tmp_path: Path) -> Path:
    """a.csv with a.fit.json (the demo's runs and fit); b.csv with b.downstream.json (other
    runs, with a task); a.downstream.json, the same links beside a's runs."""
    shutil.copy(ROOT / "examples" / "demo-runs.csv", tmp_path / "a.csv")
    shutil.copy(GOLDEN_FIT, tmp_path / "a.fit.json")
    runs = planted_runs()
    runs.to_csv(tmp_path / "b.csv", index=False)
    links = fit_downstream(prepare_runs(runs), n_boot=0, source="b.csv")
    links.write(tmp_path / "b.downstream.json")
    shutil.copy(tmp_path / "b.downstream.json", tmp_path / "a.downstream.json")
    return tmp_path


def test_a_law_and_links_of_other_runs_are_named(tmp_path):
    root = project(tmp_path)
    said = links_of_other_runs(str(root / "a.fit.json"), root / "b.downstream.json")
    assert said is not None and "fitted to the runs of" in said
    assert str(root / "b.csv") in said and str(root / "a.csv") in said
    assert links_of_other_runs(str(root / "a.fit.json"), root / "a.downstream.json") is None
    # a preset is a paper's fit, on its own runs and validation set, never these
    preset = links_of_other_runs("qin2026", root / "b.downstream.json")
    assert preset is not None and "the law qin2026 is a paper's fit" in preset


def test_plan_with_links_of_other_runs_warns(tmp_path, monkeypatch, capsys):
    root = project(tmp_path)
    args = ["plan", "--law", "a.fit.json", "--budget-flops", "2e12", "--unique-tokens", "96K"]
    code, _, err = cdlaw_here(monkeypatch, capsys, root, *args, "--link", "b.downstream.json")
    assert code == 0 and "were fitted to the runs of b.csv and the law (a.fit.json)" in err
    code, _, err = cdlaw_here(monkeypatch, capsys, root, *args, "--link", "a.downstream.json")
    assert code == 0 and "were fitted to the runs of" not in err
