"""`cdlaw plan` from the command line: human and JSON output, frontier, exit codes."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from cdlaw.cli import main
from cdlaw.law import PRESETS
from cdlaw.plan.planner import plan
from cdlaw.plan.result import Plan
from cdlaw.plan.source import load_law

QIN = PRESETS["qin2026"]


def run(monkeypatch, capsys, *args):
    """Run `cdlaw plan ARGS` in-process through the real entry point; (code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["cdlaw", "plan", *args])
    with pytest.raises(SystemExit) as e:
        main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def test_json_is_the_library_plan(monkeypatch, capsys):
    code, out, err = run(
        monkeypatch, capsys, "--budget-flops", "1e21", "--unique-tokens", "5B", "--json"
    )
    assert code == 0 and err == ""
    got = json.loads(out)
    want = json.loads(json.dumps(plan(QIN, 1e21, 5e9).to_dict()))
    assert got == want
    assert Plan.from_dict(got).to_dict() == got  # and it reads back
    for key in (
        "n_params",
        "fresh_tokens",
        "derived_tokens",
        "strategy",
        "epochs",
        "paraphrase_passes",
        "predicted_loss",
        "predicted_loss_ci95",
        "regime",
        "loss_one_epoch",
        "loss_data_floor",
        "loss_model_floor",
        "saturation",
        "tolerance",
        "marginal_gain_per_flop",
        "naive",
        "four_epoch",
        "warnings",
    ):
        assert key in got
    assert got["strategy"] == "repetition" and got["unique_tokens"] == 5e9


def test_human_output_reads_well(monkeypatch, capsys):
    code, out, err = run(
        monkeypatch,
        capsys,
        "--budget-flops",
        "1e21",
        "--unique-tokens",
        "5e9",
        "--law",
        "qin2026",
        "--gpu-memory",
        "80",
        "--gpu-flops",
        "989e12",
        "--mfu",
        "0.4",
    )
    assert code == 0 and "4.43B parameters" in out  # the plan on stdout, warnings on stderr
    assert err.startswith("warning:") and "parameters" not in err
    p = plan(QIN, 1e21, 5e9, gpu_memory_gib=80, gpu_flops=989e12, mfu=0.4)
    text = " ".join((out + err).split())
    for piece in (
        "4.43B parameters",
        "repetition, 7.53 epochs",
        f"{p.predicted_loss:.4f} nats/token",
        "compute-bound",
        f"L_1ep {p.loss_one_epoch:.4f}",
        f"L_D {p.loss_data_floor:.4f}",
        f"L_N {p.loss_model_floor:.4f}",
        "saturation 0.9",
        "tolerance 0.01",
        f"{p.marginal_gain_per_doubling:.4f} nats if C doubles",
        f"naive 2.1B 5B 74.3B repetition 15.9 epochs {p.naive.predicted_loss:.4f} "
        f"{p.naive.loss_gap:+.4f}",
        f"≤ 4 epochs 8.33B 5B 15B repetition 4 epochs {p.four_epoch.predicted_loss:.4f}",
        "does not fit in 80 GiB",
        "7.38× the largest fitted size (600M)",
        "GPU hours 702",
    ):
        assert piece in text, piece


def test_frontier_json_has_the_keys_the_plot_reads(monkeypatch, capsys):
    code, out, _ = run(
        monkeypatch,
        capsys,
        "--frontier",
        "--frontier-range",
        "1e18:1e22",
        "--frontier-points",
        "5",
        "--unique-tokens",
        "5e9",
        "--extrapolate",  # qin2026's plan at 1e22 is 47× its largest fitted size
        "--json",
    )
    assert code == 0
    got = json.loads(out)
    assert got["rows"][0]["extrapolated"] == [] and got["rows"][-1]["extrapolated"]
    assert got["law"] == "qin2026" and got["unique_tokens"] == 5e9 and got["strategy"] == "auto"
    assert got["law_params"] == QIN.to_dict()
    budgets = [r["budget_flops"] for r in got["rows"]]
    np.testing.assert_allclose(budgets, np.logspace(18, 22, 5), rtol=1e-12)
    assert got["rows"][2] == json.loads(json.dumps(plan(QIN, budgets[2], 5e9).to_dict()))


