"""Run locks: one exclusive lock file per run, so two processes never train the same run.

    runs/<sweep>/<run_id>/.lock    who trains it now (pid, host, token; heartbeat = its mtime)

Two sweeps on one folder, or a sweep restarted while an orphan still runs, each take a
run's lock before training it. Stale locks (the holder died: a dead pid on this host, or
no heartbeat from another host for `LOCK_STALE_S`) are broken under a second lock, so two
breakers cannot both win (docs/sweep.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

LOCK_NAME = ".lock"
LOCK_HEARTBEAT_S = float(os.environ.get("CDLAW_LOCK_HEARTBEAT_S", 10))
LOCK_STALE_S = float(os.environ.get("CDLAW_LOCK_STALE_S", 120))  # other hosts: no heartbeat
BREAK_GUARD_STALE_S = 30.0  # breaking a lock takes milliseconds; an older guard is debris


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, …] (None off Linux)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of a process (to tell a live pid from a reused one)."""
    stat = _proc_stat(pid)
    return stat[19] if stat and len(stat) > 19 else None  # field 22 of /proc/<pid>/stat


def _pid_alive(pid: int, proc_start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    stat = _proc_stat(pid)
    if stat is None:
        return True
    # A zombie (killed, not yet reaped: containers often lack an init that reaps) is dead;
    # a different start time means the pid was reused by another process.
    return stat[0] not in ("Z", "X") and (proc_start is None or stat[19] == proc_start)


def read_lock(path: Path) -> dict | None:
    """The lock's holder with `stale` (bool) and `age_s`, or None when there is no lock."""
    try:
        stat = path.stat()
        text = path.read_text()
    except FileNotFoundError:
        return None
    age = time.time() - stat.st_mtime
    try:
        info = json.loads(text)
    except json.JSONDecodeError:  # the holder died between creating and writing it
        return {"token": None, "stale": age > BREAK_GUARD_STALE_S, "age_s": age}
    if info.get("host") == socket.gethostname():
        stale = not _pid_alive(int(info["pid"]), info.get("proc_start"))
    else:
        stale = age > LOCK_STALE_S
    return {**info, "stale": stale, "age_s": age}


class RunLock:
    """An exclusive lock file (O_EXCL) holding pid, host and a token; its mtime is a heartbeat.

    Works on shared storage where fcntl locks may not (NFS, Lustre): creation with O_EXCL
    is atomic there. `acquire()` never blocks: it returns False while a live process holds
    the lock.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> bool:
        for _ in range(2):  # once, and once more after breaking a stale lock
            if self._create():
                self._beat = threading.Thread(target=self._heartbeat, daemon=True)
                self._beat.start()
                return True
            holder = read_lock(self.path)
            if holder is not None and not holder["stale"]:
                return False
            self._break(holder)
        return False

    def _create(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        pid = os.getpid()
        info = {
            "pid": pid,
            "host": socket.gethostname(),
            "token": self.token,
            "started": time.time(),
            "proc_start": _proc_start(pid),
        }
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(info, f)
        except OSError:  # a full disk: leave no empty lock for others to wait out
            self.path.unlink(missing_ok=True)
            raise
        return True

    def _break(self, seen: dict | None) -> None:
        """Remove a stale lock, under a guard file so that two breakers cannot both win.

        Without the guard, A and B could both judge the lock stale, A remove it and take a
        fresh one, and B then remove A's fresh lock.
        """
        guard = self.path.with_name(self.path.name + ".break")
        try:
            fd = os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - guard.stat().st_mtime > BREAK_GUARD_STALE_S:
                    guard.unlink()  # a breaker died mid-break
            return
        try:
            now = read_lock(self.path)
            if now is not None and now["stale"] and (seen is None or now["token"] == seen["token"]):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)
            guard.unlink(missing_ok=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(LOCK_HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            if json.loads(self.path.read_text()).get("token") == self.token:
                self.path.unlink()  # only our own lock, never one that replaced it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
