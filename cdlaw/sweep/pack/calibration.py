"""Time a packed training step on this device: what `--pack auto` chooses its pack size from.

pack_step_seconds(cfg, k, exec_cfg) -> seconds of one step of a pack of k runs of cfg's shape
alone_step_seconds(cfg, exec_cfg)   -> seconds of one step of the run alone (train_run's step)
pack_step(cfg, k, exec_cfg), alone_step(cfg, exec_cfg) -> those steps, to call yourself
"""

from __future__ import annotations

import time

import torch

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.train.model import build_model
from cdlaw.train.packed_model import PackedModels
from cdlaw.train.packed_step import PackStep, packed_step
from cdlaw.train.steps import autocast_dtype, make_optimizer, optimizer_step, resolve_device

WARMUP_STEPS = 2  # untimed first steps: allocation, kernel selection


def pack_step_seconds(
    cfg: RunConfig, k: int, exec_cfg: ExecConfig = ExecConfig(), steps: int = 7
) -> float:
    """Median seconds per step of a pack of `k` runs of cfg's model shape and batch."""
    return _median_seconds(pack_step(cfg, k, exec_cfg), exec_cfg, steps)


def alone_step_seconds(
    cfg: RunConfig, exec_cfg: ExecConfig = ExecConfig(), steps: int = 7
) -> float:
    """Median seconds per step of cfg trained alone: train_run's step (alone_step) on random
    tokens: the yardstick a pack is measured by."""
    return _median_seconds(alone_step(cfg, exec_cfg), exec_cfg, steps)


def pack_step(cfg: RunConfig, k: int, exec_cfg: ExecConfig = ExecConfig()):
    """A pack of k runs of cfg's shape, freshly built, and its step on random tokens:
    step() trains one step and returns each model's summed cross-entropy (k,).

    With the worker's thread count and precision, the step train_pack runs (packed_step):
    every micro-batch forward and backward, each run's clip and AdamW update (no files, no
    evaluation)."""
    device, amp, x, y = _setup(cfg, exec_cfg, k)
    train = cfg.train
    nets = [build_model(cfg.model, seed=i) for i in range(k)]
    pack = PackedModels(nets, [train] * k, device, exec_cfg.compile)
    settings = PackStep(
        lrs=[1e-4] * k,
        z_loss=torch.full((k,), train.z_loss, device=device),
        n_targets=torch.full((k,), float(y[0].numel()), device=device),
        micro_rows=train.micro_batch_size or x.shape[1],
        amp=amp,
    )

    def step() -> torch.Tensor:
        total = torch.zeros(k, device=device)
        packed_step(pack, x, y, settings, total)
        return total

    return step


def alone_step(cfg: RunConfig, exec_cfg: ExecConfig = ExecConfig()):
    """cfg's model, freshly built, and train_run's step on random tokens (optimizer_step,
    with --compile's compiled body as train_run builds it): step() trains one step and
    returns its summed cross-entropy."""
    device, amp, x, y = _setup(cfg, exec_cfg, 1)
    x, y = x[0], y[0]
    train = cfg.train
    net = build_model(cfg.model, seed=0).to(device)
    optimizer = make_optimizer(net, train, device)
    body = torch.compile(net.model) if exec_cfg.compile else net.model

    def step() -> torch.Tensor:
        total = torch.zeros((), device=device)
        micro = train.micro_batch_size or x.shape[0]
        optimizer_step(net, optimizer, x, y, y.numel(), train, micro, amp, total, body)
        return total

    return step


def _setup(cfg: RunConfig, exec_cfg: ExecConfig, k: int):
    """(device, autocast dtype, k batches of random token ids as inputs and targets)."""
    device = torch.device(resolve_device(exec_cfg.device))
    if exec_cfg.threads:
        torch.set_num_threads(exec_cfg.threads)
    amp = autocast_dtype(exec_cfg.precision, device, cfg.model.d_model)
    gen = torch.Generator().manual_seed(0)
    shape = (k, cfg.train.batch_size, cfg.model.seq_len)
    x = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)
    y = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)
    return device, amp, x, y


def _median_seconds(step, exec_cfg: ExecConfig, steps: int) -> float:
    """Median wall time of `steps` calls of step() after WARMUP_STEPS untimed ones."""
    device = torch.device(resolve_device(exec_cfg.device))
    times = []
    for i in range(WARMUP_STEPS + steps):
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]
