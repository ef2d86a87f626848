"""Real corpora (txt, jsonl, parquet, hf:): their cache key, the shuffle and validation
split, the BPE, and the tokenised training blocks and paraphrase-file passes, built once."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np

from cdlaw.atomic import write_json_atomic
from cdlaw.config import DataConfig
from cdlaw.data import corpus_cache as cache
from cdlaw.data import render, sources, tokenizer
from cdlaw.data.world import BLOCK_DOCS
from cdlaw.errors import BadInput

BPE_SAMPLE_BYTES = 32 << 20  # a real corpus's BPE is trained on at most this much text
# Bytes held out per validation token before the BPE is trained, when the corpus has room:
# more than a byte-level BPE packs into a token of ordinary text, so one training suffices.
WORST_BYTES_PER_TOKEN = 8
HOLDOUT_MARGIN = 1.05  # a measured hold-out's slack for the BPE trained on a little less text
SMALLEST_VAL_TOKENS = 1024  # the least data.val_tokens a too-small corpus is told to try
SHUFFLE_TAG = 11  # seeds the document shuffle; ordering.py holds 12 and 13


def prepare_files(data: DataConfig, cache_dir: Path, fresh_tokens: int = 1) -> cache.PreparedCorpus:
    """Tokenizer, validation set and every training block of a real corpus, cached.

    fresh_tokens (the most a run will read) only words the message of a corpus too small
    to leave any training text; the cache is the same for every value."""
    if data.tokenizer != "bpe":
        tokenizer.tokenizer_file(data.tokenizer)  # a bad path is bad input before any work
    if data.paraphrases:
        sources.paraphrase_files(data.paraphrases)
    docs = None
    fingerprint = cheap_fingerprint(data)
    if fingerprint is None:  # a remote hf: dataset: its fingerprint comes from loading it
        docs = sources.load_documents(data.corpus, data.text_column, data.id_column)
        fingerprint = docs.fingerprint
    root = cache_dir / "data" / cache.key_digest(files_key(data, fingerprint))
    if not (root / "meta.json").is_file():
        with cache.cache_lock(root):
            if not (root / "meta.json").is_file():
                if docs is None:
                    docs = sources.load_documents(data.corpus, data.text_column, data.id_column)
                _build_files(data, root, docs, fresh_tokens)
    if data.paraphrases:
        _build_file_paraphrases(data, root)
    meta = json.loads((root / "meta.json").read_text())
    return cache.open_prepared(data, root, train_tokens_available=meta["train_tokens"])


def files_key(data: DataConfig, fingerprint: str) -> dict:
    """What decides a real corpus's tokens: its content, the split and the tokenizer."""
    return {
        "cache": cache.CACHE_VERSION,
        "corpus": fingerprint,
        "seed": data.corpus_seed,
        "val_tokens": data.val_tokens,  # the split (and so the training order) depends on it
        "tokenizer": cache.tokenizer_key(data, 0, tokenizer.BPE_VERSION),
    }


def cheap_fingerprint(data: DataConfig) -> str | None:
    """A content hash of a local corpus without loading it (None for remote hf: names)."""
    if data.corpus.startswith("hf:"):
        name, _, _ = sources.parse_hf(data.corpus)
        local = Path(name).expanduser()
        if not local.is_dir():
            return None
        files = sorted(p for p in local.rglob("*") if p.is_file())
        return "hf-disk:" + sources.digest_files(files, local) + f":{data.corpus}"
    loader, files = sources.corpus_files(data.corpus)
    root = Path(data.corpus).expanduser()
    digest = sources.digest_files(files, root if root.is_dir() else root.parent)
    return f"{loader}:{digest}:{data.text_column}:{data.id_column}"


