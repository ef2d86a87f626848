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
SHUFFLE_TAG = 11  # seeds the document shuffle; ordering.py holds 12 and 13


def prepare_files(data: DataConfig, cache_dir: Path) -> cache.PreparedCorpus:
    """Tokenizer, validation set and every training block of a real corpus, cached."""
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
                _build_files(data, root, docs)
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


def _build_files(data: DataConfig, root: Path, docs: sources.Documents) -> None:
    """Shuffle, split off validation, train the BPE on training text, tokenise everything."""
    n = len(docs.texts)
    order = np.random.default_rng([data.corpus_seed, SHUFFLE_TAG]).permutation(n).tolist()
    texts = [docs.texts[i] for i in order]
    ids = [docs.ids[i] for i in order]
    where = f"data.corpus {data.corpus!r}"

    if data.tokenizer == "bpe":
        # The BPE must not see validation text, but which documents validate depends on
        # the tokenizer: hold out a prefix big enough for sure (bytes ≥ 8 per validation
        # token, doubled until it holds enough tokens) and train on the rest.
        factor = 8
        while True:
            need, reserve = factor * data.val_tokens, 0
            total = 0
            while reserve < n and total < need:
                total += len(texts[reserve].encode())
                reserve += 1
            if reserve >= n:
                raise BadInput(
                    f"{where} is too small: its {n} documents leave no training text after "
                    f"holding out data.val_tokens={data.val_tokens} for validation"
                )
            sample, size = [], 0
            for t in texts[reserve:]:
                if size >= BPE_SAMPLE_BYTES:
                    break
                sample.append(t)
                size += len(t)
            tok = tokenizer.train_bpe(sample, data.vocab_size)
            n_val = _count_docs_for(tok, texts[:reserve], data.val_tokens)
            if n_val is not None:
                break
            factor *= 2
        cache.save_tokenizer(root, tok)
        eos_id = tok.token_to_id(tokenizer.EOS)
    else:
        path = tokenizer.tokenizer_file(data.tokenizer)
        tok = tokenizer.load_tokenizer(path)
        eos_id = tokenizer.find_eos(tok, path)
        root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, root / "tokenizer.json")
        n_val = _count_docs_for(tok, texts, data.val_tokens, eos_id)
        if n_val is None:
            raise BadInput(
                f"{where} is too small: all of it is fewer than data.val_tokens={data.val_tokens} "
                "tokens, so nothing is left for training"
            )
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    dtype = tokenizer.token_dtype(vocab_size)
    val, _ = tokenizer.encode_documents(tok, texts[:n_val], eos_id, dtype)
    # Validation documents never appear in training, not even as an exact duplicate.
    val_texts = set(texts[:n_val])
    train = [i for i in range(n_val, n) if texts[i] not in val_texts]
    if not train:
        raise BadInput(
            f"{where} is too small: nothing is left for training after holding out "
            f"data.val_tokens={data.val_tokens} for validation"
        )
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


def _count_docs_for(tok, texts, n_tokens: int, eos_id: int | None = None) -> int | None:
    """How many leading documents hold at least n_tokens tokens (None if all do not)."""
    eos_id = tok.token_to_id(tokenizer.EOS) if eos_id is None else eos_id
    have, i, step = 0, 0, 256
    while i < len(texts):
        encs = tok.encode_batch(texts[i : i + step], add_special_tokens=False)
        for enc in encs:
            have += len(enc.ids) + 1
            i += 1
            if have >= n_tokens:
                return i
    return None


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
