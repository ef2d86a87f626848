"""The embedded corpus's tokens: its cache key, its BPE and validation set, and its
training blocks and paraphrase passes, built on demand from world.py and render.py."""

from __future__ import annotations

import dataclasses
import math
import shutil
from functools import lru_cache
from pathlib import Path

import numpy as np

from cdlaw.atomic import write_json_atomic
from cdlaw.config import DataConfig
from cdlaw.data import render, tokenizer, world
from cdlaw.data.corpus_cache import (
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
from cdlaw.data.world import BLOCK_DOCS

# The version of the embedded corpus's generator (world.py, world_kinds.py,
# world_lexicon.py, render.py, the BPE of tokenizer.py, and this module): it is hashed into
# the cache key and every run's corpus_key. Bump it whenever the generated tokens change
# (a new template, word, name, sampling step or BPE setting), and record the new digest in
# tests/data/test_data_streams.py; a change that keeps the tokens (a comment, a refactor) keeps it.
GENERATOR_VERSION = 1


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
                    texts = (
                        render.render(w, d)
                        for b in range(n_bpe_blocks)
                        for d in world.documents(w, b, world.TRAIN_STREAM)
                    )
                    bpe = tokenizer.train_bpe(texts, data.vocab_size, alphabet=tokenizer.ASCII)
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
    options = world.WorldOptions.from_config(pc.data.world)
    w = cached_world(pc.data.corpus_seed, options)
    docs = world.documents(w, block, world.TRAIN_STREAM)
    if k == 0:
        texts = [render.render(w, d) for d in docs]
    else:
        styles = render.parse_styles(pc.data.paraphrase_styles)
        texts = [render.render_paraphrase(w, d, k, styles)[1] for d in docs]
    tok, meta = tokenizer_and_meta(pc.root)
    tokens, ends = tokenizer.encode_documents(tok, texts, meta["eos_id"], meta_dtype(meta))
    save_block(block_path(pc, block, k), tokens, ends)


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
