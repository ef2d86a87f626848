"""Over-long jsonl lines — a document of tens of megabytes on one line — read without
holding them (docs/corpus.md, "Long documents").

`datasets` reads a jsonl line whole, and `pyarrow.json` parses it from a copy: a few
copies of the line at once. So before a local jsonl corpus goes to `datasets`,
`set_aside(files, text_column, folder)` looks for lines of LONG_LINE bytes or more (a
megabyte read at a time). A file that has one is copied into `folder` with each such line
replaced by a row of its own small values and, as its text, MARK and a number; the
line's text is decoded a megabyte at a time into `folder/long-<n>.txt`. `LongDoc` is that
text for the document store, which copies it in stripped, a megabyte at a time
(doc_store.build_doc_store), and workers read it from there in pieces (doc_store.LongText).
A file without such a line goes to `datasets` as it is, so ordinary corpora are read as
before.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from cdlaw.data.files.read_errors import first_undecodable

LONG_LINE = 4 << 20  # bytes: a jsonl line this long is read a megabyte at a time
READ = 1 << 20
MARK = "\0cdlaw-long-line\0"  # the stand-in row's text: MARK + the long text's number
_SPECIAL = re.compile(rb'["\\]')
_ESCAPES = {b'"': b'"', b"\\": b"\\", b"/": b"/", b"b": b"\b", b"f": b"\f", b"n": b"\n",
            b"r": b"\r", b"t": b"\t"}  # fmt: skip


@dataclass(frozen=True)
class LongDoc:
    """A long document's text, as set_aside decoded it into a file (UTF-8, unstripped)."""

    path: str

    def __bool__(self) -> bool:
        """Whether any text is left once stripped (a line of spaces is no document)."""
        lo, hi = _stripped_range(Path(self.path))
        return hi > lo

    def text(self) -> str:
        """The whole text, stripped (for a caller that holds documents in memory)."""
        return Path(self.path).read_text(encoding="utf-8").strip()

    def copy_stripped(self, out) -> tuple[int, int]:
        """Write the stripped text's bytes to the binary file `out`, a megabyte at a time;
        (bytes written, doc_store.hash64 of them)."""
        lo, hi = _stripped_range(Path(self.path))
        h = hashlib.blake2b(digest_size=8)
        with open(self.path, "rb") as f:
            f.seek(lo)
            left = hi - lo
            while left > 0:
                chunk = f.read(min(READ, left))
                left -= len(chunk)
                out.write(chunk)
                h.update(chunk)
        return max(0, hi - lo), int.from_bytes(h.digest(), "little")


def long_doc(text: str, folder: str) -> LongDoc | None:
    """The LongDoc a stand-in row's text names, or None for an ordinary text."""
    if not text.startswith(MARK):
        return None
    return LongDoc(str(Path(folder) / f"long-{int(text[len(MARK) :])}.txt"))


def set_aside(files: list[Path], text_column: str, folder: Path) -> list[Path]:
    """The files as `datasets` should read them: each with a line of LONG_LINE bytes or
    more copied into folder with that line's text set aside (see the module's doc); the
    others as they are. A line that is no JSON object with a string text is left in place
    (`datasets` then says what is wrong with it)."""
    out, n = [], 0
    for path in files:
        if not _has_long_line(path):
            out.append(path)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        copy = folder / f"{len(out):05d}-{path.name}"
        with open(path, "rb") as src, open(copy, "wb") as dst:
            for start, end in _lines(src):
                src.seek(start)
                if end - start >= LONG_LINE:
                    row = _set_aside_line(src, end, text_column, folder / f"long-{n}.txt")
                    if row is not None:
                        row[text_column] = f"{MARK}{n}"
                        dst.write(json.dumps(row).encode() + b"\n")
                        n += 1
                        continue
                    src.seek(start)
                _copy(src, dst, end - start)
        out.append(copy)
    return out


def _has_long_line(path: Path) -> bool:
    return any(end - start >= LONG_LINE for start, end in _lines_of(path))


def _lines_of(path: Path):
    with open(path, "rb") as f:
        yield from _lines(f)


def _lines(f):
    """(start, end) byte offsets of each line of the binary file f (end after its
    newline), read a megabyte at a time; f's position is left anywhere."""
    f.seek(0)
    start = at = 0
    pending = []
    while chunk := f.read(READ):
        pos = 0
        while (nl := chunk.find(b"\n", pos)) >= 0:
            pending.append((start, at + nl + 1))
            start = at + nl + 1
            pos = nl + 1
        at += len(chunk)
        here = f.tell()
        yield from pending
        pending.clear()
        f.seek(here)
    if at > start:
        yield start, at


