"""The one guard under strategy auto, the frontier's default budgets, and intervals that can
be true: bands that hold their point, stay positive and under ln V, or say "not determined"."""

import dataclasses
import math
import sys

import numpy as np
import pytest

from cdlaw.cli import main
from cdlaw.fit.findings import DataRange
from cdlaw.law import PRESETS, Law
from cdlaw.plan.guard import BeyondLimit
from cdlaw.plan.planner import plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.system.errors import BadInput

QIN = PRESETS["qin2026"]
C, U = 1e21, 5e9  # qin2026 plans repetition, r = 6.53 (paraphrase: 4.35 passes)


def fitted(rep_r: float, para_r: float, vocab: int | None = None, draws=()) -> PlanningLaw:
    """qin2026 as if fitted on 14M–600M runs with repetition to r = rep_r and paraphrase
    to r = para_r (and the runs' vocabulary)."""
    per = {
        "repetition": DataRange(derived_ratio=(0.0, rep_r)),
        "paraphrase": DataRange(derived_ratio=(0.0, para_r)),
    }
    rng = DataRange(n_params=(14e6, 600e6), strategies=per, vocab_size=vocab)
    return PlanningLaw("fit", QIN, rng, tuple(draws))


def test_auto_plans_the_strategies_inside_the_limit_and_names_the_one_left_out():
    """Repetition, the better plan, is 33× past its runs' r ≤ 0.2; paraphrase is inside.
    One strategy out of range once refused the whole plan."""
    p = plan(fitted(0.2, 4.0), C, U, extrapolate=False)
    assert p.strategy == "paraphrase" and set(p.candidates) == {"paraphrase"}
    assert list(p.left_out) == ["repetition"] and p.extrapolated == ()
    why = p.left_out["repetition"]
    assert why.startswith("its plan is beyond the 30× extrapolation limit (D′/D = 6.53 is ")
    assert why.endswith("pass --extrapolate to weigh it too")
    assert f"repetition left out: {why}" in p.warnings
    assert p.to_dict()["left_out"] == {"repetition": why}
    # named, or with every strategy out, the plan is refused as before
    with pytest.raises(BeyondLimit):
        plan(fitted(0.2, 4.0), C, U, "repetition", extrapolate=False)
    with pytest.raises(BeyondLimit, match=r"D′/D = 6\.53 is 32\.6×"):
        plan(fitted(0.2, 0.1), C, U, extrapolate=False)
    # --extrapolate weighs them all
    both = plan(fitted(0.2, 4.0), C, U, extrapolate=True)
    assert both.strategy == "repetition" and both.left_out == {} and both.extrapolated


def test_the_frontier_defaults_to_the_budgets_a_small_fit_supports(monkeypatch, capsys, tmp_path):
    """A fit of runs of 26K–200K parameters: 1e18:1e24 lay wholly beyond its limit, so
    `plan --frontier` always failed; its default range now plans inside it."""
    import json

    from cdlaw.plan.support import supported_budgets

    small = {
        **QIN.to_dict(),
        "method": "joint",
        "data_range": {"n_params": [26e3, 200e3], "tokens_per_param": [0.24, 14.6]},
    }
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(small))
    monkeypatch.setattr(sys, "argv", ["cdlaw", "plan", "--law", str(path), "--frontier",
                                      "--unique-tokens", "96K", "--json"])  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main()
    got = capsys.readouterr()
    assert (e.value.code or 0) == 0, got.err
    rows = json.loads(got.out)["rows"]
    assert len(rows) == 13 and all(r["extrapolated"] == [] for r in rows)
    assert all(26e3 / 30 <= r["n_params"] <= 200e3 * 30 for r in rows)
    assert "the range whose plans stay inside the 30× extrapolation limit" in got.err
    # a law with no fitted range keeps 1e18:1e24; none inside anywhere is one sentence
    assert supported_budgets(PRESETS["muennighoff2023"], 5e9) is None
    nowhere = fitted(1e-9, 1e-9)
    with pytest.raises(BadInput, match="no budget from 1 to 1e40 FLOPs"):
        supported_budgets(dataclasses.replace(nowhere, law=QIN), 1e4, "repetition")


def test_an_n_band_reaching_past_the_limit_is_not_determined_and_a_band_holds_its_point():
    """ "N 30.3K (95% band 44.4 – 42.6K)" on runs of 26K–200K: refits planning 44 parameters
    say the runs do not pin N. A band the refits leave on one side is widened to the point."""
    from cdlaw.plan.checks import size_interval

    src = PlanningLaw("fit", QIN, DataRange(n_params=(26e3, 200e3)))
    band, why = size_interval(src, (44.4, 42.6e3), 30.3e3)
    assert band is None and why.startswith("not determined: the bootstrap refits' own plans")
    assert "44.4–42.6K" in why and "26K–200K" in why
    assert size_interval(src, (40e3, 60e3), 30e3) == ((30e3, 60e3), None)


