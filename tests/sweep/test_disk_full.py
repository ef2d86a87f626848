"""A full disk (docs/files.md, "Damaged files"; issue #17): the sweep stops with one sentence
and exit code 1 (a failure while running, not bad input: the same command succeeds once
there is space), keeps every finished run, and resumes when space is back, ending with
the losses of an undamaged sweep."""

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from runhelpers import cdlaw as run_cdlaw
from runhelpers import result_losses as losses

import cdlaw.system.atomic
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.spec import load_sweep

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # trains the tiny sweep three times (~50 s)


@pytest.fixture(scope="module")
def reference(runs_root, write_sweep, one_thread):
    """The sweep `full` trained undamaged: run_id -> (status, loss), and its folder."""
    path = write_sweep(runs_root, "full")
    outcome = run_sweep(path, runs_root, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert outcome.exit_code == 0
    return path, losses(runs_root / "full")


def stamps(sweep_dir: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_ino for p in sweep_dir.glob("*/result.json")}


def shared_cache(out: Path, runs_root: Path) -> None:
    """out/.cache: the session's token cache (prepared), so that only runs fill the disk."""
    out.mkdir(exist_ok=True)
    (out / ".cache").symlink_to(runs_root / ".cache", target_is_directory=True)


def test_a_full_disk_stops_the_sweep_in_one_sentence_and_it_resumes(
    reference, tmp_path, runs_root, one_thread, monkeypatch
):
    """ENOSPC injected into the atomic writer after 40 writes (a few runs in)."""
    path, ref = reference
    out = tmp_path / "runs"
    shared_cache(out, runs_root)
    real, count = cdlaw.system.atomic.write_atomic, [0]

    def write_atomic(target, write):
        count[0] += 1
        if count[0] > 40:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
        return real(target, write)

    monkeypatch.setattr(cdlaw.system.atomic, "write_atomic", write_atomic)
    with pytest.raises(Exception) as stopped:
        run_sweep(path, out, SweepOptions(jobs=1, exec_cfg=one_thread))
    message = str(stopped.value)
    assert type(stopped.value).__name__ == "DiskFull", message
    assert "\n" not in message and "No space left on device" in message
    assert "finished runs are kept" in message
    sweep_dir = out / "full"
    finished = losses(sweep_dir)
    assert 1 <= len(finished) < len(ref)
    assert all(ref[rid] == row for rid, row in finished.items())  # none recorded as failed
    assert not list(sweep_dir.glob("*/.lock")) and not list(sweep_dir.glob("*/error.txt"))

    monkeypatch.undo()  # space is back
    before = stamps(sweep_dir)
    outcome = run_sweep(path, out, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert outcome.exit_code == 0 and set(outcome.trained) == set(ref) - set(finished)
    assert losses(sweep_dir) == ref
    assert stamps(sweep_dir).items() >= before.items()  # the finished runs were kept


def cdlaw_sweep(path: Path, out: Path) -> subprocess.CompletedProcess:
    return run_cdlaw("sweep", path, "--out", out, "--jobs", 1, "--threads", 1)


def test_a_real_small_disk_fills_then_the_sweep_resumes(reference, tmp_path, runs_root):
    """A 16 MiB tmpfs filled but for room for two small runs: `cdlaw sweep` exits 1 with one
    line; with the ballast deleted, the same command finishes the sweep."""
    path, ref = reference
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mount.returncode:
        pytest.skip(
            f"cannot mount a tmpfs here ({mount.stderr.strip() or mount.returncode}); "
            "the injected ENOSPC test covers a full disk"
        )
    try:
        shared_cache(disk, runs_root)
        # Room for two runs of the smallest model (trained first): while one trains, its
        # checkpoint (weights and AdamW's two moments) and the one replacing it take 6×
        # its weights, model/ 1× more; a finished run keeps model/ and small files.
        smallest = runs_root / "full" / load_sweep(path).runs()[0].run_id
        room = du(smallest) + 8 * du(smallest / "model" / "model.safetensors")
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (shutil.disk_usage(disk).free - room))

        first = cdlaw_sweep(path, disk)
        said = [line for line in first.stderr.splitlines() if "No space left" in line]
        assert first.returncode == 1, first.stderr
        assert len(said) == 1 and said[0].startswith("failed: DiskFull:"), first.stderr
        assert "Traceback" not in first.stderr
        sweep_dir = disk / "full"
        finished = losses(sweep_dir)
        assert 1 <= len(finished) < len(ref), first.stderr
        assert all(ref[rid] == row for rid, row in finished.items())

        ballast.unlink()  # space is back
        before = stamps(sweep_dir)
        second = cdlaw_sweep(path, disk)
        assert second.returncode == 0, second.stderr
        assert losses(sweep_dir) == ref
        assert stamps(sweep_dir).items() >= before.items()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def du(path: Path) -> int:
    """Bytes on disk of a file or folder, in whole 4 KiB pages as tmpfs counts them."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in files)
