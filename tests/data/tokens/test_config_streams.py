"""Configs: validation, unknown keys named, stable run ids. Streams: exact reads."""

import dataclasses
import math

import numpy as np
import pytest

from cdlaw.config import DataConfig, ModelConfig, RunConfig, TrainConfig, from_dict, to_dict
from cdlaw.data.tokens.streams import Segment, TokenStream, array_stream
from cdlaw.system.errors import BadInput


def run(**kw):
    base = dict(sweep="t", strategy="repetition", fresh_tokens=1000, derived_tokens=3000)
    base.update(kw)
    return RunConfig(**base)


def test_run_id_is_stable_and_defined_by_content():
    a, b = run(), run()
    assert a.run_id == b.run_id and len(a.run_id) == 12
    assert run(seed=1).run_id != a.run_id
    assert run(train=TrainConfig(lr=1e-3)).run_id != a.run_id
    assert from_dict(RunConfig, to_dict(a)) == a
    # a run is its shape: the size label it was named by is not part of its identity
    assert run(model=ModelConfig(size="20K")).run_id == run(model=ModelConfig(size="2e4")).run_id
    assert run(model=ModelConfig(d_model=64)).run_id != a.run_id


def test_fixed_choices_are_checked_by_name():
    with pytest.raises(BadInput, match=r"train\.schedule must be one of cosine, wsd, got 'linear'"):
        from_dict(TrainConfig, {"schedule": "linear"}, "train")
    with pytest.raises(BadInput, match="'Repeat!' cannot name a derived strategy: a strat"):
        run(strategy="Repeat!")
    with pytest.raises(BadInput, match=r"strategy 'reword' with derived_files='': .*declare"):
        run(strategy="reword")  # a name of its own reads its own files
    with pytest.raises(BadInput, match=r"'repeat' is how tables write repetition: name it rep"):
        run(strategy="repeat")  # a table's spelling of repetition is no name of its own


def test_derived_files_enter_the_run_id_only_when_set():
    a = run()
    assert "derived_files" in to_dict(a) and a.derived_files == ""
    # a config.json from before the field still reads, with the same id
    old = to_dict(a)
    del old["derived_files"]
    assert from_dict(RunConfig, old) == a and from_dict(RunConfig, old).run_id == a.run_id
    distill = run(strategy="distill", derived_files="derived/distill")
    other = run(strategy="distill", derived_files="derived/distill-96K")
    assert len({a.run_id, distill.run_id, other.run_id}) == 3
    with pytest.raises(BadInput, match="those three read none"):
        run(strategy="repetition", derived_files="derived/x")
    with pytest.raises(BadInput, match=r"train\.decay_frac"):
        TrainConfig(decay_frac=0.0)


def test_unknown_key_names_the_nearest_valid_one():
    with pytest.raises(BadInput, match=r"unknown key 'train.learning_rat'.*") as e:
        from_dict(
            RunConfig,
            {
                "sweep": "s",
                "strategy": "none",
                "fresh_tokens": 10,
                "derived_tokens": 0,
                "train": {"learning_rat": 1},
            },
        )
    assert "valid keys" in str(e.value)
    with pytest.raises(BadInput, match="did you mean 'lr'"):
        from_dict(TrainConfig, {"lrr": 1e-3}, "train")


def test_types_and_values_are_checked():
    with pytest.raises(BadInput, match=r"train\.batch_size must be a number"):
        from_dict(TrainConfig, {"batch_size": "many"}, "train")
    with pytest.raises(BadInput, match="whole number"):
        from_dict(TrainConfig, {"batch_size": 2.5}, "train")
    assert (
        from_dict(
            RunConfig, {"sweep": "s", "strategy": "none", "fresh_tokens": "2M", "derived_tokens": 0}
        ).fresh_tokens
        == 2_000_000
    )
    with pytest.raises(BadInput, match="strategy 'none'"):
        run(strategy="none")
    with pytest.raises(BadInput, match="divisible"):
        ModelConfig(d_model=100, n_heads=8)
    with pytest.raises(BadInput, match="vocab_size"):
        run(model=ModelConfig(vocab_size=4096), data=DataConfig(vocab_size=2048))


