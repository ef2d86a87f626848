"""`cdlaw distill`: a cdlaw run's own model continues every document inside D of a sweep's
corpus — rows aligned by the documents' ids, resumable, the same greedy text resumed or
not, through a local folder or an endpoint; a teacher that cannot be loaded and other bad
input exit 2 with one sentence and write nothing. Then a sweep trains on the rows."""

import json
from collections import Counter
from dataclasses import replace

import pytest
from paraphrase_server import TinyServer
from runhelpers import cdlaw, cdlaw_here

from cdlaw.data.derived.distill import (
    ROWS_FILE,
    DistillOptions,
    corpus_documents,
    distill_documents,
)
from cdlaw.data.tokens.prepare import prepare_corpus
from cdlaw.sweep.spec import load_sweep
from cdlaw.system.errors import BadInput

pytestmark = pytest.mark.slow  # trains a teacher, then a sweep on its rows
D = 2048
SWEEP = """
name = "{name}"
[grid]
size = ["20K"]
fresh_tokens = [{d}]
strategy = ["{strategy}"]
derived_ratio = [0, {ratio}]
{derived}
[data]
vocab_size = 512
val_tokens = 2048
[model]
seq_len = 64
[train]
batch_size = 8
eval_every = 8
log_every = 2
checkpoint_every = 8
"""


def write(root, name, strategy, ratio, derived=""):
    path = root / f"{name}.toml"
    path.write_text(SWEEP.format(name=name, d=D, strategy=strategy, ratio=ratio, derived=derived))
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A teacher trained on the first D fresh tokens (two passes), and a sweep declaring a
    distill strategy whose files it writes."""
    root = tmp_path_factory.mktemp("distill")
    result = cdlaw("sweep", write(root, "teach", "repetition", 1), "--out", root / "runs", cwd=root)
    assert result.returncode == 0, result.stderr
    derived = '[derived.distill]\nfiles = "derived"'
    write(root, "strat", "distill", 0.5, derived)
    return root


def teacher(root):
    """The teacher: the run with two passes over D (the sweep's other run has one)."""
    (run,) = [
        p.parent
        for p in (root / "runs" / "teach").glob("*/result.json")
        if json.loads(p.read_text())["strategy"] == "repetition"
    ]
    return run / "model"


def rows(folder):
    return [json.loads(line) for line in (folder / ROWS_FILE).read_text().splitlines()]


GREEDY = DistillOptions(passes=2, batch_size=8, temperature=0.0, max_new_tokens=12)


def test_the_teacher_continues_every_document_inside_d_and_resumes(root):
    data = load_sweep(root / "strat.toml").data
    cache = root / "runs" / ".cache"
    docs = corpus_documents(prepare_corpus(data, cache, D), D)
    first = distill_documents(
        data, D, teacher(root), root / "part", cache, replace(GREEDY, limit=5)
    )
    assert first["written"] + first["empty"] == 5 and first["total"] == 2 * docs.count
    seen = []
    again = distill_documents(data, D, teacher(root), root / "part", cache, GREEDY,
                              on_progress=lambda done, total: seen.append((done, total)))  # fmt: skip
    assert seen[0] == (5, 2 * docs.count) and seen[-1] == (2 * docs.count, 2 * docs.count)
    assert again["done"] == 2 * docs.count
    distill_documents(data, D, teacher(root), root / "whole", cache, GREEDY)
    assert rows(root / "part") == rows(root / "whole")  # greedy: resumed or not, one text
    written = rows(root / "whole")
    assert Counter((r["id"], r["pass"]) for r in written) == {
        (str(i), k): 1 for i in range(docs.count) for k in (1, 2)
    }  # every document inside D (its place is its id), each pass once
    texts = dict(docs.pairs())
    for r in written:
        assert r["style"] == "continuation" and texts[r["id"]].startswith(r["text"][:12])
    job = json.loads((root / "whole" / "job.json").read_text())
    assert job["fresh_tokens"] == D and job["documents"] == docs.count and job["mode"] == "continue"
    with pytest.raises(BadInput, match="holds rows written with another prefix_tokens"):
        distill_documents(
            data, D, teacher(root), root / "whole", cache, replace(GREEDY, prefix_tokens=8)
        )


def test_an_endpoint_teacher_gets_plain_completions_of_each_opening(root):
    data = load_sweep(root / "strat.toml").data
    cache = root / "runs" / ".cache"
    with TinyServer(teacher(root), "teacher", chat=False) as server:
        options = replace(GREEDY, endpoint=server.url, concurrency=4, limit=6)
        result = distill_documents(data, D, "teacher", root / "served", cache, options)
    assert result["written"] + result["empty"] == 6
    assert {path for path, _, _ in server.posts} == {"/v1/completions"}
    job = json.loads((root / "served" / "job.json").read_text())
    assert job["backend"] == "endpoint" and job["endpoint_api"] == "completions"


def test_a_sweep_trains_on_the_rows_with_exact_counts(root, monkeypatch, capsys):
    out = root / "runs"
    args = ("--teacher", teacher(root), "--out", out, "--passes", 2, "--max-new-tokens", 12)
    code, stdout, err = cdlaw_here(
        monkeypatch, capsys, root, "distill", root / "strat.toml", *args, "--json"
    )
    assert code == 0, err
    assert json.loads(stdout)["done"] > 0
    result = cdlaw("sweep", root / "strat.toml", "--out", out, cwd=root)
    assert result.returncode == 0, result.stderr
    (row,) = [
        json.loads(p.read_text())
        for p in (out / "strat").glob("*/result.json")
        if json.loads(p.read_text())["strategy"] == "distill"
    ]
    assert row["status"] == "done" and row["derived_tokens"] == D // 2
    assert row["tokens_trained"] == D + D // 2 and row["epochs"] == 1.0


@pytest.mark.parametrize(
    "args, message",
    [
        (("--teacher", "{root}/nowhere"), "is not a local Hugging Face model folder"),
        (("--teacher", "{root}/broken"), "cannot be loaded"),
        (("--teacher", "{model}", "--strategy", "qa"), "'qa' is no [derived.<name>] strategy"),
        (("--teacher", "{model}", "--mode", "rewrite"), "--mode rewrite needs --prompt"),
        (("--teacher", "{model}", "--fresh-tokens", "3K"), "--fresh-tokens 3,000 is no D"),
        (("--teacher", "{model}", "--prefix-tokens", "64"), "no room after a 64-token opening"),
    ],
)
def test_bad_input_exits_2_with_one_sentence_and_writes_nothing(
    root, monkeypatch, capsys, args, message
):
    broken = root / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text('{"model_type": "no-such-model"}')
    args = [a.format(root=root, model=teacher(root)) for a in args]
    sweep = write(root, "bad", "distill", 0.5, '[derived.distill]\nfiles = "bad-derived"')
    out = root / "bad-runs"  # not even the corpus cache is written
    code, stdout, err = cdlaw_here(monkeypatch, capsys, root, "distill", sweep, *args, "--out", out)
    sentence = " ".join(err.split())
    assert code == 2 and message in sentence and not stdout, sentence
    assert sentence.startswith("error: ") and sentence.count(". ") == 0
    assert not (root / "bad-derived").exists() and not out.exists()
