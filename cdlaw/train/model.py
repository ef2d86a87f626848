"""Build an OLMo 3 model (transformers' Olmo3ForCausalLM) from a ModelConfig.

As in the CD paper's configs (OLMo-core `olmo3_<size>`): RMSNorm after each sublayer (the
OLMo 2/3 "reordered norm"), QK-norm, SwiGLU, RoPE θ 500,000, no biases, untied input and
output embeddings.

Attention: OLMo 3 uses sliding-window attention (window 4096) on three of every four
layers. cdlaw trains at sequence lengths up to the paper's 2048 (well under the window),
where a 4096-token window sees the whole context, so every layer is built as full
attention: the same function, without the sliding-window mask machinery.
"""

from __future__ import annotations

from typing import Any

from cdlaw.config import ModelConfig
from cdlaw.shapes import count_params

RMS_NORM_EPS = 1e-6  # OLMo-core llama_like(layer_norm_eps=1e-6) for every olmo2/olmo3 size
INIT_STD = 0.02  # OLMo-core TransformerConfig.init_std; HF initializer_range


def hf_config(model: ModelConfig):
    """The transformers Olmo3Config for this shape."""
    from transformers import Olmo3Config

    common: dict[str, Any] = dict(
        vocab_size=model.vocab_size,
        hidden_size=model.d_model,
        intermediate_size=model.mlp_hidden,
        num_hidden_layers=model.n_layers,
        num_attention_heads=model.n_heads,
        num_key_value_heads=model.n_heads,  # no grouped-query attention at these sizes
        hidden_act="silu",  # SwiGLU
        max_position_embeddings=model.seq_len,
        initializer_range=INIT_STD,
        rms_norm_eps=RMS_NORM_EPS,
        attention_bias=False,
        attention_dropout=0.0,
        tie_word_embeddings=False,
        use_cache=False,
        # No pad token: HF would make it the Embedding's padding_idx, whose row never learns.
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    # transformers 5 reads rope_theta into rope_parameters; its signature no longer names it
    common["rope_theta"] = model.rope_theta
    return Olmo3Config(
        layer_types=["full_attention"] * model.n_layers,  # see the module docstring
        sliding_window=4096,  # OLMo 3's window; unused, as no layer is sliding_attention
        **common,
    )


def build_model(model: ModelConfig, seed: int | None = None):
    """A freshly initialised Olmo3ForCausalLM (fp32, on CPU). Seeded when seed is given."""
    import torch
    from transformers import AutoModelForCausalLM

    if seed is not None:
        torch.manual_seed(seed)
    net = AutoModelForCausalLM.from_config(hf_config(model), dtype=torch.float32)
    expected = count_params(model)
    got = sum(p.numel() for p in net.parameters())
    # The count in shapes.py is the law's N: keep it honest against the real model.
    assert got == expected.n_params_total, f"model has {got} parameters, shapes.py says {expected}"
    return net


def non_embedding_params(net) -> int:
    """n_params (docs/names.md) of a built model: every parameter but the input embedding."""
    total = sum(p.numel() for p in net.parameters())
    return total - net.get_input_embeddings().weight.numel()
