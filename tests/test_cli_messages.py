"""Messages a user reads: interpolated values print as given (never as rich markup), and a
command whose optional extra is missing names the extra to install (exit 2)."""

import os
import subprocess
import sys


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
    assert "pip install 'cdlaw[train]'" in r.stderr and "torch" in r.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_labelled_lines_print_their_message_as_given():
    r = run("from cdlaw.cli import say; say('warning', 'fit of runs[v2]/t.csv: [/] [bold]x')")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "warning: fit of runs[v2]/t.csv: [/] [bold]x"
