"""The generation engine of `cdlaw paraphrase` and `cdlaw distill`: a model writes derived
documents, one row per (document, pass), resumably.

A job is documents in the order training reads them, each to be written `passes` times;
the caller turns a (document, pass) into an Item (what to ask, cut to fit the context:
prompts.Item). Two backends answer: a local model folder run with
transformers' `generate` in batches (`LocalModel`, here), or any OpenAI-compatible server
sent concurrent requests (`Endpoint`, derived/endpoint.py). Rows {"id", "pass",
"style", "text"} are appended in document order whatever order the answers come in,
flushed and synced a chunk at a time; a killed job, run again, skips the rows already
written (a torn last line is cut off first). `job.json` records what the folder was
written for, and a resume that would change what a row says is refused.

Every (document, pass) is sampled with a seed of its own (seed_of), so a rerun or a resumed
job gets the same text where the backend honours seeds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from cdlaw.data.derived.prompts import (
    Chunks,
    Item,
    answer_text,
    build_prompt,
    context_too_short,
    seed_of,
)
from cdlaw.data.files import sources
from cdlaw.system.atomic import write_json_atomic
from cdlaw.system.errors import BadInput

JOB_FILE = "job.json"


@dataclass(frozen=True)
class GenerateOptions:
    """How a job generates, whatever it writes: the options `cdlaw paraphrase` and
    `cdlaw distill` share (each adds its own: ParaphraseOptions, DistillOptions)."""

    passes: int = 1  # --passes: rows per document (pass k is the k-th)
    batch_size: int = 8  # --batch-size: prompts per generate() call (local model)
    max_new_tokens: int = 512  # --max-new-tokens: tokens generated per prompt
    limit: int | None = None  # --limit: write at most this many new rows, then stop
    seed: int = 0  # --seed: the corpus shuffle seed (data.corpus_seed); seeds sampling
    temperature: float = 0.7  # --temperature: sampling temperature; 0 = greedy
    device: str = "auto"  # --device: auto, cpu, cuda or cuda:N (local model)
    endpoint: str | None = None  # --endpoint: an OpenAI-compatible base URL; None: local model
    concurrency: int = 8  # --concurrency: requests in flight at once (endpoint)
    api_key_env: str | None = None  # --api-key-env: environment variable holding the API key
    model_option: str = "--model"  # the option that names the model, in messages


def check_options(options: GenerateOptions) -> None:
    """BadInput for a shared option out of range."""
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


def open_backend(model: str | Path, options: GenerateOptions, warn, chat: bool = True):
    """(backend or None, the model's key in job.json, the backend's job.json entries).

    An endpoint is connected at once (a wrong address fails before anything else); a local
    model folder is only checked here (load_local loads it once the inputs are known to be
    good), and the backend is None until then. `chat`: whether the job sends instructions
    (False: plain continuations)."""
    if options.endpoint:
        from cdlaw.data.derived.endpoint import Endpoint

        if options.concurrency < 1:
            raise BadInput(f"--concurrency must be at least 1, got {options.concurrency}")
        backend = Endpoint.connect(
            options.endpoint, str(model), options.api_key_env, options.concurrency, warn, chat,
            option=options.model_option,
        )  # fmt: skip
        return backend, str(model), {"backend": "endpoint", "endpoint": backend.base,
                                     "endpoint_api": backend.api}  # fmt: skip
    return None, str(local_model_dir(model, options).resolve()), {"backend": "local",
                                                                   "endpoint": None}  # fmt: skip


def local_model_dir(model: str | Path, options: GenerateOptions) -> Path:
    """The local model folder; refuses one without config.json, and an API key."""
    if options.api_key_env:
        raise BadInput("--api-key-env is for --endpoint: a local model needs no key")
    model_dir = Path(model).expanduser()
    if not (model_dir / "config.json").is_file():
        raise BadInput(
            f"{options.model_option} {str(model)!r} is not a local Hugging Face model folder (no "
            "config.json): give the folder of a model saved with save_pretrained (a cdlaw "
            "run's model/ folder is one), or the served name of a model with --endpoint"
        )
    return model_dir


def check_out(out: Path) -> None:
    """BadInput when the output folder is a file."""
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r} exists and is not a folder")


def start_job(out: Path, job: dict, same_on_resume: tuple[str, ...]) -> None:
    """Refuse to resume a folder written for another job (a key of same_on_resume that
    changed); a resume asks for the most passes either run asked for. Writes nothing."""
    path = out / JOB_FILE
    if not path.is_file():
        return
    old = json.loads(path.read_text())
    # Keys an older job.json lacks are not compared: it resumes as before.
    changed = [k for k in same_on_resume if k in old and old[k] != job[k]]
    if changed:
        raise BadInput(
            f"--out {str(out)!r} holds rows written with another {changed[0]} "
            f"({old.get(changed[0])!r}, now {job[changed[0]]!r}): use a new --out folder"
        )
    job["passes"] = max(job["passes"], int(old.get("passes") or 0))  # the most asked of it


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
class Documents:
    """A job's documents: (id, text) in the order to write them, and how many there are."""

    pairs: Callable[[], Iterable[tuple[str, str]]]  # called once; may read them lazily
    count: int


