"""Build each run's exact token stream from a prepared corpus (docs/names.md, docs/corpus.md).

Streams (what the trainer reads, front to back):
  none         the first D tokens F[:D] of the training documents (whole documents in
               their shuffled order, the global fresh order F; the last one cut to hit D
               exactly).
  repetition   F[:D], then epochs 2, 3, … of the same D tokens, each in a new seeded order
               of seq_len-sized sequences (the short remainder last), until exactly D′ more
               tokens; the last epoch may be partial.
  paraphrase   F[:D], then paraphrase passes 1, 2, … of the documents that lie wholly
               inside D, each pass cut into seq_len sequences in a seeded order of its own
               (the short remainder last), until exactly D′ more tokens; the last pass may
               be partial.
  any other    the same, with the passes of the strategy's derived files (self-distilled
               text, synthetic rewrites: [derived.<name>] files) in place of paraphrases.
Counts are exact: the stream holds exactly D + D′ tokens, D′ of them derived.

Streams nest. Every stream starts with F[:D], and F does not depend on D or the seed. The
order of epoch or pass k depends only on (seed, tag, k) and on the tokens it reorders (F[:D],
or pass k of the documents inside D), never on D′, so for one D and seed a run with a
smaller D′ reads exactly a prefix of the stream of a run with a larger one.
`shared_prefix` says, from configs alone, how many leading tokens two runs share.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cdlaw.config import RunConfig
from cdlaw.data.tokens.cache import DerivedSource, PreparedCorpus
from cdlaw.data.tokens.prepare import (
    MAX_DERIVED_PASSES,
    derived_pass_parts,
    docs_inside,
    prepare_corpus,
    prepare_derived,
    too_short_for_derived,
    train_blocks,
)
from cdlaw.data.tokens.streams import TokenStream
from cdlaw.strategies import NONE, PARAPHRASE, REPETITION, check_name
from cdlaw.system.errors import BadInput

# Seed streams, so no two uses share numbers (files/corpus.py: 11). 13 was the mixed
# paraphrase order of stream order 1; it is retired, not reused.
REPEAT_TAG, PASS_TAG = 12, 14

# The version of the rules above that turn (corpus, strategy, D, D′, seq_len, seed) into a
# token stream. Bump it whenever the same config would read different tokens or a different
# order, so runs trained on an older order can be told apart (info["stream_order"]).
#   1: paraphrase sequences (fresh and derived) mixed in one seeded order.
#   2: paraphrase streams are F[:D], then passes 1, 2, … each in its own seeded order, so
#      they nest in D′ like repetition epochs; none and repetition are unchanged.
STREAM_ORDER_VERSION = 2


class _Concat:
    """Several arrays read as one; a slice of it is one or more slices of the arrays."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = [a for a in arrays if len(a)]
        self.offsets = np.concatenate([[0], np.cumsum([len(a) for a in self.arrays])]).astype(
            np.int64
        )
        self.n = int(self.offsets[-1])

    def columns(self, starts, stops) -> tuple[np.ndarray, ...]:
        """Slices [starts[i], stops[i]) as (array index, start, stop, i) columns, in order.

        Vectorised: a run at paper scale slices millions of sequences. A slice that spans
        two arrays (a sequence across a block boundary) becomes two rows; an empty one none.
        """
        starts, stops = np.asarray(starts, np.int64), np.asarray(stops, np.int64)
        kept = np.flatnonzero(starts < stops)
        starts, stops = starts[kept], stops[kept]
        first = np.searchsorted(self.offsets, starts, side="right") - 1
        last = np.searchsorted(self.offsets, stops - 1, side="right") - 1
        counts = last - first + 1
        row = np.repeat(np.arange(len(starts)), counts)
        array = first[row] + (np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts))
        lo = np.maximum(starts[row], self.offsets[array])
        hi = np.minimum(stops[row], self.offsets[array + 1])
        return array, lo - self.offsets[array], hi - self.offsets[array], kept[row]


