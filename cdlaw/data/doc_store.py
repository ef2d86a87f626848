"""A real corpus's documents on disk, read by index: the store a preparation shuffles,
splits and tokenises without holding the texts in memory (docs/corpus.md).

`build_doc_store(ds, …, folder)` streams a `datasets.Dataset` (sources.document_batches)
into `folder`:

    texts.bin        every non-empty document's stripped UTF-8 text, in source order
    offsets.npy      int64, n + 1: document i is texts.bin[offsets[i]:offsets[i + 1]]
    ids.bin          every document's id (UTF-8), and
    id_offsets.npy   its offsets
    text_hash.npy    uint64: a hash of each text (exact-duplicate checks)
    id_hash.npy      uint64: a hash of each id (the paraphrase join, duplicate ids)
    done.json        written last: the store is complete

`DocStore(folder)` reads documents back with positioned reads (os.pread), so a block of
documents costs its own bytes and nothing more however large the corpus. Memory per
document is the arrays above (about 40 bytes), never its text.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from array import array
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cdlaw.atomic import write_json_atomic
from cdlaw.data import sources

if TYPE_CHECKING:  # workers import this module: not the config's law stack
    from cdlaw.config import DataConfig

WRITE_BUFFER = 8 << 20  # bytes of text buffered before a write


def hash64(data: bytes) -> int:
    """A 64-bit content hash (blake2b): equal bytes, equal hash."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class DocStore:
    """The documents of a complete store folder (built by build_doc_store)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.offsets = np.load(self.folder / "offsets.npy")
        self.id_offsets = np.load(self.folder / "id_offsets.npy")
        self._fds: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def nbytes(self, i: int) -> int:
        """Document i's size in UTF-8 bytes."""
        return int(self.offsets[i + 1] - self.offsets[i])

    def texts(self, indices) -> list[str]:
        """The texts of documents `indices`, in that order."""
        return self._read("texts.bin", self.offsets, indices)

    def ids(self, indices) -> list[str]:
        """The ids of documents `indices`, in that order."""
        return self._read("ids.bin", self.id_offsets, indices)

    def text_hashes(self) -> np.ndarray:
        return np.load(self.folder / "text_hash.npy")

    def id_hashes(self) -> np.ndarray:
        return np.load(self.folder / "id_hash.npy")

    def _read(self, name: str, offsets: np.ndarray, indices) -> list[str]:
        fd = self._fds.get(name)
        if fd is None:
            fd = self._fds[name] = os.open(self.folder / name, os.O_RDONLY)
        out = []
        for i in np.asarray(indices, dtype=np.int64).tolist():
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            out.append(os.pread(fd, hi - lo, lo).decode())
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def store_complete(folder: Path) -> bool:
    return (Path(folder) / "done.json").is_file()


def build_doc_store(ds, corpus: str, text_column: str, id_column: str, folder: Path) -> DocStore:
    """Write the dataset's non-empty documents into `folder` (done.json last) and open it.

    BadInput (one sentence, nothing left behind but scratch files the next build
    replaces) for an empty corpus, a row without text, or duplicate ids.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "done.json").unlink(missing_ok=True)
    # Growable typed arrays (8 bytes a value), not lists of Python ints (~36).
    columns = {
        "offsets": array("q", [0]),
        "id_offsets": array("q", [0]),
        "text_hash": array("Q"),
        "id_hash": array("Q"),
    }
    what = "data.corpus"
    with open(folder / "texts.bin", "wb") as texts_f, open(folder / "ids.bin", "wb") as ids_f:
        pending: list[bytes] = []
        for texts, ids in sources.document_batches(ds, corpus, text_column, id_column, what):
            for text, doc_id in zip(texts, ids, strict=True):
                raw, raw_id = text.encode(), doc_id.encode()
                pending.append(raw)
                columns["offsets"].append(columns["offsets"][-1] + len(raw))
                columns["text_hash"].append(hash64(raw))
                ids_f.write(raw_id)
                columns["id_offsets"].append(columns["id_offsets"][-1] + len(raw_id))
                columns["id_hash"].append(hash64(raw_id))
            if sum(map(len, pending)) >= WRITE_BUFFER:
                texts_f.write(b"".join(pending))
                pending.clear()
        texts_f.write(b"".join(pending))
    if len(columns["text_hash"]) == 0:
        raise sources.empty_corpus(what, corpus, text_column)
    for name, values in columns.items():
        np.save(folder / f"{name}.npy", np.frombuffer(values, dtype=values.typecode))
    columns.clear()
    store = DocStore(folder)
    _check_unique_ids(store, corpus, id_column)
    write_json_atomic(folder / "done.json", {"documents": len(store)})
    return store


def _check_unique_ids(store: DocStore, corpus: str, id_column: str) -> None:
    """BadInput naming the first id (in source order) that another document shares."""
    hashes = store.id_hashes()
    order = np.argsort(hashes, kind="stable")
    sorted_hashes = hashes[order]
    same = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1])
    if not len(same):
        return
    shared = np.isin(hashes, sorted_hashes[same])
    for i in np.flatnonzero(shared).tolist():  # source order; a hash collision is no duplicate
        doc_id = store.ids([i])[0]
        if store.ids(np.flatnonzero(hashes == hashes[i])).count(doc_id) > 1:
            raise sources.duplicate_id("data.corpus", corpus, id_column, doc_id)


def open_store(data: DataConfig, folder: Path, ds=None) -> DocStore:
    """The corpus's document store in folder, built from the corpus unless complete."""
    if store_complete(folder):
        return DocStore(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".arrow-", dir=folder.parent) as tmp:
        if ds is None:
            ds, _ = sources.open_dataset(
                data.corpus, data.text_column, data.id_column, tmp, "data.corpus"
            )
        try:
            return build_doc_store(ds, data.corpus, data.text_column, data.id_column, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # a part-built store is never read
            raise
