"""A validated sweep (SweepConfig) and its grid: cells, [[exclude]], runs with exact token counts.

Zipped axes vary together; the zip groups and the other axes form a product. The ratio
axis may differ by strategy ([grid.<strategy>] tables). A cell is dropped
when an [[exclude]] entry matches it. Token counts are integers rounded half up
(D = round(tokens_per_param · N), D′ = round(r · D)), and the D′ = 0 run of a cell is one
run with strategy "none", shared by every strategy. A declared strategy's runs carry the
folder of their derived files (RunConfig.derived_files). Reading and validating the sweep
file into a SweepConfig is cdlaw.sweep.spec's job.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdlaw.config import DataConfig, EvalConfig, ModelConfig, PlanConfig, RunConfig, TrainConfig
from cdlaw.strategies import BUILT_IN, NONE
from cdlaw.sweep.values import same_number, sweep_number
from cdlaw.system.errors import BadInput

if TYPE_CHECKING:
    from cdlaw.shapes import Shape
    from cdlaw.sweep.derived import Declared

# The ratio axis may be written three ways; each maps to r = D′/D.
RATIO_KEYS = {"derived_ratio": 0.0, "epochs": -1.0, "passes": 0.0}  # r = value + offset
SHAPE_KEYS = ("d_model", "n_layers", "n_heads", "mlp_hidden")
MAX_TOKENS = 2**53  # D and D′ are exact integers; beyond 2^53 (≈ 9.0e15) a float cannot say which


@dataclass(frozen=True)
class Cell:
    """One point of the grid, before it becomes a run (kept for exclude and --only)."""

    size: str  # as written in the sweep file ("1M", "olmo3_14M", or "custom")
    d_axis: str  # "fresh_tokens" or "tokens_per_param"
    d_value: float
    strategy: str  # as in the grid (repetition, paraphrase, …), before r = 0 becomes "none"
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
    share: bool = False  # runs that share a stream prefix train it once (WSD; cdlaw.sweep.forest)
    sizes: tuple[str, ...] = ()  # empty when [model] gives a fixed shape
    d_axis: str = "tokens_per_param"
    d_values: tuple[float, ...] = ()
    strategies: tuple[str, ...] = BUILT_IN
    # strategy -> (ratio key, values); the same entry for all unless [grid.<strategy>] is used
    ratios: dict[str, tuple[str, tuple[float, ...]]] = field(default_factory=dict)
    ratio_tables: tuple[str, ...] = ()  # the strategies whose ratio axis is a [grid.<strategy>]
    lrs: tuple[float, ...] = ()
    weight_decays: tuple[float, ...] = ()
    seeds: tuple[int, ...] = (0,)
    zip_groups: tuple[tuple[str, ...], ...] = ()
    exclude: tuple[dict, ...] = ()
    model: dict = field(default_factory=dict)  # validated ModelConfig overrides
    # the [derived.<name>] strategies: where each one's derived files are (cdlaw.sweep.derived)
    derived: dict[str, Declared] = field(default_factory=dict)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)  # [eval]: tasks, in no run id
    plan: PlanConfig = field(
        default_factory=PlanConfig
    )  # [plan]: what the runs are for, in no run id

    def cells(self) -> list[Cell]:
        """Every grid cell (product of the axes, zipped groups varying together), minus excludes."""
        return [c for c in grid_cells(self) if not any(cell_matches(c, ex) for ex in self.exclude)]

    def runs(self, vocab_size: int | None = None) -> list[RunConfig]:
        """The sweep's runs, in grid order, the shared D′ = 0 runs once.

        vocab_size is the tokenizer's real vocabulary (the data layer knows it); for a BPE
        trained on the corpus it is data.vocab_size and may be omitted.
        """
        return expand(self, vocab_size)

    def ratio_name(self, strategy: str) -> str:
        """The key of a strategy's ratio axis as written: grid.derived_ratio, grid.paraphrase.passes."""
        key = self.ratios[strategy][0]
        return f"grid.{strategy}.{key}" if strategy in self.ratio_tables else f"grid.{key}"


def grid_cells(sweep: SweepConfig):
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
        point: dict = {}
        for (names, _), values in zip(factors, combo, strict=True):
            point.update(zip(names, values, strict=True))
        strategy = point["strategy"]
        if shared_ratio:
            key = next(iter(ratio_keys))
            ratio_values: tuple[float, ...] = (point[key],)
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