class _StreamBuilder:
    """Appends slices of one or more _Concats, in order, then makes the TokenStream."""

    def __init__(self, *sources: _Concat):
        self.arrays: list[np.ndarray] = []
        self.base: dict[int, int] = {}
        for c in sources:
            self.base[id(c)] = len(self.arrays)
            self.arrays += c.arrays
        self.parts: list[tuple] = []

    def add(self, source: _Concat, starts, stops, derived: bool) -> None:
        self.parts.append(self._rows(source, starts, stops, derived)[0])

    def _rows(self, source: _Concat, starts, stops, derived: bool):
        """(array, start, stop, derived) columns of the slices, and each row's slice index."""
        array, lo, hi, i = source.columns(starts, stops)
        return (array + self.base[id(source)], lo, hi, np.full(len(array), derived)), i

    def stream(self, info: dict) -> TokenStream:
        columns = [np.concatenate([p[i] for p in self.parts]) for i in range(4)]
        array, start, stop, derived = columns
        return TokenStream.from_columns(self.arrays, array, start, stop, derived, info=info)


def _sequences(n: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets of the full seq_len sequences of n tokens, and the remainder (lo, hi)."""
    full = n // seq_len
    return np.arange(full, dtype=np.int64) * seq_len, np.array([full * seq_len, n])


def _shuffled_sequences(n: int, seq_len: int, seed: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The (starts, stops) of n tokens cut into seq_len sequences, in the order seeded by
    `seed`, the short remainder last (empty when seq_len divides n)."""
    starts, (r0, r1) = _sequences(n, seq_len)
    perm = np.random.default_rng(seed).permutation(len(starts))
    return np.concatenate([starts[perm], [r0]]), np.concatenate([starts[perm] + seq_len, [r1]])


def _add_until(out: _StreamBuilder, source: _Concat, a, b, left: int, derived: bool) -> int:
    """Appends the slices [a_i, b_i), in order, cutting them to end after `left` tokens;
    returns the tokens appended."""
    lengths = b - a
    before = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    take = np.minimum(lengths, np.maximum(left - before, 0))
    out.add(source, a, a + take, derived)
    return int(take.sum())


def shared_prefix(a: tuple[str, int, int], b: tuple[str, int, int]) -> int:
    """Tokens at the start that the streams of runs a and b (each (strategy, D, D′), same
    data, seq_len and seed) are guaranteed to share. Pure: no corpus is read, so a dry run
    of a paper-scale sweep can plan WSD trunks and branches with it.

    The rule, from the streams above:
      * same strategy and same D: D + min(D′a, D′b). Both read F[:D], then epochs (or
        passes) 2, 3, … (1, 2, …) of the same tokens in orders seeded by (seed, k) alone, so
        the shorter stream is a prefix of the longer one. For `none` D′ = 0, so D.
      * otherwise: min(Da, Db). Every stream starts with F[:D], and F does not depend on D,
        so both start with F[:min D]. After that nothing is guaranteed: at D1 < D2 the
        smaller run goes on with a derived epoch or pass of F[:D1] (or ends), the other with
        F[D1:]; a repetition and a paraphrase run at one D part at token D; and paraphrase
        passes at different D paraphrase different documents.
    The two streams may agree by chance a little further (e.g. a sequence the permutations
    happen to put first); the rule never counts on it.
    """
    (sa, da, dpa), (sb, db, dpb) = a, b
    for strategy, d, dp in (a, b):
        if strategy != NONE:
            check_name(strategy, "strategy")
        if int(d) <= 0 or int(dp) < 0:
            raise BadInput(f"need D > 0 and D′ ≥ 0, got {d}, {dp}")
    if sa == sb and int(da) == int(db):
        return int(da) + min(int(dpa), int(dpb))
    return min(int(da), int(db))


def run_stream(
    prepared: PreparedCorpus,
    strategy: str,
    fresh_tokens: int,
    derived_tokens: int,
    seq_len: int,
    seed: int,
    derived_files: str = "",
) -> TokenStream:
    """The exact token stream of one run: fresh_tokens + derived_tokens tokens (see above).

    derived_files: the folder a strategy other than none, repetition and paraphrase reads
    its passes from (RunConfig.derived_files)."""
    D, Dp, L = int(fresh_tokens), int(derived_tokens), int(seq_len)
    if strategy != NONE:
        check_name(strategy, "strategy")
    if D <= 0 or Dp < 0 or L <= 0:
        raise BadInput(
            f"need fresh_tokens > 0, derived_tokens ≥ 0 and seq_len > 0, got {D}, {Dp}, {L}"
        )
    if (strategy == NONE) != (Dp == 0):
        raise BadInput(
            f"strategy {strategy!r} with derived_tokens={Dp}: use 'none' exactly when it is 0"
        )
    if seed < 0:
        raise BadInput(f"seed must be ≥ 0, got {seed}")
    if strategy != REPETITION and Dp > MAX_DERIVED_PASSES * D:
        raise BadInput(
            f"derived_tokens={Dp} is {Dp / D:.10g} {strategy} passes of fresh_tokens={D}, more "
            f"than the limit of {MAX_DERIVED_PASSES}; use derived_tokens ≤ {MAX_DERIVED_PASSES * D}"
        )
    blocks = train_blocks(prepared, D)
    arrays, start = [], 0
    for tokens, ends in blocks:  # the first D tokens: whole blocks, the last one cut
        arrays.append(tokens[: min(int(ends[-1]), D - start)])
        start += int(ends[-1])
    fresh = _Concat(arrays)
    info = {
        "corpus": prepared.name,
        "corpus_key": prepared.root.name,  # corpus_key(data): which tokens, exactly
        "strategy": strategy,
        "seq_len": L,
        "seed": seed,
        "epochs": 1.0,
        "paraphrase_passes": 0.0,
        "stream_order": STREAM_ORDER_VERSION,
    }
    if strategy in (NONE, REPETITION):
        out = _StreamBuilder(fresh)
        out.add(fresh, [0], [D], False)  # F[:D]: every stream starts with it
        left, epoch = Dp, 2
        while left > 0:  # repetition: epoch k's order depends on (seed, k), not on D′
            a, b = _shuffled_sequences(D, L, [seed, REPEAT_TAG, epoch])
            left -= _add_until(out, fresh, a, b, left, True)
            epoch += 1
        if strategy == REPETITION:
            info["epochs"] = (D + Dp) / D
        return out.stream(info)

    source = DerivedSource.of(prepared.data, strategy, derived_files)
    prepare_derived(prepared, source)  # files: tokenised once, then read from the cache
    return _derived_stream(prepared, source, blocks, fresh, Dp, info)


def _derived_stream(prepared, source: DerivedSource, blocks, fresh: _Concat, Dp: int, info):
    """F[:D], then passes 1, 2, … of `source`'s documents inside D until exactly D′ more
    tokens (paraphrase and every declared strategy)."""
    D, L, seed = fresh.n, info["seq_len"], info["seed"]
    n_docs = docs_inside(blocks, D)
    if not sum(n_docs):
        raise BadInput(too_short_for_derived(D, blocks, source))
    parts: list = []
    lengths: list[int] = []
    have, passes_used = 0, 0.0
    while have < Dp:  # each pass adds tokens (a pass lacking a document is refused)
        pass_parts = derived_pass_parts(prepared, blocks, n_docs, len(lengths) + 1, source)
        parts += pass_parts  # the whole pass: its order must not depend on D′
        lengths.append(sum(len(p) for p in pass_parts))
        passes_used += min(lengths[-1], Dp - have) / lengths[-1]
        have += lengths[-1]
    derived = _Concat(parts)
    out = _StreamBuilder(fresh, derived)
    out.add(fresh, [0], [D], False)  # F[:D], as for none
    left, offset = Dp, 0
    for k, n in enumerate(lengths, start=1):  # pass k's order: (seed, k) and its own tokens
        a, b = _shuffled_sequences(n, L, [seed, PASS_TAG, k])
        left -= _add_until(out, derived, offset + a, offset + b, left, True)
        offset += n
    passes = "paraphrase_passes" if source.strategy == PARAPHRASE else "derived_passes"
    info[passes] = Dp / D
    info[f"{passes}_used"] = passes_used  # whole passes + the share of the last
    info["fresh_documents"] = int(sum(n_docs))
    return out.stream(info)


def stream_for_run(cfg: RunConfig, cache_dir: Path) -> tuple[PreparedCorpus, TokenStream]:
    """The prepared corpus (with its validation tokens) and the exact stream run `cfg` reads."""
    prepared = prepare_corpus(cfg.data, Path(cache_dir), cfg.fresh_tokens)
    stream = run_stream(
        prepared,
        cfg.strategy,
        cfg.fresh_tokens,
        cfg.derived_tokens,
        seq_len=cfg.model.seq_len,
        seed=cfg.seed,
        derived_files=cfg.derived_files,
    )
    return prepared, stream
