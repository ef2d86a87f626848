"""Paraphrase files, and any other derived files, joined to a corpus's training documents by
id, a block at a time (docs/corpus.md). Entry point: `prepare_passes(data, root, source)`.

A real corpus's cache folder holds an index of every document's id (`id_hash.npy`, sorted
64-bit id hashes, and `id_train_pos.npy`, each one's place in training order or -1 for a
validation document or a copy of one); the embedded corpus's ids are the places themselves
("0", "1", …: what `cdlaw distill` writes). The paraphrase rows are read once, a line at a
time; each is looked up in the index and its place in its file (not its text) put in the
bucket of its group of blocks. Each bucket is then a job for the workers (PassesJob, run
by block_tokens.tokenise_blocks: a process per core, or Ray tasks): it reads the bucket
back, parses its rows again and tokenises its blocks' passes, so a worker holds one
bucket's row places and one block's texts, however large the files.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cdlaw.data.embedded.world import BLOCK_DOCS
from cdlaw.data.files import sources
from cdlaw.data.files.block_tokens import BlockDone, Workers, tokenise_blocks
from cdlaw.data.files.doc_store import hash64, open_store
from cdlaw.data.tokens import cache, tokenizer
from cdlaw.strategies import PARAPHRASE
from cdlaw.system.atomic import write_json_atomic
from cdlaw.system.errors import BadInput

if TYPE_CHECKING:  # workers import this module: not the config's law stack
    from cdlaw.config import DataConfig

MAX_BUCKETS = 256  # bucket files open at once while the rows are read
EMBEDDED_IDS = 2**31  # the embedded corpus's ids are training places below this
FLUSH_ROWS = 1 << 20  # row places held before they are appended to their buckets
RECORD = np.dtype([("doc", "<i8"), ("file", "<i4"), ("offset", "<i8"), ("length", "<i8")])


def save_id_index(root: Path, id_hashes: np.ndarray, train: np.ndarray) -> None:
    """Write the id index: every document's id hash, sorted, and its training place."""
    place = np.full(len(id_hashes), -1, dtype=np.int64)
    place[train] = np.arange(len(train))
    order = np.argsort(id_hashes, kind="stable")
    cache.save_array(root / "id_train_pos.npy", place[order])
    cache.save_array(root / "id_hash.npy", id_hashes[order])


def prepare_passes(data: DataConfig, root: Path, source: cache.DerivedSource | None = None,
                   workers: Workers | None = None) -> None:  # fmt: skip
    """Tokenise every pass of the training documents in `source`'s files (default: the
    paraphrase files of data), once per file content, a bucket of blocks per job, run as
    `workers` says (default: a process per core).

    Pass k of a document is the k-th of its rows, sorted by (pass, style, text), that has
    text (and, for paraphrase files, a style in data.paraphrase_styles); a document with
    fewer rows has an empty pass k. BadInput for a row whose id is no document's.
    Resumable: each block of each pass is written atomically and skipped when present;
    done.json is written last."""
    source = source or cache.DerivedSource.of(data, PARAPHRASE)
    folder = source.folder(root, data)
    if (folder / "done.json").is_file():
        return
    with cache.cache_lock(root):
        if (folder / "done.json").is_file():
            return
        embedded = data.corpus == "embedded"
        if not embedded and not (root / "id_hash.npy").is_file():
            _index_from_train_ids(data, root)
        meta = json.loads((root / "meta.json").read_text())
        # the embedded corpus has no end: a bucket per block of the documents the rows name
        group = 1 if embedded else max(1, math.ceil(meta["n_blocks"] / MAX_BUCKETS))
        files = sources.paraphrase_files(source.files, source.setting())
        join = folder / ".join"
        if not (join / "rows.json").is_file():
            try:
                _bucket_rows(data, root, files, source, group, join)
            except BaseException:
                shutil.rmtree(join, ignore_errors=True)  # part-read rows are read again
                raise
        rows = json.loads((join / "rows.json").read_text())
        if embedded:  # whole blocks of the documents the rows name (the rest: no text)
            n_blocks = math.ceil(rows["documents"] / BLOCK_DOCS)
            meta.update(n_train_documents=n_blocks * BLOCK_DOCS, n_blocks=n_blocks)
        passes = rows["passes"]
        _tokenise_passes(
            root, folder, files, meta, group, passes, source.strategy, workers or Workers()
        )
        styles = None if source.styles is None else list(source.styles)
        write_json_atomic(folder / "done.json", {"passes": passes, "styles": styles})
        shutil.rmtree(join, ignore_errors=True)


