"""fit.json and the plan made from it, byte for byte against files an earlier cdlaw wrote.

tests/fit/golden/demo-runs.fit.json was written by

    cdlaw fit examples/demo-runs.csv --select mean --bootstrap 8 --starts 256 \
        --holdout-largest --out tests/fit/golden/demo-runs.fit.json

and tests/fit/golden/demo-runs.plan.json by

    cdlaw plan --law tests/fit/golden/demo-runs.fit.json --budget-flops 2e12 \
        --unique-tokens 96K --json

both from the repository root. A change to how a fit is computed or written shows here
as a byte difference; regenerate them only for a change that means to alter the output.
"""

import sys
from pathlib import Path

import pytest

from cdlaw.atomic import json_safe
from cdlaw.cli import main
from cdlaw.fit.io import FitResult

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path("tests/fit/golden")
FIT_ARGS = ["--select", "mean", "--bootstrap", "8", "--starts", "256", "--holdout-largest"]
PLAN_ARGS = ["--budget-flops", "2e12", "--unique-tokens", "96K", "--json"]


def run(monkeypatch, capsys, *args):
    """`cdlaw ARGS` in-process from the repository root; (code, stdout)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["cdlaw", *args])
    with pytest.raises(SystemExit) as e:
        main()
        raise SystemExit(0)
    return e.value.code or 0, capsys.readouterr().out


def test_fit_json_is_byte_identical(monkeypatch, capsys, tmp_path):
    out = tmp_path / "fit.json"
    code, _ = run(
        monkeypatch, capsys, "fit", "examples/demo-runs.csv", *FIT_ARGS, "--out", str(out)
    )
    assert code == 0
    assert out.read_bytes() == (ROOT / GOLDEN / "demo-runs.fit.json").read_bytes()


def test_fit_json_reads_back_to_the_same_bytes():
    import json

    path = ROOT / GOLDEN / "demo-runs.fit.json"
    text = json.dumps(json_safe(FitResult.read(path).to_dict()), indent=2) + "\n"
    assert text == path.read_text()


def test_plan_from_the_fit_is_byte_identical(monkeypatch, capsys):
    code, out = run(
        monkeypatch, capsys, "plan", "--law", str(GOLDEN / "demo-runs.fit.json"), *PLAN_ARGS
    )
    assert code == 0
    assert out == (ROOT / GOLDEN / "demo-runs.plan.json").read_text()
