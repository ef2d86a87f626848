"""The `cdlaw` command line: thin wrappers that parse, call one library function, render.

Each command lives in its own module here and registers itself on `app`. Heavy imports
(torch, transformers, datasets, matplotlib) happen inside the command functions, so
`cdlaw --help` stays fast (docs/cli.md).
"""

from __future__ import annotations

import logging
import os
import sys

import typer
from rich.console import Console
from rich.markup import escape

from cdlaw.system.errors import BadInput

app = typer.Typer(
    name="cdlaw",
    help="Compute–data scaling laws: sweep small models, fit the law, plan a budget, plot it.\n\n"
    "Example: cdlaw sweep sweeps/demo.toml && cdlaw fit runs/demo && cdlaw plan --law "
    "runs/demo/fit.json --budget-flops 2e12 --unique-tokens 96K",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (docs/cli.md)
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

# Help text is markdown: write placeholders as OUT/SWEEP, never <sweep> (read as HTML and
# dropped). Options that take a quantity (1e21, 25M) are parsed by `number`; their
# metavar NUMBER shows them as numbers in --help, not as <str>.
NUMBER = "<number>"


def _flag_type_rich(option: typer.core.TyperOption, ctx) -> str | None:
    """The type column of an option's row in rich --help: none for a flag (--json,
    --frontier, -h), which takes no value; typer's own shows `<bool>` there, which reads as
    if `--json true` were expected."""
    if option.is_flag or option.count:
        return None
    return _typer_type_rich(option, ctx)


# One place for every command's flags: their declarations stay plain typer.Option(False, …).
_typer_type_rich = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type_rich  # type: ignore[method-assign,assignment]


def _print_version(value: bool) -> None:
    if value:
        from cdlaw import __version__

        print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print cdlaw's version and exit.",
    ),
) -> None:
    """Compute–data scaling laws: sweep small models, fit the law, plan a budget, plot it."""


# Results a person reads (tables, summaries) go to stdout, as rich command-line tools do;
# progress, notes and warnings go to stderr. With --json, stdout carries the JSON alone.
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def wide(console: Console) -> Console:
    """console, or on a log file / pipe (80 columns by default) the same stream 200 columns
    wide, so that tables of runs are never cut."""
    if console.is_terminal:
        return console
    return Console(stderr=console.stderr, width=200)


def say(label: str, message: str, style: str = "yellow") -> None:
    """One labelled line on stderr (`warning: …`); the message prints as given, never as
    rich markup, so paths and values with brackets keep them."""
    err.print(f"[{style}]{label}:[/] {escape(str(message))}", highlight=False)


