"""Messages a user reads: interpolated values print as given (never as rich markup), a
command whose optional extra is missing names the extra and a command that installs it
from the clone (exit 2), and the normal path (the demo, the examples) says what it means."""

import dataclasses
import errno
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plantedlinks import planted_runs

from cdlaw.fit.io import output_paths, write_fit
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.law import PRESETS
from cdlaw.plan.planner import plan
from cdlaw.plan.source import comparison_outputs
from cdlaw.sweep.dryrun import dry_run_sweep
from cdlaw.sweep.selection import plan_sweep
from cdlaw.sweep.spec import load_sweep, tomllib
from cdlaw.system.errors import BadInput
from cdlaw.system.extras import DATASETS_SPEC, install_advice

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


# ---------------------------------------------------------------------------------------
# The normal path in plain words: what a new user meets on the demo and the examples.
# ---------------------------------------------------------------------------------------

DEMO_RUNS = ROOT / "examples" / "demo-runs.csv"


@pytest.fixture(scope="module")
def demo_fit(tmp_path_factory) -> Path:
    """The demo's runs fitted as `make demo` fits them (--select mean), with a bootstrap
    just big enough for `cdlaw next`; returns the table, its fit beside it."""
    table = tmp_path_factory.mktemp("demo") / "demo.csv"
    shutil.copy(DEMO_RUNS, table)
    fit = fit_law(load_runs(table), select="mean", bootstrap=12, n_starts=64, source=str(table))
    write_fit(fit, *output_paths(table))
    return table


def test_an_empty_table_and_a_misspelt_column_are_named(cdlaw, tmp_path):
    (tmp_path / "empty.csv").write_text("")
    code, _, err = cdlaw("fit", tmp_path / "empty.csv")
    assert code == 2 and "is empty" in err and "EmptyDataError" not in err, err
    typo = tmp_path / "typo.csv"
    typo.write_text(DEMO_RUNS.read_text().replace("fresh_tokens", "fresh_token", 1))
    code, _, err = cdlaw("fit", typo)
    assert code == 2 and "is 'fresh_token' fresh_tokens misspelt?" in err, err


def test_a_table_given_as_a_fit_says_to_fit_it(tmp_path):
    """Read as a fit, a table says to fit it (`cdlaw plan --law` takes runs themselves:
    it compares the laws on them, tests/plan/test_laws_note.py)."""
    from cdlaw.fit.io import FitResult

    (tmp_path / "demo").mkdir()
    summary = tmp_path / "demo" / "summary.parquet"
    load_runs(DEMO_RUNS).to_parquet(summary)
    with pytest.raises(BadInput) as e:
        FitResult.read(summary)
    assert "codec" not in str(e.value)
    assert f"is a table of runs, not a fit: fit it first (`cdlaw fit {summary.parent}`" in str(
        e.value
    )


def test_status_of_a_folder_that_is_not_there(cdlaw, tmp_path):
    code, _, err = cdlaw("status", "nosuchdir")
    assert code == 2 and "'nosuchdir' does not exist" in err and "holds no sweep" not in err


def test_help_plans_with_the_fit_its_example_made():
    r = run(CLI, "--help")
    assert "cdlaw fit runs/demo && cdlaw plan --law runs/demo/fit.json" in r.stdout, r.stdout


