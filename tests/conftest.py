"""Shared fixtures: the tiny sweep that the sweep, fault and Ray tests train, and the one
runs folder they share (so every sweep test reuses one tokenised-corpus cache)."""

import os
from pathlib import Path

import pytest

# torch.compile's C++ builds in one process, not a pool as wide as the machine: tests run two
# at a time (xdist) and some time steps, so a compile must not take the other core too.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# 2 sizes × D = 2,048 × (r = 0 shared, r = 1 for each strategy): 6 runs of 8–16 steps,
# checkpointing every 2 steps. `extra_grid` adds [grid] keys; `sizes` replaces the sizes.
TINY_SWEEP = """
name = "{name}"
[grid]
size = [{sizes}]
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


def write_tiny_sweep(
    root: Path, name: str, extra_grid: str = "", sizes: str = '"20K", "60K"'
) -> Path:
    """Write the tiny sweep named `name` beside the runs folder `root`; return its path."""
    path = root.parent / f"{name}.toml"
    path.write_text(TINY_SWEEP.format(name=name, extra_grid=extra_grid, sizes=sizes))
    return path


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory) -> Path:
    """The session's one runs folder: every sweep test shares its corpus cache."""
    root = tmp_path_factory.getbasetemp() / "cdlaw-runs"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session")
def write_sweep():
    """write_sweep(root, name, extra_grid="", sizes='"20K", "60K"') -> path of a tiny sweep."""
    return write_tiny_sweep


@pytest.fixture(scope="session")
def one_thread():
    """Train on the CPU with one thread (tests run beside each other on 2 cores)."""
    from cdlaw.config import ExecConfig

    return ExecConfig(device="cpu", threads=1)


@pytest.fixture(scope="session")
def share_alone(runs_root, one_thread) -> Path:
    """runhelpers' shared-prefix grid (10 runs, sweep "share") trained with every run from
    step 0 and alone: the reference the shared-prefix and packed sweeps are compared with."""
    from runhelpers import write_shared_sweep

    from cdlaw.sweep.options import SweepOptions
    from cdlaw.sweep.runner import run_sweep

    out = runs_root / "share-alone"
    run_sweep(write_shared_sweep(out, "share", share=False), out, SweepOptions(exec_cfg=one_thread))
    return out / "share"


@pytest.fixture
def cdlaw(monkeypatch, capsys, tmp_path):
    """`cdlaw ARGS` in this process: (exit code, stdout, stderr); the command tests share it."""
    from runhelpers import cdlaw_here

    return lambda *args: cdlaw_here(monkeypatch, capsys, tmp_path, *args)
