"""benchmarks/bound_next.py in a short form, so the benchmark cannot rot: it prints one
line per truth and budget, and with the whole grid's FLOPs to spend its certified floor is
no higher than the grid's own sd (the grid is one of the designs it bounds)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "benchmarks" / "bound_next.py"


def test_bound_bench_prints_a_bound_per_setting():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--iterations", "40", "--share", "1.0"],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout  # fmt: skip
    rows = [line.split() for line in out.splitlines() if re.match(r"qin2026", line)]
    assert len(rows) == 4  # two truths × two budgets
    for row in rows:
        grid_sd, best_sd, ratio = float(row[-3][:-1]), float(row[-2][:-1]), float(row[-1])
        # with the whole grid's FLOPs to spend, the best design is at least as good as the grid
        assert 0 < best_sd <= grid_sd * 1.001
        assert abs(ratio - best_sd / grid_sd) < 0.01