def test_stream_reads_exactly_across_segments():
    a = np.arange(10)
    b = np.arange(100, 105)
    s = TokenStream(
        [Segment(a, 2, 8), Segment(b, 0, 5, derived=True), Segment(a, 0, 3, derived=True)]
    )
    whole = np.concatenate([a[2:8], b, a[:3]])
    assert s.n_tokens == 14 and s.fresh_tokens == 6 and s.derived_tokens == 8
    for start in range(15):
        for count in (0, 1, 4, 20):
            np.testing.assert_array_equal(s.read(start, count), whole[start : start + count])
    np.testing.assert_array_equal(s.derived_mask(4, 6), [False, False, True, True, True, True])
    assert array_stream(a).n_tokens == 10
    # The same stream from columns (how the data layer builds millions of segments), with
    # an empty segment that must be dropped.
    c = TokenStream.from_columns([a, b], [0, 1, 1, 0], [2, 0, 3, 0], [8, 5, 3, 3], [0, 1, 1, 1])
    assert (c.n_tokens, c.fresh_tokens, c.derived_tokens) == (14, 6, 8)
    np.testing.assert_array_equal(c.read(0, 14), whole)
    np.testing.assert_array_equal(c.derived_mask(0, 14), s.derived_mask(0, 14))
    assert [(len(x), x.derived) for x in c.segments] == [(6, False), (5, True), (3, True)]


NOT_FINITE = (math.inf, -math.inf, math.nan, np.float64("nan"), "inf", "nan")
OUT_OF_RANGE = [
    (ModelConfig, "model", {"d_model": 0, "seq_len": -1, "rope_theta": 0.0}),
    (DataConfig, "data", {"vocab_size": 10, "val_tokens": 0, "corpus_seed": -1}),
    (
        TrainConfig,
        "train",
        {
            "lr": 0.0,
            "weight_decay": -0.1,
            "beta1": 1.0,
            "beta2": -0.5,
            "eps": 0.0,
            "z_loss": -1e-5,
            "grad_clip": 0.0,
            "diverge_factor": 1.0,
            "batch_size": 0,
            "micro_batch_size": -2,
            "eval_every": 0,
        },
    ),
]


@pytest.mark.parametrize("cls, where, bad", OUT_OF_RANGE)
def test_every_number_is_finite_and_in_range(cls, where, bad):
    """inf / nan once crashed int() (exit 1) or passed as a weight decay (the run diverged)."""
    numeric = {
        f.name: f.type
        for f in dataclasses.fields(cls)
        if f.type in ("int", "float") and f.name not in ("n_heads",)
    }
    for key in numeric:
        for value in NOT_FINITE:
            with pytest.raises(BadInput, match=rf"^{where}\.{key} must be .*(not|got) ") as e:
                from_dict(cls, {key: value}, where)
            assert "np.float64" not in str(e.value) and "\n" not in str(e.value)
    for key, value in bad.items():
        with pytest.raises(BadInput, match=rf"^{where}\.{key} must be .*, got {value}$"):
            from_dict(cls, {key: value}, where)
    # Whole numbers beyond TOML's 64 bits (1e308 for vocab_size once overflowed in shapes.py).
    with pytest.raises(BadInput, match=r"data\.vocab_size must be an integer below 2\^63"):
        from_dict(DataConfig, {"vocab_size": 1e308}, "data")
    with pytest.raises(BadInput, match=r"data\.vocab_size must be in \[64, 2\^32\]"):
        from_dict(DataConfig, {"vocab_size": 2**40}, "data")
    # Built directly (as a sweep's cells are, by dataclasses.replace), too.
    with pytest.raises(BadInput, match=r"train\.weight_decay must be ≥ 0, got nan"):
        TrainConfig(weight_decay=np.float64("nan"))
    with pytest.raises(BadInput, match=r"^seed must be ≥ 0, got -1"):
        run(seed=-1)
