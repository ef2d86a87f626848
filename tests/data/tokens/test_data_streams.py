"""Run streams on the embedded corpus: exact counts, replays, paraphrase passes, held-out
validation, nesting, and the same bytes in another process."""

import dataclasses
import hashlib
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from cdlaw.config import DataConfig
from cdlaw.data.tokens.ordering import run_stream
from cdlaw.data.tokens.prepare import prepare_corpus
from cdlaw.system.errors import BadInput

DATA = DataConfig(world={"n_entities": 300}, vocab_size=512, val_tokens=3000, corpus_seed=5)
L = 64  # seq_len


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def pc(cache):
    return prepare_corpus(DATA, cache, 20_000, paraphrase_passes=1)


def docs_of(tokens, eos):
    """Split a token array at EOS into documents (tuples, EOS dropped; a cut tail kept)."""
    cuts = np.flatnonzero(np.asarray(tokens) == eos)
    out, lo = [], 0
    for c in cuts:
        out.append(tuple(tokens[lo:c].tolist()))
        lo = c + 1
    return out, tuple(tokens[lo:].tolist())


def test_prepared_corpus_describes_itself(pc, cache):
    assert pc.name == "embedded:seed5"
    assert pc.vocab_size == 512 and pc.eos_id == 0
    assert len(pc.val_tokens) == 3000 and pc.val_tokens.max() < pc.vocab_size
    assert pc.train_tokens_available >= 20_000
    assert pc.paraphrase_passes_available >= 16
    assert pc.tokenizer_path.is_file() and str(pc.tokenizer_path).startswith(str(cache))
    again = prepare_corpus(DATA, cache, 1000)  # cached: the same tokens, memory-mapped
    assert isinstance(again.val_tokens, np.memmap)
    with pytest.raises(dataclasses.FrozenInstanceError):  # built once, with every field
        again.paraphrase_passes_available = 0  # type: ignore[misc]
    assert np.array_equal(again.val_tokens, pc.val_tokens)


@pytest.mark.parametrize(
    "strategy, D, Dp",
    [
        ("none", 1000, 0),
        ("none", 20_000, 0),
        ("repetition", 1000, 1000),  # exactly two epochs
        ("repetition", 1000, 2500),  # 3.5 epochs: the last one partial
        ("repetition", 4096, 1),  # D a multiple of seq_len, one derived token
        ("repetition", 999, 7 * 999 + 13),
        ("paraphrase", 2000, 3),
        ("paraphrase", 2000, 1234),  # part of pass 1
        ("paraphrase", 1500, 11_111),  # several passes, the last partial
    ],
)
def test_token_accounting_is_exact(pc, strategy, D, Dp):
    s = run_stream(pc, strategy, D, Dp, L, seed=1)
    assert (s.n_tokens, s.fresh_tokens, s.derived_tokens) == (D + Dp, D, Dp)
    tokens = s.read(0, s.n_tokens + 10)
    assert len(tokens) == D + Dp and tokens.dtype == np.int64
    assert 0 <= tokens.min() and tokens.max() < pc.vocab_size
    mask = s.derived_mask(0, s.n_tokens)
    assert int(mask.sum()) == Dp
    assert s.info["corpus"] == pc.name
    if strategy == "repetition":
        assert s.info["epochs"] == pytest.approx((D + Dp) / D)
        assert not mask[:D].any() and mask[D:].all()  # epoch 1 is fresh, the rest derived
    if strategy == "paraphrase":
        assert s.info["paraphrase_passes"] == pytest.approx(Dp / D)
        assert s.info["epochs"] == 1.0
        assert not mask[:D].any() and mask[D:].all()  # fresh first, then the passes


def chunks(tokens, n):
    return Counter(tuple(tokens[i : i + n].tolist()) for i in range(0, len(tokens), n))


