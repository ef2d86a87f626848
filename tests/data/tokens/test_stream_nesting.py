"""Streams nest, so WSD branches can resume from a trunk: `shared_prefix`, computed from
configs alone, never claims more shared leading tokens than the real streams share."""

import itertools

import numpy as np
import pytest

from cdlaw.config import DataConfig
from cdlaw.data.tokens.ordering import STREAM_ORDER_VERSION, run_stream, shared_prefix
from cdlaw.data.tokens.prepare import prepare_corpus
from cdlaw.system.errors import BadInput

DATA = DataConfig(world={"n_entities": 200}, vocab_size=300, val_tokens=1000, corpus_seed=3)
L = 32  # seq_len
SEED = 4


def grid() -> list[tuple[str, int, int]]:
    """(strategy, D, D′): three D (none a multiple of L), D′ within one epoch or pass,
    exactly one, and across several, most not multiples of L or of D."""
    runs = []
    for D in (1000, 2500, 2501):
        runs.append(("none", D, 0))
        for Dp in (1, 45, D, 2 * D + 77, 3 * D + 13):
            runs += [("repetition", D, Dp), ("paraphrase", D, Dp)]
    return runs


@pytest.fixture(scope="module")
def pc(tmp_path_factory):
    return prepare_corpus(DATA, tmp_path_factory.mktemp("cache"), 3000, paraphrase_passes=1)


@pytest.fixture(scope="module")
def streams(pc):
    out = {}
    for run in grid():
        s = run_stream(pc, *run, L, seed=SEED)
        out[run] = (s, s.read(0, s.n_tokens), s.derived_mask(0, s.n_tokens))
    return out


def test_the_rule_on_named_cases():
    assert shared_prefix(("none", 1000, 0), ("none", 1000, 0)) == 1000
    assert shared_prefix(("none", 1000, 0), ("none", 3000, 0)) == 1000
    # One strategy and D: the shorter stream is a prefix of the longer one.
    assert shared_prefix(("repetition", 1000, 500), ("repetition", 1000, 2500)) == 1500
    assert shared_prefix(("paraphrase", 1000, 2500), ("paraphrase", 1000, 500)) == 1500
    # A none run at D is a repetition run at D cut at D.
    assert shared_prefix(("none", 1000, 0), ("repetition", 1000, 700)) == 1000
    # Only F[:min D]: at D1 < D2 the smaller run goes on with an epoch of F[:D1].
    assert shared_prefix(("none", 1000, 0), ("repetition", 2000, 700)) == 1000
    assert shared_prefix(("none", 2000, 0), ("repetition", 1000, 5000)) == 1000
    assert shared_prefix(("none", 2000, 0), ("paraphrase", 1000, 5000)) == 1000
    assert shared_prefix(("repetition", 1000, 9000), ("repetition", 2000, 9000)) == 1000
    assert shared_prefix(("paraphrase", 2000, 50), ("paraphrase", 1000, 50)) == 1000
    # Repetition and paraphrase part at D.
    assert shared_prefix(("repetition", 1000, 700), ("paraphrase", 1000, 700)) == 1000
    # Any declared strategy nests like paraphrase: its passes follow F[:D].
    assert shared_prefix(("distill", 1000, 2500), ("distill", 1000, 500)) == 1500
    assert shared_prefix(("distill", 1000, 700), ("paraphrase", 1000, 700)) == 1000
    for bad in (("Shuffle!", 1000, 5), ("none", 0, 0), ("repetition", 10, -1)):
        with pytest.raises(BadInput):
            shared_prefix(bad, ("none", 1000, 0))


def test_every_pair_shares_at_least_the_prefix_the_rule_promises(streams):
    checked_parting = 0
    for a, b in itertools.combinations(grid(), 2):
        P = shared_prefix(a, b)
        assert P == shared_prefix(b, a)
        (sa, ta, ma), (sb, tb, mb) = streams[a], streams[b]
        assert P <= min(sa.n_tokens, sb.n_tokens), (a, b, P)
        assert np.array_equal(ta[:P], tb[:P]), (a, b, P)
        assert np.array_equal(ma[:P], mb[:P]), (a, b, P)
        if P < min(sa.n_tokens, sb.n_tokens):
            # The rule is not needlessly small here: the streams part within two sequences
            # (they go on with different sequences of tens of tokens).
            assert not np.array_equal(ta[P : P + 2 * L], tb[P : P + 2 * L]), (a, b, P)
            checked_parting += 1
    assert checked_parting > 100


def test_paraphrase_runs_nest_in_derived_tokens(pc):
    D = 2500
    big = run_stream(pc, "paraphrase", D, 4 * D + 5, L, seed=SEED)  # into pass 4 or 5
    tokens, mask = big.read(0, big.n_tokens), big.derived_mask(0, big.n_tokens)
    assert big.info["paraphrase_passes_used"] > 2
    assert not mask[:D].any() and mask[D:].all()  # the fresh tokens first, then derived
    assert np.array_equal(tokens[:D], run_stream(pc, "none", D, 0, L, seed=SEED).read(0, D))
    for Dp in (1, L, 31, 1234, D, 2 * D + 1, 4 * D + 4):
        s = run_stream(pc, "paraphrase", D, Dp, L, seed=SEED)
        assert np.array_equal(s.read(0, s.n_tokens), tokens[: D + Dp]), Dp
        assert np.array_equal(s.derived_mask(0, s.n_tokens), mask[: D + Dp]), Dp
    # The seed still orders each pass.
    other = run_stream(pc, "paraphrase", D, 4 * D + 5, L, seed=SEED + 1)
    assert np.array_equal(other.read(0, D), tokens[:D])
    assert not np.array_equal(other.read(D, 2 * L), tokens[D : D + 2 * L])


def test_counts_are_exact_and_the_stream_order_is_recorded(streams):
    for (strategy, D, Dp), (s, tokens, mask) in streams.items():
        assert (s.n_tokens, s.fresh_tokens, s.derived_tokens) == (D + Dp, D, Dp)
        assert len(tokens) == D + Dp and int(mask.sum()) == Dp
        assert not mask[:D].any() and mask[D:].all()
        assert s.info["stream_order"] == STREAM_ORDER_VERSION == 2
        if strategy == "paraphrase":
            assert s.info["paraphrase_passes"] == pytest.approx(Dp / D)
            assert s.info["fresh_documents"] > 0
            assert 0 < s.info["paraphrase_passes_used"]
