"""A task's noise (cdlaw.fit.task_noise): planted step-to-step noise recovered under a rising
trend, item counts read from the values, and the signal-to-noise screen."""

import numpy as np
import pytest

from cdlaw.fit.task_noise import MIN_SNR, items_of, step_noise, task_noise


def _runs(sd: float, items: int = 0, rise: float = 0.3, seed: int = 0):
    """Eight runs of 60 evaluations each: an accuracy rising along each run (and from run to
    run) plus independent noise of `sd` at every evaluation; counts of `items` if given."""
    rng = np.random.default_rng(seed)
    y, run, tokens, final = [], [], [], []
    for r in range(8):
        t = np.linspace(1e8, 4e9, 60)
        mean = 0.2 + rise * r / 7 + 0.3 * t / 4e9
        v = mean + rng.normal(0, sd, len(t))
        if items:
            v = np.round(v * items) / items
        y += list(v)
        run += [r] * len(t)
        tokens += list(t)
        final += [False] * (len(t) - 1) + [True]
    return np.array(y), np.array(run), np.array(final), np.array(tokens)


@pytest.mark.parametrize("sd", [0.002, 0.01])
def test_step_noise_recovers_the_planted_noise_under_a_trend(sd):
    y, run, final, tokens = _runs(sd)
    got, n = step_noise(y, run, final, tokens)
    assert n == 8 * 8  # each run's last 10 evaluations: 9 differences, less their mean
    assert got == pytest.approx(sd, rel=0.2)
    # a plain sd over the same evaluations would count the trend as noise
    last = np.concatenate([y[run == r][-10:] - y[run == r][-10:].mean() for r in range(8)])
    assert last.std() > 1.2 * sd


def test_items_are_read_from_the_values():
    y, *_ = _runs(0.01, items=1172)
    assert items_of(y) == 1172
    assert items_of(y.astype(np.float32).astype(float)) == 1172  # stored as float32
    assert items_of(np.random.default_rng(0).uniform(0.2, 0.8, 50)) is None  # not counts
    assert items_of(np.array([0.25, 0.5, 0.75])) is None  # too few values to tell


def test_a_rise_under_ten_noise_steps_is_marked_unsupported():
    y, run, final, tokens = _runs(0.01, rise=0.3)
    ok = task_noise(y, run, final, tokens)
    assert ok.source == "checkpoints" and ok.supported and ok.why_unsupported() is None
    flat = task_noise(*_runs(0.01, rise=0.0, seed=1))
    assert flat.snr < MIN_SNR and not flat.supported
    assert "rise by" in flat.why_unsupported() and "rests on noise" in flat.why_unsupported()


def test_without_checkpoints_the_noise_is_the_seed_scatter_or_unknown():
    y = np.array([0.3, 0.4, 0.5])
    run, final, tokens = np.arange(3), np.ones(3, bool), np.full(3, 1e9)
    assert task_noise(y, run, final, tokens, (0.02, 4)).source == "seeds"
    unknown = task_noise(y, run, final, tokens)
    assert unknown.sd is None and unknown.supported and unknown.snr is None


def test_seeds_and_checkpoints_give_the_larger_of_their_noises():
    y, run, final, tokens = _runs(0.002)
    steps = task_noise(y, run, final, tokens)
    assert steps.source == "checkpoints"
    assert task_noise(y, run, final, tokens, (0.03, 4)).sd == 0.03  # a rerun scatters more
    assert task_noise(y, run, final, tokens, (0.0001, 4)).sd == steps.sd
