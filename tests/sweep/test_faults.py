"""Faults (docs/sweep.md): kill -9 in the middle of a run and between runs, two sweeps on one
folder, a diverging run, a failing run, and the run locks underneath."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from cdlaw.sweep import locks
from cdlaw.sweep.locks import LOCK_NAME, RunLock, read_lock
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.spec import load_sweep
from cdlaw.sweep.summary import sweep_status

torch.set_num_threads(1)


def start_sweep(path: Path, root: Path, jobs: int, log: Path) -> subprocess.Popen:
    """The sweep in a process group of its own (pgid = its pid), with its workers."""
    args = ["sweep", path, "--out", root, "--jobs", jobs, "--threads", 1, "--json"]
    return subprocess.Popen(
        [sys.executable, "-m", "cdlaw", *map(str, args)],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env={**os.environ, "COLUMNS": "1000"},
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> dict:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return json.loads(out)


def wait_for(predicate, timeout: float = 120, every: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out")


def losses(sweep_dir: Path) -> dict:
    df = pd.read_parquet(sweep_dir / "summary.parquet")
    key = ("size", "strategy", "fresh_tokens", "derived_tokens", "lr")
    return {tuple(getattr(r, k) for k in key): (r.status, r.loss) for r in df.itertuples()}


def attempts(sweep_dir: Path) -> dict[str, list]:
    return {
        p.parent.name: json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/attempts.json"))
    }


def result_stamps(sweep_dir: Path) -> dict[str, tuple[int, int]]:
    """Each result.json's (inode, mtime): a rewrite (atomic rename) changes both."""
    return {
        p.parent.name: (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sweep_dir.glob("*/result.json")
    }


def assert_metrics_written_once(sweep_dir: Path) -> None:
    """A resumed run's curve holds every step once, in order, up to its last token."""
    for p in sweep_dir.glob("*/metrics.parquet"):
        m = pd.read_parquet(p)
        assert m.step.is_monotonic_increasing and m.step.is_unique, p
        result = json.loads((p.parent / "result.json").read_text())
        assert m.tokens_seen.iloc[-1] == result["tokens_trained"]


@pytest.fixture(scope="module")
def reference(runs_root, write_sweep, one_thread):
    """The uninterrupted sweep's losses (in this process, one thread)."""
    path = write_sweep(runs_root, "ref")
    outcome = run_sweep(path, runs_root, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert outcome.exit_code == 0 and len(outcome.statuses) == 6
    return losses(runs_root / "ref")


# --- kill -9 -----------------------------------------------------------------------------
#
# A kill -9 lands at an instant the test cannot choose by polling alone: on a loaded machine
# a tiny run can finish between seeing its checkpoint and the kill, and the workers die a
# moment after the sweep (PR_SET_PDEATHSIG), so a status read at once still sees their live
# locks. So the sweep and its workers are frozen (SIGSTOP) at a moment the runs folder
# shows what the kill must interrupt, and killed frozen: the kill hits exactly that state.


def proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, pgrp, …]."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_gone(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is None or stat[0] in ("Z", "X")  # a zombie is dead, only not reaped


def stopped(pid: int) -> bool:
    return (stat := proc_stat(pid)) is None or stat[0] in ("T", "t", "Z", "X")


def group(pgid: int) -> list[int]:
    pids = (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    return [pid for pid in pids if (stat := proc_stat(pid)) and stat[2] == str(pgid)]


def freeze_when(proc: subprocess.Popen, condition, timeout: float = 180):
    """SIGSTOP the sweep's process group at a moment `condition()` is true; return its value.

    The condition is checked again once every process of the group has stopped (no file
    changes after that); if a run finished in between, the group goes on until next time.
    """
    deadline = time.monotonic() + timeout
    while True:
        wait_for(lambda: proc.poll() is not None or condition(), deadline - time.monotonic())
        assert proc.poll() is None, "the sweep ended before the kill"
        os.killpg(proc.pid, signal.SIGSTOP)
        wait_for(lambda: all(stopped(pid) for pid in group(proc.pid)), timeout=20)
        if value := condition():
            return value
        os.killpg(proc.pid, signal.SIGCONT)


def kill_frozen(proc: subprocess.Popen) -> None:
    """kill -9 the (frozen) sweep alone, then let the rest of its group go on."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with contextlib.suppress(ProcessLookupError):  # PDEATHSIG may have emptied the group
        os.killpg(proc.pid, signal.SIGCONT)


def mid_run(sweep_dir: Path) -> set[str]:
    """Runs with a checkpoint (or the old one, mid-swap) and no result: a kill cuts them short."""
    if not sweep_dir.is_dir():
        return set()
    return {
        p.name
        for p in sweep_dir.iterdir()
        if any((p / name).is_dir() for name in ("checkpoint", "checkpoint.old"))
        and not (p / "result.json").exists()
    }


def lock_holders(sweep_dir: Path) -> dict[str, int]:
    """run_id -> pid of the process holding its lock (a lock frozen half-written is left out)."""
    holders = {}
    for p in sweep_dir.glob(f"*/{LOCK_NAME}"):
        with contextlib.suppress(ValueError, KeyError):
            holders[p.parent.name] = json.loads(p.read_text())["pid"]
    return holders


@pytest.mark.slow
def test_kill_9_in_the_middle_of_runs_then_resume(runs_root, reference, tmp_path, write_sweep):
    """Two worker processes; kill -9 the sweep while runs are half-trained. The workers die
    with it, the restarted sweep resumes the runs from their checkpoints, and every run
    ends exactly once with the loss of the uninterrupted sweep."""
    path = write_sweep(runs_root, "kill-mid")
    sweep_dir = runs_root / "kill-mid"
    proc = start_sweep(path, runs_root, jobs=2, log=tmp_path / "first.log")
    try:
        cut = freeze_when(proc, lambda: mid_run(sweep_dir))
        sweep_processes = group(proc.pid)  # the sweep, its workers, multiprocessing's helper
        holders = lock_holders(sweep_dir)
        done_before = result_stamps(sweep_dir)
        in_flight = {rid: a[-1]["pid"] for rid, a in attempts(sweep_dir).items()}
        in_flight = {rid: pid for rid, pid in in_flight.items() if rid not in done_before}
        # The runs are trained in the sweep's worker processes, not in the sweep itself.
        assert cut <= set(holders) and proc.pid not in holders.values()
        assert all(proc_stat(pid)[1] == str(proc.pid) for pid in holders.values())
        kill_frozen(proc)
        # The workers die with the sweep (PR_SET_PDEATHSIG): no orphan keeps training, and
        # the runs' states are read only once no process of the sweep is left.
        assert set(holders.values()) <= set(sweep_processes)
        wait_for(lambda: all(pid_gone(pid) for pid in sweep_processes), timeout=30, every=0.05)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leave no stopped process behind
        raise
    states = {r["run_id"]: r["state"] for r in sweep_status(sweep_dir)}
    assert {rid for rid, s in states.items() if s == "partial"} == cut
    assert {rid for rid, s in states.items() if s == "done"} == set(done_before)
    assert "running" not in states.values()

    outcome = finish(start_sweep(path, runs_root, jobs=1, log=tmp_path / "second.log"))
    assert outcome["counts"] == {"done": 6}
    assert losses(sweep_dir) == reference
    assert result_stamps(sweep_dir).items() >= done_before.items()  # none rewritten
    tries = attempts(sweep_dir)
    assert set(outcome["trained"]) == set(tries) - set(done_before)
    for rid, runs in tries.items():
        assert len(runs) == (2 if rid in in_flight else 1)
        assert runs[-1]["resumed"] is (rid in cut)
    assert_metrics_written_once(sweep_dir)


@pytest.mark.slow
def test_kill_9_between_runs_then_resume(runs_root, reference, tmp_path, write_sweep):
    path = write_sweep(runs_root, "kill-between")
    sweep_dir = runs_root / "kill-between"
    proc = start_sweep(path, runs_root, jobs=1, log=tmp_path / "first.log")
    try:
        done_before = freeze_when(proc, lambda: result_stamps(sweep_dir))
        kill_frozen(proc)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # leave no stopped process behind
        raise
    assert 1 <= len(done_before) < 6

    outcome = finish(start_sweep(path, runs_root, jobs=1, log=tmp_path / "second.log"))
    assert outcome["counts"] == {"done": 6}
    assert set(outcome["trained"]) == {r.run_id for r in load_sweep(path).runs()} - set(done_before)
    assert losses(sweep_dir) == reference
    assert result_stamps(sweep_dir).items() >= done_before.items()
    tries = attempts(sweep_dir)
    assert len(tries) == 6 and sum(map(len, tries.values())) <= 7  # at most one cut short
    assert_metrics_written_once(sweep_dir)


@pytest.mark.slow
def test_two_sweeps_on_one_folder_never_train_a_run_twice(
    runs_root, reference, tmp_path, write_sweep
):
    path = write_sweep(runs_root, "twins")
    sweep_dir = runs_root / "twins"
    first = start_sweep(path, runs_root, jobs=1, log=tmp_path / "a.log")
    second = start_sweep(path, runs_root, jobs=1, log=tmp_path / "b.log")
    a, b = finish(first), finish(second)
    assert a["counts"] == b["counts"] == {"done": 6}
    assert set(a["trained"]).isdisjoint(b["trained"])
    assert set(a["trained"]) | set(b["trained"]) == set(attempts(sweep_dir))
    assert all(len(runs) == 1 for runs in attempts(sweep_dir).values())
    assert losses(sweep_dir) == reference
    summary = pd.read_parquet(sweep_dir / "summary.parquet")
    assert len(summary) == 6  # whoever wrote it last had seen every result


# --- diverged and failed runs ----------------------------------------------------------------


@pytest.mark.slow
def test_diverged_and_failed_runs_are_recorded_and_the_sweep_goes_on(
    runs_root, tmp_path, write_sweep, one_thread
):
    """lr = 1000 diverges (a result, exit 0); a run whose folder holds another run's
    config.json fails (exit 1, the summary says which and why) and is tried again on the
    next sweep. (A damaged checkpoint is no failure: tests/train/test_damage.py.)"""
    path = write_sweep(runs_root, "wild", extra_grid="lr = [3e-3, 1000]", sizes='"20K"')
    sweep_dir = runs_root / "wild"
    runs = load_sweep(path).runs()
    victim = next(r for r in runs if r.train.lr == 3e-3 and r.strategy == "paraphrase")
    broken = sweep_dir / victim.run_id / "config.json"
    broken.parent.mkdir(parents=True)
    broken.write_text(json.dumps({"run_id": "someone-else"}))

    outcome = run_sweep(path, runs_root, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert outcome.exit_code == 1
    assert [f["run_id"] for f in outcome.failures] == [victim.run_id]
    df = pd.read_parquet(sweep_dir / "summary.parquet").set_index("run_id")
    assert len(df) == len(runs) == 6
    assert (df[df.lr == 1000].status == "diverged").all() and df[df.lr == 1000].loss.isna().all()
    others = df[(df.lr != 1000) & (df.index != victim.run_id)]
    assert (others.status == "done").all() and others.loss.notna().all()
    assert df.loc[victim.run_id, "status"] == "failed"
    assert "holds run someone-else" in df.loc[victim.run_id, "error"]
    assert (sweep_dir / victim.run_id / "error.txt").read_text().startswith("Traceback")

    # The CLI says the same, with exit code 1.
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdlaw",
            "sweep",
            str(path),
            "--out",
            str(runs_root),
            "--jobs",
            "1",
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "1000"},
    )
    assert cli.returncode == 1 and f"failed {victim.run_id}" in cli.stderr

    # Fix the cause: the next sweep retries the failed run only; diverged runs are results.
    broken.unlink()
    diverged = {rid for rid in df.index if df.loc[rid, "status"] == "diverged"}
    stamps = result_stamps(sweep_dir)
    outcome = run_sweep(path, runs_root, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert outcome.exit_code == 0 and outcome.trained == [victim.run_id]
    assert outcome.statuses[victim.run_id] == "done"
    assert all(result_stamps(sweep_dir)[rid] == stamps[rid] for rid in diverged)
    assert not (sweep_dir / victim.run_id / "result.failed.json").exists()


# --- the run lock -------------------------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def write_lock(path: Path, **info) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"host": socket.gethostname(), "token": "theirs", **info}))


def test_lock_is_exclusive_and_released(tmp_path):
    path = tmp_path / "run" / LOCK_NAME
    a, b = RunLock(path), RunLock(path)
    assert a.acquire() and not b.acquire()
    assert read_lock(path)["pid"] == os.getpid() and not read_lock(path)["stale"]
    a.release()
    assert not path.exists() and b.acquire()
    b.release()


def test_a_dead_holder_on_this_host_is_stale(tmp_path):
    path = tmp_path / LOCK_NAME
    write_lock(path, pid=os.getpid())  # alive: held
    assert not RunLock(path).acquire()
    write_lock(path, pid=dead_pid())  # dead: taken over
    lock = RunLock(path)
    assert lock.acquire() and json.loads(path.read_text())["token"] == lock.token
    lock.release()
    write_lock(path, pid=os.getpid(), proc_start="1")  # our pid, another start: reused pid
    assert RunLock(path).acquire()


def test_another_hosts_lock_goes_stale_without_heartbeat(tmp_path):
    path = tmp_path / LOCK_NAME
    write_lock(path, pid=1, host="elsewhere")
    assert not RunLock(path).acquire()  # fresh heartbeat: held
    old = time.time() - locks.LOCK_STALE_S - 5
    os.utime(path, (old, old))
    assert RunLock(path).acquire()


def test_the_heartbeat_keeps_the_lock_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "LOCK_HEARTBEAT_S", 0.02)
    path = tmp_path / LOCK_NAME
    lock = RunLock(path)
    assert lock.acquire()
    os.utime(path, (0, 0))
    wait_for(lambda: path.stat().st_mtime > time.time() - 5, timeout=5)
    lock.release()


def test_release_never_removes_a_lock_that_replaced_ours(tmp_path):
    path = tmp_path / LOCK_NAME
    lock = RunLock(path)
    assert lock.acquire()
    write_lock(path, pid=os.getpid(), token="someone else")
    lock.release()
    assert json.loads(path.read_text())["token"] == "someone else"


def test_a_break_in_progress_is_not_broken_twice(tmp_path):
    path = tmp_path / LOCK_NAME
    write_lock(path, pid=dead_pid())
    guard = path.with_name(path.name + ".break")
    guard.write_text("")  # another process is breaking this stale lock right now
    assert not RunLock(path).acquire() and path.exists()
    old = time.time() - locks.BREAK_GUARD_STALE_S - 5
    os.utime(guard, (old, old))  # … or died doing it, long ago
    assert not RunLock(path).acquire()  # the old guard is cleared first
    assert RunLock(path).acquire() and not guard.exists()
