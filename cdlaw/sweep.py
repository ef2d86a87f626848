"""Sweep files: TOML → a validated `SweepConfig` → the list of `RunConfig`s it defines.

A sweep file is data, not code (tomllib; nothing runs from it). It names a grid of runs:

    name = "demo"                      # the runs folder: runs/<name>/ (default: the file's stem)

    [grid]
    size = ["30K", "100K", "olmo3_14M"]   # n_params targets (the shape ladder) or named sizes
    tokens_per_param = [10, 20]        # D = round(tokens_per_param · N)  (or fresh_tokens = [...])
    strategy = ["repetition", "paraphrase"]
    derived_ratio = [0, 1, 3, 7]       # r = D′/D, D′ = round(r · D)   (or epochs = [1, 2, 4, 8])
    lr = [3e-3]                        # also weight_decay, seed
    zip = [["size", "lr"]]             # these axes vary together instead of as a product

    [grid.paraphrase]                  # optional: a ratio axis for one strategy only
    passes = [0, 1, 2]                 # paraphrase passes = D′/D  (repetition: epochs = 1 + D′/D)

    [[exclude]]                        # drop every cell matching all of these keys
    size = "100K"
    derived_ratio = 7

    [model]                            # ModelConfig overrides (seq_len, rope_theta, or a fixed shape)
    [data]                             # DataConfig (corpus, tokenizer, vocab_size, ...)
    [train]                            # TrainConfig (batch_size, schedule, ...)

The D′ = 0 cell of a (size, D, lr, weight_decay, seed) is one run with strategy "none",
shared by both strategies. Every mistake is a BadInput naming the file, the key and what
would be valid, raised before anything is written.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from cdlaw.config import (
    DataConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    from_dict,
    unknown_key_message,
)
from cdlaw.errors import BadInput

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the `tomli` package
    import tomli as tomllib

TOP_KEYS = ("name", "description", "grid", "exclude", "model", "data", "train")
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
GRID_KEYS = (*GRID_AXES, "zip", "repetition", "paraphrase")
DERIVED_STRATEGIES = ("repetition", "paraphrase")
# The ratio axis may be written three ways; each maps to r = D′/D.
RATIO_KEYS = {"derived_ratio": 0.0, "epochs": -1.0, "passes": 0.0}  # r = value + offset
STRATEGY_RATIO_KEYS = {
    "repetition": ("derived_ratio", "epochs"),
    "paraphrase": ("derived_ratio", "passes"),
}
SHAPE_KEYS = ("d_model", "n_layers", "n_heads", "mlp_hidden")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Cell:
    """One point of the grid, before it becomes a run (kept for exclude and --only)."""

    size: str  # as written in the sweep file ("1M", "olmo3_14M", or "custom")
    d_axis: str  # "fresh_tokens" or "tokens_per_param"
    d_value: float
    strategy: str  # as in the grid (repetition | paraphrase), before r = 0 becomes "none"
    ratio_key: str  # "derived_ratio", "epochs" or "passes"
    ratio_value: float
    lr: float
    weight_decay: float
    seed: int

    @property
    def derived_ratio(self) -> float:
        return self.ratio_value + RATIO_KEYS[self.ratio_key]


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep file. `runs()` expands it into RunConfigs."""

    name: str
    text: str  # the file verbatim (copied to runs/<name>/sweep.toml)
    source: str  # the file name, for messages
    description: str = ""
    sizes: tuple[str, ...] = ()  # empty when [model] gives a fixed shape
    d_axis: str = "tokens_per_param"
    d_values: tuple[float, ...] = ()
    strategies: tuple[str, ...] = DERIVED_STRATEGIES
    # strategy -> (ratio key, values); the same entry for both unless [grid.<strategy>] is used
    ratios: dict[str, tuple[str, tuple[float, ...]]] = field(default_factory=dict)
    lrs: tuple[float, ...] = ()
    weight_decays: tuple[float, ...] = ()
    seeds: tuple[int, ...] = (0,)
    zip_groups: tuple[tuple[str, ...], ...] = ()
    exclude: tuple[dict, ...] = ()
    model: dict = field(default_factory=dict)  # validated ModelConfig overrides
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def cells(self) -> list[Cell]:
        """Every grid cell (product of the axes, zipped groups varying together), minus excludes."""
        return [c for c in _cells(self) if not any(_matches(c, ex) for ex in self.exclude)]

    def runs(self, vocab_size: int | None = None) -> list[RunConfig]:
        """The sweep's runs, in grid order, the shared D′ = 0 runs once.

        vocab_size is the tokenizer's real vocabulary (the data layer knows it); for a BPE
        trained on the corpus it is data.vocab_size and may be omitted.
        """
        return expand(self, vocab_size)


