"""Single values in a sweep file: numbers like 3e-3 or 25M, sizes and seeds, checked and compared.

Each check returns the value to use or raises a BadInput naming the key and what would be
valid; same_number is how sweep values are compared (by [[exclude]] and `--only`).
"""

from __future__ import annotations

import math

from cdlaw.system.errors import BadInput
from cdlaw.units import plain


def sweep_number(value, name: str) -> float:
    from cdlaw.units import parse_number

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInput(f"{name} must be a number like 3e-3 or 25M, got {plain(value)}")
    return parse_number(value, name)


def positive_number(value, name: str) -> float:
    x = sweep_number(value, name)
    if not x > 0:
        raise BadInput(f"{name} must be positive, got {plain(value)}")
    return x


def nonnegative_number(value, name: str) -> float:
    x = sweep_number(value, name)
    if x < 0:
        raise BadInput(f"{name} must be ≥ 0, got {plain(value)}")
    return x


def seed_entry(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(f"grid.seed entries must be non-negative integers, got {plain(value)}")
    return value


def size_entry(value) -> str:
    """A size entry, checked now (names and numbers), resolved to a shape at expansion."""
    from cdlaw.shapes import named_shape

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInput(
            f'grid.size entries must be targets like "1M" or names like "olmo3_14M", got {plain(value)}'
        )
    if isinstance(value, str) and value.lower().startswith("olmo3_"):
        named_shape(value)
        return value
    positive_number(value, "grid.size")
    return value if isinstance(value, str) else f"{value:g}"


def same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
