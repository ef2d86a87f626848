"""A full disk: how it is recognised and said, wherever cdlaw writes (docs/files.md).

A full disk is no bad input and no damage: the command stops with one sentence naming
the folder and what was being written (exit 1), keeps what it finished (every file is
written atomically), and the same command resumes once there is space. Libraries report
it in their own exception types (datasets, safetensors, pyarrow), with the OS's words or
with the OSError as the cause, so `is_disk_full` reads the whole chain.

    with stop_when_full(lambda e: disk_full_error(e, "tokenising the corpus", folder)):
        …

A sweep says it its own way (`sweep_stopped`: finished runs kept, the others resumed):
`@stop_when_full(lambda e: DiskFull(sweep_stopped(e)))` on the sweep.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path


class DiskFull(Exception):
    """No space left where cdlaw writes: the command stops; what it finished is kept."""


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "os error 28")


def is_disk_full(e: BaseException | None) -> bool:
    """Whether an exception (or one it was raised from) says the disk is full."""
    return any(
        isinstance(x, DiskFull)
        or (isinstance(x, OSError) and x.errno in NO_SPACE)
        or any(text in str(x) for text in NO_SPACE_TEXT)
        for x in _chain(e)
    )


def full_path(e: BaseException) -> str | None:
    """The file the OS said it could not write, if an OSError in the chain names one."""
    return next((x.filename for x in _chain(e) if isinstance(x, OSError) and x.filename), None)


def disk_full_error(e: BaseException, doing: str, folder: Path | str | None = None) -> DiskFull:
    """DiskFull with one sentence: the folder, what was being written, how to go on."""
    if isinstance(e, DiskFull):
        return e
    filename = full_path(e)
    where = Path(filename).parent if filename else folder
    place = f" in {where}" if where else ""
    return DiskFull(
        f"No space left on device{place} while {doing}: nothing half-written was kept; "
        "free some space and run the same command again to resume"
    )


def sweep_stopped(e: BaseException, where: Path | str | None = None) -> str:
    """A sweep's sentence: what was being written, that finished runs are kept, how to
    resume."""
    if isinstance(e, DiskFull):
        return str(e)
    filename = full_path(e)
    place = f"writing {filename}" if filename else f"writing in {where or 'the runs folder'}"
    return (
        f"No space left on device ({place}): the sweep stopped; its finished runs are kept, "
        "and the same command resumes the others once there is space"
    )


@contextmanager
def stop_when_full(say: Callable[[BaseException], DiskFull]):
    """A full disk inside (a with block, or a function it decorates) becomes the DiskFull
    `say(e)` gives; a DiskFull already said passes as it is."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as e:
        if not is_disk_full(e):
            raise
        raise say(e) from e


def _chain(e: BaseException | None):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__