class _Notes(logging.Handler):
    """What the library notes on logger "cdlaw" (how a table's columns were read, a report
    fitting in memory), as plain lines on stderr."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        err.print(escape(record.getMessage()), highlight=False)


def number(text: str, what: str) -> float:
    """A CLI number (1e21, 25M, 3B); bad text raises BadInput naming the option."""
    from cdlaw.units import parse_number

    return parse_number(text, what)


def count(text: str, what: str) -> int:
    """A CLI count (6144, 6K): a whole number ≥ 1; BadInput naming the option otherwise."""
    x = number(text, what)
    if x != int(x) or x < 1:
        raise BadInput(f"{what} must be a whole number ≥ 1, not {text!r}")
    return int(x)


def print_json(obj, one_line: bool = False) -> None:
    """Print JSON (strict: NaN → null) on stdout, and nothing else; one_line: as one line,
    flushed (a stream of JSON lines, such as `cdlaw govern --watch --json`)."""
    import json

    from cdlaw.system.atomic import json_safe

    sys.stdout.write(json.dumps(json_safe(obj), indent=None if one_line else 2) + "\n")
    if one_line:
        sys.stdout.flush()


# What the train extra adds to the base install: training and data preparation.
TRAIN_MODULES = ("torch", "transformers", "datasets", "tokenizers", "safetensors")


def require_train_extra(command: str) -> None:
    """Raise BadInput naming the extra when a command that trains lacks its packages."""
    import importlib.util

    from cdlaw.system.extras import install_advice

    missing = [m for m in TRAIN_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise BadInput(
            f"`cdlaw {command}` needs {', '.join(missing)}, which this install lacks; "
            f"install {install_advice('train')}."
        )


def require_corpus_reader(command: str) -> None:
    """Raise BadInput when `datasets`, which reads every corpus (cdlaw.data.files.sources), is
    missing: a command that reads a corpus but trains nothing needs only that package."""
    import importlib.util

    from cdlaw.system.extras import DATASETS_SPEC

    if importlib.util.find_spec("datasets") is None:
        raise BadInput(
            f"`cdlaw {command}` reads CORPUS with the datasets package, which this install "
            f"lacks: run `pip install '{DATASETS_SPEC}'` (it needs no torch)."
        )


def require_ray_extra() -> None:
    """Raise BadInput naming the extra when `--executor ray` cannot import Ray."""
    from cdlaw.system.extras import ray_missing

    try:
        import ray  # noqa: F401
    except ImportError:
        raise ray_missing() from None


def _adapt_option(e: Exception) -> str | None:
    """The one sentence for `cdlaw sweep … --adaptive` (or another option only `cdlaw adapt`
    has): click's unknown-option error `e` pointed at `cdlaw adapt`; None for any other."""
    ctx, name = getattr(e, "ctx", None), getattr(e, "option_name", None)
    if ctx is None or ctx.info_name != "sweep" or ctx.parent is None:
        return None
    commands = ctx.parent.command.commands  # the loop's options: adapt's that sweep lacks

    def options(command: str) -> set[str]:
        return {o for p in commands[command].params for o in getattr(p, "opts", ())}

    if name != "--adaptive" and name not in options("adapt") - options("sweep"):
        return None
    return (
        f"`cdlaw sweep` has no {name}: the adaptive loop is `cdlaw adapt SEED_SWEEP_FILE "
        "--budget-flops C --unique-tokens U` (docs/next.md)"
    )


def register_commands() -> None:
    """Import the command modules so each can add itself to `app`."""
    import importlib
    import pkgutil

    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{mod}")


def main() -> None:
    """Entry point: run the app, turning BadInput into one sentence and exit code 2."""
    register_commands()
    debug = os.environ.get("CDLAW_DEBUG") == "1"
    notes, logger = _Notes(), logging.getLogger("cdlaw")
    logger.addHandler(notes)
    logger.setLevel(logging.INFO)
    try:
        # prog_name: `python -m cdlaw` is the same program, with the same completion script
        code = app(prog_name="cdlaw", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except BadInput as e:
        if debug:
            raise
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(2)
    except (typer.Exit, SystemExit) as e:
        code = getattr(e, "exit_code", getattr(e, "code", 0))
        sys.exit(code if code is not None else 0)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except ModuleNotFoundError as e:  # an optional extra that is not installed
        root = (e.name or "").partition(".")[0]
        if debug or root not in (*TRAIN_MODULES, "ray"):
            raise
        from cdlaw.system.extras import install_advice

        advice = install_advice("ray" if root == "ray" else "train")
        err.print(
            f"[bold red]error:[/] {root} is not installed; install {escape(advice)}.",
            highlight=False,
        )
        sys.exit(2)
    except Exception as e:  # a failure while running: exit 1, traceback only on request
        if hasattr(e, "show") and hasattr(e, "exit_code"):  # click's UsageError and kin
            if adapt := _adapt_option(e):
                err.print(f"[bold red]error:[/] {escape(adapt)}", highlight=False)
                sys.exit(2)
            e.show()
            sys.exit(e.exit_code)
        if debug:
            raise
        err.print(
            f"[bold red]failed:[/] {type(e).__name__}: {escape(str(e))}  "
            "(set CDLAW_DEBUG=1 for the traceback)",
            highlight=False,
        )
        sys.exit(1)
    finally:
        logger.removeHandler(notes)