def _copy(src, dst, n: int) -> None:
    while n > 0:
        chunk = src.read(min(READ, n))
        if not chunk:
            return
        dst.write(chunk)
        n -= len(chunk)


class _Reader:
    """The bytes of one line of a file, a megabyte at a time, for the parser below."""

    def __init__(self, f, end: int) -> None:
        self.f, self.left, self.buf, self.i = f, end - f.tell(), b"", 0

    def need(self, n: int) -> bool:
        while len(self.buf) - self.i < n and self.left > 0:
            chunk = self.f.read(min(READ, self.left))
            if not chunk:
                break
            self.left -= len(chunk)
            self.buf, self.i = self.buf[self.i :] + chunk, 0
        return len(self.buf) - self.i >= n

    def skip_space(self) -> None:
        while self.need(1) and self.buf[self.i] in b" \t\r\n":
            self.i += 1

    def take(self, token: bytes) -> bool:
        self.skip_space()
        if self.need(1) and self.buf[self.i : self.i + 1] == token:
            self.i += 1
            return True
        return False

    def small_value(self):
        """A JSON value of at most READ bytes."""
        self.skip_space()
        self.need(READ)
        window = self.buf[self.i : self.i + READ].decode("utf-8", "ignore")
        value, end = json.JSONDecoder().raw_decode(window)
        self.i += len(window[:end].encode())
        return value

    def string_into(self, out) -> None:
        """A JSON string (its opening quote taken already), decoded into the binary file
        out as UTF-8."""
        while True:
            if not self.need(1):
                raise ValueError("unterminated string")
            m = _SPECIAL.search(self.buf, self.i)
            if m is None:
                out.write(self.buf[self.i :])
                self.i = len(self.buf)
                continue
            out.write(self.buf[self.i : m.start()])
            self.i = m.start()
            if self.buf[self.i : self.i + 1] == b'"':
                self.i += 1
                return
            self.need(12)
            esc = self.buf[self.i + 1 : self.i + 2]
            if esc in _ESCAPES:
                out.write(_ESCAPES[esc])
                self.i += 2
                continue
            if esc != b"u":
                raise ValueError("bad escape")
            code = int(self.buf[self.i + 2 : self.i + 6], 16)
            self.i += 6
            if 0xD800 <= code < 0xDC00 and self.buf[self.i : self.i + 2] == b"\\u":
                low = int(self.buf[self.i + 2 : self.i + 6], 16)
                if 0xDC00 <= low < 0xE000:
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    self.i += 6
            out.write(chr(code).encode("utf-8"))


def _set_aside_line(f, end: int, text_column: str, text_path: Path) -> dict | None:
    """Parse the JSON object line at f's position (to end): its text written to
    text_path, the row of its other values returned; None (nothing written) if it is no
    object with a string text."""
    r, found = _Reader(f, end), False
    row: dict = {}
    try:
        if not r.take(b"{"):
            return None
        while not r.take(b"}"):
            if row or found:
                if not r.take(b","):
                    return None
            if not r.take(b'"'):
                return None
            r.i -= 1
            key = r.small_value()
            if not r.take(b":"):
                return None
            r.skip_space()
            if key == text_column and r.need(1) and r.buf[r.i : r.i + 1] == b'"':
                r.i += 1
                with open(text_path, "wb") as out:
                    r.string_into(out)
                found = True
            else:
                row[key] = r.small_value()
    except (ValueError, UnicodeError):
        text_path.unlink(missing_ok=True)
        return None
    if not found:
        return None
    if first_undecodable(text_path) is not None:  # left to `datasets`, whose refusal names it
        text_path.unlink()
        return None
    return row


def _stripped_range(path: Path) -> tuple[int, int]:
    """The byte range of the file's UTF-8 text without leading and trailing whitespace
    (str.strip's), found reading a megabyte at a time from each end."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        lo = 0
        while lo < size:
            f.seek(lo)
            text = f.read(READ).decode("utf-8", "ignore")  # a character cut at the end: dropped
            kept = text.lstrip()
            lo += len(text[: len(text) - len(kept)].encode())
            if kept or not text:
                break
        hi = size
        while hi > lo:
            at = max(lo, hi - READ)
            f.seek(at)
            text = f.read(hi - at).decode("utf-8", "ignore")  # one cut at the start: dropped
            kept = text.rstrip()
            hi -= len(text[len(kept) :].encode())
            if kept or at == lo:
                break
    return lo, hi
