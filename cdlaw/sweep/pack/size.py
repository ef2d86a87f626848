"""`--pack auto|K|1`: how many runs of one shape a pack holds (docs/packing.md).

    choose_packing(runs, pack, exec_cfg, jobs) -> (Packing | None, calibration rows)
    measure_gains(runs, packing, exec_cfg)     -> the measured gain of each shape's pack size
    chain_seconds(forest, runs, packing)       -> each run's chain of work in alone-seconds
    by_size(runs, packing, gains)              -> pack size and gain per model size label

Torch-free until `--pack auto` measures (cdlaw.sweep.pack.calibration).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cdlaw.config import ExecConfig, RunConfig
from cdlaw.shapes import LOGIT_BYTES, count_params, logits_held
from cdlaw.sweep.pack import groups as packed_groups
from cdlaw.sweep.pack.groups import Packing
from cdlaw.system.errors import BadInput
from cdlaw.train.packable import pack_key

PROBE_SIZES = (2, 4, 8, 16)  # packs timed by --pack auto (16: where the smallest flatten)
GOOD_ENOUGH = 0.9  # auto: the smallest pack within 10% of the best measured tokens/s
MEMORY_SHARE = 0.8  # of the memory available now, what packs may plan on (the rest: Python,
# the data streams, the allocator's slack)
GIB = 2**30


@dataclass(frozen=True)
class PackProbe:
    """A measured pack: its shape (n_params), size k, seconds per step and the gain in total
    tokens/s over one run alone."""

    n_params: int
    k: int
    seconds_per_step: float
    gain: float


def pack_bytes(cfg: RunConfig, k: int) -> int:
    """Estimated memory of a pack of k runs of cfg (fp32 training, as the packed trainer
    holds it; tests/train/test_train.py checks it against a measured pack of olmo3_14M).

    Per run: weights, gradients and AdamW's two moments in the pack's buffers, plus the
    run's own model and AdamW state for loading and saving, 28 bytes per parameter; and one
    micro-batch's activations, per token layers × (14·d_model + 4·mlp_hidden) values of 4
    bytes, plus the logits it holds at once (cdlaw.shapes.logits_held: one chunk's when the
    loss goes in chunks) at LOGIT_BYTES each (the logits and their softmax gradient).
    Attention keeps no seq_len² scores: torch's scaled_dot_product_attention runs a flash
    kernel on CPU as on GPU.
    """
    m, t = cfg.model, cfg.train
    n_total = count_params(m).n_params_total
    rows = t.micro_batch_size or t.batch_size
    tokens = rows * m.seq_len
    per_token = m.n_layers * (14 * m.d_model + 4 * m.mlp_hidden)
    logits = LOGIT_BYTES * logits_held(tokens, m.vocab_size)
    return k * (28 * n_total + 4 * tokens * per_token + logits)


def available_bytes(device: str) -> int:
    """Memory a pack may use on `device`: the GPU's free memory, or the host's available
    memory (/proc/meminfo's MemAvailable, else physical memory)."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def total_bytes(device: str) -> int:
    """All the memory of `device`: the GPU's, or the host's physical memory."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# pack_bytes counts fp32 training (28 bytes a parameter); bf16 mixed precision needs
# about half (16, and half the activations): check_fits refuses only a model that would not
# fit at half its estimate, sure to fail however it is trained.
FITS_MARGIN = 2.0


def check_fits(runs: list[RunConfig], device: str) -> None:
    """BadInput naming the largest model among `runs` when training it alone needs more
    than FITS_MARGIN times the memory `device` has in all (pack_bytes of one run): it could
    only be killed for memory, after its corpus is prepared (a size of "1T" is a valid
    name)."""
    if not runs:
        return
    worst = max(runs, key=lambda c: pack_bytes(c, 1))
    need, have = pack_bytes(worst, 1), total_bytes(device)
    if need > FITS_MARGIN * have:
        raise BadInput(
            f"the {_model_label(worst)} model needs about {need / GIB:,.1f} GiB to train "
            f"(weights, gradients, AdamW state and one micro-batch's activations), more than "
            f"the {have / GIB:,.1f} GiB of {device} here: train it where there is more "
            "(--executor ray, a GPU), or leave that size out"
        )


def choose_packing(
    runs: list[RunConfig],
    pack: str | int,
    exec_cfg: ExecConfig,
    sharing: int,
    budget_bytes: int | None = None,
) -> tuple[Packing | None, list[PackProbe]]:
    """The pack size of each shape among `runs` (those still to train), and for auto the
    probes it measured. `sharing` packs train at once on this device and share its
    `budget_bytes` (default: MEMORY_SHARE of what `exec_cfg.device` has available): the
    local jobs on one device (executors.packs_per_device), or a Ray task's node share."""
    if pack == 1 or not runs:
        return None, []
    by_key: dict[tuple, list[RunConfig]] = {}
    for cfg in runs:
        by_key.setdefault(pack_key(cfg), []).append(cfg)
    if budget_bytes is None:
        budget_bytes = int(MEMORY_SHARE * available_bytes(exec_cfg.device))
    per_job = budget_bytes // max(1, sharing)
    sizes, probes = {}, []
    for key, members in by_key.items():
        cfg = members[0]
        fits = per_job // max(1, pack_bytes(cfg, 1))
        if isinstance(pack, int):
            if pack > fits:
                raise BadInput(
                    f"--pack {pack}: a pack of {pack} runs of the {_model_label(cfg)} model needs about "
                    f"{pack_bytes(cfg, pack) / GIB:.1f} GiB, more than the "
                    f"{per_job / GIB:.1f} GiB each of {sharing} job(s) on this device has; "
                    f"use --pack {max(1, fits)} or --pack auto"
                )
            sizes[key] = pack
            continue
        most = min(len(members), max(1, fits))
        measured = _probe(cfg, most, exec_cfg)
        probes += measured
        sizes[key] = pick_size(measured)
    sizes = {k: s for k, s in sizes.items() if s > 1}
    if not sizes:
        return None, probes
    alone, gains = {}, {}
    for key, members in by_key.items():
        n = count_params(members[0].model).n_params
        mine = [p for p in probes if p.n_params == n]  # none with --pack K: not measured
        alone.update({key: p.seconds_per_step for p in mine if p.k == 1})  # noqa: B035
        if mine:
            gains[key] = tuple((p.k, p.gain) for p in mine)
    pause = packed_groups.PACK_PAUSE_S
    return Packing(sizes, pause_s=pause, step_seconds=alone, gains=gains), probes


def pick_size(probes: list[PackProbe]) -> int:
    """The smallest measured pack within GOOD_ENOUGH of the best total tokens/s (a run
    alone counts as the pack of 1, gain 1): bigger packs cost memory and slow each run.
    Small models gain most: their step is overhead that a pack pays once."""
    best = max(p.gain for p in probes)
    return min(p.k for p in probes if p.gain >= GOOD_ENOUGH * best)


def _probe(cfg: RunConfig, most: int, exec_cfg: ExecConfig) -> list[PackProbe]:
    """Packs of PROBE_SIZES runs (and `most`) against one run alone (train_run's step)."""
    from cdlaw.sweep.pack.calibration import alone_step_seconds, pack_step_seconds

    ks = sorted(
        {k for k in PROBE_SIZES if k <= most} | ({most} if most < PROBE_SIZES[-1] else set())
    )
    n = count_params(cfg.model).n_params
    alone = alone_step_seconds(cfg, exec_cfg)
    probes = [PackProbe(n, 1, alone, 1.0)]
    for k in ks:
        if k > 1:
            seconds = pack_step_seconds(cfg, k, exec_cfg)
            probes.append(PackProbe(n, k, seconds, k * alone / seconds))
    return probes


def _model_label(cfg: RunConfig) -> str:
    return cfg.model.size or f"{count_params(cfg.model).n_params:,}-parameter"


def measure_gains(
    runs: list[RunConfig], packing: Packing, exec_cfg: ExecConfig, probes=()
) -> dict[tuple, float]:
    """{pack_key: total tokens/s of a full pack over one run alone}, from `probes` where
    they measured that size (auto), else measured now (a pack of 1 and one of that size)."""
    gains: dict[tuple, float] = {}
    for cfg in runs:
        key, k = pack_key(cfg), packing.size(cfg)
        if key in gains:
            continue
        n = count_params(cfg.model).n_params
        known = [p.gain for p in probes if p.n_params == n and p.k == k]
        if k == 1:
            gains[key] = 1.0
        elif known:
            gains[key] = known[0]
        else:
            from cdlaw.sweep.pack.calibration import alone_step_seconds, pack_step_seconds

            alone, packed = alone_step_seconds(cfg, exec_cfg), pack_step_seconds(cfg, k, exec_cfg)
            gains[key] = k * alone / packed
    return gains


def chain_seconds(forest, runs: list[RunConfig], packing: Packing) -> dict[str, float]:
    """forest.critical (FLOPs on the longest chain of work from each run) in seconds of
    runs alone, from the measured step times: a chain stays within one model shape, and a
    20K model's step is not a tenth of a 200K one's in time. FLOPs when a shape was not
    measured (an explicit --pack K)."""
    if any(pack_key(cfg) not in packing.step_seconds for cfg in runs):
        return dict(forest.critical)
    out = {}
    for cfg in runs:
        rid = cfg.run_id
        step_flops = forest.alone_flops[rid] / cfg.tokens_trained * _batch_tokens(cfg)
        out[rid] = forest.critical[rid] * packing.step_seconds[pack_key(cfg)] / step_flops
    return out


def _batch_tokens(cfg: RunConfig) -> int:
    return cfg.train.batch_size * cfg.model.seq_len


def by_size(
    runs: list[RunConfig], packing: Packing, gains: dict[tuple, float] | None = None
) -> tuple[dict[str, int], dict[str, float]]:
    """({model size label: most runs per pack}, {label: gain of such a pack}) for display;
    `gains` per pack_key (measure_gains), else what --pack auto measured (none for K)."""
    sizes, by_label = {}, {}
    for cfg in runs:
        key, label = pack_key(cfg), cfg.model.size or f"{count_params(cfg.model).n_params:,}"
        sizes[label] = packing.size(cfg)
        if gains is not None:
            by_label[label] = gains[key]
        elif key in packing.gains:
            by_label[label] = packing.gain(cfg, sizes[label])
    return sizes, by_label
