"""Prepare a corpus once per sweep: the tokenizer, the validation set and the cached
token blocks (docs/names.md, docs/corpus.md); ordering.py builds each run's token stream from it.

The cache lives under `<cache_dir>/data/<key>/`, keyed by a content hash of everything
that decides its tokens (the corpus bytes, or the embedded world's options and seed and
the code that renders it; the tokenizer; and — for real corpora, whose split depends on
it — `data.val_tokens`):

    tokenizer.json          the trained BPE, or a copy of the given tokenizer
    meta.json               what the folder holds (written after the tokenizer and split)
    val-<val_tokens>.npy    the validation tokens
    train/bNNNNN.npy        training documents, BLOCK_DOCS per block, each ended by EOS,
    train/bNNNNN.ends.npy   and each document's end offset in the block
    para-<key>/pKKK/bNNNNN  paraphrase pass K of the same documents (same layout; a
                            document without that paraphrase has length 0)

Every file is written atomically and is read memory-mapped, so the runs of a sweep share
one copy; builders hold a file lock, so two processes preparing at once build each file
once. The embedded corpus is unbounded: its blocks (and paraphrase passes) are built on
demand, as far as a run needs. A real corpus is tokenised whole on first use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from cdlaw.atomic import write_atomic, write_json_atomic, write_text_atomic
from cdlaw.config import DataConfig
from cdlaw.data import render, sources, tokenizer, world
from cdlaw.errors import BadInput

CACHE_VERSION = 1
BLOCK_DOCS = world.BLOCK_DOCS
EMBEDDED_MAX_PASSES = 1000  # the embedded corpus renders any pass; this only bounds a typo
BPE_SAMPLE_BYTES = 32 << 20  # a real corpus's BPE is trained on at most this much text
SHUFFLE_TAG = 11  # seeds the document shuffle; ordering.py holds 12 and 13


@dataclass
class PreparedCorpus:
    """A corpus ready for `run_stream`: tokenizer, validation tokens and the token cache."""

    name: str  # for the summary's `corpus` column, e.g. "embedded:seed0"
    vocab_size: int  # the tokenizer's real vocabulary size
    eos_id: int
    tokenizer_path: Path
    val_tokens: np.ndarray  # held-out fresh documents, the same for every run of a sweep
    train_tokens_available: int  # real corpora: all; embedded (unbounded): as many as built
    paraphrase_passes_available: int  # passes that cover every document inside fresh_tokens
    data: DataConfig
    root: Path  # the cache folder holding this corpus's tokens


def prepare_corpus(
    data: DataConfig, cache_dir: Path, fresh_tokens: int, paraphrase_passes: int = 0
) -> PreparedCorpus:
    """Tokenizer, validation set and the first `fresh_tokens` training tokens, cached.

    With `paraphrase_passes` > 0 the paraphrase passes 1…K of the documents inside
    fresh_tokens are prepared too (run_stream builds any it still lacks for the embedded
    corpus). Raises BadInput for a bad corpus, or one too small for fresh_tokens plus
    validation, or paraphrase files that do not cover those documents.
    """
    fresh_tokens, paraphrase_passes = int(fresh_tokens), int(paraphrase_passes)
    if fresh_tokens <= 0:
        raise BadInput(f"fresh_tokens must be positive, got {fresh_tokens}")
    if paraphrase_passes < 0:
        raise BadInput(f"paraphrase_passes must be ≥ 0, got {paraphrase_passes}")
    if data.corpus_seed < 0:
        raise BadInput(f"data.corpus_seed must be ≥ 0, got {data.corpus_seed}")
    smallest = 128 if data.corpus == "embedded" else 257  # the BPE's bytes + end-of-text
    if data.tokenizer == "bpe" and data.vocab_size < smallest:
        raise BadInput(
            f"data.vocab_size must be at least {smallest} for the byte-level BPE of "
            f"{data.corpus!r}, got {data.vocab_size}"
        )
    if data.corpus == "embedded":
        options = world.WorldOptions.from_config(data.world)
        render.parse_styles(data.paraphrase_styles)
        if data.paraphrases:
            raise BadInput(
                "data.paraphrases is for real corpora: the embedded corpus renders its own "
                "paraphrases (choose them with data.paraphrase_styles)"
            )
        pc = _prepare_embedded(data, Path(cache_dir), options)
    else:
        if data.world:
            raise BadInput(f"data.world only applies to the embedded corpus, not {data.corpus!r}")
        pc = _prepare_files(data, Path(cache_dir))
    blocks = train_blocks(pc, fresh_tokens)
    pc.train_tokens_available = max(pc.train_tokens_available, sum(int(e[-1]) for _, e in blocks))
    n_docs = docs_inside(blocks, fresh_tokens)
    pc.paraphrase_passes_available = _passes_available(pc, blocks, n_docs)
    if paraphrase_passes:
        if not sum(n_docs):
            raise BadInput(too_short_for_paraphrase(fresh_tokens, blocks))
        for k in range(1, paraphrase_passes + 1):
            paraphrase_pass_parts(
                pc, blocks, n_docs, k
            )  # builds (embedded) or checks coverage (files)
    return pc


# ---------------------------------------------------------------------------------------
# The embedded corpus
# ---------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def _world(seed: int, options: world.WorldOptions) -> world.World:
    return world.build_world(seed, options)


def _embedded_key(data: DataConfig, options: world.WorldOptions) -> dict:
    return {
        "cache": CACHE_VERSION,
        "generator": _code_digest(world, render, tokenizer),
        "block_docs": BLOCK_DOCS,  # documents are sampled per block: it changes the corpus
        "corpus": "embedded",
        "seed": data.corpus_seed,
        "world": dataclasses.asdict(options),
    }


def corpus_key(data: DataConfig) -> str | None:
    """The identity of the tokens a run with `data` trains on, without preparing them.

    The name of the corpus's cache folder: a digest of the generator's code and options
    (embedded) or of the corpus files, the split and the tokenizer. A run records it
    (result.json `corpus_key`), so a sweep can tell runs trained on other tokens from its
    own. None for a remote `hf:` dataset, whose fingerprint needs a download.
    """
    if data.corpus == "embedded":
        return _embedded_digest(data, world.WorldOptions.from_config(data.world))
    fingerprint = _cheap_fingerprint(data)
    return None if fingerprint is None else _digest(_files_key(data, fingerprint))


def _bpe_blocks(data: DataConfig) -> int:
    # The BPE learns from the first 8 documents per vocabulary entry (16K documents, ~700K
    # tokens, for the default 2,048): the corpus is regular, so that is plenty.
    return math.ceil(max(4096, 8 * data.vocab_size) / BLOCK_DOCS)


def _embedded_digest(data: DataConfig, options: world.WorldOptions) -> str:
    """The embedded corpus's cache folder name: generator, options and tokenizer."""
    key = _embedded_key(data, options)
    return _digest({**key, "tokenizer": _tokenizer_key(data, _bpe_blocks(data))})


