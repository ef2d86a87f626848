"""`cdlaw paraphrase`: paraphrase a real corpus with a chat model, resumably.

Writes `<out>/paraphrases.jsonl`, one row {"id", "pass", "style", "text"} per document
and pass, the files a sweep's `[derived.paraphrase] files` names. Pass k of a document uses the
style (faq, math, table, tutorial — the CD paper's four) picked by (document, k): passes
1, 2, … of a document walk through the chosen styles from a place its id decides.

Two backends make the text: a local model folder run with transformers' `generate` in
batches, or any OpenAI-compatible server — `vllm serve`, SGLang, llama.cpp's
`llama-server` — sent concurrent requests; generate.py is the engine both this and
`cdlaw distill` (distill.py) run on.

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

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdlaw.data.derived.generate import (
    JOB_FILE,
    Documents,
    GenerateOptions,
    LocalModel,
    check_options,
    open_backend,
    start_job,
    text_budget,
    write_rows,
)
from cdlaw.data.derived.prompts import (
    PROMPTS,
    STYLES,
    Item,
    build_prompt,
    split_text,
    style_for,
)
from cdlaw.data.files import sources
from cdlaw.data.files.corpus import SHUFFLE_TAG
from cdlaw.system.atomic import check_out_path
from cdlaw.system.errors import BadInput

__all__ = ["JOB_FILE", "PROMPTS", "ROWS_FILE", "STYLES", "build_prompt", "split_text", "style_for"]

ROWS_FILE = "paraphrases.jsonl"
# The job.json keys that decide what a row says: resuming with another value is refused.
# The others (backend, endpoint, passes, …) are recorded and may change between runs:
# more passes extend a job, and a server may move to another address.
SAME_ON_RESUME = (
    "corpus", "corpus_fingerprint", "model", "styles", "seed", "text_column", "id_column",
    "max_new_tokens", "temperature",
)  # fmt: skip


@dataclass(frozen=True)
class ParaphraseOptions(GenerateOptions):
    """What a paraphrasing job is asked to do: one field per `cdlaw paraphrase` option
    (the generation ones are GenerateOptions')."""

    styles: tuple[str, ...] = STYLES  # --styles: the styles a document's passes walk through
    text_column: str = "text"  # --text-column: the text column (jsonl/parquet/hf)
    id_column: str = "id"  # --id-column: the id column; positions when absent


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
    unknown = [s for s in styles if s not in PROMPTS]
    if unknown or not styles:
        raise BadInput(f"--styles {','.join(styles)!r} must name some of {', '.join(STYLES)}")
    check_options(options)
    out = check_out_path(out, "--out", folder=True)
    backend, model_key, run = open_backend(model, options, warn)
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
    start_job(out, job, SAME_ON_RESUME)
    if backend is None:  # loaded only once the inputs are known to be good
        backend = LocalModel(Path(model_key), options.device, options.batch_size, warn)
    instructions = [PROMPTS[s] for s in styles]
    budget = text_budget(backend, instructions, options.max_new_tokens, str(model))
    seed = options.seed
    order = np.random.default_rng([seed, SHUFFLE_TAG]).permutation(len(docs.texts)).tolist()

    def item(doc_id: str, text: str, k: int) -> Item:
        style = style_for(doc_id, k, styles, seed)
        return Item(doc_id, k, style, split_text(backend.tokens, text, budget), PROMPTS[style])

    in_order = Documents(lambda: ((docs.ids[i], docs.texts[i]) for i in order), len(order))
    result = write_rows(out, ROWS_FILE, job, in_order, backend, item, options, on_progress)
    return {**result, "warnings": warnings}
