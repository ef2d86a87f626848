"""Downstream tasks (cdlaw.tasks.files): the built-in world tasks, task files and every way a
task file can be wrong, tokenisation, and the column names (cdlaw.tasks.columns)."""

import json
from pathlib import Path

import pytest
from minitasks import mini_bpe

from cdlaw.config import DataConfig, EvalConfig
from cdlaw.data.embedded import render, world
from cdlaw.data.embedded.corpus import cached_world
from cdlaw.system.errors import BadInput
from cdlaw.tasks.columns import column, columns_text, parse_column, task_columns
from cdlaw.tasks.files import (
    BUILTIN_ITEMS,
    CLOZE_TEMPLATE,
    Task,
    TaskItem,
    read_task_file,
    resolve_tasks,
    tokenise_tasks,
)

BUILTIN = EvalConfig(tasks=("world_cloze", "world_mc"))


@pytest.fixture(scope="module")
def builtin():
    return {t.name: t for t in resolve_tasks(BUILTIN, DataConfig())}


def test_builtin_tasks_are_a_pure_function_of_the_world(builtin):
    again = {t.name: t for t in resolve_tasks(BUILTIN, DataConfig())}
    assert again == builtin
    small = {"n_entities": 500}
    one = resolve_tasks(BUILTIN, DataConfig(corpus_seed=1, world=small))
    zero = resolve_tasks(BUILTIN, DataConfig(corpus_seed=0, world=small))
    assert one[1].items != zero[1].items and one[0].items != zero[0].items
    assert [len(t.items) for t in builtin.values()] == [BUILTIN_ITEMS, BUILTIN_ITEMS]


def test_the_cloze_asks_for_the_last_word_the_document_stated(builtin):
    for item in builtin["world_cloze"].items:
        (gold,) = item.choices
        word = gold.strip()
        assert gold == " " + word and " " not in word and item.gold == 0
        document, _, fact = item.context.rpartition(" In short, ")
        assert f" {word}" in " " + document  # the context holds the answer
        assert f"{fact} {word}" not in document  # restated in another wording


def test_the_quiz_comes_in_groups_of_four_that_share_their_choices(builtin):
    items = builtin["world_mc"].items
    for i in range(0, len(items), 4):
        group = items[i : i + 4]
        choices = set(group[0].choices)
        assert len(choices) == 4 and all(set(it.choices) == choices for it in group)
        # each of the four values is the answer once: a guess blind to the entity gets 1/4
        assert {it.choices[it.gold] for it in group} == choices
        assert len({it.context for it in group}) == 4
        assert all(it.context.startswith("In short, ") for it in group)


def test_task_documents_are_held_out_and_no_document_uses_a_task_template():
    w = cached_world(0, world.WorldOptions())
    docs = world.documents(w, 0, world.TASK_STREAM)[:200]
    assert all(world.is_validation_pair(0, d.subject, d.attrs) for d in docs)
    train = world.documents(w, 0, world.TRAIN_STREAM)[:300]
    styles = render.parse_styles(render.PARAPHRASE_STYLES)
    texts = [render.render(w, d) for d in train]
    texts += [render.render_paraphrase(w, d, k, styles)[1] for d in train for k in (1, 2, 3)]
    frame = CLOZE_TEMPLATE.split("{name}")[0].replace("{document} ", "")
    assert frame == "In short, " and not any(frame in t for t in texts)


def test_max_items_takes_the_first_items(builtin):
    (few,) = resolve_tasks(EvalConfig(tasks=("world_mc",), max_items=7), DataConfig())
    assert few.items == builtin["world_mc"].items[:7]


def write(path: Path, *lines) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_task_files_are_read_by_kind(tmp_path):
    cloze = read_task_file(write(tmp_path / "caps.jsonl", {"context": "A", "continuation": " b"}))
    assert (cloze.name, cloze.kind, cloze.items) == ("caps", "cloze", (TaskItem("A", (" b",)),))
    mc = write(
        tmp_path / "quiz.jsonl", {"context": "", "choices": [" x", " y"], "gold": 1, "id": 3}, ""
    )
    assert read_task_file(mc).items == (TaskItem("", (" x", " y"), 1),)
    assert read_task_file(mc).kind == "mc"