def _build_files(data: DataConfig, root: Path, docs: sources.Documents, fresh_tokens: int) -> None:
    """Shuffle, split off validation, train the BPE on training text, tokenise everything."""
    n = len(docs.texts)
    order = np.random.default_rng([data.corpus_seed, SHUFFLE_TAG]).permutation(n).tolist()
    texts = [docs.texts[i] for i in order]
    ids = [docs.ids[i] for i in order]
    where = f"data.corpus {data.corpus!r}"

    if data.tokenizer == "bpe":
        tok, n_val = _hold_out_for_bpe(data, texts, where, fresh_tokens)
        cache.save_tokenizer(root, tok)
        eos_id = tok.token_to_id(tokenizer.EOS)
    else:
        path = tokenizer.tokenizer_file(data.tokenizer)
        tok = tokenizer.load_tokenizer(path)
        eos_id = tokenizer.find_eos(tok, path)
        root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, root / "tokenizer.json")
        n_val, held = _count_docs_for(tok, texts, data.val_tokens)
        if n_val is None:
            raise too_small(where, held, data.val_tokens, fresh_tokens)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    dtype = tokenizer.token_dtype(vocab_size)
    val, _ = tokenizer.encode_documents(tok, texts[:n_val], eos_id, dtype)
    # Validation documents never appear in training, not even as an exact duplicate.
    val_texts = set(texts[:n_val])
    train = [i for i in range(n_val, n) if texts[i] not in val_texts]
    if not train:  # every other document is a copy of a validation one
        raise too_small(where, len(val), data.val_tokens, fresh_tokens)
    total = 0
    for b, lo in enumerate(range(0, len(train), BLOCK_DOCS)):
        block = [texts[i] for i in train[lo : lo + BLOCK_DOCS]]
        tokens, ends = tokenizer.encode_documents(tok, block, eos_id, dtype)
        cache.save_block(root / "train" / f"b{b:05d}.npy", tokens, ends)
        total += len(tokens)
    cache.save_array(root / f"val-{data.val_tokens}.npy", val[: data.val_tokens])
    write_json_atomic(root / "train_ids.json", [ids[i] for i in train])
    name = data.corpus if data.corpus.startswith("hf:") else Path(data.corpus).name
    meta = {
        "kind": "files",
        "name": f"{name}:seed{data.corpus_seed}",
        "vocab_size": vocab_size,
        "eos_id": int(eos_id),
        "dtype": np.dtype(dtype).name,
        "n_documents": n,
        "n_val_documents": n_val,
        "n_train_documents": len(train),
        "n_blocks": math.ceil(len(train) / BLOCK_DOCS),
        "train_tokens": total,
    }
    write_json_atomic(root / "meta.json", meta)  # last: its presence means "complete"


def _count_docs_for(tok, texts, n_tokens: int) -> tuple[int | None, int]:
    """(how many leading documents hold at least n_tokens tokens, each ended by EOS, or None
    if all of them do not; the tokens counted)."""
    have, i, step = 0, 0, 256
    while i < len(texts):
        encs = tok.encode_batch(texts[i : i + step], add_special_tokens=False)
        for enc in encs:
            have += len(enc.ids) + 1
            i += 1
            if have >= n_tokens:
                return i, have
    return None, have


