"""The sentences for a corpus that cannot be read (sources.py, doc_store.py): an empty
corpus, a byte that is not UTF-8, a row whose text is missing or no string (by file and
line), a duplicate id. Each one sentence, and cheap until needed: the corpus is only
scanned once something went wrong. A full disk is no such thing: sources.py says it
first (cdlaw.system.disk_full)."""

from __future__ import annotations

import json
from pathlib import Path

from cdlaw.system.errors import BadInput


def unreadable(
    what: str, corpus: str, loader: str, files: list[Path], e: Exception, text_column: str = "text"
) -> Exception:
    """The sentence for corpus files `datasets` refused (a full disk is said before, by
    the caller: DiskFull, not bad input): no text at all, the first byte that is not
    UTF-8 or the first row whose text is no string when that is why, else the error's
    first line."""
    if all(_blank(p) for p in files):
        return empty_corpus(what, corpus, text_column)
    for path in files:
        offset = first_undecodable(path)
        if offset is not None:
            return BadInput(
                f"{what} {corpus!r} is not UTF-8 text: {path} has an undecodable byte at "
                f"offset {offset}; re-encode it as UTF-8"
            )
    if loader == "json" and (said := _non_text_row(what, corpus, files, text_column)):
        return said
    first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return BadInput(f"{what} {corpus!r} could not be read as {loader}: {first_line}")


def _blank(path: Path) -> bool:
    """Whether a file holds nothing but whitespace (read only when small)."""
    size = path.stat().st_size
    return size == 0 or (size < 1 << 20 and not path.read_bytes().strip())


def first_non_text_row(files: list[Path], text_column: str):
    """(file, line, value) of the first jsonl row whose text column holds something else
    than a string (`datasets` refuses a column of mixed types), read a line at a time;
    None when there is none, or the files are not one JSON object per line."""
    for path in files:
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    return None  # not jsonl (one JSON document): no line to name
                if not isinstance(row, dict):
                    return None
                value = row.get(text_column)
                if value is not None and not isinstance(value, str):
                    return path, n, value
    return None


def first_undecodable(path: Path) -> int | None:
    """The offset of the first byte of path that does not decode as UTF-8, or None."""
    import codecs

    decoder, done = codecs.getincrementaldecoder("utf-8")(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                return done + e.start
            done += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        return done + e.start - len(e.object)
    return None


def line_of(corpus: str, path: Path, line: int) -> str:
    """Line `line` of corpus file `path`, said after the corpus's name: "line N" of a
    one-file corpus, "file NAME line N" of a folder."""
    root = Path(corpus).expanduser()
    return f"line {line}" if root.is_file() else f"file {path.relative_to(root)} line {line}"


def not_text(
    what: str, corpus: str, text_column: str, row: int, value, place: str = ""
) -> BadInput:
    place = place or f"row {row}"
    if value is None:
        return BadInput(
            f"{what} {corpus!r} {place} has no {text_column!r} text (data.text_column): "
            "every row needs one"
        )
    return BadInput(
        f"{what} {corpus!r} {place}: column {text_column!r} must hold text, found "
        f"{type(value).__name__} {json.dumps(value)[:40]}; every row's text must be a string"
    )


def empty_corpus(what: str, corpus: str, text_column: str) -> BadInput:
    return BadInput(f"{what} {corpus!r} is empty: it has no non-empty {text_column!r} text")


def duplicate_id(what: str, corpus: str, id_column: str, dup: str) -> BadInput:
    return BadInput(
        f"{what} {corpus!r} has duplicate document id {dup!r} in column {id_column!r}: "
        "ids must be unique (or drop the column to use positions)"
    )


def mixed_text(what: str, corpus: str, files: list[Path], text_column: str) -> BadInput:
    """The sentence for a text column of mixed types: the first row whose text is no
    string, by file and line."""
    return _non_text_row(what, corpus, files, text_column) or BadInput(
        f"{what} {corpus!r} column {text_column!r} mixes text with other values: every "
        "row's text must be a string"
    )


def _non_text_row(what: str, corpus: str, files: list[Path], text_column: str) -> BadInput | None:
    """not_text for the first jsonl row whose text is no string, by file and line; None
    when no row is found so."""
    found = first_non_text_row(files, text_column)
    if found is None:
        return None
    path, line, value = found
    return not_text(what, corpus, text_column, 0, value, line_of(corpus, path, line))
