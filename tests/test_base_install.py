"""The base install (`pip install .`, no [train] extra): its dependencies bring no torch, and
fit, plan and plot run in an interpreter where torch, transformers, datasets, tokenizers
and safetensors cannot be imported, while `cdlaw sweep` names the extra it needs (exit 2)."""

import json
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "tokenizers", "safetensors")


def cdlaw_without_train(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    """`cdlaw ARGS` in a subprocess where every [train] package is hidden (not installed)."""
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in HEAVY)
    argv = ["cdlaw", *map(str, args)]
    code = f"import sys; {hide}; sys.argv = {argv!r}; from cdlaw.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "1000", "PYTHONPATH": str(ROOT)},
    )


def test_the_base_dependencies_bring_no_training_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [
        dep.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
        for dep in project["dependencies"]
    ]
    assert not set(names) & set(HEAVY), names
    assert {"torch", "transformers"} <= {
        d.split(">")[0].split("=")[0].strip() for d in project["optional-dependencies"]["train"]
    }


def test_fit_plan_and_plot_run_without_torch_and_sweep_names_its_extra(tmp_path):
    fit = tmp_path / "fit.json"
    proc = cdlaw_without_train(
        "fit",
        ROOT / "examples/demo-runs.csv",
        "--select",
        "mean",
        "--starts",
        "256",
        "--out",
        fit,
    )
    assert proc.returncode == 0, proc.stderr
    proc = cdlaw_without_train(
        "plan", "--law", fit, "--budget-flops", "2e12", "--unique-tokens", "96K", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["n_params"] > 0
    proc = cdlaw_without_train("plot", fit, "--kind", "rstar", "--out", tmp_path / "figures")
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "figures").glob("*.png"))

    out = tmp_path / "runs"
    proc = cdlaw_without_train("sweep", ROOT / "sweeps/smoke.toml", "--out", out)
    assert proc.returncode == 2, proc.stderr
    # The advice: the train extra from the clone, with the Makefile's CPU torch pinned.
    torch = re.search(r"^TORCH_SPEC\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)[1]
    advice = (
        f"pip install -e '.[train]' {torch} --extra-index-url https://download.pytorch.org/whl/cpu"
    )
    assert "the train extra" in proc.stderr and advice in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_govern_runs_without_the_training_packages(tmp_path):
    import numpy as np
    from plantedcurves import planted_frame

    planted_frame(np.linspace(2e8, 3e9, 20), strategy="paraphrase").to_csv(
        tmp_path / "log.csv", index=False
    )
    r = cdlaw_without_train(
        "govern", tmp_path / "log.csv", "--law", "qin2026", "--budget-flops", "1e19",
        "--unique-tokens", "1e9", "--n-params", "100M", "--strategy", "paraphrase", "--json",
        "--model", "relation",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["action"] == "continue"
    r = cdlaw_without_train(  # the run's own curve law, on the schedule it is told
        "govern", tmp_path / "log.csv", "--schedule", "wsd", "--planned-tokens", "4e9",
        "--decay-frac", "0.2", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"] == "curve law"


def test_the_quick_start_sets_up_the_base_install_alone(tmp_path):
    """The README's quick start runs fit, plan and report, which need no torch: its set-up
    is the base install, not `make setup`'s torch, transformers and dev tools."""
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in quick.splitlines() if line.startswith("    ")]
    target = re.match(r"make (\S+)", commands[0])
    assert target, commands[0]
    assert {c.split()[1] for c in commands[1:]} <= {"fit", "plan", "plot", "report", "status"}
    recipe = subprocess.run(["make", "-n", "-B", target[1], f"VENV={tmp_path / 'venv'}"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    installs = [line for line in recipe.splitlines() if "pip install" in line]
    assert installs and all("torch" not in line and "[" not in line for line in installs), recipe
    assert any(line.endswith("install -q -e .") for line in installs), recipe
