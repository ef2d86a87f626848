"""Real corpora: local text/jsonl/parquet and hf: datasets, the held-out split, a given
tokenizer, and paraphrase files aligned by id (nothing is downloaded)."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from cdlaw.config import DataConfig
from cdlaw.data.files import sources
from cdlaw.data.tokens.ordering import run_stream
from cdlaw.data.tokens.prepare import prepare_corpus
from cdlaw.system.errors import BadInput


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def texts():
    """400 varied documents (the embedded world's prose: realistic, cheap, deterministic)."""
    from cdlaw.data.embedded import render, world

    w = world.build_world(0, world.WorldOptions(n_entities=200))
    return [render.render(w, d) for d in world.documents(w, 0)[:400]]


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory, texts):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    return write_jsonl(path, [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])


def data(corpus, **kw):
    return DataConfig(corpus=str(corpus), **{"vocab_size": 300, "val_tokens": 2000, **kw})


def test_text_files_split_into_documents(tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("First doc,\nstill first.\n\nSecond doc.\n\n\n\nThird doc.\n")
    docs = sources.load_documents(str(one))
    assert docs.texts == ["First doc,\nstill first.", "Second doc.", "Third doc."]
    assert docs.ids == ["0", "1", "2"]
    folder = tmp_path / "many"
    folder.mkdir()
    for i, body in enumerate(["A.\n\nStill A.", "B.", "C."]):
        (folder / f"{i}.txt").write_text(body)
    assert sources.load_documents(str(folder)).texts == ["A.\n\nStill A.", "B.", "C."]


def test_jsonl_parquet_and_saved_hf_datasets_read_alike(tmp_path, texts):
    import datasets
    import pandas as pd

    rows = {"id": [f"x{i}" for i in range(30)], "body": texts[:30]}
    write_jsonl(
        tmp_path / "c.jsonl", [dict(id=i, body=t) for i, t in zip(*rows.values(), strict=True)]
    )
    pd.DataFrame(rows).to_parquet(tmp_path / "c.parquet")
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "flat"))
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"id": ["z"], "body": ["other"]}),
         "validation": datasets.Dataset.from_dict(rows)}
    ).save_to_disk(str(tmp_path / "splits"))  # fmt: skip
    for corpus in ("c.jsonl", "c.parquet", "hf:flat", "hf:splits@validation"):
        spec = f"hf:{tmp_path / corpus[3:]}" if corpus.startswith("hf:") else str(tmp_path / corpus)
        docs = sources.load_documents(spec, text_column="body")
        assert docs.texts == texts[:30] and docs.ids == rows["id"], corpus
    assert sources.load_documents(f"hf:{tmp_path / 'splits'}", text_column="body").texts == [
        "other"
    ]


def test_bad_corpora_are_one_sentence_bad_input(tmp_path):
    cases = {
        "does not exist": str(tmp_path / "missing.jsonl"),
        "is empty": str(write_jsonl(tmp_path / "empty.jsonl", [{"text": "  "}])),
        "has no column 'text'": str(write_jsonl(tmp_path / "col.jsonl", [{"body": "x"}])),
        "duplicate document id 'a'": str(
            write_jsonl(
                tmp_path / "dup.jsonl", [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]
            )
        ),
        "no split 'test'": f"hf:{tmp_path / 'ds'}@test",
    }
    import datasets

    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a"]})}).save_to_disk(
        str(tmp_path / "ds")
    )
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "a.txt").write_text("a")
    (tmp_path / "mixed" / "b.parquet").write_text("b")
    cases["mixed (text, parquet)"] = str(tmp_path / "mixed")
    for message, corpus in cases.items():
        with pytest.raises(BadInput, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
            sources.load_documents(corpus)
        assert "\n" not in str(e.value)


def test_a_real_corpus_is_split_shuffled_and_counted_exactly(tmp_path, jsonl, texts):
    pc = prepare_corpus(data(jsonl), tmp_path, 5000)
    assert pc.name == "docs.jsonl:seed0" and len(pc.val_tokens) == 2000
    meta = json.loads((pc.root / "meta.json").read_text())
    train_ids = json.loads((pc.root / "train_ids.json").read_text())
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pc.tokenizer_path))
    by_id = {f"d{i}": t for i, t in enumerate(texts)}
    # Exact: all training tokens = each training document's tokens plus its EOS.
    assert pc.train_tokens_available == sum(len(tok.encode(by_id[i]).ids) + 1 for i in train_ids)
    assert meta["n_val_documents"] + len(train_ids) == len(texts)
    # Shuffled (not source order), and the stream is the training documents in that order.
    assert train_ids != sorted(train_ids, key=lambda s: int(s[1:]))
    stream = run_stream(pc, "none", 5000, 0, 128, 0).read(0, 5000)
    expected = np.concatenate([[*tok.encode(by_id[i]).ids, pc.eos_id] for i in train_ids[:60]])
    assert np.array_equal(stream, expected[:5000])
    # Validation: held-out documents, the same for every run, never in training.
    val_text = tok.decode(np.asarray(pc.val_tokens).tolist(), skip_special_tokens=False)
    val_docs = [d for d in val_text.split("<|endoftext|>")[:-1]]
    assert val_docs and not set(val_docs) & {by_id[i] for i in train_ids}
    assert all(v in texts for v in val_docs)
    # Too little text for fresh_tokens: one sentence naming the corpus and the numbers.
    fresh = pc.train_tokens_available + 1
    with pytest.raises(BadInput, match=rf"too small: .*val_tokens=2000 .*fresh_tokens={fresh}"):
        prepare_corpus(data(jsonl), tmp_path, fresh)
    with pytest.raises(BadInput, match="too small"):
        prepare_corpus(
            DataConfig(corpus=str(jsonl), vocab_size=300, val_tokens=10**7), tmp_path, 10
        )


