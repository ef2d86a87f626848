"""Real corpora (txt, jsonl, parquet, hf:): their cache key, the shuffle and validation
split, the BPE, and the tokenised training blocks, built once and resumably.

Entry point: `prepare_files`. The documents stay on disk (doc_store.py); the shuffle is
a permutation of their indices, validation is the first documents of it, and exact copies
of a validation text are found by hash. Blocks are tokenised in parallel (block_tokens.py)
and each is written atomically, so a killed preparation resumes at the first missing
block; the cache lock means one process prepares a corpus while the others wait for it.
Paraphrase files are joined to the documents by joined.py.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import numpy as np

from cdlaw.config import DataConfig
from cdlaw.data.derived import joined
from cdlaw.data.embedded.world import BLOCK_DOCS
from cdlaw.data.files import sources
from cdlaw.data.files.block_tokens import BlockDone, BlockJob, Workers, tokenise_blocks
from cdlaw.data.files.doc_store import DocStore, hash64, open_store
from cdlaw.data.fingerprint import FileHashes
from cdlaw.data.tokens import cache, tokenizer
from cdlaw.data.tokens.cache import SCRATCH
from cdlaw.system.atomic import write_atomic, write_json_atomic
from cdlaw.system.errors import BadInput

BPE_SAMPLE_BYTES = 32 << 20  # a real corpus's BPE is trained on at most this much text
# Bytes held out per validation token before the BPE is trained, when the corpus has room:
# more than a byte-level BPE packs into a token of ordinary text, so one training suffices.
WORST_BYTES_PER_TOKEN = 8
HOLDOUT_MARGIN = 1.05  # a measured hold-out's slack for the BPE trained on a little less text
SMALLEST_VAL_TOKENS = 1024  # the least data.val_tokens a too-small corpus is told to try
SHUFFLE_TAG = 11  # seeds the document shuffle; ordering.py holds 12 and 13
# A corpus is called too small before it is all tokenised when the tokens per byte of the
# blocks done, times the bytes left, fall this far short of the fresh tokens asked for.
PROJECTION_SLACK = 1.5
COUNT_BATCH = 256  # documents encoded at a time when counting tokens


def prepare_files(
    data: DataConfig, cache_dir: Path, fresh_tokens: int = 1, workers: Workers | None = None
) -> cache.PreparedCorpus:
    """Tokenizer, validation set and every training block of a real corpus, cached.

    fresh_tokens (the most a run will read) only words the message of a corpus too small
    for it (said as soon as the blocks done show it); the cache is the same for every
    value. `workers` says how blocks are tokenised (default: a process per core)."""
    workers = workers or Workers()
    workers.check()
    if data.tokenizer != "bpe":
        path = tokenizer.tokenizer_file(data.tokenizer)  # a bad path is bad input before any work
        tokenizer.find_eos(tokenizer.load_tokenizer(path), path)  # and so is a missing EOS
    if data.paraphrases:
        sources.paraphrase_files(data.paraphrases)
    ds = None
    fingerprint = cheap_fingerprint(data, cache_dir)
    if fingerprint is None:  # a remote hf: dataset: its fingerprint comes from loading it
        ds, fingerprint = sources.open_dataset(
            data.corpus, data.text_column, data.id_column, "", "data.corpus"
        )
    root = cache_dir / "data" / cache.key_digest(files_key(data, fingerprint))
    if not (root / "meta.json").is_file() or (root / SCRATCH).exists():
        with cache.cache_lock(root):
            _clear_leftovers(root)
            if not (root / "meta.json").is_file():
                try:
                    _build_files(data, root, ds, fresh_tokens, workers)
                finally:
                    _clear_leftovers(root)
    if data.paraphrases:
        joined.prepare_passes(data, root, workers=workers)
    FileHashes(cache_dir).save()  # the corpus's hashes: a later key is a stat of its files
    meta = json.loads((root / "meta.json").read_text())
    return cache.open_prepared(data, root, train_tokens_available=meta["train_tokens"])


def _clear_leftovers(root: Path) -> None:
    """What a killed or failed preparation left (call holding the cache lock): the scratch
    folder of a complete cache, a conversion's Arrow files, half-written temporary files,
    and a scratch folder with nothing in it. The store and split a resumed preparation
    reuses stay."""
    scratch = root / SCRATCH
    if (root / "meta.json").is_file():
        shutil.rmtree(scratch, ignore_errors=True)
        return
    for arrow in scratch.glob(".arrow-*"):
        shutil.rmtree(arrow, ignore_errors=True)
    for folder in (root, scratch, root / "train"):
        for tmp in folder.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: kept for the resumed preparation
        scratch.rmdir()


def files_key(data: DataConfig, fingerprint: str) -> dict:
    """What decides a real corpus's tokens: its content, the split and the tokenizer."""
    return {
        "cache": cache.CACHE_VERSION,
        "corpus": fingerprint,
        "seed": data.corpus_seed,
        "val_tokens": data.val_tokens,  # the split (and so the training order) depends on it
        "tokenizer": cache.tokenizer_key(data, 0, tokenizer.BPE_VERSION),
    }


