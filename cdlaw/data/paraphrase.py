"""`cdlaw paraphrase`: paraphrase a real corpus with a local chat model, resumably.

Writes `<out>/paraphrases.jsonl`, one row {"id", "pass", "style", "text"} per document
and pass, the files `data.paraphrases` points a sweep at. Pass k of a document uses the
style (faq, math, table, tutorial — the CD paper's four) picked by (document, k): passes
1, 2, … of a document walk through the chosen styles from a place its id decides.

Documents are done in the order training reads them (shuffled by `--seed`, as
`data.corpus_seed` shuffles them), all passes of a document together, so a partial job
covers the documents of the smallest fresh-token budgets first. The file is append-only
and flushed per batch; a killed job, run again with the same arguments, skips the rows
already written (a torn last line is cut off first). `job.json` records what the folder
was written for, so a resume with another corpus, model, styles or seed is refused.
Long documents are cut into pieces at paragraph or sentence ends that fit the model's
context, each piece paraphrased, and the pieces joined, so no part of a document is lost.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdlaw.atomic import write_json_atomic
from cdlaw.data import sources
from cdlaw.data.file_corpus import SHUFFLE_TAG
from cdlaw.errors import BadInput

KEEP = "Keep every fact, name and number exactly as given, and add no new facts."
PROMPTS = {
    "faq": "Rewrite the text below as questions and answers (an FAQ), answering each question "
    f"with a full sentence. {KEEP}",
    "math": "Rewrite the text below in the style of a math textbook: state its quantities and "
    f"relations as givens, with short worked reasoning in full sentences. {KEEP}",
    "table": "Rewrite the text below as a small table of its key facts, followed by a paragraph "
    f"that restates every row in full sentences. {KEEP}",
    "tutorial": "Rewrite the text below as a short tutorial that teaches its content step by "
    f"step, in plain, clear prose. {KEEP}",
}
STYLES = tuple(PROMPTS)
ROWS_FILE = "paraphrases.jsonl"
JOB_FILE = "job.json"


def style_for(doc_id: str, k: int, styles: tuple[str, ...], seed: int = 0) -> str:
    """The style of pass k of a document: consecutive passes cycle through the styles."""
    h = int.from_bytes(
        hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest(), "little"
    )
    return styles[(h + k - 1) % len(styles)]


def build_prompt(tokenizer, style: str, text: str) -> str:
    """The chat-formatted request (or a plain one when the tokenizer has no chat template)."""
    request = f"{PROMPTS[style]}\n\nText:\n{text}"
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": request}], tokenize=False, add_generation_prompt=True
        )
    return f"{request}\n\nRewritten text:\n"


def split_text(tokenizer, text: str, max_tokens: int) -> list[str]:
    """Pieces of at most ~max_tokens tokens, cut at paragraph, then sentence, then word ends."""
    if len(tokenizer(text, add_special_tokens=False).input_ids) <= max_tokens:
        return [text]
    for pattern in (r"\n\s*\n", r"(?<=[.!?])\s+", r"\s+"):
        units = [u for u in re.split(pattern, text) if u.strip()]
        if len(units) > 1:
            break
    else:  # one unbreakable word: cut it by tokens
        ids = tokenizer(text, add_special_tokens=False).input_ids
        return [tokenizer.decode(ids[i : i + max_tokens]) for i in range(0, len(ids), max_tokens)]
    pieces, current = [], ""
    joiner = "\n\n" if pattern.startswith(r"\n") else " "
    for unit in units:
        candidate = f"{current}{joiner}{unit}" if current else unit
        if current and len(tokenizer(candidate, add_special_tokens=False).input_ids) > max_tokens:
            pieces.append(current)
            candidate = unit
        current = candidate
    pieces.append(current)
    return [q for p in pieces for q in split_text(tokenizer, p, max_tokens)]


@dataclass
class _Item:
    doc_id: str
    k: int
    style: str
    pieces: list[str]


def done_rows(path: Path) -> set[tuple[str, int]]:
    """(id, pass) of the rows already written; a torn last line is cut off the file."""
    if not path.is_file():
        return set()
    raw = path.read_bytes()
    good = raw[: raw.rfind(b"\n") + 1]  # every complete line ends with a newline
    if len(good) != len(raw):
        with open(path, "r+b") as f:
            f.truncate(len(good))
    return {(str(r["id"]), int(r["pass"])) for r in sources.read_rows(path)}


def paraphrase_corpus(
    corpus: str,
    model: str | Path,
    out: str | Path,
    styles: tuple[str, ...] = STYLES,
    passes: int = 1,
    batch_size: int = 8,
    max_new_tokens: int = 512,
    limit: int | None = None,
    seed: int = 0,
    text_column: str = "text",
    id_column: str = "id",
    temperature: float = 0.7,
    device: str = "auto",
    on_progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Write (or continue) `<out>/paraphrases.jsonl`; returns counts and the file's path.

    on_progress(done, total) is called after every batch (for a progress bar).
    """
    styles = tuple(styles)
    unknown = [s for s in styles if s not in PROMPTS]
    if unknown or not styles:
        raise BadInput(f"--styles {','.join(styles)!r} must name some of {', '.join(STYLES)}")
    for name, value in (
        ("--passes", passes),
        ("--batch-size", batch_size),
        ("--max-new-tokens", max_new_tokens),
    ):
        if value < 1:
            raise BadInput(f"{name} must be at least 1, got {value}")
    if limit is not None and limit < 0:
        raise BadInput(f"--limit must be ≥ 0, got {limit}")
    if seed < 0:
        raise BadInput(f"--seed must be ≥ 0, got {seed}")
    model_dir = Path(model).expanduser()
    if not (model_dir / "config.json").is_file():
        raise BadInput(
            f"--model {str(model)!r} is not a local Hugging Face model folder (no config.json): "
            "give the folder of a chat model saved with save_pretrained"
        )
    docs = sources.load_documents(corpus, text_column, id_column, what="CORPUS")
    out = Path(out)
    job = {
        "corpus": corpus,
        "corpus_fingerprint": docs.fingerprint,
        "model": str(model_dir.resolve()),
        "styles": list(styles),
        "seed": seed,
        "text_column": text_column,
        "id_column": id_column,
    }
    job_path = out / JOB_FILE
    if job_path.is_file():
        old = json.loads(job_path.read_text())
        changed = [k for k in job if old.get(k) != job[k]]
        if changed:
            raise BadInput(
                f"--out {str(out)!r} holds paraphrases written with another {changed[0]} "
                f"({old.get(changed[0])!r}, now {job[changed[0]]!r}): use a new --out folder"
            )
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r} exists and is not a folder")

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"  # decoder-only generation continues from the right edge
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    context = int(getattr(lm.config, "max_position_embeddings", 0) or 4096)
    overhead = max(len(tok(build_prompt(tok, s, "")).input_ids) for s in styles)
    budget = context - max_new_tokens - overhead  # tokens of document text per prompt
    if budget < 16:
        raise BadInput(
            f"--model {str(model)!r} has a {context}-token context: too short for the "
            f"{overhead}-token instructions plus --max-new-tokens {max_new_tokens}; lower it"
        )

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(job_path, job)
    rows_path = out / ROWS_FILE
    done = done_rows(rows_path)
    order = np.random.default_rng([seed, SHUFFLE_TAG]).permutation(len(docs.texts)).tolist()
    pending = [(i, k) for i in order for k in range(1, passes + 1) if (docs.ids[i], k) not in done]
    total = len(docs.texts) * passes
    finished = total - len(pending)
    todo = pending if limit is None else pending[:limit]
    written = empty = 0
    if on_progress:
        on_progress(finished, total)
    with open(rows_path, "a", encoding="utf-8") as f:
        for lo in range(0, len(todo), batch_size):
            items = []
            for i, k in todo[lo : lo + batch_size]:
                style = style_for(docs.ids[i], k, styles, seed)
                items.append(_Item(docs.ids[i], k, style, split_text(tok, docs.texts[i], budget)))
            prompts = [build_prompt(tok, it.style, p) for it in items for p in it.pieces]
            torch.manual_seed(_seed_of(seed, items[0].doc_id, items[0].k))  # same on resume
            outputs = []
            for j in range(0, len(prompts), batch_size):
                outputs += _generate(
                    lm, tok, prompts[j : j + batch_size], max_new_tokens, temperature, device
                )
            at = 0
            for it in items:
                text = "\n\n".join(
                    o.strip() for o in outputs[at : at + len(it.pieces)] if o.strip()
                )
                at += len(it.pieces)
                if not text:  # the model said nothing: leave it undone, so a rerun retries
                    empty += 1
                    continue
                row = {"id": it.doc_id, "pass": it.k, "style": it.style, "text": text}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                written += 1
            f.flush()
            os.fsync(f.fileno())  # a kill after this loses nothing of this batch
            finished += len(items)
            if on_progress:
                on_progress(finished, total)
    return {
        "written": written,
        "empty": empty,
        "done": len(done) + written,
        "total": total,
        "path": str(rows_path),
    }


def _seed_of(seed: int, doc_id: str, k: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{doc_id}:{k}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def _generate(lm, tok, prompts: list[str], max_new_tokens: int, temperature: float, device: str):
    import torch

    templated = bool(getattr(tok, "chat_template", None))
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=not templated).to(
        device
    )
    sample = temperature > 0
    with torch.no_grad():
        out = lm.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=0.95 if sample else None,
            pad_token_id=tok.pad_token_id,
        )
    return tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
