"""The schedule-aware curve laws and the planned schedules they read: planted parameters
recovered, each shape's lr exact, a continuation's band honest about what the curve
does not say."""

import numpy as np
import pytest

from cdlaw.govern.continuation import GAIN_PRIOR, binned, fit_continuation, recency
from cdlaw.govern.lr_plan import file_plan, inferred_plan, named_plan
from cdlaw.govern.schedule_laws import (
    LAWS,
    MULTIPOWER,
    TISSUE,
    TISSUE_MOMENTUM,
    GainPrior,
    annealing,
    decay_steps,
    fit_law,
    multipower_sum,
    tissue_area,
    tissue_momentum,
    unit,
)
from cdlaw.schedule import lr_at
from cdlaw.system.errors import BadInput

PEAK = 1e-3


def planted(law, plan, steps, gain=0.15, L0=2.5, A=0.6, alpha=0.4, momentum=TISSUE_MOMENTUM):
    s1 = np.cumsum(plan.lr)[steps - 1]
    x = annealing(law, plan.lr, steps, momentum)
    return L0 + A * s1**-alpha - gain / (plan.peak * unit(law, momentum)) * x


@pytest.mark.parametrize("law", LAWS)
def test_each_law_recovers_its_planted_parameters_from_a_cosine(law):
    plan = named_plan("cosine", 20_000, 500, 0.1, PEAK)
    steps = np.arange(600, 20_001, 50)
    y = planted(law, plan, steps)
    fit = fit_law(law, np.cumsum(plan.lr)[steps - 1], annealing(law, plan.lr, steps), y, PEAK)
    assert (fit.L0, fit.A, fit.alpha, fit.gain) == pytest.approx((2.5, 0.6, 0.4, 0.15), rel=2e-3)


def test_a_curve_that_has_not_annealed_takes_its_gain_from_the_prior():
    plan = named_plan("wsd", 20_000, 500, 0.0, PEAK, 0.2)
    steps = np.arange(600, 10_001, 50)  # the stable phase only
    s1 = np.cumsum(plan.lr)[steps - 1]
    y = 2.5 + 0.6 * s1**-0.4
    for law in LAWS:
        x = annealing(law, plan.lr, steps)
        assert not x.any()
        fit = fit_law(law, s1, x, y, PEAK, GainPrior(0.12, 0.04))
        assert fit.gain == pytest.approx(0.12, rel=1e-6)


def test_the_annealing_features_saturate_at_the_drop_times_their_unit():
    lr = np.concatenate([np.full(1000, PEAK), np.full(200_000, PEAK / 4)])
    end = [len(lr)]
    assert multipower_sum(lr, end)[0] == pytest.approx(0.75 * PEAK, rel=0.02)
    assert tissue_area(lr)[-1] == pytest.approx(0.75 * PEAK * unit(TISSUE), rel=1e-3)
    assert multipower_sum(lr, [999])[0] == 0.0  # before the drop
    assert unit(MULTIPOWER) == 1.0


def test_named_shapes_match_cdlaws_own_schedules_and_their_definitions():
    from cdlaw.config import TrainConfig

    for shape in ("cosine", "wsd"):
        cfg = TrainConfig(lr=PEAK, schedule=shape, warmup_steps=100, final_lr_frac=0.1,
                          decay_frac=0.25)  # fmt: skip
        plan = named_plan(shape, 4000, 100, 0.1, PEAK, 0.25)
        assert plan.lr == pytest.approx([lr_at(s, 4000, cfg) for s in range(4000)], rel=1e-12)
    linear = named_plan("linear", 1001, 0, 0.0, PEAK)
    assert linear.lr[500] == pytest.approx(PEAK / 2) and linear.lr[-1] == 0.0
    sqrt = named_plan("1-sqrt", 1000, 0, 0.0, PEAK, 0.2)
    assert sqrt.lr[799] == PEAK and sqrt.lr[899] == pytest.approx(PEAK * (1 - np.sqrt(0.5)))
    assert (named_plan("constant", 1000, 10, None, PEAK).lr[10:] == PEAK).all()


def test_an_ending_follows_the_plan_then_cools_down_to_its_final_lr():
    wsd = named_plan("wsd", 10_000, 100, 0.1, PEAK, 0.2)
    assert np.array_equal(wsd.ending(5000, 10_000), wsd.lr)  # its own end: the plan
    now = wsd.ending(5000, 6250)  # a cooldown now: the last 20% of 6,250 steps
    assert (now[100:5000] == PEAK).all() and now[-1] == pytest.approx(0.1 * PEAK)
    assert len(wsd.ending(5000, 20_000)) == 20_000  # the stable phase goes on
    cosine = named_plan("cosine", 10_000, 100, 0.1, PEAK)
    early = cosine.ending(4000, 5000)  # the rest of the cosine, compressed into 1,000 steps
    assert np.array_equal(early[:4000], cosine.lr[:4000]) and early[-1] == pytest.approx(0.1 * PEAK)
    assert early[4499] == pytest.approx(cosine.lr[6999], rel=1e-3)  # halfway through the rest
    assert np.array_equal(cosine.ending(4000, 10_000), cosine.lr)
    late = cosine.ending(4000, 16_000)  # stretched: the same decay, slower
    assert late[-1] == pytest.approx(0.1 * PEAK) and late[9999] == pytest.approx(
        cosine.lr[6999], rel=1e-3
    )


def test_a_cosine_is_recognised_from_its_first_half_with_its_length_and_final_lr():
    truth = named_plan("cosine", 163_000, 2000, 0.1, 3e-4)
    steps = np.arange(10, 81_500, 10)
    plan = inferred_plan(steps, truth.lr[steps - 1], None, None, None, "log")
    assert plan.shape == "cosine"
    assert plan.steps == pytest.approx(163_000, rel=2e-3)
    assert plan.final / plan.peak == pytest.approx(0.1, abs=2e-3)