def _prepare_embedded(data: DataConfig, cache_dir: Path, options) -> PreparedCorpus:
    n_bpe_blocks = _bpe_blocks(data)
    root = cache_dir / "data" / _embedded_digest(data, options)
    val_path = root / f"val-{data.val_tokens}.npy"
    if not (root / "meta.json").is_file() or not val_path.is_file():
        with _lock(root):
            w = _world(data.corpus_seed, options)
            if not (root / "meta.json").is_file():
                if data.tokenizer == "bpe":
                    texts = (
                        render.render(w, d)
                        for b in range(n_bpe_blocks)
                        for d in world.documents(w, b, world.TRAIN_STREAM)
                    )
                    bpe = tokenizer.train_bpe(texts, data.vocab_size, alphabet=tokenizer.ASCII)
                    _save_tokenizer(root, bpe)
                else:
                    shutil.copyfile(
                        tokenizer.tokenizer_file(data.tokenizer), root / "tokenizer.json"
                    )
                write_json_atomic(
                    root / "meta.json", _meta(data, root, f"embedded:seed{data.corpus_seed}")
                )
            if not val_path.is_file():
                tok, meta = _tok(root)
                parts, have, b = [], 0, 0
                while have < data.val_tokens:
                    texts = [render.render(w, d) for d in world.documents(w, b, world.VAL_STREAM)]
                    tokens, _ = tokenizer.encode_documents(tok, texts, meta["eos_id"], _dtype(meta))
                    parts.append(tokens)
                    have += len(tokens)
                    b += 1
                _save(val_path, np.concatenate(parts)[: data.val_tokens])
    return _prepared(data, root, train_tokens_available=0)


