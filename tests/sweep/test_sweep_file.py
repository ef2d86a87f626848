"""A runs folder's copy of its sweep file: a sweep that adds runs (a seed, a size) grows it
in place and keeps every finished run; one that drops or changes a run is refused."""

import pytest
from test_simulate import QIN, SMALL

from cdlaw.sweep.dryrun import dry_run_sweep
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.simulate import Simulation
from cdlaw.sweep.spec import parse_sweep
from cdlaw.sweep.sweep_file import SweepGrowth, run_folders, sweep_growth
from cdlaw.system.errors import BadInput

SWEEP = SMALL.format(name="grow")  # 2 sizes × 1 D × (r = 0, and r = 4 per strategy): 6 runs
TWO_SEEDS = SWEEP.replace("[data]", "seed = [0, 1]\n[data]")
TWO_SIZES = SWEEP.replace('"olmo3_30M"]', '"olmo3_30M", "olmo3_60M"]')
NO_PARAPHRASE = SWEEP.replace('["repetition", "paraphrase"]', '["repetition"]')
OTHER_LR = SWEEP.replace("[data]", "lr = [1e-3]\n[data]")


def simulate(root, text, restart=False, only=None):
    path = root / "grow.toml"
    path.write_text(text)
    sim = Simulation(QIN, "qin2026")
    return run_sweep(
        path,
        root / "runs",
        SweepOptions(executor="simulate", simulation=sim, restart=restart, only=only),
    )


def finished(root) -> dict:
    """run id → its result.json text."""
    return {p.parent.name: p.read_text() for p in (root / "runs" / "grow").glob("*/result.json")}


@pytest.mark.parametrize(
    ("text", "growth"),
    [
        (SWEEP, SweepGrowth(kept=6, added=0)),
        (SWEEP.replace("[grid]", "# a comment\n[grid]"), SweepGrowth(kept=6, added=0)),
        (SWEEP + "\n[eval]\ntasks = []\n", SweepGrowth(kept=6, added=0)),
        (SWEEP + "\n[plan]\nbudget_flops = 1e15\n", SweepGrowth(kept=6, added=0)),
        (TWO_SEEDS, SweepGrowth(kept=6, added=6)),
        (TWO_SIZES, SweepGrowth(kept=6, added=3)),
        (NO_PARAPHRASE, None),  # drops the paraphrase run
        (OTHER_LR, None),  # changes every run
    ],
)
def test_sweep_growth_keeps_every_run_of_the_copy_or_is_none(text, growth):
    assert sweep_growth(SWEEP, parse_sweep(text, default_name="grow")) == growth


def test_a_copy_that_no_longer_parses_is_no_growth():
    assert sweep_growth("[grid", parse_sweep(TWO_SEEDS, default_name="grow")) is None


def test_a_sweep_that_adds_a_seed_keeps_the_finished_runs_and_replaces_the_copy(tmp_path):
    assert simulate(tmp_path, SWEEP).exit_code == 0
    before = finished(tmp_path)
    assert len(before) == 6
    outcome = simulate(tmp_path, TWO_SEEDS)
    assert outcome.exit_code == 0 and set(outcome.statuses.values()) == {"done"}
    after = finished(tmp_path)
    assert len(after) == 12 and {k: after[k] for k in before} == before  # not run again
    assert (tmp_path / "runs" / "grow" / "sweep.toml").read_text() == TWO_SEEDS


@pytest.mark.parametrize("text", [NO_PARAPHRASE, OTHER_LR])
def test_a_sweep_that_drops_or_changes_a_run_is_refused_and_nothing_moves(tmp_path, text):
    assert simulate(tmp_path, SWEEP).exit_code == 0
    before = finished(tmp_path)
    with pytest.raises(BadInput, match=r"drops or changes some of its runs.*--restart"):
        simulate(tmp_path, text)
    assert finished(tmp_path) == before
    assert (tmp_path / "runs" / "grow" / "sweep.toml").read_text() == SWEEP


