"""Prepare a corpus once per sweep (`prepare_corpus`), name its tokens (`corpus_key`),
and read its training blocks and the passes of its derived strategies (paraphrases,
derived files: `prepare_derived`, `derived_pass_parts`; docs/names.md, docs/corpus.md);
ordering.py builds each run's token stream from them.

The cache (tokens/cache.py) is filled by embedded/corpus.py or files/corpus.py. The
embedded corpus is unbounded: its blocks (and paraphrase passes) are built on demand, as
far as a run needs. A real corpus is tokenised whole on first use, or ahead of a sweep by
`cdlaw prepare`, through the same `prepare_corpus`.
"""

from __future__ import annotations

import dataclasses
from itertools import count
from pathlib import Path

import numpy as np

from cdlaw.config import DataConfig
from cdlaw.data.derived import joined
from cdlaw.data.embedded import render, world
from cdlaw.data.embedded.corpus import (
    build_embedded_block,
    build_embedded_blocks,
    embedded_digest,
    prepare_embedded,
)
from cdlaw.data.files.block_tokens import Workers
from cdlaw.data.files.corpus import cheap_fingerprint, files_key, prepare_files, too_small
from cdlaw.data.tokens.cache import (
    DerivedSource,
    PreparedCorpus,
    block_path,
    cache_lock,
    key_digest,
    load_block,
)
from cdlaw.strategies import PARAPHRASE, files_command
from cdlaw.system.disk_full import disk_full_error, stop_when_full
from cdlaw.system.errors import BadInput

# The most passes (D′/D) a run of paraphrase or any other derived strategy but repetition
# may ask for. The embedded corpus renders any paraphrase pass on demand, so this only bounds
# a typo (D′/D = 2000 would render ~400 MB of tokens before failing); plan_sweep checks every
# cell against it before any work, and run_stream refuses a longer stream up front.
MAX_DERIVED_PASSES = 1000


def prepare_corpus(
    data: DataConfig,
    cache_dir: Path,
    fresh_tokens: int,
    paraphrase_passes: int = 0,
    workers: Workers | None = None,
) -> PreparedCorpus:
    """Tokenizer, validation set and the first `fresh_tokens` training tokens, cached.

    `workers` says how blocks are tokenised (default: a process per core;
    block_tokens.Workers); every way gives the same cache.

    With `paraphrase_passes` > 0 the paraphrase passes 1…K of the documents inside
    fresh_tokens are prepared too (run_stream builds any it still lacks for the embedded
    corpus). Raises BadInput for a bad corpus, or one too small for fresh_tokens plus
    validation, or paraphrase files that do not cover those documents; DiskFull (one
    sentence, the cache resumable) when the disk fills.
    """
    with _disk_full_said(f"writing the token cache of data.corpus {data.corpus!r}", cache_dir):
        return _prepare_corpus(data, cache_dir, fresh_tokens, paraphrase_passes, workers)


def _prepare_corpus(data, cache_dir, fresh_tokens, paraphrase_passes, workers) -> PreparedCorpus:
    fresh_tokens, paraphrase_passes = int(fresh_tokens), int(paraphrase_passes)
    if fresh_tokens <= 0:
        raise BadInput(f"fresh_tokens must be positive, got {fresh_tokens}")
    if paraphrase_passes < 0:
        raise BadInput(f"paraphrase_passes must be ≥ 0, got {paraphrase_passes}")
    if data.corpus_seed < 0:
        raise BadInput(f"data.corpus_seed must be ≥ 0, got {data.corpus_seed}")
    smallest = 128 if data.corpus == "embedded" else 257  # the BPE's bytes + end-of-text
    if data.tokenizer == "bpe" and data.vocab_size < smallest:
        raise BadInput(
            f"data.vocab_size must be at least {smallest} for the byte-level BPE of "
            f"{data.corpus!r}, got {data.vocab_size}"
        )
    if data.corpus == "embedded":
        options = world.WorldOptions.from_config(data.world)
        render.parse_styles(data.paraphrase_styles)
        if data.paraphrases:
            raise BadInput(
                "[derived.paraphrase] files is for real corpora: the embedded corpus renders "
                "its own paraphrases (choose them with data.paraphrase_styles)"
            )
        cache = prepare_embedded(data, Path(cache_dir), options)
        build_embedded_blocks(cache, fresh_tokens, paraphrase_passes, workers)
    else:
        if data.world:
            raise BadInput(f"data.world only applies to the embedded corpus, not {data.corpus!r}")
        cache = prepare_files(data, Path(cache_dir), fresh_tokens, workers)
    # `cache` reads the blocks; the corpus returned says what they hold
    blocks = train_blocks(cache, fresh_tokens)
    n_docs = docs_inside(blocks, fresh_tokens)
    if paraphrase_passes:
        source = DerivedSource.of(data, PARAPHRASE)
        if not sum(n_docs):
            raise BadInput(too_short_for_derived(fresh_tokens, blocks, source))
        for k in range(1, paraphrase_passes + 1):  # builds (embedded) or checks coverage (files)
            derived_pass_parts(cache, blocks, n_docs, k, source)
    return dataclasses.replace(
        cache,
        train_tokens_available=max(
            cache.train_tokens_available, sum(int(e[-1]) for _, e in blocks)
        ),
        paraphrase_passes_available=_paraphrase_passes_available(cache, n_docs),
    )


