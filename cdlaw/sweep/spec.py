"""Sweep files: TOML → a validated `SweepConfig` → the list of `RunConfig`s it defines.

A sweep file is data, not code (tomllib; nothing runs from it). It names a grid of runs:

    name = "demo"                      # the runs folder: runs/<name>/ (default: the file's stem)
    share = true                       # train shared stream prefixes once (needs WSD; docs/sweep.md)

    [grid]
    size = ["30K", "100K", "olmo3_14M"]   # n_params targets (the shape ladder) or named sizes
    tokens_per_param = [10, 20]        # D = round(tokens_per_param · N)  (or fresh_tokens = [...])
    strategy = ["repetition", "paraphrase", "distill"]   # built in, or declared below
    derived_ratio = [0, 1, 3, 7]       # r = D′/D, D′ = round(r · D)   (or epochs = [1, 2, 4, 8])
    lr = [3e-3]                        # also weight_decay, seed
    zip = [["size", "lr"]]             # these axes vary together instead of as a product

    [grid.paraphrase]                  # optional: a ratio axis for one strategy only
    passes = [0, 1, 2]                 # paraphrase passes = D′/D  (repetition: epochs = 1 + D′/D)

    [derived.distill]                  # a derived strategy of its own: files aligned by id
    files = "derived/distill"          # (or a folder per D: { "48K" = "DIR", ... })

    [[exclude]]                        # drop every cell matching all of these keys
    size = "100K"                      # (a list matches any of its values)
    derived_ratio = [7, 15]

    [model]                            # ModelConfig overrides (seq_len, rope_theta, or a fixed shape)
    [data]                             # DataConfig (corpus, tokenizer, vocab_size, ...)
    [train]                            # TrainConfig (batch_size, schedule, ...)
    [eval]                             # EvalConfig: downstream tasks (not part of any run id)
    [plan]                             # PlanConfig: budget_flops, unique_tokens the runs are for

The D′ = 0 cell of a (size, D, lr, weight_decay, seed) is one run with strategy "none",
shared by every strategy. Every mistake is a BadInput naming the file, the key and what
would be valid, raised before anything is written.

This module reads and validates the file into a SweepConfig. SweepConfig itself, its
cells, [[exclude]] matching and the expansion into runs are in cdlaw.sweep.grid; the
strategy and ratio axes in cdlaw.sweep.strategy_axes; [derived.<name>] in
cdlaw.sweep.derived; the checks of single values in cdlaw.sweep.values; the facts of a
run and `--only` in cdlaw.sweep.selection.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from cdlaw.config import (
    DataConfig,
    EvalConfig,
    ModelConfig,
    PlanConfig,
    TrainConfig,
    from_dict,
    unknown_key_message,
)
from cdlaw.sweep.derived import parse_derived
from cdlaw.sweep.forest import check_sharing
from cdlaw.sweep.grid import SHAPE_KEYS, SweepConfig, cell_matches, grid_cells
from cdlaw.sweep.strategy_axes import axis_values, ratio_axes, strategy_axis, strategy_tables
from cdlaw.sweep.values import (
    nonnegative_number,
    positive_number,
    seed_entry,
    size_entry,
    sweep_number,
)
from cdlaw.system.errors import BadInput
from cdlaw.units import plain

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the `tomli` package
    import tomli as tomllib

TOP_KEYS = (
    "name",
    "description",
    "share",
    "grid",
    "exclude",
    "model",
    "data",
    "train",
    "derived",
    "eval",
    "plan",
)
GRID_AXES = (
    "size",
    "fresh_tokens",
    "tokens_per_param",
    "strategy",
    "derived_ratio",
    "epochs",
    "lr",
    "weight_decay",
    "seed",
)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ---------------------------------------------------------------------------------------
# Loading and validation.
# ---------------------------------------------------------------------------------------


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep file; every problem is one BadInput sentence naming the file."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"sweep file {str(path)!r} does not exist (try sweeps/smoke.toml)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(
            f"{path.name} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}): "
            "save the sweep file as UTF-8"
        ) from None
    except OSError as e:
        raise BadInput(f"sweep file {str(path)!r} cannot be read: {e.strerror}") from None
    return parse_sweep(text, source=path.name, default_name=path.stem)


def parse_sweep(text: str, source: str = "sweep.toml", default_name: str = "sweep") -> SweepConfig:
    """Validate sweep TOML text (see the module docstring for the format)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source} is not valid TOML: {e}") from None
    try:
        return _parse(raw, text, source, default_name)
    except BadInput as e:
        msg = str(e)
        raise BadInput(msg if msg.startswith(source) else f"{source}: {msg}") from None


