"""The embedded corpus's tokens: its cache key, its BPE and validation set, and its
training blocks and paraphrase passes, built from world.py and render.py — those a
preparation asks for through the workers (`build_embedded_blocks`), any other on demand
(`build_embedded_block`), the same bytes either way."""

from __future__ import annotations

import dataclasses
import math
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cdlaw.data.embedded import render, world
from cdlaw.data.embedded.world import BLOCK_DOCS
from cdlaw.data.files.block_tokens import BlockDone, Workers, tokenise_blocks
from cdlaw.data.tokens import tokenizer
from cdlaw.data.tokens.cache import (
    CACHE_VERSION,
    PreparedCorpus,
    block_path,
    cache_lock,
    key_digest,
    meta_dtype,
    open_prepared,
    save_array,
    save_block,
    save_tokenizer,
    tokenizer_and_meta,
    tokenizer_key,
)
from cdlaw.strategies import PARAPHRASE
from cdlaw.system.atomic import write_json_atomic

if TYPE_CHECKING:  # workers import this module: not the config's law stack
    from cdlaw.config import DataConfig

# The version of the embedded corpus's generator (world.py, kinds.py,
# lexicon.py, render.py, the BPE of tokenizer.py, and this module): it is hashed into
# the cache key and every run's corpus_key. Bump it whenever the generated tokens change
# (a new template, word, name, sampling step or BPE setting), and record the new digest in
# tests/data/tokens/test_data_streams.py; a change that keeps the tokens (a comment, a refactor) keeps it.
GENERATOR_VERSION = 1
# A wave of training blocks is this much larger than the tokens per block so far say is
# enough: a block more now costs less than another wave's start (worker processes).
WAVE_SLACK = 1.05


@lru_cache(maxsize=4)
def cached_world(seed: int, options: world.WorldOptions) -> world.World:
    return world.build_world(seed, options)


def _embedded_key(data: DataConfig, options: world.WorldOptions) -> dict:
    return {
        "cache": CACHE_VERSION,
        "generator": GENERATOR_VERSION,
        "block_docs": BLOCK_DOCS,  # documents are sampled per block: it changes the corpus
        "corpus": "embedded",
        "seed": data.corpus_seed,
        "world": dataclasses.asdict(options),
    }


def _bpe_blocks(data: DataConfig) -> int:
    # The BPE learns from the first 8 documents per vocabulary entry (16K documents, ~700K
    # tokens, for the default 2,048): the corpus is regular, so that is plenty.
    return math.ceil(max(4096, 8 * data.vocab_size) / BLOCK_DOCS)


def embedded_digest(data: DataConfig, options: world.WorldOptions) -> str:
    """The embedded corpus's cache folder name: generator, options and tokenizer."""
    key = _embedded_key(data, options)
    return key_digest(
        {**key, "tokenizer": tokenizer_key(data, _bpe_blocks(data), GENERATOR_VERSION)}
    )


def prepare_embedded(data: DataConfig, cache_dir: Path, options) -> PreparedCorpus:
    """The embedded corpus's tokenizer and validation set, cached (blocks come later)."""
    n_bpe_blocks = _bpe_blocks(data)
    root = cache_dir / "data" / embedded_digest(data, options)
    val_path = root / f"val-{data.val_tokens}.npy"
    if not (root / "meta.json").is_file() or not val_path.is_file():
        with cache_lock(root):
            w = cached_world(data.corpus_seed, options)
            if not (root / "meta.json").is_file():
                if data.tokenizer == "bpe":
                    train_texts = (
                        render.render(w, d)
                        for b in range(n_bpe_blocks)
                        for d in world.documents(w, b, world.TRAIN_STREAM)
                    )
                    bpe = tokenizer.train_bpe(
                        train_texts, data.vocab_size, alphabet=tokenizer.ASCII
                    )
                    save_tokenizer(root, bpe)
                else:
                    shutil.copyfile(
                        tokenizer.tokenizer_file(data.tokenizer), root / "tokenizer.json"
                    )
                write_json_atomic(
                    root / "meta.json", _meta(data, root, f"embedded:seed{data.corpus_seed}")
                )
            if not val_path.is_file():
                tok, meta = tokenizer_and_meta(root)
                parts, have, b = [], 0, 0
                while have < data.val_tokens:
                    texts = [render.render(w, d) for d in world.documents(w, b, world.VAL_STREAM)]
                    tokens, _ = tokenizer.encode_documents(
                        tok, texts, meta["eos_id"], meta_dtype(meta)
                    )
                    parts.append(tokens)
                    have += len(tokens)
                    b += 1
                save_array(val_path, np.concatenate(parts)[: data.val_tokens])
    return open_prepared(data, root, train_tokens_available=0)


def build_embedded_block(pc: PreparedCorpus, block: int, k: int = 0) -> None:
    """Tokenise training block `block` (k = 0) or its paraphrase pass k, into the cache."""
    EmbeddedJob.of(pc, block, k).run()