# ---------------------------------------------------------------------------------------
# Loading and validation.
# ---------------------------------------------------------------------------------------


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep file; every problem is one BadInput sentence naming the file."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"sweep file {str(path)!r} does not exist (try sweeps/smoke.toml)")
    text = path.read_text()
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


def _parse(raw: dict, text: str, source: str, default_name: str) -> SweepConfig:
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

    data = from_dict(DataConfig, _table(raw, "data"), "data")
    train_raw = _table(raw, "train")
    train = from_dict(TrainConfig, train_raw, "train")
    model = _model_overrides(_table(raw, "model"))

    grid = _table(raw, "grid")
    if not grid:
        raise BadInput(
            "the sweep needs a [grid] table (size, tokens_per_param, derived_ratio, ...)"
        )
    for key in grid:
        if key not in GRID_KEYS:
            raise BadInput(unknown_key_message(f"grid.{key}", key, list(GRID_KEYS)))

    # model size: an axis, or one fixed shape from [model]
    fixed_shape = any(k in model for k in SHAPE_KEYS)
    if fixed_shape:
        if "size" in grid:
            raise BadInput(
                "give model sizes either as grid.size or as a fixed shape in [model] "
                f"({', '.join(SHAPE_KEYS)}), not both"
            )
        missing = [k for k in SHAPE_KEYS if k not in model]
        if missing:
            raise BadInput(f"a fixed shape in [model] also needs {', '.join(missing)}")
        sizes: tuple[str, ...] = ()
    else:
        if "size" not in grid:
            raise BadInput('grid.size is required: model sizes like ["100K", "1M", "olmo3_14M"]')
        sizes = tuple(_size(v) for v in _axis(grid, "size"))

    # fresh tokens
    d_keys = [k for k in ("fresh_tokens", "tokens_per_param") if k in grid]
    if len(d_keys) != 1:
        raise BadInput(
            'give exactly one of grid.fresh_tokens (D, e.g. ["1M", "4M"]) or '
            f"grid.tokens_per_param (D = tokens_per_param · N), got {d_keys or 'neither'}"
        )
    d_axis = d_keys[0]
    d_values = tuple(_positive(v, f"grid.{d_axis}") for v in _axis(grid, d_axis))

    strategies = tuple(_axis(grid, "strategy")) if "strategy" in grid else DERIVED_STRATEGIES
    for s in strategies:
        if s not in DERIVED_STRATEGIES:
            hint = " (D′ = 0 runs get strategy 'none' by themselves)" if s == "none" else ""
            raise BadInput(
                f"grid.strategy entries must be 'repetition' or 'paraphrase', got {s!r}{hint}"
            )
    if len(set(strategies)) != len(strategies):
        raise BadInput(f"grid.strategy lists a strategy twice: {list(strategies)}")

    ratios = _ratios(grid, strategies)

    for key in ("lr", "weight_decay"):
        if key in grid and key in train_raw:
            raise BadInput(f"{key} is set in both [grid] and [train]: keep one")
    lrs = tuple(_positive(v, "grid.lr") for v in _axis(grid, "lr")) if "lr" in grid else (train.lr,)
    wds = (
        tuple(_nonnegative(v, "grid.weight_decay") for v in _axis(grid, "weight_decay"))
        if "weight_decay" in grid
        else (train.weight_decay,)
    )
    seeds = tuple(_seed(v) for v in _axis(grid, "seed")) if "seed" in grid else (0,)
    for key, values in (("size", sizes), (d_axis, d_values), ("lr", lrs), ("weight_decay", wds),
                        ("seed", seeds)):  # fmt: skip
        if len(set(values)) != len(values):
            raise BadInput(f"grid.{key} lists a value twice: {list(values)}")

    sweep = SweepConfig(
        name=name,
        text=text,
        source=source,
        description=description,
        sizes=sizes,
        d_axis=d_axis,
        d_values=d_values,
        strategies=strategies,
        ratios=ratios,
        lrs=lrs,
        weight_decays=wds,
        seeds=seeds,
        zip_groups=_zip_groups(grid, ratios),
        model=model,
        data=data,
        train=train,
    )
    exclude = _excludes(raw.get("exclude", []), sweep)
    sweep = dataclasses.replace(sweep, exclude=exclude)
    if not sweep.cells():
        raise BadInput("the grid is empty: every cell is excluded")
    if data.tokenizer == "bpe":  # vocab known: every run's shape and token counts are checked now
        sweep.runs()  # (other tokenizers: by the runner, once the data layer knows the vocab)
    return sweep


