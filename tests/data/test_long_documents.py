"""A document of any length is tokenised in bounded pieces (docs/corpus.md, "Long
documents"): the same tokens as the whole document for a byte-level BPE, and the memory a
block's tokenisation takes does not grow with its longest document."""

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from prepare_corpora import world_texts

from cdlaw.data import tokenizer
from cdlaw.data.doc_store import LongText, read_spans


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
from cdlaw.data import tokenizer
from cdlaw.data.block_tokens import BlockJob, tokenise_block
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
        capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    grown_bytes = int(grown.stdout.split()[-1])
    tokens = np.load(tmp_path / "b00000.npy")
    assert tokens[-1] == 0 and len(tokens) > 700_000
    # the tokens (2 bytes each) twice while they are put together, and a few pieces
    assert grown_bytes < 4 * tokens.nbytes + (40 << 20), grown_bytes / 2**20