def spread(k: float) -> list[Law]:
    """Ten refits of qin2026 whose floors E spread by ±5k nats."""
    return [Law("cd", {**QIN.params, "E": QIN.params["E"] + k * j}, QIN.strategies)
            for j in range(-5, 5)]  # fmt: skip


def test_a_loss_band_never_exceeds_ln_v_and_a_loss_above_it_is_not_determined():
    p = plan(fitted(15, 15, vocab=16, draws=spread(0.2)), C, U)
    lo, hi = p.predicted_loss_ci95
    assert 0 < lo <= p.predicted_loss <= hi == pytest.approx(math.log(16))
    assert any(w.startswith("the 95% band's upper end") and "ln V = 2.773" in w
               for w in p.warnings)  # fmt: skip
    # a vocabulary whose uniform guess is below the predicted loss: nothing to band
    q = plan(fitted(15, 15, vocab=8, draws=spread(0.2)), C, U)
    assert q.predicted_loss_ci95 is None and q.no_band_reason.startswith(
        "not determined: the predicted loss 2.265 is above ln V = 2.079"
    )


def test_not_determined_is_printed_in_words_not_as_a_number(monkeypatch):
    from cdlaw.cli import out
    from cdlaw.cli.plan import _render_plan

    p = plan(fitted(15, 15, vocab=8, draws=spread(0.2)), C, U)
    p = dataclasses.replace(p, n_params_no_band_reason="not determined: the runs do not pin N here")
    monkeypatch.setattr(out, "width", 300)
    with out.capture() as captured:
        _render_plan(p)
    text = " ".join(captured.get().split())
    assert "95% band not determined: the predicted loss" in text
    assert "N band not determined: the runs do not pin N here" in text
    assert "none: not determined" not in text


def test_every_band_holds_its_point_and_stays_positive_over_budgets():
    src = fitted(15, 15, vocab=100278, draws=spread(0.05))
    for c in np.logspace(17, 23, 7):
        p = plan(src, c, U)
        for band, point in ((p.predicted_loss_ci95, p.predicted_loss),
                            (p.n_params_ci95, p.n_params)):  # fmt: skip
            if band is not None:
                assert 0 <= band[0] <= point <= band[1]
        if p.predicted_loss_ci95:
            assert p.predicted_loss_ci95[1] <= math.log(100278)


def test_a_loss_band_the_refits_leave_on_one_side_is_widened_to_its_point_and_kept_positive():
    """Refits whose losses at the plan all lie above it (or all below) give a raw band that
    misses the point: the band is widened to it. Refits below zero give a lower end of 0."""
    from cdlaw.plan.checks import loss_interval

    best = plan(QIN, C, U).best
    point = best.predicted_loss

    def band(shift: float):
        draws = [Law("cd", {**QIN.params, "E": QIN.params["E"] + shift + 0.01 * j},
                     QIN.strategies) for j in range(10)]  # fmt: skip
        got, why, _ = loss_interval(PlanningLaw("x", QIN, None, tuple(draws)), best,
                                    best.strategy, None, None)  # fmt: skip
        assert why is None
        return got

    lo, hi = band(0.1)  # every refit above the point
    assert lo == point < hi
    lo, hi = band(-0.2)  # every refit below it
    assert lo < hi == point
    assert band(-10.0) == (0.0, point)  # refits whose loss is negative


def test_the_supported_budgets_predict_a_loss_under_ln_v():
    """Where the runs' vocabulary is known, the supported range starts where the plan's
    loss drops under ln V, a uniform guess's: below it the law means nothing (the demo's
    fit, V = 512, would otherwise reach down to plans of 35 nats)."""
    from cdlaw.plan.support import supported_budgets

    free = supported_budgets(fitted(15, 15), U)
    capped = supported_budgets(fitted(15, 15, vocab=32), U)
    assert capped[0] > 100 * free[0] and capped[-1] == free[-1]
    assert plan(fitted(15, 15), free[0], U).predicted_loss > 9  # no vocabulary: no cap
    assert math.log(32) - 0.01 < plan(fitted(15, 15), capped[0], U).predicted_loss <= math.log(32)


