"""`cdlaw distill`: derived documents written by a teacher model from each fresh document.

Self-distillation (and any synthetic data a model writes from the corpus): for every
document wholly inside the first D fresh tokens of a sweep's corpus, in training order,
the teacher writes `passes` derived documents, the rows {"id", "pass", "style", "text"}
that a sweep's [derived.<name>] files reads. Two modes:

  continue  the teacher is given the document's opening (its first `prefix_tokens` tokens
            in the teacher's tokenizer) and goes on as a language model; the row is the
            opening and what the teacher wrote, up to its end-of-text or max_new_tokens.
            Any base model, a cdlaw run's model/ folder included.
  rewrite   the teacher is asked, with `prompt`, to rewrite the document (an instruction
            model, as `cdlaw paraphrase` asks for its styles).

The documents are read from the sweep's token cache (decoded with the corpus's tokenizer),
so they are exactly the run's: a run at D reads the passes of the documents inside D. A
teacher that saw no fresh tokens beyond D leaks nothing a run at D did not see.

It runs on the generation engine of `cdlaw paraphrase` (generate.py): the same backends
(a local model folder, or an OpenAI-compatible endpoint), resume after a kill, per
(document, pass) sampling seeds and job.json; the sweep counts the rows' tokens exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from cdlaw.config import DataConfig
from cdlaw.data.derived.generate import (
    Documents,
    GenerateOptions,
    LocalModel,
    check_options,
    check_out,
    open_backend,
    start_job,
    text_budget,
    write_rows,
)
from cdlaw.data.derived.prompts import Item, split_text
from cdlaw.data.tokens.cache import PreparedCorpus
from cdlaw.data.tokens.prepare import docs_inside, prepare_corpus, train_blocks
from cdlaw.system.errors import BadInput

ROWS_FILE = "distilled.jsonl"
MODES = ("continue", "rewrite")
# The job.json keys that decide what a row says (see paraphrase.SAME_ON_RESUME).
SAME_ON_RESUME = ("corpus_key", "model", "mode", "prompt", "prefix_tokens", "seed",
                  "max_new_tokens", "temperature")  # fmt: skip


@dataclass(frozen=True)
class DistillOptions(GenerateOptions):
    """What a distillation job is asked to do: one field per `cdlaw distill` option (the
    generation ones are GenerateOptions'; sampling at the teacher's own temperature)."""

    temperature: float = 1.0  # --temperature: 1 samples the teacher's own distribution
    mode: str = "continue"  # --mode: continue (from each document's opening) or rewrite
    prompt: str = ""  # --prompt: the instruction of a rewrite
    prefix_tokens: int = 16  # --prefix-tokens: the opening a continuation starts from
    model_option: str = "--teacher"


def distill_documents(
    data: DataConfig,
    fresh_tokens: int,
    model: str | Path,
    out: str | Path,
    cache_dir: Path,
    options: DistillOptions = DistillOptions(),
    on_progress: Callable[[int, int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> dict:
    """Write (or continue) `<out>/distilled.jsonl` for the documents inside the first
    fresh_tokens tokens of the corpus `data` names (prepared in cache_dir); returns counts
    and the file's path. `model` and the backend options are as for `cdlaw paraphrase`."""
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning:
            on_warning(message)

    _check(options)
    out = Path(out)
    check_out(out)
    rewrite = options.mode == "rewrite"
    backend, model_key, run = open_backend(model, options, warn, chat=rewrite)
    if backend is None:  # a teacher that cannot be loaded is refused before any writing
        backend = LocalModel(
            Path(model_key), options.device, options.batch_size, warn, rewrite, options.model_option
        )
    item, generation = _items(backend, options, str(model))
    pc = prepare_corpus(data, cache_dir, fresh_tokens)
    docs = corpus_documents(pc, fresh_tokens)
    job = {
        "corpus": pc.name,
        "corpus_key": pc.root.name,
        "fresh_tokens": int(fresh_tokens),
        "documents": docs.count,
        "model": model_key,
        "mode": options.mode,
        "prompt": options.prompt,
        "prefix_tokens": options.prefix_tokens,
        "seed": options.seed,
        "max_new_tokens": options.max_new_tokens,
        "temperature": options.temperature,
        "passes": options.passes,
        **run,
    }
    start_job(out, job, SAME_ON_RESUME)
    result = write_rows(out, ROWS_FILE, job, docs, backend, item, generation, on_progress)
    return {**result, "warnings": warnings}


