"""Human numbers on the command line and in sweep files: 1e21, 2.5e9, 25M, 3B (docs/cli.md)."""

from __future__ import annotations

import math
import re

from cdlaw.system.errors import BadInput

SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
# Commas a number may hold: groups of three digits (1,000,000 or 1,500.5), nothing else
THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?")


def parse_number(text: str | float | int, what: str = "number") -> float:
    """Parse "1e21", "2.5e9", "25M", "3B", "100K", "1.5T" (case-insensitive suffix) to a float.

    >>> parse_number("25M")
    25000000.0
    """
    if isinstance(text, bool):
        raise BadInput(f"{what} must be a number like 1e21 or 25M, not {plain(text)}")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:  # an integer beyond a float
            value = math.inf
    else:
        s = str(text).strip().replace("_", "")
        scale = 1.0
        if s and s[-1].upper() in SUFFIXES:
            scale, s = SUFFIXES[s[-1].upper()], s[:-1]
        if "," in s:
            # a thousands separator (1,000,000) only: 3,5 is a decimal comma, not 35
            if not THOUSANDS.fullmatch(s):
                raise BadInput(
                    f"{what} must be a number like 1e21, 2.5e9, 25M or 3B, not {plain(text)} "
                    "(a decimal comma? write 3.5, not 3,5)"
                )
            s = s.replace(",", "")
        try:
            value = float(s) * scale
        except (ValueError, OverflowError):
            raise BadInput(
                f"{what} must be a number like 1e21, 2.5e9, 25M or 3B, not {plain(text)}"
            ) from None
    if not math.isfinite(value):
        raise BadInput(f"{what} must be finite, not {plain(text)}")
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


def grouped(x: float, decimals: int = 0) -> str:
    """A count or ratio in full with thousands separators below a million (22,142; 1,234.5),
    in e-notation from there (6.8e+143): a number far beyond any data reads as far, never
    as a hundred digits."""
    if not math.isfinite(x) or abs(x) >= 1e6:
        return f"{x:.3g}"
    return f"{x:,.{decimals}f}"


def counted(x: float, noun: str, plural: str = "", digits: int = 3) -> str:
    """A count and its noun, the noun singular where the count reads as 1: "1 epoch",
    "4.82 epochs", "1 pass", "3 passes", "0 runs". `plural` for a noun that is not
    noun + "s" or + "es"; `digits` significant digits, as format_number."""
    text = f"{x:,}" if isinstance(x, int) else f"{x:.{digits}g}"
    if text in ("1", "-1"):
        return f"{text} {noun}"
    if not plural:
        plural = noun + ("es" if noun.endswith(("s", "x", "sh")) else "s")
    return f"{text} {plural}"


def format_apart(a: float, b: float, digits: int = 3) -> tuple[str, str]:
    """a and b with `digits` significant digits, or as many more as tell them apart (17 at
    most): ("1.8104e+21", "1.81e+21"), not "1.81e+21" twice, for "more than" messages."""
    x, y = f"{a:.{digits}g}", f"{b:.{digits}g}"
    for more in range(digits + 1, 18):
        if x != y:
            break
        x, y = f"{a:.{more}g}", f"{b:.{more}g}"
    return x, y


def plain(value) -> str:
    """A value for a message: numbers plainly (nan, 0.003, 12, not np.float64(nan)), text quoted.

    >>> plain(float("nan")), plain(3e-3), plain("x")
    ('nan', '0.003', "'x'")
    """
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()  # a numpy scalar (an array of one value too)
        except (TypeError, ValueError):
            return repr(value)
    text = str(value) if isinstance(value, (bool, int, float)) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
