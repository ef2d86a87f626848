"""`make demo` after its sweep: scripts/demo.sh's fit, held-out fit, downstream, plan and report stages,
run as the script runs them, on the demo's own 72 runs (examples/demo-runs.csv written as a
runs folder). The sweep stage is `cdlaw sweep`, tested on its own; this checks the glue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runhelpers import write_demo_runs

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
