"""Which runs may train together, and how many at once (docs/packing.md). Torch-free: the
sweep's scheduler and dry run group runs with it without importing the trainer.

    pack_key(cfg)                 runs with equal keys can share a pack (cdlaw.train.packable)
    parse_pack("auto" | "8")      the --pack option: "auto" or a pack size ≥ 1
    Packing                       a sweep's pack size per key (cdlaw.sweep.pack.size)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from cdlaw.config import RunConfig
from cdlaw.system.errors import BadInput
from cdlaw.train.packable import pack_key

# A pack hands its unfinished runs back to the scheduler this often, to be packed again
# with the runs that became ready meanwhile (a branch whose fork checkpoint now exists).
# Re-forming costs each run a checkpoint save and load, a model build and its stream's
# setup: about 40 ms for a 200K-parameter run on a 2-core CPU, ~1% of this interval.
PACK_PAUSE_S = 30.0


@dataclass(frozen=True)
class Packing:
    """How a sweep packs: the most runs per pack, per pack_key (absent: 1, alone)."""

    sizes: dict[tuple, int] = field(default_factory=dict)
    pause_s: float | None = PACK_PAUSE_S
    # --pack auto: seconds of one step of a run alone, per pack_key (measured); the
    # scheduler weighs work in time with them (a 20K step is not a 200K step's FLOPs/10)
    step_seconds: dict[tuple, float] = field(default_factory=dict)
    # --pack auto: the measured (pack size, total tokens/s over runs alone) per pack_key
    gains: dict[tuple, tuple[tuple[int, float], ...]] = field(default_factory=dict)

    def size(self, cfg: RunConfig) -> int:
        return self.sizes.get(pack_key(cfg), 1)

    def gain(self, cfg: RunConfig, k: int) -> float:
        """The measured gain of a pack of k runs of cfg's shape, linear between the measured
        sizes (the nearest beyond them; 1 where nothing was measured)."""
        points = sorted(self.gains.get(pack_key(cfg), ()))
        if not points:
            return 1.0
        for (k0, g0), (k1, g1) in itertools.pairwise(points):
            if k0 <= k <= k1:
                return g0 + (g1 - g0) * (k - k0) / (k1 - k0)
        return points[0][1] if k < points[0][0] else points[-1][1]


def parse_pack(text: str) -> str | int:
    """--pack: "auto", or a pack size ≥ 1 (1: every run alone)."""
    if text == "auto":
        return text
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1 or str(size) != text.strip():
        raise BadInput(f"--pack {text}: give auto or a pack size of 1 or more (1: no packing)")
    return size
