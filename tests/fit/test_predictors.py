"""The task predictors (cdlaw.fit.predictors): planted two-step and direct laws recovered,
the true predictor chosen by held-out error, checkpoint rows, chance levels."""

import numpy as np
import pandas as pd
import pytest
from taskladder import ITEMS, true_acc, two_step

from cdlaw.fit.curves import SIGMOID, fit_power_nd
from cdlaw.fit.forecast import forecast
from cdlaw.fit.predictor_fits import CurveFit, PredictorFit, TaskPredictors
from cdlaw.fit.predictors import _fit_link, choose, fit_task_predictors
from cdlaw.fit.table import prepare_runs
from cdlaw.tasks.chance import chance_level


@pytest.fixture(scope="module")
def planted():
    runs = prepare_runs(two_step(), "planted", checkpoints=True)
    return fit_task_predictors(runs, boot=60, holdout=True, chance={"quiz": 0.25})[0]


def test_the_two_step_law_is_recovered_within_its_noise(planted):
    N, T = 2.5e9, 20 * 2.5e9  # 4x the largest N, 15x its compute at 20 tokens/param
    truth = float(true_acc(N, T))
    f = forecast(planted, N, T, predictor="task-loss")
    noise = np.sqrt(truth * (1 - truth) / ITEMS)
    assert abs(f.value - truth) < 0.02 + 3 * noise
    assert f.ci95[0] <= truth <= f.ci95[1]
    assert f.beyond_runs and f.n_factor == pytest.approx(N / 640e6)
    step2 = planted.fits["task-loss"].links[0]
    assert step2.fixed == {"b": 0.25}  # the floor held at chance
    assert step2.theta[1] == pytest.approx(2.0, abs=0.15)  # x0 of the planted sigmoid


def test_the_links_fit_every_evaluation_and_step_one_final_rows(planted):
    assert planted.n_evals == 4 * planted.n_runs == 72


def test_held_out_errors_choose_a_chain_for_a_two_step_truth(planted):
    fits = planted.fits
    assert planted.chosen in ("task-loss", "val-loss")
    assert all(fits[p].heldout_error is not None for p in ("task-loss", "val-loss", "direct"))
    assert fits[planted.chosen].heldout_error < 0.02
    assert "held-out error" in planted.chosen_by


def test_a_direct_truth_chooses_the_direct_predictor():
    runs = prepare_runs(two_step(direct=True), "direct", checkpoints=True)
    tp = fit_task_predictors(runs, boot=0, holdout=True)[0]
    assert tp.chosen == "direct", {p: f.heldout_error for p, f in tp.fits.items()}


def test_bands_widen_with_the_extrapolation(planted):
    widths = []
    for N in (640e6, 2.5e9, 10e9, 40e9):
        f = forecast(planted, N, 20 * N, predictor="task-loss")
        widths.append(f.ci95[1] - f.ci95[0])
    assert widths[0] < widths[1] < widths[2]


def test_the_power_law_grid_recovers_its_constants():
    rng = np.random.default_rng(1)
    N = np.repeat([1e7, 3e7, 1e8, 3e8, 1e9], 4)
    D = N * np.tile([5, 20, 80, 320], 5)
    y = 1.7 + 400 * N**-0.34 + 410 * D**-0.28
    th, _ = fit_power_nd(N, D, y * np.exp(rng.normal(0, 1e-4, len(y))), np.ones((1, len(y))))
    assert th[0, 0] == pytest.approx(1.7, rel=0.05)
    assert th[0, 2] == pytest.approx(0.34, rel=0.1) and th[0, 4] == pytest.approx(0.28, rel=0.1)


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
    tp = fit_task_predictors(prepare_runs(t, "t", checkpoints=True), boot=0, holdout=True)[0]
    chains = [tp.fits[p] for p in ("task-loss", "val-loss", "val-loss-exp")]
    assert all(f.ok and f.heldout_error is None for f in chains)  # 4 final runs left: no step 1
    assert tp.chosen == "task-loss" and tp.chosen_by.startswith("default")


def test_a_tie_goes_to_the_link_that_levels_off():
    rng = np.random.default_rng(0)
    exp = np.abs(rng.normal(0, 0.02, 24))  # |error| of each run held out
    noise = rng.normal(0, 0.005, 24)
    noise -= noise.mean()
    # lower by 1e-4, as the demo's acc_norm: far inside the paired noise, ~1e-3
    assert choose({"val-loss": exp + 1e-4 + noise, "val-loss-exp": exp}) == (
        "val-loss",
        "val-loss-exp",
    )
    # lower by 0.01, ten standard errors: the exponential link wins on its error
    assert choose({"val-loss": exp + 0.01 + noise, "val-loss-exp": exp}) == ("val-loss-exp", None)
    # one run held out has no noise to measure: the least error is chosen
    assert choose({"val-loss": exp[:1] + 1e-4, "val-loss-exp": exp[:1]}) == ("val-loss-exp", None)


def _exp_chain(chance: float) -> TaskPredictors:
    """A val-loss-exp chain whose link is 1.2 at a loss of 0.5 and 0.1 at a loss of 5."""
    link = CurveFit("exp_decay", "loss", [0.9, 5.0, 3.0], [[0.9, 5.0, 3.0], [0.92, 4.0, 3.0]])
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
    high = forecast(tp, 4e6, 4e7, loss=0.5, losses=np.array([0.5, 0.4]))
    assert high.value == 1.0 and high.ci95[1] == 1.0


def test_a_sigmoid_with_its_floor_known_levels_off_at_one_at_most():
    rng = np.random.default_rng(0)
    x = np.linspace(1.0, 2.0, 40)  # the lower half of a sigmoid whose height is 0.9
    y = 0.25 + 0.9 / (1 + np.exp(6.0 * (x - 1.0))) + rng.normal(0, 0.002, len(x))
    c = _fit_link(SIGMOID, x, y, np.arange(len(x)), 0.25, "loss", 20, rng, falling=True)
    assert max(a for a, *_ in [c.theta, *c.bootstrap]) <= 0.75 + 1e-12  # a + b ≤ 1


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