def test_a_small_corpus_holds_out_what_validation_needs(tmp_path, jsonl, texts, monkeypatch):
    """A corpus with fewer than 8 bytes per validation token (this one: ~72 KB for 12,000
    validation tokens at ~1.5 bytes a token) keeps the rest for training, and its BPE
    still never sees a validation document."""
    from cdlaw.data.files import corpus as file_corpus

    trained = []

    def train_bpe(sample, *args, **kw):
        trained.append(list(sample))
        return bpe(sample, *args, **kw)

    bpe = file_corpus.tokenizer.train_bpe
    monkeypatch.setattr(file_corpus.tokenizer, "train_bpe", train_bpe)
    assert 8 * 12_000 > sum(len(t.encode()) for t in texts)
    pc = prepare_corpus(data(jsonl, val_tokens=12_000), tmp_path, 20_000)
    assert len(pc.val_tokens) == 12_000 and pc.train_tokens_available >= 20_000
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pc.tokenizer_path))
    val_text = tok.decode(np.asarray(pc.val_tokens).tolist(), skip_special_tokens=False)
    val_docs = set(val_text.split("<|endoftext|>")[:-1])  # the last one is cut
    assert val_docs and not val_docs & set(trained[-1])  # the BPE kept is the last trained


def test_a_corpus_too_small_for_validation_says_what_to_change(tmp_path, jsonl):
    small = write_jsonl(tmp_path / "small.jsonl", [{"text": t} for t in read_texts(jsonl)[:60]])
    with pytest.raises(BadInput) as e:
        prepare_corpus(data(small, val_tokens=20_000), tmp_path, 2000)
    message = str(e.value)
    assert "\n" not in message and "val_tokens=20000" in message
    assert "fresh_tokens=2000" in message
    holds = int(re.search(r"holds about (\d+)", message).group(1))
    suggested = int(re.search(r"\[data\] val_tokens = (\d+)", message).group(1))
    assert 1024 <= suggested < holds - 2000  # the suggestion leaves room for the run
    pc = prepare_corpus(data(small, val_tokens=suggested), tmp_path, 2000)  # and it is enough
    assert len(pc.val_tokens) == suggested


def read_texts(path):
    return [json.loads(line)["text"] for line in path.read_text().splitlines()]


def test_a_duplicate_of_a_validation_document_is_not_trained_on(tmp_path, texts):
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    rows += [{"id": f"copy{i}", "text": t} for i, t in enumerate(texts)]  # every text twice
    pc = prepare_corpus(data(write_jsonl(tmp_path / "dup.jsonl", rows)), tmp_path / "c", 100)
    meta = json.loads((pc.root / "meta.json").read_text())
    assert meta["n_train_documents"] < len(rows) - meta["n_val_documents"]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pc.tokenizer_path))
    val = set(
        tok.decode(np.asarray(pc.val_tokens).tolist(), skip_special_tokens=False).split(
            "<|endoftext|>"
        )[:-1]
    )
    train = run_stream(pc, "none", pc.train_tokens_available, 0, 128, 0)
    text = tok.decode(train.read(0, train.n_tokens).tolist(), skip_special_tokens=False)
    assert not val & set(text.split("<|endoftext|>"))


