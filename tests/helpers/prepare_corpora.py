"""Small real corpora for the preparation tests: deterministic jsonl and txt files whose
tokens (every cache file) were recorded from the list-based preparation, so the streaming
one is checked to give the same bytes (tests/test_data_prepare.py)."""

import hashlib
import json
import shutil
from pathlib import Path

from cdlaw.config import DataConfig


def world_texts(n_docs: int, seed: int = 0) -> list[str]:
    """n_docs varied documents: the embedded world's prose (realistic, cheap, fixed)."""
    from cdlaw.data.embedded import render, world

    w = world.build_world(seed, world.WorldOptions(n_entities=200))
    texts, block = [], 0
    while len(texts) < n_docs:
        texts += [render.render(w, d) for d in world.documents(w, block)]
        block += 1
    return texts[:n_docs]


def write_corpora(folder: Path) -> dict[str, DataConfig]:
    """Write the corpora into folder; their DataConfigs by name."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = world_texts(5200)
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts[:5000])]
    rows[7]["text"] = "  " + rows[7]["text"] + "\n"  # stripped
    rows[11]["text"] = "   "  # empty: skipped
    rows += [{"id": f"copy{i}", "text": texts[i * 37]} for i in range(40)]  # exact copies
    big = folder / "big.jsonl"
    big.write_text("".join(json.dumps(r) + "\n" for r in rows))
    paras = folder / "paras"
    paras.mkdir(exist_ok=True)
    prow = []
    for i, r in enumerate(rows):
        if not r["text"].strip():
            continue  # no document: `cdlaw paraphrase` never paraphrases an empty row
        for k, style in ((1, "faq"), (2, "tutorial"), (3, "table")):
            if k == 3 and i % 3 == 0:
                continue  # some documents lack pass 3
            prow.append({"id": r["id"], "pass": k, "style": style, "text": f"P{k} {style} {i}."})
    prow.append({"id": "d5", "pass": 1, "style": "faq", "text": "A second faq pass 1 of d5."})
    (paras / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prow[::2]))
    (paras / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prow[1::2]))
    small = folder / "small.jsonl"
    small.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[5000:5200]))
    txt = folder / "docs.txt"
    txt.write_text("\n\n".join(texts[:300]) + "\n")
    base = {"vocab_size": 300, "val_tokens": 2000}
    return {
        "big": DataConfig(corpus=str(big), paraphrases=str(paras),
                          paraphrase_styles=("faq", "tutorial", "table"), **base),
        "big_seed3": DataConfig(corpus=str(big), corpus_seed=3, **base),
        "small_measured": DataConfig(corpus=str(small), vocab_size=300, val_tokens=12_000),
        "txt": DataConfig(corpus=str(txt), **base),
    }  # fmt: skip


def given_tokenizer(folder: Path, bpe_root: Path) -> DataConfig:
    """The big corpus with a tokenizer file (the big corpus's own BPE, copied)."""
    tok = folder / "tok.json"
    shutil.copyfile(bpe_root / "tokenizer.json", tok)
    return DataConfig(corpus=str(folder / "big.jsonl"), tokenizer=str(tok), val_tokens=3000)


def digests(root: Path) -> dict[str, str]:
    """sha256 of every file of a cache folder (the lock and scratch files aside)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not any(part.startswith(".") for part in rel.split("/")):
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out
