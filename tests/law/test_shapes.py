"""Size ladder, named sizes, parameter counts and FLOPs (torch-free)."""

import math

import numpy as np
import pytest

from cdlaw.config import ModelConfig
from cdlaw.shapes import (
    NAMED_SIZES,
    Shape,
    count_params,
    flops_per_token,
    ladder_shape,
    named_shape,
    olmo_core_mlp_hidden,
    resolve_size,
    shape_for_params,
)
from cdlaw.system.errors import BadInput


def test_olmo_core_mlp_rule_by_hand():
    # 14M: int(8·128/3) = 341 → next multiple of 256 = 512.
    assert olmo_core_mlp_hidden(128) == 512
    # 100M: int(8·512/3) = 1365; int(1.5·1365) = 2047 → 2048.
    assert olmo_core_mlp_hidden(512, 1.5) == 2048
    # 600M: int(8·1280/3) = 3413; int(1.5·3413) = 5119 → 5120.
    assert olmo_core_mlp_hidden(1280, 1.5) == 5120


def test_named_shapes_are_the_papers():
    got = {name: named_shape(name) for name in NAMED_SIZES}
    assert got["14M"] == Shape(128, 4, 8, 512)
    assert got["30M"] == Shape(256, 4, 8, 768)
    assert got["60M"] == Shape(384, 8, 8, 1536)
    assert got["100M"] == Shape(512, 12, 8, 2048)
    assert got["190M"] == Shape(768, 12, 12, 3072)
    assert got["370M"] == Shape(1024, 16, 16, 4096)
    assert got["600M"] == Shape(1280, 16, 16, 5120)
    assert named_shape("olmo3_190M") == got["190M"]
    with pytest.raises(BadInput, match="14M"):
        named_shape("olmo3_15M")


def test_count_by_hand_14M():
    # d 128, 4 layers, MLP 512, vocab 100,278:
    # per layer: attention 4·128² = 65,536; SwiGLU 3·128·512 = 196,608; norms 4·128 = 512.
    per_layer = 65_536 + 196_608 + 512
    lm_head = 100_278 * 128  # 12,835,584
    n_params = 4 * per_layer + 128 + lm_head  # + final norm
    assert n_params == 13_886_336
    assert count_params(named_shape("14M"), 100_278) == (n_params, n_params + lm_head)


def test_named_sizes_land_near_their_names():
    # The paper's N is nominal; with its 100,278-token vocabulary the count is within 10%.
    for name in NAMED_SIZES:
        n = count_params(named_shape(name), 100_278).n_params
        assert abs(n / float(name[:-1]) / 1e6 - 1) < 0.1, (name, n)


def test_count_params_reads_a_model_config():
    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=4, mlp_hidden=192, vocab_size=256)
    # 2·(4·64² + 3·64·192 + 4·64) + 64 + 256·64
    assert count_params(cfg) == (2 * (16_384 + 36_864 + 256) + 64 + 16_384, 123_456 + 16_384)


def test_flops_per_token():
    assert flops_per_token(1e6) == 6e6
    # + 12 · n_layers · d_model · seq_len = 12·4·128·2048
    assert flops_per_token(1e6, 4, 128, 2048) == 6e6 + 12_582_912


def test_ladder_rule():
    for d in (16, 24, 56, 64, 128, 256, 512, 592, 768, 1024, 2048):
        s = ladder_shape(d)
        assert s.n_layers == max(2, round(d / 64))
        assert s.d_model % s.n_heads == 0
        assert s.mlp_hidden % 16 == 0 and 0 <= s.mlp_hidden - 8 * d / 3 < 16
    assert ladder_shape(56) == Shape(56, 2, 2, 160)  # at most 3.5 heads: the divisor 2
    assert ladder_shape(592) == Shape(592, 9, 8, 1584)  # 592 = 16·37: 8 heads of 74
    assert ladder_shape(1024) == Shape(1024, 16, 16, 2736)
    # Counts grow with width, so the nearest-count search is well defined.
    counts = [count_params(ladder_shape(d), 2048).n_params for d in range(16, 2048, 8)]
    assert counts == sorted(counts)


@pytest.mark.parametrize("vocab", [256, 2048, 100_278])
def test_shape_for_params_is_the_nearest_ladder_shape(vocab):
    widths = [*range(16, 128, 8), *range(128, 8192, 16)]
    counts = np.array([count_params(ladder_shape(d), vocab).n_params for d in widths])
    for target in np.geomspace(max(1e5, counts[0]), 1e9, 25):
        shape = shape_for_params(target, vocab)
        assert shape == ladder_shape(widths[np.argmin(abs(np.log(counts / target)))])
        gap = abs(math.log(count_params(shape, vocab).n_params / target))
        assert gap < (0.1 if target > 1e7 else 0.25), (target, shape)


def test_shape_for_params_examples():
    assert shape_for_params(1e6, 2048) == Shape(160, 2, 8, 432)
    assert shape_for_params(190e6) == Shape(832, 13, 13, 2224)


def test_too_small_a_target_is_bad_input():
    with pytest.raises(BadInput, match="smallest model"):
        shape_for_params(1e5, 100_278)  # the LM head alone is 1.6M
    with pytest.raises(BadInput):
        shape_for_params(0, 2048)


def test_resolve_size():
    assert resolve_size("olmo3_14M", 2048) == named_shape("14M")
    assert resolve_size("1M", 2048) == shape_for_params(1e6, 2048)
    assert resolve_size(2e5, 2048) == shape_for_params(2e5, 2048)
    assert resolve_size("1M", 2048).model_config(2048, 128, "1M") == ModelConfig(
        d_model=160, n_layers=2, n_heads=8, mlp_hidden=432, vocab_size=2048, seq_len=128, size="1M"
    )