def _hold_out_for_bpe(data: DataConfig, texts: list[str], where: str, fresh_tokens: int):
    """(the BPE, how many leading documents validate): the BPE never sees a validation text.

    Which documents validate depends on the BPE (the first that hold data.val_tokens of its
    tokens), so a prefix sure to hold them is set aside and the BPE trained on the rest.
    With room, the prefix holds WORST_BYTES_PER_TOKEN bytes per validation token (doubled
    while too few); a corpus without that room holds out what the bytes per token of a BPE
    trained on the rest say it needs, grown until it is enough. BadInput (too_small) when
    no prefix leaves training text.
    """
    val, n = data.val_tokens, len(texts)
    need, measured = WORST_BYTES_PER_TOKEN * val, False
    while True:
        reserve, held_bytes = 0, 0
        while reserve < n and held_bytes < need:
            held_bytes += len(texts[reserve].encode())
            reserve += 1
        if reserve >= n:
            if measured:
                break
            # Every token but a document's EOS holds a byte or more: fewer bytes never do.
            need, measured = math.ceil(val / 2), True
            continue
        sample, size = [], 0
        for t in texts[reserve:]:
            if size >= BPE_SAMPLE_BYTES:
                break
            sample.append(t)
            size += len(t)
        tok = tokenizer.train_bpe(sample, data.vocab_size)
        n_val, held = _count_docs_for(tok, texts[:reserve], val)
        if n_val is not None:
            return tok, n_val
        if measured:  # more bytes than held_bytes, so the prefix grows every round
            need = max(held_bytes + 1, math.ceil(HOLDOUT_MARGIN * val * held_bytes / held))
        else:
            need *= 2
    # The corpus cannot hold both: count its tokens with a BPE trained on all of it.
    encs = tokenizer.train_bpe(texts, data.vocab_size).encode_batch(texts, add_special_tokens=False)
    corpus_tokens = sum(len(enc.ids) + 1 for enc in encs)
    raise too_small(where, corpus_tokens, val, fresh_tokens)


def too_small(where: str, corpus_tokens: int, val_tokens: int, fresh_tokens: int) -> BadInput:
    """The one sentence for a corpus that cannot hold its validation set and a run's fresh
    tokens: what each needs, what the corpus holds, and what to change. fresh_tokens ≤ 1
    means the runs' D is not known here."""
    needs = f"validation needs data.val_tokens={val_tokens} tokens"
    if fresh_tokens > 1:
        needs += f" and the largest run's fresh_tokens={fresh_tokens} more"
    room = corpus_tokens - max(fresh_tokens, 1)  # tokens validation could have
    fit = 0  # the largest power of two below val_tokens that leaves room, with slack
    if room > SMALLEST_VAL_TOKENS and val_tokens > SMALLEST_VAL_TOKENS:
        fit = 1 << int(math.log2(min(room / HOLDOUT_MARGIN, val_tokens - 1)))
    if fit >= SMALLEST_VAL_TOKENS:
        fix = f"set [data] val_tokens = {fit} (or fewer) or use a larger corpus"
    else:
        fix = "use a larger corpus or fewer fresh tokens"
    return BadInput(f"{where} is too small: {needs}, but it holds about {corpus_tokens}; {fix}")


def _build_file_paraphrases(data: DataConfig, root: Path) -> None:
    """Tokenise every paraphrase pass of the training documents (once per file content)."""
    styles = [name for name, _ in render.parse_styles(data.paraphrase_styles, allowed=None)]
    pkey = cache.key_digest(
        {"files": sources.paraphrases_fingerprint(data.paraphrases), "styles": styles}
    )
    folder = root / f"para-{pkey}"
    if (folder / "done.json").is_file():
        return
    with cache.cache_lock(root):
        if (folder / "done.json").is_file():
            return
        paras = sources.load_paraphrases(data.paraphrases, styles)
        ids = json.loads((root / "train_ids.json").read_text())
        tok, meta = cache.tokenizer_and_meta(root)
        passes = max((len(paras.get(i, ())) for i in ids), default=0)
        for k in range(1, passes + 1):
            for b, lo in enumerate(range(0, len(ids), BLOCK_DOCS)):
                texts = [
                    p[k - 1] if len(p := paras.get(i, ())) >= k else None
                    for i in ids[lo : lo + BLOCK_DOCS]
                ]
                tokens, ends = tokenizer.encode_documents(
                    tok, texts, meta["eos_id"], cache.meta_dtype(meta)
                )
                cache.save_block(folder / f"p{k:03d}" / f"b{b:05d}.npy", tokens, ends)
        write_json_atomic(folder / "done.json", {"passes": passes, "styles": styles})
