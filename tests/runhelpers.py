"""Helpers the sweep tests share: the CLI in a subprocess, and what a runs folder holds."""

import json
import os
import subprocess
import sys
from pathlib import Path


def cdlaw(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """`python -m cdlaw ARGS` in a subprocess, wide enough that rich does not wrap stderr."""
    return subprocess.run(
        [sys.executable, "-m", "cdlaw", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "1000"},
    )


def result_losses(sweep_dir: Path) -> dict[str, tuple]:
    """run_id -> (status, loss) of every result.json in a sweep folder."""
    out = {}
    for p in sorted(Path(sweep_dir).glob("*/result.json")):
        row = json.loads(p.read_text())
        out[p.parent.name] = (row["status"], row["loss"])
    return out
