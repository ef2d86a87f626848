"""Human numbers on the command line and in sweep files: 1e21, 2.5e9, 25M, 3B (docs/cli.md)."""

from __future__ import annotations

import math

from cdlaw.errors import BadInput

SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_number(text: str | float | int, what: str = "number") -> float:
    """Parse "1e21", "2.5e9", "25M", "3B", "100K", "1.5T" (case-insensitive suffix) to a float.

    >>> parse_number("25M")
    25000000.0
    """
    if isinstance(text, bool):
        raise BadInput(f"{what} must be a number like 1e21 or 25M, not {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = str(text).strip().replace("_", "").replace(",", "")
        scale = 1.0
        if s and s[-1].upper() in SUFFIXES:
            scale, s = SUFFIXES[s[-1].upper()], s[:-1]
        try:
            value = float(s) * scale
        except ValueError:
            raise BadInput(
                f"{what} must be a number like 1e21, 2.5e9, 25M or 3B, not {text!r}"
            ) from None
    if not math.isfinite(value):
        raise BadInput(f"{what} must be finite, not {text!r}")
    return value


def format_number(x: float, digits: int = 3) -> str:
    """The inverse, for display: 2.5e7 → "25M", 1.2e21 → "1.2e+21" (beyond T use e-notation)."""
    if x is None or not math.isfinite(x):
        return str(x)
    ax = abs(x)
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if 1 <= ax / scale < 1000:
            return f"{x / scale:.{digits}g}{suffix}"
    if ax >= 1e15 or (0 < ax < 1e-3):
        return f"{x:.{digits}g}"
    return f"{x:.{digits}g}"
