"""Build each run's exact token stream from a prepared corpus (docs/names.md, docs/corpus.md).

Streams (what the trainer reads, front to back):
  none         the first D tokens of the training documents (whole documents in their
               shuffled order; the last one cut to hit D exactly).
  repetition   those D tokens, then epochs 2, 3, … of the same D tokens, each in a new
               seeded order of seq_len-sized sequences (the short remainder last), until
               exactly D′ more tokens; the last epoch may be partial.
  paraphrase   the D fresh tokens and the first D′ tokens of paraphrase passes 1, 2, … of
               the documents that lie wholly inside D, cut into seq_len sequences and
               mixed in one seeded order (the two short remainders last).
Counts are exact: the stream holds exactly D + D′ tokens, D′ of them derived.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cdlaw.config import RunConfig
from cdlaw.data.corpus_cache import PreparedCorpus
from cdlaw.data.prepare import (
    MAX_PARAPHRASE_PASSES,
    docs_inside,
    paraphrase_pass_parts,
    prepare_corpus,
    too_short_for_paraphrase,
    train_blocks,
)
from cdlaw.data.streams import TokenStream
from cdlaw.errors import BadInput

REPEAT_TAG, MIX_TAG = 12, 13  # seed streams, so no two uses share numbers (file_corpus.py: 11)


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

    def add_interleaved(self, pieces) -> None:
        """pieces: (source, starts, stops, derived, positions); the slices of all pieces
        are placed in the order of their positions (a permutation shared by the pieces)."""
        cols, keys = [], []
        for source, starts, stops, derived, positions in pieces:
            rows, i = self._rows(source, starts, stops, derived)
            cols.append(rows)
            keys.append(np.asarray(positions, dtype=np.int64)[i])
        order = np.argsort(np.concatenate(keys), kind="stable")  # a split slice stays in order
        self.parts.append(tuple(np.concatenate([c[k] for c in cols])[order] for k in range(4)))

    def _rows(self, source: _Concat, starts, stops, derived: bool):
        """(array, start, stop, derived) columns of the slices, and each row's slice index."""
        array, lo, hi, i = source.columns(starts, stops)
        return (array + self.base[id(source)], lo, hi, np.full(len(array), derived)), i

    def stream(self, info: dict) -> TokenStream:
        columns = [np.concatenate([p[i] for p in self.parts]) for i in range(4)]
        return TokenStream.from_columns(self.arrays, *columns, info=info)


def _sequences(n: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets of the full seq_len sequences of n tokens, and the remainder (lo, hi)."""
    full = n // seq_len
    return np.arange(full, dtype=np.int64) * seq_len, np.array([full * seq_len, n])


def run_stream(
    prepared: PreparedCorpus,
    strategy: str,
    fresh_tokens: int,
    derived_tokens: int,
    seq_len: int,
    seed: int,
) -> TokenStream:
    """The exact token stream of one run: fresh_tokens + derived_tokens tokens (see above)."""
    D, Dp, L = int(fresh_tokens), int(derived_tokens), int(seq_len)
    if strategy not in ("none", "repetition", "paraphrase"):
        raise BadInput(f"strategy must be none, repetition or paraphrase, got {strategy!r}")
    if D <= 0 or Dp < 0 or L <= 0:
        raise BadInput(
            f"need fresh_tokens > 0, derived_tokens ≥ 0 and seq_len > 0, got {D}, {Dp}, {L}"
        )
    if (strategy == "none") != (Dp == 0):
        raise BadInput(
            f"strategy {strategy!r} with derived_tokens={Dp}: use 'none' exactly when it is 0"
        )
    if seed < 0:
        raise BadInput(f"seed must be ≥ 0, got {seed}")
    if strategy == "paraphrase" and Dp > MAX_PARAPHRASE_PASSES * D:
        raise BadInput(
            f"derived_tokens={Dp} is {Dp / D:.10g} paraphrase passes of fresh_tokens={D}, more "
            f"than the limit of {MAX_PARAPHRASE_PASSES}; use derived_tokens ≤ {MAX_PARAPHRASE_PASSES * D}"
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
    }
    if strategy == "none":
        out = _StreamBuilder(fresh)
        out.add(fresh, [0], [D], False)
        return out.stream(info)

    if strategy == "repetition":
        out = _StreamBuilder(fresh)
        out.add(fresh, [0], [D], False)
        starts, (r0, r1) = _sequences(D, L)
        left, epoch = Dp, 2
        while left > 0:
            perm = np.random.default_rng([seed, REPEAT_TAG, epoch]).permutation(len(starts))
            a = np.concatenate([starts[perm], [r0]])
            b = np.concatenate([starts[perm] + L, [r1]])
            take = np.minimum(
                b - a, np.maximum(left - np.concatenate([[0], np.cumsum(b - a)[:-1]]), 0)
            )
            out.add(fresh, a, a + take, True)
            left -= int(take.sum())
            epoch += 1
        info["epochs"] = (D + Dp) / D
        return out.stream(info)

    n_docs = docs_inside(blocks, D)
    if not sum(n_docs):
        raise BadInput(too_short_for_paraphrase(D, blocks))
    parts, have, k, passes_used = [], 0, 0, 0.0
    while have < Dp:  # each pass adds tokens (a pass lacking a document is refused)
        k += 1
        pass_parts = paraphrase_pass_parts(prepared, blocks, n_docs, k)
        pass_tokens = sum(len(p) for p in pass_parts)
        start = have
        for part in pass_parts:
            parts.append(part[: Dp - have])
            have += len(parts[-1])
            if have >= Dp:
                break
        passes_used += (have - start) / pass_tokens
    derived = _Concat(parts)
    f_starts, (f0, f1) = _sequences(D, L)
    d_starts, (d0, d1) = _sequences(Dp, L)
    order = np.random.default_rng([seed, MIX_TAG]).permutation(len(f_starts) + len(d_starts))
    out = _StreamBuilder(fresh, derived)
    is_derived = order >= len(f_starts)
    at_f, at_d = np.flatnonzero(~is_derived), np.flatnonzero(is_derived)
    f_seq, d_seq = f_starts[order[at_f]], d_starts[order[at_d] - len(f_starts)]
    out.add_interleaved(
        [(fresh, f_seq, f_seq + L, False, at_f), (derived, d_seq, d_seq + L, True, at_d)]
    )
    out.add(fresh, [f0], [f1], False)
    out.add(derived, [d0], [d1], True)
    info["paraphrase_passes"] = Dp / D
    info["paraphrase_passes_used"] = passes_used  # whole passes + the share of the last
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
    )
    return prepared, stream
