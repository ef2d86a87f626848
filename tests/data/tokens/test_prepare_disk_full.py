"""A full disk while preparing a corpus (docs/files.md, "A full disk"): one sentence naming
the folder and what was being written, DiskFull (exit 1, not bad input), nothing
half-written, and the same preparation resumes to the same cache once there is space.

ENOSPC is injected at each kind of write (always run); a real 2 MB tmpfs is mounted
when the test may mount one (root), else that test is skipped."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prepare_corpora import digests, write_corpora

import cdlaw.data.tokens.cache
from cdlaw.data.files import doc_store
from cdlaw.data.files.block_tokens import Workers
from cdlaw.data.tokens.prepare import prepare_corpus
from cdlaw.system.disk_full import DiskFull

REFERENCE = json.loads((Path(__file__).parent / "prepare_reference.json").read_text())


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return folder, write_corpora(folder)


def enospc(path="") -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path) if path else None)


def arrow_full(monkeypatch):
    """datasets' own writer, converting the corpus to Arrow, finds the disk full."""
    from datasets import arrow_writer

    def write_table(self, *a, **k):
        raise enospc()

    monkeypatch.setattr(arrow_writer.ArrowWriter, "write_table", write_table)


def store_full(monkeypatch):
    """The document store's columns find the disk full."""
    real = doc_store._Column.append

    def append(self, values):
        real(self, values)
        raise enospc(self.raw)

    monkeypatch.setattr(doc_store._Column, "append", append)


def block_full(monkeypatch):
    """The second block's tokens are half-written when the disk fills."""
    real, seen = cdlaw.data.tokens.cache.write_atomic, []

    def write_atomic(path, write):
        if Path(path).parent.name != "train" or len(seen) < 2:  # a block's ends and tokens
            seen.extend([path] if Path(path).parent.name == "train" else [])
            return real(path, write)

        def half(tmp):
            Path(tmp).write_bytes(b"\x93NUMPY half")
            raise enospc(tmp)

        return real(path, half)

    monkeypatch.setattr(cdlaw.data.tokens.cache, "write_atomic", write_atomic)


@pytest.mark.parametrize("fill", [arrow_full, store_full, block_full])
def test_a_full_disk_is_one_sentence_and_the_preparation_resumes(
    tmp_path, corpora, monkeypatch, fill
):
    data = corpora[1]["big_seed3"]
    cache = tmp_path / "cache"
    fill(monkeypatch)
    with pytest.raises(DiskFull) as e:
        prepare_corpus(data, cache, 1000, workers=Workers(1))
    message = str(e.value)
    assert "\n" not in message and message.startswith("No space left on device in ")
    folder = message.removeprefix("No space left on device in ").split(" while ")[0]
    assert Path(folder).is_relative_to(cache), message  # the folder it could not write
    assert "could not be read" not in message and "run the same command again" in message
    assert not [p for p in cache.rglob("*") if p.name.endswith(".tmp") or ".arrow-" in p.name]
    assert not [p for p in cache.rglob("*") if p.is_dir() and not any(p.iterdir())]
    monkeypatch.undo()  # space is back
    pc = prepare_corpus(data, cache, 1000, workers=Workers(1))
    have = digests(pc.root)
    assert {f: have.get(f) for f in REFERENCE["big_seed3"]} == REFERENCE["big_seed3"]


def cdlaw_prepare(sweep: Path, runs: Path) -> subprocess.CompletedProcess:
    cli = "import sys; from cdlaw.cli import main; sys.argv = ['cdlaw', *sys.argv[1:]]; main()"
    args = [sys.executable, "-c", cli, "prepare", str(sweep), "--out", str(runs), "--workers", "2"]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def test_cdlaw_prepare_on_a_2mb_filesystem_exits_1_and_resumes_with_space(tmp_path, corpora):
    mount = tmp_path / "small"
    mount.mkdir()
    tried = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                           capture_output=True, text=True)  # fmt: skip
    if tried.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {tried.stderr.strip()}")
    try:
        data = corpora[1]["big_seed3"]
        sweep = tmp_path / "s.toml"
        sweep.write_text(
            '[grid]\nsize = ["20K"]\nfresh_tokens = [1000]\nstrategy = ["repetition"]\n'
            f'derived_ratio = [0]\n[data]\ncorpus = "{data.corpus}"\ncorpus_seed = 3\n'
            "vocab_size = 300\nval_tokens = 2000\n"
        )
        full = cdlaw_prepare(sweep, mount / "runs")
        assert full.returncode == 1, full.stderr
        assert full.stderr.count("\n") == 1 and "No space left on device in " in full.stderr
        assert str(mount / "runs" / ".cache") in full.stderr, full.stderr
        assert not [p for p in mount.rglob("*") if p.name.endswith(".tmp")]
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        again = cdlaw_prepare(sweep, mount / "runs")
        assert again.returncode == 0, again.stderr
        root = Path(again.stdout.split("cache ")[1].split(" (")[0].strip())
        have = digests(root)
        assert {f: have.get(f) for f in REFERENCE["big_seed3"]} == REFERENCE["big_seed3"]
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