def test_frontier_human_table(monkeypatch, capsys):
    code, out, _ = run(
        monkeypatch, capsys, "--frontier", "--frontier-points", "3", "--law", "chinchilla-hoffmann"
    )
    assert code == 0
    assert "frontier: law chinchilla-hoffmann, U = unlimited" in out
    assert out.count("none") >= 3


def test_frontier_uses_column_counts_epochs_or_passes(monkeypatch, capsys):
    """Each row's "uses" is its strategy and how many epochs (repetition) or passes it
    makes, as the one-budget plan's `uses` says it."""
    code, out, _ = run(monkeypatch, capsys, "--frontier", "--frontier-range", "1e20:1e21",
                       "--frontier-points", "2", "--unique-tokens", "5e9")  # fmt: skip
    assert code == 0 and "rep 7.53×" in out and "rep 4.23×" in out
    assert plan(QIN, 1e21, 5e9).best.uses == "7.53 epochs"
    para = plan(QIN, 1e21, 5e9, "paraphrase").best
    assert para.uses == f"{para.derived_ratio:.3g} passes" and para.uses_count == para.derived_ratio


def test_a_plan_far_beyond_its_fit_needs_extrapolate_and_then_says_so(
    monkeypatch, capsys, tmp_path
):
    # as the demo's fit (runs of 26K–200K parameters) planning C = 1e21: N 22,000× its runs
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({**QIN.to_dict(), "data_range": {"n_params": [26328, 2e5]}}))
    args = ("--budget-flops", "1e21", "--unique-tokens", "5e9", "--law", str(fit))
    code, out, err = run(monkeypatch, capsys, *args)
    message = " ".join(err.split())
    assert code == 2 and out == "" and message.startswith("error: the plan is beyond the 30×")
    assert "pass --extrapolate to plan it anyway" in message and message.count(". ") == 0
    code, out, err = run(monkeypatch, capsys, *args, "--extrapolate")
    assert code == 0
    first = out.splitlines()[0]
    assert first.startswith("extrapolated beyond 30× the fitted range (--extrapolate): N = 4.43B")
    code, out, _ = run(monkeypatch, capsys, *args, "--extrapolate", "--json")
    assert code == 0 and json.loads(out)["extrapolated"] == [
        "N = 4.43B is 22,142× the largest fitted size (200K)"
    ]


def test_a_plan_far_beyond_its_law_reads_its_numbers_in_e_notation(monkeypatch, capsys):
    # at 1e300 FLOPs N is 6.8e+143× the largest fitted size: once a 145-digit integer
    import re

    args = ("--budget-flops", "1e300", "--unique-tokens", "5e9", "--law", "qin2026")
    code, out, err = run(monkeypatch, capsys, *args)
    message = " ".join(err.split())
    assert code == 2 and "N = 4.08e+152 is 6.8e+143× the largest fitted size (600M)" in message
    code, out, err = run(monkeypatch, capsys, *args, "--extrapolate", "--gpu-memory", "80")
    assert code == 0 and "7.6e+143 GiB" in out
    assert not re.search(r"\d[\d,]{20,}", out + err)  # no number of 20 digits or more


def test_a_plan_without_a_band_says_why(monkeypatch, capsys, tmp_path):
    args = ("--budget-flops", "1e21", "--unique-tokens", "5e9")
    code, out, _ = run(monkeypatch, capsys, *args, "--law", "qin2026")
    text = " ".join(out.split()).replace("│ │", "")
    assert code == 0 and "95% band none: a preset carries no bootstrap refits; fit a table " in text
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({**QIN.to_dict(), "method": "joint"}))
    code, out, _ = run(monkeypatch, capsys, *args, "--law", str(fit), "--json")
    got = json.loads(out)
    assert got["predicted_loss_ci95"] is None
    assert got["no_band_reason"].startswith("the fit has no bootstrap refits; refit with")


