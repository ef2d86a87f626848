"""One training step of a pack (cdlaw.train.packed_model's PackedModels), the one that
train_pack trains and `--pack auto` times (cdlaw.sweep.pack.calibration):

    norms = packed_step(models, x, y, PackStep(lrs, z_loss, n_targets, micro, amp), interval)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from cdlaw.train.packed_model import PackedModels


class PackStep(NamedTuple):
    """What one step of a pack trains with, beside its batches: each model's learning
    rate (K), z-loss coefficient and target count (K,) tensors on the device, the rows of
    a micro-batch, the autocast dtype (None: fp32), and the models with no target this
    step (left as they are)."""

    lrs: list[float]
    z_loss: torch.Tensor
    n_targets: torch.Tensor
    micro_rows: int
    amp: torch.dtype | None
    idle: Sequence[int] = ()


def packed_step(
    models: PackedModels,
    x: torch.Tensor,
    y: torch.Tensor,
    step: PackStep,
    interval: torch.Tensor,
    groups: Sequence[tuple[int, list[int] | None]] | None = None,
) -> torch.Tensor:
    """One training step of every model of `models` on inputs x and targets y (K, rows,
    seq): the forward and backward micro-batch by micro-batch (train_loss), each model's
    cross-entropy added to `interval` (K,) in place, then each model's clip and AdamW
    update (clip_grads, adamw_step) and the gradients zeroed. Returns the gradient norms
    before clipping (K,). `groups`: (rows, models) pairs, the first `rows` rows of the
    models listed (None: all) in one pass each; default all rows of all."""
    for rows, listed in [(x.shape[1], None)] if groups is None else groups:
        xs, ys, z_loss, n_targets = x[:, :rows], y[:, :rows], step.z_loss, step.n_targets
        if listed is not None:
            xs, ys, z_loss, n_targets = xs[listed], ys[listed], z_loss[listed], n_targets[listed]
        for i in range(0, xs.shape[1], step.micro_rows):
            xb = xs[:, i : i + step.micro_rows].to(models.device, non_blocking=True)
            yb = ys[:, i : i + step.micro_rows].to(models.device, non_blocking=True)
            loss, ce = models.train_loss(xb, yb, z_loss, n_targets, step.amp, listed)
            loss.backward()
            if listed is None:
                interval += ce
            else:
                interval[listed] += ce
    norms = models.clip_grads()
    models.adamw_step(step.lrs, step.idle)
    models.zero_grad()
    return norms