def test_what_the_readme_writes_beside_the_examples_is_ignored():
    """Every file `cdlaw fit` or `cdlaw compare` writes for the README's example tables."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    readme = (ROOT / "README.md").read_text()
    written = []
    for command, table in re.findall(r"cdlaw (fit|compare) (examples/\S+)", readme):
        paths = output_paths if command == "fit" else comparison_outputs
        written += [str(p) for p in paths(table)]
    assert any("compare_rows" in p for p in written), written
    r = subprocess.run(["git", "check-ignore", *written], cwd=ROOT, capture_output=True, text=True)
    assert sorted(r.stdout.split()) == sorted(written), r.stdout


def test_fit_in_a_folder_it_cannot_write_stops_before_fitting(cdlaw, tmp_path, monkeypatch):
    table = tmp_path / "t.csv"
    shutil.copy(DEMO_RUNS, table)
    real = os.open

    def deny(target, flags, *args, **kwargs):  # as a read-only folder answers (root too)
        where = Path(os.fsdecode(target))
        if tmp_path in (where, where.parent) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(target))
        return real(target, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    started = time.monotonic()
    code, out, err = cdlaw("fit", table)
    assert code == 2 and time.monotonic() - started < 20, err
    assert f"cannot write {tmp_path / 't.fit.json'}: {tmp_path} refuses new files" in err
    assert "--out" in err and "PermissionError" not in err and out == ""


def test_distill_names_its_teacher_and_a_sweep_without_derived_strategies(cdlaw, tmp_path):
    code, _, err = cdlaw("distill", ROOT / "sweeps" / "demo.toml", "--teacher", tmp_path)
    assert code == 2 and "declares no strategy to distill" in err and ": none" not in err, err
    code, _, err = cdlaw("distill", ROOT / "sweeps" / "strategies.toml", "--teacher", tmp_path,
                         "--fresh-tokens", "48K", "--out", tmp_path / "runs")  # fmt: skip
    assert code == 2 and f"--teacher {str(tmp_path)!r} is not" in err and "--model" not in err


def test_plot_finds_the_comparison_beside_a_table(cdlaw, demo_fit, tmp_path):
    code, out, err = cdlaw("compare", demo_fit, "--law", "cd,chinchilla", "--starts", "64",
                           "--budget-flops", "2e12", "--unique-tokens", "96K")  # fmt: skip
    assert code == 0, err
    plans = out[out.index("each law's plan") :]
    cd = next(line for line in plans.splitlines() if line.strip().startswith("cd "))
    assert "passes" in cd and "epochs" not in cd and "0.0052" not in plans, plans
    chinchilla = next(line for line in plans.splitlines() if line.strip().startswith("chinch"))
    assert "repetition" in chinchilla and "epochs" in chinchilla  # repeats counted as fresh
    assert "chinchilla: fitted and planned with repeats counted as fresh" in plans
    code, out, err = cdlaw("plot", demo_fit, "--kind", "compare")
    assert code == 0 and out.strip().endswith("compare.png"), err
    bare = tmp_path / "bare.csv"  # compared, never fitted: the comparison is all it needs
    shutil.copy(demo_fit, bare)
    for suffix in (".compare.json", ".compare_rows.parquet"):
        shutil.copy(demo_fit.with_name("demo" + suffix), bare.with_name("bare" + suffix))
    code, out, err = cdlaw("plot", bare, "--kind", "compare")
    assert code == 0 and out.strip().endswith("compare.png"), err


def test_rounding_noise_is_no_derived_tokens(cdlaw):
    """Chinchilla's optimum sits on T = U, which the search for N finds to ~1e-7: D′ of a
    few hundred tokens there is noise, and the plan trains one epoch."""
    p = plan(PRESETS["chinchilla-besiroglu"], 1e21, 5e9)
    assert p.best.derived_tokens == 0 and p.best.strategy == "none" and p.best.uses == "1 epoch"
    code, out, err = cdlaw("plan", "--law", "chinchilla-besiroglu", "--budget-flops", "1e21",
                           "--unique-tokens", "5e9", "--extrapolate")  # fmt: skip
    assert code == 0 and "1 epochs" not in out and "D′  0  none, 1 epoch" in out, out + err


def test_strategy_none_says_what_it_means(cdlaw):
    code, _, err = cdlaw("plan", "--law", "chinchilla-besiroglu", "--budget-flops", "1e21",
                         "--strategy", "none", "--extrapolate")  # fmt: skip
    assert code == 0, err  # a law without strategies plans D′ = 0: what none asks for
    code, _, err = cdlaw("plan", "--law", "qin2026", "--budget-flops", "1e21", "--unique-tokens",
                         "5e9", "--strategy", "none")  # fmt: skip
    assert code == 2 and "lowercase letter" not in err, err
    assert "fresh tokens alone (D′ = 0)" in err and "leave out --unique-tokens" in err


def test_adapt_counts_each_round_from_zero(capsys):
    from cdlaw.cli.sweep_show import SweepDisplay
    from cdlaw.sweep import events as ev

    def facts(rid):
        return {"run_id": rid, "size": "20K", "strategy": "none", "fresh_tokens": 1,
                "derived_ratio": 0, "tokens_trained": 1, "flops_per_token": 1}  # fmt: skip

    display = SweepDisplay(live=False)
    for round_, ids in enumerate((["a", "b", "c"], ["d"])):
        display(ev.SweepPlanned(f"next-{round_}", [facts(i) for i in ids], "sim"))
        for i in ids:
            display(ev.RunStarted(i, 1))
            display(ev.RunEnded(i, "done", 1.0))
    err = capsys.readouterr().err
    assert "[3/3]" in err and err.strip().endswith("[1/1]") and "[4/1]" not in err, err


def test_next_after_the_demo_fit_warns_nothing_and_counts_flops_as_the_dry_run(
    cdlaw, demo_fit, tmp_path
):
    target = tmp_path / "n.toml"
    code, out, err = cdlaw("next", demo_fit, "--grid", ROOT / "sweeps" / "demo.toml",
                           "--budget-flops", "2e12", "--unique-tokens", "96K", "--runs", "2",
                           "--out", target)  # fmt: skip
    assert code == 0 and "refit" not in err, err
    said = re.search(r"training them costs (\S+) with attention", out)
    assert said and "as the law counts compute (6·N per token)" in out, out
    dry = dry_run_sweep(target, tmp_path / "runs", calibrate=False)
    assert f"{dry.flops:.3g}" == said.group(1)
    # a fit of fewer rows than the table now gives is stale: refused, nothing written
    fewer = tmp_path / "fewer.csv"
    fewer.write_text("\n".join(demo_fit.read_text().splitlines()[:-6]) + "\n")
    shutil.copy(demo_fit.with_name("demo.fit.json"), tmp_path / "fewer.fit.json")
    code, out, err = cdlaw("next", fewer, "--grid", ROOT / "sweeps" / "demo.toml",
                           "--budget-flops", "2e12", "--unique-tokens", "96K", "--runs", "1",
                           "--out", tmp_path / "fewer.toml")  # fmt: skip
    assert code == 2 and "refit it first (`cdlaw fit" in err and "--select mean" in err, err
    assert out == "" and not (tmp_path / "fewer.toml").exists()
    # and plot refuses it named alone as it does the table beside it
    for shown in (fewer, tmp_path / "fewer.fit.json"):
        code, _, err = cdlaw("plot", shown, "--kind", "residuals", "--out", tmp_path / "fig")
        assert code == 2 and "refit it first (`cdlaw fit" in err, (shown, err)
    assert not (tmp_path / "fig").exists()


def test_the_dry_run_says_when_sharing_saves_no_time():
    from types import SimpleNamespace

    from cdlaw.cli.sweep_show import _shared_line

    dry = SimpleNamespace(flops=8.6e12, flops_alone=8.6e12, wall_seconds=569.0,
                          wall_seconds_unpacked=0.0, wall_seconds_alone=569.2)  # fmt: skip
    line = _shared_line(dry, 0)
    assert "no run forks" in line and "instead of" not in line, line
    line = _shared_line(dry, 2)
    assert "9m29s instead of 9m29s" not in line and "9m29s, is the same" in line, line


def test_a_dry_run_previews_runs_whose_derived_files_are_not_written(tmp_path):
    sweep = tmp_path / "d.toml"
    missing = tmp_path / "derived" / "distill"
    sweep.write_text(
        'name = "d"\n[grid]\nsize = ["20K"]\nfresh_tokens = [2048]\n'
        'strategy = ["repetition", "distill"]\nderived_ratio = [0, 1]\n'
        f'[derived.distill]\nfiles = "{missing}"\n'
        '[data]\ncorpus = "embedded"\nvocab_size = 512\nval_tokens = 2048\n'
        "[model]\nseq_len = 64\n[train]\nbatch_size = 4\n"
    )
    dry = dry_run_sweep(sweep, tmp_path / "runs", calibrate=False)
    assert {r["strategy"] for r in dry.rows} == {"none", "repetition", "distill"}
    assert any(f"{str(missing)!r} is not written yet" in n for n in dry.notes), dry.notes
    assert not (tmp_path / "runs").exists()
    with pytest.raises(BadInput, match="is not a folder"):  # training it still needs them
        plan_sweep(load_sweep(sweep), tmp_path / "runs", cache_dir=tmp_path / "cache")
    missing.mkdir(parents=True)  # made ahead, nothing in it yet: the same preview
    dry = dry_run_sweep(sweep, tmp_path / "runs", calibrate=False)
    assert any(f"{str(missing)!r} is not written yet" in n for n in dry.notes), dry.notes
    (missing / "notes.txt").write_text("x")  # files, but no rows: refused as it is
    with pytest.raises(BadInput, match=r"holds no \.jsonl files of rows"):
        dry_run_sweep(sweep, tmp_path / "runs", calibrate=False)


def test_downstream_keeps_names_whole_at_80_columns_and_writes_beside_out(
    cdlaw, tmp_path, monkeypatch
):
    from cdlaw.cli import out as console

    table = tmp_path / "runs.csv"
    runs = planted_runs({"paraphrase": 0.15}).rename(
        columns={"task_quiz_acc": "task_world_cloze_acc", "task_quiz_bpb": "task_world_mc_bpb"}
    )
    runs.to_csv(table, index=False)
    monkeypatch.setattr(console, "width", 80)
    code, out, err = cdlaw("downstream", table, "--bootstrap", "0", "--out", tmp_path / "X.json")
    assert code == 0, err
    # Rows of the links' table (a task and its metric) and of the predictors' table below it.
    rows = [line for line in out.splitlines() if line.startswith(" world_")]
    assert {r.split()[0] for r in rows} == {"world_cloze", "world_mc"}, out
    assert "…" not in "".join(rows) and max(map(len, rows)) <= 80, out
    assert (tmp_path / "X.figures" / "downstream.png").is_file()
    assert not (tmp_path / "runs.figures").exists()


def test_an_undetermined_shift_says_so_not_nan(tmp_path):
    from cdlaw.cli.downstream import _word
    from cdlaw.tasks.links import fit_downstream

    link = fit_downstream(planted_runs({"paraphrase": 0.15}), "quiz", 0, 0).links[0]
    c = link.collapse
    flat = dataclasses.replace(
        c, shift={**c.shift, "paraphrase": 0.2}, shift_se={**c.shift_se, "paraphrase": math.nan},
        f=1.12e-07, p_value=1.0, collapses=True,
    )  # fmt: skip
    lk = dataclasses.replace(link, collapse=flat)
    said = lk.verdict()
    assert "± nan" not in said and "no strategy's shift exceeds" not in said, said
    assert "shift in loss of paraphrase" in said and _word(lk) == "undetermined"


def test_a_fit_of_runs_that_changed_since_is_refused_by_report_plot_and_next(
    cdlaw, demo_fit, tmp_path
):
    """One loss edited (a run retrained): the same row count, other rows. Every command
    that reads the runs beside their fit says so in one sentence and writes nothing."""
    edited = tmp_path / "edited.csv"
    lines = demo_fit.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[5].split(",")
    at = header.index("loss")
    cells[at] = f"{float(cells[at]) + 0.05:.6f}"
    edited.write_text("\n".join([*lines[:5], ",".join(cells), *lines[6:]]) + "\n")
    shutil.copy(demo_fit.with_name("demo.fit.json"), tmp_path / "edited.fit.json")
    shutil.copy(demo_fit.with_name("demo.fit_rows.parquet"), tmp_path / "edited.fit_rows.parquet")
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (
        ("report", edited, "--out", tmp_path / "r.html"),
        ("plot", edited, "--kind", "loss", "--out", tmp_path / "figs"),
        ("next", edited, "--grid", ROOT / "sweeps" / "demo.toml", "--budget-flops", "2e12",
         "--unique-tokens", "96K", "--runs", "1", "--out", tmp_path / "n.toml"),
    ):  # fmt: skip
        code, out, err = cdlaw(*args)
        assert code == 2 and out == "", (args[0], err)
        assert "a loss or a run's coordinates changed since" in err and "refit it first" in err
        assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    # the same file unedited is the fit's own: drawn as before
    code, _, err = cdlaw("plot", demo_fit, "--kind", "loss", "--out", tmp_path / "ok")
    assert code == 0, err


def test_a_frontier_of_too_few_budgets_and_a_bad_compare_budget_are_refused(
    cdlaw, demo_fit, tmp_path
):
    fit = demo_fit.with_name("demo.fit.json")
    for points in ("0", "1"):  # the default range, found from the fit, as a given one
        code, out, err = cdlaw("plan", "--law", fit, "--frontier", "--unique-tokens", "96K",
                               "--frontier-points", points)  # fmt: skip
        assert code == 2 and out == "" and "need at least 2 budgets" in err, err
    for bad in (["--budget-flops", "-1"], ["--budget-flops", "1e12", "--unique-tokens", "0"]):
        code, _, err = cdlaw("compare", demo_fit, "--law", "cd", *bad,
                             "--out", tmp_path / "c.json")  # fmt: skip
        assert code == 2 and "must be a positive number" in err, err
        assert not (tmp_path / "c.json").exists()


def test_a_table_of_params_tokens_and_loss_is_told_where_d_is(cdlaw, tmp_path):
    """The usual published table of one-epoch runs names its tokens `tokens`, which cdlaw
    reads as every token trained: the refusal says they are D for one-epoch runs."""
    table = tmp_path / "t.csv"
    table.write_text("params,Tokens,loss\n1e8,2e9,3.0\n2e8,4e9,2.8\n")
    code, _, err = cdlaw("fit", table, "--law", "chinchilla")
    assert code == 2 and "lacks the column(s) fresh_tokens (if the runs are one epoch, their " \
        "'Tokens' is D: rename it fresh_tokens)" in " ".join(err.split()), err  # fmt: skip


def test_a_fit_beside_its_table_is_checked_without_reading_it_aloud(cdlaw, tmp_path):
    """`cdlaw fit` says how it read a table in other names; `plan`, which reads the table
    again only to check the fit is of it, does not say it a second time."""
    import pandas as pd

    table = tmp_path / "t.csv"
    runs = pd.read_csv(DEMO_RUNS)
    runs.rename(columns={"n_params": "params", "fresh_tokens": "unique_tokens"}).to_csv(
        table, index=False
    )
    code, _, err = cdlaw("fit", table, "--starts", "16")
    assert code == 0 and "read " in err and "N ← params" in err, err
    code, _, err = cdlaw("plan", "--law", tmp_path / "t.fit.json", "--budget-flops", "2e12")
    assert code == 0 and "N ← params" not in err, err
