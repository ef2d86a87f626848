"""Damaged files (docs/files.md, "Damaged files"; issue #17): every file a run writes,
truncated or deleted after the sweep finished or in the middle of a run, is recovered or
named in one line, and the sweep run again ends with every run done once, with the loss
of the undamaged sweep (exactly: CPU, one thread)."""

import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from runhelpers import result_losses as losses

from cdlaw.data.tokens.ordering import stream_for_run
from cdlaw.sweep.dryrun import dry_run_sweep
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.spec import load_sweep
from cdlaw.sweep.summary import rebuild_summary, sweep_status
from cdlaw.train.loop import RunInterrupted, train_run

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # one module fixture trains the tiny sweep (~15 s)

SAY = "damaged:"  # every damaged file is named in one line starting with this


@pytest.fixture(scope="module")
def sweep(runs_root, write_sweep, one_thread):
    """The tiny sweep, trained once undamaged: its folder, runs and losses."""
    path = write_sweep(runs_root, "damage")
    outcome = run_sweep(path, runs_root, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert outcome.exit_code == 0
    sweep_dir = runs_root / "damage"
    return SimpleNamespace(
        path=path,
        dir=sweep_dir,
        root=runs_root,
        exec=one_thread,
        runs={r.run_id: r for r in load_sweep(path).runs()},
        reference=losses(sweep_dir),
    )


def rerun(sweep, capfd):
    """Run the sweep again in this process; return its outcome and its `damaged:` lines."""
    capfd.readouterr()
    outcome = run_sweep(sweep.path, sweep.root, SweepOptions(jobs=1, exec_cfg=sweep.exec))
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith(SAY)]
    return outcome, said


def states(sweep) -> dict[str, dict]:
    return {r["run_id"]: r for r in sweep_status(sweep.dir)}


def assert_done_like_the_reference(sweep, outcome) -> None:
    assert outcome.exit_code == 0
    assert outcome.statuses == {rid: "done" for rid in sweep.runs}
    assert {rid: r["state"] for rid, r in states(sweep).items()} == outcome.statuses
    assert losses(sweep.dir) == sweep.reference
    assert len(rebuild_summary(sweep.dir)) == len(sweep.runs)


def leave_checkpoint(sweep, rid: str, step: int) -> Path:
    """Train run `rid` afresh up to `step` and stop there, leaving its checkpoint."""
    cfg, run_dir = sweep.runs[rid], sweep.dir / rid
    shutil.rmtree(run_dir, ignore_errors=True)
    prepared, stream = stream_for_run(cfg, sweep.root / ".cache")
    with pytest.raises(RunInterrupted):
        train_run(cfg, run_dir, stream, prepared.val_tokens, sweep.exec, stop_after_steps=step)
    return run_dir


def leave_swap(sweep, rid: str, first: int, second: int) -> Path:
    """A checkpoint at `second` and, as a swap cut short leaves it, checkpoint.old/ at `first`."""
    run_dir = leave_checkpoint(sweep, rid, first)
    kept = run_dir.parent / f"{rid}-kept"
    shutil.copytree(run_dir / "checkpoint", kept)
    cfg = sweep.runs[rid]
    prepared, stream = stream_for_run(cfg, sweep.root / ".cache")
    with pytest.raises(RunInterrupted):
        train_run(cfg, run_dir, stream, prepared.val_tokens, sweep.exec, stop_after_steps=second)
    kept.rename(run_dir / "checkpoint.old")
    return run_dir


