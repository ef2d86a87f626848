"""[eval] in a sweep: every run's summary row holds its task scores; tasks are in no run id,
so a finished sweep given tasks later keeps its runs and scores them from model/; and every
bad task is refused in one sentence, exit code 2, before anything is written."""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[2]
EVAL = '\n[eval]\ntasks = ["world_cloze", "world_mc"]\nmax_items = 12\n'
COLUMNS = [
    "task_world_cloze_bpb",
    "task_world_cloze_acc",
    "task_world_mc_bpb",
    "task_world_mc_acc",
    "task_world_mc_acc_norm",
]


def test_a_sweep_scores_every_run_and_keeps_the_run_ids(runs_root, write_sweep, one_thread):
    path = write_sweep(runs_root, "evals", sizes='"20K"')
    plain = {r.run_id for r in load_sweep(path).runs()}
    path.write_text(path.read_text() + EVAL)
    assert {r.run_id for r in load_sweep(path).runs()} == plain
    outcome = run_sweep(path, runs_root, SweepOptions(exec_cfg=one_thread))
    summary = pd.read_parquet(runs_root / "evals" / "summary.parquet")
    assert len(summary) == 3 and set(summary["run_id"]) == plain
    for col in COLUMNS:
        values = summary[col].to_numpy(float)
        assert ((values > 0) if col.endswith("bpb") else (values >= 0) & (values <= 1)).all(), col
    metrics = pd.read_parquet(runs_root / "evals" / outcome.trained[0] / "metrics.parquet")
    scored = metrics.dropna(subset=[COLUMNS[0]])
    assert scored["val_loss"].notna().all() and scored["step"].iloc[-1] == metrics["step"].max()


def test_tasks_added_to_a_finished_sweep_score_its_models_and_retrain_nothing(
    runs_root, write_sweep, one_thread
):
    path = write_sweep(runs_root, "later", sizes='"20K"')
    run_sweep(path, runs_root, SweepOptions(exec_cfg=one_thread))
    folder = runs_root / "later"
    before = {p.parent.name: p.stat().st_mtime_ns for p in folder.glob("*/metrics.parquet")}
    path.write_text(path.read_text() + EVAL)
    again = run_sweep(path, runs_root, SweepOptions(exec_cfg=one_thread))
    assert again.trained == [] and (folder / "sweep.toml").read_text() == path.read_text()
    summary = pd.read_parquet(folder / "summary.parquet")
    assert summary[COLUMNS].notna().all().all()
    after = {p.parent.name: p.stat().st_mtime_ns for p in folder.glob("*/metrics.parquet")}
    assert after == before  # scored from model/, the curves untouched
    # and the scores are what training would have written at the end: retrain one run
    fresh = runs_root / "later-fresh"
    run_sweep(path, fresh, SweepOptions(exec_cfg=one_thread))
    trained = pd.read_parquet(fresh / "later" / "summary.parquet")
    pd.testing.assert_frame_equal(summary[COLUMNS], trained[COLUMNS])


CLI = "import sys; from cdlaw.cli import main; sys.argv = ['cdlaw', *sys.argv[1:]]; main()"


def sweep_with(tmp_path: Path, eval_table: str) -> Path:
    text = (ROOT / "sweeps" / "smoke.toml").read_text()
    path = tmp_path / "s.toml"
    path.write_text(text + "\n[eval]\n" + eval_table)
    return path


def task_file(tmp_path: Path, name: str, *lines) -> str:
    path = tmp_path / name / "quiz.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def bad_evals(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """eval table -> the words its one-sentence refusal must hold."""
    missing = task_file(tmp_path, "missing", {"context": "a", "choices": [" x", " y"]})
    out_of_range = task_file(
        tmp_path, "range", {"context": "a", "choices": [" x", " y"], "gold": 5}
    )
    return {
        "missing field": (f'tasks = ["{missing}"]', 'lacks "gold"'),
        "gold out of range": (
            f'tasks = ["{out_of_range}"]',
            "out of range for 2 choices",
        ),
        "empty task": (f'tasks = ["{task_file(tmp_path, "empty")}"]', "holds no items"),
        "unknown task": ('tasks = ["hellaswag"]', "neither a built-in task"),
        "every": ('tasks = ["world_mc"]\nevery = 3', "multiple of train.eval_every"),
        "unknown key": ('task = ["world_mc"]', "did you mean 'tasks'"),
    }


@pytest.mark.parametrize(
    "case",
    ["missing field", "gold out of range", "empty task", "unknown task", "every", "unknown key"],
)
def test_a_bad_task_is_one_sentence_and_exit_2_before_anything_is_written(tmp_path, case):
    import subprocess

    table, says = bad_evals(tmp_path)[case]
    out = tmp_path / "runs"
    r = subprocess.run(
        [sys.executable, "-c", CLI, "sweep", str(sweep_with(tmp_path, table)), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not out.exists()


def test_lm_eval_without_its_extra_is_refused_naming_the_extra(tmp_path):
    import subprocess

    path = sweep_with(tmp_path, 'lm_eval = ["hellaswag"]')
    hide = "import sys; sys.modules['lm_eval'] = None; "  # as if it were not installed
    r = subprocess.run(
        [sys.executable, "-c", hide + CLI, "sweep", str(path), "--out", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and "lm-evaluation-harness" in r.stderr and "lm-eval" in r.stderr
    assert not (tmp_path / "runs").exists()