def cheap_fingerprint(data: DataConfig, cache_dir: Path | None = None) -> str | None:
    """A content hash of a local corpus without loading it (None for remote hf: names);
    each file's hash remembered in cache_dir's fingerprint store (cdlaw.data.fingerprint)."""
    if data.corpus.startswith("hf:"):
        name, _, _ = sources.parse_hf(data.corpus)
        local = Path(name).expanduser()
        if not local.is_dir():
            return None
        files = sorted(p for p in local.rglob("*") if p.is_file())
        return "hf-disk:" + sources.digest_files(files, local, cache_dir) + f":{data.corpus}"
    loader, files = sources.corpus_files(data.corpus)
    root = Path(data.corpus).expanduser()
    digest = sources.digest_files(files, root if root.is_dir() else root.parent, cache_dir)
    return f"{loader}:{digest}:{data.text_column}:{data.id_column}"


def _build_files(data: DataConfig, root: Path, ds, fresh_tokens: int, workers: Workers) -> None:
    """Store the documents, shuffle and split them, tokenise the blocks; meta.json last."""
    where = f"data.corpus {data.corpus!r}"
    store = open_store(data, root / SCRATCH / "store", ds)
    try:
        n_val, train = _split(data, root, store, where, fresh_tokens)
        split = json.loads((root / SCRATCH / "split.json").read_text())
        total = _tokenise_train(data, root, store, train, split, fresh_tokens, workers)
        joined.save_id_index(root, store.id_hashes(), train)
        _write_train_ids(root / "train_ids.json", store, train)
        name = data.corpus if data.corpus.startswith("hf:") else Path(data.corpus).name
        meta = {
            "kind": "files",
            "name": f"{name}:seed{data.corpus_seed}",
            "vocab_size": split["vocab_size"],
            "eos_id": split["eos_id"],
            "dtype": split["dtype"],
            "n_documents": len(store),
            "n_val_documents": n_val,
            "n_train_documents": len(train),
            "n_blocks": math.ceil(len(train) / BLOCK_DOCS),
            "train_tokens": total,
        }
        write_json_atomic(root / "meta.json", meta)  # last: its presence means "complete"
    finally:
        store.close()
    shutil.rmtree(root / SCRATCH, ignore_errors=True)


class ShuffledDocs:
    """The store's documents in shuffled order, read on demand."""

    def __init__(self, store: DocStore, order: np.ndarray) -> None:
        self.store, self.order = store, order

    def __len__(self) -> int:
        return len(self.order)

    def nbytes(self, i: int) -> int:
        return self.store.nbytes(int(self.order[i]))

    def texts(self, lo: int, hi: int) -> list[str]:
        return self.store.texts(self.order[lo:hi])

    def iter_from(self, lo: int = 0, stop: int | None = None):
        """The texts from position lo (to stop), read COUNT_BATCH at a time."""
        stop = len(self) if stop is None else stop
        for a in range(lo, stop, COUNT_BATCH):
            yield from self.texts(a, min(a + COUNT_BATCH, stop))


def _split(data: DataConfig, root: Path, store: DocStore, where: str, fresh_tokens: int):
    """(validation documents, the training documents' store indices in training order).

    Shuffles, trains the BPE or checks the given tokenizer, writes the tokenizer and the
    validation tokens; remembered in the scratch folder, so a resumed preparation skips it.
    """
    scratch = root / SCRATCH
    if (scratch / "split.json").is_file():
        split = json.loads((scratch / "split.json").read_text())
        return split["n_val"], np.load(scratch / "train_order.npy")
    order = np.random.default_rng([data.corpus_seed, SHUFFLE_TAG]).permutation(len(store))
    docs = ShuffledDocs(store, order)
    if data.tokenizer == "bpe":
        tok, n_val = _hold_out_for_bpe(data, docs, where, fresh_tokens)
        cache.save_tokenizer(root, tok)
        eos_id = tok.token_to_id(tokenizer.EOS)
    else:
        path = tokenizer.tokenizer_file(data.tokenizer)
        tok = tokenizer.load_tokenizer(path)
        eos_id = tokenizer.find_eos(tok, path)
        n_val, held = _count_docs_for(tok, docs.iter_from(), data.val_tokens)
        if n_val is None:
            raise too_small(where, held, data.val_tokens, fresh_tokens)
        root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, root / "tokenizer.json")
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    dtype = tokenizer.token_dtype(vocab_size)
    val_texts = docs.texts(0, n_val)
    val, _ = tokenizer.encode_documents(tok, val_texts, eos_id, dtype)
    train = _without_copies(store, order[n_val:], val_texts)
    if not len(train):  # every other document is a copy of a validation one
        raise too_small(where, len(val), data.val_tokens, fresh_tokens)
    cache.save_array(root / f"val-{data.val_tokens}.npy", val[: data.val_tokens])
    cache.save_array(scratch / "train_order.npy", train)
    split = {"n_val": n_val, "eos_id": int(eos_id), "vocab_size": vocab_size,
             "dtype": np.dtype(dtype).name}  # fmt: skip
    write_json_atomic(scratch / "split.json", split)
    return n_val, train


