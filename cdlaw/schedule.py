"""The learning-rate schedule, torch-free: the trainer steps it, the sweep plans forks with it.

    lr_at(step, total_steps, train)   the lr of step `step` (0-based) of a run
    warmup_steps(total_steps, train)  steps of linear warmup
    decay_start(total_steps, train)   WSD: the first step of the decay (= total for cosine)
    logs_row(step, total_steps, train)      whether step `step` (1-based) writes a metrics row
    logged_steps(last, total_steps, train)  the steps up to `last` that wrote one

WSD (warmup–stable–decay; Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training
Beyond Fixed Training Durations", arXiv 2405.18392): linear warmup, the peak lr held, then
a linear decay over the last decay_frac of the steps. Before its decay starts a WSD run's
lr does not depend on its length when the warmup is fixed in steps (train.warmup_steps),
which is what lets runs of different lengths share the steps before a fork (docs/sweep.md).
"""

from __future__ import annotations

import math

from cdlaw.config import TrainConfig


def warmup_steps(total_steps: int, train: TrainConfig) -> int:
    """train.warmup_steps when set, else warmup_frac of the run's steps."""
    return train.warmup_steps or int(train.warmup_frac * total_steps)


def decay_start(total_steps: int, train: TrainConfig) -> int:
    """WSD: the first step whose lr is below the peak (never before warmup ends).

    Cosine decays from the end of warmup, so a cosine run has no stable phase to share:
    its decay_start is reported as total_steps only for the callers' convenience."""
    if train.schedule != "wsd":
        return total_steps
    warmup = warmup_steps(total_steps, train)
    return max(warmup, total_steps - max(1, round(train.decay_frac * total_steps)))


def lr_at(step: int, total_steps: int, train: TrainConfig) -> float:
    """Learning rate for step `step` (0-based) of `total_steps`.

    Linear warmup over the first warmup_steps (or warmup_frac of the steps) to the peak,
    then either cosine down to final_lr_frac·peak at the last step, or WSD: constant at the
    peak, and linear to final_lr_frac·peak over the last decay_frac of steps.
    """
    peak, final = train.lr, train.lr * train.final_lr_frac
    warmup = warmup_steps(total_steps, train)
    if step < warmup:
        return peak * (step + 1) / warmup
    last = total_steps - 1
    if train.schedule == "cosine":
        progress = min(1.0, (step - warmup) / max(1, last - warmup))
        return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))
    start = decay_start(total_steps, train)
    if step < start:
        return peak
    progress = min(1.0, (step - start + 1) / max(1, last - start + 1))
    return peak + (final - peak) * progress


def logs_row(step: int, total_steps: int, train: TrainConfig) -> bool:
    """Whether a run writes a metrics row after step `step` (1-based): the first, every
    log_every-th, every evaluation (eval_every-th) and the last."""
    evaluating = step % train.eval_every == 0 or step == total_steps
    return step == 1 or step % train.log_every == 0 or evaluating


def logged_steps(last: int, total_steps: int, train: TrainConfig) -> list[int]:
    """The steps up to `last` that wrote a metrics row: what metrics.parquet holds up to a
    checkpoint at step `last`."""
    return [s for s in range(1, last + 1) if logs_row(s, total_steps, train)]
