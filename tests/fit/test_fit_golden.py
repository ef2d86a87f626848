"""fit.json and the plan made from it, against files an earlier cdlaw wrote.

tests/fit/golden/demo-runs.fit.json was written by

    cdlaw fit examples/demo-runs.csv --select mean --bootstrap 8 --starts 256 \
        --holdout-largest --out tests/fit/golden/demo-runs.fit.json

and tests/fit/golden/demo-runs.plan.json by

    cdlaw plan --law tests/fit/golden/demo-runs.fit.json --budget-flops 2e12 \
        --unique-tokens 96K --json

both from the repository root. A change to how a fit is computed or written shows here;
regenerate them only for a change that means to alter the output.

Keys, strings, integers and the layout must match exactly, and every number to 1e-5
relative: the last digits of a float depend on the CPU (numpy and BLAS take other SIMD
paths on AVX-512 than on AVX2), so byte equality holds only on the machine that wrote the
files. The bootstrap refits are the exception: on this two-size table E, A and alpha are
not identified, so a refit's end point along that flat valley moves with rounding, and
with it the intervals and the warning about them. Of those, the shape is checked: as
many refits, intervals for the same parameters, each interval around its estimate.
"""

import json
import math
import sys
from pathlib import Path

import pytest

from cdlaw.cli import main
from cdlaw.fit.io import FitResult
from cdlaw.system.atomic import json_safe

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path("tests/fit/golden")
FIT_ARGS = ["--select", "mean", "--bootstrap", "8", "--starts", "256", "--holdout-largest"]
PLAN_ARGS = ["--budget-flops", "2e12", "--unique-tokens", "96K", "--json"]
RTOL = 1e-5
# Parts of fit.json that the bootstrap refits decide (see the module docstring).
BOOTSTRAP_PARTS = (
    "bootstrap",
    "ci95",
    "model_floor.ci95",
    "rstar.repetition.ci95",
    "rstar.paraphrase.ci95",
    "optimizer.message",
    "warnings",
)


def differences(got, want, path="") -> list[str]:
    """Where two parsed JSON values differ: exactly, except floats to RTOL."""
    if path.lstrip(".") in BOOTSTRAP_PARTS:
        return []
    if isinstance(want, dict) and isinstance(got, dict):
        if list(got) != list(want):
            return [f"{path}: keys {list(got)} != {list(want)}"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items != {len(want)}"]
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in differences(g, w, f"{path}[{i}]")
        ]
    if isinstance(want, float) and isinstance(got, float):
        same = math.isclose(got, want, rel_tol=RTOL, abs_tol=1e-300)
        return [] if same else [f"{path}: {got!r} != {want!r}"]
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r} != {want!r}"]


def run(monkeypatch, capsys, *args):
    """`cdlaw ARGS` in-process from the repository root; (code, stdout)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["cdlaw", *args])
    with pytest.raises(SystemExit) as e:
        main()
        raise SystemExit(0)
    return e.value.code or 0, capsys.readouterr().out


def test_fit_json_is_unchanged(monkeypatch, capsys, tmp_path):
    out = tmp_path / "fit.json"
    code, _ = run(
        monkeypatch, capsys, "fit", "examples/demo-runs.csv", *FIT_ARGS, "--out", str(out)
    )
    assert code == 0
    got, want = (
        json.loads(out.read_text()),
        json.loads((ROOT / GOLDEN / "demo-runs.fit.json").read_text()),
    )
    assert differences(got, want) == []
    # The bootstrap parts: their shape, and every interval around its estimate.
    assert len(got["bootstrap"]) == len(want["bootstrap"])
    assert {len(row) for row in got["bootstrap"]} == {len(row) for row in want["bootstrap"]}
    assert list(got["ci95"]) == list(want["ci95"])
    assert want["warnings"][:4] == got["warnings"][:4]
    for name, value in got["params"].items():
        lo, hi = got["ci95"][name]
        assert lo <= value * (1 + RTOL) and value <= hi * (1 + RTOL), name


def test_fit_json_reads_back_to_the_same_bytes():
    import json

    path = ROOT / GOLDEN / "demo-runs.fit.json"
    text = json.dumps(json_safe(FitResult.read(path).to_dict()), indent=2) + "\n"
    assert text == path.read_text()


def test_plan_from_the_fit_is_unchanged(monkeypatch, capsys):
    code, out = run(
        monkeypatch, capsys, "plan", "--law", str(GOLDEN / "demo-runs.fit.json"), *PLAN_ARGS
    )
    assert code == 0
    want = json.loads((ROOT / GOLDEN / "demo-runs.plan.json").read_text())
    assert differences(json.loads(out), want) == []
