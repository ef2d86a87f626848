"""`cdlaw paraphrase`: write paraphrase files for a real corpus with a chat model (a local
folder, or any OpenAI-compatible server)."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import app, err, print_json, say


@app.command()
def paraphrase(
    corpus: str = typer.Argument(
        ..., metavar="CORPUS", help="A .txt/.jsonl/.parquet file or folder, or hf:DATASET."
    ),
    model: str = typer.Option(
        ...,
        "--model",
        help="A local chat model folder, or with --endpoint the served model's name.",
    ),
    out: Path = typer.Option(
        ..., "--out", help="Folder for paraphrases.jsonl (resumed if it exists)."
    ),
    styles: str = typer.Option(
        "faq,math,table,tutorial", "--styles", help="Comma-separated styles."
    ),
    passes: int = typer.Option(
        1, "--passes", help="Paraphrases per document (pass k picks its style)."
    ),
    batch_size: int = typer.Option(8, "--batch-size", help="Prompts per generate() call (local)."),
    max_new_tokens: int = typer.Option(
        512, "--max-new-tokens", help="Tokens generated per prompt."
    ),
    limit: int = typer.Option(None, "--limit", help="Write at most this many new rows, then stop."),
    seed: int = typer.Option(
        0, "--seed", help="Corpus shuffle seed (use the sweep's data.corpus_seed)."
    ),
    text_column: str = typer.Option(
        "text", "--text-column", help="Text column (jsonl/parquet/hf)."
    ),
    id_column: str = typer.Option("id", "--id-column", help="Id column; positions when absent."),
    temperature: float = typer.Option(
        0.7, "--temperature", help="Sampling temperature; 0 = greedy."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N (local)."),
    endpoint: str = typer.Option(
        None,
        "--endpoint",
        help="An OpenAI-compatible server's base URL (vllm serve, SGLang, llama.cpp), "
        "e.g. http://localhost:8000/v1.",
    ),
    concurrency: int = typer.Option(
        8, "--concurrency", help="Requests in flight at once (--endpoint)."
    ),
    api_key_env: str = typer.Option(
        None, "--api-key-env", help="Environment variable holding the server's API key."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the counts as JSON on stdout."),
) -> None:
    """Paraphrase every document of CORPUS in the CD paper's styles with a chat model.

    Writes OUT/paraphrases.jsonl rows {"id", "pass", "style", "text"}, the files that a
    sweep's data.paraphrases points to. A local model folder runs in batches; with
    --endpoint, concurrent requests go to an OpenAI-compatible server. Written in order,
    a chunk at a time, and resumable: run the same command again after a kill and it
    continues where it stopped.

    Example: cdlaw paraphrase corpus.jsonl --model ./Qwen2.5-0.5B-Instruct --passes 4 --out paraphrases/
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from cdlaw.cli import require_corpus_reader, require_train_extra

    if endpoint:  # the server generates: requests use the standard library, no torch
        require_corpus_reader("paraphrase --endpoint")
    else:
        require_train_extra("paraphrase")
    from cdlaw.data.paraphrase import paraphrase_corpus

    names = tuple(s.strip() for s in styles.split(",") if s.strip())
    # The bar starts with the first progress report, after the inputs were checked, so a
    # bad input prints its one sentence and nothing else.
    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=json_out,
    )
    task = None

    def progress(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task("paraphrasing", total=total)
        bar.update(task, completed=done, total=total)

    try:
        result = paraphrase_corpus(
            corpus,
            model,
            out,
            styles=names,
            passes=passes,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
            limit=limit,
            seed=seed,
            text_column=text_column,
            id_column=id_column,
            temperature=temperature,
            device=device,
            on_progress=progress,
            endpoint=endpoint,
            concurrency=concurrency,
            api_key_env=api_key_env,
            on_warning=lambda message: say("warning", message),
        )
    finally:
        bar.stop()
    if json_out:
        print_json(result)
    else:
        err.print(
            f"wrote {result['written']} paraphrases ({result['done']} of {result['total']} done) "
            f"to {result['path']}"
            + (
                f"; {result['empty']} came back empty and will be retried"
                if result["empty"]
                else ""
            )
        )
