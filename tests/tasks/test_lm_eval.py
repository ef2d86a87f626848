"""lm-evaluation-harness on a run's model/ folder ([eval] lm_eval, cdlaw.tasks.lm_eval): a
local YAML task over a local jsonl (nothing downloaded) scores each run of a tiny embedded
sweep into its result row; an unknown lm-eval task is refused before training. Skipped
without the lm-eval extra (`make setup EXTRAS=dev,lm-eval`)."""

import json
import math

import pandas as pd
import pytest

from cdlaw.config import EvalConfig
from cdlaw.system.errors import BadInput
from cdlaw.tasks.lm_eval import scores_of

YAML = """task: tiny_quiz
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{gold}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
"""


def test_lm_eval_results_become_task_columns():
    got = scores_of({"tiny": {"alias": "tiny", "acc,none": 0.5, "acc_stderr,none": "N/A",
                              "bits_per_byte,none": 1.25, "sample_len": 8}})  # fmt: skip
    assert got == {"task_tiny_acc": 0.5, "task_tiny_bpb": 1.25, "task_tiny_sample_len": 8.0}


@pytest.fixture
def include(tmp_path):
    pytest.importorskip("lm_eval", reason="the lm-eval extra is not installed")
    pytest.importorskip("accelerate", reason="lm-eval's hf model needs accelerate (lm-eval[hf])")
    data = tmp_path / "tiny_quiz.jsonl"
    data.write_text("".join(
        json.dumps({"context": f"Quiz: the color of item {i}? Answer:",
                    "choices": [" red", " blue", " green"], "gold": i % 3}) + "\n"
        for i in range(6)
    ))  # fmt: skip
    folder = tmp_path / "lm_tasks"
    folder.mkdir()
    (folder / "tiny_quiz.yaml").write_text(YAML.format(data=data))
    return folder


def test_an_unknown_lm_eval_task_is_refused(include):
    from cdlaw.tasks.lm_eval import check_lm_eval

    check_lm_eval(EvalConfig(lm_eval=("tiny_quiz",), lm_eval_include=str(include)))
    with pytest.raises(BadInput, match="'no_such_task', which is no lm-eval task"):
        check_lm_eval(EvalConfig(lm_eval=("no_such_task",), lm_eval_include=str(include)))


def test_a_sweep_scores_its_models_with_lm_eval(include, runs_root, write_sweep, one_thread):
    from cdlaw.sweep.options import SweepOptions
    from cdlaw.sweep.runner import run_sweep

    path = write_sweep(runs_root, "lmeval", sizes='"20K"')
    path.write_text(
        path.read_text() + f'\n[eval]\nlm_eval = ["tiny_quiz"]\nlm_eval_include = "{include}"\n'
    )
    run_sweep(path, runs_root, SweepOptions(exec_cfg=one_thread))
    summary = pd.read_parquet(runs_root / "lmeval" / "summary.parquet")
    for col in ("task_tiny_quiz_acc", "task_tiny_quiz_acc_norm"):
        values = summary[col].tolist()
        assert len(values) == 3 and all(0 <= v <= 1 and not math.isnan(v) for v in values)
