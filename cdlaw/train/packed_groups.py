"""Which runs may train together, and in which packs (docs/packing.md). Torch-free: the
sweep's scheduler and dry run group runs with it without importing the trainer.

    pack_key(cfg)                 runs with equal keys can share a pack
    parse_pack("auto" | "8")      the --pack option: "auto" or a pack size ≥ 1
    choose_packs(cfgs, size)      the runs in packs of at most `size`, each of one key
"""

from __future__ import annotations

from cdlaw.config import RunConfig
from cdlaw.errors import BadInput


def pack_key(cfg: RunConfig) -> tuple:
    """One model shape (d_model, layers, heads, MLP width, vocab, seq_len), one batch layout
    (batch and micro-batch size), one AdamW β1, β2, ε: what a pack's runs must share."""
    t = cfg.train
    return (cfg.model, t.batch_size, t.micro_batch_size or t.batch_size, t.beta1, t.beta2, t.eps)


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


def choose_packs(cfgs: list[RunConfig], size: int) -> list[list[RunConfig]]:
    """The runs in packs of at most `size` runs of one pack_key, in the order given (the
    scheduler's priority order): each pack is headed by the first run not yet packed and
    filled with the next runs that share its key. Runs of similar priority (similar work)
    so train together and leave the pack at similar times."""
    if size < 1:
        raise BadInput(f"a pack holds at least one run, not {size}")
    packs: list[list[RunConfig]] = []
    open_pack: dict[tuple, list[RunConfig]] = {}
    for cfg in cfgs:
        key = pack_key(cfg)
        pack = open_pack.get(key)
        if pack is None or len(pack) == size:
            pack = open_pack[key] = []
            packs.append(pack)
        pack.append(cfg)
    return packs
