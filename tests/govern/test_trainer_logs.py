"""`cdlaw govern` on logs as trainers write them (a W&B history export, a W&B chart export,
Hugging Face's trainer_state.json), without edits; and every bad input refused in one
sentence with exit code 2."""

import json
import sys

import numpy as np
import pandas as pd
import pytest

from cdlaw.cli import main
from cdlaw.govern.curve import read_curve
from cdlaw.govern.lr_plan import named_plan
from cdlaw.govern.schedule_laws import TISSUE, annealing, unit

PEAK, STEPS, WARMUP, BATCH = 3e-4, 8000, 200, 2**19


def cli(capsys, *args) -> tuple[int, str, str]:
    sys.argv = ["cdlaw", "govern", *map(str, args)]
    with pytest.raises(SystemExit) as e:
        main()
    got = capsys.readouterr()
    return e.value.code, got.out, got.err


def planted_loss(steps, shape="cosine", noise=0.01, seed=0):
    """A training loss under the planned schedule: Tissue et al.'s law, gain 0.13 nats,
    with the step-to-step noise of a training loss."""
    plan = named_plan(shape, STEPS, WARMUP, 0.1 if shape == "cosine" else 0.0, PEAK)
    s1 = np.cumsum(plan.lr)[steps - 1]
    clean = 2.8 + 1.2 * s1**-0.45 - 0.13 / (PEAK * unit(TISSUE)) * annealing(TISSUE, plan.lr, steps)
    rng = np.random.default_rng(seed)
    return plan, clean, clean * (1 + noise * rng.standard_normal(len(steps)))


