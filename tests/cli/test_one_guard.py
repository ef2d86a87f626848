"""One guard for every command that plans: `report`, `plot --kind frontier`, `compare`,
`next` and `adapt` refuse a plan beyond the extrapolation limit exactly where `cdlaw plan`
does, with the same sentence, and plan it with --extrapolate, saying so as `plan` does.

One simulated seed grid (qin2026, 14M–60M) is trained and fitted once, by `cdlaw adapt`
itself; a budget of 1e21 FLOPs plans N = 6.1B, 107× its largest size.
"""

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from cdlaw.cli import main

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "sweeps" / "qin2026-seed.toml"
BUDGET = ["--budget-flops", "1e21", "--unique-tokens", "5e9"]
FRONTIER = ["--frontier-range", "1e21:1e22"]


def cdlaw(*args) -> tuple[int, str, str]:
    """`cdlaw ARGS` in this process: (exit code, stdout, stderr), read from buffers of its
    own (not capsys) so that a module-scoped fixture can call it too."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    from cdlaw import cli

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["cdlaw", *map(str, args)])
        # the consoles write to sys.stdout / sys.stderr as they are when printing (redirected
        # below); their private width, not the property, so that the default comes back
        mp.setattr(cli.out, "_width", 1000)
        mp.setattr(cli.err, "_width", 1000)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = e.code or 0
    return code, out.getvalue(), err.getvalue()


def error_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The seed grid trained (simulated) and fitted by `cdlaw adapt`, which refuses the
    budget: (runs folder, adapt's exit code and stderr)."""
    out = tmp_path_factory.mktemp("guard")
    got = cdlaw("adapt", SEED, *BUDGET, "--executor", "simulate", "--law", "qin2026",
                "--noise", "0.02", "--out", out)  # fmt: skip
    folder = out / "qin2026-seed"
    assert (folder / "fit.json").is_file(), got
    return folder, got


def command(name: str, folder: Path, tmp: Path) -> list:
    """The command line of `name` for the budget beyond the limit (adapt: its own fixture)."""
    return {
        "report": ["report", folder, *BUDGET, "--out", tmp / "r.html"],
        "next": ["next", folder, *BUDGET, "--out", tmp / "n.toml"],
        "compare": [
            "compare",
            folder,
            "--law",
            "cd",
            "--starts",
            "64",
            *BUDGET,
            "--out",
            tmp / "c.json",
        ],
        "plot": ["plot", folder, "--kind", "frontier", *FRONTIER, "--out", tmp / "figs"],
    }[name]


def plan_command(name: str, folder: Path) -> list:
    """`cdlaw plan` for the same law and budget(s) as command(name)."""
    fit = folder / "fit.json"
    if name == "plot":  # the figure plans for the table's largest fresh-token count
        unique = pd.read_parquet(folder / "summary.parquet")["fresh_tokens"].max()
        return ["plan", "--law", fit, "--frontier", *FRONTIER, "--frontier-points", 16,
                "--unique-tokens", unique]  # fmt: skip
    return ["plan", "--law", fit, *BUDGET]


@pytest.mark.parametrize("name", ["report", "plot", "compare", "next", "adapt"])
def test_every_command_that_plans_refuses_where_plan_does_with_the_same_sentence(
    name, seeded, tmp_path
):
    folder, adapted = seeded
    code, _, err = adapted if name == "adapt" else cdlaw(*command(name, folder, tmp_path))
    plan_code, _, plan_err = cdlaw(*plan_command(name, folder))
    assert plan_code == 2 and code == 2, err
    sentence = error_line(plan_err)
    assert "beyond the 30× extrapolation limit" in sentence and "--extrapolate" in sentence
    assert error_line(err) == sentence
    assert not any(tmp_path.iterdir())  # nothing half-written


@pytest.mark.parametrize("name", ["report", "plot", "compare", "next"])
def test_with_extrapolate_every_command_plans_and_says_so_as_plan_does(name, seeded, tmp_path):
    folder, _ = seeded
    code, _, err = cdlaw(*command(name, folder, tmp_path), "--extrapolate")
    plan_code, plan_out, _ = cdlaw(*plan_command(name, folder), "--extrapolate")
    assert code == 0 and plan_code == 0, err
    said = plan_out.splitlines()[0]
    assert said.startswith("extrapolated beyond 30× the fitted range (--extrapolate): ")
    where = said.split(": ", 1)[1]
    if name == "compare":  # one line per law, named
        where = f"cd: {where}"
    assert f"extrapolated beyond 30× the fitted range (--extrapolate): {where}" in err


def test_the_refusals_are_one_sentence_naming_the_way_on(seeded):
    _, (code, _, err) = seeded
    sentence = error_line(err)
    assert code == 2 and re.fullmatch(
        r"error: the plan is beyond the 30× extrapolation limit of the range its law was "
        r"fitted on \(N = .+\): fit runs nearer it, or pass --extrapolate to plan it anyway",
        sentence,
    )