@pytest.mark.parametrize(
    "lines, says",
    [
        ([{"continuation": " b"}], 'lacks a "context"'),
        ([{"context": "a"}], 'neither "continuation"'),
        ([{"context": "a", "continuation": ""}], 'neither "continuation"'),
        ([{"context": "a", "choices": [" x", " y"]}], 'lacks "gold"'),
        ([{"context": "a", "choices": [" x", " y"], "gold": 2}], "out of range for 2 choices"),
        ([{"context": "a", "choices": [" x", " y"], "gold": -1}], "out of range"),
        ([{"context": "a", "choices": [" x"], "gold": 0}], "at least 2 strings"),
        ([{"context": "a", "choices": [" x", 3], "gold": 0}], "non-empty string"),
        (
            [{"context": "a", "choices": [" x", " y", " x"], "gold": 0}],
            "line 1: choices 0 and 2 are the same text ' x'",
        ),
        (["{not json"], "is not JSON"),
        (["[1, 2]"], "not a JSON object"),
        ([], "holds no items"),
        (["", "  "], "holds no items"),
        (
            [
                {"context": "a", "continuation": " b"},
                {"context": "a", "choices": [" x", " y"], "gold": 0},
            ],
            "line 2 is a multiple-choice item in a file of cloze",
        ),
    ],
)
def test_a_bad_task_file_is_one_sentence_naming_the_file_and_line(tmp_path, lines, says):
    path = write(tmp_path / "bad.jsonl", *lines)
    with pytest.raises(BadInput, match=says) as e:
        resolve_tasks(EvalConfig(tasks=(str(path),)), DataConfig())
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_task_file_that_is_not_utf8_is_named_with_its_line(tmp_path):
    path = write(tmp_path / "latin.jsonl", {"context": "a", "continuation": " b"})
    path.write_bytes(
        path.read_bytes() + '{"context": "caf\xe9", "continuation": " b"}\n'.encode("latin-1")
    )
    with pytest.raises(BadInput, match="line 2 is not UTF-8 text") as e:
        resolve_tasks(EvalConfig(tasks=(str(path),)), DataConfig())
    assert str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "tasks, data, says",
    [
        (("squad",), DataConfig(), "neither a built-in task"),
        (("nowhere/x.jsonl",), DataConfig(), "does not exist"),
        (("world_mc",), DataConfig(corpus="c.jsonl"), "built from the embedded corpus"),
        (("a-b.jsonl",), DataConfig(), "letters, digits and '_'"),
        (("t/world_mc.jsonl",), DataConfig(), "named like the built-in task"),
    ],
)
def test_a_task_that_cannot_be_had_is_refused(tasks, data, says):
    with pytest.raises(BadInput, match=says):
        resolve_tasks(EvalConfig(tasks=tasks), data)


def test_two_tasks_of_one_name_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    one = write(tmp_path / "a" / "t.jsonl", {"context": "", "continuation": " b"})
    two = write(tmp_path / "t.jsonl", {"context": "", "continuation": " b"})
    with pytest.raises(BadInput, match="names task 't' twice"):
        resolve_tasks(EvalConfig(tasks=(str(one), str(two))), DataConfig())
    with pytest.raises(BadInput, match="twice"):
        EvalConfig(tasks=("world_mc", "world_mc"))


@pytest.fixture(scope="module")
def bpe():
    return mini_bpe()


def test_rows_are_eos_context_continuation_with_the_continuation_its_own_tokens(bpe):
    task = Task("t", "mc", (TaskItem("The sky is ", (" blue", "green"), 0),), "x")
    (t,) = tokenise_tasks([task], bpe, eos_id=0, seq_len=64)
    context = bpe.encode("The sky is", add_special_tokens=False).ids
    for r, text in enumerate(("  blue", " green")):  # the context's space moved over
        own = bpe.encode(text, add_special_tokens=False).ids
        assert t.rows[r].tolist() == [0, *context, *own] and t.starts[r] == 1 + len(context)
        assert t.n_bytes[r] == len(text.encode()) and t.n_chars[r] == len(text)
    assert t.item.tolist() == [0, 0] and t.choice.tolist() == [0, 1] and t.gold.tolist() == [0]


def test_a_long_context_loses_its_start_and_a_long_continuation_is_refused(bpe):
    long = Task("t", "cloze", (TaskItem("Roses are red. " * 20, (" blue",)),), "x")
    (t,) = tokenise_tasks([long], bpe, eos_id=0, seq_len=16)
    cont = bpe.encode(" blue", add_special_tokens=False).ids
    assert len(t.rows[0]) == 16 and t.rows[0][-len(cont) :].tolist() == cont
    too_long = Task("t", "cloze", (TaskItem("", (" blue" * 20,)),), "x")
    with pytest.raises(BadInput, match="more than a model of seq_len 16"):
        tokenise_tasks([too_long], bpe, eos_id=0, seq_len=16)


@pytest.mark.parametrize(
    "task, metric",
    [("world_mc", "acc"), ("x_acc", "acc_norm"), ("q_acc_norm", "bpb"), ("a", "acc")],
)
def test_task_column_names_read_back(task, metric):
    assert parse_column(column(task, metric)) == (task, metric)


def test_only_task_columns_are_read_as_tasks():
    assert parse_column("loss") is None and parse_column("task_acc") is None
    assert parse_column("task_x_perplexity") is None
    cols = ["loss", "task_a_bpb", "task_a_acc", "task_b_acc_norm"]
    assert task_columns(cols) == {"a": ["bpb", "acc"], "b": ["acc_norm"]}


def test_a_warning_names_few_columns_and_counts_many():
    cols = [f"task_t{i}_acc" for i in range(47)]
    assert columns_text(cols, 47) == "every metric (47)"
    assert columns_text(cols[:40], 47) == (
        "task_t0_acc, task_t1_acc, task_t2_acc, task_t3_acc, task_t4_acc, task_t5_acc and 34 more"
    )
    assert columns_text(cols[:2], 2) == "task_t0_acc, task_t1_acc"  # few: each named
    assert columns_text(cols[:3], 47) == "task_t0_acc, task_t1_acc, task_t2_acc"