def test_a_given_tokenizer_file_or_folder(tmp_path, jsonl):
    bpe = prepare_corpus(data(jsonl), tmp_path / "a", 1000)
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(bpe.tokenizer_path, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    for spec in (folder, folder / "tokenizer.json"):
        pc = prepare_corpus(data(jsonl, tokenizer=str(spec)), tmp_path / "b", 1000)
        assert (pc.vocab_size, pc.eos_id) == (bpe.vocab_size, bpe.eos_id)
    with pytest.raises(BadInput, match="neither 'bpe' nor an existing tokenizer"):
        prepare_corpus(data(jsonl, tokenizer=str(tmp_path / "nope.json")), tmp_path / "b", 1000)


def test_paraphrase_files_are_aligned_by_id_and_must_cover_D(tmp_path, jsonl, texts):
    paras = tmp_path / "paras"
    paras.mkdir()
    rows = [
        {"id": f"d{i}", "pass": k, "style": style, "text": f"Paraphrase {k} of d{i} in {style}."}
        for i in range(len(texts))
        for k, style in ((1, "faq"), (2, "tutorial"), (3, "table"))
    ]
    with open(paras / "paraphrases.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        f.write('{"id": "d0", "pass": 4, "sty')  # a torn last line, as a killed job leaves
    D = 3000
    pc = prepare_corpus(data(jsonl, paraphrases=str(paras)), tmp_path, D, paraphrase_passes=2)
    assert pc.paraphrase_passes_available == 3
    train_ids = json.loads((pc.root / "train_ids.json").read_text())
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pc.tokenizer_path))
    fresh = tok.decode(
        run_stream(pc, "none", D, 0, 128, 0).read(0, D).tolist(), skip_special_tokens=False
    )
    n_inside = fresh.count("<|endoftext|>")  # documents wholly inside D
    inside = train_ids[:n_inside]
    passes = [
        np.concatenate(
            [[*tok.encode(f"Paraphrase {k} of {i} in {style}.").ids, pc.eos_id] for i in inside]
        )
        for k, style in ((1, "faq"), (2, "tutorial"), (3, "table"))
    ]
    Dp = len(passes[0]) + len(passes[1]) + 5  # two whole passes and 5 tokens of the third
    # seq_len longer than the stream: no shuffle, so the derived tokens read in pass order.
    s = run_stream(pc, "paraphrase", D, Dp, 10**6, 0)
    assert np.array_equal(s.read(D, Dp), np.concatenate(passes)[:Dp])
    assert s.derived_mask(D, Dp).all() and not s.derived_mask(0, D).any()
    # The files hold paraphrases of the validation documents too; none is ever trained on.
    val_ids = {f"d{i}" for i in range(len(texts))} - set(train_ids)
    derived_text = tok.decode(s.read(D, Dp).tolist(), skip_special_tokens=False)
    assert val_ids and not any(f"of {v} in" in derived_text for v in val_ids)
    # Styles select rows: only the table rows, which become pass 1.
    only = data(jsonl, paraphrases=str(paras), paraphrase_styles=("table",))
    pc_table = prepare_corpus(only, tmp_path, D)
    assert pc_table.paraphrase_passes_available == 1
    n = len(passes[2])
    table = run_stream(pc_table, "paraphrase", D, n, 10**6, 0).read(D, n)
    assert np.array_equal(table, passes[2])
    # A document inside D without a paraphrase: the run is refused, naming the gap.
    with open(paras / "paraphrases.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows if r["id"] != inside[1])
    with pytest.raises(
        BadInput, match=r"do not cover the documents in fresh_tokens: pass 1 exists for"
    ):
        prepare_corpus(data(jsonl, paraphrases=str(paras)), tmp_path, D, paraphrase_passes=1)
    with pytest.raises(BadInput, match="needs paraphrase files"):
        run_stream(prepare_corpus(data(jsonl), tmp_path, D), "paraphrase", D, 10, 64, 0)


def test_a_local_corpus_is_read_from_its_arrow_files_never_memory_mapped(tmp_path, jsonl):
    """Opening a memory-mapped Dataset touches a page per record batch, so the preparing
    process's resident memory grew with the corpus; the Arrow files are read as files."""
    import pyarrow as pa

    pool = pa.default_memory_pool().backend_name
    ds, _ = sources.open_dataset(str(jsonl), "text", "id", str(tmp_path), "data.corpus")
    assert isinstance(ds, sources.ArrowFiles) and ds.column_names == ["id", "text"]
    assert pa.default_memory_pool().backend_name == pool  # the conversion's pool is undone
    maps = Path("/proc/self/maps")
    if maps.is_file():
        assert not any(f in maps.read_text() for f in ds.files)


def test_the_document_store_reads_by_index_and_by_byte_range(tmp_path, texts):
    """Every column of the store, written a batch at a time, is what the documents say."""
    from cdlaw.data.files.doc_store import build_doc_store, hash64, read_spans

    docs = [t + " é✓" * (i % 3) for i, t in enumerate(texts * 8)]  # 3,200: several batches
    rows = [{"id": f"n{i}", "text": f"  {t}\n"} for i, t in enumerate(docs)]
    rows.insert(7, {"id": "blank", "text": "   "})  # an empty document is left out
    corpus = write_jsonl(tmp_path / "c.jsonl", rows)
    ds, _ = sources.open_dataset(str(corpus), "text", "id", str(tmp_path / "a"), "data.corpus")
    store = build_doc_store(ds, str(corpus), "text", "id", tmp_path / "store")
    try:
        raw = [t.encode() for t in docs]
        assert len(store) == len(docs)
        assert store.offsets.tolist() == np.cumsum([0] + [len(r) for r in raw]).tolist()
        assert store.text_hashes().tolist() == [hash64(r) for r in raw]
        assert store.id_hashes().tolist() == [hash64(f"n{i}".encode()) for i in range(len(docs))]
        pick = np.array([3199, 0, 1234, 7, 7])
        assert store.texts(pick) == [docs[i] for i in pick]
        assert store.ids(pick) == [f"n{i}" for i in pick]
        assert read_spans(store.folder / "texts.bin", store.spans(pick)) == store.texts(pick)
        assert not list(store.folder.glob("*.raw"))
    finally:
        store.close()