def _check(options: DistillOptions) -> None:
    check_options(options)
    if options.mode not in MODES:
        raise BadInput(f"--mode must be continue or rewrite, not {options.mode!r}")
    if options.mode == "rewrite" and not options.prompt.strip():
        raise BadInput("--mode rewrite needs --prompt, the instruction the teacher rewrites by")
    if options.mode == "continue" and options.prompt:
        raise BadInput("--prompt is for --mode rewrite: a continuation has no instruction")
    if options.prefix_tokens < 1:
        raise BadInput(f"--prefix-tokens must be at least 1, got {options.prefix_tokens}")


def _items(backend, options: DistillOptions, model: str):
    """How a (document, pass) becomes an Item, and the options to generate with (a
    continuation's new tokens capped at what the teacher's context leaves)."""
    if options.mode == "rewrite":
        budget = text_budget(
            backend, [options.prompt], options.max_new_tokens, model, options.model_option
        )

        def rewrite(doc_id: str, text: str, k: int) -> Item:
            return Item(
                doc_id, k, "rewrite", split_text(backend.tokens, text, budget), options.prompt
            )

        return rewrite, options
    room = backend.context - backend.prompt_tokens(None) - options.prefix_tokens
    if room < 1:
        raise BadInput(
            f"{options.model_option} {model!r} has a {backend.context}-token context: no room after a "
            f"{options.prefix_tokens}-token opening; lower --prefix-tokens"
        )
    tok, n = backend.tokens, options.prefix_tokens

    def opening(doc_id: str, text: str, k: int) -> Item:
        ids = tok(text, add_special_tokens=False).input_ids[:n]
        return Item(doc_id, k, "continuation", [tok.decode(ids)], None)

    return opening, replace(options, max_new_tokens=min(options.max_new_tokens, room))


def corpus_documents(pc: PreparedCorpus, fresh_tokens: int) -> Documents:
    """The documents wholly inside the first fresh_tokens tokens, in training order: their
    ids (the embedded corpus's are their places, "0", "1", …) and their texts, decoded from
    the cache a block at a time. BadInput if D holds no whole document."""
    blocks = train_blocks(pc, fresh_tokens)
    n_docs = docs_inside(blocks, fresh_tokens)
    if not sum(n_docs):
        raise BadInput(
            f"fresh_tokens={fresh_tokens} holds no whole document: distilling needs at least "
            "one, so use more fresh tokens"
        )

    def pairs() -> Iterator[tuple[str, str]]:
        from cdlaw.data.tokens.cache import load_tokenizer_once

        tok = load_tokenizer_once(str(pc.tokenizer_path))
        ids = _training_ids(pc)
        for (tokens, ends), m in zip(blocks, n_docs, strict=True):
            start = 0
            for end in ends[:m].tolist():
                yield next(ids), tok.decode(tokens[start : end - 1].tolist())  # EOS left out
                start = end

    return Documents(pairs, int(sum(n_docs)))


def _training_ids(pc: PreparedCorpus) -> Iterator[str]:
    """The training documents' ids in order: train_ids.json, a line at a time (one id per
    line, as file_corpus writes it), or the embedded corpus's places."""
    if pc.data.corpus == "embedded":
        yield from (str(i) for i in range(2**62))
        return
    with open(pc.root / "train_ids.json", encoding="utf-8") as f:
        for line in f:
            line = line.strip().rstrip(",")
            if line not in ("[", "]", ""):
                yield str(json.loads(line))
