"""Content fingerprints of the files a run reads: SHA-256, streamed, remembered by stat.

    hashes = FileHashes(cache_dir)        # remembered in <cache_dir>/fingerprints.json
    hashes.file(path)                     # the file's SHA-256 (hex)
    hashes.files(paths, root)             # one digest of the files' names and bytes
    hashes.save()                         # what this process hashed, into the store

A file is read a megabyte at a time, never whole. Its hash is remembered, in the process
and in the store, with the file's (size, mtime_ns, ctime_ns, inode): a file whose stat is
unchanged is not read again, so a sweep resumed over a 1 GB corpus only stats it. ctime
and the inode catch a file replaced by another (a rename, a copy with its mtime kept),
which an editor or `cp -p` can do without changing size or mtime. A hash taken less than
RACY_NS after the file's last modification is not trusted later: a write in the same
clock tick as the read could keep every stat field, so such a file is read again next
time (as git does with its index).

The store lives beside the token caches (`runs/.cache/fingerprints.json`) and, like
them, may be deleted at any time: it only spares reading unchanged files. It is written
only when asked (`save`, once a sweep's plan or a preparation succeeded: bad input writes
nothing), atomically, and merged under a lock with what other processes wrote meanwhile,
so it is never torn and concurrent sweeps lose nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from cdlaw.system.atomic import write_json_atomic

STORE = "fingerprints.json"
STORE_VERSION = 1
CHUNK = 1 << 20
RACY_NS = 2_000_000_000  # 2 s: coarser than any file system's timestamp clock

# absolute path -> [size, mtime_ns, ctime_ns, inode, hashed_at_ns, sha256]
Entry = list
_MEMO: dict[str, Entry] = {}  # every hash this process took or read, whatever the store
_LOADED: set[str] = set()  # stores already read into _MEMO
_UNSAVED: dict[str, dict[str, Entry]] = {}  # store -> entries hashed here, not yet saved in it


def _stat_key(st: os.stat_result) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _trusted(entry: Entry, st: os.stat_result) -> bool:
    """The remembered hash still names the file: same stat, and not racily taken."""
    return entry[:4] == _stat_key(st) and st.st_mtime_ns + RACY_NS <= entry[4]


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes, read a chunk at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


class FileHashes:
    """SHA-256 of files, remembered in `cache_dir`'s store (None: in this process only)."""

    def __init__(self, cache_dir: Path | str | None = None) -> None:
        self.store = Path(cache_dir) / STORE if cache_dir is not None else None
        self.new: dict[str, Entry] = (
            {} if self.store is None else _UNSAVED.setdefault(str(self.store), {})
        )
        if self.store is not None and str(self.store) not in _LOADED:
            _LOADED.add(str(self.store))
            for path, entry in _read_store(self.store).items():
                _MEMO.setdefault(path, entry)

    def file(self, path: Path | str) -> str:
        """The file's SHA-256: remembered when its stat is unchanged, else read."""
        key = str(Path(path).resolve())
        st = os.stat(key)
        entry = _MEMO.get(key)
        if entry is not None and _trusted(entry, st):
            return entry[5]
        started = time.time_ns()
        digest = sha256_file(Path(key))
        after = os.stat(key)
        entry = [*_stat_key(after), started, digest]
        _MEMO[key] = entry
        if _stat_key(after) == _stat_key(st) and _trusted(entry, after):
            self.new[key] = entry  # neither written while it was read nor just before
        return digest

    def files(self, files: list[Path], root: Path | None = None) -> str:
        """One digest of the files' names (relative to root; else their names) and bytes,
        in the order given."""
        h = hashlib.sha256()
        for p in files:
            h.update(str(p.relative_to(root) if root else p.name).encode() + b"\0")
            h.update(self.file(p).encode())
        return h.hexdigest()

    def save(self) -> None:
        """Merge what this process hashed for this store into it, atomically, under its
        lock. A store that cannot be written (a read-only cache) is left as it is: it
        only saves time."""
        if self.store is None or not self.new:
            return
        from filelock import FileLock

        try:
            self.store.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.store) + ".lock"):
                entries = _read_store(self.store)
                entries.update(self.new)
                write_json_atomic(self.store, {"version": STORE_VERSION, "files": entries})
        except OSError:
            return
        self.new.clear()


def _read_store(path: Path) -> dict[str, Entry]:
    """The store's entries; {} when it is missing, unreadable or of another version."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STORE_VERSION:
        return {}
    files = data.get("files")
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, list) and len(v) == 6}
