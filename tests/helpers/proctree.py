"""A process's descendants read from /proc (Linux), with their start times, so a test can
kill a parent and then ask which of them are still alive (a reused pid is not them).
Read here, not with cdlaw.system.lifetime's own reader: a bug there must not hide survivors."""

import time
from pathlib import Path


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])  # a zombie is gone


def descendants(pid: int) -> dict[int, int]:
    """{pid: start time} of every living descendant of pid."""
    found, frontier = {}, [pid]
    while frontier:
        nxt = []
        for p in frontier:
            kids = []
            for task in Path(f"/proc/{p}/task").glob("*"):  # each thread's children
                try:
                    kids += [int(k) for k in (task / "children").read_text().split()]
                except OSError:
                    pass
            for k in set(kids):
                if k not in found and (t := start_time(k)) is not None:
                    found[k] = t
                    nxt.append(k)
        frontier = nxt
    return found


def alive(procs: dict[int, int]) -> list[str]:
    """The command lines of those of procs still alive."""
    out = []
    for pid, t in procs.items():
        if start_time(pid) == t:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            out.append(f"{pid}: {cmd[:160]}")
    return out


def survivors(procs: dict[int, int], within: float) -> list[str]:
    """Those of procs still alive after waiting up to `within` seconds for them to go."""
    deadline = time.monotonic() + within
    while (left := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left
