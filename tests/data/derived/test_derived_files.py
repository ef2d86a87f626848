"""A declared strategy's derived files, on the embedded corpus and a real one: rows aligned
by id become passes of the documents inside D through the paraphrase files' own path —
exact token counts, streams that nest, files that do not cover D or name no document
refused in one sentence."""

import json
from collections import Counter

import numpy as np
import pytest

from cdlaw.config import DataConfig
from cdlaw.data.tokens.cache import DerivedSource, load_tokenizer_once
from cdlaw.data.tokens.ordering import run_stream, shared_prefix
from cdlaw.data.tokens.prepare import (
    derived_tokens_available,
    docs_inside,
    prepare_corpus,
    prepare_derived,
    train_blocks,
)
from cdlaw.system.errors import BadInput

EMBEDDED = DataConfig(world={"n_entities": 300}, vocab_size=512, val_tokens=3000, corpus_seed=3)
L = 64  # seq_len
D = 6000


def write_rows(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "rows.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(folder)


def rewrite(text: str, k: int) -> str:
    """A derived document that differs per pass and from its source (a stand-in teacher)."""
    words = text.split()
    return " ".join(words[k % len(words) :] + words[: k % len(words)]) + f" ({k})"


def docs_in_d(pc, fresh_tokens):
    """The texts of the documents inside fresh_tokens, decoded from the cache, in order."""
    tok = load_tokenizer_once(str(pc.tokenizer_path))
    blocks = train_blocks(pc, fresh_tokens)
    out = []
    for (tokens, ends), m in zip(blocks, docs_inside(blocks, fresh_tokens), strict=True):
        start = 0
        for end in ends[:m].tolist():
            out.append(tok.decode(tokens[start : end - 1].tolist()))
            start = end
    return out


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """The embedded corpus, and files of two passes of every document inside D (ids: the
    documents' places) plus a stray third pass of the first document only."""
    root = tmp_path_factory.mktemp("embedded")
    pc = prepare_corpus(EMBEDDED, root / "cache", D)
    texts = docs_in_d(pc, D)
    rows = [
        {"id": str(i), "pass": k, "text": rewrite(t, k)}
        for i, t in enumerate(texts)
        for k in (2, 1)
    ]
    rows.append({"id": "0", "pass": 3, "text": "a third pass of one document only"})
    return pc, texts, write_rows(root / "derived", rows)


def test_derived_rows_become_exact_passes_of_the_documents_inside_d(embedded):
    pc, texts, files = embedded
    tok = load_tokenizer_once(str(pc.tokenizer_path))
    pass1 = sum(len(tok.encode(rewrite(t, 1)).ids) + 1 for t in texts)  # each ended by EOS
    pass2 = sum(len(tok.encode(rewrite(t, 2)).ids) + 1 for t in texts)
    source = DerivedSource.of(pc.data, "distill", files)
    prepare_derived(pc, source)
    # only the passes that cover every document count (pass 3 covers one)
    assert derived_tokens_available(pc, D, source) == (pass1 + pass2, 2)
    dp = pass1 + pass2 // 2  # a partial second pass: the stream is cut exactly there
    stream = run_stream(pc, "distill", D, dp, L, seed=1, derived_files=files)
    assert stream.n_tokens == D + dp and stream.derived_tokens == dp
    fresh = run_stream(pc, "none", D, 0, L, seed=1).read(0, D)
    tokens, mask = stream.read(0, D + dp), stream.derived_mask(0, D + dp)
    assert np.array_equal(tokens[:D], fresh) and mask[D:].all() and not mask[:D].any()
    # pass 1 comes whole before pass 2: the multiset of its tokens is the rows' encodings
    want = Counter(t for text in texts for t in [*tok.encode(rewrite(text, 1)).ids, pc.eos_id])
    assert Counter(tokens[D : D + pass1].tolist()) == want
    assert stream.info["derived_passes"] == dp / D and stream.info["fresh_documents"] == len(texts)
    assert stream.info["derived_passes_used"] == pytest.approx(1 + (pass2 // 2) / pass2)


def test_streams_of_one_strategy_nest_and_others_part_at_d(embedded):
    pc, _, files = embedded
    short = run_stream(pc, "distill", D, 2000, L, seed=4, derived_files=files)
    long = run_stream(pc, "distill", D, 7000, L, seed=4, derived_files=files)
    assert np.array_equal(long.read(0, D + 2000), short.read(0, D + 2000))
    assert shared_prefix(("distill", D, 2000), ("distill", D, 7000)) == D + 2000
    para = run_stream(pc, "paraphrase", D, 2000, L, seed=4)
    assert np.array_equal(para.read(0, D), short.read(0, D))
    assert not np.array_equal(para.read(D, 2000), short.read(D, 2000))


def test_files_that_do_not_cover_d_or_name_no_document_are_refused(embedded, tmp_path):
    pc, _, _ = embedded
    holes = write_rows(
        tmp_path / "holes", [{"id": str(i), "pass": 1, "text": "x"} for i in range(3)]
    )
    with pytest.raises(
        BadInput, match=r"derived files in '.*holes' do not cover .*`cdlaw distill` with --passes 1"
    ):
        run_stream(pc, "distill", D, 100, L, 0, derived_files=holes)
    for bad_id in ("d7", "-1", "007"):
        stray = write_rows(tmp_path / f"stray{bad_id}", [{"id": bad_id, "pass": 1, "text": "x"}])
        with pytest.raises(BadInput, match=rf"has id '{bad_id}', which is no document"):
            run_stream(pc, "distill", D, 100, L, 0, derived_files=stray)


def test_a_file_whose_rows_repeat_is_refused_not_counted_twice(embedded, tmp_path):
    """Every row written twice (a file appended to itself) made twice the passes: r = 1
    was accepted from files of one pass."""
    pc, texts, _ = embedded
    rows = [{"id": str(i), "pass": 1, "text": rewrite(t, 1)} for i, t in enumerate(texts)]
    once = write_rows(tmp_path / "once", rows)
    twice = write_rows(tmp_path / "twice", rows + rows)
    source = DerivedSource.of(pc.data, "distill", once)
    prepare_derived(pc, source)
    assert derived_tokens_available(pc, D, source)[1] == 1
    with pytest.raises(BadInput) as e:
        run_stream(pc, "distill", D, D, L, 0, derived_files=twice)
    n = len(rows)
    assert f"rows.jsonl:{n + 1} repeats row" in str(e.value) and "rows.jsonl:1 (" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_real_corpus_reads_derived_files_by_its_own_ids(tmp_path):
    from prepare_corpora import world_texts

    texts = world_texts(400)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    rows = [
        {"id": f"doc-{i}", "pass": 1, "style": "qa", "text": rewrite(t, 1)}
        for i, t in enumerate(texts)
    ]
    files = write_rows(tmp_path / "qa", rows)
    data = DataConfig(corpus=str(corpus), vocab_size=300, val_tokens=1000)
    pc = prepare_corpus(data, tmp_path / "cache", 4000)
    source = DerivedSource.of(data, "synthetic-qa", files)
    prepare_derived(pc, source)
    have, passes = derived_tokens_available(pc, 4000, source)
    assert passes == 1 and have > 0
    stream = run_stream(pc, "synthetic-qa", 4000, have, L, 0, derived_files=files)
    assert stream.derived_tokens == have  # exactly the one pass
    # the paraphrase files' own path: the same rows as paraphrase files of style qa
    para = DataConfig(corpus=str(corpus), vocab_size=300, val_tokens=1000, paraphrases=files,
                      paraphrase_styles=("qa",))  # fmt: skip
    pp = prepare_corpus(para, tmp_path / "cache", 4000)
    same = run_stream(pp, "paraphrase", 4000, have, L, 0)
    assert np.array_equal(same.read(0, 4000 + have), stream.read(0, 4000 + have))
