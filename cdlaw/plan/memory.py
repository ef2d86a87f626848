"""What a planned model costs to train: GPU memory and GPU hours (docs/plan.md).

Training state, per parameter, as OLMo-core trains with mixed precision (and as most
bf16 AdamW trainers do):

    weights     bf16                 2 bytes
    gradients   bf16                 2 bytes
    AdamW       fp32 master weights  4 bytes  + two fp32 moments 8 bytes
                                    ---------
                                    16 bytes per parameter (every parameter, embeddings too)

Activations are what one micro-batch keeps for the backward pass, with flash attention
(no seq_len² score matrix) and no activation checkpointing, in bf16. Per token and layer
an OLMo-style block (QK-norm, SwiGLU MLP of width m, norms on the sub-layer outputs) keeps

    attention: block input, q, k, v, q and k before QK-norm, attention output,
               output-projection result                         8·d_model values
    MLP:       block input, gate, up, silu(gate), silu(gate)·up,
               down-projection result                           2·d_model + 4·m values

and per token 4·d_model bytes more (the final norm's input and output). This is the usual accounting of
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, §4.1) redone for this block; it ignores the CUDA context and allocator
fragmentation (typically 1–3 GiB).

The logits are not per token: the LM head and its loss go through a micro-batch in
chunks (cdlaw.shapes.CHUNK_LOGITS, 2^24 logits at most at once), so a micro-batch holds
LOGIT_BYTES per logit of one chunk (cdlaw.shapes.logits_held), whatever its size: the
logits and the fp32 softmax gradient made from them. Whole, the logits would dominate
for small models: at a 100k vocabulary a micro-batch of 32 × 2048 tokens has 12 GiB of
them in bf16 alone.

GPU hours use the law's compute, 6·N·(D + D′), and also the same plus attention,
12·n_layers·d_model·seq_len FLOPs per token (docs/names.md), at the given peak FLOP/s and MFU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from cdlaw.shapes import LOGIT_BYTES, logits_held
from cdlaw.system.errors import BadInput

VOCAB_SIZE = 100278  # the CD paper's / OLMo's dolma2 tokenizer (docs/names.md)
SEQ_LEN = 4096
MICRO_BATCH = 1
MFU = 0.4  # a typical model-FLOPs utilisation for dense bf16 training on H100-class GPUs
BYTES_PER_PARAM = {"weights": 2, "gradients": 2, "optimizer": 12}
PRECISION = (
    "bf16 weights and gradients, fp32 AdamW master weights and two moments (16 bytes/param); "
    "bf16 activations, flash attention, no activation checkpointing"
)
# nanochat's rule (model_dim = depth · 64), used when cdlaw.shapes is not there to ask.
ASPECT_RATIO = 64
HEAD_DIM = 64
GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    d_model: int
    n_layers: int
    n_heads: int
    mlp_hidden: int
    source: str  # which rule produced it


def model_shape(n_params: float, vocab_size: int = VOCAB_SIZE) -> ModelShape:
    """An OLMo-style shape with about n_params non-embedding parameters (the LM head counts).

    Uses cdlaw.shapes (the sweep's own shape rule); below its smallest model, the
    aspect-ratio rule d_model = 64·n_layers, head dim 64, MLP width 4·d_model (OLMo-core's
    8/3·d_model with hidden_size_multiplier 1.5). Then a layer holds 4d² (attention) +
    12d² (SwiGLU) parameters, so N ≈ n_layers·16·d² + vocab·d = d³/4 + vocab·d, which
    lands within 10% of the CD paper's 190M, 370M and 600M (docs/names.md).
    """
    from cdlaw.shapes import shape_for_params

    try:
        s = shape_for_params(n_params, vocab_size=vocab_size)
        return ModelShape(
            int(s.d_model),
            int(s.n_layers),
            int(s.n_heads),
            int(s.mlp_hidden),
            "cdlaw.shapes ladder",
        )
    except (ValueError, BadInput):
        pass  # below the ladder's smallest model: the aspect-ratio rule still applies
    # Solve d³/4 + vocab·d = N for d (monotone), then round to whole layers of 64.
    lo, hi = 1.0, max(2.0, 2 * n_params ** (1 / 3) + 1)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid**3 / 4 + vocab_size * mid < n_params else (lo, mid)
    n_layers = max(1, round(lo / ASPECT_RATIO))
    d_model = ASPECT_RATIO * n_layers
    return ModelShape(
        d_model, n_layers, d_model // HEAD_DIM, 4 * d_model, "aspect ratio 64 (nanochat)"
    )


@dataclass(frozen=True)
class TrainingCost:
    """Memory for one GPU holding the whole model, and GPU hours for the whole run."""

    n_params: float  # non-embedding (docs/names.md)
    n_params_total: float  # plus the input embedding
    shape: ModelShape
    vocab_size: int
    seq_len: int
    micro_batch: int
    precision: str
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    total_gib: float
    gpu_memory_gib: float | None
    fits: bool | None
    # With weights, gradients and AdamW state sharded over k GPUs (FSDP / ZeRO-3), the
    # smallest k that fits; None when the activations alone do not fit on one GPU.
    min_gpus_sharded: int | None
    flops: float  # 6·N·(D + D′)
    flops_with_attention: float
    gpu_flops: float | None
    mfu: float | None
    gpu_hours: float | None
    gpu_hours_with_attention: float | None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = asdict(self.shape)
        return d


def activation_bytes(shape: ModelShape, vocab_size: int, tokens: int) -> float:
    """Bytes one micro-batch of `tokens` tokens keeps for the backward pass, its logits'
    chunk included (see the module docstring)."""
    per_layer = 2 * (10 * shape.d_model + 4 * shape.mlp_hidden)
    per_token = shape.n_layers * per_layer + 4 * shape.d_model
    return tokens * per_token + LOGIT_BYTES * logits_held(tokens, vocab_size)


def training_cost(
    n_params: float,
    tokens_trained: float,
    gpu_memory_gib: float | None = None,
    gpu_flops: float | None = None,
    mfu: float | None = None,
    seq_len: int = SEQ_LEN,
    micro_batch: int = MICRO_BATCH,
    vocab_size: int = VOCAB_SIZE,
) -> TrainingCost:
    """Memory of training an N-parameter model and GPU hours for tokens_trained tokens.

    GPU hours need gpu_flops (peak FLOP/s of one GPU, e.g. 989e12 for an H100 in dense
    bf16); mfu defaults to 0.4 then.
    """
    shape = model_shape(n_params, vocab_size)
    n_total = n_params + vocab_size * shape.d_model  # the input embedding
    weights, grads, optim = (n_total * BYTES_PER_PARAM[k] / GIB for k in BYTES_PER_PARAM)
    acts = activation_bytes(shape, vocab_size, seq_len * micro_batch) / GIB
    total = weights + grads + optim + acts
    fits = min_gpus = None
    if gpu_memory_gib is not None:
        fits = total <= gpu_memory_gib
        room = gpu_memory_gib - acts
        min_gpus = math.ceil((weights + grads + optim) / room) if room > 0 else None
    flops = 6 * n_params * tokens_trained
    flops_attn = flops + 12 * shape.n_layers * shape.d_model * seq_len * tokens_trained
    hours = hours_attn = None
    if gpu_flops is not None:
        mfu = MFU if mfu is None else mfu
        hours = flops / (gpu_flops * mfu) / 3600
        hours_attn = flops_attn / (gpu_flops * mfu) / 3600
    return TrainingCost(
        n_params=n_params,
        n_params_total=n_total,
        shape=shape,
        vocab_size=vocab_size,
        seq_len=seq_len,
        micro_batch=micro_batch,
        precision=PRECISION,
        weights_gib=weights,
        gradients_gib=grads,
        optimizer_gib=optim,
        activations_gib=acts,
        total_gib=total,
        gpu_memory_gib=gpu_memory_gib,
        fits=fits,
        min_gpus_sharded=min_gpus,
        flops=flops,
        flops_with_attention=flops_attn,
        gpu_flops=gpu_flops,
        mfu=mfu,
        gpu_hours=hours,
        gpu_hours_with_attention=hours_attn,
    )
