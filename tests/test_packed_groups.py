"""Grouping runs into packs (cdlaw.train.packed_groups): keys, --pack values, pack order."""

from dataclasses import replace

import pytest

from cdlaw.errors import BadInput
from cdlaw.train.packed_groups import choose_packs, pack_key, parse_pack
from tests.test_train import make_cfg


def test_runs_of_one_shape_and_batch_share_a_key_whatever_their_lr_seed_or_length():
    a = make_cfg(3_000, seed=0, lr=1e-2)
    b = make_cfg(1_000, seed=1, lr=3e-3, schedule="wsd", weight_decay=0.0)
    assert pack_key(a) == pack_key(b)
    wider = replace(a, model=replace(a.model, d_model=64))
    assert pack_key(wider) != pack_key(a)
    assert pack_key(make_cfg(batch_size=4)) != pack_key(a)
    assert pack_key(make_cfg(micro_batch_size=4)) != pack_key(a)
    assert pack_key(make_cfg(micro_batch_size=8)) == pack_key(a)  # 8 = the whole batch
    assert pack_key(make_cfg(beta2=0.99)) != pack_key(a)


@pytest.mark.parametrize("text", ["0", "-2", "two", "1.5", ""])
def test_a_pack_size_below_one_or_not_a_number_is_bad_input(text):
    with pytest.raises(BadInput, match="--pack"):
        parse_pack(text)


def test_pack_sizes_and_auto_parse():
    assert parse_pack("auto") == "auto" and parse_pack("1") == 1 and parse_pack("16") == 16


def test_packs_follow_the_given_order_and_never_mix_keys():
    small = [make_cfg(1_000 + i, seed=i) for i in range(5)]
    wide = [replace(c, model=replace(c.model, d_model=64)) for c in small[:3]]
    order = [small[0], wide[0], small[1], small[2], wide[1], small[3], wide[2], small[4]]
    packs = choose_packs(order, 2)
    assert [[order.index(c) for c in p] for p in packs] == [[0, 2], [1, 4], [3, 5], [6], [7]]
    assert all(len({pack_key(c) for c in p}) == 1 for p in packs)
    assert choose_packs(order, 1) == [[c] for c in order]
    with pytest.raises(BadInput):
        choose_packs(order, 0)
