"""`cdlaw paraphrase --endpoint`: a real OpenAI-compatible server on loopback runs a tiny
model made here (tests/helpers/paraphrase_server.py). The endpoint job retries a busy server,
keeps several requests in flight, writes rows in document order, records its settings in
job.json, gives the local backend's text for greedy decoding, resumes a failed job to the
same rows, falls back to plain prompts when chat is refused, and refuses bad input with
exit 2 and nothing written."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from paraphrase_server import TinyServer, save_tiny_chat_model

from cdlaw.data.derived import paraphrase as job
from cdlaw.data.derived.endpoint import EndpointError
from cdlaw.data.files.corpus import SHUFFLE_TAG
from cdlaw.system.errors import BadInput

N_DOCS = 10


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "chat": save_tiny_chat_model(root / "chat"),
        "plain": save_tiny_chat_model(root / "plain", chat_template=False),
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    with open(path, "w") as f:
        for i in range(N_DOCS):
            row = {"id": f"doc{i}", "text": f"Document {i}: the river runs to the sea."}
            f.write(json.dumps(row) + "\n")
    return path


def rows(out):
    return [json.loads(line) for line in (out / job.ROWS_FILE).read_text().splitlines()]


def training_order(passes, seed=0):
    order = np.random.default_rng([seed, SHUFFLE_TAG]).permutation(N_DOCS).tolist()
    return [(f"doc{i}", k) for i in order for k in range(1, passes + 1)]


ENV = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


def cli(*args):
    argv = [sys.executable, "-m", "cdlaw", "paraphrase", *map(str, args)]
    return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=120)


def test_endpoint_job_retries_overlaps_and_matches_the_local_model(tmp_path, models, corpus):
    out = tmp_path / "endpoint"
    with TinyServer(models["chat"]) as server:
        server.fail_first = 1  # the first POST answers 503: the client waits and tries again
        p = cli(corpus, "--endpoint", server.url, "--model", "tiny", "--out", out,
                "--passes", 2, "--concurrency", 4, "--max-new-tokens", 6,
                "--temperature", 0, "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["done"] == result["total"] == 2 * N_DOCS
    assert result["written"] == 2 * N_DOCS and not result["warnings"]
    statuses = [status for _, _, status in server.posts]
    assert statuses[0] == 503 and set(statuses[1:]) == {200}
    assert server.most_in_flight >= 2, "requests should overlap"
    paraphrases = [b for path, b, s in server.posts if s == 200 and b["max_tokens"] == 6]
    assert len(paraphrases) == 2 * N_DOCS  # one per (document, pass): no piece was asked twice
    assert all(b["temperature"] == 0 and "seed" in b for b in paraphrases)
    assert len({b["seed"] for b in paraphrases}) == 2 * N_DOCS  # seeded per (document, pass)
    written = rows(out)
    # In the training order, whatever order the answers came back in.
    assert [(r["id"], r["pass"]) for r in written] == training_order(2)
    assert all(r["style"] == job.style_for(r["id"], r["pass"], job.STYLES) for r in written)
    recorded = json.loads((out / job.JOB_FILE).read_text())
    assert recorded["backend"] == "endpoint" and recorded["endpoint"] == server.url
    assert recorded["endpoint_api"] == "chat/completions" and recorded["model"] == "tiny"
    assert (recorded["passes"], recorded["max_new_tokens"], recorded["temperature"]) == (2, 6, 0)

    # The local backend, greedy and unbatched, writes the same text for the same prompts.
    local = tmp_path / "local"
    greedy = job.ParaphraseOptions(passes=2, batch_size=1, max_new_tokens=6, temperature=0)
    job.paraphrase_corpus(str(corpus), models["chat"], local, greedy)
    assert rows(local) == written
    recorded = json.loads((local / job.JOB_FILE).read_text())
    assert recorded["backend"] == "local" and recorded["endpoint"] is None
    assert (recorded["passes"], recorded["max_new_tokens"], recorded["temperature"]) == (2, 6, 0)
    with pytest.raises(BadInput, match="another temperature"):
        sampled = job.ParaphraseOptions(passes=2, max_new_tokens=6)
        job.paraphrase_corpus(str(corpus), models["chat"], local, sampled)


def test_the_endpoint_backend_runs_without_torch_or_transformers(tmp_path, models, corpus):
    """A base install plus `datasets` (the corpus reader): the endpoint job needs none of
    the train extra's model packages, each not installed as far as the CLI's process sees."""
    out = tmp_path / "out"
    with TinyServer(models["chat"]) as server:
        args = ["paraphrase", corpus, "--endpoint", server.url, "--model", "tiny", "--out", out,
                "--max-new-tokens", 4, "--json"]  # fmt: skip
        p = subprocess.run([sys.executable, "-c", NOT_INSTALLED, *map(str, args)], env=ENV,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["written"] == N_DOCS == len(rows(out))


# The CLI in a process where torch, transformers, tokenizers and safetensors are not
# installed: no finder finds them, so importing one raises and find_spec says None.
NOT_INSTALLED = """
import sys
from importlib.machinery import PathFinder