def _index_from_train_ids(data: DataConfig, root: Path) -> None:
    """The id index of a cache folder prepared before it had one: the ids read again from
    the corpus, their training places from train_ids.json."""
    store = open_store(data, root / cache.SCRATCH / "store")
    try:
        hashes = store.id_hashes()
        order = np.argsort(hashes, kind="stable")
        train_ids = json.loads((root / "train_ids.json").read_text())
        wanted = np.fromiter((hash64(str(i).encode()) for i in train_ids), dtype=np.uint64)
        train = order[np.searchsorted(hashes[order], wanted)]
        save_id_index(root, hashes, train)
    finally:
        store.close()
    shutil.rmtree(root / cache.SCRATCH, ignore_errors=True)


def _bucket_rows(data: DataConfig, root: Path, files, source, group: int, join: Path) -> None:
    """Read every row once: check its id, and put the place of each kept row in its
    bucket (join/bNNN.bin); rows.json (the most passes a document has, and the training
    documents the passes span) last."""
    shutil.rmtree(join, ignore_errors=True)
    join.mkdir(parents=True)
    place_of = _places(data, root)
    documents = int(json.loads((root / "meta.json").read_text()).get("n_train_documents", 0))
    counts, pending = np.zeros(documents, dtype=np.int32), []
    seen = _RowKeys()
    for f, path in enumerate(files):
        for n, offset, length, row in sources.iter_rows(path):
            t = place_of(str(row["id"]))
            if t is None:
                raise BadInput(
                    f"derived file {path}:{n} has id {str(row['id'])!r}, which is no "
                    f"document of data.corpus {data.corpus!r}: the files must be made from "
                    "this corpus (with its data.id_column; the embedded corpus's ids are "
                    "training places 0, 1, …)"
                )
            kept = source.styles is None or str(row.get("style", "")) in source.styles
            if t >= 0 and kept and row["text"].strip():
                seen.add(row, f, n, offset, length)
                pending.append((t, f, offset, length))
                if t >= len(counts):  # the embedded corpus: as many as the rows name
                    counts = np.resize(counts, max(t + 1, 2 * len(counts)))
                    counts[documents:] = 0
                documents = max(documents, t + 1)
                counts[t] += 1
            if len(pending) >= FLUSH_ROWS:
                _flush(pending, group, join)
    _flush(pending, group, join)
    seen.refuse_copies(files)
    write_json_atomic(
        join / "rows.json", {"passes": int(counts.max(initial=0)), "documents": documents}
    )


