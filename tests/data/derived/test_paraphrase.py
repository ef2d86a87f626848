"""`cdlaw paraphrase` with a tiny random chat model made here: aligned rows, resumes after
kill -9, refuses bad input with exit 2 (nothing downloaded)."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace

import pytest

from cdlaw.data.derived import paraphrase as job
from cdlaw.system.errors import BadInput

N_DOCS = 30


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A 2-layer Llama with a 300-token BPE and a minimal chat template, saved locally."""
    from paraphrase_server import save_tiny_chat_model

    return save_tiny_chat_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    with open(path, "w") as f:
        for i in range(N_DOCS):
            f.write(
                json.dumps({"id": f"doc{i}", "text": f"Document {i}: the river runs to the sea."})
                + "\n"
            )
    return path


def rows(out):
    return [json.loads(line) for line in (out / job.ROWS_FILE).read_text().splitlines()]


def cli(*args):
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return [sys.executable, "-m", "cdlaw", "paraphrase", *map(str, args)], env


@pytest.mark.slow
def test_a_killed_job_resumes_and_writes_aligned_rows(tmp_path, model, corpus):
    out = tmp_path / "out"
    args, env = cli(corpus, "--model", model, "--out", out, "--passes", 2, "--batch-size", 1,
                    "--max-new-tokens", 24)  # fmt: skip
    proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        path = out / job.ROWS_FILE
        if path.is_file() and path.read_text().count("\n") >= 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = len(rows(out))
    assert 3 <= written < 2 * N_DOCS, "the job should have been killed part-way"
    with open(out / job.ROWS_FILE, "a") as f:
        f.write('{"id": "doc0", "pass": 2, "st')  # as if killed in the middle of a write

    seen = []
    result = job.paraphrase_corpus(
        str(corpus), model, out, job.ParaphraseOptions(passes=2, batch_size=4, max_new_tokens=24),
        on_progress=lambda done, total: seen.append((done, total)),
    )  # fmt: skip
    assert result["written"] + result["empty"] == 2 * N_DOCS - written
    assert seen[0] == (written, 2 * N_DOCS) and seen[-1] == (2 * N_DOCS, 2 * N_DOCS)
    final = rows(out)  # every line parses: the torn one was cut off
    keys = Counter((r["id"], r["pass"]) for r in final)
    assert max(keys.values()) == 1  # nothing written twice
    assert set(keys) == {(f"doc{i}", k) for i in range(N_DOCS) for k in (1, 2)} or result["empty"]
    for r in final:
        assert r["style"] == job.style_for(r["id"], r["pass"], job.STYLES) and r["text"]
    assert {r["style"] for r in final} == set(job.STYLES)  # passes walk through the styles
    # The folder is what a sweep's data.paraphrases points to.
    from cdlaw.config import DataConfig
    from cdlaw.data.tokens.prepare import prepare_corpus

    data = DataConfig(corpus=str(corpus), paraphrases=str(out), vocab_size=280, val_tokens=100)
    pc = prepare_corpus(data, tmp_path / "cache", 200)
    assert pc.paraphrase_passes_available == (0 if result["empty"] else 2)


def test_limit_then_resume_and_refuse_another_job(tmp_path, model, corpus):
    out = tmp_path / "out"
    options = job.ParaphraseOptions(passes=1, batch_size=8, max_new_tokens=4, temperature=0)
    first = job.paraphrase_corpus(str(corpus), model, out, replace(options, limit=5))
    assert first["written"] + first["empty"] == 5 and first["total"] == N_DOCS
    again = job.paraphrase_corpus(str(corpus), model, out, options)
    assert again["done"] + again["empty"] == N_DOCS
    assert sorted(r["id"] for r in rows(out)) == sorted({r["id"] for r in rows(out)})
    # The documents come in the training order (shuffled by the seed), not file order.
    assert [r["id"] for r in rows(out)][:5] != [f"doc{i}" for i in range(5)]
    with pytest.raises(BadInput, match="another styles"):
        job.paraphrase_corpus(
            str(corpus), model, out, job.ParaphraseOptions(styles=("faq",), max_new_tokens=4)
        )


def test_prompts_styles_and_long_documents(model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    prompt = job.build_prompt(tok, job.PROMPTS["faq"], "The river runs.")
    assert prompt.startswith("<user>Rewrite the text below as questions and answers")
    assert prompt.endswith("The river runs.\n<assistant>")
    tok.chat_template = None
    assert job.build_prompt(tok, job.PROMPTS["math"], "x").endswith("Text:\nx\n\nRewritten text:\n")
    text = " ".join(f"Sentence number {i} is about the river." for i in range(40))
    pieces = job.split_text(tok, text, 60)
    assert len(pieces) > 1 and " ".join(pieces) == text
    assert all(len(tok(p).input_ids) <= 60 for p in pieces)
    styles = [job.style_for("doc7", k, job.STYLES) for k in (1, 2, 3, 4)]
    assert sorted(styles) == sorted(job.STYLES)  # four passes: each style once


def test_bad_input_exits_2_with_one_sentence_and_writes_nothing(tmp_path, model, corpus):
    out = tmp_path / "out"
    cases = [
        ((tmp_path / "missing.jsonl", "--model", model), "does not exist"),
        ((corpus, "--model", tmp_path), "not a local Hugging Face model folder"),
        ((corpus, "--model", model, "--styles", "faq,poem"), "must name some of"),
        ((corpus, "--model", model, "--passes", 0), "--passes must be at least 1"),
    ]
    for args, message in cases:
        argv, env = cli(*args, "--out", out)
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        sentence = " ".join(p.stderr.split())  # rich wraps long lines on a narrow terminal
        assert sentence.startswith("error: ") and message in sentence and not p.stdout
        assert sentence.count(". ") == 0, sentence  # one sentence
        assert not out.exists()
