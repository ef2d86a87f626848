"""`make demo` after its sweep: scripts/demo.sh's fit, held-out fit, downstream, plan and report stages,
run as the script runs them, on the demo's own 72 runs (examples/demo-runs.csv written as a
runs folder). The sweep stage is `cdlaw sweep`, tested on its own; this checks the glue."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from runhelpers import write_demo_runs

from cdlaw.sweep.spec import load_sweep
from cdlaw.units import parse_number

ROOT = Path(__file__).resolve().parents[1]


def test_demo_script_fits_holds_out_plans_and_reports(tmp_path):
    runs = tmp_path / "demo"
    write_demo_runs(runs)
    cdlaw = Path(sys.executable).parent / "cdlaw"
    env = {**os.environ, "OUT": str(tmp_path), "CDLAW": str(cdlaw), "DEMO_SKIP_SWEEP": "1"}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")], env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "held out N = 200K" in r.stdout  # the script shows the held-out check
    assert "decision" in r.stdout and "paraphrase" in r.stdout  # the plan's panel
    assert "no task links" in r.stdout  # the CSV's runs predate [eval]: planned without links
    for name in ("fit.json", "fit_holdout.json", "report.html"):
        assert (runs / name).is_file(), name
    assert "demo finished" in r.stdout
    # the report answers the plan step's question: the same C and U (the sweep file's
    # [plan]), the same strategy and N
    step = re.search(r"plan --law \S+ --budget-flops (\S+) --unique-tokens (\S+)",
                     (ROOT / "scripts" / "demo.sh").read_text())  # fmt: skip
    asked = load_sweep(ROOT / "sweeps" / "demo.toml").plan
    assert step and tuple(map(parse_number, step.groups())) == (
        asked.budget_flops,
        asked.unique_tokens,
    )
    planned = subprocess.run([cdlaw, "plan", "--law", runs / "fit.json", "--budget-flops",
                              step[1], "--unique-tokens", step[2], "--json"],
                             capture_output=True, text=True, check=True)  # fmt: skip
    reported = subprocess.run([cdlaw, "report", runs, "--json", "--out", tmp_path / "r.html"],
                              capture_output=True, text=True, check=True)  # fmt: skip
    plan, report = json.loads(planned.stdout), json.loads(reported.stdout)
    assert (report["budget_flops"], report["unique_tokens"]) == (2e12, 96e3)
    assert report["asked_by"] == {"budget_flops": "sweep", "unique_tokens": "sweep"}
    assert report["plan"]["strategy"] == plan["strategy"] == "paraphrase"
    assert abs(report["plan"]["n_params"] / plan["n_params"] - 1) < 1e-9
    assert "U = 96K unique tokens, both from the sweep file" in (runs / "report.html").read_text()
