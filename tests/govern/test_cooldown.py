"""The stable-to-cooled relation, read off a WSD sweep's trunks and branches."""

import pytest
from plantedcurves import write_planted_sweep

from cdlaw.govern.cooldown import DEMO, Cooldown, fit_cooldown
from cdlaw.govern.pairs import cooldown_pairs
from cdlaw.system.errors import BadInput


def test_each_branch_gets_its_trunks_loss_at_its_decay_start(tmp_path):
    runs = write_planted_sweep(tmp_path / "runs")
    pairs = cooldown_pairs(runs)
    # the shortest run decays at step 20, the trunk's first evaluations 10 and 20 bracket it
    assert sorted(pairs["run_id"]) == ["run025", "run050", "run075", "run100"]
    assert set(pairs["trunk"]) == {"run100"}
    assert (pairs["cooled"] / pairs["stable"]).to_numpy() == pytest.approx(0.8)


def test_the_ratio_is_fitted_over_the_pairs_and_per_lr(tmp_path):
    cooldown = fit_cooldown(write_planted_sweep(tmp_path / "runs", ratio=0.75))
    assert cooldown.ratio == pytest.approx(0.75) and cooldown.pairs == 4
    assert cooldown.for_lr(0.02).ratio == pytest.approx(0.75)
    assert cooldown.for_lr(0.02).lr == 0.02 and cooldown.for_lr(0.5).lr is None


def test_too_few_pairs_are_refused(tmp_path):
    with pytest.raises(BadInput, match="needs 3"):
        fit_cooldown(write_planted_sweep(tmp_path / "runs", steps=(50, 100)))


def test_the_demo_ratio_picks_its_lr():
    assert DEMO.for_lr(0.03).ratio == pytest.approx(0.8482)
    assert DEMO.for_lr(0.05).ratio == DEMO.ratio


def test_a_trunks_warmup_is_no_stable_phase_however_it_is_given(tmp_path):
    # warmup as a share of the steps: the trunk's first evaluation (step 10) is in it, so
    # the 15-step run, decaying at step 12, has no stable-phase loss to read
    pairs = cooldown_pairs(write_planted_sweep(tmp_path / "runs", steps=(15, 50, 75, 100),
                                               warmup_frac=0.15))  # fmt: skip
    assert "run015" not in set(pairs["run_id"])
    assert (pairs["cooled"] / pairs["stable"]).to_numpy() == pytest.approx(0.8)


def test_a_run_unlike_the_ratios_runs_is_warned_of():
    """The demo's ρ is its tiny runs' at lr 0.01–0.03: a 100M run at 3e-4 is not one."""
    assert DEMO.for_lr(0.02).unlike(60e3, 0.02) == []
    assert DEMO.unlike(350e3, None) == []  # within 2× of its largest
    (size, lr) = DEMO.for_lr(3e-4).unlike(100e6, 3e-4)
    assert "measured on runs of 26.3K–200K parameters" in size and "has 100M" in size
    assert "peak lr 0.0003 is none of those the ratio was measured at (0.01, 0.02, 0.03)" in lr
    assert DEMO.unlike(10e3, None)  # more than 2× below its smallest
    # a ratio that does not record its runs' sizes (or lrs) says nothing of them
    assert Cooldown(0.8, 0.0, "planted").unlike(100e6, 3e-4) == []


def test_a_fitted_ratio_records_its_runs_sizes(tmp_path):
    cooldown = fit_cooldown(write_planted_sweep(tmp_path / "runs"))
    assert cooldown.n_params is not None and cooldown.to_dict()["n_params"] == list(
        cooldown.n_params
    )
    n = cooldown.n_params[0]
    assert cooldown.unlike(n, None) == [] and cooldown.unlike(100 * n, None)
