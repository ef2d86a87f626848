"""Tokenizers: a byte-level BPE trained on the corpus, or a given one (docs/corpus.md).

The trained BPE is GPT-2 style (byte-level, so any text round-trips) with one special
token, `<|endoftext|>` (id 0), which ends every document in the token streams. A given
tokenizer is a tokenizer.json file or a Hugging Face tokenizer folder; its end-of-text
token is read from tokenizer_config.json or found among the usual names.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from cdlaw.system.errors import BadInput

EOS = "<|endoftext|>"
EOS_NAMES = (EOS, "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>", "[SEP]")


# Printable ASCII and newline: everything the embedded corpus writes. Its BPE starts from
# these 96 characters instead of all 256 bytes, so a small vocabulary (the demo's 512)
# spends its entries on merges rather than on bytes that never occur.
ASCII = "\n" + "".join(chr(b) for b in range(32, 127))


# The trained BPE's version, hashed into the cache key of real corpora: bump it whenever a
# change here gives other tokens for the same text (so that stale caches are not reused).
# The embedded corpus's key uses its GENERATOR_VERSION, whose test covers this BPE too.
BPE_VERSION = 1


def byte_level_chars(text: str) -> list[str]:
    """The byte-level BPE's characters for the bytes of `text` (GPT-2's byte → char map)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    table = {b: chr(b) if b in printable else chr(next(extra)) for b in range(256)}
    return sorted({table[b] for b in text.encode()})


def train_bpe(texts: Iterable[str], vocab_size: int, alphabet: str | None = None):
    """A byte-level BPE with `vocab_size` tokens (fewer if the text has too few merges).

    It starts from all 256 bytes, so any text can be encoded, or — for a closed corpus
    like the embedded one — from the bytes of `alphabet` only.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=(
            pre_tokenizers.ByteLevel.alphabet() if alphabet is None else byte_level_chars(alphabet)
        ),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def tokenizer_file(spec: str) -> Path:
    """The tokenizer.json behind `data.tokenizer` (a file, or a folder that holds one)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
        if not path.is_file():
            raise BadInput(
                f"data.tokenizer folder {spec!r} has no tokenizer.json: give a Hugging Face "
                "tokenizer folder saved with a fast tokenizer, a tokenizer.json file, or 'bpe'"
            )
    elif not path.is_file():
        raise BadInput(
            f"data.tokenizer {spec!r} is neither 'bpe' nor an existing tokenizer.json file or "
            "tokenizer folder"
        )
    return path


def load_tokenizer(path: str | Path):
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:
        raise BadInput(
            f"data.tokenizer {str(path)!r} is not a valid tokenizer.json ({e})"
        ) from None


def file_vocab_size(spec: str) -> int:
    """The vocabulary of the tokenizer file `data.tokenizer` names (added tokens
    included, as a prepared corpus counts it), read without preparing any corpus."""
    return load_tokenizer(tokenizer_file(spec)).get_vocab_size(with_added_tokens=True)


def find_eos(tok, path: Path) -> int:
    """The end-of-text id: tokenizer_config.json's eos_token, else a well-known name."""
    names = []
    config = path.parent / "tokenizer_config.json"
    if config.is_file():
        try:
            eos = json.loads(config.read_text()).get("eos_token")
        except (OSError, ValueError):
            eos = None
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            names.append(eos)
    for name in [*names, *EOS_NAMES]:
        token_id = tok.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    raise BadInput(
        f"tokenizer {str(path)!r} has no end-of-text token (looked for {', '.join(EOS_NAMES)} "
        "and tokenizer_config.json's eos_token): add one, or use data.tokenizer = 'bpe'"
    )


