"""Atomic file writes: write to a temporary name in the same folder, then rename (docs/files.md).

A reader (or a sweep restarted after kill -9) sees either the old file or the new one,
never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call write(tmp_path), fsync it, then rename it onto path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        # mkstemp makes 0600 files; runs folders are shared (clusters), so use the umask's mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def refusal(folder: str | Path) -> tuple[Path, str] | None:
    """None when `folder` (or, where it is still to be made, the nearest folder above it)
    takes new files; else (that folder, the system's reason). Probed with an unnamed
    temporary file, so missing permissions and a read-only file system are both found,
    and nothing is left behind."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as e:
        return folder, str(e.strerror or e)


def check_writable(*paths: str | Path) -> None:
    """BadInput unless each file's folder takes new files (`refusal`): checked before
    long work whose end writes them."""
    from cdlaw.system.errors import BadInput

    for path in map(Path, paths):
        if refused := refusal(path.parent):
            raise BadInput(
                f"cannot write {path}: {refused[0]} refuses new files ({refused[1]}); give "
                "--out FILE.json in a folder you can write to"
            )


def check_out_path(path: str | Path, option: str, folder: bool = False, example: str = "") -> Path:
    """`path` as a user named it for a command to write (a file, or with `folder` a
    folder), checked before any work: BadInput (one sentence) for a file that is a folder
    (`example`: a file name to suggest in it), a folder that is a file, or a place whose
    missing folders cdlaw would have to make more than one of. cdlaw makes the last folder
    of a path it is given, inside one that exists, never the folders above it: a mistyped
    /nonexistent/dir/r.html is refused, not made at the root. Returns the path."""
    from cdlaw.system.errors import BadInput

    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise BadInput(f"{option} {path} is a file; give a folder")
    if not folder and path.is_dir():
        name = f", such as {path / example}" if example else ""
        raise BadInput(f"{option} {path} is a folder; give a file name{name}")
    home = path if folder else path.parent
    up = [home, *home.parents]  # ends in "." or "/", which exist
    made = next(i for i, p in enumerate(up) if p.exists())  # folders to make
    if not up[made].is_dir():
        raise BadInput(f"{option} {path}: {up[made]} is a file, not a folder")
    if made > 1:
        top = up[made - 1]
        raise BadInput(
            f"{option} {path}: the folder {top} does not exist; make it first "
            f"(mkdir -p {home}) or give a path in a folder that exists"
        )
    return path


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    return write_atomic(path, lambda p: p.write_bytes(data))


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | Path, obj) -> Path:
    """JSON with NaN/inf written as null (strict JSON), indented for people."""
    return write_text_atomic(path, json.dumps(json_safe(obj), indent=2, sort_keys=False) + "\n")


def write_parquet_atomic(path: str | Path, df) -> Path:
    """A pandas DataFrame to parquet (pyarrow), atomically."""
    return write_atomic(path, lambda p: df.to_parquet(p, index=False, engine="pyarrow"))


def json_safe(obj):
    """Replace float NaN / inf by None, recursively, and numpy scalars by Python ones."""
    import math

    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)) and getattr(obj, "ndim", 0) == 0:
        obj = obj.item()
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