def test_repetition_replays_the_same_sequences_in_a_new_order(pc):
    D = 1000  # not a multiple of 64: 15 full sequences and a 40-token remainder per epoch
    s = run_stream(pc, "repetition", D, 3 * D, L, seed=7)
    epochs = [s.read(e * D, D) for e in range(4)]
    fresh = run_stream(pc, "none", D, 0, L, seed=7).read(0, D)
    assert np.array_equal(epochs[0], fresh)
    for e in epochs[1:]:
        assert chunks(e, L) == chunks(fresh, L)  # the same multiset of sequences
        assert not np.array_equal(e, fresh)
    assert not np.array_equal(epochs[1], epochs[2]) and not np.array_equal(epochs[2], epochs[3])
    # The run's seed decides the order; the same seed gives the same stream.
    assert np.array_equal(
        run_stream(pc, "repetition", D, 3 * D, L, seed=7).read(0, 4 * D), s.read(0, 4 * D)
    )
    assert not np.array_equal(
        run_stream(pc, "repetition", D, 3 * D, L, seed=8).read(D, D), epochs[1]
    )


def test_smaller_fresh_budgets_are_prefixes_of_larger_ones(pc):
    big = run_stream(pc, "none", 20_000, 0, L, seed=0).read(0, 20_000)
    for D in (1, 333, 5000):
        assert np.array_equal(run_stream(pc, "none", D, 0, L, seed=3).read(0, D), big[:D])
    small_docs, _ = docs_of(big[:5000], pc.eos_id)
    big_docs, _ = docs_of(big, pc.eos_id)
    assert big_docs[: len(small_docs)] == small_docs  # whole documents, in the same order


def test_paraphrase_stream_is_fresh_then_passes_of_the_documents_in_D(pc, cache):
    D, Dp = 3000, 9000
    s = run_stream(pc, "paraphrase", D, Dp, L, seed=2)
    tokens, mask = s.read(0, D + Dp), s.derived_mask(0, D + Dp)
    fresh = run_stream(pc, "none", D, 0, L, seed=2).read(0, D)
    # Every fresh token once, first and in order (stream order 2; order 1 mixed the fresh
    # sequences with the derived ones in one shuffled order)...
    assert not mask[:D].any() and mask[D:].all()
    assert np.array_equal(tokens[:D], fresh)
    # ...and the derived tokens are pass 1, 2, … of exactly the documents inside D.
    fresh_docs, _ = docs_of(fresh, pc.eos_id)
    from cdlaw.data.tokens.cache import DerivedSource
    from cdlaw.data.tokens.prepare import derived_pass_parts, docs_inside, train_blocks

    blocks = train_blocks(pc, D)
    n_docs = docs_inside(blocks, D)
    assert sum(n_docs) == len(fresh_docs) == s.info["fresh_documents"]
    passes = [
        np.concatenate(
            derived_pass_parts(pc, blocks, n_docs, k, DerivedSource.of(pc.data, "paraphrase"))
        )
        for k in (1, 2, 3, 4)
    ]
    lengths = [len(p) for p in passes]
    # Pass by pass (stream order 2; order 1 took the first D′ tokens of the passes and mixed
    # them): each pass is its own seq_len sequences in a shuffled order, the short remainder
    # last, and the last pass used is cut after its first sequences in that order.
    at, whole_passes = D, 0
    for whole in passes:
        got = tokens[at : min(at + len(whole), D + Dp)]
        if len(got) == len(whole):
            assert chunks(got, L) == chunks(whole, L) and not np.array_equal(got, whole)
            whole_passes += 1
        elif len(got):
            cut = len(got) // L * L  # whole sequences of this pass, then part of one
            assert not chunks(got[:cut], L) - chunks(whole, L)
            assert not Counter(got.tolist()) - Counter(whole.tolist())
        at += len(got)
    assert at == D + Dp and whole_passes >= 1
    full = int(np.searchsorted(np.cumsum(lengths), Dp, side="right"))
    used = full + (Dp - sum(lengths[:full])) / lengths[full]
    assert s.info["paraphrase_passes_used"] == pytest.approx(used)
    pass_docs, _ = docs_of(
        np.concatenate(
            derived_pass_parts(pc, blocks, n_docs, 1, DerivedSource.of(pc.data, "paraphrase"))
        ),
        pc.eos_id,
    )
    assert len(pass_docs) == len(fresh_docs)
    # Aligned: pass 1 of the i-th document is the paraphrase of the i-th fresh document.
    from tokenizers import Tokenizer

    from cdlaw.data.embedded import render, world

    tok = Tokenizer.from_file(str(pc.tokenizer_path))
    w = world.build_world(DATA.corpus_seed, world.WorldOptions.from_config(DATA.world))
    styles = render.parse_styles(DATA.paraphrase_styles)
    for doc, original, para in zip(world.documents(w, 0), fresh_docs, pass_docs[:30], strict=False):
        assert tok.decode(list(original)) == render.render(w, doc)
        assert tok.decode(list(para)) == render.render_paraphrase(w, doc, 1, styles)[1]