def prepare_derived(
    pc: PreparedCorpus, source: DerivedSource, workers: Workers | None = None
) -> None:
    """Tokenise the passes of a derived source's files into pc's cache (once per file
    content; a rendered source is built block by block as runs read it), a bucket of
    blocks per job of `workers` (default: a process per core). BadInput for a missing
    folder or a row whose id is no training document's."""
    if source.files:
        with _disk_full_said(f"tokenising the {source.describe()} into the cache", pc.root):
            joined.prepare_passes(pc.data, pc.root, source, workers)


def _disk_full_said(doing: str, folder: Path):
    """A full disk inside becomes DiskFull: one sentence naming the folder and `doing`."""
    return stop_when_full(lambda e: disk_full_error(e, doing, folder))


def corpus_key(data: DataConfig, cache_dir: Path | None = None) -> str | None:
    """The identity of the tokens a run with `data` trains on, without preparing them.

    The name of the corpus's cache folder: a digest of the generator's version and options
    (embedded) or of the corpus files, the split and the tokenizer. A run records it
    (result.json `corpus_key`), so a sweep can tell runs trained on other tokens from its
    own. None for a remote `hf:` dataset, whose fingerprint needs a download. The corpus
    files' hashes are remembered in cache_dir's fingerprint store (cdlaw.data.fingerprint).
    """
    if data.corpus == "embedded":
        return embedded_digest(data, world.WorldOptions.from_config(data.world))
    fingerprint = cheap_fingerprint(data, cache_dir)
    return None if fingerprint is None else key_digest(files_key(data, fingerprint))


# ---------------------------------------------------------------------------------------
# Training blocks and paraphrase passes, read from the cache
# ---------------------------------------------------------------------------------------


