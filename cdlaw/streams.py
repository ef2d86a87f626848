"""The token stream a run trains on: an exact, ordered, randomly addressable sequence.

The data layer decides the order (fresh sequences, repeated epochs, paraphrase passes,
shuffled by seed) and describes it as a list of segments — slices of memory-mapped token
arrays. The trainer reads it front to back with `read(start, count)`; resuming at token t
is just `read(t, …)`. Nothing is copied until it is read, so a 60B-token stream costs a
table of segment offsets, not 60B tokens of memory.
"""

from __future__ import annotations

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
    """The concatenation of segments, in order.

    Attributes: n_tokens (= fresh_tokens + derived_tokens, exact), fresh_tokens,
    derived_tokens, and `info` (free-form facts the data layer wants logged, e.g. epochs).
    """

    def __init__(self, segments: list[Segment], info: dict | None = None):
        self.segments = [s for s in segments if len(s) > 0]
        lengths = np.array([len(s) for s in self.segments], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])  # offsets[i] = start of segment i
        self.n_tokens = int(self.offsets[-1])
        self.derived_tokens = int(sum(len(s) for s in self.segments if s.derived))
        self.fresh_tokens = self.n_tokens - self.derived_tokens
        self.info = dict(info or {})

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
            seg = self.segments[i]
            a = seg.start + (pos - int(self.offsets[i]))
            b = seg.start + min(stop - int(self.offsets[i]), len(seg))
            parts.append(np.asarray(seg.tokens[a:b], dtype=np.int64))
            pos += b - a
            i += 1
        return np.concatenate(parts)

    def derived_mask(self, start: int, count: int) -> np.ndarray:
        """For each token of read(start, count): is it a derived token? (for logging epochs)."""
        stop = min(start + count, self.n_tokens)
        out = np.zeros(max(stop - start, 0), dtype=bool)
        for i, seg in enumerate(self.segments):
            lo, hi = max(int(self.offsets[i]), start), min(int(self.offsets[i + 1]), stop)
            if seg.derived and lo < hi:
                out[lo - start : hi - start] = True
        return out


def array_stream(tokens: np.ndarray) -> TokenStream:
    """A stream of plain fresh tokens (handy for tests and for one-pass training)."""
    return TokenStream([Segment(np.asarray(tokens), 0, len(tokens))])
