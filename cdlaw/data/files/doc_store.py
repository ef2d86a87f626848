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
documents costs its own bytes and nothing more however large the corpus; a worker given
a block's byte ranges (`spans`) reads them with `read_spans` and holds nothing else of
the store. Memory per document is the arrays above, read when needed (8 bytes each; the
text offsets while the blocks are tokenised), never its text.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cdlaw.data.files import read_errors, sources
from cdlaw.system.atomic import write_json_atomic

if TYPE_CHECKING:  # workers import this module: not the config's law stack
    from cdlaw.config import DataConfig


def hash64(data: bytes) -> int:
    """A 64-bit content hash (blake2b): equal bytes, equal hash."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class DocStore:
    """The documents of a complete store folder (built by build_doc_store)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.offsets = np.load(self.folder / "offsets.npy")
        self._id_offsets: np.ndarray | None = None  # read when ids are first asked for
        self._fds: dict[str, int] = {}

    @property
    def id_offsets(self) -> np.ndarray:
        if self._id_offsets is None:
            self._id_offsets = np.load(self.folder / "id_offsets.npy")
        return self._id_offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def nbytes(self, i: int) -> int:
        """Document i's size in UTF-8 bytes."""
        return int(self.offsets[i + 1] - self.offsets[i])

    def texts(self, indices) -> list[str]:
        """The texts of documents `indices`, in that order."""
        return self._read("texts.bin", self.offsets, indices)

    def spans(self, indices) -> np.ndarray:
        """(n, 2) int64: where documents `indices` lie in texts.bin (start, end), for
        read_spans in a process that does not open the store."""
        indices = np.asarray(indices, dtype=np.int64)
        return np.stack([self.offsets[indices], self.offsets[indices + 1]], axis=1)

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
        indices = np.asarray(indices, dtype=np.int64)
        return _pread_all(fd, np.stack([offsets[indices], offsets[indices + 1]], axis=1))

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def read_spans(path: Path, spans: np.ndarray) -> list[str | LongText]:
    """The UTF-8 texts at byte ranges `spans` ((n, 2): start, end) of the file at path:
    a block's documents read by a worker that holds nothing of the store but these. A
    document longer than tokenizer.LONG_TEXT bytes comes as a LongText, read a piece at a
    time as it is encoded."""
    from cdlaw.data.tokens.tokenizer import LONG_TEXT

    fd = os.open(path, os.O_RDONLY)
    try:
        return [
            LongText(str(path), lo, hi)
            if hi - lo > LONG_TEXT
            else os.pread(fd, hi - lo, lo).decode()
            for lo, hi in spans.tolist()
        ]
    finally:
        os.close(fd)


class LongText:
    """A long document's text, bytes lo:hi of a file, as an iterable of decoded chunks of
    READ_BYTES: never the whole text in memory (tokenizer.encode_documents takes it)."""

    READ_BYTES = 1 << 20

    def __init__(self, path: str, lo: int, hi: int) -> None:
        self.path, self.lo, self.hi = path, lo, hi

    def __bool__(self) -> bool:
        return self.hi > self.lo

    def __iter__(self):
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for at in range(self.lo, self.hi, self.READ_BYTES):
                yield decoder.decode(os.pread(fd, min(self.READ_BYTES, self.hi - at), at))
            yield decoder.decode(b"", final=True)
        finally:
            os.close(fd)


def _pread_all(fd: int, spans: np.ndarray) -> list[str]:
    return [os.pread(fd, hi - lo, lo).decode() for lo, hi in spans.tolist()]


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
    names = ("offsets", "id_offsets", "text_hash", "id_hash")
    columns = {name: _Column(folder / f"{name}.npy") for name in names}
    ends = {"offsets": 0, "id_offsets": 0}
    columns["offsets"].append(np.zeros(1, np.int64))
    columns["id_offsets"].append(np.zeros(1, np.int64))
    try:
        what = "data.corpus"
        with open(folder / "texts.bin", "wb") as texts_f, open(folder / "ids.bin", "wb") as ids_f:
            for texts, ids in sources.document_batches(ds, corpus, text_column, id_column, what):
                sizes, hashes = _write_texts(texts, texts_f)
                raw_ids = [i.encode() for i in ids]
                ids_f.write(b"".join(raw_ids))
                for name, lengths in (("offsets", sizes), ("id_offsets", map(len, raw_ids))):
                    cum = ends[name] + np.cumsum(list(lengths), dtype=np.int64)
                    columns[name].append(cum)
                    ends[name] = int(cum[-1]) if len(cum) else ends[name]
                columns["text_hash"].append(np.array(hashes, np.uint64))
                columns["id_hash"].append(np.fromiter(map(hash64, raw_ids), np.uint64, len(ids)))
        if columns["text_hash"].count == 0:
            raise read_errors.empty_corpus(what, corpus, text_column)
        for column in columns.values():
            column.finish()
    finally:
        for column in columns.values():
            column.f.close()  # finish() closed it already, unless bad input stopped the build
    store = DocStore(folder)
    _check_unique_ids(store, corpus, id_column)
    write_json_atomic(folder / "done.json", {"documents": len(store)})
    return store


def _write_texts(texts, out) -> tuple[list[int], list[int]]:
    """Write a batch's texts (strings, or LongDocs copied a megabyte at a time) to the
    texts file; (their sizes in bytes, their hash64s)."""
    sizes, hashes = [], []
    for text in texts:
        if isinstance(text, str):
            raw = text.encode()
            out.write(raw)
            sizes.append(len(raw))
            hashes.append(hash64(raw))
        else:
            size, h = text.copy_stripped(out)
            sizes.append(size)
            hashes.append(h)
    return sizes, hashes


class _Column:
    """A 1-d .npy file written a batch at a time: the values go to a raw file, and
    finish() puts the header (which needs the length) before them, copying file to file,
    so a column costs no memory however many documents there are."""

    def __init__(self, path: Path) -> None:
        self.path, self.raw = path, path.with_suffix(".raw")
        self.f = open(self.raw, "wb")  # closed by finish, or by the build
        self.dtype: np.dtype | None = None
        self.count = 0

    def append(self, values: np.ndarray) -> None:
        self.dtype = values.dtype
        self.count += len(values)
        values.tofile(self.f)

    def finish(self) -> None:
        self.f.close()
        assert self.dtype is not None
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                  "shape": (self.count,)}  # fmt: skip
        with open(self.path, "wb") as out, open(self.raw, "rb") as raw:
            np.lib.format.write_array_header_1_0(out, header)
            shutil.copyfileobj(raw, out, 1 << 20)
        self.raw.unlink()


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
            raise read_errors.duplicate_id("data.corpus", corpus, id_column, doc_id)


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