def _block(
    pc: PreparedCorpus, block: int, k: int = 0, source: DerivedSource | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Block `block` (of pass k of `source`), built first where the embedded corpus renders
    it; None if absent."""
    path = block_path(pc, block, k, source)
    rendered = k == 0 or source is None or not source.files
    if not path.is_file() and pc.data.corpus == "embedded" and rendered:
        with cache_lock(pc.root):
            if not path.is_file():
                build_embedded_block(pc, block, k)
    return load_block(path) if path.is_file() else None


def train_blocks(pc: PreparedCorpus, n_tokens: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The training blocks that hold the first n_tokens tokens (BadInput if too few)."""
    blocks: list[tuple[np.ndarray, np.ndarray]] = []
    have = 0
    while have < n_tokens:
        block = _block(pc, len(blocks))
        if block is None:  # a real corpus (the embedded one is unbounded), all of it read
            val = pc.data.val_tokens
            raise too_small(f"corpus {pc.name!r}", have + len(pc.val_tokens), val, n_tokens)
        blocks.append(block)
        have += int(block[1][-1])
    return blocks


def docs_inside(blocks, n_tokens: int) -> list[int]:
    """Per block, how many of its documents lie wholly inside the first n_tokens tokens."""
    out, start = [], 0
    for _, ends in blocks:
        out.append(int(np.searchsorted(ends, n_tokens - start, side="right")))
        start += int(ends[-1])
    return out


def derived_pass_parts(
    pc: PreparedCorpus, blocks, n_docs: list[int], k: int, source: DerivedSource
) -> list[np.ndarray]:
    """Pass k's derived tokens of the documents inside D, block by block (exact slices)."""
    parts = []
    for b, m in enumerate(n_docs):
        if m == 0:
            continue
        block, covered = _pass_block(pc, b, m, k, source)
        if block is None:
            raise BadInput(
                f"the {source.describe()} do not cover the documents in fresh_tokens: pass {k} "
                f"exists for {covered} of the {m} documents of block {b}"
                + (f" (styles {', '.join(source.styles)})" if source.styles else "")
                + f"; {_more_passes(source, k)}, or use fewer fresh or derived tokens"
            )
        parts.append(block[0][: int(block[1][m - 1])])
    return parts


def _pass_block(pc: PreparedCorpus, b: int, m: int, k: int, source: DerivedSource):
    """(block b of pass k, or None unless it has text for each of its first m documents;
    how many of those it has text for)."""
    block = _block(pc, b, k, source)
    if block is None:
        return None, 0
    covered = int((np.diff(block[1][:m], prepend=0) > 0).sum())
    return (block if covered == m else None), covered


def covering_passes(
    pc: PreparedCorpus, n_docs: list[int], source: DerivedSource, most: int | None = None
) -> int:
    """How many passes 1, 2, … of a source's files have text for every document inside D
    (`n_docs` per block, as docs_inside counts them), at most `most`: the passes a run of
    that D may read. Counts the pass folders in the cache; not for rendered paraphrases,
    which exist for any pass (asking would build them)."""
    folder = source.folder(pc.root, pc.data)
    on_disk = next(k for k in count() if not (folder / f"p{k + 1:03d}").is_dir())
    last = on_disk if most is None else min(on_disk, most)
    for k in range(1, last + 1):
        if any(_pass_block(pc, b, m, k, source)[0] is None for b, m in enumerate(n_docs) if m):
            return k - 1
    return last


def _more_passes(source: DerivedSource, k: int) -> str:
    return f"run `cdlaw {files_command(source.strategy)}` with --passes {k} or more"


def _paraphrase_passes_available(pc: PreparedCorpus, n_docs: list[int]) -> int:
    """The paraphrase passes that cover every document inside D (the embedded corpus
    renders any pass)."""
    if pc.data.corpus == "embedded":
        return MAX_DERIVED_PASSES
    if not pc.data.paraphrases or not sum(n_docs):
        return 0
    return covering_passes(pc, n_docs, DerivedSource.of(pc.data, PARAPHRASE))


def derived_tokens_available(
    pc: PreparedCorpus, fresh_tokens: int, source: DerivedSource
) -> tuple[int, int]:
    """(tokens, passes): the most D′ a run of `source` at D = fresh_tokens can have from
    files — the derived tokens of the documents wholly inside D, over the passes of the
    files that cover every one of them (at most MAX_DERIVED_PASSES).

    Reads the cache prepare_derived filled; not for rendered paraphrases, which exist for
    any pass (asking would build them). BadInput if D holds no whole document.
    """
    blocks = train_blocks(pc, fresh_tokens)
    n_docs = docs_inside(blocks, fresh_tokens)
    if not sum(n_docs):
        raise BadInput(too_short_for_derived(fresh_tokens, blocks, source))
    passes = covering_passes(pc, n_docs, source, MAX_DERIVED_PASSES)
    parts = (
        p for k in range(1, passes + 1) for p in derived_pass_parts(pc, blocks, n_docs, k, source)
    )
    return sum(len(p) for p in parts), passes


def too_short_for_derived(n_tokens: int, blocks, source: DerivedSource) -> str:
    first = int(blocks[0][1][0]) if blocks else 0
    return (
        f"fresh_tokens={n_tokens} holds no whole document (the first has {first} tokens): "
        f"{source.strategy} needs at least one, so use more fresh tokens"
    )
