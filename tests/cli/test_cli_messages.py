"""Messages a user reads: interpolated values print as given (never as rich markup), and a
command whose optional extra is missing names the extra and a command that installs it
from the clone (exit 2)."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from cdlaw.extras import DATASETS_SPEC, install_advice
from cdlaw.sweep.spec import tomllib

ROOT = Path(__file__).resolve().parents[2]


def run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )


CLI = "import sys; from cdlaw.cli import main; sys.argv = ['cdlaw', *sys.argv[1:]]; main()"


def test_brackets_in_user_input_print_as_given(tmp_path):
    r = run(CLI, "plan", "--budget-flops", "1e2[/]")
    assert r.returncode == 2 and "'1e2[/]'" in r.stderr and "Traceback" not in r.stderr
    missing = str(tmp_path / "runs[v2]" / "table.csv")
    r = run(CLI, "fit", missing)
    assert r.returncode == 2 and missing in r.stderr, r.stderr


def test_a_missing_training_extra_is_named(tmp_path):
    # torch made unimportable in this process only: find_spec sees sys.modules["torch"] = None
    hide = "import sys; sys.modules['torch'] = None; "
    r = run(hide + CLI, "sweep", "sweeps/smoke.toml", "--out", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "needs torch" in r.stderr and "make setup" in r.stderr and "cdlaw[" not in r.stderr
    assert "pip install -e '.[train]' torch==" in r.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_missing_module_names_its_extra_without_a_traceback():
    """A train module a command imports without checking first: main() names the extra."""
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from cdlaw.cli import app, main\n"
        "@app.command()\n"
        "def needs_transformers():\n"
        "    import transformers\n"
        "sys.argv = ['cdlaw', 'needs-transformers']; main()"
    )
    r = run(code)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "transformers is not installed" in r.stderr and "pip install -e '.[train]'" in r.stderr


def test_install_advice_is_a_command_the_clone_runs():
    """Every extra pyproject.toml defines: one `pip install -e '.[extra]'`, with the
    Makefile's CPU torch pinned in the same command when the extra brings torch (unpinned,
    pip pulls a CUDA torch) and a `make setup` whose EXTRAS install it; no torch otherwise."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    makefile = (ROOT / "Makefile").read_text()
    torch = re.search(r"^TORCH_SPEC\s*\?=\s*(\S+)", makefile, re.M).group(1)

    def included(extra):  # the extra and those it names (ray names train)
        nested = [e for d in extras[extra] if d.startswith("cdlaw[") for e in d[6:-1].split(",")]
        return {extra}.union(*map(included, nested))

    for extra in extras:
        advice = install_advice(extra)
        assert "cdlaw[" not in advice and f"the {extra} extra" in advice, advice
        commands = [shlex.split(c) for c in re.findall(r"`([^`]+)`", advice)]
        pips = [c for c in commands if c[:2] == ["pip", "install"]]
        assert len(pips) == 1 and pips[0][2:4] == ["-e", f".[{extra}]"], advice
        if any(d.startswith("torch") for e in included(extra) for d in extras[e]):
            assert pips[0][4:] == [
                torch,
                "--extra-index-url",
                "https://download.pytorch.org/whl/cpu",
            ]
            make = next(c for c in commands if c[:2] == ["make", "setup"])
            chosen = dict(a.split("=", 1) for a in make[2:]).get("EXTRAS", "dev")
            assert extra in set().union(*map(included, chosen.split(","))), advice
        else:
            assert pips[0][4:] == [] and "torch" not in advice, advice


def test_the_endpoint_backend_asks_only_for_the_corpus_reader(tmp_path):
    """`paraphrase --endpoint` without datasets: the one package, as the train extra pins
    it, and no torch."""
    hide = "import sys; sys.modules['datasets'] = None; "
    args = ["paraphrase", "c.jsonl", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m"]
    r = run(hide + CLI, *args, "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"pip install '{DATASETS_SPEC}'" in r.stderr and "torch==" not in r.stderr
    train = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert DATASETS_SPEC in train["train"] and not (tmp_path / "out").exists()