def _build_embedded_block(pc: PreparedCorpus, block: int, k: int = 0) -> None:
    """Tokenise training block `block` (k = 0) or its paraphrase pass k, into the cache."""
    options = world.WorldOptions.from_config(pc.data.world)
    w = _world(pc.data.corpus_seed, options)
    docs = world.documents(w, block, world.TRAIN_STREAM)
    if k == 0:
        texts = [render.render(w, d) for d in docs]
    else:
        styles = render.parse_styles(pc.data.paraphrase_styles)
        texts = [render.render_paraphrase(w, d, k, styles)[1] for d in docs]
    tok, meta = _tok(pc.root)
    tokens, ends = tokenizer.encode_documents(tok, texts, meta["eos_id"], _dtype(meta))
    _save_block(_block_path(pc, block, k), tokens, ends)


# ---------------------------------------------------------------------------------------
# Real corpora
# ---------------------------------------------------------------------------------------


def _prepare_files(data: DataConfig, cache_dir: Path) -> PreparedCorpus:
    if data.tokenizer != "bpe":
        tokenizer.tokenizer_file(data.tokenizer)  # a bad path is bad input before any work
    if data.paraphrases:
        sources.paraphrase_files(data.paraphrases)
    docs = None
    fingerprint = _cheap_fingerprint(data)
    if fingerprint is None:  # a remote hf: dataset: its fingerprint comes from loading it
        docs = sources.load_documents(data.corpus, data.text_column, data.id_column)
        fingerprint = docs.fingerprint
    root = cache_dir / "data" / _digest(_files_key(data, fingerprint))
    if not (root / "meta.json").is_file():
        with _lock(root):
            if not (root / "meta.json").is_file():
                if docs is None:
                    docs = sources.load_documents(data.corpus, data.text_column, data.id_column)
                _build_files(data, root, docs)
    if data.paraphrases:
        _build_file_paraphrases(data, root)
    meta = json.loads((root / "meta.json").read_text())
    return _prepared(data, root, train_tokens_available=meta["train_tokens"])


def _files_key(data: DataConfig, fingerprint: str) -> dict:
    return {
        "cache": CACHE_VERSION,
        "corpus": fingerprint,
        "seed": data.corpus_seed,
        "val_tokens": data.val_tokens,  # the split (and so the training order) depends on it
        "tokenizer": _tokenizer_key(data, 0),
    }


def _cheap_fingerprint(data: DataConfig) -> str | None:
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
        _save_tokenizer(root, tok)
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
        _save_block(root / "train" / f"b{b:05d}.npy", tokens, ends)
        total += len(tokens)
    _save(root / f"val-{data.val_tokens}.npy", val[: data.val_tokens])
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
    pkey = _digest({"files": sources.paraphrases_fingerprint(data.paraphrases), "styles": styles})
    folder = root / f"para-{pkey}"
    if (folder / "done.json").is_file():
        return
    with _lock(root):
        if (folder / "done.json").is_file():
            return
        paras = sources.load_paraphrases(data.paraphrases, styles)
        ids = json.loads((root / "train_ids.json").read_text())
        tok, meta = _tok(root)
        passes = max((len(paras.get(i, ())) for i in ids), default=0)
        for k in range(1, passes + 1):
            for b, lo in enumerate(range(0, len(ids), BLOCK_DOCS)):
                texts = [
                    p[k - 1] if len(p := paras.get(i, ())) >= k else None
                    for i in ids[lo : lo + BLOCK_DOCS]
                ]
                tokens, ends = tokenizer.encode_documents(tok, texts, meta["eos_id"], _dtype(meta))
                _save_block(folder / f"p{k:03d}" / f"b{b:05d}.npy", tokens, ends)
        write_json_atomic(folder / "done.json", {"passes": passes, "styles": styles})


