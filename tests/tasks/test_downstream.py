"""The links from loss to task metrics (cdlaw.fit.link, cdlaw.tasks.links): planted links
are recovered, a strategy planted with a shift in loss is detected by the collapse test and
its shift measured, none is reported when none was planted, and downstream.json reads
back. Any strategy names work: the strategies are whatever the table says."""

import numpy as np
import pandas as pd
import pytest
from plantedlinks import POWER, SIGMOID, planted_runs

from cdlaw.fit.link import LINK_FORMS, fit_link
from cdlaw.fit.table import prepare_runs
from cdlaw.system.errors import BadInput
from cdlaw.tasks.downstream_json import Downstream
from cdlaw.tasks.links import fit_downstream


def links(shift=None, seed=0, n_boot=0, **kw):
    result = fit_downstream(prepare_runs(planted_runs(shift, seed)), n_boot=n_boot, **kw)
    return {lk.metric: lk for lk in result.links}


def test_planted_links_are_recovered():
    got = links(n_boot=60)
    acc, bpb = got["acc"], got["bpb"]
    for name, truth in SIGMOID.items():
        assert acc.params[name] == pytest.approx(truth, abs=0.1 * max(1, abs(truth))), name
        lo, hi = acc.ci95[name]
        assert lo <= truth <= hi or abs(acc.params[name] - truth) < 0.05, name
    for name, truth in POWER.items():
        assert bpb.params[name] == pytest.approx(truth, rel=0.15, abs=0.05), name
    # the accuracy's binomial noise (400 items) is what is left
    assert acc.rmse == pytest.approx(np.sqrt(0.25 * 0.75 / 400), rel=0.5)


@pytest.mark.parametrize("metric", ["acc", "bpb"])
def test_a_strategy_shifted_in_loss_is_detected_and_its_shift_measured(metric):
    lk = links({"paraphrase": 0.15})[metric]
    c = lk.collapse
    assert not c.collapses and c.p_value < 1e-3 and c.reference == "none"
    assert c.shift["paraphrase"] == pytest.approx(0.15, abs=3 * c.shift_se["paraphrase"] + 0.02)
    assert abs(c.shift["repetition"]) < 3 * c.shift_se["repetition"] + 0.02
    assert (
        c.heldout_bias["paraphrase"] * (1 if metric == "acc" else -1) > 0
    )  # scores above the others'
    assert "differ" in lk.verdict()


def test_no_shift_is_reported_when_none_was_planted():
    rejections = 0
    for seed in range(5):
        for lk in links(seed=seed).values():
            rejections += not lk.collapse.collapses
            assert np.isfinite(lk.collapse.f) and lk.collapse.df == (
                2,
                lk.n_runs - len(lk.params) - 2,
            )
    assert rejections <= 2  # a 5% test: 10 tests reject 0.5 times on average
    lk = links(seed=0)["acc"]
    assert lk.collapse.collapses and "one curve" in lk.verdict()


def test_the_seed_noise_is_the_scatter_between_replicate_seeds():
    df = prepare_runs(planted_runs())
    lk = {x.metric: x for x in fit_downstream(df, n_boot=0).links}["acc"]
    none = df[df.strategy == "none"]
    pairs = none.groupby(["n_params", "fresh_tokens"])["task_quiz_acc"]
    want = np.sqrt((pairs.var(ddof=1)).mean())  # pairs: the pooled variance is their mean
    assert lk.seed_sd == pytest.approx(want) and lk.seed_groups == 10
    assert lk.seeds_named and "a rerun with another seed scatters by" in lk.verdict()


def test_a_table_without_seeds_does_not_call_its_scatter_a_seeds():
    """Gadre et al.'s cells hold runs on three datasets, and name no seed."""
    df = prepare_runs(planted_runs()).drop(columns="seed")
    lk = {x.metric: x for x in fit_downstream(df, n_boot=0).links}["acc"]
    assert not lk.seeds_named and lk.seed_sd is not None
    assert "another seed" not in lk.verdict() and "runs of one cell (no seed column" in lk.verdict()


def test_any_strategy_names_and_references_work():
    df = planted_runs({"paraphrase": 0.15})
    df = df[df.strategy != "none"].replace({"strategy": {"paraphrase": "backtranslation"}})
    lk = {x.metric: x for x in fit_downstream(df, n_boot=0).links}["acc"]
    c = lk.collapse
    assert c.reference == "repetition" and set(c.shift) == {"backtranslation", "repetition"}
    assert not c.collapses and c.shift["backtranslation"] > 0.1  # it buys more per nat


THREE = ("repetition", "paraphrase", "self-distill")