def test_out_given_as_the_sweeps_own_folder_is_refused_before_anything_is_written(tmp_path):
    """`--out runs/grow` for the sweep grow would train every run again in runs/grow/grow."""
    assert simulate(tmp_path, SWEEP).exit_code == 0
    path, own = tmp_path / "grow.toml", tmp_path / "runs" / "grow"
    options = SweepOptions(executor="simulate", simulation=Simulation(QIN, "qin2026"))
    for call in (lambda: run_sweep(path, own, options), lambda: dry_run_sweep(path, own)):
        with pytest.raises(BadInput, match=r"runs folder of the sweep 'grow' itself.*--out"):
            call()
    assert not (own / "grow").exists()
    # a sweep of another name may live inside it, as `cdlaw next`'s rounds do
    inner = tmp_path / "inner.toml"
    inner.write_text(SMALL.format(name="inner"))
    assert run_sweep(inner, own, options).exit_code == 0
    assert (own / "inner" / "summary.parquet").is_file()


def test_restart_with_a_sweep_that_drops_runs_deletes_every_old_run(tmp_path, caplog):
    """A changed sweep's --restart clears the folder, even runs it keeps but --only leaves
    out: they were trained as part of another sweep (docs/cli.md); and says so."""
    assert simulate(tmp_path, SWEEP).exit_code == 0
    before = finished(tmp_path)
    with caplog.at_level("WARNING", logger="cdlaw"):
        assert simulate(tmp_path, NO_PARAPHRASE, restart=True, only="strategy=none").exit_code == 0
    said = [r.getMessage() for r in caplog.records]
    assert any("--restart deleted 6 run folder(s)" in m and "every one" in m for m in said), said
    after = finished(tmp_path)
    assert len(before) == 6 and len(after) == 2  # the repetition runs it keeps are gone too
    assert all('"strategy": "none"' in text for text in after.values())
    assert (tmp_path / "runs" / "grow" / "sweep.toml").read_text() == NO_PARAPHRASE


def test_restart_refuses_a_run_folder_that_is_a_link_and_deletes_nothing(tmp_path, capsys):
    """A run folder moved elsewhere and linked back: --restart (and its dry run) refuses it
    in one sentence naming the link, exit 2, before anything is deleted here or there."""
    import shutil

    from cdlaw.cli import main

    assert simulate(tmp_path, SWEEP).exit_code == 0
    sweep_dir = tmp_path / "runs" / "grow"
    run = sorted(p for p in sweep_dir.iterdir() if (p / "result.json").is_file())[0]
    elsewhere = tmp_path / "elsewhere" / run.name
    shutil.move(run, elsewhere)
    run.symlink_to(elsewhere, target_is_directory=True)
    before = finished(tmp_path)
    want = (
        rf"^--restart deletes run folders, and {run} is a symbolic link to {elsewhere}: remove "
        rf"the link \(`rm {run}` keeps what it points to\).*then run again$"
    )
    with pytest.raises(BadInput, match=want):
        simulate(tmp_path, SWEEP, restart=True)
    sweep = parse_sweep(SWEEP, default_name="grow")
    ids = {p.name for p in sweep_dir.iterdir()}
    with pytest.raises(BadInput, match=want):  # what --dry-run --restart counts, too
        run_folders(sweep, tmp_path / "runs", ids, ids, restart=True)
    assert finished(tmp_path) == before and (elsewhere / "result.json").is_file()
    args = ["cdlaw", "sweep", str(tmp_path / "grow.toml"), "--out", str(tmp_path / "runs")]
    args += ["--executor", "simulate", "--law", "qin2026", "--restart"]
    with pytest.MonkeyPatch.context() as m:
        m.setattr("sys.argv", args)
        with pytest.raises(SystemExit) as e:
            main()
    err = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 2 and err.startswith("error: --restart deletes run folders, and ")
    assert finished(tmp_path) == before
