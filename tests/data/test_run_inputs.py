"""What a run reads, by content (cdlaw.data.inputs): each input of a real corpus — the
corpus, a tokenizer file, paraphrase files, a declared strategy's files, task files — is
one rule: an edit is named by its setting and file, the same bytes anywhere are the same
input, and a run with a checkpoint is never resumed onto other inputs. Nothing here
prepares a corpus; one tiny run trains."""

import dataclasses
import json
import shutil

import pytest
from tinyrun import TRAIN_TOKENS, VAL_TOKENS, make_cfg

from cdlaw.config import DataConfig, EvalConfig, RunConfig
from cdlaw.data.inputs import OTHER_TOKENS, RunInputsMaker, changed_tasks, training_changes
from cdlaw.data.tokens.streams import array_stream
from cdlaw.system.errors import BadInput


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A real corpus's inputs, relative to the folder cdlaw runs in."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    for i in range(2):
        rows = [{"id": f"d{i}-{j}", "text": f"Document {j} of part {i}."} for j in range(5)]
        (tmp_path / "corpus" / f"part{i}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    (tmp_path / "tok.json").write_text('{"model": "stand-in"}')
    for folder in ("paras", "der"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "rows.jsonl").write_text('{"id": "d0-0", "pass": 1, "text": "x"}\n')
    (tmp_path / "quiz.jsonl").write_text('{"context": "a", "continuation": " b"}\n')
    return tmp_path


DATA = DataConfig(corpus="corpus", tokenizer="tok.json", paraphrases="paras", val_tokens=64)
EVAL = EvalConfig(tasks=("quiz.jsonl",))


def inputs_of(cache, strategy="distill"):
    run = RunConfig(
        "s", strategy, 100, 100, data=DATA, eval=EVAL,
        derived_files="der" if strategy == "distill" else "",
    )  # fmt: skip
    return RunInputsMaker(DATA, EVAL, cache).of(run).inputs


@pytest.mark.parametrize(
    "path, says",
    [
        ("corpus/part1.jsonl", "data.corpus 'corpus' (part1.jsonl changed)"),
        ("tok.json", "data.tokenizer 'tok.json' (its content changed)"),
        ("der/rows.jsonl", "[derived.distill] files 'der' (rows.jsonl changed)"),
        ("paras/rows.jsonl", "data.paraphrases 'paras' (rows.jsonl changed)"),
    ],
)
def test_each_input_edited_is_named_by_its_setting_and_file(files, path, says):
    strategy = "paraphrase" if path.startswith("paras") else "distill"
    before = inputs_of(files / "cache", strategy)
    with open(files / path, "a") as f:
        f.write(" ")
    after = inputs_of(files / "cache", strategy)
    said = training_changes(before, after)
    assert said == [says]  # the file, not the corpus_key it also changes
    assert (before.corpus_key != after.corpus_key) == (not path.startswith(("der", "paras")))
    assert changed_tasks(before, after, {"max_items": 0}, EVAL) == set()


def test_files_added_or_removed_are_named_and_the_same_bytes_elsewhere_are_the_same(files):
    before = inputs_of(files / "cache")
    (files / "der" / "more.jsonl").write_text('{"id": "d0-1", "pass": 1, "text": "y"}\n')
    assert training_changes(before, inputs_of(files / "cache")) == [
        "[derived.distill] files 'der' (more.jsonl added)"
    ]
    (files / "der" / "more.jsonl").unlink()
    shutil.copytree(files / "der", files / "der2")  # copied: new inodes and times
    shutil.rmtree(files / "der")
    (files / "der2").rename(files / "der")
    assert training_changes(before, inputs_of(files / "cache")) == []


def test_a_task_file_or_max_items_changed_is_a_task_change_not_a_training_one(files):
    before = inputs_of(files / "cache")
    (files / "quiz.jsonl").write_text('{"context": "a", "continuation": " c"}\n')
    after = inputs_of(files / "cache")
    assert training_changes(before, after) == []
    assert changed_tasks(before, after, {"max_items": 0}, EVAL) == {"quiz.jsonl"}
    assert changed_tasks(after, after, {"max_items": 5}, EVAL) == {"quiz.jsonl"}
    assert changed_tasks(None, after, {}, EVAL) == set()  # not recorded: taken as it is


def test_a_run_is_never_resumed_onto_other_inputs(files, tmp_path):
    """train_run itself refuses, before touching its checkpoint, whoever calls it."""
    from cdlaw.train.loop import RunInterrupted, train_run

    cfg = make_cfg(n_tokens=4_000)
    recorded = dataclasses.replace(cfg, inputs=inputs_of(files / "cache"))
    run_dir = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        train_run(
            recorded, run_dir, array_stream(TRAIN_TOKENS[:4_000]), VAL_TOKENS, stop_after_steps=3
        )
    assert json.loads((run_dir / "config.json").read_text())["inputs"]["files"]
    (files / "der" / "rows.jsonl").write_text('{"id": "d0-0", "pass": 1, "text": "z"}\n')
    now = dataclasses.replace(cfg, inputs=inputs_of(files / "cache"))
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    with pytest.raises(
        BadInput, match=r"trained in part on other inputs .* \(rows\.jsonl changed\)"
    ):
        train_run(now, run_dir, array_stream(TRAIN_TOKENS[:4_000]), VAL_TOKENS)
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == stamps
    result = train_run(recorded, run_dir, array_stream(TRAIN_TOKENS[:4_000]), VAL_TOKENS)
    assert result["status"] == "done"  # the inputs it started with: resumed


def test_a_corpus_key_not_known_now_is_no_change(files):
    """A local hf: folder not found from the folder a reader runs in gives no corpus_key
    (""): that is not evidence of other tokens (cdlaw status from elsewhere said so)."""
    import dataclasses

    before = inputs_of(files / "cache")
    assert before.corpus_key
    unknown = dataclasses.replace(before, corpus_key="")
    assert training_changes(before, unknown) == []
    other = dataclasses.replace(before, corpus_key="another")
    assert training_changes(before, other) == [OTHER_TOKENS]
