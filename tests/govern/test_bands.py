"""The governor's bands stop at the floor the calibrated laws give the run's N."""

import pytest

from cdlaw.govern.bands import loss_floor, point_band
from cdlaw.law import PRESETS

LAW = PRESETS["qin2026"]
N = 100e6


def test_the_floor_is_the_calibrated_model_floor_less_the_offsets_interval():
    floor = float(LAW.loss_model_floor(N))
    assert loss_floor([LAW], [(0.05, 0.01)], N) == pytest.approx(floor + 0.05 - 0.0196)
    # the least over the bootstrap laws, each with its own offset
    got = loss_floor([LAW, LAW, LAW], [(0.0, 0.0), (-0.1, 0.0), (0.2, 0.0)], N)
    assert got == pytest.approx(floor - 0.1)
    assert loss_floor([LAW], [(-10.0, 0.0)], N) == 0.0  # never below 0


def test_a_widened_band_stops_at_the_floor_and_keeps_its_point():
    assert point_band([2.0], 0.5, 1.8) == (1.8, 2.5)
    assert point_band([2.0], 0.1, 1.0) == pytest.approx((1.9, 2.1))
    lo, hi = point_band([2.0, 1.9, 2.2, 2.1, 2.05], 0.0, 0.0)
    assert lo <= 2.0 <= hi and lo >= 1.9 and hi <= 2.2