ENCODE_BATCH = 64  # documents encoded at a time by encode_documents
# A document longer than LONG_TEXT characters (or given as pieces, doc_store.LongText) is
# encoded PIECE characters at a time, so the memory it takes does not grow with it: an
# Encoding holds ~100 bytes a token, which made one 50 MB document cost 6 GB.
LONG_TEXT = 1 << 20
PIECE = 1 << 16
# Where a long document is cut: at a space between two non-spaces. A byte-level BPE's
# pre-tokenizer (GPT-2's or Llama 3's split) never puts one token across such a place, so
# its pieces encode to the very tokens of the whole; a text without one for PIECE
# characters is cut where it must be.
_CUT = re.compile(r"(?<=\S) (?=\S)")


_TYPECODE = {2: "H", 4: "I"}  # array typecodes of the token dtypes' sizes (uint16, uint32)


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def is_long(text) -> bool:
    """Whether a document is encoded a piece at a time (see LONG_TEXT)."""
    return text is not None and (not isinstance(text, str) or len(text) > LONG_TEXT)


def text_pieces(text: str | Iterable[str]) -> Iterator[str]:
    """A long document (a string, or its text in chunks of any size) as pieces of about
    PIECE characters, each cut where the pre-tokenizer splits anyway (_CUT)."""
    chunks: Iterable[str]
    if isinstance(text, str):
        chunks = (text[i : i + PIECE] for i in range(0, len(text), PIECE))
    else:
        chunks = text
    carry = ""
    for chunk in chunks:
        carry += chunk
        while len(carry) >= 2 * PIECE:
            found = _CUT.search(carry, PIECE)
            cut = found.start() if found else PIECE
            yield carry[:cut]
            carry = carry[cut:]
    if carry:
        yield carry


def count_tokens(tok, texts: Sequence[str]) -> list[int]:
    """Each text's token count (no EOS), long documents encoded a piece at a time."""
    counts = [0] * len(texts)
    short = [i for i, t in enumerate(texts) if not is_long(t)]
    for i, enc in zip(short, tok.encode_batch([texts[i] for i in short], add_special_tokens=False),
                      strict=True):  # fmt: skip
        counts[i] = len(enc.ids)
    for i, t in enumerate(texts):
        if is_long(t):
            counts[i] = sum(len(ids) for ids in _piece_ids(tok, t))
    return counts


def _piece_ids(tok, text) -> Iterator[list[int]]:
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    for piece in text_pieces(text):
        yield encode([piece], add_special_tokens=False)[0].ids


def encode_documents(
    tok, texts: Sequence[str | Iterable[str] | None], eos_id: int, dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Each text's tokens followed by EOS, concatenated; and each document's end offset.

    An empty or missing text (None) gives an empty document (no EOS): the callers use a
    zero length to mean "this document has no such text" (a missing paraphrase). A long
    document (is_long; a string, or an iterable of its text in chunks) is encoded a piece
    at a time (text_pieces).
    """
    present = [i for i, t in enumerate(texts) if t]
    # encode_batch_fast gives the same ids without character offsets (tokenizers ≥ 0.21)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    lengths = np.zeros(len(texts), dtype=np.int64)
    # The tokens go into one growing array (grown in place where the allocator can), so a
    # long document's tokens are held once, not again in pieces while they are joined.
    tokens = array(_TYPECODE[np.dtype(dtype).itemsize])
    # A few hundred at a time: an Encoding holds ~100 bytes a token (strings, offsets,
    # masks), so a whole block's would cost more memory than its tokens.
    for lo in range(0, len(present), ENCODE_BATCH):
        part = present[lo : lo + ENCODE_BATCH]
        short = [i for i in part if not is_long(texts[i])]
        encodings = dict(zip(short, encode([texts[i] for i in short], add_special_tokens=False),
                             strict=True))  # fmt: skip
        for i in part:
            before = len(tokens)
            if i in encodings:
                tokens.extend(encodings.pop(i).ids)
            else:
                for ids in _piece_ids(tok, texts[i]):
                    tokens.extend(ids)
            tokens.append(eos_id)
            lengths[i] = len(tokens) - before
    out = np.frombuffer(tokens, dtype=dtype) if len(tokens) else np.empty(0, dtype=dtype)
    return out, np.cumsum(lengths)
