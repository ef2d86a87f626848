"""A document of any length is tokenised in bounded pieces (docs/corpus.md, "Long
documents"): the same tokens as the whole document for a byte-level BPE, and the memory a
block's tokenisation takes does not grow with its longest document."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from prepare_corpora import world_texts

from cdlaw.data.files.doc_store import LongText, read_spans
from cdlaw.data.tokens import tokenizer


@pytest.fixture(scope="module")
def bpe():
    return tokenizer.train_bpe(world_texts(300), 400)


def long_text(n_chars: int, run: bool = False) -> str:
    texts = world_texts(200)
    out, i = [], 0
    while sum(map(len, out)) < n_chars:
        out.append(texts[i % len(texts)])
        i += 1
    # blank lines and runs of spaces inside; at the end, with `run`, a run without a space
    return "\n\n".join(out) + ("  x" + "y" * 3000 + " z." if run else "")


def test_pieces_cut_where_the_pretokenizer_splits_and_join_to_the_text(monkeypatch):
    monkeypatch.setattr(tokenizer, "PIECE", 700)
    text = long_text(20_000, run=True)
    pieces = list(tokenizer.text_pieces(text))
    assert "".join(pieces) == text and len(pieces) > 10
    assert all(len(p) < 3 * 700 for p in pieces)
    cuts = [(a[-1], b[0], b[1]) for a, b in itertools.pairwise(pieces)]
    forced = [c for c in cuts if c[1] != " " or c[0].isspace() or c[2].isspace()]
    assert 1 <= len(forced) <= 4 and all(c == ("y", "y", "y") for c in forced)  # the run only
    text = long_text(20_000)
    chunked = [text[i : i + 333] for i in range(0, len(text), 333)]
    assert list(tokenizer.text_pieces(chunked)) == list(tokenizer.text_pieces(text))


def test_a_long_document_gives_the_tokens_of_the_whole(bpe, monkeypatch, tmp_path):
    texts = [long_text(30_000), "a short one.", long_text(9_000)[::-1].strip()]
    whole = [bpe.encode(t, add_special_tokens=False).ids for t in texts]
    monkeypatch.setattr(tokenizer, "LONG_TEXT", 5_000)
    monkeypatch.setattr(tokenizer, "PIECE", 1_000)
    tokens, ends = tokenizer.encode_documents(bpe, texts, 0, np.uint16)
    parts = np.split(tokens, ends[:-1])
    for ids, part in zip(whole, parts, strict=True):
        assert part.tolist() == [*ids, 0]
    path = tmp_path / "texts.bin"
    path.write_bytes("".join(texts).encode())
    spans = np.cumsum([0, *(len(t.encode()) for t in texts)])
    spans = np.stack([spans[:-1], spans[1:]], axis=1)
    monkeypatch.setattr(LongText, "READ_BYTES", 777)
    read = read_spans(path, spans)
    assert [type(t) for t in read] == [LongText, str, LongText]
    assert "".join(read[0]) == texts[0]
    again, _ = tokenizer.encode_documents(bpe, read, 0, np.uint16)
    assert again.tolist() == tokens.tolist()
    assert tokenizer.count_tokens(bpe, texts) == [len(ids) for ids in whole]


MEASURE = """
import resource, sys
from pathlib import Path
import numpy as np
from cdlaw.data.tokens import tokenizer
from cdlaw.data.files.block_tokens import BlockJob, tokenise_block
texts, tok, out = sys.argv[1:4]
size = Path(texts).stat().st_size
tokenizer.load_tokenizer(tok)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
job = BlockJob(texts, tok, 0, "uint16", np.array([[0, size]]), out)
tokenise_block(job)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def test_a_long_documents_block_takes_memory_bounded_by_its_pieces(bpe, tmp_path):
    """One 4 MB document: its Encoding whole took ~100 bytes a token (~100 MB here)."""
    text = long_text(4_000_000)
    (tmp_path / "texts.bin").write_bytes(text.encode())
    bpe.save(str(tmp_path / "tok.json"))
    grown = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tmp_path / "texts.bin"), str(tmp_path / "tok.json"),
         str(tmp_path / "b00000.npy")],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parents[3],
    )  # fmt: skip
    grown_bytes = int(grown.stdout.split()[-1])
    tokens = np.load(tmp_path / "b00000.npy")
    assert tokens[-1] == 0 and len(tokens) > 700_000
    # the tokens (2 bytes each) twice while they are put together, and a few pieces
    assert grown_bytes < 4 * tokens.nbytes + (40 << 20), grown_bytes / 2**20


def test_a_long_jsonl_line_is_read_a_piece_at_a_time_into_the_same_cache(tmp_path, monkeypatch):
    """Lines set aside (long_lines) give the cache of the same corpus read by `datasets`
    whole: escapes, surrogate pairs and whitespace at the ends included."""
    from prepare_corpora import digests

    from cdlaw.config import DataConfig
    from cdlaw.data.files import long_lines
    from cdlaw.data.files.block_tokens import Workers
    from cdlaw.data.tokens.prepare import prepare_corpus
    from cdlaw.system.errors import BadInput

    texts = world_texts(600)
    odd = '\u3000 \n "quoted" caf\u00e9 \U0001f600 tab\there ' + long_text(6000) + " \t\n\u2003"
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    rows[5] = {"text": odd, "id": "long-a", "extra": {"x": [1, 2]}}
    rows[300] = {"id": "long-b", "text": long_text(9000)}
    rows[400] = {"id": "blank", "text": " \n" * 4000}  # a long line of spaces: no document
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = DataConfig(corpus=str(corpus), vocab_size=300, val_tokens=2000)
    whole = digests(prepare_corpus(data, tmp_path / "whole", 1000, workers=Workers(1)).root)
    monkeypatch.setattr(long_lines, "LONG_LINE", 5000)
    set_aside = []
    real = long_lines._set_aside_line
    monkeypatch.setattr(long_lines, "_set_aside_line", lambda *a: set_aside.append(1) or real(*a))
    pieces = prepare_corpus(data, tmp_path / "pieces", 1000, workers=Workers(1))
    assert len(set_aside) == 3 and digests(pieces.root) == whole
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"text": "a"}) + "\n" + json.dumps({"text": 7, "pad": "x" * 6000}) + "\n"
    )
    with pytest.raises(BadInput, match="line 2: column 'text' must hold text"):
        prepare_corpus(DataConfig(corpus=str(bad), vocab_size=300), tmp_path / "bad", 1000)


def test_a_long_line_whose_text_is_not_utf8_is_left_in_place(tmp_path, monkeypatch):
    """A long line with a byte that is not UTF-8 is copied as it is (no text set aside):
    `datasets` then refuses it, naming the byte."""
    from cdlaw.data.files import long_lines

    monkeypatch.setattr(long_lines, "LONG_LINE", 100)
    line = b'{"id": "x", "text": "' + b"word " * 40 + b'\xff end"}\n'
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b'{"id": "a", "text": "short"}\n' + line)
    (copy,) = long_lines.set_aside([corpus], "text", tmp_path / "long")
    assert copy.read_bytes() == corpus.read_bytes()
    assert not list((tmp_path / "long").glob("long-*.txt"))
