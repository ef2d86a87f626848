"""The token cache of a prepared corpus: its folder layout, keys, locks and atomic
writes, and the PreparedCorpus that points at it.

The cache lives under `<cache_dir>/data/<key>/`, keyed by a content hash of everything
that decides its tokens (the corpus bytes, or the embedded generator's GENERATOR_VERSION,
options and seed; the tokenizer; and — for real corpora, whose split depends on it —
`data.val_tokens`):

    tokenizer.json          the trained BPE, or a copy of the given tokenizer
    meta.json               what the folder holds (written after the tokenizer and split)
    val-<val_tokens>.npy    the validation tokens
    train/bNNNNN.npy        training documents, BLOCK_DOCS per block, each ended by EOS,
    train/bNNNNN.ends.npy   and each document's end offset in the block
    para-<key>/pKKK/bNNNNN  paraphrase pass K of the same documents (same layout; a
                            document without that paraphrase has length 0)
    train_ids.json          real corpora: the training documents' ids, in order
    id_hash.npy             real corpora: every document's id hash, sorted, and
    id_train_pos.npy        its place in training order (-1: validation or a copy)
    .prepare/               real corpora, until meta.json: the document store and split

Every file is written atomically and is read memory-mapped, so the runs of a sweep share
one copy; builders hold a file lock, so two processes preparing at once build each file
once. embedded/corpus.py and files/corpus.py fill the cache; prepare.py reads it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cdlaw.data.embedded import render
from cdlaw.data.files import sources
from cdlaw.data.tokens import tokenizer
from cdlaw.strategies import PARAPHRASE
from cdlaw.system.atomic import write_atomic, write_text_atomic
from cdlaw.system.errors import BadInput

if TYPE_CHECKING:  # workers import this module: not the config's law stack
    from cdlaw.config import DataConfig

CACHE_VERSION = 1
LOCK_QUIET_SECONDS = 1.0  # a cache lock held longer than this is waited for aloud
log = logging.getLogger("cdlaw.data")
SCRATCH = ".prepare"  # a real corpus's document store and split, until its meta.json


@dataclass(frozen=True)
class PreparedCorpus:
    """A corpus ready for `run_stream`: tokenizer, validation tokens and the token cache."""

    name: str  # for the summary's `corpus` column, e.g. "embedded:seed0"
    vocab_size: int  # the tokenizer's real vocabulary size
    eos_id: int
    tokenizer_path: Path
    val_tokens: np.ndarray  # held-out fresh documents, the same for every run of a sweep
    train_tokens_available: int  # real corpora: all; embedded (unbounded): as many as built
    paraphrase_passes_available: int  # paraphrase passes that cover every document inside D
    data: DataConfig
    root: Path  # the cache folder holding this corpus's tokens


# ---------------------------------------------------------------------------------------
# Blocks: the cached, memory-mapped token arrays both kinds of corpus share
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DerivedSource:
    """Where a derived strategy's documents come from (docs/corpus.md, "Derived files").

    Either rendered paraphrases of the embedded corpus (`files` ""), or a folder of jsonl
    rows {"id", "pass", "text"[, "style"]} aligned to the training documents by id —
    paraphrase files, self-distilled text, any other — tokenised into the cache once per
    file content. `styles` keeps only rows of those styles (paraphrase files); None keeps
    every row. Build it with `of`.
    """

    strategy: str
    files: str = ""
    styles: tuple[str, ...] | None = None

    @classmethod
    def of(cls, data: DataConfig, strategy: str, derived_files: str = "") -> DerivedSource:
        """The source of a run's derived tokens: paraphrase reads data.paraphrases (what
        [derived.paraphrase] files declares; on the embedded corpus, renders them); any
        other strategy its own derived_files."""
        if strategy != PARAPHRASE:
            if not derived_files:
                raise BadInput(
                    f"strategy {strategy!r} has no derived files: declare them in the sweep "
                    f"with [derived.{strategy}] files = DIR"
                )
            return cls(strategy, derived_files)
        if data.corpus == "embedded":
            return cls(strategy)
        if not data.paraphrases:
            raise BadInput(
                f"strategy 'paraphrase' on {data.corpus!r} needs paraphrase files: declare "
                'them with [derived.paraphrase] files = "DIR", the --out folder of `cdlaw '
                "paraphrase`"
            )
        styles = [name for name, _ in render.parse_styles(data.paraphrase_styles, allowed=None)]
        return cls(strategy, data.paraphrases, tuple(styles))

    def describe(self) -> str:
        """How messages name it: "paraphrase files in 'DIR'"."""
        if not self.files:
            return "the embedded corpus's rendered paraphrases"
        what = "paraphrase files" if self.strategy == PARAPHRASE else "derived files"
        return f"{what} in {self.files!r}"

    def setting(self) -> str:
        """The sweep setting that names the files: "[derived.distill] files 'DIR'"."""
        return f"[derived.{self.strategy}] files {self.files!r}"

    def folder(self, root: Path, data: DataConfig) -> Path:
        """The cache folder of its passes: p001/, p002/, … of blocks, keyed by what decides
        the tokens (the rendered styles, or the files' content and the styles kept)."""
        if not self.files:
            styles = render.parse_styles(data.paraphrase_styles)
            return root / f"para-{key_digest({'styles': styles})}"
        cache_dir = root.parent.parent  # <cache_dir>/data/<key>
        fingerprint = sources.paraphrases_fingerprint(self.files, self.setting(), cache_dir)
        if self.styles is None:
            return root / f"derived-{key_digest({'files': fingerprint})}"
        return root / f"para-{key_digest({'files': fingerprint, 'styles': list(self.styles)})}"


def block_path(pc: PreparedCorpus, block: int, k: int = 0, source: DerivedSource | None = None):
    """Where training block `block` (k = 0) or its derived pass k of `source` is cached
    (default: the paraphrase source of pc.data)."""
    if k == 0:
        return pc.root / "train" / f"b{block:05d}.npy"
    source = source or DerivedSource.of(pc.data, PARAPHRASE)
    return source.folder(pc.root, pc.data) / f"p{k:03d}" / f"b{block:05d}.npy"


def load_block(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A cached block: its tokens (memory-mapped) and its documents' end offsets."""
    return np.load(path, mmap_mode="r"), np.load(path.with_suffix(".ends.npy"))


# ---------------------------------------------------------------------------------------
# Small helpers: keys, locks, atomic saves, metadata
# ---------------------------------------------------------------------------------------


def key_digest(obj) -> str:
    """A short stable hash of a JSON-able key: a cache folder's name."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


def tokenizer_key(data: DataConfig, bpe_blocks: int, bpe_version) -> dict:
    """The tokenizer's part of a cache key; bpe_version names the BPE trainer's version."""
    if data.tokenizer == "bpe":
        return {"bpe": bpe_version, "vocab_size": data.vocab_size, "blocks": bpe_blocks}
    from cdlaw.data.fingerprint import FileHashes

    # remembered by its stat (cdlaw.data.fingerprint): every run's cache key asks for it
    return {"file": FileHashes().file(tokenizer.tokenizer_file(data.tokenizer))}


@contextmanager
def cache_lock(root: Path):
    """Hold the file lock builders of a cache folder hold; a process that finds it held
    says once, on logger "cdlaw.data", that it waits for the other, then waits."""
    from filelock import FileLock, Timeout

    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(root / ".lock"))
    try:
        lock.acquire(timeout=LOCK_QUIET_SECONDS)
    except Timeout:
        log.info(
            "waiting for another process preparing the cache %s (it holds %s); this one "
            "goes on when that one is done",
            root,
            root / ".lock",
        )
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def save_array(path: Path, array: np.ndarray) -> None:
    """Write an .npy file atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.save(f, array)

    write_atomic(path, write)


def save_block(path: Path, tokens: np.ndarray, ends: np.ndarray) -> None:
    """Write a block's document ends, then its tokens (each atomically)."""
    save_array(path.with_suffix(".ends.npy"), ends)
    save_array(path, tokens)  # last: the tokens file's presence means the block is complete


def save_tokenizer(root: Path, tok) -> None:
    """Write a trained tokenizer into the cache folder atomically."""
    write_text_atomic(root / "tokenizer.json", tok.to_str())


def tokenizer_and_meta(root: Path):
    """The cache folder's tokenizer (loaded once per process) and its meta.json."""
    meta = json.loads((root / "meta.json").read_text())
    return load_tokenizer_once(str(root / "tokenizer.json")), meta


@lru_cache(maxsize=8)
def load_tokenizer_once(path: str):
    """The tokenizer file at path, loaded once per process."""
    return tokenizer.load_tokenizer(path)


def meta_dtype(meta: dict):
    """The token dtype meta.json names."""
    return np.dtype(meta["dtype"])


def open_prepared(data: DataConfig, root: Path, train_tokens_available: int) -> PreparedCorpus:
    """The PreparedCorpus of a cache folder whose meta.json and validation set exist."""
    meta = json.loads((root / "meta.json").read_text())
    return PreparedCorpus(
        name=meta["name"],
        vocab_size=meta["vocab_size"],
        eos_id=meta["eos_id"],
        tokenizer_path=root / "tokenizer.json",
        val_tokens=np.load(root / f"val-{data.val_tokens}.npy", mmap_mode="r"),
        train_tokens_available=train_tokens_available,
        paraphrase_passes_available=0,
        data=data,
        root=root,
    )