def _table(raw: dict, key: str) -> dict:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise BadInput(f"{key} must be a table ([{key}]), got {value!r}")
    return value


def _axis(grid: dict, key: str, where: str = "grid") -> list:
    value = grid[key]
    values = value if isinstance(value, list) else [value]
    if not values:
        raise BadInput(f"{where}.{key} is an empty list: give at least one value")
    return values


def _number(value, name: str) -> float:
    from cdlaw.units import parse_number

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInput(f"{name} must be a number like 3e-3 or 25M, got {value!r}")
    return parse_number(value, name)


def _positive(value, name: str) -> float:
    x = _number(value, name)
    if not x > 0:
        raise BadInput(f"{name} must be positive, got {value!r}")
    return x


def _nonnegative(value, name: str) -> float:
    x = _number(value, name)
    if x < 0:
        raise BadInput(f"{name} must be ≥ 0, got {value!r}")
    return x


def _seed(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(f"grid.seed entries must be non-negative integers, got {value!r}")
    return value


def _size(value) -> str:
    """A size entry, checked now (names and numbers), resolved to a shape at expansion."""
    from cdlaw.shapes import named_shape

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInput(
            f'grid.size entries must be targets like "1M" or names like "olmo3_14M", got {value!r}'
        )
    if isinstance(value, str) and value.lower().startswith("olmo3_"):
        named_shape(value)
        return value
    _positive(value, "grid.size")
    return value if isinstance(value, str) else f"{value:g}"


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


def _ratios(grid: dict, strategies: tuple[str, ...]) -> dict[str, tuple[str, tuple[float, ...]]]:
    """strategy -> (the ratio key as written, its values); r = value + RATIO_KEYS[key]."""
    if "passes" in grid:
        raise BadInput("passes belongs in [grid.paraphrase]; in [grid] use derived_ratio or epochs")
    top = [k for k in ("derived_ratio", "epochs") if k in grid]
    if len(top) > 1:
        raise BadInput("give grid.derived_ratio or grid.epochs, not both")
    ratios = {}
    for strategy in DERIVED_STRATEGIES:
        sub = grid.get(strategy)
        if sub is None:
            continue
        where = f"grid.{strategy}"
        if not isinstance(sub, dict):
            raise BadInput(f"{where} must be a table ([{where}]), got {sub!r}")
        if strategy not in strategies:
            raise BadInput(f"[{where}] is given but {strategy!r} is not in grid.strategy")
        valid = STRATEGY_RATIO_KEYS[strategy]
        for key in sub:
            if key not in valid:
                raise BadInput(unknown_key_message(f"{where}.{key}", key, list(valid)))
        if len(sub) != 1:
            raise BadInput(f"[{where}] needs exactly one of {' or '.join(valid)}")
        (key,) = sub
        ratios[strategy] = (key, tuple(_ratio(v, key, where) for v in _axis(sub, key, where)))
    for strategy in strategies:
        if strategy in ratios:
            continue
        if not top:
            raise BadInput(
                "the grid needs a derived-token axis: grid.derived_ratio (r = D′/D, e.g. "
                f"[0, 1, 3]) or grid.epochs, or a [grid.{strategy}] table"
            )
        key = top[0]
        ratios[strategy] = (key, tuple(_ratio(v, key, "grid") for v in _axis(grid, key)))
    for strategy, (key, values) in ratios.items():
        if len(set(values)) != len(values):
            raise BadInput(f"the {key} axis of {strategy} lists a value twice: {list(values)}")
    return {s: ratios[s] for s in strategies}


def _ratio(value, key: str, where: str) -> float:
    x = _number(value, f"{where}.{key}")
    low = -RATIO_KEYS[key]
    if x < low:
        what = "at least 1 (1 = one pass over D)" if key == "epochs" else "≥ 0"
        raise BadInput(f"{where}.{key} entries must be {what}, got {value!r}")
    return x


def _zip_groups(grid: dict, ratios: dict) -> tuple[tuple[str, ...], ...]:
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
            if axis in ("derived_ratio", "epochs") and any(s in grid for s in DERIVED_STRATEGIES):
                raise BadInput(
                    f"grid.zip cannot zip {axis!r} when [grid.repetition] or [grid.paraphrase] "
                    "give their own ratio axis"
                )
        lengths = {a: len(_axis(grid, a)) for a in group}
        if len(set(lengths.values())) > 1:
            raise BadInput(f"zipped axes must have the same length, got {lengths}")
        if len(group) >= 2:
            out.append(tuple(group))
    return tuple(out)


def _excludes(entries, sweep: SweepConfig) -> tuple[dict, ...]:
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadInput("exclude must be an array of tables ([[exclude]] with keys like size = ...)")
    valid = ["size", sweep.d_axis, "strategy", "derived_ratio", "epochs", "passes", "lr",
             "weight_decay", "seed"]  # fmt: skip
    cells = list(_cells(sweep))
    out = []
    for i, entry in enumerate(entries, 1):
        if not entry:
            raise BadInput(f"exclude entry {i} is empty: it would drop every cell")
        for key, value in entry.items():
            if key not in valid:
                raise BadInput(unknown_key_message(f"exclude[{i}].{key}", key, valid))
            if isinstance(value, (list, dict)):
                raise BadInput(f"exclude[{i}].{key} must be one value, got {value!r}")
        if not any(_matches(c, entry) for c in cells):
            raise BadInput(
                f"exclude entry {i} ({_fmt_entry(entry)}) matches no cell of the grid; "
                "check its values against [grid]"
            )
        out.append(dict(entry))
    return tuple(out)


def _fmt_entry(entry: dict) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in entry.items())


