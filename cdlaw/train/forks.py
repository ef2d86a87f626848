"""Fork checkpoints: a trunk's state at a step, from which branches start (docs/sweep.md).

    <run>/forks/step-<s>/metrics.parquet   the trunk's curve up to step s (written first)
    <run>/forks/step-<s>/checkpoint/        a checkpoint (cdlaw.train.checkpoint) at step s

A fork exists once its checkpoint/ does: the checkpoint is swapped into place last, so a
trunk killed while saving one leaves no half fork. A branch starts from a fork by copying
it into its own run folder as if it had trained those steps itself — its run_id in the
checkpoint's state, the curve's epoch column counted over its own fresh tokens — and then
resumes like any interrupted run (cdlaw.train.loop), checksums and all. Which run forks
from which, and at which step, is the sweep's plan (cdlaw.sweep.forest).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cdlaw.system.atomic import write_json_atomic
from cdlaw.train.damage import STATE_FILE  # a checkpoint's last file
from cdlaw.train.metrics import read_metrics, write_metrics

# cdlaw.train.checkpoint (torch) is imported where a checkpoint is written: the sweep's
# scheduler looks for forks without torch (a simulated sweep has none to import).

FORKS_DIR = "forks"


def fork_path(run_dir: Path, step: int) -> Path:
    """Where run `run_dir` keeps its fork checkpoint at `step`."""
    return Path(run_dir) / FORKS_DIR / f"step-{step:09d}"


def fork_exists(path: Path) -> bool:
    return (Path(path) / "checkpoint" / STATE_FILE).is_file()


def save_fork(path: Path, net, optimizer, state: dict, rows: list[dict]) -> None:
    """Save a fork: the curve so far, then the checkpoint (its presence marks the fork)."""
    from cdlaw.train.checkpoint import save_checkpoint

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_metrics(path / "metrics.parquet", rows)
    save_checkpoint(path / "checkpoint", net, optimizer, state)


def start_from_fork(fork: Path, run_dir: Path, run_id: str, fresh_tokens: int) -> bool:
    """Copy fork `fork` into run_dir as run `run_id`'s own checkpoint and curve.

    False (nothing written) when the fork is not there. The checkpoint's tensors are copied
    as they are (their checksums still hold); only state.json's run_id changes.
    """
    fork, run_dir = Path(fork), Path(run_dir)
    if not fork_exists(fork) or not (fork / "metrics.parquet").is_file():
        return False
    rows = read_metrics(fork / "metrics.parquet")
    for row in rows:  # the trunk counted epochs over its own fresh tokens, under its own id
        row["epoch"] = row["tokens_seen"] / fresh_tokens
        row["run_id"] = run_id
    tmp = run_dir / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(fork / "checkpoint", tmp)
    state = json.loads((tmp / STATE_FILE).read_text())
    trunk = fork.parent.parent.name  # <trunk>/forks/step-<s>
    forked_from = {"run": trunk, "step": state["step"]}
    write_json_atomic(tmp / STATE_FILE, {**state, "run_id": run_id, "forked_from": forked_from})
    write_metrics(run_dir / "metrics.parquet", rows)
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)
    tmp.rename(run_dir / "checkpoint")
    return True


def remove_fork(path: Path) -> None:
    """Delete a fork no pending run needs (and the forks/ folder once it is empty)."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    try:
        path.parent.rmdir()
    except OSError:  # other forks are still there, or it is gone already
        pass
