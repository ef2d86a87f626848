"""`cdlaw paraphrase`: paraphrase a real corpus with a chat model, resumably.

Writes `<out>/paraphrases.jsonl`, one row {"id", "pass", "style", "text"} per document
and pass, the files `data.paraphrases` points a sweep at. Pass k of a document uses the
style (faq, math, table, tutorial — the CD paper's four) picked by (document, k): passes
1, 2, … of a document walk through the chosen styles from a place its id decides.

Two backends make the text: a local model folder run with transformers' `generate` in
batches (`LocalModel`, here), or any OpenAI-compatible server — `vllm serve`, SGLang,
llama.cpp's `llama-server` — sent concurrent requests (`Endpoint`, paraphrase_endpoint.py).

Documents are done in the order training reads them (shuffled by `--seed`, as
`data.corpus_seed` shuffles them), all passes of a document together, so a partial job
covers the documents of the smallest fresh-token budgets first. Rows are written in that
order whatever order the answers come in; the file is append-only, flushed and synced a
chunk at a time, and a killed job, run again with the same arguments, skips the rows
already written (a torn last line is cut off first). `job.json` records what the folder
was written for, so a resume with another corpus, model, styles, seed, max-new-tokens or
temperature is refused. Long documents are cut into pieces at paragraph or sentence ends
that fit the model's context, each piece paraphrased, and the pieces joined, so no part
of a document is lost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np

from cdlaw.atomic import write_json_atomic
from cdlaw.data import sources
from cdlaw.data.file_corpus import SHUFFLE_TAG
from cdlaw.data.paraphrase_prompts import (
    PROMPTS,
    STYLES,
    Chunks,
    Item,
    build_prompt,
    context_too_short,
    join_pieces,
    seed_of,
    split_text,
    style_for,
)
from cdlaw.errors import BadInput

ROWS_FILE = "paraphrases.jsonl"
JOB_FILE = "job.json"
# The job.json keys that decide what a row says: resuming with another value is refused.
# The others (backend, endpoint, passes, …) are recorded and may change between runs:
# more passes extend a job, and a server may move to another address.
SAME_ON_RESUME = (
    "corpus", "corpus_fingerprint", "model", "styles", "seed", "text_column", "id_column",
    "max_new_tokens", "temperature",
)  # fmt: skip


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


@dataclass(frozen=True)
class ParaphraseOptions:
    """What a paraphrasing job is asked to do: one field per `cdlaw paraphrase` option."""

    styles: tuple[str, ...] = STYLES  # --styles: the styles a document's passes walk through
    passes: int = 1  # --passes: paraphrases per document (pass k picks its style)
    batch_size: int = 8  # --batch-size: prompts per generate() call (local model)
    max_new_tokens: int = 512  # --max-new-tokens: tokens generated per prompt
    limit: int | None = None  # --limit: write at most this many new rows, then stop
    seed: int = 0  # --seed: corpus shuffle seed (the sweep's data.corpus_seed); seeds sampling
    text_column: str = "text"  # --text-column: the text column (jsonl/parquet/hf)
    id_column: str = "id"  # --id-column: the id column; positions when absent
    temperature: float = 0.7  # --temperature: sampling temperature; 0 = greedy
    device: str = "auto"  # --device: auto, cpu, cuda or cuda:N (local model)
    endpoint: str | None = None  # --endpoint: an OpenAI-compatible base URL; None: local model
    concurrency: int = 8  # --concurrency: requests in flight at once (endpoint)
    api_key_env: str | None = None  # --api-key-env: environment variable holding the API key


def paraphrase_corpus(
    corpus: str,
    model: str | Path,
    out: str | Path,
    options: ParaphraseOptions = ParaphraseOptions(),
    on_progress: Callable[[int, int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> dict:
    """Write (or continue) `<out>/paraphrases.jsonl`; returns counts and the file's path.

    With `options.endpoint` (an OpenAI-compatible base URL such as http://host:8000/v1)
    `model` is the name the server serves and `options.concurrency` requests run at once;
    without it `model` is a local model folder run in batches of `options.batch_size` on
    `options.device`. on_progress(done, total) is called after every chunk (for a progress
    bar); on_warning(message) once per warning (they are in the result's "warnings" too).
    """
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning:
            on_warning(message)

    styles = tuple(options.styles)
    _check_options(styles, options)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r} exists and is not a folder")
    if options.endpoint:  # the server is asked first: a wrong address fails at once
        backend = _connect(options.endpoint, str(model), options, warn)
        model_key = str(model)
        run = {"backend": "endpoint", "endpoint": backend.base, "endpoint_api": backend.api}
    else:
        model_dir = _local_model_dir(model, options)
        model_key = str(model_dir.resolve())
        run = {"backend": "local", "endpoint": None}
    docs = sources.load_documents(corpus, options.text_column, options.id_column, what="CORPUS")
    job = {
        "corpus": corpus,
        "corpus_fingerprint": docs.fingerprint,
        "model": model_key,
        "styles": list(styles),
        "seed": options.seed,
        "text_column": options.text_column,
        "id_column": options.id_column,
        "max_new_tokens": options.max_new_tokens,
        "temperature": options.temperature,
        "passes": options.passes,
        **run,
    }
    job_path = out / JOB_FILE
    if job_path.is_file():
        _check_resume(job, json.loads(job_path.read_text()), out)
    if not options.endpoint:  # loaded only once the inputs are known to be good
        backend = LocalModel(model_dir, options.device, options.batch_size, warn)
    budget = backend.text_budget(styles, options.max_new_tokens, str(model))

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(job_path, job)
    rows_path = out / ROWS_FILE
    done = done_rows(rows_path)
    written, empty, total = _write_rows(
        rows_path, docs, backend, budget, styles, done, options, on_progress
    )
    return {
        "written": written,
        "empty": empty,
        "done": len(done) + written,
        "total": total,
        "path": str(rows_path),
        "warnings": warnings,
    }


def _check_options(styles: tuple[str, ...], options: ParaphraseOptions) -> None:
    unknown = [s for s in styles if s not in PROMPTS]
    if unknown or not styles:
        raise BadInput(f"--styles {','.join(styles)!r} must name some of {', '.join(STYLES)}")
    for name, value in (
        ("--passes", options.passes),
        ("--batch-size", options.batch_size),
        ("--max-new-tokens", options.max_new_tokens),
    ):
        if value < 1:
            raise BadInput(f"{name} must be at least 1, got {value}")
    if options.limit is not None and options.limit < 0:
        raise BadInput(f"--limit must be ≥ 0, got {options.limit}")
    if options.seed < 0:
        raise BadInput(f"--seed must be ≥ 0, got {options.seed}")
    if not options.temperature >= 0:
        raise BadInput(f"--temperature must be ≥ 0 (0 = greedy), got {options.temperature}")


def _connect(endpoint: str, model: str, options: ParaphraseOptions, warn):
    """The endpoint backend, connected to the server at `endpoint` that serves `model`."""
    from cdlaw.data.paraphrase_endpoint import Endpoint

    if options.concurrency < 1:
        raise BadInput(f"--concurrency must be at least 1, got {options.concurrency}")
    return Endpoint.connect(endpoint, model, options.api_key_env, options.concurrency, warn)


def _local_model_dir(model: str | Path, options: ParaphraseOptions) -> Path:
    """The local model folder; refuses one without config.json, and an API key."""
    if options.api_key_env:
        raise BadInput("--api-key-env is for --endpoint: a local model needs no key")
    model_dir = Path(model).expanduser()
    if not (model_dir / "config.json").is_file():
        raise BadInput(
            f"--model {str(model)!r} is not a local Hugging Face model folder (no "
            "config.json): give the folder of a chat model saved with save_pretrained, "
            "or the served name of a model with --endpoint"
        )
    return model_dir


def _check_resume(job: dict, old: dict, out: Path) -> None:
    """Refuse to resume a folder written for another job (SAME_ON_RESUME); a resume asks
    for the most passes either run asked for."""
    # Keys an older job.json lacks are not compared: it resumes as before.
    changed = [k for k in SAME_ON_RESUME if k in old and old[k] != job[k]]
    if changed:
        raise BadInput(
            f"--out {str(out)!r} holds paraphrases written with another {changed[0]} "
            f"({old.get(changed[0])!r}, now {job[changed[0]]!r}): use a new --out folder"
        )
    job["passes"] = max(job["passes"], int(old.get("passes") or 0))  # the most asked of it


def _write_rows(rows_path: Path, docs, backend, budget, styles, done, options, on_progress):
    """Paraphrase the (document, pass) pairs not yet done, in training order, and append
    their rows a chunk at a time; returns (rows written, answers empty, pairs in all)."""
    seed, passes = options.seed, options.passes
    order = np.random.default_rng([seed, SHUFFLE_TAG]).permutation(len(docs.texts)).tolist()
    pending = [(i, k) for i in order for k in range(1, passes + 1) if (docs.ids[i], k) not in done]
    total = len(docs.texts) * passes
    finished = total - len(pending)
    todo = pending if options.limit is None else pending[: options.limit]

    def item(i: int, k: int) -> Item:
        style = style_for(docs.ids[i], k, styles, seed)
        return Item(docs.ids[i], k, style, split_text(backend.tokens, docs.texts[i], budget))

    items = (item(i, k) for i, k in todo)  # cut lazily, so a large corpus starts at once
    written = empty = 0
    if on_progress:
        on_progress(finished, total)
    with open(rows_path, "a", encoding="utf-8") as f:
        chunks = backend.paraphrase(items, options.max_new_tokens, options.temperature, seed)
        for chunk in chunks:
            for it, text in chunk:
                if not text:  # the model said nothing: leave it undone, so a rerun retries
                    empty += 1
                    continue
                row = {"id": it.doc_id, "pass": it.k, "style": it.style, "text": text}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                written += 1
            f.flush()
            os.fsync(f.fileno())  # a kill after this loses nothing of this chunk
            finished += len(chunk)
            if on_progress:
                on_progress(finished, total)
    return written, empty, total


class LocalModel:
    """The local backend: a model folder run with transformers' `generate`, in batches."""

    def __init__(self, model_dir: Path, device: str, batch_size: int, warn) -> None:
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
        if not getattr(tok, "chat_template", None):
            warn(
                f"--model {str(model_dir)!r} has no chat template, so it gets plain prompts "
                "ending in 'Rewritten text:', which a base model may not follow"
            )
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        self.lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
        self.tokens, self.device, self.batch_size = tok, device, batch_size

    def text_budget(self, styles: tuple[str, ...], max_new_tokens: int, model: str) -> int:
        """Tokens of document text per prompt: the context less instructions and answer."""
        context = int(getattr(self.lm.config, "max_position_embeddings", 0) or 4096)
        overhead = max(len(self.tokens(build_prompt(self.tokens, s, "")).input_ids) for s in styles)
        budget = context - max_new_tokens - overhead
        if budget < 16:
            raise context_too_short(model, context, overhead, max_new_tokens)
        return budget

    def paraphrase(
        self, items: Iterable[Item], max_new_tokens: int, temperature: float, seed: int
    ) -> Chunks:
        import torch

        tok, size = self.tokens, self.batch_size
        items = iter(items)
        while batch := list(islice(items, size)):
            prompts = [build_prompt(tok, it.style, p) for it in batch for p in it.pieces]
            torch.manual_seed(seed_of(seed, batch[0].doc_id, batch[0].k))  # same on resume
            outputs = []
            for j in range(0, len(prompts), size):
                outputs += _generate(
                    self.lm, tok, prompts[j : j + size], max_new_tokens, temperature, self.device
                )
            chunk, at = [], 0
            for it in batch:
                chunk.append((it, join_pieces(outputs[at : at + len(it.pieces)])))
                at += len(it.pieces)
            yield chunk


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
