"""Tables of the `cdlaw report` page: the text of one cell (format_cell) and one escaped
HTML table (html_table), shared by every section of cdlaw.report.sections.
"""

from __future__ import annotations

import html
import math

import numpy as np

from cdlaw.units import format_number

COUNT_COLUMNS = {"n_params", "fresh_tokens", "derived_tokens", "flops"}


def format_cell(value, column: str = "") -> str:
    """One value as table text: "—" for none or non-finite, counts (COUNT_COLUMNS) as 1.23B."""
    if value is None:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            return "—"
        if column in COUNT_COLUMNS:
            return format_number(v, 3)
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.4g}"
    return str(value)


def html_table(headers: list[str], rows: list[list], left: set[int] = frozenset(), cls=None) -> str:
    """An escaped HTML table; columns in left are left-aligned, cls gives each row a class."""
    e = html.escape
    head = "".join(
        f'<th class="{"l" if i in left else ""}">{e(h)}</th>' for i, h in enumerate(headers)
    )
    body = []
    for j, r in enumerate(rows):
        row_cls = f' class="{e(cls[j])}"' if cls and cls[j] else ""
        cells = "".join(
            f'<td class="{"l" if i in left else ""}">{e(str(c))}</td>' for i, c in enumerate(r)
        )
        body.append(f"<tr{row_cls}>{cells}</tr>")
    head = f"<tr>{head}</tr>" if any(headers) else ""
    return f'<div class="scroll"><table>{head}{"".join(body)}</table></div>'
