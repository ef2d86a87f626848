"""Preparing real corpora at scale: the same cache bytes as the list-based preparation
(recorded in prepare_reference.json), in one process, in workers and on Ray; resumed
block by block after a kill; one preparer at a time; and bad input as one sentence with
nothing half-written."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from prepare_corpora import digests, given_tokenizer, write_corpora

from cdlaw.config import DataConfig
from cdlaw.data.derived import joined
from cdlaw.data.embedded.corpus import EmbeddedJob, build_embedded_block
from cdlaw.data.files import block_tokens
from cdlaw.data.files.block_tokens import Workers
from cdlaw.data.tokens.prepare import prepare_corpus
from cdlaw.system.errors import BadInput

REFERENCE = json.loads((Path(__file__).parent / "prepare_reference.json").read_text())


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return folder, write_corpora(folder)


def prepare(data, cache, workers=1, **kw):
    passes = 2 if data.paraphrases else 0
    return prepare_corpus(
        data, cache, 1000, paraphrase_passes=passes, workers=Workers(workers, **kw)
    )


def same_as_reference(root: Path, name: str) -> None:
    have = digests(root)
    assert {f: have.get(f) for f in REFERENCE[name]} == REFERENCE[name], name


@pytest.mark.parametrize("workers", [1, 2])
def test_the_same_tokens_as_the_list_based_preparation(tmp_path, corpora, workers):
    folder, configs = corpora
    for name, data in configs.items():
        pc = prepare(data, tmp_path, workers)
        same_as_reference(pc.root, name)
        assert not (pc.root / ".prepare").exists()  # the document store is scratch
        if name == "big":
            big = pc.root
    same_as_reference(prepare(given_tokenizer(folder, big), tmp_path, workers).root, "big_given")
    emb = DataConfig(world={"n_entities": 300}, vocab_size=300, val_tokens=3000, corpus_seed=5)
    same_as_reference(prepare_corpus(emb, tmp_path, 20_000, paraphrase_passes=1).root, "embedded")


def test_a_killed_preparation_resumes_block_by_block(tmp_path, corpora, monkeypatch):
    data = corpora[1]["big_seed3"]
    real, made = block_tokens.tokenise_block, []

    def dies_after_one(job):
        if made:
            raise KeyboardInterrupt  # killed while tokenising the second block
        made.append(job.out)
        return real(job)

    monkeypatch.setattr(block_tokens, "tokenise_block", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        prepare(data, tmp_path)
    root = Path(made[0]).parent.parent
    assert not (root / "meta.json").exists() and (root / "train" / "b00000.npy").is_file()
    assert not list(root.rglob("*.tmp"))  # nothing half-written
    done = []
    monkeypatch.setattr(block_tokens, "tokenise_block", lambda job: done.append(job) or real(job))
    seen = []
    pc = prepare_corpus(
        data, tmp_path, 1000, workers=Workers(1, progress=lambda b, n: seen.append(b))
    )
    assert [Path(j.out).name for j in done] == ["b00001.npy", "b00002.npy"]  # the rest only
    meta = json.loads((pc.root / "meta.json").read_text())
    assert [b.cached for b in seen] == [True, False, False]
    assert sum(b.documents for b in seen) == meta["n_train_documents"]
    same_as_reference(pc.root, "big_seed3")


def test_paraphrase_passes_are_tokenised_by_the_workers_a_bucket_at_a_time(
    tmp_path, corpora, monkeypatch
):
    def not_here(job):
        raise AssertionError(f"pass blocks {job.first}-{job.last} tokenised in the parent")

    monkeypatch.setattr(joined, "MAX_BUCKETS", 2)  # 3 blocks: buckets [0, 1] and [2]
    monkeypatch.setattr(joined.PassesJob, "run", not_here)  # the workers import theirs
    seen = []
    pc = prepare(corpora[1]["big"], tmp_path, 2, progress=lambda b, n: seen.append((b, n)))
    same_as_reference(pc.root, "big")
    passes = [(b, n) for b, n in seen if b.derived == "paraphrase"]
    assert len(passes) == 2 and not any(b.cached for b, _ in passes)  # a job per bucket
    meta = json.loads((pc.root / "meta.json").read_text())
    para = next(pc.root.glob("para-*"))
    n_passes = json.loads((para / "done.json").read_text())["passes"]
    assert {n for _, n in passes} == {meta["n_train_documents"] * n_passes}
    assert sum(b.documents for b, _ in passes) == meta["n_train_documents"] * n_passes
    tokens = sum(int(np.load(e)[-1]) for e in para.glob("p*/*.ends.npy"))
    assert sum(b.tokens for b, _ in passes) == tokens


def test_embedded_blocks_are_built_by_the_workers_in_waves(tmp_path, monkeypatch):
    emb = DataConfig(world={"n_entities": 300}, vocab_size=300, val_tokens=3000, corpus_seed=5)
    real, here = EmbeddedJob.run, []

    def recorded(job):
        here.append((job.block, job.k))
        return real(job)

    monkeypatch.setattr(EmbeddedJob, "run", recorded)  # the workers import the real one
    seen = []
    progress = Workers(2, progress=lambda b, n: seen.append(b))
    pc = prepare_corpus(emb, tmp_path / "a", 700_000, paraphrase_passes=2, workers=progress)
    assert here == [(0, 0)]  # the first wave, one block, measures the tokens per block
    train = sorted(pc.root.glob("train/b*[0-9].npy"))
    assert len(train) >= 4 and sum(b.documents for b in seen if not b.derived) == len(train) * 2048
    assert sum(int(np.load(p.with_suffix(".ends.npy"))[-1]) for p in train[:-2]) < 700_000
    alone = prepare_corpus(emb, tmp_path / "b", 1, workers=Workers(1))  # block by block, here
    for path in pc.root.glob("*/**/b*[0-9].npy"):
        block, k = (
            int(path.stem[1:]),
            int(path.parent.name[1:]) if path.parent.name != "train" else 0,
        )
        build_embedded_block(alone, block, k)
    assert digests(alone.root) == digests(pc.root)
    assert sum(1 for b in seen if b.derived == "paraphrase") == 2 * len(
        list(pc.root.glob("para-*/p001/b*[0-9].npy"))
    )


def test_two_processes_preparing_one_corpus_tokenise_it_once(tmp_path, corpora):
    _folder, configs = corpora
    data = configs["big_seed3"]
    script = (
        "import sys\n"
        "from cdlaw.config import DataConfig\n"
        "from cdlaw.data.files.block_tokens import Workers\n"
        "from cdlaw.data.tokens.prepare import prepare_corpus\n"
        "made = []\n"
        f"data = DataConfig(corpus={data.corpus!r}, corpus_seed=3, vocab_size=300, val_tokens=2000)\n"
        "w = Workers(1, progress=lambda b, n: made.append(not b.cached))\n"
        "prepare_corpus(data, sys.argv[1], 1000, workers=w)\n"
        "print(sum(made))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    counts = sorted(int(p.communicate(timeout=300)[0]) for p in procs)
    assert counts == [0, 3]  # one tokenised the three blocks; the other waited and read them


@pytest.mark.slow
def test_ray_tasks_write_the_same_cache(tmp_path, corpora):
    ray = pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # its socket paths must be short
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    try:
        pc = prepare(corpora[1]["big"], tmp_path / "cache", 2, executor="ray")
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    same_as_reference(pc.root, "big")


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def nothing_written(cache: Path) -> bool:
    """No cache folder with a meta.json, and no scratch folder or temporary file left over."""
    left = [p for p in cache.rglob("*") if p.is_file() and p.name != ".lock"]
    return not left and not list(cache.rglob(".prepare"))


def one_sentence(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message.count(": ") <= 3, message
    return message


def test_undecodable_bytes_rows_without_text_and_a_tokenizer_without_eos(tmp_path):
    cache = tmp_path / "cache"
    cases = {
        "bad.jsonl": (
            b'{"text": "fine"}\n{"text": "bad \xff byte"}\n',
            "undecodable byte at offset 31",
        ),
        "bad.txt": (b"fine\n\nbad \xfe here\n", "undecodable byte at offset 10"),
        "rows.jsonl": (b'{"text": "a"}\n{"id": 2}\n', "line 2 has no 'text' text"),
        "empty.jsonl": (b"", "'text' text"),
        "blank.txt": (b"\n\n  \n", "is empty"),
        "number.jsonl": (
            b'{"text": "a"}\n\n{"text": 42}\n',
            "number.jsonl' line 3: column 'text' must hold text, found int 42",
        ),
        "numbers.jsonl": (
            b'{"text": 41}\n{"text": 42}\n',
            "numbers.jsonl' line 1: column 'text' must hold text, found int 41",
        ),
    }
    for name, (body, words) in cases.items():
        with pytest.raises(BadInput) as e:
            prepare(DataConfig(corpus=str(write(tmp_path / name, body)), vocab_size=300), cache)
        assert words in one_sentence(e) and nothing_written(cache), name
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(
        str(tmp_path / "t.json")
    )
    ok = write(tmp_path / "ok.jsonl", b'{"text": "a"}\n')
    with pytest.raises(BadInput) as e:
        prepare(DataConfig(corpus=str(ok), tokenizer=str(tmp_path / "t.json")), tmp_path / "c2")
    assert "has no end-of-text token" in one_sentence(e)
    assert not (tmp_path / "c2").exists()  # refused before any work


def test_paraphrase_ids_that_match_no_document(tmp_path, corpora):
    _folder, configs = corpora
    paras = tmp_path / "paras"
    paras.mkdir()
    (paras / "p.jsonl").write_text(
        json.dumps({"id": "d1", "pass": 1, "style": "faq", "text": "x"})
        + "\n"
        + json.dumps({"id": "nobody", "pass": 1, "style": "faq", "text": "y"})
        + "\n"
    )
    data = DataConfig(
        corpus=configs["big_seed3"].corpus,
        corpus_seed=3,
        vocab_size=300,
        val_tokens=2000,
        paraphrases=str(paras),
        paraphrase_styles=("faq",),
    )
    with pytest.raises(BadInput) as e:
        prepare(data, tmp_path / "cache")
    message = one_sentence(e)
    assert "p.jsonl:2 has id 'nobody', which is no document" in message
    assert not list((tmp_path / "cache").rglob("para-*/*"))  # no pass, no scratch rows
    same_as_reference(next((tmp_path / "cache" / "data").iterdir()), "big_seed3")  # corpus kept


def test_a_corpus_too_small_for_D_is_said_early_and_its_blocks_are_kept(tmp_path, corpora):
    data = corpora[1]["big_seed3"]
    seen = []
    with pytest.raises(BadInput) as e:
        prepare_corpus(
            data, tmp_path, 10**8, workers=Workers(1, progress=lambda b, n: seen.append(b))
        )
    message = one_sentence(e)
    assert "fresh_tokens=100000000" in message and "val_tokens=2000" in message
    assert len(seen) == 1  # said after the first block, not after all three
    holds = int(message.split("holds about ")[1].split(";")[0])
    assert 400_000 < holds < 900_000  # about the 618,870 tokens it has
    pc = prepare(data, tmp_path)  # a smaller D resumes from the block kept
    same_as_reference(pc.root, "big_seed3")


def test_a_second_preparer_says_it_waits(tmp_path, corpora, caplog):
    import threading

    from filelock import FileLock

    from cdlaw.data.tokens.prepare import corpus_key

    data = corpora[1]["big_seed3"]
    root = tmp_path / "data" / str(corpus_key(data))
    root.mkdir(parents=True)
    holder = FileLock(str(root / ".lock"))
    holder.acquire()
    caplog.set_level("INFO", logger="cdlaw")
    second = threading.Thread(target=prepare, args=(data, tmp_path))
    second.start()
    waits: list[str] = []
    deadline = time.monotonic() + 120  # a loaded machine may take a while to get there
    while not waits and second.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
        waits = [r.getMessage() for r in caplog.records if "waiting for another" in r.getMessage()]
    holder.release()
    second.join(120)
    assert len(waits) == 1 and str(root) in waits[0], caplog.text
    same_as_reference(root, "big_seed3")


def test_cdlaw_prepare_exits_2_with_one_sentence(tmp_path):
    bad = write(tmp_path / "bad.jsonl", b'{"text": "a"}\n{"body": "b"}\n')
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        '[grid]\nsize = ["20K"]\nfresh_tokens = [1000]\nstrategy = ["repetition"]\n'
        f'derived_ratio = [0]\n[data]\ncorpus = "{bad}"\nvocab_size = 300\n'
    )
    r = cdlaw_prepare(sweep, tmp_path / "runs")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "line 2 has no 'text' text" in r.stderr and nothing_written(tmp_path / "runs")


def test_cdlaw_prepare_shows_blocks_and_paraphrase_passes_and_resumes(tmp_path, corpora):
    data = corpora[1]["big"]
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        '[grid]\nsize = ["20K"]\nfresh_tokens = [1000]\nstrategy = ["paraphrase"]\n'
        f'derived_ratio = [0.2]\n[data]\ncorpus = "{data.corpus}"\nparaphrases = '
        f'"{data.paraphrases}"\nparaphrase_styles = ["faq", "tutorial", "table"]\n'
        "vocab_size = 300\nval_tokens = 2000\n"
    )
    first = cdlaw_prepare(sweep, tmp_path / "runs", "--workers", "2")
    assert first.returncode == 0, first.stderr
    root = Path(first.stdout.split("cache ")[1].split(" (")[0])
    same_as_reference(root, "big")
    n_train = json.loads((root / "meta.json").read_text())["n_train_documents"]
    passes = json.loads(next(root.glob("para-*/done.json")).read_text())["passes"]
    assert "(3 blocks tokenised, 0 already cached; paraphrase passes of " in first.stdout
    assert "tokenising" in first.stderr and f"{n_train:,}/{n_train:,} documents" in first.stderr
    done = n_train * passes
    assert "paraphrase passes" in first.stderr and f"{done:,}/{done:,} documents" in first.stderr
    again = cdlaw_prepare(sweep, tmp_path / "runs", "--workers", "2")
    assert again.returncode == 0 and str(root) in again.stdout  # ready: no bar, no work
    assert "tokenised" not in again.stdout and "documents" not in again.stderr


def test_cdlaw_prepare_tokenises_a_declared_strategys_passes_ahead(tmp_path, corpora):
    data = corpora[1]["big"]
    sweep = tmp_path / "s.toml"
    sweep.write_text(  # the paraphrase files again, under a name of the user's own
        '[grid]\nsize = ["20K"]\nfresh_tokens = [1000]\nstrategy = ["synth"]\n'
        f'derived_ratio = [0.2]\n[derived.synth]\nfiles = "{data.paraphrases}"\n'
        f'[data]\ncorpus = "{data.corpus}"\nvocab_size = 300\nval_tokens = 2000\n'
    )
    corpus_only = tmp_path / "c.toml"  # the corpus ready first: only the passes are left
    corpus_only.write_text(
        sweep.read_text().replace('"synth"', '"repetition"').split("[derived.synth]")[0]
        + f'[data]\ncorpus = "{data.corpus}"\nvocab_size = 300\nval_tokens = 2000\n'
    )
    assert cdlaw_prepare(corpus_only, tmp_path / "runs").returncode == 0
    first = cdlaw_prepare(sweep, tmp_path / "runs", "--workers", "2")
    assert first.returncode == 0, first.stderr
    assert "synth passes" in first.stderr and "paraphrase passes" not in first.stderr
    said = first.stdout.split("(")[-1]
    assert said.startswith("all 3 training blocks already cached; synth passes of "), said
    assert "documents tokenised)" in said and "0 blocks tokenised" not in first.stdout
    root = Path(first.stdout.split("cache ")[1].split(" (")[0])
    (derived,) = root.glob("derived-*")  # its own cache, apart from any paraphrase one
    passes = json.loads((derived / "done.json").read_text())["passes"]
    blocks = json.loads((root / "meta.json").read_text())["n_blocks"]
    assert passes >= 1 and len(list(derived.glob("p*/b*.ends.npy"))) == passes * blocks
    again = cdlaw_prepare(sweep, tmp_path / "runs", "--workers", "2")
    assert again.returncode == 0 and "passes" not in again.stderr  # ready: nothing to do
    too_many = sweep.read_text().replace("derived_ratio = [0.2]", "derived_ratio = [500]")
    sweep.write_text(too_many)  # more D′ than the files hold: said before any training
    r = cdlaw_prepare(sweep, tmp_path / "runs", "--workers", "2")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "synth" in r.stderr, r.stderr


def cdlaw_prepare(sweep: Path, runs: Path, *options: str) -> subprocess.CompletedProcess:
    """`cdlaw prepare SWEEP --out RUNS OPTIONS…` in a fresh process, its bars 250 wide."""
    cli = "import sys; from cdlaw.cli import main; sys.argv = ['cdlaw', *sys.argv[1:]]; main()"
    args = [sys.executable, "-c", cli, "prepare", str(sweep), "--out", str(runs), *options]
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