# ---------------------------------------------------------------------------------------
# Expansion.
# ---------------------------------------------------------------------------------------


def _cells(sweep: SweepConfig):
    """All cells: zipped axes vary together, the groups (and the other axes) as a product.

    The ratio axis depends on the strategy (grid.<strategy> tables), so it is expanded
    inside each strategy unless it is zipped with other axes.
    """
    axes: dict[str, tuple] = {
        "size": sweep.sizes or ("custom",),
        sweep.d_axis: sweep.d_values,
        "strategy": sweep.strategies,
        "lr": sweep.lrs,
        "weight_decay": sweep.weight_decays,
        "seed": sweep.seeds,
    }
    ratio_keys = {key for key, _ in sweep.ratios.values()}
    shared_ratio = len(ratio_keys) == 1 and len({v for _, v in sweep.ratios.values()}) == 1
    if shared_ratio:
        (key,) = ratio_keys
        axes[key] = next(iter(sweep.ratios.values()))[1]
    # groups: each zip group is one factor; every axis not zipped is its own factor
    zipped = {a for g in sweep.zip_groups for a in g}
    factors = [(g, list(zip(*(axes[a] for a in g), strict=True))) for g in sweep.zip_groups]
    factors += [((a,), [(v,) for v in vals]) for a, vals in axes.items() if a not in zipped]
    for combo in itertools.product(*(vals for _, vals in factors)):
        point = {}
        for (names, _), values in zip(factors, combo, strict=True):
            point.update(zip(names, values, strict=True))
        strategy = point["strategy"]
        if shared_ratio:
            key = next(iter(ratio_keys))
            ratio_values = (point[key],)
        else:
            key, ratio_values = sweep.ratios[strategy]
        for value in ratio_values:
            yield Cell(
                size=point["size"],
                d_axis=sweep.d_axis,
                d_value=point[sweep.d_axis],
                strategy=strategy,
                ratio_key=key,
                ratio_value=value,
                lr=point["lr"],
                weight_decay=point["weight_decay"],
                seed=point["seed"],
            )


