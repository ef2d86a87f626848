"""The conventions a command-line user expects: --version, -h on every command, shell
completion, numbers shown as numbers in --help, help text that keeps its placeholders,
results on stdout (JSON alone with --json) and notes on stderr, and `--executor ray`
refused up front, naming the extra, when Ray cannot be imported."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cdlaw import __version__
from cdlaw.cli import app, main, register_commands

ROOT = Path(__file__).resolve().parents[2]
CLI = "import sys; from cdlaw.cli import main; sys.argv = ['cdlaw', *sys.argv[1:]]; main()"
WIDE = {**os.environ, "COLUMNS": "250"}

register_commands()
COMMANDS = sorted(typer.main.get_command(app).commands)


def cdlaw(*args, prefix="", env=None):
    """The real entry point in a subprocess: (returncode, stdout, stderr)."""
    r = subprocess.run(
        [sys.executable, "-c", prefix + CLI, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env or WIDE,
    )
    return r.returncode, r.stdout, r.stderr


def help_text(command: str) -> str:
    r = CliRunner().invoke(app, [command, "-h"], prog_name="cdlaw", env={"COLUMNS": "250"})
    assert r.exit_code == 0, (command, r.output)
    return r.output


def test_version_flag_prints_the_version_alone():
    code, out, err = cdlaw("--version")
    assert (code, out, err) == (0, f"{__version__}\n", "")
    assert cdlaw("version")[1] == f"{__version__}\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_short_help_on_every_command(command):
    text = help_text(command)
    assert f"Usage: cdlaw {command}" in text and "-h" in text


def test_shell_completion_is_offered_and_completes_commands():
    assert "--install-completion" in CliRunner().invoke(app, ["-h"], prog_name="cdlaw").output
    env = {**WIDE, "_CDLAW_COMPLETE": "complete_bash", "COMP_WORDS": "cdlaw pl", "COMP_CWORD": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "cdlaw"], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0 and r.stdout.split() == ["plan", "plot"], r.stdout + r.stderr


# Option rows of rich help: name(s), the type column, the help.
ROW = re.compile(r"│\s+(--[\w-]+)\s+(?:--[\w-]+\s+)?(<[^>]*>)\s+(.*?)\s*│")
NUMERIC_EXAMPLE = re.compile(r"e\.g\. \(?\d[\d.]*(e\d+|[KMBT])?\b")
QUANTITIES = {
    ("plan", "--budget-flops"),
    ("plan", "--unique-tokens"),
    ("plan", "--n-params"),
    ("plan", "--gpu-flops"),
    ("fit", "--starts"),
    ("compare", "--starts"),
    ("compare", "--budget-flops"),
    ("compare", "--unique-tokens"),
    ("report", "--budget-flops"),
    ("report", "--unique-tokens"),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_numeric_options_show_as_numbers(command):
    rows = {name: (kind, words) for name, kind, words in ROW.findall(help_text(command))}
    for (cmd, option), in_help in ((q, q[1] in rows) for q in QUANTITIES):
        if cmd == command:
            assert in_help and rows[option][0] == "<number>", (option, rows.get(option))
    for option, (kind, words) in rows.items():  # a text option never asks for a number
        assert not (kind == "<str>" and NUMERIC_EXAMPLE.search(words)), (option, kind, words)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_flags_show_no_value_in_help(command):
    # a flag (--json, --frontier, -h) takes no value, so its row has no type column:
    # `--json <bool>` would read as if `--json true` were expected
    text = help_text(command) if command else CliRunner().invoke(app, ["-h"]).output
    assert "<bool>" not in text, command
    cmd = typer.main.get_command(app).commands[command] if command else None
    if cmd is not None and any("--json" in p.opts for p in cmd.params):
        assert re.search(r"│\s+--json {2,}[A-Z]", text), command
    if command == "plan":  # a flag, so `true` is an extra argument
        code, _, err = cdlaw("plan", "--budget-flops", "1e21", "--json", "true")
        assert code == 2 and "unexpected extra argument" in err


@pytest.mark.parametrize("command", COMMANDS)
def test_help_cites_no_section_a_user_cannot_open(command):
    # "(§9)" points into a design document that does not ship; docs/ are named by file
    assert "§" not in help_text(command), command


@pytest.mark.parametrize("command", COMMANDS)
def test_help_text_keeps_its_placeholders(command):
    # --help renders markdown, where <sweep> is an HTML tag and vanishes ("OUT//.")
    cmd = typer.main.get_command(app).commands[command]
    texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
    for text in texts:
        assert not re.search(r"<[A-Za-z_]+>", text), (command, text)
    if command == "sweep":
        assert "OUT/SWEEP/" in help_text(command) and "OUT//" not in help_text(command)


def test_results_on_stdout_notes_on_stderr_json_alone(tmp_path, monkeypatch, capsys):
    # in a subprocess: the real streams, not a terminal
    code, out, err = cdlaw("plan", "--budget-flops", "1e21", "--unique-tokens", "5e9")
    assert code == 0 and "model size N" in out and "predicted loss" in out
    assert "model size N" not in err  # stderr holds the warnings only
    code, out, err = cdlaw("plan", "--budget-flops", "1e21", "--unique-tokens", "5e9", "--json")
    assert code == 0 and json.loads(out)["n_params"] > 0 and err == ""

    table = ROOT / "examples" / "chinchilla-besiroglu.csv"
    fit = ["fit", table, "--law", "chinchilla", "--starts", "16", "--out", tmp_path / "f.json"]
    for json_out in (False, True):
        monkeypatch.setattr(sys, "argv", ["cdlaw", *map(str, fit + ["--json"] * json_out)])
        with pytest.raises(SystemExit) as e:
            main()
        out, err = capsys.readouterr()
        assert e.value.code == 0, err
        assert "wrote" in err and "rmse_log" not in err and "wrote" not in out
        if json_out:  # stdout is the JSON alone
            assert json.loads(out)["law"] == "chinchilla"
        else:
            assert "parameter" in out and "rmse_log" in out


def test_dry_run_on_ray_without_ray_names_the_extra(tmp_path):
    hide = "import sys; sys.modules['ray'] = None; "  # ray unimportable in that process only
    out = tmp_path / "runs"
    code, stdout, err = cdlaw(
        "sweep", "sweeps/smoke.toml", "--dry-run", "--executor", "ray", "--out", out, prefix=hide
    )
    assert code == 2, err
    assert err.count("\n") == 1 and "make setup EXTRAS=dev,ray" in err and "Traceback" not in err
    assert "pip install -e '.[ray]' torch==" in err
    assert stdout == "" and not out.exists()
