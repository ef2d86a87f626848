"""The scheduler's rule for a worker that dies under a run (cdlaw.sweep.scheduler): the run
is queued again once, and when its worker dies a second time it is recorded as failed.
Real processes: `cdlaw sweep --jobs 2` trains the run in a spawned worker, and the test
kills that worker with SIGKILL each time it has claimed the run."""

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

from cdlaw.config import ExecConfig
from cdlaw.sweep import scheduler
from cdlaw.sweep.locks import LOCK_NAME
from cdlaw.sweep.scheduler import record_failure
from cdlaw.sweep.spec import load_sweep

# One run of 2,048 steps (2K fresh tokens repeated 256 times): long enough that a kill
# lands while it trains, short enough to finish should the rule let a third attempt through.
SWEEP = """
name = "deaths"
grid = { size = ["20K"], fresh_tokens = [2048], strategy = ["repetition"], derived_ratio = [255] }
data = { vocab_size = 512, val_tokens = 2048 }
model = { seq_len = 32 }
train = { batch_size = 8, eval_every = 512, log_every = 64, checkpoint_every = 256 }
"""


def attempt_pids(run_dir: Path) -> list[int]:
    """The pid of each process that claimed the run, from its attempts.json (written under
    the run's lock, after the claim)."""
    try:
        return [a["pid"] for a in json.loads((run_dir / "attempts.json").read_text())]
    except (OSError, ValueError):
        return []


def claimed(run_dir: Path, n: int) -> int | None:
    """The pid of the n-th process to claim the run, once it has (None before)."""
    pids = attempt_pids(run_dir)
    return pids[n - 1] if len(pids) >= n else None


def wait_for(predicate, timeout: float = 180, every: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(every)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_a_run_whose_worker_dies_twice_is_recorded_as_failed(runs_root, tmp_path):
    path = runs_root.parent / "deaths.toml"
    path.write_text(SWEEP)
    (run,) = load_sweep(path).runs()
    run_dir = runs_root / "deaths" / run.run_id
    args = ["sweep", path, "--out", runs_root, "--jobs", 2, "--threads", 1, "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdlaw", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "1000"},
        start_new_session=True,
    )
    killed: list[int] = []
    try:
        for death in (1, 2):
            worker = wait_for(lambda n=death: claimed(run_dir, n))
            assert worker != proc.pid and worker not in killed  # a worker, a fresh one
            os.kill(worker, signal.SIGKILL)
            killed.append(worker)
        out, err = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    # The first death: queued again (and claimed by a new worker); the second: failed.
    assert f"retry: {run.run_id} stopped" in err
    assert proc.returncode == 1, err
    assert json.loads(out)["counts"] == {"failed": 1}
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "failed"
    assert result["error"].startswith("the worker died twice"), result["error"]
    assert attempt_pids(run_dir) == killed  # no third attempt
    summary = pd.read_parquet(runs_root / "deaths" / "summary.parquet")
    assert list(summary.status) == ["failed"]


def test_a_dead_workers_lock_that_still_looks_held_is_waited_out(tmp_path):
    """The pool hears of a death when the worker's pipe closes, a moment before the kernel
    makes it a zombie: the failure is written once its lock goes stale, not dropped."""
    path = tmp_path / "deaths.toml"
    path.write_text(SWEEP)
    (run,) = load_sweep(path).runs()
    run_dir = tmp_path / run.run_id
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    run_dir.mkdir()
    lock = {"pid": holder.pid, "host": socket.gethostname(), "token": "dead", "started": 0}
    (run_dir / LOCK_NAME).write_text(json.dumps(lock))
    try:
        assert record_failure(run_dir, run, ExecConfig(), "the worker died twice: killed")
    finally:
        holder.wait()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "failed"
    assert not (run_dir / LOCK_NAME).exists()


def test_a_live_processs_lock_is_not_taken_to_record_a_failure(tmp_path, monkeypatch):
    """A lock that stays held belongs to another sweep that took the run: no result."""
    monkeypatch.setattr(scheduler, "DEAD_LOCK_WAIT_S", 0.2)
    path = tmp_path / "deaths.toml"
    path.write_text(SWEEP)
    (run,) = load_sweep(path).runs()
    run_dir = tmp_path / run.run_id
    run_dir.mkdir()
    lock = {"pid": os.getpid(), "host": socket.gethostname(), "token": "live", "started": 0}
    (run_dir / LOCK_NAME).write_text(json.dumps(lock))
    assert not record_failure(run_dir, run, ExecConfig(), "the worker died twice: killed")
    assert not (run_dir / "result.json").exists()
    assert json.loads((run_dir / LOCK_NAME).read_text())["token"] == "live"
