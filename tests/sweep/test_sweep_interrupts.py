"""A sweep stopped or failing outside training (issue #17): a run-level exception reported as
itself, SIGTERM saying what was saved and how to resume, a progress counter that counts
one run per line when another process shares the folder, and a read-only --out."""

import concurrent.futures
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cdlaw.sweep import executors
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep


def test_a_run_level_exception_with_one_job_is_reported_as_itself(
    runs_root, write_sweep, one_thread, monkeypatch
):
    """With one job every such exception once came out as `AttributeError: module
    'concurrent.futures' has no attribute 'process'` (the submodule was never imported)."""
    monkeypatch.delattr(concurrent.futures, "process", raising=False)  # a fresh process

    def boom(cfg, *args, **kwargs):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(executors, "execute_run", boom)
    path = write_sweep(runs_root, "boom", sizes='"20K"')
    events = []
    outcome = run_sweep(
        path,
        runs_root,
        SweepOptions(only="strategy=none", jobs=1, exec_cfg=one_thread),
        on_event=events.append,
    )
    assert outcome.exit_code == 1
    (failure,) = outcome.failures
    assert "RuntimeError: the disk is full" in failure["error"], failure
    assert "AttributeError" not in failure["error"]
    retried = [e for e in events if type(e).__name__ == "RunRetried"]
    assert retried and "RuntimeError: the disk is full" in retried[0].reason


def test_the_progress_counter_counts_up_by_one_when_another_process_shares_the_folder(capsys):
    """Runs another process finished were counted without a line, so [k/total] jumped."""
    from cdlaw.cli.sweep_show import SweepDisplay
    from cdlaw.sweep import events as ev

    facts = [
        {"run_id": rid, "size": "20K", "strategy": "none", "fresh_tokens": 2048,
         "derived_ratio": 0.0, "tokens_trained": 2048, "flops_per_token": 1.0}
        for rid in "abcde"
    ]  # fmt: skip
    display = SweepDisplay(live=False)
    for event in (
        ev.SweepPlanned("s", facts, "runs/s"),
        ev.RunSkipped("a", "done"),  # finished before this sweep started
        ev.RunStarted("b", 1),
        ev.RunLocked("c", 2, "host"),  # another process trains c …
        ev.RunEnded("b", "done", 1.5),
        ev.RunSkipped("c", "done"),  # … and finishes it
        ev.RunSkipped("d", "diverged"),  # another process finished d without us waiting
        ev.RunStarted("e", 1),
        ev.RunEnded("e", "done", 1.4),
    ):
        display(event)
    display.stop()
    out = capsys.readouterr().err
    assert re.findall(r"\[(\d+)/5\]", out) == ["1", "2", "3", "4", "5"], out
    assert "done by another process c" in out and "diverged by another process d" in out


def tiny_text(write_sweep, root: Path, name: str) -> Path:
    return write_sweep(root, name, sizes='"20K"')


def test_a_read_only_out_is_one_sentence_exit_2_and_writes_nothing(
    tmp_path, write_sweep, monkeypatch, capsys
):
    """Once a raw PermissionError (exit 1) from making the corpus cache."""
    import errno

    from cdlaw.cli import main

    path = tiny_text(write_sweep, tmp_path / "runs", "ro")
    out = tmp_path / "runs"
    out.mkdir()
    out.chmod(0o555)
    try:
        if os.access(out, os.W_OK):  # root writes anywhere: deny it as the OS denies others

            def deny(real):
                def call(target, *args, **kwargs):
                    p = Path(os.fsdecode(target))
                    if p == out or out in p.parents:
                        raise PermissionError(errno.EACCES, "Permission denied", str(p))
                    return real(target, *args, **kwargs)

                return call

            monkeypatch.setattr(os, "open", deny(os.open))
            monkeypatch.setattr(os, "mkdir", deny(os.mkdir))
        argv = ["cdlaw", "sweep", str(path), "--out", str(out), "--device", "cpu"]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as e:
            main()
    finally:
        out.chmod(0o755)
    stderr = capsys.readouterr().err
    assert e.value.code == 2, stderr
    assert (
        stderr.startswith(f"error: --out {str(out)!r} cannot be written") and "Permission" in stderr
    )
    assert stderr.strip().count("\n") == 0 and "PermissionError" not in stderr
    assert list(out.iterdir()) == []


@pytest.mark.slow  # a subprocess sweep that trains until it is stopped
def test_sigterm_says_what_was_saved_and_how_to_resume(runs_root, write_sweep):
    """Once: exit 143 without a word."""
    path = write_sweep(runs_root, "sigterm")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdlaw", "sweep", str(path), "--out", str(runs_root),
         "--jobs", "1", "--threads", "1", "--device", "cpu"],
        cwd=runs_root,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "1000"},
    )  # fmt: skip
    try:
        for line in proc.stderr:
            if line.startswith("start "):  # the first run is training
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM, rest
    finally:
        proc.kill()
    last = rest.strip().splitlines()[-1]
    assert last.startswith("stopped by SIGTERM: ") and "Traceback" not in rest
    assert f"in {runs_root / 'sigterm'}" in last and "resume from their last checkpoint" in last
    assert f"`cdlaw sweep {path} --out {runs_root}` resumes the sweep" in last


def test_a_run_left_to_the_process_that_took_it_is_not_said_to_be_waited_for(capsys):
    """A run whose worker died twice while another sweep took its lock is that sweep's."""
    from cdlaw.cli.sweep_show import SweepDisplay
    from cdlaw.sweep import events as ev

    display = SweepDisplay(live=False)
    display(ev.RunLocked("c", 2, "host"))
    display(ev.RunLocked("d", 3, "host", waits=False))
    display.stop()
    out = capsys.readouterr().err
    assert "waiting: c is held by pid 2 on host" in out
    assert "left: d is held by pid 3 on host, whose run it is now" in out
    assert "waiting: d" not in out