def test_fit_json_law_with_fixed_n_params(monkeypatch, capsys, tmp_path):
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({**QIN.to_dict(), "data_range": {"n_params": [1e7, 6e8]}}))
    code, out, _ = run(
        monkeypatch,
        capsys,
        "--budget-flops",
        "1e19",
        "--unique-tokens",
        "1e9",
        "--law",
        str(fit),
        "--n-params",
        "300M",
        "--strategy",
        "paraphrase",
        "--json",
    )
    assert code == 0
    got = json.loads(out)
    assert got["n_params"] == 3e8 and got["n_params_fixed"] and got["strategy"] == "paraphrase"
    assert got["derived_tokens"] == pytest.approx(1e19 / 1.8e9 - 1e9, rel=1e-14)
    assert got["law"] == str(fit) and got["warnings"] == []
    want = plan(load_law(str(fit)), 1e19, 1e9, "paraphrase", n_params=3e8).to_dict()
    assert got == json.loads(json.dumps(want))


def test_a_frontier_leaves_out_the_budgets_beyond_the_limit_and_names_them(monkeypatch, capsys):
    """qin2026 (fitted up to 600M) planned over 1e18–1e24: from 1e22 on its N is beyond
    30× 600M, so those budgets are left out, named on stderr and in the JSON."""
    code, out, err = run(monkeypatch, capsys, "--frontier", "--frontier-range", "1e18:1e24",
                         "--unique-tokens", "5e9", "--json")  # fmt: skip
    assert code == 0, err
    got = json.loads(out)
    np.testing.assert_allclose(got["beyond_limit"], np.logspace(22, 24, 5), rtol=1e-12)
    budgets = [r["budget_flops"] for r in got["rows"]]
    np.testing.assert_allclose(budgets, np.logspace(18, 21.5, 8), rtol=1e-12)
    assert all(r["extrapolated"] == [] and r["n_params"] < 30 * 600e6 for r in got["rows"])
    assert "5 budget(s) (1e+22, 3.16e+22, 1e+23, 3.16e+23, 1e+24 FLOPs) left out" in err
    assert "pass --extrapolate" in err


@pytest.mark.parametrize(
    "args,text",
    [
        (["--budget-flops", "0"], "--budget-flops must be a positive number"),
        (["--budget-flops", "-1e21"], "--budget-flops must be a positive number"),
        (["--budget-flops", "lots"], "--budget-flops must be a number like 1e21"),
        ([], "--budget-flops is required"),
        (["--budget-flops", "1e21", "--law", "gpt5"], "not a preset (chinchilla-hoffmann"),
        (["--budget-flops", "1e21", "--law", "runs/none/fit.json"], "no such fit file"),
        (
            ["--budget-flops", "1e21", "--law", "muennighoff2023", "--strategy", "paraphrase"],
            "has no paraphrase parameters (it has: repetition)",
        ),
        (["--budget-flops", "1e21", "--n-params", "0"], "--n-params must be a positive number"),
        (["--budget-flops", "1e21", "--gpu-flops", "1e15", "--mfu", "1.2"], "--mfu 1.2"),
        (["--budget-flops", "1e21", "--mfu", "0.5"], "needs --gpu-flops"),
        (["--frontier", "--frontier-range", "1e22:1e18"], "the end must exceed the start"),
        (["--frontier", "--budget-flops", "1e21"], "--budget-flops would be ignored"),
        (
            ["--budget-flops", "1e21", "--unique-tokens", "5"],
            "--unique-tokens 5 is fewer tokens than one training sequence (--seq-len 4096)",
        ),
        (
            ["--frontier", "--unique-tokens", "5e9", "--frontier-range", "1e23:1e24"],
            "the plan at C = 1e+23 is beyond the 30× extrapolation limit",
        ),
    ],
)
def test_bad_input_exits_2_with_one_sentence(monkeypatch, capsys, args, text):
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    message = " ".join(err.split())
    assert message.startswith("error: ") and text in message, message
    assert message.replace("e.g. ", "").count(". ") == 0  # one sentence
    assert "Traceback" not in err


