"""Grouping runs into packs (cdlaw.sweep.pack.groups): keys, --pack values, pack order."""

from dataclasses import replace

import pytest
from tinyrun import make_cfg

from cdlaw.sweep.pack.groups import parse_pack
from cdlaw.system.errors import BadInput
from cdlaw.train.packable import pack_key


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