@dataclass(frozen=True)
class EmbeddedJob:
    """Render and tokenise the embedded corpus's training block `block` (k = 0) or its
    paraphrase pass k into the block file `out` (a worker's job: block_tokens)."""

    root: str
    seed: int
    options: world.WorldOptions
    styles: tuple[tuple[str, float], ...]  # render.parse_styles of data.paraphrase_styles
    block: int
    k: int
    out: str

    @classmethod
    def of(cls, pc: PreparedCorpus, block: int, k: int) -> EmbeddedJob:
        options = world.WorldOptions.from_config(pc.data.world)
        styles = tuple(render.parse_styles(pc.data.paraphrase_styles)) if k else ()
        out = str(block_path(pc, block, k))
        return cls(str(pc.root), pc.data.corpus_seed, options, styles, block, k, out)

    def run(self) -> BlockDone:
        w = cached_world(self.seed, self.options)
        docs = world.documents(w, self.block, world.TRAIN_STREAM)
        if self.k == 0:
            texts = [render.render(w, d) for d in docs]
        else:
            texts = [render.render_paraphrase(w, d, self.k, list(self.styles))[1] for d in docs]
        tok, meta = tokenizer_and_meta(Path(self.root))
        tokens, ends = tokenizer.encode_documents(tok, texts, meta["eos_id"], meta_dtype(meta))
        save_block(Path(self.out), tokens, ends)
        text_bytes = sum(len(t.encode()) for t in texts)
        return BlockDone(
            len(texts),
            len(tokens),
            text_bytes,
            cached=False,
            derived=PARAPHRASE if self.k else "",
        )


def build_embedded_blocks(
    pc: PreparedCorpus, fresh_tokens: int, passes: int, workers: Workers | None = None
) -> None:
    """Build the training blocks that hold the first fresh_tokens tokens, and paraphrase
    passes 1…passes of those holding a document inside them, through `workers` (default: a
    process per core): the blocks build_embedded_block would make on demand, byte for byte.

    How many blocks hold fresh_tokens is known only once they are tokenised, so they are
    built in waves: one block, then as many as the tokens per block so far say are left
    (WAVE_SLACK more), until they hold enough.
    """
    workers = workers or Workers()
    progress = workers.progress
    firsts, sizes = _train_waves(pc, fresh_tokens, workers)
    starts = np.cumsum([0, *sizes])
    inside = [b for b, first in enumerate(firsts) if starts[b] + first <= fresh_tokens]
    todo = [(b, k) for b in inside for k in range(1, passes + 1)]
    total = len(todo) * BLOCK_DOCS
    if progress is not None:
        for b, k in todo:
            if block_path(pc, b, k).is_file():
                progress(BlockDone(BLOCK_DOCS, 0, 0, cached=True, derived=PARAPHRASE), total)
    _build(pc, todo, workers, None if progress is None else lambda d: progress(d, total))


def _train_waves(pc: PreparedCorpus, fresh_tokens: int, workers: Workers):
    """(each block's first document's tokens, each block's tokens) of the training blocks
    that hold fresh_tokens, those missing built a wave at a time."""
    firsts: list[int] = []
    sizes: list[int] = []
    have = built = 0  # tokens in sizes; blocks below `built` were built (and told) here
    progress = workers.progress
    while True:
        while have < fresh_tokens and (path := block_path(pc, len(sizes))).is_file():
            ends = np.load(path.with_suffix(".ends.npy"))
            firsts.append(int(ends[0]))
            sizes.append(int(ends[-1]))
            have += sizes[-1]
            if progress is not None and len(sizes) > built:
                progress(BlockDone(len(ends), sizes[-1], 0, cached=True), len(sizes) * BLOCK_DOCS)
        if have >= fresh_tokens:
            return firsts, sizes
        b = len(sizes)
        wave = math.ceil(WAVE_SLACK * (fresh_tokens - have) * b / have) if have else 1
        total = (b + wave) * BLOCK_DOCS
        on_block = None if progress is None else lambda d, t=total: progress(d, t)
        _build(pc, [(i, 0) for i in range(b, b + wave)], workers, on_block)
        built = b + wave


def _build(pc: PreparedCorpus, blocks: list[tuple[int, int]], workers: Workers, on_block) -> None:
    """Build the (block, pass) files not yet cached, under the cache lock."""
    if all(block_path(pc, b, k).is_file() for b, k in blocks):
        return
    with cache_lock(pc.root):
        jobs = [EmbeddedJob.of(pc, b, k) for b, k in blocks if not block_path(pc, b, k).is_file()]
        tokenise_blocks(jobs, workers, on_block or (lambda done: None))


def _meta(data: DataConfig, root: Path, name: str) -> dict:
    tok = tokenizer.load_tokenizer(root / "tokenizer.json")
    if data.tokenizer == "bpe":
        eos_id = tok.token_to_id(tokenizer.EOS)
    else:
        eos_id = tokenizer.find_eos(tok, tokenizer.tokenizer_file(data.tokenizer))
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    return {
        "kind": "embedded",
        "name": name,
        "vocab_size": vocab_size,
        "eos_id": int(eos_id),
        "dtype": np.dtype(tokenizer.token_dtype(vocab_size)).name,
    }