class WithoutModels(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers", "tokenizers", "safetensors"):
            return None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [WithoutModels if f is PathFinder else f for f in sys.meta_path]
from cdlaw.cli import main
sys.argv = ["cdlaw", *sys.argv[1:]]
main()
"""


def test_a_failed_job_resumes_to_the_rows_of_an_unbroken_one(tmp_path, models, corpus):
    """Sampled (temperature 0.7) but seeded: a job broken part-way and run again writes
    exactly the rows, in the same order, of a job that never broke."""
    with TinyServer(models["chat"]) as server:
        settings = job.ParaphraseOptions(
            endpoint=server.url, passes=1, max_new_tokens=5, concurrency=3
        )
        whole = job.paraphrase_corpus(str(corpus), "tiny", tmp_path / "whole", settings)
        reference = rows(tmp_path / "whole")
        assert whole["written"] == len(reference) == N_DOCS  # no empty answers to retry

        failing = reference[5]["id"]  # its every try answers 500 (Retry-After: 0)
        server.fail_texts = {f"Document {failing[3:]}:"}
        out = tmp_path / "broken"
        with pytest.raises(EndpointError, match=f"document '{failing}' pass 1"):
            job.paraphrase_corpus(str(corpus), "tiny", out, settings)
        assert rows(out) == reference[:5]  # the rows before the failed one, and no others
        tries = [b for _, b, s in server.posts if s == 500]
        assert len(tries) == 7  # the first try and six more

        server.fail_texts = set()
        server.posts.clear()
        again = job.paraphrase_corpus(str(corpus), "tiny", out, settings)
    assert again["written"] == N_DOCS - 5 and again["done"] == N_DOCS
    assert rows(out) == reference
    assert len(server.posts) == 1 + N_DOCS - 5  # the check at start, then only what was left


def test_a_model_without_a_chat_template_gets_plain_prompts_and_a_warning(tmp_path, models, corpus):
    local_warnings, endpoint_warnings = [], []
    local = tmp_path / "local"
    options = job.ParaphraseOptions(batch_size=1, max_new_tokens=4, temperature=0, limit=4)
    job.paraphrase_corpus(
        str(corpus), models["plain"], local, options, on_warning=local_warnings.append
    )
    assert len(local_warnings) == 1 and "has no chat template" in local_warnings[0]
    out = tmp_path / "endpoint"
    with TinyServer(models["plain"], chat=False) as server:
        served = job.ParaphraseOptions(
            endpoint=server.url, max_new_tokens=4, temperature=0, limit=4
        )
        result = job.paraphrase_corpus(
            str(corpus), "tiny", out, served, on_warning=endpoint_warnings.append
        )
    assert len(endpoint_warnings) == 1 and "refused a chat request" in endpoint_warnings[0]
    assert result["warnings"] == endpoint_warnings
    assert json.loads((out / job.JOB_FILE).read_text())["endpoint_api"] == "completions"
    prompts = [b["prompt"] for path, b, s in server.posts if path == "/v1/completions"]
    assert len(prompts) == 1 + 4 and prompts[1].endswith("\n\nRewritten text:\n")
    assert rows(out) == rows(local)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_endpoint_input_exits_2_with_one_sentence_and_writes_nothing(
    tmp_path, models, corpus, monkeypatch
):
    out = tmp_path / "out"
    nobody = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    p = cli(corpus, "--endpoint", nobody, "--model", "tiny", "--out", out)
    sentence = " ".join(p.stderr.split())  # rich wraps long lines on a narrow terminal
    assert p.returncode == 2 and not p.stdout, p.stderr
    assert sentence.startswith(f"error: --endpoint {nobody} did not list its models (no answer")
    assert sentence.count(". ") == 0, sentence  # one sentence

    def refused(message, **options):
        with pytest.raises(BadInput, match=message):
            model = options.pop("model", "tiny")
            job.paraphrase_corpus(str(corpus), model, out, job.ParaphraseOptions(**options))

    with TinyServer(models["chat"], api_key="sesame") as server:
        monkeypatch.setenv("CDLAW_TEST_KEY", "sesame")
        key = {"endpoint": server.url, "api_key_env": "CDLAW_TEST_KEY"}
        refused(r"--model 'huge' is not served by http://127.0.0.1:\d+/v1, which serves tiny$",
                model="huge", **key)  # fmt: skip
        refused("does --endpoint end in /v1", **{**key, "endpoint": server.url[:-3]})
        refused("names an unset environment variable", **{**key, "api_key_env": "CDLAW_NONE"})
        refused("--concurrency must be at least 1", concurrency=0, **key)
        monkeypatch.setenv("CDLAW_TEST_KEY", "wrong")
        refused(r"did not list its models \(HTTP 401: invalid api key\)", **key)
        assert not server.posts  # nothing was asked to generate
    assert not out.exists()
