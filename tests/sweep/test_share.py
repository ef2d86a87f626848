"""Shared prefixes (share = true): the forest, exact forks, faults, bad input, the dry run."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from runhelpers import SHARED_SWEEP, cdlaw, result_losses
from runhelpers import write_shared_sweep as write

from cdlaw.config import RunConfig, TrainConfig
from cdlaw.data.tokens.ordering import shared_prefix
from cdlaw.schedule import decay_start, lr_at
from cdlaw.sweep.forest import plan_forest
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.spec import load_sweep, parse_sweep
from cdlaw.system.errors import BadInput


def curves(sweep_dir: Path) -> dict[str, pd.DataFrame]:
    """run_id -> metrics.parquet without wall-clock time."""
    return {
        p.parent.name: pd.read_parquet(p).drop(columns="elapsed_s")
        for p in sorted(Path(sweep_dir).glob("*/metrics.parquet"))
    }


# --- The schedule and the forest (no training) ------------------------------------------


def test_wsd_lr_before_the_decay_does_not_depend_on_the_run_length():
    train = TrainConfig(schedule="wsd", warmup_steps=5, lr=1.0, decay_frac=0.2)
    short, long = 50, 400
    start = decay_start(short, train)
    assert start == 40
    assert [lr_at(s, short, train) for s in range(start)] == [
        lr_at(s, long, train) for s in range(start)
    ]
    assert lr_at(start, short, train) < 1.0  # …and the short run's decay starts there
    assert lr_at(2, short, train) == pytest.approx(3 / 5)  # warmup in steps


def test_warmup_steps_at_its_default_keeps_older_run_ids():
    # The id this run had before train.warmup_steps existed (cdlaw at f169b26).
    cfg = RunConfig("a", "none", 10, 0, train=TrainConfig(schedule="wsd"))
    assert cfg.run_id == "f014f24616aa"
    other = RunConfig("a", "none", 10, 0, train=TrainConfig(schedule="wsd", warmup_steps=7))
    assert other.run_id != cfg.run_id


def test_demo_forest_is_exact_and_saves_at_least_40_percent_of_the_flops():
    sweep = load_sweep("sweeps/demo.toml")
    runs = sweep.runs()
    forest = plan_forest(runs, share=True)
    by_id = {r.run_id: r for r in runs}
    assert len(forest.forks) >= len(runs) // 2
    for rid, fork in forest.forks.items():
        b, a = by_id[rid], by_id[fork.parent]
        # one group: everything but the stream agrees
        assert (a.model, a.data, a.train, a.seed) == (b.model, b.data, b.train, b.seed)
        batch = b.train.batch_size * b.model.seq_len
        prefix = shared_prefix(
            (a.strategy, a.fresh_tokens, a.derived_tokens),
            (b.strategy, b.fresh_tokens, b.derived_tokens),
        )
        assert 1 <= fork.step and fork.step * batch + 1 <= prefix
        for run in (a, b):
            steps = -(-run.tokens_trained // batch)
            assert fork.step <= decay_start(steps, run.train)
        # the parent trains that step itself (it does not start from a later fork)
        assert fork.parent not in forest.forks or forest.forks[fork.parent].step < fork.step
        assert fork.step in forest.saves[fork.parent]
        assert forest.fallbacks[rid][0] == fork
    ratio = sum(forest.own_flops.values()) / sum(forest.alone_flops.values())
    assert ratio <= 0.6
    assert plan_forest(runs, share=False).forks == {}


# --- Bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "train, key",
    [
        ({"schedule": "cosine"}, "train.schedule"),
        ({"warmup_steps": 0}, "train.warmup_steps"),
        ({"decay_frac": 1.0}, "train.decay_frac"),
        ({"warmup_steps": 7}, "train.warmup_steps"),  # the 8-step runs decay from step 6
    ],
)
def test_share_that_cannot_apply_is_refused_naming_the_key(tmp_path, train, key):
    root = tmp_path / "runs"
    path = write(root, "bad", **train)
    with pytest.raises(BadInput, match=key.replace(".", r"\.")):
        load_sweep(path)
    r = cdlaw("sweep", path, "--out", root)
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and "Traceback" not in r.stderr
    assert not root.exists()  # nothing written


def test_share_must_be_a_boolean():
    with pytest.raises(BadInput, match="share must be true or false"):
        parse_sweep(SHARED_SWEEP.format(name="x", share='"yes"'))


# --- Training: forks end where runs trained alone end -------------------------------------


@pytest.fixture
def alone(share_alone):
    """The grid trained with every run from step 0 (the reference; conftest.share_alone)."""
    return share_alone


@pytest.mark.slow
def test_forked_runs_equal_runs_trained_alone_bit_for_bit(runs_root, alone, one_thread):
    out = runs_root / "share-exact"
    outcome = run_sweep(write(out, "share"), out, SweepOptions(exec_cfg=one_thread))
    shared = out / "share"
    assert set(outcome.statuses.values()) == {"done"}
    assert result_losses(shared) == result_losses(alone)  # fp32 on CPU: exactly equal
    mine, theirs = curves(shared), curves(alone)
    assert mine.keys() == theirs.keys()
    for rid in mine:
        pd.testing.assert_frame_equal(mine[rid], theirs[rid], check_exact=True)
    forest = outcome.plan.forest
    results = {p.parent.name: json.loads(p.read_text()) for p in shared.glob("*/result.json")}
    assert {r for r, row in results.items() if row["fork_parent"]} == set(forest.forks)
    for rid, fork in forest.forks.items():
        assert (results[rid]["fork_parent"], results[rid]["fork_step"]) == (fork.parent, fork.step)
    assert not list(shared.glob("*/forks"))  # no pending run needs a fork: all deleted


@pytest.mark.slow
def test_a_branch_whose_fork_is_gone_starts_from_an_older_one_or_step_0(
    runs_root, alone, one_thread, capfd
):
    out = runs_root / "share-lost"
    path = write(out, "share")
    plan_runs = load_sweep(path).runs()
    forest = plan_forest(plan_runs, share=True)
    trunk = max(forest.saves, key=lambda t: len(forest.saves[t]))
    outcome = run_sweep(path, out, SweepOptions(only=f"run_id={trunk}", exec_cfg=one_thread))
    forks = sorted((out / "share" / trunk / "forks").iterdir())
    assert len(forks) == len(forest.saves[trunk])  # kept: pending branches need them
    shutil.rmtree(forks[-1])  # the latest fork point is lost
    capfd.readouterr()
    outcome = run_sweep(path, out, SweepOptions(exec_cfg=one_thread))
    err = capfd.readouterr().err
    assert "is gone" in err and ("older fork" in err or "from step 0" in err)
    assert set(outcome.statuses.values()) == {"done"}
    assert result_losses(out / "share") == result_losses(alone)


@pytest.mark.slow
def test_kill_9_mid_sweep_then_rerun_trains_every_run_once_with_the_same_losses(runs_root, alone):
    out = runs_root / "share-kill"
    path = write(out, "share")
    cmd = [sys.executable, "-m", "cdlaw", "sweep", str(path), "--out", str(out)]
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([*cmd, "--jobs", "2", "--threads", "1"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((out / "share").glob("*/forks/*/checkpoint")):
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)  # the workers die with it (PR_SET_PDEATHSIG)
    proc.wait()
    assert len(result_losses(out / "share")) < 10  # killed mid-sweep, not after it
    r = subprocess.run([*cmd, "--threads", "1"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert result_losses(out / "share") == result_losses(alone)
    for run_dir in (out / "share").glob("*/"):
        if run_dir.is_dir() and (run_dir / "result.json").exists():
            assert not (run_dir / "checkpoint").exists()
    assert not list((out / "share").glob("*/forks"))


@pytest.mark.slow
def test_two_sweeps_on_one_folder_train_each_run_and_each_trunk_once(runs_root, alone, tmp_path):
    out = runs_root / "share-twins"
    path = write(out, "share")
    cmd = [sys.executable, "-m", "cdlaw", "sweep", str(path), "--out", str(out), "--json"]
    env = {**os.environ, "COLUMNS": "200"}
    procs = [
        subprocess.Popen(
            [*cmd, "--jobs", "1", "--threads", "1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(2)
    ]
    reports = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    trained = [set(r["trained"]) for r in reports]
    assert trained[0].isdisjoint(trained[1])
    sweep_dir = out / "share"
    for run_dir in sweep_dir.iterdir():
        if (run_dir / "attempts.json").exists():
            assert len(json.loads((run_dir / "attempts.json").read_text())) == 1
    assert result_losses(sweep_dir) == result_losses(alone)
    assert not list(sweep_dir.glob("*/forks"))


@pytest.mark.slow
def test_paraphrase_runs_from_the_old_mixed_order_are_refused(runs_root, alone, one_thread):
    out = runs_root / "share-stale"
    shutil.copytree(alone.parent, out)
    para = next(p for p in (out / "share").glob("*/result.json") if '"paraphrase"' in p.read_text())
    row = json.loads(para.read_text())
    del row["stream_order"]  # a result written before paraphrase passes nested
    para.write_text(json.dumps(row))
    path = write(out, "share", share=False)
    with pytest.raises(BadInput, match="paraphrase order"):
        run_sweep(path, out, SweepOptions(exec_cfg=one_thread))


@pytest.mark.slow
def test_dry_run_shows_each_fork_and_the_flops_saved(tmp_path):
    root = tmp_path / "runs"
    r = cdlaw("sweep", write(root, "dry"), "--out", root, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    forks = [row for row in plan["runs"] if row["fork_parent"]]
    ids = {row["run_id"] for row in plan["runs"]}
    assert forks and all(row["fork_parent"] in ids and row["fork_step"] > 0 for row in forks)
    assert 0 < plan["flops"] < plan["flops_alone"]
    assert plan["flops"] == pytest.approx(sum(row["own_flops"] for row in plan["runs"]))
    r = cdlaw("sweep", write(root, "dry"), "--out", root, "--dry-run")
    assert "fork from" in r.stdout and "shared prefixes:" in r.stdout  # the plan is a result
    assert not (root / "dry").exists()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_branch_from_a_fork_equals_the_run_alone_in_fp32_and_bf16(tmp_path, precision):
    import numpy as np
    import torch

    from cdlaw.config import DataConfig, ExecConfig, ModelConfig
    from cdlaw.data.tokens.streams import array_stream
    from cdlaw.train.forks import fork_path
    from cdlaw.train.loop import train_run

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    tokens, val = rng.integers(0, 256, 12_000), rng.integers(0, 256, 600)
    model = ModelConfig(
        d_model=16, n_layers=1, n_heads=2, mlp_hidden=32, vocab_size=256, seq_len=16
    )
    train = TrainConfig(schedule="wsd", warmup_steps=5, batch_size=4, eval_every=20, log_every=7,
                        lr=1e-2)  # fmt: skip

    def cfg(n):
        return RunConfig(
            "x", "none", n, 0, model=model, data=DataConfig(vocab_size=256), train=train
        )

    ex = ExecConfig(device="cpu", precision=precision)
    train_run(cfg(12_000), tmp_path / "trunk", array_stream(tokens), val, ex, fork_steps=(70,))
    fork = fork_path(tmp_path / "trunk", 70)
    branch = train_run(
        cfg(6_000), tmp_path / "b", array_stream(tokens[:6000]), val, ex, fork_from=fork
    )
    alone = train_run(cfg(6_000), tmp_path / "a", array_stream(tokens[:6000]), val, ex)
    assert (branch["fork_parent"], branch["fork_step"]) == ("trunk", 70)
    assert branch["loss"] == alone["loss"] and branch["train_loss"] == alone["train_loss"]
    b, a = curves(tmp_path)["b"], curves(tmp_path)["a"]
    pd.testing.assert_frame_equal(b, a, check_exact=True)


def test_the_fork_marker_is_the_checkpoints_last_file():
    from cdlaw.train import checkpoint, forks

    assert forks.STATE_FILE == checkpoint.STATE_FILE  # forks.py keeps torch out of the scheduler