def wandb_history(path, upto=STEPS // 2, every=10):
    """A W&B history export: _step counts log calls, train/global_step the optimizer's,
    an eval row every 500 steps with only eval/loss."""
    steps = np.arange(every, upto + 1, every)
    plan, _, loss = planted_loss(steps)
    train = pd.DataFrame({
        "_step": np.arange(len(steps)) * 2, "_runtime": steps * 0.5, "_timestamp": 1.7e9 + steps,
        "train/global_step": steps, "throughput/total_tokens": steps * BATCH,
        "train/loss": loss, "optim/learning_rate_group0": plan.lr[steps - 1],
    })  # fmt: skip
    evals = train[train["train/global_step"] % 500 == 0][["_step", "train/global_step"]]
    evals = evals.assign(_step=evals["_step"] + 1, **{"eval/loss": 3.0})
    pd.concat([train, evals]).sort_values("_step").to_csv(path, index=False)
    return plan


def test_a_wandb_history_export_is_read_as_its_trainer_wrote_it(tmp_path):
    wandb_history(tmp_path / "export.csv")
    curve = read_curve(tmp_path / "export.csv")
    assert curve.loss_column == "train/loss"  # eval/loss has 8 points: too few
    assert curve.steps is not None and curve.steps[0] == 10  # train/global_step, not _step
    assert curve.tokens_per_step == BATCH and curve.lr is not None


def test_a_row_that_logs_tokens_but_not_its_step_takes_the_step_its_tokens_say(tmp_path):
    wandb_history(tmp_path / "export.csv")
    frame = pd.read_csv(tmp_path / "export.csv")
    frame.loc[frame.index[5::7], "train/global_step"] = np.nan
    frame.to_csv(tmp_path / "gaps.csv", index=False)
    curve = read_curve(tmp_path / "gaps.csv")
    assert curve.steps is not None and np.array_equal(
        curve.steps, read_curve(tmp_path / "export.csv").steps
    )


def test_a_cosine_runs_wandb_export_predicts_its_planned_end_within_its_band(tmp_path, capsys):
    wandb_history(tmp_path / "export.csv")
    figure = tmp_path / "govern.png"
    code, out, err = cli(capsys, tmp_path / "export.csv", "--json", "--figure", figure)
    assert code == 0, err
    assert figure.stat().st_size > 10_000
    d = json.loads(out)
    assert d["model"] == "curve law" and d["schedule"].startswith("cosine")
    planned = next(o for o in d["options"] if o["name"] == "planned end")
    _, truth, _ = planted_loss(np.array([STEPS]))
    lo, hi = planned["loss_ci95"]
    assert lo <= truth[0] <= hi and planned["loss"] == pytest.approx(truth[0], rel=0.01)
    assert planned["end_tokens"] == pytest.approx(STEPS * BATCH, rel=0.01)
    # told the schedule instead of reading it off the lr column: the same prediction
    code, out2, err = cli(capsys, tmp_path / "export.csv", "--json", "--schedule", "cosine",
                          "--warmup", WARMUP, "--final-lr-ratio", "0.1",
                          "--planned-tokens", STEPS * BATCH)  # fmt: skip
    assert code == 0, err
    again = next(o for o in json.loads(out2)["options"] if o["name"] == "planned end")
    assert again["loss"] == pytest.approx(planned["loss"], rel=2e-3)


def test_a_wandb_chart_export_names_columns_by_run_and_metric(tmp_path):
    steps = np.arange(20, 4001, 20)
    plan, _, loss = planted_loss(steps)
    pd.DataFrame({
        "Step": steps, "run-7 - train/loss": loss, "run-7 - train/loss__MIN": loss - 0.1,
        "run-7 - train/loss__MAX": loss + 0.1, "run-7 - lr-AdamW": plan.lr[steps - 1],
    }).to_csv(tmp_path / "chart.csv", index=False)  # fmt: skip
    curve = read_curve(tmp_path / "chart.csv")
    assert curve.loss_column == "train/loss" and curve.loss[0] == loss[0]
    assert curve.lr is not None and curve.lr[-1] == plan.lr[3999]


@pytest.mark.parametrize("column", ["train/CrossEntropyLoss", "train/cross_entropy_loss"])
def test_a_cross_entropy_loss_column_is_read_without_naming_it(tmp_path, column):
    steps = np.arange(20, 4001, 20)
    plan, _, loss = planted_loss(steps)
    pd.DataFrame({
        "_step": np.arange(len(steps)), "train/global_step": steps, column: loss,
        "train/ZLoss": loss * 1e-4, "optim/lr": plan.lr[steps - 1],
    }).to_csv(tmp_path / "olmo.csv", index=False)  # fmt: skip
    curve = read_curve(tmp_path / "olmo.csv")
    assert curve.loss_column == column and curve.loss[0] == loss[0]


def trainer_state(path, upto=STEPS // 2):
    """Hugging Face Trainer's trainer_state.json: a linear schedule (its default), a row
    per 10 steps, an eval row per 500, the run's summary row last."""
    steps = np.arange(10, upto + 1, 10)
    plan, _, loss = planted_loss(steps, "linear")
    history = [{"epoch": s / 1000, "grad_norm": 1.1, "learning_rate": float(plan.lr[s - 1]),
                "loss": float(x), "step": int(s)} for s, x in zip(steps, loss, strict=True)]  # fmt: skip
    history += [
        {"epoch": s / 1000, "eval_loss": 3.1, "step": int(s)} for s in range(500, upto + 1, 500)
    ]
    history.sort(key=lambda r: r["step"])
    history.append({"epoch": upto / 1000, "step": upto, "train_runtime": 99.0, "train_loss": 3.2})
    state = {"global_step": upto, "max_steps": STEPS, "log_history": history,
             "train_batch_size": 8}  # fmt: skip
    path.write_text(json.dumps(state))
    return plan


def test_a_hugging_face_trainer_state_is_governed_in_steps(tmp_path, capsys):
    trainer_state(tmp_path / "trainer_state.json")
    code, out, err = cli(capsys, tmp_path / "trainer_state.json", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["loss_column"] == "loss" and d["schedule"].startswith("linear, 8,000 steps")
    planned = next(o for o in d["options"] if o["name"] == "planned end")
    assert planned["end_tokens"] is None and planned["end_step"] == STEPS  # no tokens logged
    _, truth, _ = planted_loss(np.array([STEPS]), "linear")
    assert planned["loss_ci95"][0] <= truth[0] <= planned["loss_ci95"][1]


def bad(capsys, path, *extra) -> str:
    code, out, err = cli(capsys, path, *extra)
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_bad_logs_and_schedules_are_refused_in_one_sentence(tmp_path, capsys):
    wandb_history(tmp_path / "export.csv")
    frame = pd.read_csv(tmp_path / "export.csv")
    frame.drop(columns=["_step", "train/global_step", "throughput/total_tokens"]).to_csv(
        tmp_path / "noaxis.csv", index=False
    )
    assert "--step-column" in bad(capsys, tmp_path / "noaxis.csv")
    back = frame.copy()
    back.loc[40, "train/global_step"] = 5
    back.to_csv(tmp_path / "back.csv", index=False)
    assert "does not increase" in bad(capsys, tmp_path / "back.csv")
    (tmp_path / "short.csv").write_text("step,lr\n0,0\n100,3e-4\n1000,3e-4\n")
    err = bad(capsys, tmp_path / "export.csv", "--schedule-file", tmp_path / "short.csv")
    assert "ends at step 1,000, before the log's last step 4,000" in err
    frame.drop(columns=["optim/learning_rate_group0"]).to_csv(tmp_path / "nolr.csv", index=False)
    err = bad(capsys, tmp_path / "nolr.csv")
    assert "no learning-rate column" in err and "--schedule" in err
    assert "--planned-tokens" in bad(capsys, tmp_path / "nolr.csv", "--schedule", "cosine")
    frame.iloc[:60].to_csv(tmp_path / "few.csv", index=False)  # 600 steps, 12 points past 20%
    err = bad(capsys, tmp_path / "few.csv", "--schedule", "cosine", "--planned-tokens", "4.2B",
              "--step-column", "train/global_step", "--loss-column", "eval/loss")  # fmt: skip
    assert "the curve law needs 8" in err
    assert "--loss-column" in bad(capsys, tmp_path / "export.csv", "--loss-column", "nope")