def test_validation_documents_never_appear_in_training(pc):
    val_docs, _ = docs_of(np.asarray(pc.val_tokens), pc.eos_id)
    s = run_stream(pc, "paraphrase", 20_000, 40_000, L, seed=0)
    train = s.read(0, s.n_tokens)
    mask = s.derived_mask(0, s.n_tokens)
    fresh_docs, _ = docs_of(run_stream(pc, "none", 20_000, 0, L, seed=0).read(0, 20_000), pc.eos_id)
    assert len(val_docs) > 20 and len(fresh_docs) > 200
    assert not set(val_docs) & set(fresh_docs)
    # No validation document inside the (shuffled) derived tokens either: look for each
    # validation document's token string in the derived text.
    derived = train[mask].astype(np.uint16).tobytes()
    assert not any(
        np.array(d, dtype=np.uint16).tobytes() in derived for d in val_docs if len(d) > 8
    )


CHILD = """
import hashlib, json, sys
from pathlib import Path
from cdlaw.config import DataConfig
from cdlaw.data.tokens.ordering import run_stream
from cdlaw.data.tokens.prepare import prepare_corpus
data = DataConfig(**json.loads(sys.argv[2]))
pc = prepare_corpus(data, Path(sys.argv[1]), 4000, paraphrase_passes=1)
h = hashlib.sha256(pc.val_tokens.tobytes())
for strategy, Dp in (("repetition", 5000), ("paraphrase", 5000)):
    h.update(run_stream(pc, strategy, 4000, Dp, 64, 9).read(0, 9000).tobytes())
print(h.hexdigest())
"""


@pytest.mark.slow
def test_the_same_seed_gives_the_same_bytes_in_other_processes(tmp_path):
    """Two processes preparing one new cache at once (file lock), and this one with its own
    cache: the world, BPE, validation set and streams are identical bytes."""
    data = {"world": {"n_entities": 200}, "vocab_size": 300, "val_tokens": 1000, "corpus_seed": 1}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path / "shared"), json.dumps(data)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    pc = prepare_corpus(DataConfig(**data), tmp_path / "own", 4000, paraphrase_passes=1)
    h = hashlib.sha256(pc.val_tokens.tobytes())
    for strategy in ("repetition", "paraphrase"):
        h.update(run_stream(pc, strategy, 4000, 5000, 64, 9).read(0, 9000).tobytes())
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [h.hexdigest()] * 2
    other = prepare_corpus(DataConfig(**{**data, "corpus_seed": 2}), tmp_path / "own", 4000)
    assert not np.array_equal(other.val_tokens, pc.val_tokens)


def test_bad_stream_requests_are_bad_input(pc):
    with pytest.raises(BadInput, match="use 'none' exactly when"):
        run_stream(pc, "none", 100, 5, L, 0)
    with pytest.raises(BadInput, match="'Shuffle' cannot name a derived strategy"):
        run_stream(pc, "Shuffle", 100, 5, L, 0)
    with pytest.raises(BadInput, match=r"'shuffle' has no derived files: .*\[derived\.shuffle\]"):
        run_stream(pc, "shuffle", 100, 5, L, 0)
    with pytest.raises(BadInput, match=r"\[derived\.shuffle\] files '/nowhere' is not a folder"):
        run_stream(pc, "shuffle", 100, 5, L, 0, derived_files="/nowhere")
    with pytest.raises(BadInput, match="seed must be"):
        run_stream(pc, "repetition", 100, 5, L, -1)
    with pytest.raises(BadInput, match="no whole document"):
        run_stream(pc, "paraphrase", 3, 5, L, 0)
    with pytest.raises(BadInput, match="did you mean 'zipf_exponent'"):
        prepare_corpus(DataConfig(world={"zipf_exp": 1.0}), pc.root, 100)
    with pytest.raises(BadInput, match="not a style"):
        prepare_corpus(DataConfig(paraphrase_styles=("sonnet",)), pc.root, 100)
    with pytest.raises(BadInput, match=r"\[derived\.paraphrase\] files is for real corpora"):
        prepare_corpus(DataConfig(paraphrases="somewhere"), pc.root, 100)
    with pytest.raises(BadInput, match="corpus_seed must be"):
        prepare_corpus(DataConfig(corpus_seed=-1), pc.root, 100)
    with pytest.raises(BadInput, match="at least 128"):
        prepare_corpus(DataConfig(vocab_size=100), pc.root, 100)


