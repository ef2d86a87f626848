"""Faults (SPEC §13): kill -9 in the middle of a run and between runs, two sweeps on one
folder, a diverging run, a failing run, and the run locks underneath."""

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

from cdlaw import runner
from cdlaw.config import ExecConfig
from cdlaw.runner import LOCK_NAME, RunLock, read_lock, run_sweep, sweep_status
from cdlaw.sweep import load_sweep

torch.set_num_threads(1)

# The same tiny grid as test_sweep_run (6 runs of 8–16 steps), checkpointing every 2 steps.
TINY = """
name = "{name}"
[grid]
size = ["20K", "60K"]
fresh_tokens = [2048]
strategy = ["repetition", "paraphrase"]
derived_ratio = [0, 1]
{extra_grid}
[data]
vocab_size = 512
val_tokens = 2048
[model]
seq_len = 32
[train]
batch_size = 8
eval_every = 4
log_every = 1
checkpoint_every = 2
"""
ONE_THREAD = ExecConfig(device="cpu", threads=1)


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """The session's shared runs folder (one corpus cache for every sweep test)."""
    root = tmp_path_factory.getbasetemp() / "cdlaw-runs"
    root.mkdir(exist_ok=True)
    return root


def write_sweep(root: Path, name: str, extra_grid: str = "", sizes: str = '"20K", "60K"') -> Path:
    path = root.parent / f"{name}.toml"
    text = TINY.format(name=name, extra_grid=extra_grid).replace('"20K", "60K"', sizes)
    path.write_text(text)
    return path


def start_sweep(path: Path, root: Path, jobs: int, log: Path) -> subprocess.Popen:
    args = ["sweep", path, "--out", root, "--jobs", jobs, "--threads", 1, "--json"]
    return subprocess.Popen(
        [sys.executable, "-m", "cdlaw", *map(str, args)],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env={**os.environ, "COLUMNS": "1000"},
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
def reference(runs_root):
    """The uninterrupted sweep's losses (in this process, one thread)."""
    path = write_sweep(runs_root, "ref")
    outcome = run_sweep(path, runs_root, jobs=1, exec_cfg=ONE_THREAD)
    assert outcome.exit_code == 0 and len(outcome.statuses) == 6
    return losses(runs_root / "ref")


# --- kill -9 -----------------------------------------------------------------------------


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.slow
def test_kill_9_in_the_middle_of_runs_then_resume(runs_root, reference, tmp_path):
    """Two worker processes; kill -9 the sweep while runs are half-trained. The workers die
    with it, the restarted sweep resumes the runs from their checkpoints, and every run
    ends exactly once with the loss of the uninterrupted sweep."""
    path = write_sweep(runs_root, "kill-mid")
    sweep_dir = runs_root / "kill-mid"
    proc = start_sweep(path, runs_root, jobs=2, log=tmp_path / "first.log")
    wait_for(lambda: list(sweep_dir.glob("*/checkpoint/state.json")))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    in_flight = {rid: a[-1]["pid"] for rid, a in attempts(sweep_dir).items()}
    done_before = result_stamps(sweep_dir)
    partial = {r["run_id"] for r in sweep_status(sweep_dir) if r["state"] == "partial"}
    assert partial, "the kill should land mid-run"
    # The workers die with the sweep (PR_SET_PDEATHSIG): no orphan keeps training.
    for rid, pid in in_flight.items():
        if rid not in done_before:
            wait_for(lambda pid=pid: pid_gone(pid), timeout=20, every=0.05)

    outcome = finish(start_sweep(path, runs_root, jobs=1, log=tmp_path / "second.log"))
    assert outcome["counts"] == {"done": 6}
    assert losses(sweep_dir) == reference
    assert result_stamps(sweep_dir).items() >= done_before.items()  # none rewritten
    tries = attempts(sweep_dir)
    assert set(outcome["trained"]) == set(tries) - set(done_before)
    for rid, runs in tries.items():
        assert len(runs) == (2 if rid in in_flight and rid not in done_before else 1)
        if rid in partial:
            assert runs[-1]["resumed"] is True
    assert_metrics_written_once(sweep_dir)


@pytest.mark.slow
def test_kill_9_between_runs_then_resume(runs_root, reference, tmp_path):
    path = write_sweep(runs_root, "kill-between")
    sweep_dir = runs_root / "kill-between"
    proc = start_sweep(path, runs_root, jobs=1, log=tmp_path / "first.log")
    wait_for(lambda: list(sweep_dir.glob("*/result.json")))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = result_stamps(sweep_dir)
    assert 1 <= len(done_before) < 6

    outcome = finish(start_sweep(path, runs_root, jobs=1, log=tmp_path / "second.log"))
    assert outcome["counts"] == {"done": 6}
    assert set(outcome["trained"]).isdisjoint(done_before)
    assert losses(sweep_dir) == reference
    assert result_stamps(sweep_dir).items() >= done_before.items()
    tries = attempts(sweep_dir)
    assert len(tries) == 6 and sum(map(len, tries.values())) <= 7  # at most one cut short
    assert_metrics_written_once(sweep_dir)


@pytest.mark.slow
def test_two_sweeps_on_one_folder_never_train_a_run_twice(runs_root, reference, tmp_path):
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
def test_diverged_and_failed_runs_are_recorded_and_the_sweep_goes_on(runs_root, tmp_path):
    """lr = 1000 diverges (a result, exit 0); a run whose checkpoint is corrupt fails (exit 1,
    the summary says which and why) and is tried again on the next sweep."""
    path = write_sweep(runs_root, "wild", extra_grid="lr = [3e-3, 1000]", sizes='"20K"')
    sweep_dir = runs_root / "wild"
    runs = load_sweep(path).runs()
    victim = next(r for r in runs if r.train.lr == 3e-3 and r.strategy == "paraphrase")
    broken = sweep_dir / victim.run_id / "checkpoint"
    broken.mkdir(parents=True)
    (broken / "state.json").write_text("{}")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")

    outcome = run_sweep(path, runs_root, jobs=1, exec_cfg=ONE_THREAD)
    assert outcome.exit_code == 1
    assert [f["run_id"] for f in outcome.failures] == [victim.run_id]
    df = pd.read_parquet(sweep_dir / "summary.parquet").set_index("run_id")
    assert len(df) == len(runs) == 6
    assert (df[df.lr == 1000].status == "diverged").all() and df[df.lr == 1000].loss.isna().all()
    others = df[(df.lr != 1000) & (df.index != victim.run_id)]
    assert (others.status == "done").all() and others.loss.notna().all()
    assert df.loc[victim.run_id, "status"] == "failed"
    assert "SafetensorError" in df.loc[victim.run_id, "error"]
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
    import shutil

    shutil.rmtree(broken)
    diverged = {rid for rid in df.index if df.loc[rid, "status"] == "diverged"}
    stamps = result_stamps(sweep_dir)
    outcome = run_sweep(path, runs_root, jobs=1, exec_cfg=ONE_THREAD)
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
    old = time.time() - runner.LOCK_STALE_S - 5
    os.utime(path, (old, old))
    assert RunLock(path).acquire()


def test_the_heartbeat_keeps_the_lock_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "LOCK_HEARTBEAT_S", 0.02)
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
    old = time.time() - runner.BREAK_GUARD_STALE_S - 5
    os.utime(guard, (old, old))  # … or died doing it, long ago
    assert not RunLock(path).acquire()  # the old guard is cleared first
    assert RunLock(path).acquire() and not guard.exists()