def test_a_log_whose_lr_has_not_left_its_peak_is_refused_naming_the_options():
    steps = np.arange(10, 5000, 10)
    lr = np.full(len(steps), 1e-3)
    with pytest.raises(BadInput, match=r"--schedule .* --planned-tokens, or --schedule-file"):
        inferred_plan(steps, lr, None, None, None, "log.csv")
    plan = inferred_plan(steps, lr, 10_000, None, 0.2, "log.csv")  # a WSD run, said so
    assert plan.shape == "wsd" and plan.steps == 10_000


def test_a_schedule_file_is_interpolated_between_its_rows(tmp_path):
    path = tmp_path / "schedule.csv"
    path.write_text("step,lr\n0,0\n100,1e-3\n1100,0\n")
    plan = file_plan(path, None, None)
    assert plan.steps == 1100 and plan.peak == pytest.approx(1e-3)
    assert plan.lr[49] == pytest.approx(5e-4) and plan.lr[599] == pytest.approx(5e-4)


def test_binning_averages_points_within_equal_bins():
    s, y = binned(np.arange(1, 1001, dtype=float), np.arange(1, 1001, dtype=float), 10)
    assert len(s) == 10 and s[0] == pytest.approx(50.5) and y[-1] == pytest.approx(950.5)


def test_tissues_memory_is_the_papers_or_a_tenth_of_a_long_decay():
    """A drop is felt over 1/(1 − λ) steps: the paper's 1,000 for a sudden drop or a short
    decay, a tenth of the decay for a long cosine."""
    cosine = named_plan("cosine", 72_000, 2_000, 0.1, PEAK)
    # a cosine's first and last 6.4% lie within 1% of its peak and floor: 1 − 2·arccos(0.98)/π
    share = 1 - 2 * np.arccos(0.98) / np.pi
    assert decay_steps(cosine.lr) == pytest.approx(share * 70_000, rel=1e-3)
    assert 1 / (1 - tissue_momentum(cosine.lr)) == pytest.approx(0.1 * decay_steps(cosine.lr))
    wsd = named_plan("wsd", 24_000, 2_000, 0.0, PEAK, 1 / 6)
    assert decay_steps(wsd.lr) == pytest.approx(4_000, rel=0.05)
    step_drop = np.r_[np.full(3_000, PEAK), np.full(3_000, PEAK / 10)]
    assert decay_steps(step_drop) == 0
    assert tissue_momentum(wsd.lr) == tissue_momentum(step_drop) == TISSUE_MOMENTUM
    assert tissue_momentum(np.full(100, PEAK)) == TISSUE_MOMENTUM


def test_the_band_widens_with_distance_and_holds_a_planted_cosine():
    truth = named_plan("cosine", 40_000, 500, 0.1, PEAK)
    steps = np.arange(500, 20_001, 25)
    rng = np.random.default_rng(1)
    memory = tissue_momentum(truth.lr)
    y = planted(TISSUE, truth, steps, momentum=memory)
    y = y * np.exp(0.001 * rng.standard_normal(len(steps)))  # a binned training loss's noise
    cont = fit_continuation(steps, y, truth.lr, PEAK, refits=30)
    at = np.array([22_000, 30_000, 40_000])
    point, lo, hi = cont.predict_at(truth.lr, at)
    assert np.all(np.diff(hi - lo) > 0)  # wider the further it carries the fit
    final = planted(TISSUE, truth, np.array([40_000]), momentum=memory)[0]
    assert lo[-1] <= final <= hi[-1]
    assert point[-1] == pytest.approx(final, rel=0.01)


def test_recency_weights_rise_with_the_step_and_average_one():
    w = recency(np.array([100.0, 200.0, 400.0, 1_000.0]))
    assert w.mean() == pytest.approx(1.0)
    assert np.all(np.diff(w) > 0)
    # linear in the step, from 1/n at the first point: (0, 1/9, 1/3, 1) + 1/4, scaled
    raw = np.array([0, 1 / 9, 1 / 3, 1]) + 0.25
    assert w == pytest.approx(raw / raw.mean())
    assert recency(np.array([5.0])) == pytest.approx([1.0])


def test_a_gain_fitted_below_the_prior_leaves_the_anneal_ahead_as_uncertain():
    """Two long cosines read to half their steps, one planted with the prior's mean gain,
    one with a third of it (and fitted so): the anneal still ahead is as uncertain for
    both, so the low-gain run's band at its end is as wide (it would be a third as wide
    if the band scaled with the gain the curve fitted)."""
    truth = named_plan("cosine", 60_000, 500, 0.1, PEAK)
    steps = np.arange(2_000, 30_001, 100)
    memory = tissue_momentum(truth.lr)
    prior = GAIN_PRIOR[TISSUE]
    width = {}
    for gain in (prior.mean / 3, prior.mean):
        y = planted(TISSUE, truth, steps, gain=gain, momentum=memory)
        cont = fit_continuation(steps, y, truth.lr, PEAK, refits=10)
        assert cont.fits[TISSUE].gain == pytest.approx(gain, rel=0.01)
        _, lo, hi = cont.predict(truth.lr)
        width[gain] = hi - lo
    assert width[prior.mean / 3] >= 0.9 * width[prior.mean]


def test_a_curve_too_short_for_the_law_is_refused():
    plan = named_plan("cosine", 40_000, 100, 0.1, PEAK)
    steps = np.arange(200, 1000, 200)
    with pytest.raises(BadInput, match="the curve law needs 8"):
        fit_continuation(steps, np.linspace(4, 3, len(steps)), plan.lr, PEAK, where="log.csv")
