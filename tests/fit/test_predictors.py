"""The task predictors (cdlaw.fit.predictors): planted two-step and direct laws recovered, the
checks and the choice between predictors, checkpoint rows, chance levels, and every link
bounded inside [chance, 1]."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from taskladder import DIRECT, ITEMS, true_acc, true_direct, two_step

from cdlaw.fit.curves import EXP_DECAY, LOGACC_POWER, SIGMOID, fit_power_nd
from cdlaw.fit.forecast import forecast, point
from cdlaw.fit.predictor_choice import choose, held_out_checks
from cdlaw.fit.predictor_fits import CurveFit, PredictorFit, TaskPredictors
from cdlaw.fit.predictor_links import fit_link
from cdlaw.fit.predictors import fit_task_predictors
from cdlaw.fit.table import prepare_runs
from cdlaw.fit.task_noise import TaskNoise
from cdlaw.tasks.chance import chance_level


@pytest.fixture(scope="module")
def planted():
    runs = prepare_runs(two_step(), "planted", checkpoints=True)
    return fit_task_predictors(runs, boot=60, chance={"quiz": 0.25})[0]


def test_the_two_step_law_is_recovered_within_its_noise(planted):
    N, T = 2.5e9, 20 * 2.5e9  # 4x the largest N, 15x its compute at 20 tokens/param
    truth = float(true_acc(N, T))
    f = forecast(planted, N, T, predictor="task-loss")
    noise = np.sqrt(truth * (1 - truth) / ITEMS)
    assert abs(f.value - truth) < 0.02 + 3 * noise
    assert f.ci95[0] <= truth <= f.ci95[1]
    assert f.beyond_runs and f.n_factor == pytest.approx(N / 640e6)
    step2 = planted.fits["task-loss"].links[0]
    assert step2.theta[3] <= 0.25 + 1e-12  # the floor at most chance
    assert step2.theta[1] == pytest.approx(2.0, abs=0.15)  # x0 of the planted sigmoid


def test_the_links_fit_every_evaluation_and_step_one_final_rows(planted):
    assert planted.n_evals == 4 * planted.n_runs == 72


def test_checks_hold_out_the_largest_sizes_and_the_longest_runs(planted):
    assert planted.checks == [
        "N = 6.4e+08 held out", "N ≥ 3.2e+08 held out", "40 tokens per parameter held out",
    ]  # fmt: skip
    fits = planted.fits
    assert planted.chosen == "task-loss" and fits["task-loss"].heldout_error < 0.02
    assert [c["held_out"] for c in fits["task-loss"].checks] == planted.checks
    assert fits["task-loss"].heldout_runs == 3 + 6 + 6  # 640M: 3 runs; 320M–640M: 6; 40x: 6
    assert planted.chosen_by.startswith("the bounded default")


def test_held_out_checks_follow_the_sizes_and_ratios_there_are():
    def labels(sizes, ratios):
        N = np.repeat(sizes, len(ratios)).astype(float)
        r = np.tile(ratios, len(sizes)).astype(float)
        return [c.label for c in held_out_checks(N, r, np.ones(len(N), bool))]

    assert labels([1e8, 2e8], [20]) == []
    assert labels([1e8, 2e8], [20, 40]) == []  # one ratio left would not vary D
    assert labels([1e8, 2e8], [20, 40, 100]) == ["100 tokens per parameter held out"]
    assert labels([1e8, 2e8, 4e8], [20, 21]) == ["N = 4e+08 held out"]  # 21 is 20's group
    assert labels([1e8, 2e8, 4e8, 8e8], [20]) == ["N = 8e+08 held out", "N ≥ 4e+08 held out"]


def test_a_direct_truth_chooses_the_direct_predictor_and_recovers_it():
    runs = prepare_runs(two_step(direct=True), "direct", checkpoints=True)
    tp = fit_task_predictors(runs, boot=0, chance={"quiz": 0.25})[0]
    assert tp.chosen == "direct", {p: f.heldout_error for p, f in tp.fits.items()}
    assert "lower than task-loss's" in tp.chosen_by and "beyond the noise" in tp.chosen_by
    link = next(c for c in tp.fits["direct"].links if c.ratio == pytest.approx(20))
    assert link.form == "logacc_power" and link.fixed == {"b": 0.25}
    assert link.theta[1] == pytest.approx(DIRECT["alpha"], rel=0.1)
    N = 2.5e9  # 4x the largest N at 20 tokens per parameter
    assert forecast(tp, N, 20 * N).value == pytest.approx(float(true_direct(N, 20 * N)), abs=0.02)


def test_the_choice_keeps_the_default_unless_another_is_better_beyond_the_noise():
    rng = np.random.default_rng(0)
    base = np.abs(rng.normal(0, 0.02, 24))  # |error| of each run held out
    jitter = rng.normal(0, 0.005, 24)
    jitter -= jitter.mean()
    usable = ["task-loss", "val-loss", "val-loss-exp"]
    checks = held_out_checks([1e8, 2e8, 4e8], [20, 20, 20], [True] * 3)

    def chosen(gain, noise=0.001, n=24):
        missed = {"task-loss": base[:n] + gain + jitter[:n], "val-loss": base[:n]}
        return choose(missed, usable, noise, checks, 3)[0]

    assert chosen(1e-4) == "task-loss"  # inside the paired noise, ~2e-3: the default
    assert chosen(0.01) == "val-loss"  # ten standard errors better
    assert chosen(0.01, noise=0.02) == "task-loss"  # but within the task's own noise
    assert chosen(0.01, noise=None, n=1) == "task-loss"  # one run, no noise known: a tie
    assert choose({}, usable, None, [], 2) == (
        "task-loss",
        "the bounded default: 2 sizes of runs and too few ratios of tokens per parameter to "
        "hold any out (a check needs 3 sizes, or 3 ratios)",
    )


def test_the_power_law_grid_recovers_its_constants():
    rng = np.random.default_rng(1)
    N = np.repeat([1e7, 3e7, 1e8, 3e8, 1e9], 4)
    D = N * np.tile([5, 20, 80, 320], 5)
    y = 1.7 + 400 * N**-0.34 + 410 * D**-0.28
    th, _ = fit_power_nd(N, D, y * np.exp(rng.normal(0, 1e-4, len(y))), np.ones((1, len(y))))
    assert th[0, 0] == pytest.approx(1.7, rel=0.05)
    assert th[0, 2] == pytest.approx(0.34, rel=0.1) and th[0, 4] == pytest.approx(0.28, rel=0.1)


def test_the_direct_form_recovers_its_exponent():
    rng = np.random.default_rng(2)
    x = np.linspace(18, 22, 30)  # log10 compute
    q = np.exp(-np.exp(20.0 - 0.5 * np.log(10) * x))
    y = 0.25 + 0.75 * q + rng.normal(0, 0.003, len(x))
    c = fit_link(LOGACC_POWER, x, y, np.arange(len(x)), 0.25, "log10_flops", 20, rng)
    assert c.theta[1] == pytest.approx(0.5, rel=0.05) and c.theta[0] == pytest.approx(20, rel=0.05)
    grid = LOGACC_POWER.f(np.array([c.theta, *c.bootstrap]), np.linspace(10, 40, 50))
    assert grid.min() >= 0.25 - 1e-12 and grid.max() <= 1.0


def test_checkpoint_rows_are_dropped_for_the_law_and_kept_for_the_links():
    t = two_step()
    assert len(prepare_runs(t.copy(), "t")) == 18  # final rows only
    kept = prepare_runs(t.copy(), "t", checkpoints=True)
    assert len(kept) == 72 and kept["checkpoint"].sum() == 54
    # a checkpoint's tokens_trained is below its run's D + D′ and is not refused
    t["checkpoint"] = t["checkpoint"].map({True: "yes", False: "no"})
    assert len(prepare_runs(t, "t")) == 18


@pytest.mark.parametrize(
    "task, given, want",
    [
        ("hellaswag", None, 0.25),
        ("hellaswag_zeroshot", None, 0.25),
        ("arc_easy:mc", None, 0.25),
        ("piqa", None, 0.5),
        ("commonsense_qa", None, 0.2),
        ("lambada_openai", None, 0.0),
        ("world_mc", None, 0.25),
        ("mmlu_stem", None, 0.25),
        ("my_task", None, None),
        ("my_task", {"my_task": 0.1}, 0.1),
    ],
)
def test_chance_levels_come_from_names_or_are_given(task, given, want):
    assert chance_level(task, given) == want


def test_a_runs_folders_earlier_task_evaluations_become_checkpoint_rows(tmp_path):
    from cdlaw.fit.checkpoints import with_checkpoints
    from cdlaw.fit.table import load_runs

    t = two_step()
    t["run_id"] = (t.groupby(["n_params", "fresh_tokens"]).ngroup()).map("r{:02d}".format)
    final = t[~t["checkpoint"]].drop(columns=["checkpoint"])
    final.to_parquet(tmp_path / "summary.parquet", index=False)
    for run_id, g in t.groupby("run_id"):
        (tmp_path / run_id).mkdir()
        pd.DataFrame({
            "step": np.arange(1, len(g) + 1) * 100, "tokens_seen": g["tokens_trained"],
            "val_loss": g["loss"], "task_quiz_acc": g["task_quiz_acc"],
            "task_quiz_bpb": g["task_quiz_bpb"],
        }).to_parquet(tmp_path / run_id / "metrics.parquet", index=False)  # fmt: skip
    runs = with_checkpoints(tmp_path, load_runs(tmp_path, checkpoints=True))
    assert len(runs) == 72 and runs["checkpoint"].sum() == 54
    tp = fit_task_predictors(runs, boot=0)[0]
    assert tp.n_runs == 18 and tp.n_evals == 72


def test_a_predictor_the_check_cannot_refit_stays_usable_unscored():
    t = two_step()
    t = t[t["n_params"].isin([160e6, 320e6, 640e6]) & (t["fresh_tokens"] <= 20 * t["n_params"])]
    tp = fit_task_predictors(prepare_runs(t, "t", checkpoints=True), boot=0)[0]
    chains = [tp.fits[p] for p in ("task-loss", "val-loss", "val-loss-exp")]
    assert all(f.ok and f.heldout_error is None for f in chains)  # 4 final runs left: no step 1
    assert tp.chosen == "task-loss" and "cannot be fitted without" in tp.chosen_by


def _exp_chain(chance: float) -> TaskPredictors:
    """A val-loss-exp chain, its link 1 − ε + ε·s·e^(−γ(L − 1)) with ε = 0.9, s = 1: an
    accuracy of 1 at L_min = 1, 0.1 at a very high loss."""
    theta = [0.9, 1.0, 3.0, 1.0]
    link = CurveFit("exp_decay", "loss", theta, [theta, [0.92, 0.8, 3.0, 1.0]], {"L_min": 1.0})
    step1 = CurveFit("power_nd", "N, D", [1.0, 0.0, 0.3, 0.0, 0.3], [[1.0, 0.0, 0.3, 0.0, 0.3]])
    f = PredictorFit("val-loss-exp", step1, (link,), 0.01, 10, 0.3)
    return TaskPredictors(
        "task_q_acc", "q", "acc", chance, {"val-loss-exp": f}, "val-loss-exp", "", 1e6,
        1e6, 6e13, 10, 10,
    )  # fmt: skip


def test_a_prediction_and_its_band_stay_within_chance_and_one():
    tp = _exp_chain(0.25)
    low = forecast(tp, 4e6, 4e7, loss=5.0, losses=np.array([5.0, 6.0]))
    assert low.value == 0.25 and low.ci95[0] == 0.25  # not the link's 0.1, below chance
    high = forecast(tp, 4e6, 4e7, loss=0.2, losses=np.array([0.5, 0.4]))
    assert high.value == 1.0 and high.ci95[1] == 1.0  # read at L_min below it: its ceiling


def test_an_exponential_link_that_would_pass_one_is_held_to_its_ceiling():
    """Gadre et al.'s form fitted to accuracies that climb fast: unbounded, its curve would
    pass 1 just below the runs' losses; capped, it is at most 1 down to L_min and stays
    there below it."""
    rng = np.random.default_rng(3)
    L = np.linspace(2.5, 4.0, 40)
    y = 1.0 - 0.8 + 60.0 * np.exp(-2.0 * L) + rng.normal(0, 0.003, len(L))
    assert 0.2 + 60.0 * np.exp(-2.0 * 1.2) > 1.0  # the planted link passes 1 at L = 1.2
    c = fit_link(EXP_DECAY, L, y, np.arange(len(L)), 0.0, "loss", 20, rng, lowest=1.0)
    grid = EXP_DECAY.f(np.array([c.theta, *c.bootstrap]), np.linspace(0.0, 6.0, 61))
    assert grid.max() <= 1.0 + 1e-12 and np.all(np.diff(grid, axis=1) <= 1e-12)  # one way
    assert c.fixed == {"L_min": 1.0} and c.theta[1] == pytest.approx(1.0)  # at its cap


def test_a_link_past_one_in_a_file_is_refused():
    ok = {"form": "exp_decay", "x": "loss", "params": {"eps": 0.5, "s": 1.0, "gamma": 2.0,
          "L_min": 1.0}, "fixed": {"L_min": 1.0}}  # fmt: skip
    assert CurveFit.from_dict(ok).theta[1] == 1.0
    with pytest.raises(ValueError, match=r"regains a share 1\.5"):
        CurveFit.from_dict({**ok, "params": {**ok["params"], "s": 1.5}})
    sig = {"form": "sigmoid", "x": "loss", "params": {"a": 0.9, "x0": 2.0, "k": -3.0, "b": 0.25}}
    with pytest.raises(ValueError, match=r"spans accuracies 0\.25 to 1\.15"):
        CurveFit.from_dict(sig)


def test_a_sigmoid_ceiling_is_one_unless_the_runs_bend_towards_a_lower_one():
    def top(x, height=0.5, x0=1.5, k=6.0, sd=0.004, seed=0):
        rng = np.random.default_rng(seed)
        y = 0.25 + height / (1 + np.exp(k * (x - x0))) + rng.normal(0, sd, len(x))
        c = fit_link(SIGMOID, x, y, np.arange(len(x)) // 3, 0.25, "loss", 0, rng, anchored=True)
        return c.theta[0] + c.theta[3]

    # runs that reach the planted ceiling, 0.25 + 0.5: it is theirs
    assert top(np.linspace(0.6, 2.5, 60)) == pytest.approx(0.75, abs=0.01)
    assert top(np.linspace(1.9, 2.5, 30)) > 0.9  # only its foot: the ceiling stays near 1
    # the foot of a curve that rises to 1, in noise: a ceiling fitted freely sits at 0.27,
    # just above the runs; they rise by a few noise steps, so it stays near 1
    foot = np.repeat(np.linspace(1.0, 1.6, 40), 3)
    assert top(foot, height=0.75, x0=0.6, k=8.0, sd=0.012, seed=3) > 0.95


def test_every_predictor_stays_within_chance_and_one_far_beyond_the_runs(planted):
    for p, f in planted.fits.items():
        if not f.ok:
            continue
        for N in (1e6, 1e9, 1e11, 1e13):
            for r in (1, 20, 2000):
                v = point(f, N, r * N, None, 0.25)
                assert np.isnan(v) or 0.25 <= v <= 1.0, (p, N, r, v)


def test_the_band_takes_in_the_other_predictors_and_the_noise(planted):
    N = 2.5e9
    f = forecast(planted, N, 20 * N)
    assert set(f.points) >= {"task-loss", "val-loss"} and f.spread is not None
    assert f.ci95[0] <= min(f.points.values()) and f.ci95[1] >= max(f.points.values())
    assert f.noise is None and planted.noise.source == "none"  # 4 evaluations a run, 1 seed
    # inside the runs, a val-loss chain whose step 1 reads 0.3 nats lower disagrees by
    # more than the bootstrap and the noise: the band reaches its point
    vl = planted.fits["val-loss"]
    step1 = replace(vl.step1, theta=[vl.step1.theta[0] - 0.3, *vl.step1.theta[1:]])
    noise = TaskNoise(0.01, "checkpoints", 40, 2000, 0.5)
    apart = replace(planted, fits={**planted.fits, "val-loss": replace(vl, step1=step1)},
                    noise=noise)  # fmt: skip
    f = forecast(apart, 320e6, 20 * 320e6)
    far = f.points["val-loss"]
    assert abs(far - f.value) > 0.05 and f.ci95[0] <= far <= f.ci95[1]
    # each side at least 1.96 × the noise from the point: the model's own scatter
    assert f.noise == 0.01 and f.unsupported is None
    assert min(f.value - f.ci95[0], f.ci95[1] - f.value) >= 1.96 * f.noise - 1e-12


def test_a_laws_loss_without_its_bootstrap_is_every_refits_step_one(planted):
    """A preset law (no bootstrap) gives the val-loss chain its loss: the band is the
    link's refits at that loss, around the point made from it, not the ladder's own step
    1 refits (a band that missed the point by the two laws' difference)."""
    N, T = 2.5e9, 5e10
    own = forecast(planted, N, T, predictor="val-loss")
    lower = forecast(planted, N, T, loss=0.8 * _step1_loss(planted, N, T),
                     predictor="val-loss")  # fmt: skip
    same = forecast(planted, N, T, loss=0.8 * _step1_loss(planted, N, T),
                    losses=np.full(60, 0.8 * _step1_loss(planted, N, T)), predictor="val-loss")  # fmt: skip
    assert lower.value != own.value
    assert lower.ci95[0] <= lower.value <= lower.ci95[1]
    assert lower.ci95 == pytest.approx(same.ci95)


def _step1_loss(tp: TaskPredictors, N: float, T: float) -> float:
    step1 = tp.fits["val-loss"].step1
    return float(step1.values(np.array([step1.theta]), (N, T))[0, 0])


def test_a_default_no_check_can_refit_is_kept_over_one_checked():
    """Five sizes at 20 tokens per parameter and one run at 40 (Gadre et al.'s shape): the
    chains' step 1 cannot be refitted without the largest size, the direct fit can. Its
    held-out error says nothing of the default's, so the default stays."""
    t = two_step()
    t = t[(t["n_params"] >= 40e6) & (t["fresh_tokens"] == 20 * t["n_params"])
          | (t["n_params"] == 40e6) & (t["fresh_tokens"] == 40 * t["n_params"])]  # fmt: skip
    runs = prepare_runs(t, "t", checkpoints=True)
    tp = fit_task_predictors(runs, boot=0, chance={"quiz": 0.25})[0]
    assert len(tp.fits["direct"].checks) == 2  # checked by both checks
    assert tp.fits["task-loss"].ok and tp.fits["task-loss"].heldout_error is None
    assert tp.chosen == "task-loss"
    assert "cannot be fitted without" in tp.chosen_by
