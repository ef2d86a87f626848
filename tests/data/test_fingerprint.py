"""Content fingerprints (cdlaw.data.fingerprint): a file is read only when its stat says it
may have changed, a change that keeps size and mtime is still seen, a hash taken in the
same instant as a write is not trusted, and the store is atomic and disposable."""

import hashlib
import json
import os

import pytest

from cdlaw.data import fingerprint
from cdlaw.data.fingerprint import STORE, FileHashes


@pytest.fixture
def reads(monkeypatch):
    """The paths read, in order; and this process's memory of hashes forgotten, as in a
    new process."""
    forget(monkeypatch)
    seen = []
    real = fingerprint.sha256_file

    def counted(path):
        seen.append(path.name)
        return real(path)

    monkeypatch.setattr(fingerprint, "sha256_file", counted)
    return seen


def old_file(path, data: bytes, age_s: float = 60):
    """A file last written age_s ago (older than any racy window)."""
    path.write_bytes(data)
    t = path.stat().st_mtime_ns - int(age_s * 1e9)
    os.utime(path, ns=(t, t))
    return path


def forget(monkeypatch):
    """A new process: nothing in memory, the store read again."""
    monkeypatch.setattr(fingerprint, "_MEMO", {})
    monkeypatch.setattr(fingerprint, "_LOADED", set())
    monkeypatch.setattr(fingerprint, "_UNSAVED", {})


def test_unchanged_files_are_read_once_across_processes(tmp_path, reads, monkeypatch):
    a = old_file(tmp_path / "a.jsonl", b"x" * 3_000_000)  # several chunks
    b = old_file(tmp_path / "b.jsonl", b"y")
    digest = FileHashes(tmp_path / "cache").files([a, b], tmp_path)
    assert reads == ["a.jsonl", "b.jsonl"] and not (tmp_path / "cache").exists()
    FileHashes(tmp_path / "cache").save()  # what the process hashed, saved when asked
    assert FileHashes(tmp_path / "cache").file(a) == hashlib.sha256(a.read_bytes()).hexdigest()
    forget(monkeypatch)
    assert FileHashes(tmp_path / "cache").files([a, b], tmp_path) == digest
    assert reads == ["a.jsonl", "b.jsonl"]  # the store answered
    store = json.loads((tmp_path / "cache" / STORE).read_text())
    assert set(store["files"]) == {str(a.resolve()), str(b.resolve())}
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tmp")]


def test_a_change_that_keeps_size_and_mtime_is_seen(tmp_path, reads, monkeypatch):
    a = old_file(tmp_path / "a.jsonl", b"gold 1")
    hashes = FileHashes(tmp_path / "cache")
    before = hashes.file(a)
    hashes.save()
    st = a.stat()
    a.write_bytes(b"gold 2")  # same size
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime back
    forget(monkeypatch)
    after = FileHashes(tmp_path / "cache").file(a)
    assert after != before and after == hashlib.sha256(b"gold 2").hexdigest()
    # replaced by another file (an editor's rename), mtime kept: seen as well
    b = tmp_path / "b.tmp"
    b.write_bytes(b"gold 3")
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(b, a)
    assert FileHashes(tmp_path / "cache").file(a) == hashlib.sha256(b"gold 3").hexdigest()


def test_a_hash_taken_right_after_a_write_is_taken_again(tmp_path, reads):
    a = tmp_path / "a.jsonl"
    a.write_bytes(b"just written")  # a write in the same clock tick could follow unseen
    hashes = FileHashes(tmp_path / "cache")
    hashes.file(a)
    hashes.file(a)
    hashes.save()
    assert reads == ["a.jsonl", "a.jsonl"]
    assert not (tmp_path / "cache" / STORE).exists()  # nothing worth remembering yet


def test_a_damaged_store_is_only_a_slower_start(tmp_path, reads, monkeypatch):
    a = old_file(tmp_path / "a.jsonl", b"x")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / STORE).write_text('{"version": 1, "files": {"')  # cut short
    hashes = FileHashes(tmp_path / "cache")
    assert hashes.files([a]) == FileHashes().files([a])
    hashes.save()
    assert reads == ["a.jsonl"]
    assert json.loads((tmp_path / "cache" / STORE).read_text())["version"] == 1


def test_two_processes_merge_into_the_store(tmp_path, reads, monkeypatch):
    a = old_file(tmp_path / "a.jsonl", b"a")
    b = old_file(tmp_path / "b.jsonl", b"b")
    first = FileHashes(tmp_path / "cache")
    first.file(a)
    unsaved = fingerprint._UNSAVED
    forget(monkeypatch)  # another process starts, before the first saved
    second = FileHashes(tmp_path / "cache")
    second.file(b)
    second.save()
    monkeypatch.setattr(fingerprint, "_UNSAVED", unsaved)
    first.save()  # does not drop what the other saved meanwhile
    store = json.loads((tmp_path / "cache" / STORE).read_text())
    assert set(store["files"]) == {str(a.resolve()), str(b.resolve())}
