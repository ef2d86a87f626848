"""How a figure leaves cdlaw: paper options, embedded fonts, provenance metadata, saving.

FigureOptions carries what `cdlaw plot` lets a paper's author change: no title
(--no-title), their own caption or none (--caption), the resolution (--dpi) and a
matplotlib style (--style). Whatever the options, every file records where it came from
in its own metadata (PNG text chunks, PDF document info, SVG Dublin Core): the figure's
title and the line naming its fit, so a figure cropped for a paper still says what it is.

Fonts are embedded as TrueType (Type 42) in PDF and PostScript, never as Type 3, which
journals' production systems reject and which cannot be searched or edited.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdlaw.system.errors import BadInput

# Type 42 (TrueType) fonts: matplotlib's default, Type 3, is refused by many publishers.
FONT_RC: Any = {"pdf.fonttype": 42, "ps.fonttype": 42}  # Any: matplotlib types rc keys
PNG_DPI = 150  # the default resolution of a PNG
DPI_RANGE = (10.0, 2400.0)  # beyond this a figure is either unreadable or gigabytes


@dataclass(frozen=True)
class FigureOptions:
    """What a figure's author may change (`cdlaw plot --no-title --caption --dpi --style`)."""

    title: bool = True
    caption: str | None = None  # None: the line naming the fit; "": no footer; else this text
    dpi: float | None = None  # None: 150 for PNG, matplotlib's own for vector formats
    style: str | None = None  # a matplotlib style name or style file


def check_options(options: FigureOptions) -> None:
    """Raise BadInput, in one sentence, for a resolution or style matplotlib cannot use."""
    dpi = options.dpi
    if dpi is not None and not (math.isfinite(dpi) and DPI_RANGE[0] <= dpi <= DPI_RANGE[1]):
        raise BadInput(
            f"--dpi must be a number from {DPI_RANGE[0]:g} to {DPI_RANGE[1]:g}, such as 300, "
            f"not {dpi:g}"
        )
    if options.style is not None:
        _check_style(options.style)


def _check_style(style: str) -> None:
    import matplotlib.style

    if style in ("default", *matplotlib.style.available):
        return
    path = Path(style).expanduser()
    if path.is_file():
        try:
            path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise BadInput(f"--style file {path} cannot be read ({e})") from None
        return
    names = ", ".join(n for n in ("seaborn-v0_8-paper", "ggplot", "grayscale", "classic"))
    raise BadInput(
        f"--style {style!r} is neither a matplotlib style name (such as {names}) nor a "
        "style file that exists"
    )


@contextlib.contextmanager
def figure_context(style: str | None = None):
    """Draw and save inside this: the style (if any), then TrueType fonts over it."""
    import matplotlib as mpl
    import matplotlib.style  # a submodule that `import matplotlib` may not load

    with contextlib.ExitStack() as stack:
        if style is not None:
            try:
                stack.enter_context(mpl.style.context(style))
            except (OSError, ValueError) as e:
                raise BadInput(f"--style {style!r} cannot be used: {e}") from None
        stack.enter_context(mpl.rc_context(FONT_RC))
        yield


def _text_with_gid(fig, gid: str):
    found = fig.findobj(lambda a: a.get_gid() == gid)
    return found[0] if found else None


def _hide(text) -> None:
    text.set_visible(False)
    text.set_in_layout(False)  # constrained layout gives it no room


def dress(fig, options: FigureOptions) -> dict[str, str]:
    """Apply --no-title and --caption to a figure drawn by cdlaw.figures; return its
    provenance (title and the line naming the fit), read before anything is removed."""
    title = _text_with_gid(fig, "title")
    caption = _text_with_gid(fig, "caption")
    provenance = {
        "title": title.get_text() if title is not None else "",
        # style.finish wraps the caption between its " · "-separated parts
        "caption": caption.get_text().replace("\n", " · ") if caption is not None else "",
    }
    if not options.title and title is not None:
        _hide(title)
    if options.caption is not None and caption is not None:
        if options.caption.strip():
            caption.set_text(options.caption)
            caption.set_wrap(True)
        else:
            _hide(caption)
    return provenance


def metadata(fmt: str, provenance: dict[str, str]) -> dict:
    """The file's own record of the figure, in each format's metadata keys.

    No dates, so the same inputs write the same bytes.
    """
    from cdlaw import __version__

    creator = f"cdlaw {__version__}"
    title, caption = provenance.get("title", ""), provenance.get("caption", "")
    if fmt == "png":
        return {"Title": title, "Description": caption, "Software": creator}
    if fmt == "pdf":
        return {"Title": title, "Subject": caption, "Creator": creator, "CreationDate": None}
    if fmt == "svg":
        return {"Title": title, "Description": caption, "Creator": creator, "Date": None}
    raise BadInput(f"unknown figure format {fmt!r}")


def save_figure(
    fig, path: Path, fmt: str, options: FigureOptions = FigureOptions(), provenance=None
) -> Path:
    """Write a figure atomically (a reader never sees half a PNG), fonts as TrueType and
    its provenance in the file's metadata. Call inside figure_context for --style."""
    from cdlaw.system.atomic import write_atomic

    if provenance is None:
        provenance = dress(fig, options)
    dpi = options.dpi if options.dpi is not None else (PNG_DPI if fmt == "png" else None)
    meta = metadata(fmt, provenance)

    def write(p):
        import matplotlib as mpl

        with mpl.rc_context(FONT_RC):
            fig.savefig(p, format=fmt, dpi=dpi, metadata=meta)

    return write_atomic(path, write)