# ---------------------------------------------------------------------------------------
# Blocks: the cached, memory-mapped token arrays both kinds of corpus share
# ---------------------------------------------------------------------------------------


def _block_path(pc: PreparedCorpus, block: int, k: int = 0) -> Path:
    if k == 0:
        return pc.root / "train" / f"b{block:05d}.npy"
    return _para_folder(pc) / f"p{k:03d}" / f"b{block:05d}.npy"


def _para_folder(pc: PreparedCorpus) -> Path:
    if pc.data.corpus == "embedded":
        styles = render.parse_styles(pc.data.paraphrase_styles)
        return pc.root / f"para-{_digest({'styles': styles})}"
    if not pc.data.paraphrases:
        raise BadInput(
            f"strategy 'paraphrase' on {pc.data.corpus!r} needs paraphrase files: set "
            "data.paraphrases to the --out folder of `cdlaw paraphrase`"
        )
    styles = [name for name, _ in render.parse_styles(pc.data.paraphrase_styles, allowed=None)]
    pkey = _digest(
        {"files": sources.paraphrases_fingerprint(pc.data.paraphrases), "styles": styles}
    )
    return pc.root / f"para-{pkey}"


def _load_block(path: Path) -> tuple[np.ndarray, np.ndarray]:
    return np.load(path, mmap_mode="r"), np.load(path.with_suffix(".ends.npy"))


