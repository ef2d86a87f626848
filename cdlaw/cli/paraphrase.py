"""`cdlaw paraphrase`: write paraphrase files for a real corpus with a chat model (a local
folder, or any OpenAI-compatible server)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cdlaw.cli import app, err, print_json, say

# The command's options, declared once here so its signature reads as a list.
Corpus = Annotated[
    str,
    typer.Argument(metavar="CORPUS", help="A .txt/.jsonl/.parquet file or folder, or hf:DATASET."),
]
Model = Annotated[
    str,
    typer.Option(
        "--model",
        help="A local chat model folder, or with --endpoint the served model's name.",
    ),
]
Out = Annotated[
    Path, typer.Option("--out", help="Folder for paraphrases.jsonl (resumed if it exists).")
]
Styles = Annotated[str, typer.Option("--styles", help="Comma-separated styles.")]
Passes = Annotated[
    int, typer.Option("--passes", help="Paraphrases per document (pass k picks its style).")
]
BatchSize = Annotated[
    int, typer.Option("--batch-size", help="Prompts per generate() call (local).")
]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", help="Tokens generated per prompt.")]
Limit = Annotated[
    int | None, typer.Option("--limit", help="Write at most this many new rows, then stop.")
]
Seed = Annotated[
    int, typer.Option("--seed", help="Corpus shuffle seed (use the sweep's data.corpus_seed).")
]
TextColumn = Annotated[str, typer.Option("--text-column", help="Text column (jsonl/parquet/hf).")]
IdColumn = Annotated[str, typer.Option("--id-column", help="Id column; positions when absent.")]
Temperature = Annotated[
    float, typer.Option("--temperature", help="Sampling temperature; 0 = greedy.")
]
Device = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N (local).")]
Endpoint = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="An OpenAI-compatible server's base URL (vllm serve, SGLang, llama.cpp), "
        "e.g. http://localhost:8000/v1.",
    ),
]
Concurrency = Annotated[
    int, typer.Option("--concurrency", help="Requests in flight at once (--endpoint).")
]
ApiKeyEnv = Annotated[
    str | None,
    typer.Option("--api-key-env", help="Environment variable holding the server's API key."),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print the counts as JSON on stdout.")]


@app.command()
def paraphrase(
    corpus: Corpus,
    model: Model,
    out: Out,
    styles: Styles = "faq,math,table,tutorial",
    passes: Passes = 1,
    batch_size: BatchSize = 8,
    max_new_tokens: MaxNewTokens = 512,
    limit: Limit = None,
    seed: Seed = 0,
    text_column: TextColumn = "text",
    id_column: IdColumn = "id",
    temperature: Temperature = 0.7,
    device: Device = "auto",
    endpoint: Endpoint = None,
    concurrency: Concurrency = 8,
    api_key_env: ApiKeyEnv = None,
    json_out: JsonOut = False,
) -> None:
    """Paraphrase every document of CORPUS in the CD paper's styles with a chat model.

    Writes OUT/paraphrases.jsonl rows {"id", "pass", "style", "text"}, the files that a
    sweep's data.paraphrases points to. A local model folder runs in batches; with
    --endpoint, concurrent requests go to an OpenAI-compatible server. Written in order,
    a chunk at a time, and resumable: run the same command again after a kill and it
    continues where it stopped.

    Example: cdlaw paraphrase corpus.jsonl --model ./Qwen2.5-0.5B-Instruct --passes 4 --out paraphrases/
    """
    from cdlaw.cli import require_corpus_reader, require_train_extra

    if endpoint:  # the server generates: requests use the standard library, no torch
        require_corpus_reader("paraphrase --endpoint")
    else:
        require_train_extra("paraphrase")
    from cdlaw.data.derived.paraphrase import ParaphraseOptions, paraphrase_corpus

    options = ParaphraseOptions(
        styles=tuple(s.strip() for s in styles.split(",") if s.strip()),
        passes=passes,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        limit=limit,
        seed=seed,
        text_column=text_column,
        id_column=id_column,
        temperature=temperature,
        device=device,
        endpoint=endpoint,
        concurrency=concurrency,
        api_key_env=api_key_env,
    )
    bar, progress = progress_bar("paraphrasing", transient=json_out)
    try:
        result = paraphrase_corpus(
            corpus,
            model,
            out,
            options,
            on_progress=progress,
            on_warning=lambda message: say("warning", message),
        )
    finally:
        bar.stop()
    render(result, json_out, "paraphrases")


def progress_bar(label: str, transient: bool):
    """A progress bar on stderr and the on_progress callback that drives it. The bar
    starts with the first report, after the inputs were checked, so a bad input prints
    its one sentence and nothing else."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=transient,
    )
    task = None

    def progress(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(label, total=total)
        bar.update(task, completed=done, total=total)

    return bar, progress


def render(result: dict, json_out: bool, what: str) -> None:
    """The counts as JSON on stdout, or one line on stderr."""
    if json_out:
        print_json(result)
    else:
        err.print(
            f"wrote {result['written']} {what} ({result['done']} of {result['total']} done) "
            f"to {result['path']}"
            + (
                f"; {result['empty']} came back empty and will be retried"
                if result["empty"]
                else ""
            )
        )
