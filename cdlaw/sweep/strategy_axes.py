"""A sweep file's strategy axis and the derived-token ratio axis of each strategy.

    [grid]
    strategy = ["repetition", "paraphrase", "distill"]  # default: the built-ins + [derived.*]
    derived_ratio = [0, 1, 3, 7]      # r = D′/D for every strategy (or epochs = [1, 2, 4, 8])

    [grid.repetition]                 # optional: a ratio axis of one strategy's own
    epochs = [1, 2, 4, 8]             # repetition: derived_ratio or epochs (r = epochs − 1)
    [grid.distill]
    passes = [0, 1, 2]                # any other strategy: derived_ratio or passes (r = passes)

A strategy in grid.strategy is built in (repetition, paraphrase) or declared by a
[derived.<name>] table (cdlaw.sweep.derived). Every mistake is a BadInput naming the key.
"""

from __future__ import annotations

import difflib
from collections.abc import Set as AbstractSet

from cdlaw.config import unknown_key_message
from cdlaw.strategies import BUILT_IN, NONE, REPETITION, check_name, is_name
from cdlaw.sweep.grid import RATIO_KEYS
from cdlaw.sweep.values import sweep_number
from cdlaw.system.errors import BadInput
from cdlaw.units import plain

REPETITION_KEYS = ("derived_ratio", "epochs")
PASSES_KEYS = ("derived_ratio", "passes")  # paraphrase and every other derived strategy


def ratio_keys(strategy: str) -> tuple[str, ...]:
    """The keys a [grid.<strategy>] table may give its ratio axis by."""
    return REPETITION_KEYS if strategy == REPETITION else PASSES_KEYS


def axis_values(grid: dict, key: str, where: str = "grid") -> list:
    """An axis as a non-empty list (a single value may be written bare)."""
    value = grid[key]
    values = value if isinstance(value, list) else [value]
    if not values:
        raise BadInput(f"{where}.{key} is an empty list: give at least one value")
    return values


def strategy_axis(grid: dict, zipped: set[str], declared) -> tuple[str, ...]:
    """grid.strategy (default: repetition, paraphrase and the declared ones), each built
    in or declared, each once unless zipped."""
    known = (*BUILT_IN, *declared)
    strategies = tuple(axis_values(grid, "strategy")) if "strategy" in grid else known
    for s in strategies:
        if s == NONE:
            raise BadInput(
                "grid.strategy entries name derived strategies, got 'none' (D′ = 0 runs get "
                "strategy 'none' by themselves)"
            )
        check_name(s, "grid.strategy entry")
        if s not in known:
            near = difflib.get_close_matches(s, known, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise BadInput(
                f"grid.strategy entry {s!r} is neither built in nor declared: {hint}declare "
                f'it with a [derived.{s}] table (files = "DIR"), or use one of {", ".join(known)}'
            )
    if "strategy" not in zipped and len(set(strategies)) != len(strategies):
        raise BadInput(f"grid.strategy lists a strategy twice: {list(strategies)}")
    unused = [s for s in declared if s not in strategies]
    if unused:
        raise BadInput(
            f"[derived.{unused[0]}] is declared but {unused[0]!r} is not in grid.strategy"
        )
    return strategies


def strategy_tables(grid: dict, axes: tuple[str, ...], strategies) -> tuple[str, ...]:
    """The [grid.<strategy>] tables given, each of a strategy in grid.strategy; any other
    key of [grid] must be an axis (`axes`)."""
    tables = []
    for key, value in grid.items():
        if key in axes:
            continue
        if key in (*BUILT_IN, *strategies) and not isinstance(value, dict):
            raise BadInput(f"grid.{key} must be a table ([grid.{key}]), got {plain(value)}")
        if isinstance(value, dict) and is_name(key):
            if key not in strategies:
                raise BadInput(f"[grid.{key}] is given but {key!r} is not in grid.strategy")
            tables.append(key)
        else:
            raise BadInput(unknown_key_message(f"grid.{key}", key, [*axes, *strategies]))
    return tuple(tables)


def ratio_axes(
    grid: dict, strategies: tuple[str, ...], zipped: AbstractSet[str] = frozenset()
) -> dict[str, tuple[str, tuple[float, ...]]]:
    """strategy -> (the ratio key as written, its values); r = value + RATIO_KEYS[key]."""
    if "passes" in grid:
        raise BadInput(
            "passes belongs in a [grid.<strategy>] table (paraphrase or a declared strategy); "
            "in [grid] use derived_ratio or epochs"
        )
    top = [k for k in ("derived_ratio", "epochs") if k in grid]
    if len(top) > 1:
        raise BadInput("give grid.derived_ratio or grid.epochs, not both")
    ratios = {}
    for strategy in strategies:
        sub = grid.get(strategy)
        if isinstance(sub, dict):
            ratios[strategy] = _own_axis(sub, strategy)
        elif not top:
            raise BadInput(
                "the grid needs a derived-token axis: grid.derived_ratio (r = D′/D, e.g. "
                f"[0, 1, 3]) or grid.epochs, or a [grid.{strategy}] table"
            )
        else:
            key = top[0]
            ratios[strategy] = (key, tuple(_ratio(v, key, "grid") for v in axis_values(grid, key)))
    for strategy, (key, values) in ratios.items():
        if key not in zipped and len(set(values)) != len(values):
            raise BadInput(f"the {key} axis of {strategy} lists a value twice: {list(values)}")
    return ratios


def _own_axis(sub: dict, strategy: str) -> tuple[str, tuple[float, ...]]:
    where = f"grid.{strategy}"
    valid = ratio_keys(strategy)
    for key in sub:
        if key not in valid:
            raise BadInput(unknown_key_message(f"{where}.{key}", key, list(valid)))
    if len(sub) != 1:
        raise BadInput(f"[{where}] needs exactly one of {' or '.join(valid)}")
    (key,) = sub
    return key, tuple(_ratio(v, key, where) for v in axis_values(sub, key, where))


def _ratio(value, key: str, where: str) -> float:
    x = sweep_number(value, f"{where}.{key}")
    low = -RATIO_KEYS[key]
    if x < low:
        what = "at least 1 (1 = one pass over D)" if key == "epochs" else "≥ 0"
        raise BadInput(f"{where}.{key} entries must be {what}, got {plain(value)}")
    return x