def _matches(cell: Cell, entry: dict) -> bool:
    """Does an [[exclude]] entry match this cell? (all of its keys must)."""
    for key, want in entry.items():
        if key == "size":
            if _size_key(want) != _size_key(cell.size):
                return False
        elif key == "strategy":
            r0 = cell.derived_ratio == 0
            if want != cell.strategy and not (want == "none" and r0):
                return False
        elif key in RATIO_KEYS:
            if not _same(_as_float(want) - RATIO_KEYS[key], cell.derived_ratio):
                return False
        elif key in ("fresh_tokens", "tokens_per_param"):
            if not _same(_as_float(want), cell.d_value):
                return False
        elif not _same(_as_float(want), float(getattr(cell, key))):
            return False
    return True


def _size_key(value) -> str | float:
    if isinstance(value, str) and value.lower().startswith("olmo3_"):
        return value.lower()
    try:
        return _as_float(value)
    except BadInput:
        return str(value)


def _as_float(value) -> float:
    return _number(value, "value")


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def round_tokens(x: float) -> int:
    """Token counts are exact integers: round half up (deterministic, unlike banker's round)."""
    return math.floor(x + 0.5)


def cell_shape(sweep: SweepConfig, size: str, vocab_size: int):
    """The Shape of a cell's model (from grid.size or the fixed [model] shape)."""
    from cdlaw.shapes import Shape, resolve_size

    if not sweep.sizes:
        return Shape(*(sweep.model[k] for k in SHAPE_KEYS))
    return resolve_size(size, vocab_size)


def expand(sweep: SweepConfig, vocab_size: int | None = None) -> list[RunConfig]:
    """The RunConfigs of a sweep (see SweepConfig.runs)."""
    from cdlaw.shapes import count_params

    if vocab_size is None:
        if sweep.data.tokenizer != "bpe":
            raise ValueError("expand: a non-BPE tokenizer needs the real vocab_size")
        vocab_size = sweep.data.vocab_size
    data = sweep.data
    if data.tokenizer != "bpe" and data.vocab_size != vocab_size:
        data = dataclasses.replace(data, vocab_size=vocab_size)  # record the real vocabulary
    seq_len = sweep.model.get("seq_len", ModelConfig.seq_len)
    extra = {k: v for k, v in sweep.model.items() if k not in (*SHAPE_KEYS, "seq_len")}
    shapes: dict[str, object] = {}
    runs: dict[str, RunConfig] = {}
    for cell in sweep.cells():
        if cell.size not in shapes:
            shape = cell_shape(sweep, cell.size, vocab_size)
            twin = next((k for k, v in shapes.items() if v == shape), None)
            if twin is not None:
                raise BadInput(
                    f"grid.size {twin!r} and {cell.size!r} give the same model "
                    f"(d_model {shape.d_model}, {count_params(shape, vocab_size).n_params:,} "
                    f"parameters with a {vocab_size}-token vocabulary); drop one or space "
                    "the sizes further apart"
                )
            shapes[cell.size] = shape
        shape = shapes[cell.size]
        n_params = count_params(shape, vocab_size).n_params
        if cell.d_axis == "fresh_tokens":
            fresh = round_tokens(cell.d_value)
        else:
            fresh = round_tokens(cell.d_value * n_params)
        where = f"cell size={cell.size}, {cell.d_axis}={cell.d_value:g}"
        if fresh < seq_len:
            raise BadInput(
                f"{where} has D = {fresh} fresh tokens, fewer than one sequence "
                f"(seq_len {seq_len}); raise {cell.d_axis}"
            )
        derived = round_tokens(cell.derived_ratio * fresh)
        if cell.derived_ratio > 0 and derived == 0:
            raise BadInput(
                f"{where}, {cell.ratio_key}={cell.ratio_value:g} gives D′ = 0 derived tokens; "
                "use a larger ratio or D"
            )
        label = cell.size if sweep.sizes else "custom"
        model = dataclasses.replace(shape.model_config(vocab_size, seq_len, size=label), **extra)
        cfg = RunConfig(
            sweep=sweep.name,
            strategy=cell.strategy if derived > 0 else "none",
            fresh_tokens=fresh,
            derived_tokens=derived,
            seed=cell.seed,
            model=model,
            data=data,
            train=dataclasses.replace(sweep.train, lr=cell.lr, weight_decay=cell.weight_decay),
        )
        runs.setdefault(cfg.run_id, cfg)  # the D′ = 0 run is shared by both strategies
    return list(runs.values())