def _without_copies(store: DocStore, rest: np.ndarray, val_texts: list[str]) -> np.ndarray:
    """rest without the documents whose text is exactly a validation text: candidates by
    hash, each confirmed by its text (validation documents never appear in training)."""
    wanted = set(val_texts)
    val_hashes = np.fromiter((hash64(t.encode()) for t in wanted), dtype=np.uint64)
    maybe = np.flatnonzero(np.isin(store.text_hashes()[rest], val_hashes))
    copies = [
        j for j, t in zip(maybe.tolist(), store.texts(rest[maybe]), strict=True) if t in wanted
    ]
    return np.delete(rest, copies)


class _Tally:
    """Counts the finished blocks, passes them on to the progress callback, and says a
    corpus is too small as soon as the blocks done project it (blocks already written
    stay in the cache for a smaller run)."""

    def __init__(self, where: str, data: DataConfig, fresh_tokens: int, total_bytes: int,
                 documents: int, progress) -> None:  # fmt: skip
        self.where, self.val_tokens, self.fresh_tokens = where, data.val_tokens, fresh_tokens
        self.total_bytes, self.documents = total_bytes, documents
        self.progress = progress
        self.tokens = self.text_bytes = 0

    def __call__(self, done: BlockDone) -> None:
        self.tokens += done.tokens
        self.text_bytes += done.text_bytes
        if self.progress is not None:
            self.progress(done, self.documents)
        if self.fresh_tokens > 1 and 0 < self.text_bytes < self.total_bytes:
            projected = int(self.tokens * self.total_bytes / self.text_bytes)
            if projected * PROJECTION_SLACK < self.fresh_tokens:
                corpus = projected + self.val_tokens
                raise too_small(self.where, corpus, self.val_tokens, self.fresh_tokens)


def _tokenise_train(data, root, store, train, split, fresh_tokens, workers) -> int:
    """Tokenise every training block not yet cached; the training tokens in all."""
    spans = _BlockSpans(store, train)
    where = f"data.corpus {data.corpus!r}"
    tally = _Tally(where, data, fresh_tokens, spans.total_bytes(), len(train), workers.progress)
    todo = []
    for b in range(spans.n_blocks):
        path = root / "train" / f"b{b:05d}.npy"
        if path.is_file() and path.with_suffix(".ends.npy").is_file():
            ends = np.load(path.with_suffix(".ends.npy"))
            block_bytes = int(np.diff(spans(b), axis=1).sum())
            tally(BlockDone(len(ends), int(ends[-1]), block_bytes, cached=True))
        else:
            todo.append(b)
    tokenise_blocks(_BlockJobs(spans, todo, root, split), workers, tally)
    return tally.tokens


class _BlockSpans:
    """Training block b's documents as byte ranges of the store's texts file, made when
    asked for: the preparing process holds the store's offsets and the training order
    (8 bytes a document each), not every block's ranges."""

    def __init__(self, store: DocStore, train: np.ndarray) -> None:
        self.store, self.train = store, train
        self.n_blocks = math.ceil(len(train) / BLOCK_DOCS)

    def __call__(self, b: int) -> np.ndarray:
        return self.store.spans(self.train[b * BLOCK_DOCS : (b + 1) * BLOCK_DOCS])

    def total_bytes(self) -> int:
        return sum(int(np.diff(self(b), axis=1).sum()) for b in range(self.n_blocks))


class _BlockJobs(Sequence):
    """The BlockJobs of blocks `todo`, each made when the workers take it."""

    def __init__(self, spans: _BlockSpans, todo: list[int], root: Path, split: dict) -> None:
        self.spans, self.todo, self.root, self.split = spans, todo, root, split

    def __len__(self) -> int:
        return len(self.todo)

    def __getitem__(self, i):
        b = self.todo[i]
        texts = str(self.spans.store.folder / "texts.bin")
        out = str(self.root / "train" / f"b{b:05d}.npy")
        tok = str(self.root / "tokenizer.json")
        return BlockJob(texts, tok, self.split["eos_id"], self.split["dtype"], self.spans(b), out)