def round_tokens(x: float) -> int:
    """Token counts are exact integers: round half up (deterministic, unlike banker's round)."""
    return math.floor(x + 0.5)


def cell_shape(sweep: SweepConfig, size: str, vocab_size: int):
    """The Shape of a cell's model (from grid.size or the fixed [model] shape)."""
    from cdlaw.shapes import Shape, count_params, resolve_size

    if not sweep.sizes:
        return Shape(*(sweep.model[k] for k in SHAPE_KEYS))
    shape = resolve_size(size, vocab_size)
    if not size.lower().startswith("olmo3_"):  # a target beyond the ladder's widest model
        target, n = sweep_number(size, "grid.size"), count_params(shape, vocab_size).n_params
        if target > 2 * n:
            raise BadInput(
                f"grid.size {size} is above the largest model of the shape ladder (d_model "
                f"{shape.d_model}, {n:,} parameters with a {vocab_size}-token vocabulary); "
                "use a smaller size"
            )
    return shape


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
    shapes: dict[str, Shape] = {}
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
        where = f"cell size={cell.size}, {cell.d_axis}={cell.d_value:g}"
        d = cell.d_value * (1 if cell.d_axis == "fresh_tokens" else n_params)
        if not d < MAX_TOKENS:
            raise BadInput(
                f"{where} gives D = {d:.3g} fresh tokens, more than cdlaw counts exactly "
                f"(2^53 ≈ 9.0e15); use a smaller {cell.d_axis}"
            )
        fresh = round_tokens(d)
        if fresh < seq_len:
            raise BadInput(
                f"{where} has D = {fresh} fresh tokens, fewer than one sequence "
                f"(seq_len {seq_len}); raise {cell.d_axis}"
            )
        if not cell.derived_ratio * fresh < MAX_TOKENS:
            raise BadInput(
                f"{where}, {cell.ratio_key}={cell.ratio_value:g} gives D′ = "
                f"{cell.derived_ratio * fresh:.3g} derived tokens, more than cdlaw counts "
                f"exactly (2^53 ≈ 9.0e15); use a smaller {cell.ratio_key}"
            )
        derived = round_tokens(cell.derived_ratio * fresh)
        if cell.derived_ratio > 0 and derived == 0:
            raise BadInput(
                f"{where}, {cell.ratio_key}={cell.ratio_value:g} gives D′ = 0 derived tokens; "
                "use a larger ratio or D"
            )
        declared = sweep.derived.get(cell.strategy) if derived > 0 else None
        label = cell.size if sweep.sizes else "custom"
        model = dataclasses.replace(shape.model_config(vocab_size, seq_len, size=label), **extra)
        cfg = RunConfig(
            sweep=sweep.name,
            strategy=cell.strategy if derived > 0 else NONE,
            fresh_tokens=fresh,
            derived_tokens=derived,
            seed=cell.seed,
            model=model,
            data=data,
            train=dataclasses.replace(sweep.train, lr=cell.lr, weight_decay=cell.weight_decay),
            eval=sweep.eval,
            derived_files=declared.folder(fresh) if declared else "",
        )
        runs.setdefault(cfg.run_id, cfg)  # the D′ = 0 run is shared by every strategy
    return list(runs.values())


# ---------------------------------------------------------------------------------------
# [[exclude]] entries against cells.
# ---------------------------------------------------------------------------------------


def cell_matches(cell: Cell, entry: dict) -> bool:
    """Does an [[exclude]] entry match this cell? (all of its keys must; a list: any of it)."""
    for key, want in entry.items():
        if isinstance(want, list):
            if not any(cell_matches(cell, {key: one}) for one in want):
                return False
        elif key == "size":
            if _size_key(want) != _size_key(cell.size):
                return False
        elif key == "strategy":
            r0 = cell.derived_ratio == 0
            if want != cell.strategy and not (want == NONE and r0):
                return False
        elif key in RATIO_KEYS:
            if not same_number(_as_float(want) - RATIO_KEYS[key], cell.derived_ratio):
                return False
        elif key in ("fresh_tokens", "tokens_per_param"):
            if not same_number(_as_float(want), cell.d_value):
                return False
        elif not same_number(_as_float(want), float(getattr(cell, key))):
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
    return sweep_number(value, "value")
