"""Model shapes: the size ladder, parameter counts and FLOPs per token (torch-free).

The model is OLMo 3 (transformers' Olmo3ForCausalLM): per layer, attention with q/k/v/o
projections of d_model × d_model (no grouped KV, no biases), QK-norm (an RMSNorm over all
heads of q and of k, d_model weights each), a SwiGLU MLP (gate, up, down), and the two
"reordered" RMSNorms that OLMo 2/3 put after each sublayer; then a final RMSNorm and an
untied LM head. So, with d = d_model, h = mlp_hidden, V = vocab_size, L = n_layers:

    per layer       4·d²  (attention)  +  3·d·h  (SwiGLU)  +  4·d  (q-norm, k-norm, 2 norms)
    n_params        L·(4·d² + 3·d·h + 4·d)  +  d  (final norm)  +  V·d  (LM head)
    n_params_total  n_params + V·d  (input embedding)

`n_params` is the law's N, docs/names.md: every parameter except the input embedding (the LM head
counts), as OLMo-core's `num_non_embedding_params` and the CD paper's N.

Two ways to get a shape:

* `named_shape("14M")` / `named_shape("olmo3_14M")`: the CD paper's seven OLMo 3 sizes,
  exactly as OLMo-core builds them (`TransformerConfig.olmo3_<size>`).
* `shape_for_params(target, vocab_size)`: any target size, by the ladder rule below.

The ladder rule (one rule, every size): d_model runs over multiples of 8 up to 128 and of
16 beyond; n_layers = max(2, round(d_model / 64)), the aspect ratio 64 of OLMo-core's 30M,
190M and 370M, with at least two layers; n_heads = the largest divisor of d_model not above
max(d_model / 64, min(8, d_model / 16)), i.e. head_dim ≈ 64 for wide models and eight heads
for narrow ones, as in the named 14M–100M; mlp_hidden = OLMo-core's SwiGLU width
int(8·d_model/3) rounded up to a multiple of 16 (OLMo-core rounds to 256, which would more
than double the MLP of a d_model-32 model). The shape whose n_params is nearest the target
in log space wins. Neighbouring shapes are a few % apart above 10M parameters and up to
~60% apart at the smallest sizes (where the LM head dominates and a layer is a big step):
a run records its exact n_params, which is what the law is fitted on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from cdlaw.system.errors import BadInput

OLMO3_VOCAB_SIZE = 100_278  # the CD paper's vocabulary (docs/names.md)

# Ladder rule constants (see the module docstring).
ASPECT_RATIO = 64  # d_model / n_layers
MIN_LAYERS = 2
MLP_MULTIPLE = 16


@dataclass(frozen=True)
class Shape:
    """The width and depth of an OLMo 3 model; the vocabulary comes from the tokenizer."""

    d_model: int
    n_layers: int
    n_heads: int
    mlp_hidden: int  # SwiGLU inner width

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def model_config(self, vocab_size: int, seq_len: int, size: str = ""):
        """This shape as a `cdlaw.config.ModelConfig` (rope_theta stays OLMo 3's 500,000)."""
        from cdlaw.config import ModelConfig

        return ModelConfig(
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            mlp_hidden=self.mlp_hidden,
            vocab_size=vocab_size,
            seq_len=seq_len,
            size=size,
        )


class ParamCount(NamedTuple):
    n_params: int  # all but the input embedding (the law's N, docs/names.md)
    n_params_total: int  # every parameter


# ---------------------------------------------------------------------------------------
# The CD paper's named sizes (OLMo-core olmo3_<size>).
# ---------------------------------------------------------------------------------------


def olmo_core_mlp_hidden(d_model: int, multiplier: float | None = None, multiple_of: int = 256):
    """OLMo-core's default SwiGLU width, exactly.

    From allenai/OLMo-core `src/olmo_core/nn/transformer/config.py`,
    `TransformerConfig.llama_like`: hidden = int(8·d_model/3); if a hidden_size_multiplier
    is given, hidden = int(multiplier·hidden); then `ensure_multiple_of(hidden, 256)`
    (`src/olmo_core/utils.py`: the next multiple up, of·ceil(x/of)).
    """
    hidden = int(8 * d_model / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


# name: (d_model, n_layers, n_heads, hidden_size_multiplier) from OLMo-core's olmo2_<size>,
# which its olmo3_<size> reuse (olmo3_600M overrides d_model to 1280). OLMo 3 adds sliding-
# window attention (window 4096 on 3 of every 4 layers); at sequence lengths ≤ 4096 that is
# the same as full attention, so the shape does not change.
NAMED_SIZES: dict[str, tuple[int, int, int, float | None]] = {
    "14M": (128, 4, 8, None),
    "30M": (256, 4, 8, None),
    "60M": (384, 8, 8, 1.5),
    "100M": (512, 12, 8, 1.5),
    "190M": (768, 12, 12, 1.5),
    "370M": (1024, 16, 16, 1.5),
    "600M": (1280, 16, 16, 1.5),
}


def named_shape(name: str) -> Shape:
    """One of the CD paper's seven OLMo 3 sizes: "14M" … "600M", or "olmo3_14M" …"""
    key = name.removeprefix("olmo3_").upper()
    if key not in NAMED_SIZES:
        valid = ", ".join(NAMED_SIZES)
        raise BadInput(
            f"unknown model size name {name!r}: valid names are {valid} (or olmo3_14M …)"
        )
    d_model, n_layers, n_heads, multiplier = NAMED_SIZES[key]
    return Shape(d_model, n_layers, n_heads, olmo_core_mlp_hidden(d_model, multiplier))


# ---------------------------------------------------------------------------------------
# Counts and FLOPs.
# ---------------------------------------------------------------------------------------


def count_params(shape, vocab_size: int | None = None) -> ParamCount:
    """(n_params, n_params_total) of an OLMo 3 model; see the module docstring for the count.

    `shape` is a Shape or a ModelConfig (anything with d_model, n_layers, mlp_hidden);
    vocab_size defaults to shape.vocab_size.
    """
    if vocab_size is None:
        if not hasattr(shape, "vocab_size"):
            raise TypeError("count_params(shape, vocab_size): a Shape needs a vocab_size")
        vocab_size = shape.vocab_size
    d, h, n_layers = shape.d_model, shape.mlp_hidden, shape.n_layers
    per_layer = 4 * d * d + 3 * d * h + 4 * d
    n_params = n_layers * per_layer + d + vocab_size * d
    return ParamCount(n_params, n_params + vocab_size * d)


def flops_per_token(n_params: float, n_layers: int = 0, d_model: int = 0, seq_len: int = 0):
    """Training FLOPs per token: 6·N (the law's compute, docs/names.md).

    With n_layers, d_model and seq_len given, adds attention's 12·n_layers·d_model·seq_len
    (the score and value matmuls, forward and backward, counted without the causal mask's
    saving, as in PaLM's and nanoGPT's MFU accounting).
    """
    return 6.0 * n_params + 12.0 * n_layers * d_model * seq_len


# ---------------------------------------------------------------------------------------
# The LM head's loss in chunks.
# ---------------------------------------------------------------------------------------

# The most logits (tokens × vocabulary values) a micro-batch's loss makes at once, per
# model. A micro-batch with more goes through the LM head and its loss in chunks of
# CHUNK_LOGITS // vocab tokens (cdlaw.train.steps.head_losses) and never holds its whole
# logits: 2^24 values are 64 MiB in fp32, where a micro-batch of 4 × 2048 tokens at a 32K
# vocabulary holds 1 GiB, and the gradient of its softmax as much again. At or below it the
# logits are made whole, as transformers' model makes them, and the numbers are those of a
# model that never chunks, bit for bit (chunked, the LM head's gradient is a sum over the
# chunks, which rounds its own way).
CHUNK_LOGITS = 2**24
# Bytes per logit held (logits_held), for memory estimates: an upper bound, two fp32 copies
# (the logits and the gradient of their softmax); bf16 logits and their fp32 copy take less.
LOGIT_BYTES = 8


def loss_chunk_tokens(n_tokens: int, vocab_size: int) -> int | None:
    """Tokens per chunk of the LM head and its loss, for a micro-batch of n_tokens tokens
    (of one model), or None when its logits are made whole (see CHUNK_LOGITS)."""
    if n_tokens * vocab_size <= CHUNK_LOGITS:
        return None
    return max(1, CHUNK_LOGITS // vocab_size)


def logits_held(n_tokens: int, vocab_size: int) -> int:
    """The most logits (values) a micro-batch of n_tokens tokens holds at once: all of
    them, or one chunk's (loss_chunk_tokens). Memory estimates count these, not
    n_tokens × vocab_size."""
    chunk = loss_chunk_tokens(n_tokens, vocab_size)
    return (n_tokens if chunk is None else chunk) * vocab_size


# ---------------------------------------------------------------------------------------
# The ladder.
# ---------------------------------------------------------------------------------------


def ladder_shape(d_model: int) -> Shape:
    """The ladder's shape at a given width (see the module docstring)."""
    n_layers = max(MIN_LAYERS, round(d_model / ASPECT_RATIO))
    most_heads = max(d_model / 64, min(8, d_model / 16))
    n_heads = max(k for k in range(1, int(most_heads) + 1) if d_model % k == 0)
    mlp_hidden = MLP_MULTIPLE * math.ceil(int(8 * d_model / 3) / MLP_MULTIPLE)
    return Shape(d_model, n_layers, n_heads, mlp_hidden)


def _ladder_widths(max_d_model: int = 16384):
    yield from range(16, 128, 8)
    yield from range(128, max_d_model + 1, 16)


def shape_for_params(n_params: float, vocab_size: int = OLMO3_VOCAB_SIZE) -> Shape:
    """The ladder shape whose n_params (docs/names.md, LM head included) is nearest the target.

    Example: shape_for_params(1e6, vocab_size=2048) -> Shape(160, 2, 8, 432).
    Raises BadInput when the target is below half the smallest model for this vocabulary
    (the LM head alone holds vocab_size·d_model parameters).
    """
    if not n_params > 0:
        raise BadInput(f"model size must be a positive number of parameters, got {n_params}")
    best: Shape | None = None
    best_gap = math.inf
    for d_model in _ladder_widths():
        shape = ladder_shape(d_model)
        n = count_params(shape, vocab_size).n_params
        gap = abs(math.log(n / n_params))
        if gap < best_gap:
            best, best_gap = shape, gap
        if n > n_params:  # counts grow with d_model: nothing further can be nearer
            break
    smallest = count_params(ladder_shape(16), vocab_size).n_params
    if n_params < smallest / 2:
        raise BadInput(
            f"model size {n_params:.3g} is below the smallest model for a {vocab_size}-token "
            f"vocabulary ({smallest:,} parameters, most of them the LM head); use a larger "
            "size or a smaller vocabulary"
        )
    assert best is not None  # the ladder is never empty
    return best


def resolve_size(size: str | float, vocab_size: int = OLMO3_VOCAB_SIZE) -> Shape:
    """A sweep's `size` entry as a shape: "olmo3_14M" is the named size, anything else
    ("1M", "2.5e6", 1e6) a target n_params for the ladder."""
    if isinstance(size, str) and size.lower().startswith("olmo3_"):
        return named_shape(size)
    if isinstance(size, str):
        from cdlaw.units import parse_number

        size = parse_number(size, "model size")
    return shape_for_params(float(size), vocab_size)