def same_runs(text: str, other: str) -> bool:
    """Do two sweep files define the same runs, differing at most in [eval] and [plan]
    (which no run id hashes)? Both must parse; comments and layout are not compared."""
    try:
        a, b = tomllib.loads(text), tomllib.loads(other)
    except tomllib.TOMLDecodeError:
        return False
    for table in ("eval", "plan"):
        a.pop(table, None)
        b.pop(table, None)
    return a == b


def _parse(raw: dict, text: str, source: str, default_name: str) -> SweepConfig:
    """The SweepConfig of a parsed sweep file, every check in the order the file reads."""
    name, description, share = _top_level(raw, default_name)
    data = from_dict(DataConfig, _table(raw, "data"), "data")
    declared, data = parse_derived(raw, data, source)
    train_raw = _table(raw, "train")
    train = from_dict(TrainConfig, train_raw, "train")
    model = _model_overrides(_table(raw, "model"))
    grid = _grid_table(raw)
    sizes = _sizes(grid, model)
    d_axis, d_values = _fresh_tokens(grid)
    # Zipped axes may repeat values (one list entry per cell, e.g. a `cdlaw next` batch);
    # what must not repeat is a zipped tuple.
    zipped = _zipped_axes(grid)
    strategies = strategy_axis(grid, zipped, declared)
    tables = strategy_tables(grid, (*GRID_AXES, "zip"), strategies)
    ratios = ratio_axes(grid, strategies, zipped)
    lrs, wds, seeds = _optimizer_axes(grid, train, train_raw)
    for key, values in (("size", sizes), (d_axis, d_values), ("lr", lrs), ("weight_decay", wds),
                        ("seed", seeds)):  # fmt: skip
        if key not in zipped and len(set(values)) != len(values):
            raise BadInput(f"grid.{key} lists a value twice: {list(values)}")
    sweep = SweepConfig(
        name=name,
        text=text,
        source=source,
        description=description,
        share=share,
        sizes=sizes,
        d_axis=d_axis,
        d_values=d_values,
        strategies=strategies,
        ratios=ratios,
        ratio_tables=tables,
        derived=declared,
        lrs=lrs,
        weight_decays=wds,
        seeds=seeds,
        zip_groups=_zip_groups(grid, tables),
        model=model,
        data=data,
        train=train,
        eval=_eval(_table(raw, "eval"), train),
        plan=from_dict(PlanConfig, _table(raw, "plan"), "plan"),
    )
    sweep = dataclasses.replace(sweep, exclude=_excludes(raw.get("exclude", []), sweep))
    if not sweep.cells():
        raise BadInput("the grid is empty: every cell is excluded")
    if data.tokenizer == "bpe":  # vocab known: every run's shape and token counts are checked now
        runs = (
            sweep.runs()
        )  # (other tokenizers: by the runner, once the data layer knows the vocab)
        if share:
            check_sharing(runs)
    return sweep


def _top_level(raw: dict, default_name: str) -> tuple[str, str, bool]:
    """The file's keys checked, and its name, description and share."""
    for key in raw:
        if key not in TOP_KEYS:
            raise BadInput(unknown_key_message(key, key, list(TOP_KEYS)))
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadInput(
            f"name must be a folder name of letters, digits, '.', '_' or '-', got {name!r}"
        )
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise BadInput(f"description must be a string, got {description!r}")
    share = raw.get("share", False)
    if not isinstance(share, bool):
        raise BadInput(f"share must be true or false, got {share!r}")
    return name, description, share


