"""benchmarks/bench_govern.py's calibration rules: each takes the held-out offset from the
trunk's observed stable points the way docs/results.md says it does."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).parents[2] / "benchmarks" / "bench_govern.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_govern", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T = np.array([100.0, 200.0, 400.0, 800.0])
OFFSETS = np.array([0.4, 0.3, 0.2, 0.1])


@pytest.mark.parametrize(
    ("rule", "fork", "expected"),
    [
        ("last75", 50.0, 0.2),  # points at or past 200: 0.3, 0.2, 0.1
        ("last75", 1600.0, 0.2),
        ("all", 50.0, 0.25),
        ("last50", 50.0, 0.15),  # 400 and 800
        ("nearest", 50.0, 0.4),
        ("nearest", 300.0, 0.2),  # log 300 is nearer log 400 than log 200
        ("nearest", 1600.0, 0.1),
        ("interp", 50.0, 0.4),  # held at the ends
        ("interp", math.sqrt(200.0 * 400.0), 0.25),  # halfway in log tokens
        ("interp", 1600.0, 0.1),
        ("early-first", 50.0, 0.4),  # before the first point: that point's offset
        ("early-first", 300.0, 0.2),  # otherwise last75
    ],
)
def test_each_rule_takes_the_offset_it_documents(bench, rule, fork, expected):
    assert bench.calibrated_offset(rule, T, OFFSETS, fork) == pytest.approx(expected)


def test_every_listed_rule_is_known_and_the_adopted_one_is_listed(bench):
    for rule in bench.CALIBRATION_RULES:
        assert math.isfinite(bench.calibrated_offset(rule, T, OFFSETS, 300.0))
    assert bench.CALIBRATION in bench.CALIBRATION_RULES
    with pytest.raises(ValueError, match="unknown calibration rule"):
        bench.calibrated_offset("first", T, OFFSETS, 300.0)