def _block(pc: PreparedCorpus, block: int, k: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
    """Block `block` (of pass k), built first if the corpus is embedded; None if absent."""
    path = _block_path(pc, block, k)
    if not path.is_file() and pc.data.corpus == "embedded":
        with _lock(pc.root):
            if not path.is_file():
                _build_embedded_block(pc, block, k)
    return _load_block(path) if path.is_file() else None


def train_blocks(pc: PreparedCorpus, n_tokens: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The training blocks that hold the first n_tokens tokens (BadInput if too few)."""
    blocks, have = [], 0
    while have < n_tokens:
        block = _block(pc, len(blocks))
        if block is None:
            raise BadInput(
                f"corpus {pc.name!r} is too small: it has {have} training tokens after holding "
                f"out data.val_tokens={pc.data.val_tokens} for validation, fewer than "
                f"fresh_tokens={n_tokens}; use a larger corpus or fewer fresh tokens"
            )
        blocks.append(block)
        have += int(block[1][-1])
    return blocks


def docs_inside(blocks, n_tokens: int) -> list[int]:
    """Per block, how many of its documents lie wholly inside the first n_tokens tokens."""
    out, start = [], 0
    for _, ends in blocks:
        out.append(int(np.searchsorted(ends, n_tokens - start, side="right")))
        start += int(ends[-1])
    return out


def paraphrase_pass_parts(
    pc: PreparedCorpus, blocks, n_docs: list[int], k: int
) -> list[np.ndarray]:
    """Pass k's paraphrase tokens of the documents inside D, block by block (exact slices)."""
    parts = []
    for b, m in enumerate(n_docs):
        if m == 0:
            continue
        block = _block(pc, b, k)
        lengths = None if block is None else np.diff(block[1][:m], prepend=0)
        if block is None or (lengths == 0).any():
            covered = 0 if block is None else int((lengths > 0).sum())
            raise BadInput(
                f"paraphrase files in {pc.data.paraphrases!r} do not cover the documents in "
                f"fresh_tokens: pass {k} exists for {covered} of the {m} documents of block {b} "
                f"(styles {', '.join(pc.data.paraphrase_styles)}); run `cdlaw paraphrase` with "
                f"--passes {k} or more, or use fewer fresh or derived tokens"
            )
        parts.append(block[0][: int(block[1][m - 1])])
    return parts


def _passes_available(pc: PreparedCorpus, blocks, n_docs) -> int:
    if pc.data.corpus == "embedded":
        return EMBEDDED_MAX_PASSES
    if not pc.data.paraphrases or not sum(n_docs):
        return 0
    k = 0
    while True:
        try:
            paraphrase_pass_parts(pc, blocks, n_docs, k + 1)
        except BadInput:
            return k
        k += 1


def too_short_for_paraphrase(n_tokens: int, blocks) -> str:
    first = int(blocks[0][1][0]) if blocks else 0
    return (
        f"fresh_tokens={n_tokens} holds no whole document (the first has {first} tokens): "
        "paraphrase needs at least one, so use more fresh tokens"
    )


# ---------------------------------------------------------------------------------------
# Small helpers: keys, locks, atomic saves, metadata
# ---------------------------------------------------------------------------------------


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


@lru_cache(maxsize=4)
def _code_digest(*modules) -> str:
    """A hash of the code that makes the tokens: any change to it, even a reworded
    template, gives a new cache rather than stale blocks mixed with new ones."""
    code = b"".join(Path(m.__file__).read_bytes() for m in modules)
    return hashlib.sha256(code).hexdigest()[:16]


def _tokenizer_key(data: DataConfig, bpe_blocks: int) -> dict:
    if data.tokenizer == "bpe":
        return {"bpe": _code_digest(tokenizer), "vocab_size": data.vocab_size, "blocks": bpe_blocks}
    return {"file": tokenizer.file_digest(tokenizer.tokenizer_file(data.tokenizer))}


def _lock(root: Path):
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    return FileLock(str(root / ".lock"))


def _save(path: Path, array: np.ndarray) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.save(f, array)

    write_atomic(path, write)


def _save_block(path: Path, tokens: np.ndarray, ends: np.ndarray) -> None:
    _save(path.with_suffix(".ends.npy"), ends)
    _save(path, tokens)  # last: the tokens file's presence means the block is complete


def _save_tokenizer(root: Path, tok) -> None:
    write_text_atomic(root / "tokenizer.json", tok.to_str())


def _tok(root: Path):
    meta = json.loads((root / "meta.json").read_text())
    return _load_tok(str(root / "tokenizer.json")), meta


@lru_cache(maxsize=8)
def _load_tok(path: str):
    return tokenizer.load_tokenizer(path)


def _dtype(meta: dict):
    return np.dtype(meta["dtype"])


def _meta(data: DataConfig, root: Path, name: str) -> dict:
    tok = tokenizer.load_tokenizer(root / "tokenizer.json")
    if data.tokenizer == "bpe":
        eos_id = tok.token_to_id(tokenizer.EOS)
    else:
        eos_id = tokenizer.find_eos(tok, tokenizer.tokenizer_file(data.tokenizer))
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    return {
        "kind": "embedded",
        "name": name,
        "vocab_size": vocab_size,
        "eos_id": int(eos_id),
        "dtype": np.dtype(tokenizer.token_dtype(vocab_size)).name,
    }


def _prepared(data: DataConfig, root: Path, train_tokens_available: int) -> PreparedCorpus:
    meta = json.loads((root / "meta.json").read_text())
    return PreparedCorpus(
        name=meta["name"],
        vocab_size=meta["vocab_size"],
        eos_id=meta["eos_id"],
        tokenizer_path=root / "tokenizer.json",
        val_tokens=np.load(root / f"val-{data.val_tokens}.npy", mmap_mode="r"),
        train_tokens_available=train_tokens_available,
        paraphrase_passes_available=0,
        data=data,
        root=root,
    )