def _grid_table(raw: dict) -> dict:
    """[grid], there (its keys: strategy_tables)."""
    grid = _table(raw, "grid")
    if not grid:
        raise BadInput(
            "the sweep needs a [grid] table (size, tokens_per_param, derived_ratio, ...)"
        )
    return grid


def _sizes(grid: dict, model: dict) -> tuple[str, ...]:
    """Model sizes: the grid.size axis, or () for one fixed shape given in [model]."""
    if any(k in model for k in SHAPE_KEYS):
        if "size" in grid:
            raise BadInput(
                "give model sizes either as grid.size or as a fixed shape in [model] "
                f"({', '.join(SHAPE_KEYS)}), not both"
            )
        missing = [k for k in SHAPE_KEYS if k not in model]
        if missing:
            raise BadInput(f"a fixed shape in [model] also needs {', '.join(missing)}")
        return ()
    if "size" not in grid:
        raise BadInput('grid.size is required: model sizes like ["100K", "1M", "olmo3_14M"]')
    return tuple(size_entry(v) for v in axis_values(grid, "size"))


def _fresh_tokens(grid: dict) -> tuple[str, tuple[float, ...]]:
    """The D axis: (fresh_tokens or tokens_per_param, its values)."""
    d_keys = [k for k in ("fresh_tokens", "tokens_per_param") if k in grid]
    if len(d_keys) != 1:
        raise BadInput(
            'give exactly one of grid.fresh_tokens (D, e.g. ["1M", "4M"]) or '
            f"grid.tokens_per_param (D = tokens_per_param · N), got {d_keys or 'neither'}"
        )
    d_axis = d_keys[0]
    return d_axis, tuple(positive_number(v, f"grid.{d_axis}") for v in axis_values(grid, d_axis))


def _optimizer_axes(
    grid: dict, train: TrainConfig, train_raw: dict
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[int, ...]]:
    """The lr, weight_decay and seed axes ([train]'s one value where the grid has none)."""
    for key in ("lr", "weight_decay"):
        if key in grid and key in train_raw:
            raise BadInput(f"{key} is set in both [grid] and [train]: keep one")
    lrs = (
        tuple(positive_number(v, "grid.lr") for v in axis_values(grid, "lr"))
        if "lr" in grid
        else (train.lr,)
    )
    wds = (
        tuple(nonnegative_number(v, "grid.weight_decay") for v in axis_values(grid, "weight_decay"))
        if "weight_decay" in grid
        else (train.weight_decay,)
    )
    seeds = tuple(seed_entry(v) for v in axis_values(grid, "seed")) if "seed" in grid else (0,)
    return lrs, wds, seeds


def _eval(table: dict, train: TrainConfig) -> EvalConfig:
    """[eval]: the tasks, with task evaluations on validation steps only (so every task
    number has its validation loss beside it in metrics.parquet). Task files and the
    lm-eval folder are made absolute (from the working directory), so worker processes
    and Ray tasks that start elsewhere read the same files."""
    ev = from_dict(EvalConfig, table, "eval")
    tasks = tuple(str(Path(t).absolute()) if t.endswith(".jsonl") else t for t in ev.tasks)
    include = str(Path(ev.lm_eval_include).absolute()) if ev.lm_eval_include else ""
    ev = dataclasses.replace(ev, tasks=tasks, lm_eval_include=include)
    if ev.every % train.eval_every:
        raise BadInput(
            f"eval.every = {ev.every} must be a multiple of train.eval_every = "
            f"{train.eval_every} (tasks are evaluated with the validation loss), or 0 for "
            "every evaluation"
        )
    return ev