def test_info_is_json_and_names_the_corpus(pc):
    s = run_stream(pc, "paraphrase", 2000, 500, L, seed=0)
    info = json.loads(json.dumps(s.info))
    assert info["corpus"] == "embedded:seed5" and info["strategy"] == "paraphrase"
    assert (
        hashlib.sha256(s.read(0, 2500).tobytes()).hexdigest()
        == hashlib.sha256(
            run_stream(pc, "paraphrase", 2000, 500, L, seed=0).read(0, 2500).tobytes()
        ).hexdigest()
    )


# sha256 of the small embedded corpus below (vocabulary, validation tokens, first training
# block and its paraphrase passes 1 and 2), per GENERATOR_VERSION it was generated with.
GENERATED_TOKENS = {1: "a159bedc1c916ac0f735617eaa80c39a1776c088f774628217895e87d569e13a"}


def test_the_generated_tokens_change_only_with_the_generator_version(tmp_path, monkeypatch):
    """corpus_key names the embedded corpus by GENERATOR_VERSION, not by a hash of its
    code, so every change to the tokens it generates must come with a new version."""
    from tokenizers import Tokenizer

    from cdlaw.data.embedded import corpus as embedded_corpus
    from cdlaw.data.tokens.cache import DerivedSource
    from cdlaw.data.tokens.prepare import corpus_key, derived_pass_parts, docs_inside, train_blocks

    data = DataConfig(
        corpus_seed=7,
        vocab_size=300,
        val_tokens=2000,
        paraphrase_styles=("tutorial", "faq", "math", "table", "prose"),  # every style
        world={"n_entities": 300, "zipf_exponent": 1.1, "min_facts": 2, "max_facts": 6},
    )
    pc = prepare_corpus(data, tmp_path, 1)
    vocab = Tokenizer.from_file(str(pc.tokenizer_path)).get_vocab(with_added_tokens=True)
    h = hashlib.sha256(json.dumps(sorted(vocab.items())).encode())
    h.update(np.asarray(pc.val_tokens, np.int64).tobytes())
    blocks = train_blocks(pc, 1)  # the first block: 2,048 documents
    h.update(np.asarray(blocks[0][0], np.int64).tobytes())
    n_docs = docs_inside(blocks, int(blocks[0][1][-1]))
    for k in (1, 2):
        for part in derived_pass_parts(
            pc, blocks, n_docs, k, DerivedSource.of(pc.data, "paraphrase")
        ):
            h.update(np.asarray(part, np.int64).tobytes())
    version, digest = embedded_corpus.GENERATOR_VERSION, h.hexdigest()
    assert GENERATED_TOKENS.get(version) == digest, (
        f"the embedded corpus's tokens changed (digest {digest}, GENERATOR_VERSION "
        f"{version}): bump GENERATOR_VERSION in cdlaw/data/embedded/corpus.py and record "
        f"the new digest in GENERATED_TOKENS here, next to the new version"
    )
    key = corpus_key(data)
    monkeypatch.setattr(embedded_corpus, "GENERATOR_VERSION", version + 1)
    assert corpus_key(data) != key  # the version is part of every run's corpus_key


def test_paraphrase_passes_beyond_the_limit_are_refused_before_any_is_built(pc, monkeypatch):
    """D′/D above MAX_DERIVED_PASSES is refused up front, not after rendering 1000 passes
    (~400 MB of cache for a 2000-pass run of the embedded corpus)."""
    from cdlaw.data.tokens import ordering
    from cdlaw.data.tokens.prepare import MAX_DERIVED_PASSES

    def built(*args):
        raise AssertionError("a paraphrase pass was built for a stream that cannot be")

    monkeypatch.setattr(ordering, "derived_pass_parts", built)
    D = 2000
    with pytest.raises(BadInput, match=r"is 1000\.0005 paraphrase passes .* limit of 1000"):
        run_stream(pc, "paraphrase", D, MAX_DERIVED_PASSES * D + 1, L, 0)
