"""Tables of the `cdlaw report` page: the text of one cell (format_cell), a cell with its
sort key (cell), and one escaped HTML table (html_table), shared by every section.

Long tables are sortable: clicking a header sorts by that column (SORT_SCRIPT, a few lines
of inline JavaScript; the page stays one file that loads nothing). Counts print as 1.23B
but sort by their value, which each cell carries in data-v.
"""

from __future__ import annotations

import html
import math
from collections.abc import Set as AbstractSet

import numpy as np

from cdlaw.units import format_number

COUNT_COLUMNS = {"n_params", "fresh_tokens", "derived_tokens", "flops"}

# Click a header: sort by its column, numbers (data-v) by value, text by text; click again
# to reverse. Empty cells ("—") stay last either way.
SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("thead th").forEach(function (th) {
    th.tabIndex = 0;
    th.title = "sort by this column";
    function sort() {
      var i = th.cellIndex, body = table.tBodies[0];
      var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      table.querySelectorAll("thead th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      function key(row) {
        var td = row.cells[i], v = td.getAttribute("data-v"), t = td.textContent;
        if (v !== null) return parseFloat(v);
        return t === "\\u2014" ? null : t;
      }
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) return (x === null) - (y === null);
        if (typeof x === "number" && typeof y === "number") return dir * (x - y);
        return dir * String(x).localeCompare(String(y), undefined, {numeric: true});
      });
      rows.forEach(function (r) { body.appendChild(r); });
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (e) { if (e.key === "Enter") sort(); });
  });
});
"""


def _number(value) -> float | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def format_cell(value, column: str = "") -> str:
    """One value as table text: "—" for none or non-finite, counts (COUNT_COLUMNS) as 1.23B.

    Zero prints as "0", never "-0".
    """
    if value is None:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = _number(value)
        if v is None:
            return "—"
        if v == 0:  # also -0.0, which would print as "-0"
            return "0"
        if column in COUNT_COLUMNS:
            text = format_number(v, 3)
        elif abs(v) >= 1e5 or abs(v) < 1e-3:
            text = f"{v:.3g}"
        else:
            text = f"{v:.4g}"
        return text
    return str(value)


def cell(value, column: str = "") -> tuple[str, float | None]:
    """A cell's text and the number it sorts by (None: sorts as text)."""
    return format_cell(value, column), _number(value)


_LEFT = ' class="l"'


def _td(c, left: bool) -> str:
    text, key = c if isinstance(c, tuple) else (c, None)
    klass = _LEFT if left else ""
    data = f' data-v="{key!r}"' if key is not None else ""
    return f"<td{klass}{data}>{html.escape(str(text))}</td>"


def html_table(
    headers: list[str],
    rows: list[list],
    left: AbstractSet[int] = frozenset(),
    cls=None,
    sortable: bool = False,
) -> str:
    """An escaped HTML table in a scrolling box; columns in left are left-aligned, cls
    gives each row a class. A cell is its text, or (text, sort key) from cell().
    sortable: click a header to sort (SORT_SCRIPT)."""
    e = html.escape
    head = "".join(f"<th{_LEFT if i in left else ''}>{e(h)}</th>" for i, h in enumerate(headers))
    body = []
    for j, r in enumerate(rows):
        row_cls = f' class="{e(cls[j])}"' if cls and cls[j] else ""
        body.append(f"<tr{row_cls}>{''.join(_td(c, i in left) for i, c in enumerate(r))}</tr>")
    head = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    klass = ' class="sortable"' if sortable else ""
    return f'<div class="scroll"><table{klass}>{head}<tbody>{"".join(body)}</tbody></table></div>'
