"""Write a sweep file: the small subset of TOML sweep files use (tomllib only reads).

Top-level keys, then tables ([grid], [grid.<strategy>], [model], [data], [train]); values
are strings, booleans, integers, floats (repr: they read back bit for bit), and lists of
those or of lists of strings (grid.zip).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"TOML sweep files hold finite numbers, got {v}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string is a JSON string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to a sweep file")


def _table(lines: list[str], name: str, table: dict) -> None:
    plain = {k: v for k, v in table.items() if not isinstance(v, dict)}
    lines += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in plain.items()]
    for k, v in table.items():
        if isinstance(v, dict):
            _table(lines, f"{name}.{k}", v)


def toml_text(doc: dict, header: Sequence[str] = ()) -> str:
    """The TOML text of `doc`, with `header` as comment lines on top."""
    lines = [f"# {h}".rstrip() for h in header]
    lines += [f"{k} = {_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            _table(lines, k, v)
    return "\n".join(lines).lstrip("\n") + "\n"
