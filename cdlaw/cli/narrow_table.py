"""A table of names and numbers that fits the console: every column but the first keeps
its full width, and the first, a name, is cut with an ellipsis (Gadre et al.'s task names
run to 40 characters, and a pipe is 80 columns wide).

    out.print(narrow_table(["task", "predicted"], [["arc_easy acc", "0.6631"]]))
"""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from cdlaw.cli import out

NAME_MIN = 16  # the first column never narrower than this, whatever the console


def narrow_table(
    headers: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,), **table_options
) -> Table:
    """A rich Table of `rows` (plain strings, shown as they are: no markup) under `headers`:
    columns in `left` left-justified, the rest right; each column but the first as wide as
    its header or widest cell, the first whatever room is left (at least NAME_MIN).
    `table_options` go to rich's Table (a title)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    room = out.width - sum(widths[1:]) - 2 * len(headers)  # each column pads 1 a side
    table = Table(box=box.SIMPLE, pad_edge=False, collapse_padding=True, **table_options)
    for i, header in enumerate(headers):
        table.add_column(
            header,
            justify="left" if i in left else "right",
            no_wrap=True,
            overflow="ellipsis",
            min_width=None if i == 0 else widths[i],
            max_width=max(NAME_MIN, room) if i == 0 else None,
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table
