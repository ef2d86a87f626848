"""Nothing cdlaw starts outlives it (docs/cli.md, "Stopping"), whatever stops it, kill -9
included: no orphan keeps tokenising into a cache or training a run that the next
command then waits for, and none holds memory.

- A worker process calls `die_with_parent(parent_pid)` first (a pool's initializer): Linux
  kills it when its parent dies (PR_SET_PDEATHSIG), and a watchdog thread that polls the
  parent's pid does so elsewhere (and covers a parent that died before the call). The
  multiprocessing resource tracker exits by itself once the parent and the workers, which
  hold its pipe, are gone.
- Processes started some other way, which start their own (a local Ray cluster: raylet,
  GCS, dashboard and runtime-env agents), are handed to `reap_with_me(pids)`: a small
  reaper process that keeps a list of them and all their descendants, and stops every one
  when this process dies. `init_ray` starts its reaper before `ray.init`, in the mode that
  watches for Ray's processes (`ray=True`): a kill -9 while Ray starts is reaped too, and
  so are Ray's agents, which Ray's own fate-sharing orphans (the kernel kills raylet with
  its driver; its agents, then children of init, lived on).

    python -m cdlaw.system.lifetime PARENT_PID [--ray] PID…    the reaper (started by reap_with_me)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

POLL_SECONDS = 0.5  # how often a watchdog or the reaper looks at its parent
GRACE_SECONDS = 3.0  # between the reaper's SIGTERM and its SIGKILL


def die_with_parent(parent: int) -> None:
    """In a worker process: exit as soon as `parent` (the pid that started it) dies."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    # The parent may have died while this worker started, before the line above: then no
    # signal comes. Elsewhere than Linux no signal comes at all: the thread notices.
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="cdlaw-parent").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os._exit(1)


def reap_with_me(pids: list[int], ray: bool = False) -> subprocess.Popen:
    """Start the reaper of `pids` (and their descendants, present and future): it stops
    them all (SIGTERM, then SIGKILL) when this process dies, and ends by itself when they
    have all ended first. With `ray`, it also takes on every Ray process this process
    starts (is_ray), and at the end the Ray processes of this process group that were
    orphaned; it then lives as long as this process does."""
    flag = ["--ray"] if ray else []
    return subprocess.Popen(
        [sys.executable, "-m", "cdlaw.system.lifetime", str(os.getpid()), *flag, *map(str, pids)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C at the terminal is for cdlaw, not for the reaper
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _reap(parent: int, pids: list[int], ray: bool = False) -> None:
    """The reaper's loop: note the watched processes' descendants (with `ray`, the
    parent's Ray processes too); stop them all when the parent is gone."""
    watched = {p: t for p in pids if (t := start_time(p)) is not None}
    group = os.getpgid(parent) if ray else None
    while os.getppid() == parent:
        if ray:
            _add_ray(watched, _descendants(parent))
        elif not _living(watched):
            return  # they ended before cdlaw did: nothing to do
        _add_descendants(watched)
        time.sleep(POLL_SECONDS)
    _add_descendants(watched)  # any started since the last look, while their parents live
    if group is not None:  # orphaned since the last look: children of init, in our group
        _add_ray(watched, [p for p in _orphans() if _pgid(p) == group])
        _add_descendants(watched)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _living(watched):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_SECONDS
        while _living(watched) and time.monotonic() < deadline:
            time.sleep(0.1)


def _add_descendants(watched: dict[int, int]) -> None:
    """Add every living descendant of the watched processes (pid: start time)."""
    frontier = _living(watched)
    while frontier:
        found = []
        for pid in frontier:
            for kid in _children(pid):
                if kid not in watched and (t := start_time(kid)) is not None:
                    watched[kid] = t
                    found.append(kid)
        frontier = found


def _add_ray(watched: dict[int, int], pids: list[int]) -> None:
    for pid in pids:
        if pid not in watched and is_ray(_argv(pid)) and (t := start_time(pid)) is not None:
            watched[pid] = t


def is_ray(argv: list[str]) -> bool:
    """A Ray process's command line: a worker or agent named `ray::…`, or a program or
    script under the ray package (raylet, gcs_server, dashboard, log_monitor, …)."""
    return bool(argv) and (
        argv[0].startswith("ray::") or any("-packages/ray/" in a for a in argv[:3])
    )


def _descendants(pid: int) -> list[int]:
    out, frontier = [], [pid]
    while frontier:
        frontier = [kid for p in frontier for kid in _children(p)]
        out += frontier
    return out


def _orphans() -> list[int]:
    """The processes whose parent is init (pid 1)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == 1:
                out.append(int(stat.parent.name))
    return out


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _living(watched: dict[int, int]) -> list[int]:
    return [pid for pid, t in watched.items() if start_time(pid) == t]


def init_ray(ray, address: str | None) -> bool:
    """`ray.init` as cdlaw calls it (no dashboard, workers' logs not echoed), unless Ray is
    running in this process already; a local cluster it starts is handed to reap_with_me.
    True when this call initialised Ray."""
    if ray.is_initialized():
        return False
    # before ray.init: a kill -9 while Ray starts its processes must reap them too
    reap_with_me([], ray=True)
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return True


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot; a reused pid has another), or None
    once it is gone (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


if __name__ == "__main__":
    rest = sys.argv[2:]
    _reap(int(sys.argv[1]), [int(p) for p in rest if p != "--ray"], "--ray" in rest)