def _write_train_ids(path: Path, store: DocStore, train: np.ndarray) -> None:
    """train_ids.json (the training documents' ids in order), written a chunk at a time."""

    def write(tmp: Path) -> None:
        with open(tmp, "w") as f:
            f.write("[")
            for lo in range(0, len(train), 4096):
                ids = store.ids(train[lo : lo + 4096])
                f.write(("," if lo else "") + ",".join("\n  " + json.dumps(i) for i in ids))
            f.write("\n]\n")

    write_atomic(path, write)


def _count_docs_for(tok, texts, n_tokens: int) -> tuple[int | None, int]:
    """(how many leading documents of the iterable texts hold at least n_tokens tokens, each
    ended by EOS, or None if all of them do not; the tokens counted)."""
    have, i, texts = 0, 0, iter(texts)
    while batch := list(islice(texts, COUNT_BATCH)):
        for count in tokenizer.count_tokens(tok, batch):
            have += count + 1
            i += 1
            if have >= n_tokens:
                return i, have
    return None, have


def _hold_out_for_bpe(data: DataConfig, docs: ShuffledDocs, where: str, fresh_tokens: int):
    """(the BPE, how many leading documents validate): the BPE never sees a validation text.

    Which documents validate depends on the BPE (the first that hold data.val_tokens of its
    tokens), so a prefix sure to hold them is set aside and the BPE trained on the rest.
    With room, the prefix holds WORST_BYTES_PER_TOKEN bytes per validation token (doubled
    while too few); a corpus without that room holds out what the bytes per token of a BPE
    trained on the rest say it needs, grown until it is enough. BadInput (too_small) when
    no prefix leaves training text.
    """
    val, n = data.val_tokens, len(docs)
    need, measured = WORST_BYTES_PER_TOKEN * val, False
    while True:
        reserve, held_bytes = 0, 0
        while reserve < n and held_bytes < need:
            held_bytes += docs.nbytes(reserve)
            reserve += 1
        if reserve >= n:
            if measured:
                break
            # Every token but a document's EOS holds a byte or more: fewer bytes never do.
            need, measured = math.ceil(val / 2), True
            continue
        sample: list[str] = []
        size = 0
        for t in docs.iter_from(reserve):
            if size >= BPE_SAMPLE_BYTES:
                break
            # a long document in pieces: the same words for the trainer, fewer bytes at once
            sample += tokenizer.text_pieces(t) if tokenizer.is_long(t) else [t]
            size += len(t)
        tok = tokenizer.train_bpe(sample, data.vocab_size)
        n_val, held = _count_docs_for(tok, docs.iter_from(0, reserve), val)
        if n_val is not None:
            return tok, n_val
        if measured:  # more bytes than held_bytes, so the prefix grows every round
            need = max(held_bytes + 1, math.ceil(HOLDOUT_MARGIN * val * held_bytes / held))
        else:
            need *= 2
    # The corpus cannot hold both: count its tokens with a BPE trained on all of it.
    tok = tokenizer.train_bpe(docs.iter_from(), data.vocab_size)
    corpus_tokens = _count_docs_for(tok, docs.iter_from(), math.inf)[1]  # type: ignore[arg-type]
    raise too_small(where, corpus_tokens, val, fresh_tokens)


def too_small(where: str, corpus_tokens: int, val_tokens: int, fresh_tokens: int) -> BadInput:
    """The one sentence for a corpus that cannot hold its validation set and a run's fresh
    tokens: what each needs, what the corpus holds, and what to change. fresh_tokens ≤ 1
    means the runs' D is not known here."""
    needs = f"validation needs data.val_tokens={val_tokens} tokens"
    if fresh_tokens > 1:
        needs += f" and the largest run's fresh_tokens={fresh_tokens} more"
    room = corpus_tokens - max(fresh_tokens, 1)  # tokens validation could have
    fit = 0  # the largest power of two below val_tokens that leaves room, with slack
    if room > SMALLEST_VAL_TOKENS and val_tokens > SMALLEST_VAL_TOKENS:
        fit = 1 << int(math.log2(min(room / HOLDOUT_MARGIN, val_tokens - 1)))
    if fit >= SMALLEST_VAL_TOKENS:
        fix = f"set [data] val_tokens = {fit} (or fewer) or use a larger corpus"
    else:
        fix = "use a larger corpus or fewer fresh tokens"
    return BadInput(f"{where} is too small: {needs}, but it holds about {corpus_tokens}; {fix}")
