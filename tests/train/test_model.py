"""The OLMo 3 model built from a ModelConfig: architecture and parameter counts."""

import pytest
import torch

from cdlaw.config import ModelConfig
from cdlaw.shapes import count_params, named_shape, shape_for_params
from cdlaw.train.model import build_model, non_embedding_params

TINY = ModelConfig(d_model=64, n_layers=2, n_heads=4, mlp_hidden=192, vocab_size=256, seq_len=32)


def test_architecture_is_olmo3():
    net = build_model(TINY, seed=0)
    cfg = net.config
    assert type(net).__name__ == "Olmo3ForCausalLM"
    assert cfg.tie_word_embeddings is False
    assert net.lm_head.weight.data_ptr() != net.get_input_embeddings().weight.data_ptr()
    assert cfg.layer_types == ["full_attention", "full_attention"]
    rope = cfg.rope_parameters
    rope = rope.get("full_attention", rope)
    assert rope["rope_theta"] == 500_000
    names = [n for n, _ in net.named_parameters()]
    assert not [n for n in names if n.endswith(".bias")]
    layer0 = {n.removeprefix("model.layers.0.") for n in names if n.startswith("model.layers.0.")}
    # Reordered norm: RMSNorm after each sublayer, none before it; QK-norm; SwiGLU.
    assert layer0 == {
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
        "post_attention_layernorm.weight",
        "post_feedforward_layernorm.weight",
    }
    assert net.get_input_embeddings().padding_idx is None  # every row of the embedding learns


@pytest.mark.parametrize(
    "model",
    [
        TINY,
        named_shape("14M").model_config(vocab_size=100_278, seq_len=128),
        shape_for_params(1e6, 2048).model_config(vocab_size=2048, seq_len=128),
    ],
)
def test_counts_match_the_real_model(model):
    net = build_model(model)
    n_params, n_params_total = count_params(model)
    assert sum(p.numel() for p in net.parameters()) == n_params_total
    assert non_embedding_params(net) == n_params


def test_seeded_init_is_reproducible():
    a, b, c = build_model(TINY, seed=1), build_model(TINY, seed=1), build_model(TINY, seed=2)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    # OLMo-core's init std is 0.02.
    assert abs(a.model.layers[0].mlp.up_proj.weight.std().item() - 0.02) < 0.002