def _table(raw: dict, key: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise BadInput(f"{key} must be a table ([{key}]), got {value!r}")
    return value


def _model_overrides(table: dict) -> dict:
    if "size" in table:
        raise BadInput("model.size is set by grid.size; remove it from [model]")
    if "vocab_size" in table:
        raise BadInput(
            "model.vocab_size comes from the tokenizer: set data.vocab_size (for a trained BPE) "
            "instead"
        )
    model = from_dict(ModelConfig, table, "model")  # unknown keys, types and values
    return {k: getattr(model, k) for k in table}


def _zipped_axes(grid: dict) -> set[str]:
    """The axes grid.zip names (checked properly by _zip_groups)."""
    groups = grid.get("zip", [])
    if not isinstance(groups, list):
        return set()
    return {
        a for g in groups if isinstance(g, list) and len(g) >= 2 for a in g if isinstance(a, str)
    }


def _zip_groups(grid: dict, tables: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    groups = grid.get("zip", [])
    if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
        raise BadInput('grid.zip must be a list of lists of axis names, e.g. [["size", "lr"]]')
    present = [a for a in GRID_AXES if a in grid]
    seen: set[str] = set()
    out = []
    for group in groups:
        for axis in group:
            if not isinstance(axis, str) or axis not in present:
                raise BadInput(
                    unknown_key_message(f"grid.zip entry {axis!r}", str(axis), present).replace(
                        "unknown key", "not a grid axis:"
                    )
                )
            if axis in seen:
                raise BadInput(f"grid.zip names the axis {axis!r} twice")
            seen.add(axis)
            if axis in ("derived_ratio", "epochs") and tables:
                raise BadInput(
                    f"grid.zip cannot zip {axis!r} when [grid.{tables[0]}] gives its own ratio axis"
                )
        lengths = {a: len(axis_values(grid, a)) for a in group}
        if len(set(lengths.values())) > 1:
            raise BadInput(f"zipped axes must have the same length, got {lengths}")
        tuples = list(zip(*(map(str, axis_values(grid, a)) for a in group), strict=True))
        twice = next((t for i, t in enumerate(tuples) if t in tuples[:i]), None)
        if twice is not None:
            raise BadInput(f"grid.zip {list(group)} lists the entry {list(twice)} twice")
        if len(group) >= 2:
            out.append(tuple(group))
    return tuple(out)


def _excludes(entries, sweep: SweepConfig) -> tuple[dict, ...]:
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadInput("exclude must be an array of tables ([[exclude]] with keys like size = ...)")
    valid = ["size", sweep.d_axis, "strategy", "derived_ratio", "epochs", "passes", "lr",
             "weight_decay", "seed"]  # fmt: skip
    cells = list(grid_cells(sweep))
    out = []
    for i, entry in enumerate(entries, 1):
        if not entry:
            raise BadInput(f"exclude entry {i} is empty: it would drop every cell")
        for key, value in entry.items():
            if key not in valid:
                raise BadInput(unknown_key_message(f"exclude[{i}].{key}", key, valid))
            if isinstance(value, dict) or value == []:
                raise BadInput(
                    f"exclude[{i}].{key} must be a value or a list of values, got {plain(value)}"
                )
            for one in value if isinstance(value, list) else [value]:
                if key in ("size", "strategy"):
                    if isinstance(one, bool) or not isinstance(one, (str, int, float)):
                        raise BadInput(
                            f"exclude[{i}].{key} entries must be values like in grid.{key}, "
                            f"got {plain(one)}"
                        )
                else:
                    sweep_number(one, f"exclude[{i}].{key}")
        if not any(cell_matches(c, entry) for c in cells):
            raise BadInput(
                f"exclude entry {i} ({_fmt_entry(entry)}) matches no cell of the grid; "
                "check its values against [grid]"
            )
        out.append(dict(entry))
    return tuple(out)


def _fmt_entry(entry: dict) -> str:
    return ", ".join(f"{k} = {plain(v)}" for k, v in entry.items())
