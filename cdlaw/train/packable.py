"""Which runs can train in one pack (docs/packing.md). Torch-free: the sweep's scheduler
groups runs with it, and the packed loop (cdlaw.train.packed_loop) refuses a pack without it.

    pack_key(cfg)   runs with equal keys can share a pack
"""

from __future__ import annotations

from cdlaw.config import RunConfig


def pack_key(cfg: RunConfig) -> tuple:
    """One model shape (d_model, layers, heads, MLP width, vocab, seq_len), one batch layout
    (batch and micro-batch size), one AdamW β1, β2, ε: what a pack's runs must share."""
    t = cfg.train
    return (cfg.model, t.batch_size, t.micro_batch_size or t.batch_size, t.beta1, t.beta2, t.eps)