def test_compare_refuses_only_the_laws_whose_plan_is_beyond_the_limit():
    """compare plans each law through the guard: a law beyond the limit gets the refusal
    as its error, the others are planned; only when every law is beyond is it refused."""
    from cdlaw.plan.compare import Comparison, LawScore, attach_plans

    def score(name: str) -> LawScore:
        d = PRESETS[name].to_dict()
        return LawScore(d["law"], 5, {"params": d["params"], "strategies": d["strategies"]},
                        0.01, 0.0, 0.0, 0.0, 0.02, 0.02, True)  # fmt: skip

    # runs to 6B, repetition and paraphrase to r ≤ 0.1: the CD law's plan (r = 6.53) is
    # beyond the limit; Chinchilla's (N = 33.3B, D′ of no value to it) is not
    rng = dataclasses.replace(fitted(0.1, 0.1).data_range, n_params=(14e6, 6e9))
    both = Comparison([score("qin2026"), score("chinchilla-hoffmann")], {}, 0.1, 10, None, "t")
    attach_plans(both, C, U, rng, extrapolate=False)
    cd, chinchilla = (s.plan for s in both.scores)
    assert cd["beyond_limit"] and cd["error"].startswith("the plan is beyond the 30×")
    assert "error" not in chinchilla and chinchilla["extrapolated"] == []
    alone = Comparison([score("qin2026")], {}, 0.1, 10, None, "t")
    with pytest.raises(BeyondLimit):
        attach_plans(alone, C, U, rng, extrapolate=False)
    attach_plans(alone, C, U, rng, extrapolate=True)
    assert alone.scores[0].plan["extrapolated"]


def test_task_metrics_get_no_band_where_the_plans_loss_band_was_refused():
    """A loss above ln V has no band (not determined); a task metric linked to it got one
    from the same refits' losses, a band resting on losses the plan called meaningless."""
    from cdlaw.tasks.downstream_json import TaskLink
    from cdlaw.tasks.plan_metrics import with_tasks

    link = TaskLink(
        "task_quiz_acc", "quiz", "acc", "sigmoid", {"a": 0.7, "L0": 2.0, "k": -4.0, "b": 0.25},
        {}, 20, 0.01, None, 0, (1.5, 3.0), (0.3, 0.9), {}, None,
        bootstrap=[[0.7, 2.0 + d, -4.0, 0.25] for d in (-0.05, 0.0, 0.05)],
    )  # fmt: skip
    banded = with_tasks(plan(fitted(15, 15, vocab=16, draws=spread(0.2)), C, U),
                        fitted(15, 15, vocab=16, draws=spread(0.2)), [link])  # fmt: skip
    (task,) = banded.tasks
    assert task["ci95"] is not None and task["no_band_reason"] is None
    src = fitted(15, 15, vocab=8, draws=spread(0.2))
    refused = with_tasks(plan(src, C, U), src, [link])
    (task,) = refused.tasks
    assert task["ci95"] is None and task["value"] == pytest.approx(
        float(link.predict(refused.predicted_loss))
    )
    assert task["no_band_reason"].startswith(
        "not determined, as for the plan's loss: the predicted loss 2.265 is above ln V"
    )


def test_an_accuracy_read_through_the_loss_beyond_the_runs_losses_is_named():
    """A model inside the runs' sizes and compute whose law loss is below every run's: the
    val-loss chains read their link beyond its data (the N and compute factors say
    nothing), the task-loss chain does not read the loss at all."""
    from cdlaw.fit.forecast import Forecast
    from cdlaw.tasks.downstream_json import TaskLink
    from cdlaw.tasks.plan_metrics import loss_beyond_links

    def link(column):
        return TaskLink(column, "quiz", "acc", "sigmoid", {"a": 0.7, "L0": 2.0, "k": -4.0,
                        "b": 0.25}, {}, 20, 0.01, None, 0, (1.265, 3.726), (0.3, 0.9), {},
                        None)  # fmt: skip

    def made_by(column, predictor):
        return Forecast(column, "quiz", "acc", 0.5, None, predictor, "", 0.02, 0.7, 0.9, None)

    got = [made_by("a", "val-loss"), made_by("b", "val-loss-exp"), made_by("c", "task-loss")]
    links = [link("a"), link("b"), link("c")]
    said = loss_beyond_links(got, links, 1.071)
    assert set(said) == {"a", "b"} and said["a"].startswith(
        "the plan's loss 1.071 lies outside the runs' losses 1.265–3.726"
    )
    assert loss_beyond_links(got, links, 2.0) == {} and loss_beyond_links(got, links, None) == {}
    assert loss_beyond_links(got, links, 4.0, "the model's")["a"].startswith("the model's loss 4")