# ---------------------------------------------------------------------------------------
# What the tables show, and --only filters on.
# ---------------------------------------------------------------------------------------


def run_facts(cfg: RunConfig) -> dict:
    """The plan-table facts of a run: N, D, D′, r, tokens, FLOPs, steps (torch-free)."""
    from cdlaw.shapes import count_params, flops_per_token

    counts = count_params(cfg.model)
    batch_tokens = cfg.train.batch_size * cfg.model.seq_len
    tokens = cfg.tokens_trained
    return {
        "run_id": cfg.run_id,
        "size": cfg.model.size,
        "strategy": cfg.strategy,
        "n_params": counts.n_params,
        "n_params_total": counts.n_params_total,
        "fresh_tokens": cfg.fresh_tokens,
        "derived_tokens": cfg.derived_tokens,
        "derived_ratio": cfg.derived_tokens / cfg.fresh_tokens,
        "epochs": tokens / cfg.fresh_tokens,
        "tokens_trained": tokens,
        "tokens_per_param": cfg.fresh_tokens / counts.n_params,
        "flops": 6.0 * counts.n_params * tokens,
        "flops_per_token": flops_per_token(
            counts.n_params, cfg.model.n_layers, cfg.model.d_model, cfg.model.seq_len
        ),
        "steps": math.ceil(tokens / batch_tokens),
        "batch_tokens": batch_tokens,
        "lr": cfg.train.lr,
        "weight_decay": cfg.train.weight_decay,
        "seed": cfg.seed,
    }


ONLY_KEYS = (
    "run_id",
    "size",
    "strategy",
    "n_params",
    "fresh_tokens",
    "derived_tokens",
    "derived_ratio",
    "epochs",
    "tokens_trained",
    "tokens_per_param",
    "lr",
    "weight_decay",
    "seed",
)
_ONLY_TEXT_KEYS = ("run_id", "size", "strategy")
_CLAUSE = re.compile(r"^\s*([A-Za-z_]+)\s*(<=|>=|==|!=|=|<|>)\s*(.+?)\s*$")


def parse_only(expr: str):
    """`--only` as a predicate on run_facts(): comma-separated clauses, all must hold.

    A clause is `key OP value`, OP one of = == != < <= > >=; `=`/`!=` take alternatives
    separated by `|`. Examples: `strategy=paraphrase|none`, `n_params<1e6,seed=0`. Parsed
    by a regular expression, never evaluated.
    """
    clauses = []
    for part in expr.split(","):
        m = _CLAUSE.match(part)
        if not m:
            raise BadInput(
                f"--only clause {part.strip()!r} is not `key OP value` "
                "(e.g. strategy=paraphrase, n_params<1e6)"
            )
        key, op, value = m.groups()
        if key not in ONLY_KEYS:
            raise BadInput(unknown_key_message(f"--only key {key}", key, list(ONLY_KEYS)))
        op = "=" if op == "==" else op
        alternatives = value.split("|")
        if key in _ONLY_TEXT_KEYS:
            if op not in ("=", "!="):
                raise BadInput(f"--only {key} compares with = or != only, got {op!r}")
            wants = alternatives
        else:
            if len(alternatives) > 1 and op not in ("=", "!="):
                raise BadInput(f"--only {key}{op}{value}: alternatives (|) need = or !=")
            wants = [_number(v, f"--only {key}") for v in alternatives]
        clauses.append((key, op, wants))

    def keep(facts: dict) -> bool:
        for key, op, wants in clauses:
            have = facts[key]
            if op in ("=", "!="):
                hit = any(
                    (have == w) if isinstance(w, str) else _same(float(have), w) for w in wants
                )
                if hit != (op == "="):
                    return False
            else:
                w = wants[0]
                ok = {"<": have < w, "<=": have <= w, ">": have > w, ">=": have >= w}[op]
                if not ok:
                    return False
        return True

    return keep