def damage(path: Path, how: str, rng: random.Random) -> None:
    """Delete the file, cut at least its last two bytes off, or flip a byte of its data."""
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(rng.randrange(path.stat().st_size - 1))
    else:  # "scribble": one byte in the second half (a safetensors file's tensor data)
        data = bytearray(path.read_bytes())
        data[rng.randrange(len(data) // 2, len(data))] ^= 0x5A
        path.write_bytes(bytes(data))


def steps(sweep, rid: str) -> int:
    cfg = sweep.runs[rid]
    return -(-cfg.tokens_trained // (cfg.train.batch_size * cfg.model.seq_len))


# --- 1. checkpoints ------------------------------------------------------------------------


def test_a_truncated_checkpoint_is_set_aside_and_the_run_restarts(sweep, capfd):
    """Today: SafetensorError on every rerun. Now: checkpoint.bad/, one line, step 0."""
    rid = sorted(sweep.runs)[0]
    run_dir = leave_checkpoint(sweep, rid, 3)
    damage(run_dir / "checkpoint" / "model.safetensors", "truncate", random.Random(0))

    outcome, said = rerun(sweep, capfd)
    assert outcome.trained == [rid]
    assert len(said) == 1 and str(run_dir / "checkpoint" / "model.safetensors") in said[0]
    assert "checkpoint.bad" in said[0] and "step 0" in said[0]
    assert (run_dir / "checkpoint.bad" / "state.json").exists()
    assert not (run_dir / "checkpoint").exists()
    assert_done_like_the_reference(sweep, outcome)
    assert states(sweep)[rid]["set_aside"] == ["checkpoint.bad"]


@pytest.mark.parametrize("name", ["optimizer.safetensors", "state.json"])
def test_a_damaged_checkpoint_falls_back_to_the_old_one(sweep, capfd, name):
    """A corrupt optimizer/RNG file (a flipped byte: caught by the checksum in state.json) or
    a lost state.json: the run resumes from checkpoint.old/, left by a swap cut short."""
    rid = sorted(sweep.runs)[1]
    run_dir = leave_swap(sweep, rid, 2, 5)
    how = "scribble" if name.endswith(".safetensors") else "delete"
    damage(run_dir / "checkpoint" / name, how, random.Random(1))

    outcome, said = rerun(sweep, capfd)
    assert outcome.trained == [rid]
    assert len(said) == 1 and str(run_dir / "checkpoint" / name) in said[0]
    assert "resumes from step 2" in said[0]
    assert_done_like_the_reference(sweep, outcome)


# --- 2. result.json --------------------------------------------------------------------------


def test_an_unreadable_result_json_means_not_done_said_once(sweep, capfd):
    """Today: the first rerun exits 1 (JSONDecodeError), the second retrains silently and
    `status` calls it pending. Now one rule everywhere: not done, named once, retrained."""
    rid = sorted(sweep.runs)[2]
    path = sweep.dir / rid / "result.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])

    row = states(sweep)[rid]
    assert row["state"] == "pending" and list(row["damaged"]) == ["result.json"]
    dry = dry_run_sweep(sweep.path, sweep.root, calibrate=False)
    assert {r["run_id"]: r["state"] for r in dry.rows}[rid] == "pending"
    assert rid not in set(rebuild_summary(sweep.dir).run_id)

    outcome, said = rerun(sweep, capfd)
    assert outcome.trained == [rid]
    assert len(said) == 1 and str(path) in said[0] and "result.json.bad" in said[0]
    assert (sweep.dir / rid / "result.json.bad").read_text() == text[: len(text) // 2]
    assert_done_like_the_reference(sweep, outcome)
    assert "damaged" not in states(sweep)[rid]

    outcome, said = rerun(sweep, capfd)  # said once: the file was set aside
    assert outcome.trained == [] and said == []

    path.write_bytes(b"\xff\xfe{")  # not even text
    outcome, said = rerun(sweep, capfd)
    assert outcome.trained == [rid] and len(said) == 1 and "result.json.bad-2" in said[0]
    assert_done_like_the_reference(sweep, outcome)


# --- 3. files of a finished run ----------------------------------------------------------------


def test_a_damaged_file_of_a_finished_run_is_named_not_retrained(sweep, capfd, tmp_path):
    """result.json is the truth: the run stays done with its loss; `status` flags the file
    and every sweep names it until it is retrained (--restart --only run_id=…)."""
    rid = sorted(sweep.runs)[3]
    run_dir = sweep.dir / rid
    shutil.copytree(run_dir, tmp_path / "kept")
    damage(run_dir / "model" / "model.safetensors", "truncate", random.Random(3))
    try:
        row = states(sweep)[rid]
        assert row["state"] == "done" and list(row["damaged"]) == ["model/model.safetensors"]
        for _ in range(2):
            outcome, said = rerun(sweep, capfd)
            assert outcome.trained == [] and len(said) == 1
            assert str(run_dir / "model" / "model.safetensors") in said[0]
            assert f"--restart --only run_id={rid}" in said[0]
            assert losses(sweep.dir) == sweep.reference
    finally:
        shutil.rmtree(run_dir)
        shutil.copytree(tmp_path / "kept", run_dir)


# --- 3. random faults through the run's life -----------------------------------------------------

AFTER = ["config.json", "metrics.parquet", "result.json"] + [
    f"model/{n}" for n in ("config.json", "generation_config.json", "model.safetensors")
]
MID = ["config.json", "metrics.parquet"] + [
    f"checkpoint/{n}" for n in ("model.safetensors", "optimizer.safetensors", "state.json")
]


CASES = [("after", name) for name in AFTER] + [(m, name) for m in ("mid", "swap") for name in MID]


@pytest.mark.parametrize("seed", range(len(CASES)))
def test_random_damage_is_recovered_or_named(sweep, capfd, tmp_path, seed):
    """Each file at each moment (after the sweep; mid-run with a checkpoint; mid-swap with
    checkpoint.old/ too) once, in a run, at steps and with a damage drawn from the seed
    (delete, truncate, or a flipped byte in a checkpoint's tensors): the sweep run again
    ends with every run done exactly once, with the undamaged loss, and names the damage
    in one line (a deleted result.json is just an unfinished run)."""
    rng = random.Random(seed)
    moment, name = CASES[seed]
    rid = rng.choice(sorted(sweep.runs))
    run_dir = sweep.dir / rid
    ways = ["delete", "truncate"] + (["scribble"] if name.endswith(".safetensors") else [])
    how = rng.choice(ways)
    if moment == "mid":
        leave_checkpoint(sweep, rid, rng.randrange(1, steps(sweep, rid)))
    elif moment == "swap":
        first = rng.randrange(1, steps(sweep, rid) - 1)
        leave_swap(sweep, rid, first, rng.randrange(first + 1, steps(sweep, rid)))
    else:
        shutil.copytree(run_dir, tmp_path / "kept")
    damage(run_dir / name, how, rng)
    if moment != "after":  # `cdlaw status` finds what the sweep will find, before it runs
        row = states(sweep)[rid]
        assert row["state"] == "partial" and row.get("damaged", {}).keys() == {name}, row

    try:
        outcome, said = rerun(sweep, capfd)
        side_file = moment == "after" and name != "result.json"
        assert outcome.trained == ([] if side_file else [rid])
        if moment == "after" and name == "result.json" and how == "delete":
            assert said == []
        else:
            assert len(said) == 1 and str(run_dir / name) in said[0], said
        assert losses(sweep.dir) == sweep.reference
        if side_file:
            assert states(sweep)[rid]["damaged"].keys() == {name}
        else:
            assert_done_like_the_reference(sweep, outcome)
            assert "damaged" not in states(sweep)[rid]
    finally:
        if moment == "after":
            shutil.rmtree(run_dir)
            shutil.copytree(tmp_path / "kept", run_dir)