@pytest.mark.parametrize("metric", ["acc", "bpb"])
def test_a_third_strategy_shifted_is_detected_and_none_shifted_is_one_curve(metric):
    lk = {x.metric: x for x in fit_downstream(
        prepare_runs(planted_runs({"self-distill": 0.12}, strategies=THREE)), n_boot=0
    ).links}[metric]  # fmt: skip
    c = lk.collapse
    assert list(c.shift) == ["none", *THREE] and c.df[0] == 3
    assert not c.collapses and c.p_value < 1e-3
    assert c.shift["self-distill"] == pytest.approx(0.12, abs=3 * c.shift_se["self-distill"] + 0.02)
    for s in ("repetition", "paraphrase"):
        assert abs(c.shift[s]) < 3 * c.shift_se[s] + 0.02, s
    rejections = 0
    for seed in range(4):
        fitted = fit_downstream(prepare_runs(planted_runs(seed=seed, strategies=THREE)), n_boot=0)
        lk = {x.metric: x for x in fitted.links}[metric]
        assert lk.collapse.df == (3, lk.n_runs - len(lk.params) - 3)
        rejections += not lk.collapse.collapses
    assert rejections <= 1


def test_downstream_json_reads_back(tmp_path):
    result = fit_downstream(prepare_runs(planted_runs()), n_boot=10, source="planted")
    path = result.write(tmp_path / "downstream.json")
    back = Downstream.read(path)
    assert [lk.to_dict() for lk in back.links] == [lk.to_dict() for lk in result.links]
    assert back.link("quiz")[0].predict([3.0]) == pytest.approx(result.links[0].predict([3.0]))
    with pytest.raises(BadInput, match="tasks there: quiz"):
        back.link("squad")
    (tmp_path / "bad.json").write_text('{"links": [{"form": "cubic"}]}')
    with pytest.raises(BadInput, match="not readable"):
        Downstream.read(tmp_path / "bad.json")


def test_a_table_without_tasks_or_without_the_task_is_refused():
    df = prepare_runs(planted_runs())
    with pytest.raises(BadInput, match=r"no task columns .* \[eval\]"):
        fit_downstream(df.drop(columns=["task_quiz_acc", "task_quiz_bpb"]))
    with pytest.raises(BadInput, match="tasks: quiz"):
        fit_downstream(df, task="lambada")
    few = fit_downstream(df.head(4), n_boot=0)
    assert not few.links and "needs at least" in few.skipped["task_quiz_acc"]


def test_the_sigmoid_stays_an_accuracy_and_the_fit_matches_the_jacobian():
    form = LINK_FORMS["sigmoid"]
    L = np.linspace(2, 5, 40)
    y = form.predict([0.9, 3.0, -6.0, 0.1], L) + np.random.default_rng(0).normal(0, 0.01, 40)
    fit = fit_link(form, L, np.clip(y, 0, 1))
    a, _, k, b = fit.theta
    assert 0 <= b <= 1 and 0 <= a + b <= 1 + 1e-9 and k <= 0
    far = form.predict(fit.theta, np.array([-100.0, 100.0]))
    assert ((far >= 0) & (far <= 1)).all()
    assert pd.Series(fit.se).notna().all()


def test_a_metric_that_does_not_follow_the_loss_gets_no_collapse_test():
    df = prepare_runs(planted_runs({"paraphrase": 0.15}))
    rng = np.random.default_rng(1)
    df["task_quiz_acc"] = rng.binomial(400, 0.25, len(df)) / 400  # at chance in every run
    lk = {x.metric: x for x in fit_downstream(df, n_boot=0).links}["acc"]
    assert not lk.follows_loss and lk.collapse is None and lk.trend_p_value >= 0.05
    assert "does not follow the loss" in lk.verdict()
    assert links({"paraphrase": 0.15})["acc"].follows_loss


def test_the_links_bootstrap_resamples_runs_with_their_checkpoints():
    """Checkpoint rows that repeat each run's end add nothing a run-level bootstrap can see:
    its refits are those of the final rows alone (resampling rows would narrow them)."""
    from taskladder import two_step

    final = two_step().query("not checkpoint")
    copies = pd.concat([final, final.assign(checkpoint=True), final.assign(checkpoint=True)])
    one = fit_downstream(prepare_runs(final.copy(), "t", checkpoints=True), n_boot=30)
    three = fit_downstream(prepare_runs(copies, "t", checkpoints=True), n_boot=30)
    for a, b in zip(one.links, three.links, strict=True):
        assert np.array(b.bootstrap) == pytest.approx(np.array(a.bootstrap), rel=1e-3, abs=1e-4)


def test_a_link_that_jumps_between_runs_says_its_shape_is_a_bound():
    """Accuracy that jumps between two losses fits a step, whose shape between the runs
    the data do not set: the verdict says so; the planted smooth link's does not."""
    df = prepare_runs(planted_runs())
    smooth = {x.metric: x for x in fit_downstream(df, n_boot=0).links}["acc"]
    assert "at its bound" not in smooth.verdict()
    jump = df.assign(task_quiz_acc=np.where(df["loss"] < df["loss"].median(), 0.7, 0.3))
    lk = {x.metric: x for x in fit_downstream(jump, n_boot=0).links}["acc"]
    assert "its steepness sits at its bound, a step" in lk.verdict(), lk.verdict()
