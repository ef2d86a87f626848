"""Nothing outlives cdlaw (docs/cli.md, "Stopping"): kill -9 the process that started
workers — `cdlaw prepare` with local workers, `cdlaw sweep --pack auto`, a Ray cluster
cdlaw started itself — and within a few seconds no process it started remains (the
multiprocessing resource tracker included). Read from /proc: Linux only."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proctree import descendants, survivors
from runhelpers import SHARED_SWEEP

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
GONE_WITHIN = 5.0  # seconds
KILLED: list[str] = []  # the command lines of the descendants kill_when saw last


def cdlaw_popen(*args, cwd) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cdlaw", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "1000"},
    )


def kill_when(proc: subprocess.Popen, ready, timeout: float = 240.0) -> dict[int, int]:
    """kill -9 proc once ready(its descendants' command lines) holds; the descendants seen
    last before the kill (their command lines in KILLED)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = descendants(proc.pid)
        lines = [_cmdline(p) for p in kids]
        if ready(lines):
            kids = descendants(proc.pid)  # and any that started meanwhile
            KILLED[:] = [_cmdline(p) for p in kids]
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            return kids
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            pytest.fail(f"cdlaw ended (exit {proc.returncode}) before its workers started: {err}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the workers never started")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def working(n: int, folder: Path, written: str):
    """Ready once n spawned workers run and one of them has written `written` (a glob
    under folder): past their start-up, which a worker whose parent is gone never
    finishes anyway, so a kill then shows whether they die with it."""
    return lambda lines: (
        sum("spawn_main" in line for line in lines) >= n and any(folder.glob(written))
    )


def prepare_sweep(folder: Path) -> Path:
    """A sweep file whose `cdlaw prepare` tokenises big_corpus for a while."""
    path = folder / "s.toml"
    path.write_text(
        '[grid]\nsize = ["20K"]\nfresh_tokens = [1000]\nstrategy = ["repetition"]\n'
        f'derived_ratio = [0]\n[data]\ncorpus = "{big_corpus(folder)}"\nvocab_size = 300\n'
        "val_tokens = 2000\n"
    )
    return path


def big_corpus(folder: Path, n_docs: int = 30_000) -> Path:
    """A jsonl corpus of n_docs documents (many blocks: the workers are busy a while)."""
    from prepare_corpora import world_texts

    texts = world_texts(2000)
    path = folder / "corpus.jsonl"
    with open(path, "w") as f:
        for i in range(n_docs):
            f.write(json.dumps({"id": f"d{i}", "text": f"{i}. " + texts[i % len(texts)]}) + "\n")
    return path


def test_kill_9_of_cdlaw_prepare_takes_its_workers_with_it(tmp_path):
    sweep = prepare_sweep(tmp_path)
    proc = cdlaw_popen("prepare", sweep, "--out", tmp_path / "runs", "--workers", "2", cwd=tmp_path)
    kids = kill_when(proc, working(2, tmp_path / "runs", ".cache/data/*/train/b*.npy"))
    assert sum("spawn_main" in c for c in KILLED) == 2
    assert any("resource_tracker" in c for c in KILLED), KILLED
    assert survivors(kids, GONE_WITHIN) == []


@pytest.mark.slow  # trains until killed
def test_kill_9_of_a_packed_sweep_takes_its_workers_with_it(tmp_path):
    path = tmp_path / "share.toml"
    path.write_text(SHARED_SWEEP.format(name="share", share="false"))
    proc = cdlaw_popen(
        "sweep", path, "--out", tmp_path / "runs", "--pack", "auto", "--jobs", "2",
        "--threads", "1", "--device", "cpu", cwd=tmp_path,
    )  # fmt: skip
    kids = kill_when(proc, working(1, tmp_path / "runs", "share/*/.lock"))  # one trains
    assert survivors(kids, GONE_WITHIN) == []


def test_the_reaper_stops_what_a_dead_parent_started_and_their_children(tmp_path):
    """What cdlaw does for a Ray cluster it started (raylet, its agents in their own
    sessions), shown on stand-ins: a child that starts a grandchild in a new session."""
    script = (
        "import subprocess, sys, time\n"
        "from cdlaw.system.lifetime import reap_with_me\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import subprocess, sys, time; "
        'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], '
        "start_new_session=True); time.sleep(300)'], start_new_session=True)\n"
        "reap_with_me([child.pid])\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    assert proc.stdout and proc.stdout.readline().strip() == b"ready"
    kids = kill_when(proc, lambda lines: sum("time.sleep(300)" in line for line in lines) >= 2,
                     timeout=30)  # fmt: skip
    assert len(kids) >= 3  # the child, its grandchild and the reaper
    assert survivors(kids, GONE_WITHIN) == []


def test_kill_9_of_cdlaw_prepare_on_its_own_ray_stops_ray(tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'cdlaw[ray]')")
    sweep = prepare_sweep(tmp_path)
    proc = cdlaw_popen(
        "prepare", sweep, "--out", tmp_path / "runs", "--executor", "ray", "--workers", "2",
        cwd=tmp_path,
    )  # fmt: skip
    kids = kill_when(proc, lambda lines: any("raylet" in line for line in lines))
    assert survivors(kids, 10.0) == []


@pytest.mark.parametrize(
    "argv, ray",
    [
        (["ray::DashboardAgent"], True),
        (["/v/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet", "--x"], True),
        (["/v/bin/python", "-u", "/v/lib/python3.11/site-packages/ray/dashboard/agent.py"], True),
        (["/v/bin/python", "-m", "pytest", "-k", "ray", "tests/sweep/test_ray.py"], False),
        (["/usr/bin/tee", "ray.log"], False),
        ([], False),
    ],
)
def test_the_reaper_knows_a_ray_process_by_its_command_line(argv, ray):
    """What the reaper takes on in Ray mode (and, once cdlaw is gone, among the orphans of
    its process group): never the test runner that shares the group, nor a pipe's tee."""
    from cdlaw.system.lifetime import is_ray

    assert is_ray(argv) is ray
