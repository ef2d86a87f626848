"""The token stream a run trains on: an exact, ordered, randomly addressable sequence.

The data layer decides the order (fresh sequences, repeated epochs, paraphrase passes,
shuffled by seed) and describes it as a list of segments — slices of memory-mapped token
arrays. The trainer reads it front to back with `read(start, count)`; resuming at token t
is just `read(t, …)`. Nothing is copied until it is read, so a 60B-token stream costs a
table of segment offsets, not 60B tokens of memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segment:
    """tokens[start:stop] of one array (usually a memory-mapped cache file)."""

    tokens: np.ndarray
    start: int
    stop: int
    derived: bool = False  # True for repeated or paraphrased tokens (they count towards D′)

    def __len__(self) -> int:
        return self.stop - self.start


class TokenStream:
    """The concatenation of segments, in order, held as columns.

    A run at paper scale has one segment per shuffled sequence (millions of them), so the
    segments are kept as numpy columns (source array, start, stop, derived, offset) over a
    short list of source arrays rather than as Segment objects: 29 bytes per segment.

    Attributes: n_tokens (= fresh_tokens + derived_tokens, exact), fresh_tokens,
    derived_tokens, and `info` (free-form facts the data layer wants logged, e.g. epochs).
    """

    def __init__(self, segments: Sequence[Segment] = (), info: dict | None = None):
        arrays: list[np.ndarray] = []
        index: dict[int, int] = {}
        rows = []
        for seg in segments:
            k = index.setdefault(id(seg.tokens), len(arrays))
            if k == len(arrays):
                arrays.append(seg.tokens)
            rows.append((k, seg.start, seg.stop, seg.derived))
        src, start, stop, derived = (
            (np.array(c) for c in zip(*rows, strict=True)) if rows else [()] * 4
        )
        self._set(arrays, src, start, stop, derived, info)

    @classmethod
    def from_columns(cls, arrays, src, start, stop, derived, info: dict | None = None):
        """Segment i is arrays[src[i]][start[i]:stop[i]], derived if derived[i]."""
        stream = cls.__new__(cls)
        stream._set(arrays, src, start, stop, derived, info)
        return stream

    def _set(self, arrays, src, start, stop, derived, info) -> None:
        src, start, stop = (np.asarray(c, dtype=np.int64) for c in (src, start, stop))
        derived = np.asarray(derived, dtype=bool)
        keep = stop > start  # empty segments are dropped
        self.arrays = list(arrays)
        self.src, self.start, self.stop = src[keep].astype(np.int32), start[keep], stop[keep]
        self.derived = derived[keep]
        lengths = self.stop - self.start
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.n_tokens = int(self.offsets[-1])
        self.derived_tokens = int(lengths[self.derived].sum())
        self.fresh_tokens = self.n_tokens - self.derived_tokens
        self.info = dict(info or {})

    @property
    def segments(self) -> list[Segment]:
        """The segments as objects (for tests and small streams)."""
        return [
            Segment(self.arrays[k], int(a), int(b), bool(d))
            for k, a, b, d in zip(self.src, self.start, self.stop, self.derived, strict=True)
        ]

    def __len__(self) -> int:
        return self.n_tokens

    def read(self, start: int, count: int) -> np.ndarray:
        """Tokens [start, start + count) of the stream as int64 (fewer at the end)."""
        if start < 0 or count < 0:
            raise ValueError(f"read({start}, {count}): start and count must be ≥ 0")
        stop = min(start + count, self.n_tokens)
        if start >= stop:
            return np.empty(0, dtype=np.int64)
        i = int(np.searchsorted(self.offsets, start, side="right")) - 1
        parts = []
        pos = start
        while pos < stop:
            base, seg_start = int(self.offsets[i]), int(self.start[i])
            a = seg_start + (pos - base)
            b = seg_start + min(stop - base, int(self.stop[i]) - seg_start)
            parts.append(np.asarray(self.arrays[self.src[i]][a:b], dtype=np.int64))
            pos += b - a
            i += 1
        return np.concatenate(parts)

    def derived_mask(self, start: int, count: int) -> np.ndarray:
        """For each token of read(start, count): is it a derived token? (for logging epochs)."""
        stop = min(start + count, self.n_tokens)
        out = np.zeros(max(stop - start, 0), dtype=bool)
        if start >= stop:
            return out
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        last = int(np.searchsorted(self.offsets, stop, side="left"))
        for i in range(first, last):  # only the segments that overlap the window
            lo, hi = max(int(self.offsets[i]), start), min(int(self.offsets[i + 1]), stop)
            if self.derived[i] and lo < hi:
                out[lo - start : hi - start] = True
        return out


def array_stream(tokens: np.ndarray) -> TokenStream:
    """A stream of plain fresh tokens (handy for tests and for one-pass training)."""
    return TokenStream([Segment(np.asarray(tokens), 0, len(tokens))])