def write_rows(
    out: Path,
    rows_file: str,
    job: dict,
    docs: Documents,
    backend,
    make_item: Callable[[str, str, int], Item],
    options: GenerateOptions,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Write job.json, then the rows of the (document, pass) pairs not yet done, in order, a
    chunk at a time; returns the counts and the rows file's path."""
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / JOB_FILE, job)
    rows_path = out / rows_file
    done = done_rows(rows_path)
    passes = job["passes"]
    total = docs.count * passes
    finished = sum(1 for _, k in done if k <= passes)
    pending = (
        (i, t, k) for i, t in docs.pairs() for k in range(1, passes + 1) if (i, k) not in done
    )
    items = (make_item(i, t, k) for i, t, k in islice(pending, options.limit))  # cut lazily
    written = empty = 0
    if on_progress:
        on_progress(finished, total)
    with open(rows_path, "a", encoding="utf-8") as f:
        chunks = backend.generate(items, options.max_new_tokens, options.temperature, options.seed)
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
    done_now = len(done) + written
    return {"written": written, "empty": empty, "done": done_now, "total": total,
            "path": str(rows_path)}  # fmt: skip


class LocalModel:
    """The local backend: a model folder run with transformers' `generate`, in batches."""

    def __init__(
        self,
        model_dir: Path,
        device: str,
        batch_size: int,
        warn,
        chat: bool = True,
        option: str = "--model",  # the option that named model_dir, in messages
    ):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        try:
            tok = AutoTokenizer.from_pretrained(model_dir)
            lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        except (OSError, ValueError, KeyError) as e:
            reason = " ".join(str(e).split())[:200]
            raise BadInput(f"{option} {str(model_dir)!r} cannot be loaded ({reason})") from None
        tok.padding_side = "left"  # decoder-only generation continues from the right edge
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if chat and not getattr(tok, "chat_template", None):
            warn(
                f"{option} {str(model_dir)!r} has no chat template, so it gets plain prompts "
                "ending in 'Rewritten text:', which a base model may not follow"
            )
        # transformers types .to() through a decorator that mypy reads as taking the model
        loaded: Any = lm
        self.lm = loaded.to(device).eval()
        self.tokens, self.device, self.batch_size, self.chat = tok, device, batch_size, chat

    @property
    def context(self) -> int:
        """Tokens the model reads at once."""
        return int(getattr(self.lm.config, "max_position_embeddings", 0) or 4096)

    def prompt_tokens(self, instruction: str | None) -> int:
        """Tokens a prompt takes beyond its text (the instruction and the chat template)."""
        return len(self.tokens(build_prompt(self.tokens, instruction, "")).input_ids)

    def generate(
        self, items: Iterable[Item], max_new_tokens: int, temperature: float, seed: int
    ) -> Chunks:
        """Answers in item order, a batch of items at a time."""
        import torch

        tok, size = self.tokens, self.batch_size
        items = iter(items)
        while batch := list(islice(items, size)):
            prompts = [build_prompt(tok, it.instruction, p) for it in batch for p in it.pieces]
            torch.manual_seed(seed_of(seed, batch[0].doc_id, batch[0].k))  # same on resume
            outputs = []
            for j in range(0, len(prompts), size):
                outputs += self._generate(prompts[j : j + size], max_new_tokens, temperature)
            chunk, at = [], 0
            for it in batch:
                chunk.append((it, answer_text(it, outputs[at : at + len(it.pieces)])))
                at += len(it.pieces)
            yield chunk

    def _generate(self, prompts: list[str], max_new_tokens: int, temperature: float):
        """The texts generated after each prompt (special tokens left out)."""
        lm, tok = self.lm, self.tokens
        # a chat template, or a continuation's document_start, already holds what begins it
        special = self.chat and not getattr(tok, "chat_template", None)
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=special)
        return _sample(lm, tok, enc.to(self.device), max_new_tokens, temperature)


def text_budget(
    backend, instructions, max_new_tokens: int, model: str, option: str = "--model"
) -> int:
    """Tokens of document text per prompt: the context less the longest instruction (or a
    continuation's start token) and the answer."""
    overhead = max(backend.prompt_tokens(i) for i in instructions)
    budget = backend.context - max_new_tokens - overhead
    if budget < 16:
        raise context_too_short(model, backend.context, overhead, max_new_tokens, option)
    return budget


def _sample(lm, tok, enc, max_new_tokens: int, temperature: float) -> list[str]:
    import torch

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
