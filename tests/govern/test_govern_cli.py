"""`cdlaw govern` end to end on small files: a planted log, a run folder, and every bad
input it refuses in one sentence with exit code 2."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from plantedcurves import planted_frame, write_run_folder

from cdlaw.cli import main
from cdlaw.fit.io import FitResult
from cdlaw.govern.cooldown import DEMO

BUDGET = ["--budget-flops", "1e19", "--unique-tokens", "1e9", "--law", "qin2026"]
# The WSD relation's tests: the curve law's are in test_trainer_logs.py and below.
RUN = [
    "--model",
    "relation",
    "--n-params",
    "100M",
    "--fresh-tokens",
    "1e9",
    "--decay-frac",
    "0.2",
    "--strategy",
    "paraphrase",
]


def cli(capsys, *args) -> tuple[int, str, str]:
    sys.argv = ["cdlaw", "govern", *map(str, args)]
    with pytest.raises(SystemExit) as e:
        main()
    got = capsys.readouterr()
    return e.value.code, got.out, got.err


def planted_csv(tmp_path, **kw):
    path = tmp_path / "log.csv"
    frame = planted_frame(np.linspace(2e8, 3e9, 30), strategy="paraphrase", **kw)
    frame.to_csv(path, index=False)
    return path


def test_a_planted_log_end_to_end(tmp_path, capsys):
    figure = tmp_path / "govern.png"
    code, out, err = cli(capsys, planted_csv(tmp_path), *BUDGET, *RUN, "--json", "--figure", figure)
    assert code == 0, err
    d = json.loads(out)
    assert d["action"] == "continue" and d["gain_now"] > d["threshold"]
    assert d["cross_tokens"] > d["tokens_now"] == 3e9
    names = [o["name"] for o in d["options"]]
    assert names[:3] == ["cool down now", "planned end", "best stop"]
    assert figure.stat().st_size > 10_000


def test_the_human_output_names_the_action_and_the_threshold(tmp_path, capsys):
    from cdlaw.cli import out as console

    code, out, _ = cli(capsys, planted_csv(tmp_path), *BUDGET, *RUN)
    assert code == 0
    assert "continue" in out and "λ(C)" in out and "G_t meets λ" in out
    assert "run                    N 1e+08, D 1e+09, paraphrase" in out
    # a panel of sentences wraps to the console (80 columns on a pipe), as plan's does
    assert max(map(len, out.splitlines())) <= console.width, out


def test_a_run_folder_says_what_the_run_is(tmp_path, capsys):
    # the run's own relation is the demo's, which `cdlaw govern` uses without --cooldown-from
    frame = planted_frame(np.linspace(2e8, 3e9, 30), strategy="paraphrase", ratio=DEMO)
    folder = write_run_folder(tmp_path / "runs" / "abc", frame, 100e6, 1e9, 4e9, "paraphrase")
    code, out, err = cli(capsys, folder, *BUDGET, "--json", "--model", "relation")
    assert code == 0, err
    d = json.loads(out)
    assert d["model"] == "WSD relation" and d["model_reason"] == "--model relation"
    assert (d["n_params"], d["fresh_tokens"], d["strategy"]) == (100e6, 1e9, "paraphrase")
    assert d["options"][1]["end_tokens"] == 5e9  # its planned D + D′
    assert d["offset"] == pytest.approx(0.02, abs=1e-6)
    # the demo's ratio, measured on 26K–200K-parameter runs at lr 0.01–0.03, says so
    assert any("measured on runs of 26.3K–200K parameters" in w for w in d["warnings"])
    assert d["cooldown"]["n_params"] == [26328.0, 200400.0]


def test_watch_decides_once_per_new_point(tmp_path, capsys):
    code, out, _ = cli(
        capsys, planted_csv(tmp_path), *BUDGET, *RUN, "--json", "--watch", "--every", "0",
        "--reads", "3",
    )  # fmt: skip
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["action"] == "continue"


def bad(tmp_path, capsys, frame: pd.DataFrame, *extra) -> str:
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    code, out, err = cli(capsys, path, *BUDGET, *RUN, *extra)
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def test_bad_logs_are_refused_in_one_sentence(tmp_path, capsys):
    good = planted_frame(np.linspace(2e8, 3e9, 30))
    err = bad(tmp_path, capsys, good.drop(columns="tokens"))
    assert "neither a tokens column" in err and "bad.csv" in err
    steps = good.rename(columns={"tokens": "step"})
    assert "--batch-tokens" in bad(tmp_path, capsys, steps)
    back = good.copy()
    back.loc[10, "tokens"] = back.loc[5, "tokens"]
    err = bad(tmp_path, capsys, back)
    assert "line 12" in err and "does not increase" in err
    high = good.copy()
    high.loc[7, "loss"] = 20.0
    err = bad(tmp_path, capsys, high, "--vocab-size", "50K")
    assert "ln V" in err and "line 9" in err
    assert "calibrating needs 3" in bad(tmp_path, capsys, good.iloc[:5])
    assert "--decay-frac 0.0 must be between 0 and 1" in bad(tmp_path, capsys, good,
                                                             "--decay-frac", "0")  # fmt: skip


def test_a_law_without_the_runs_strategy_is_refused(tmp_path, capsys):
    path = planted_csv(tmp_path)
    code, _, err = cli(capsys, path, *BUDGET, *RUN[:-1], "distilled")
    assert code == 2 and "distilled" in err


def test_a_tensorboard_log_without_its_extra_names_the_extra(tmp_path, capsys):
    try:
        import tensorboard  # noqa: F401

        pytest.skip("tensorboard is installed: the refusal is for installs without it")
    except ImportError:
        pass
    logs = tmp_path / "tb"
    logs.mkdir()
    (logs / "events.out.tfevents.1.host").write_bytes(b"")
    code, _, err = cli(capsys, logs, *BUDGET, *RUN)
    assert code == 2 and "tensorboard" in err


def test_cooldown_from_a_sweep_replaces_the_demo_ratio(tmp_path, capsys):
    from plantedcurves import write_planted_sweep

    runs = write_planted_sweep(tmp_path / "runs", ratio=0.7)
    code, out, err = cli(
        capsys, planted_csv(tmp_path), *BUDGET, *RUN, "--json", "--cooldown-from", runs
    )
    assert code == 0, err
    cooldown = json.loads(out)["cooldown"]
    assert cooldown["ratio"] == pytest.approx(0.7) and cooldown["source"] == str(runs)


def test_a_first_loss_at_about_ln_v_is_an_untrained_model_not_bad_input(tmp_path):
    import math

    from cdlaw.govern.curve import CurveOptions, read_curve

    frame = planted_frame(np.linspace(2e8, 3e9, 30))
    frame.loc[0, "loss"] = 1.01 * math.log(50_000)
    frame.to_csv(tmp_path / "log.csv", index=False)
    curve = read_curve(tmp_path / "log.csv", CurveOptions(vocab_size=50_000))
    assert curve.loss[0] == frame.loc[0, "loss"]


def test_a_log_reads_numbers_as_the_command_line_does(tmp_path):
    from cdlaw.govern.curve import read_curve

    frame = planted_frame(np.linspace(2e8, 3e9, 30))
    frame["tokens"] = [f"{t / 1e6:g}M" for t in frame["tokens"]]  # 200M, …, 3000M
    frame.to_csv(tmp_path / "log.csv", index=False)
    curve = read_curve(tmp_path / "log.csv")
    assert curve.tokens[0] == 2e8 and curve.tokens[-1] == 3e9


def test_a_run_folder_checks_its_loss_against_its_own_vocabulary(tmp_path, capsys):
    frame = planted_frame(np.linspace(2e8, 3e9, 30), strategy="paraphrase", ratio=DEMO)
    folder = write_run_folder(tmp_path / "runs" / "abc", frame, 100e6, 1e9, 4e9, "paraphrase",
                              vocab=10)  # fmt: skip
    code, out, err = cli(capsys, folder, *BUDGET)
    assert code == 2 and out == "" and "ln V" in err and "V = 10)" in err
    relation = ["--model", "relation"]  # 19.5M steps of 256 tokens: not for a curve law
    code, _, err = cli(
        capsys, folder, *BUDGET, *relation, "--vocab-size", "100K"
    )  # the option wins
    assert code == 0, err


def test_a_run_folder_governs_its_validation_loss_once_it_can_calibrate_on_it(tmp_path):
    from cdlaw.govern.curve import read_curve

    frame = planted_frame(np.linspace(2e8, 3e9, 30), strategy="paraphrase", ratio=DEMO)
    folder = write_run_folder(tmp_path / "abc", frame, 100e6, 1e9, 4e9, "paraphrase")
    assert read_curve(folder).loss_column == "val_loss"
    metrics = pd.read_parquet(folder / "metrics.parquet")
    metrics.loc[metrics.index[:-2], "val_loss"] = np.nan  # evaluated twice so far
    metrics.to_parquet(folder / "metrics.parquet")
    assert read_curve(folder).loss_column == "train_loss"


def test_bad_run_facts_and_options_are_refused_in_one_sentence(tmp_path, capsys):
    good = planted_frame(np.linspace(2e8, 3e9, 30))
    for option in ("--n-params", "--fresh-tokens", "--planned-tokens", "--batch-tokens"):
        err = bad(tmp_path, capsys, good, option, "-5")
        assert f"{option} must be a positive number" in err
    assert "exceed --unique-tokens" in bad(tmp_path, capsys, good, "--unique-tokens", "1e8")
    assert "--reads counts readings of --watch" in bad(tmp_path, capsys, good, "--reads", "3")
    assert "--every nan" in bad(tmp_path, capsys, good, "--watch", "--every", "nan")
    negative = good.copy()
    negative.loc[12, "loss"] = -1.0
    assert "line 14: loss -1 is not positive" in bad(tmp_path, capsys, negative)


def test_a_run_beyond_the_laws_range_needs_extrapolate(tmp_path, capsys):
    # qin2026 was fitted on 14M–190M parameters: 100K is 140× below, past the 30× limit
    path = tmp_path / "small.csv"
    planted_frame(np.linspace(2e8, 3e9, 30), n=100e3).to_csv(path, index=False)
    small = [*RUN[:2], *RUN[4:], "--n-params", "100K"]
    code, out, err = cli(capsys, path, *BUDGET, *small)
    assert code == 2 and out == "" and "extrapolation limit" in err and "--extrapolate" in err
    code, out, err = cli(capsys, path, *BUDGET, *small, "--extrapolate", "--json")
    assert code == 0, err
    assert any("extrapolated beyond" in w for w in json.loads(out)["warnings"])


def test_a_law_that_predicts_no_loss_is_refused(tmp_path, capsys):
    # a curve 100× below the law's: calibrated, the law goes below 0 ahead of it
    frame = planted_frame(np.linspace(2e8, 3e9, 30))
    frame["loss"] /= 100
    assert "predicts a loss of" in bad(tmp_path, capsys, frame)


def test_a_law_without_derived_tokens_cannot_govern_a_run_past_d(tmp_path, capsys):
    law = [*BUDGET[:-1], "chinchilla-hoffmann"]
    code, _, err = cli(capsys, planted_csv(tmp_path), *law, *RUN[:-2])
    assert code == 2 and "gives tokens past D no value" in err


def test_a_trainers_layout_governs_as_one_table(tmp_path, capsys):
    """Evaluation rows without the lr (a trainer's layout), a step-0 evaluation and loggers'
    column names give the decision the plain table gives."""
    good = planted_frame(np.linspace(2e8, 3e9, 30))
    plain = tmp_path / "plain.csv"
    good.to_csv(plain, index=False)
    steps = good.assign(step=good.tokens / 1000)
    train = steps.assign(loss=np.nan)[["step", "lr"]].rename(columns={"lr": "train/learning_rate"})
    evals = steps[["step", "loss"]].rename(columns={"loss": "eval/loss"})
    split = pd.concat([train, evals]).sort_values("step", kind="stable")
    first = pd.DataFrame({"step": [0], "eval/loss": [9.0], "train/learning_rate": [0.0]})
    split = pd.concat([first, split]).rename(columns={"step": "train/global_step"})
    split.to_csv(tmp_path / "split.csv", index=False)
    _, want, _ = cli(capsys, plain, *BUDGET, *RUN, "--json")
    code, got, err = cli(capsys, tmp_path / "split.csv", *BUDGET, *RUN, "--batch-tokens", "1000",
                         "--json")  # fmt: skip
    assert code == 0, err
    want, got = json.loads(want), json.loads(got)
    assert got["loss_column"] == "eval/loss"
    for key in ("action", "gain_now", "offset", "tokens_now", "cross_tokens"):
        assert got[key] == pytest.approx(want[key]), key


def test_a_log_whose_loss_stops_being_finite_warns(tmp_path, capsys):
    frame = planted_frame(np.linspace(2e8, 3e9, 30))
    frame.loc[27:, "loss"] = np.nan
    path = tmp_path / "diverged.csv"
    frame.to_csv(path, index=False)
    code, out, err = cli(capsys, path, *BUDGET, *RUN, "--json")
    assert code == 0, err
    assert any("has the run diverged" in w for w in json.loads(out)["warnings"])


def test_a_cosine_log_is_governed_by_its_curve_law_not_the_wsd_relation(tmp_path, capsys):
    frame = planted_frame(np.linspace(2e8, 3e9, 30))
    steps = frame["tokens"] / 2**20  # as the curve law reads a log of tokens alone
    frame["lr"] = 1e-3 * (0.1 + 0.45 * (1 + np.cos(np.pi * steps / 6000)))
    err = bad(tmp_path, capsys, frame)  # RUN asks for the relation
    assert "needs a stable phase" in err and "--model curve" in err
    path = tmp_path / "cosine.csv"
    frame.to_csv(path, index=False)
    code, out, err = cli(capsys, path, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["model"] == "curve law" and d["schedule"].startswith("cosine")
    assert d["offset"] is None and d["cooldown"] is None


def test_a_sweeps_runs_folder_is_told_to_name_one_run(tmp_path, capsys):
    frame = planted_frame(np.linspace(2e8, 3e9, 30), strategy="paraphrase", ratio=DEMO)
    runs = tmp_path / "runs"
    write_run_folder(runs / "abc", frame, 100e6, 1e9, 4e9, "paraphrase")
    pd.DataFrame({"run_id": ["abc"]}).to_parquet(runs / "summary.parquet")
    (runs / "fit.json").write_text("{}")
    code, out, err = cli(capsys, runs, "--budget-flops", "1e19", "--unique-tokens", "1e9")
    said = " ".join(err.split())
    assert code == 2 and out == "" and "is the runs folder of a sweep, not one run" in said
    assert f"(e.g. {runs / 'abc'})" in said


def test_a_log_that_does_not_say_its_vocabulary_is_checked_against_the_laws(tmp_path, capsys):
    """A foreign log governed by a fit whose runs had V = 512: a loss above ln 512 is not
    nats per token of a run that law describes, and is refused unless --vocab-size says
    the run's own V."""
    law = Path(__file__).parents[1] / "fit" / "golden" / "demo-runs.fit.json"
    frame = planted_frame(
        np.linspace(2e5, 6e5, 20), n=60e3, fresh=96e3, law=FitResult.read(law).law
    )
    frame.loc[6, "loss"] = 7.0  # above 1.05 · ln 512 = 6.55, below 1.05 · ln 50K
    path = tmp_path / "log.csv"
    frame.to_csv(path, index=False)
    run = ["--n-params", "60K", "--fresh-tokens", "96K", "--law", law]
    budget = ["--budget-flops", "2e12", "--unique-tokens", "96K"]
    code, out, err = cli(capsys, path, *run, *budget)
    assert code == 2 and out == "", err
    assert "ln V = 6.238" in err and "the law's runs'" in err and "line 8" in err
    code, _, err = cli(capsys, path, *run, *budget, "--vocab-size", "50K")
    assert "ln V" not in err


def test_a_run_before_its_d_shows_no_switch_that_would_change_nothing(tmp_path, capsys):
    """Every ending the budget allows lies before D = 2e10: switching strategy there is the
    run's own ending, so no "switch to" row repeats the best stop's numbers."""
    path = planted_csv(tmp_path)
    budget = ["--budget-flops", "1e19", "--unique-tokens", "2e10", "--law", "qin2026"]
    run = ["--model", "relation", "--n-params", "100M", "--decay-frac", "0.2",
           "--fresh-tokens", "2e10", "--strategy", "repetition"]  # fmt: skip
    code, out, err = cli(capsys, path, *budget, *run, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert [o["name"] for o in d["options"]] == ["cool down now", "planned end", "best stop"]
    code, out, _ = cli(capsys, path, *budget, *run)
    assert "switch to" not in out
