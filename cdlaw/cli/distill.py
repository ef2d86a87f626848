"""`cdlaw distill`: write a declared strategy's derived files with a teacher model (a local
folder, a cdlaw run's model/ included, or any OpenAI-compatible server)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cdlaw.cli import app, number, say
from cdlaw.cli.paraphrase import (
    ApiKeyEnv,
    BatchSize,
    Concurrency,
    Device,
    Endpoint,
    JsonOut,
    Limit,
    MaxNewTokens,
    progress_bar,
    render,
)

SweepFile = Annotated[
    Path, typer.Argument(metavar="SWEEP_FILE", help="The sweep whose [derived.NAME] to write.")
]
Strategy = Annotated[
    str, typer.Option("--strategy", help="The [derived.NAME] strategy to write (default: the one).")
]
Teacher = Annotated[
    str,
    typer.Option(
        "--teacher",
        help="A local model folder (e.g. runs/SWEEP/RUN_ID/model), or with --endpoint the "
        "served model's name.",
    ),
]
FreshTokens = Annotated[
    str | None,
    typer.Option(
        "--fresh-tokens",
        metavar="<number>",
        help="D: write the documents inside it, to its folder (default: the largest D).",
    ),
]
Mode = Annotated[str, typer.Option("--mode", help="continue (from each opening) or rewrite.")]
Prompt = Annotated[str, typer.Option("--prompt", help="The instruction of --mode rewrite.")]
PrefixTokens = Annotated[
    int, typer.Option("--prefix-tokens", help="Tokens of each document a continuation starts from.")
]
Passes = Annotated[int, typer.Option("--passes", help="Derived documents per document.")]
Seed = Annotated[int, typer.Option("--seed", help="Seeds sampling (each document and pass).")]
Temperature = Annotated[
    float, typer.Option("--temperature", help="Sampling temperature; 0 = greedy.")
]
Runs = Annotated[
    Path, typer.Option("--out", help="Runs folder: the corpus cache is OUT/.cache, as the sweep's.")
]


@app.command()
def distill(
    sweep_file: SweepFile,
    teacher: Teacher,
    strategy: Strategy = "",
    fresh_tokens: FreshTokens = None,
    mode: Mode = "continue",
    prompt: Prompt = "",
    prefix_tokens: PrefixTokens = 16,
    passes: Passes = 1,
    batch_size: BatchSize = 8,
    max_new_tokens: MaxNewTokens = 512,
    limit: Limit = None,
    seed: Seed = 0,
    temperature: Temperature = 1.0,
    device: Device = "auto",
    endpoint: Endpoint = None,
    concurrency: Concurrency = 8,
    api_key_env: ApiKeyEnv = None,
    runs: Runs = Path("runs"),
    json_out: JsonOut = False,
) -> None:
    """Write a declared strategy's derived files: a teacher model writes PASSES derived
    documents from each document inside D, in training order (self-distillation).

    --mode continue gives the teacher each document's opening and keeps what it writes on;
    --mode rewrite asks it to rewrite the document by --prompt. Rows go to the folder the
    sweep's [derived.NAME] files names for D, resumably; a teacher trained on no more than
    those D fresh tokens (a run at D) leaks nothing a run at D did not see.

    Example: cdlaw distill sweeps/strategies.toml --strategy distill --fresh-tokens 48K --teacher runs/strategies-teachers/RUN_ID/model --passes 16
    """
    from cdlaw.cli import require_corpus_reader, require_train_extra

    if endpoint:
        require_corpus_reader("distill --endpoint")
    else:
        require_train_extra("distill")
    from cdlaw.data.derived.distill import DistillOptions, distill_documents
    from cdlaw.sweep.derived import distill_target
    from cdlaw.sweep.spec import load_sweep
    from cdlaw.system.atomic import check_out_path

    check_out_path(runs, "--out", folder=True)
    sweep = load_sweep(sweep_file)
    name = strategy or _only_declared(sweep)
    d = None if fresh_tokens is None else number(fresh_tokens, "--fresh-tokens")
    target_d, folder = distill_target(sweep, _runs(sweep, runs), name, d)
    options = DistillOptions(
        passes=passes,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        limit=limit,
        seed=seed,
        temperature=temperature,
        device=device,
        endpoint=endpoint,
        concurrency=concurrency,
        api_key_env=api_key_env,
        mode=mode,
        prompt=prompt,
        prefix_tokens=prefix_tokens,
    )
    bar, progress = progress_bar("distilling", transient=json_out)
    try:
        result = distill_documents(
            sweep.data, target_d, teacher, folder, runs / ".cache", options, progress,
            on_warning=lambda message: say("warning", message),
        )  # fmt: skip
    finally:
        bar.stop()
    render(result, json_out, "derived documents")


def _only_declared(sweep) -> str:
    from cdlaw.system.errors import BadInput

    if len(sweep.derived) == 1:
        return next(iter(sweep.derived))
    if not sweep.derived:
        raise BadInput(
            f"{sweep.source} declares no strategy to distill: add a [derived.NAME] table "
            'with files = "DIR", where the teacher\'s rows go (docs/sweep.md), or use '
            "sweeps/strategies.toml"
        )
    raise BadInput(
        f"give --strategy, one of the [derived.NAME] strategies of {sweep.source}: "
        + ", ".join(sweep.derived)
    )


def _runs(sweep, runs: Path):
    """The sweep's runs (a tokenizer file's vocabulary read from the cache)."""
    if sweep.data.tokenizer == "bpe":
        return sweep.runs()
    from cdlaw.data.tokens.prepare import prepare_corpus

    return sweep.runs(prepare_corpus(sweep.data, runs / ".cache", 1).vocab_size)