def test_entry_point_end_to_end(tmp_path):
    """The real `python -m cdlaw` process: JSON on stdout; a bad fit file exits 2."""
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdlaw",
            "plan",
            "--budget-flops",
            "1e21",
            "--unique-tokens",
            "5e9",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["n_params"] == plan(QIN, 1e21, 5e9).n_params
    not_a_fit = tmp_path / "fit.json"
    not_a_fit.write_text('{"rows": []}')
    bad = subprocess.run(
        [sys.executable, "-m", "cdlaw", "plan", "--budget-flops", "1e21", "--law", str(not_a_fit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert "fit.json: not a fit" in " ".join(bad.stderr.split())
    assert "Traceback" not in bad.stderr


def test_help_shows_an_example():
    from typer.testing import CliRunner

    from cdlaw.cli import app, register_commands

    register_commands()
    result = CliRunner().invoke(app, ["plan", "--help"])
    assert result.exit_code == 0
    assert "Example: cdlaw plan --budget-flops 1e21" in result.output


def test_a_baseline_that_beats_a_held_n_says_why(monkeypatch, capsys):
    """With N held far below its optimum, the naive plan and the four-epoch rule (which pick
    their own N) beat the plan: the gap is negative, and the note says it is the held N."""
    args = ["--budget-flops", "1e21", "--unique-tokens", "5B"]
    code, out, _ = run(monkeypatch, capsys, *args, "--n-params", "20M", "--json")
    got = json.loads(out)
    assert code == 0 and got["naive"]["loss_gap"] < 0 and got["four_epoch"]["loss_gap"] < 0
    code, out, _ = run(monkeypatch, capsys, *args, "--n-params", "20M")
    said = " ".join(out.split())
    assert code == 0 and "naive and ≤ 4 epochs beat the plan (a negative gap)" in said
    assert "this plan holds N at 20M" in said
    code, out, _ = run(monkeypatch, capsys, *args)  # N planned: the plan is the best
    assert code == 0 and "beat the plan" not in " ".join(out.split())
    # a baseline that is the plan (a Chinchilla law, U not binding) ties it exactly, never
    # "beats" it by float noise (it was 4e-16 below)
    tie = ["--law", "chinchilla-hoffmann", "--budget-flops", "1e22", "--unique-tokens", "1T"]
    code, out, _ = run(monkeypatch, capsys, *tie, "--json")
    got = json.loads(out)
    assert got["naive"]["loss_gap"] == 0.0 and got["four_epoch"]["loss_gap"] == 0.0
    code, out, _ = run(monkeypatch, capsys, *tie)
    assert code == 0 and "beat the plan" not in " ".join(out.split())


def test_a_saturated_held_n_shows_a_zero_margin_without_its_rounding_sign(monkeypatch, capsys):
    """The shipped demo fit with N held at 30K: 139 epochs of repetition, saturated, so a
    FLOP more buys nothing: shown as 0, never as "-0"."""
    from pathlib import Path

    fit = Path(__file__).parents[1] / "fit" / "golden" / "demo-runs.fit.json"
    code, out, _ = run(monkeypatch, capsys, "--budget-flops", "5e12", "--unique-tokens",
                       "200K", "--law", str(fit), "--n-params", "30K")  # fmt: skip
    said = " ".join(out.split())
    assert code == 0 and "marginal gain 0 nats/FLOP; 0.0000 nats if C doubles" in said, said
    assert "this plan holds N at 30K" in said
    code, out, _ = run(monkeypatch, capsys, "--budget-flops", "5e12", "--unique-tokens",
                       "200K", "--law", str(fit), "--n-params", "30K", "--json")  # fmt: skip
    got = json.loads(out)
    for key in ("marginal_gain_per_flop", "marginal_gain_per_doubling"):
        assert got[key] == 0 and math.copysign(1, got[key]) == 1, (key, got[key])


def test_a_law_without_derived_tokens_is_not_said_to_saturate_them(monkeypatch, capsys):
    args = ("--law", "chinchilla-hoffmann", "--budget-flops", "1e24", "--unique-tokens", "1e11")
    code, out, err = run(monkeypatch, capsys, *args, "--extrapolate")
    assert code == 0 and "data-bound" in out
    words = " ".join(out.replace("│", " ").split())
    assert "a chinchilla law gives derived tokens no value; more fresh data" in words
    assert "derived tokens are saturated" not in words
    assert "stops at one epoch of U" in " ".join(err.split())