class _RowKeys:
    """A hash of each kept row's (id, pass, style, text) and where the row is, 36 bytes a
    row: a row that repeats another (a file written twice, or appended to itself) would
    count as one more pass of its document."""

    def __init__(self) -> None:
        from array import array

        self.hashes, self.files = array("Q"), array("i")
        self.lines, self.offsets, self.lengths = array("q"), array("q"), array("q")

    def add(self, row: dict, f: int, n: int, offset: int, length: int) -> None:
        self.hashes.append(hash64(json.dumps(_row_key(row)).encode()))
        self.files.append(f)
        self.lines.append(n)
        self.offsets.append(offset)
        self.lengths.append(length)

    def refuse_copies(self, files: list[Path]) -> None:
        """BadInput naming the first row (in file order) that repeats an earlier one."""
        hashes = np.frombuffer(self.hashes, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        same = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
        pairs = zip(order[same + 1].tolist(), order[same].tolist(), strict=True)
        for later, earlier in sorted(pairs):
            a, b = self._key(files, earlier), self._key(files, later)
            if a == b:  # not a hash collision
                first = f"{files[self.files[earlier]]}:{self.lines[earlier]}"
                raise BadInput(
                    f"derived file {files[self.files[later]]}:{self.lines[later]} repeats row "
                    f"{first} (the same id, pass, style and text), which would count as one "
                    "more pass of its document: remove the copy"
                )

    def _key(self, files: list[Path], i: int) -> list:
        with open(files[self.files[i]], "rb") as f:
            f.seek(self.offsets[i])
            return _row_key(json.loads(f.read(self.lengths[i])))


def _row_key(row: dict) -> list:
    """What makes two derived rows the same row: id, pass, style and stripped text."""
    return [str(row["id"]), row["pass"], str(row.get("style", "")), row["text"].strip()]


def _places(data: DataConfig, root: Path):
    """A document id → its place in training order (-1: held out), or None for no document's."""
    if data.corpus == "embedded":
        return lambda i: (
            int(i) if i.isdigit() and str(int(i)) == i and int(i) < EMBEDDED_IDS else None
        )
    hashes = np.load(root / "id_hash.npy", mmap_mode="r")
    places = np.load(root / "id_train_pos.npy", mmap_mode="r")

    def place(i: str) -> int | None:
        h = np.uint64(hash64(i.encode()))
        k = int(np.searchsorted(hashes, h))
        return None if k == len(hashes) or hashes[k] != h else int(places[k])

    return place


def _flush(pending: list, group: int, join: Path) -> None:
    if not pending:
        return
    records = np.array(pending, dtype=RECORD)
    pending.clear()
    bucket = records["doc"] // BLOCK_DOCS // group
    for g in np.unique(bucket).tolist():
        with open(join / f"b{g:03d}.bin", "ab") as out:
            records[bucket == g].tofile(out)


def _tokenise_passes(root: Path, folder: Path, files, meta: dict, group: int, passes: int,
                     strategy: str, workers: Workers) -> None:  # fmt: skip
    """Every block of every pass not yet written: a job per bucket of blocks, run by the
    workers (block_tokens.tokenise_blocks)."""
    if not passes:
        return
    n_train, n_blocks = meta["n_train_documents"], meta["n_blocks"]
    jobs, cached = [], []
    for g in range(math.ceil(n_blocks / group)):
        job = PassesJob(str(folder), str(folder / ".join" / f"b{g:03d}.bin"),
                        tuple(str(f) for f in files), str(root / "tokenizer.json"),
                        meta["eos_id"], meta["dtype"], g * group,
                        min((g + 1) * group, n_blocks), n_train, passes, strategy)  # fmt: skip
        if all(job.path(b, k).is_file() for b, k in job.blocks()):
            cached.append(job.done_already())
        else:
            jobs.append(job)
    total = n_train * passes

    def on_job(done: BlockDone) -> None:
        if workers.progress is not None:
            workers.progress(done, total)

    for done in cached:
        on_job(done)
    tokenise_blocks(jobs, workers, on_job)


@dataclass(frozen=True)
class PassesJob:
    """Tokenise passes 1…passes of training blocks first…last − 1 (one bucket) from the
    row places in the bucket file, writing each block of each pass not yet in `folder`."""

    folder: str
    bucket: str  # the bucket's row places (RECORD); absent when no kept row falls in it
    files: tuple[str, ...]  # the paraphrase files, as the row places number them
    tokenizer: str
    eos_id: int
    dtype: str
    first: int
    last: int
    n_train: int  # training documents in all
    passes: int
    strategy: str  # whose passes: for progress (BlockDone.derived)

    def path(self, b: int, k: int) -> Path:
        return Path(self.folder) / f"p{k:03d}" / f"b{b:05d}.npy"

    def blocks(self) -> list[tuple[int, int]]:
        """(block, pass) of every block file this job owns."""
        return [(b, k) for b in range(self.first, self.last) for k in range(1, self.passes + 1)]

    def documents(self) -> int:
        """Documents times passes in this job's blocks."""
        return (min(self.last * BLOCK_DOCS, self.n_train) - self.first * BLOCK_DOCS) * self.passes

    def done_already(self) -> BlockDone:
        """Progress for a bucket whose files are all in the cache."""
        tokens = sum(int(np.load(self.path(b, k).with_suffix(".ends.npy"))[-1])
                     for b, k in self.blocks())  # fmt: skip
        return BlockDone(self.documents(), tokens, 0, cached=True, derived=self.strategy)

    def run(self) -> BlockDone:
        bucket = Path(self.bucket)
        records = np.fromfile(bucket, dtype=RECORD) if bucket.is_file() else np.empty(0, RECORD)
        tok = cache.load_tokenizer_once(self.tokenizer)
        fds = [os.open(p, os.O_RDONLY) for p in self.files]
        tokens = text_bytes = 0
        try:
            for b in range(self.first, self.last):
                lo, hi = b * BLOCK_DOCS, min((b + 1) * BLOCK_DOCS, self.n_train)
                by_doc = _pass_texts(records[(records["doc"] >= lo) & (records["doc"] < hi)], fds)
                for k in range(1, self.passes + 1):
                    if self.path(b, k).is_file():
                        continue
                    texts = [p[k - 1] if len(p := by_doc.get(t, ())) >= k else None
                             for t in range(lo, hi)]  # fmt: skip
                    ids, ends = tokenizer.encode_documents(
                        tok, texts, self.eos_id, np.dtype(self.dtype)
                    )
                    cache.save_block(self.path(b, k), ids, ends)
                    tokens += len(ids)
                    text_bytes += sum(len(t.encode()) for t in texts if t)
        finally:
            for fd in fds:
                os.close(fd)
        return BlockDone(self.documents(), tokens, text_bytes, cached=False, derived=self.strategy)


def _pass_texts(records: np.ndarray, fds: list[int]) -> dict[int, list[str]]:
    """Training place → its kept paraphrase texts in pass order, sorted by (pass, style,
    text), read back from the rows' places in their files."""
    rows: dict[int, list[tuple[int, str, str]]] = {}
    for doc, f, offset, length in records.tolist():
        row = json.loads(os.pread(fds[f], length, offset))
        rows.setdefault(doc, []).append(
            (row["pass"], str(row.get("style", "")), row["text"].strip())
        )
    return {doc: [text for *_, text in sorted(v)] for doc, v in rows.items()}
