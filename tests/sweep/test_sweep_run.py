"""`cdlaw sweep` end to end on tiny models: the runs folder (docs/files.md), the summary (docs/files.md),
resume, restart, --only, --dry-run, and `cdlaw status`."""

import json
import math
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from runhelpers import cdlaw

from cdlaw.config import ExecConfig
from cdlaw.data.tokens.prepare import corpus_key
from cdlaw.shapes import count_params
from cdlaw.sweep.dryrun import dry_run_sweep
from cdlaw.sweep.locks import LOCK_NAME
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.spec import load_sweep
from cdlaw.sweep.summary import sweep_status
from cdlaw.system.errors import BadInput
from cdlaw.train.result import SUMMARY_COLUMNS

torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # every test here shares a fixture that trains (~20 s)


@pytest.fixture(scope="module")
def tiny(runs_root, write_sweep):
    """The tiny sweep, run once by the CLI with two worker processes."""
    path = write_sweep(runs_root, "tiny")
    start = time.time()
    result = cdlaw(
        "sweep", path, "--out", runs_root, "--jobs", 2, "--threads", 1, "--json", cwd=runs_root
    )
    assert result.returncode == 0, result.stderr
    return {
        "path": path,
        "dir": runs_root / "tiny",
        "json": json.loads(result.stdout),
        "stderr": result.stderr,
        "wall": time.time() - start,
    }


def losses(sweep_dir: Path) -> dict:
    """(size, strategy, D, D′) → final loss, from the summary."""
    df = pd.read_parquet(sweep_dir / "summary.parquet")
    return {(r.size, r.strategy, r.fresh_tokens, r.derived_tokens): r.loss for r in df.itertuples()}


def test_sweep_writes_the_runs_folder_and_summary(tiny):
    out = tiny["json"]
    assert out["counts"] == {"done": 6} and len(out["trained"]) == 6 and out["failures"] == []
    assert out["jobs"] == 2 and out["threads"] == 1
    sweep_dir = tiny["dir"]
    assert (sweep_dir / "sweep.toml").read_text() == tiny["path"].read_text()  # verbatim
    df = pd.read_parquet(sweep_dir / "summary.parquet")
    assert set(SUMMARY_COLUMNS) <= set(df.columns) and len(df) == 6
    assert set(df.run_id) == set(out["trained"]) and (df.status == "done").all()
    assert sorted(df.strategy) == [
        "none",
        "none",
        "paraphrase",
        "paraphrase",
        "repetition",
        "repetition",
    ]
    # exact token accounting
    assert (df.fresh_tokens == 2048).all()
    assert (df.tokens_trained == df.fresh_tokens + df.derived_tokens).all()
    assert set(df.derived_tokens) == {0, 2048}
    assert (df[df.strategy == "repetition"].epochs == 2.0).all()
    for row in df.itertuples():
        assert (
            row.n_params
            == count_params(
                type(
                    "S",
                    (),
                    {
                        "d_model": row.d_model,
                        "n_layers": row.n_layers,
                        "mlp_hidden": row.mlp_hidden,
                    },
                )(),
                512,
            ).n_params
        )
        assert row.flops == 6 * row.n_params * row.tokens_trained
        assert math.isfinite(row.loss) and row.loss < math.log(512)  # it learned something
        run_dir = sweep_dir / row.run_id
        for name in ("config.json", "metrics.parquet", "result.json", "model/config.json"):
            assert (run_dir / name).is_file(), name
        assert not (run_dir / LOCK_NAME).exists() and not (run_dir / "checkpoint").exists()
        assert len(json.loads((run_dir / "attempts.json").read_text())) == 1
        metrics = pd.read_parquet(run_dir / "metrics.parquet")
        assert metrics.tokens_seen.iloc[-1] == row.tokens_trained
    # twice the tokens of the same D lower the loss, by either strategy
    by = losses(sweep_dir)
    for size in ("20K", "60K"):
        for strategy in ("repetition", "paraphrase"):
            assert by[(size, strategy, 2048, 2048)] < by[(size, "none", 2048, 0)]
    assert "6 done" in " ".join(tiny["stderr"].split())


def test_rerun_trains_nothing_and_keeps_every_result(tiny, runs_root, one_thread):
    sweep_dir = tiny["dir"]
    stamps = {p: p.stat().st_mtime_ns for p in sweep_dir.glob("*/result.json")}
    before = losses(sweep_dir)
    killed = sweep_dir / ".summary.parquet.k1lled9x.tmp"  # kill -9 while the summary was written
    killed.write_bytes(b"PAR1 half")
    outcome = run_sweep(tiny["path"], runs_root, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert outcome.trained == [] and outcome.exit_code == 0
    assert set(outcome.statuses.values()) == {"done"}
    assert {p: p.stat().st_mtime_ns for p in sweep_dir.glob("*/result.json")} == stamps
    assert losses(sweep_dir) == before
    assert not killed.exists()  # the resumed sweep cleared the killed writer's leftover


def test_in_process_executor_matches_worker_processes(tiny, runs_root, write_sweep, one_thread):
    """Same runs, another executor (and sweep name): bit-identical losses on CPU."""
    path = write_sweep(runs_root, "tiny-local")
    outcome = run_sweep(path, runs_root, SweepOptions(jobs=1, only="size=20K", exec_cfg=one_thread))
    assert outcome.jobs == 1 and len(outcome.trained) == 3
    mine = losses(runs_root / "tiny-local")
    assert mine == {k: v for k, v in losses(tiny["dir"]).items() if k[0] == "20K"}


def test_dry_run_estimates_and_writes_nothing(tiny, runs_root, write_sweep, one_thread):
    path = write_sweep(runs_root, "tiny-dry")
    result = cdlaw(
        "sweep",
        path,
        "--out",
        runs_root,
        "--dry-run",
        "--json",
        "--jobs",
        2,
        "--threads",
        1,
        cwd=runs_root,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert not (runs_root / "tiny-dry").exists()
    assert len(plan["runs"]) == 6 and {r["state"] for r in plan["runs"]} == {"pending"}
    assert all(r["est_seconds"] > 0 for r in plan["runs"])
    # a run with twice the tokens of the same shape is estimated to take longer
    est = {(r["size"], r["derived_tokens"]): r["est_seconds"] for r in plan["runs"]}
    assert est[("20K", 2048)] > est[("20K", 0)] and est[("60K", 2048)] > est[("60K", 0)]
    assert 0 < plan["wall_seconds"] <= plan["serial_seconds"] + 30
    assert plan["calibration"] and all(c["tokens_per_second"] > 0 for c in plan["calibration"])
    # a finished sweep has nothing left to do (and nothing to calibrate)
    done = dry_run_sweep(tiny["path"], runs_root, SweepOptions(exec_cfg=one_thread))
    assert {r["state"] for r in done.rows} == {"done"}
    assert done.wall_seconds == 0 and done.calibration == []


def test_calibration_rate_leaves_out_a_step_that_recompiles(monkeypatch):
    """measure_throughput's rate is tokens over time of its steady steps: a step 500× the
    others (a torch.compile recompile, say) is setup, not a slower rate. A fake clock reads
    10 ms a step and 5 s after the 10th."""
    from tinyrun import make_cfg

    from cdlaw.sweep import dryrun

    calls = []

    class Clock:
        @staticmethod
        def perf_counter():
            calls.append(None)
            return 0.01 * len(calls) + (5.0 if len(calls) > 11 else 0.0)

    monkeypatch.setattr(dryrun, "time", Clock)
    cfg = make_cfg(30 * 8 * 32, log_every=1)  # 30 steps of 8 rows of 32 tokens
    out = dryrun.measure_throughput(cfg, ExecConfig(device="cpu", threads=1), budget_s=100)
    assert out["steps_timed"] == 29
    assert out["tokens_per_second"] == pytest.approx(256 / 0.01)


def test_calibration_with_compile_counts_the_compile_once_not_in_every_run(monkeypatch):
    """With --compile the first run of a shape compiles and later ones reuse the graph: the
    calibration trains the probe twice and reports the first one's extra setup as
    compile_s, the second's as the setup every run pays. A fake train_run and clock: the
    first run's first step comes 5 s late, every step takes 10 ms."""
    from tinyrun import make_cfg

    from cdlaw.sweep import dryrun
    from cdlaw.train import loop
    from cdlaw.train.run_state import StepProgress

    now, calls = [0.0], []

    class Clock:
        @staticmethod
        def perf_counter():
            return now[0]

    def fake_train_run(cfg, run_dir, stream, val_tokens, exec_cfg, on_progress):
        calls.append(cfg.seed)
        now[0] += 5.0 if len(calls) == 1 else 0.0  # the compile
        for step in range(1, 31):
            now[0] += 0.01
            on_progress(StepProgress(step, 30, step * 256, 30 * 256, 0.0, 3.0, math.nan))

    monkeypatch.setattr(dryrun, "time", Clock)
    monkeypatch.setattr(loop, "train_run", fake_train_run)
    cfg = make_cfg(30 * 256)
    out = dryrun.measure_throughput(cfg, ExecConfig(device="cpu", compile=True), budget_s=100)
    assert calls == [0, 1]
    assert out["compile_s"] == pytest.approx(5.0) and out["setup_s"] == pytest.approx(0.0)
    assert out["tokens_per_second"] == pytest.approx(25_600)
    eager = dryrun.measure_throughput(cfg, ExecConfig(device="cpu"), budget_s=100)
    assert calls == [0, 1, 0] and eager["compile_s"] == 0.0


def test_status_reports_every_state(tiny, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny["dir"], copy)
    ids = sorted(p.name for p in copy.iterdir() if (p / "result.json").exists())
    partial, running, crashed, pending, failed = ids[:5]
    (copy / partial / "result.json").unlink()
    (copy / partial / "checkpoint").mkdir()
    (copy / running / "result.json").unlink()
    (copy / running / LOCK_NAME).write_text(
        json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "token": "x"})
    )
    (copy / crashed / "result.json").unlink()  # a lock left by a dead process: not running
    dead = subprocess.Popen(["true"])
    dead.wait()
    (copy / crashed / LOCK_NAME).write_text(
        json.dumps({"pid": dead.pid, "host": socket.gethostname(), "token": "y"})
    )
    shutil.rmtree(copy / pending)
    result = json.loads((copy / failed / "result.json").read_text())
    (copy / failed / "result.json").write_text(
        json.dumps({**result, "status": "failed", "error": "boom"})
    )
    states = {r["run_id"]: r["state"] for r in sweep_status(copy)}
    assert states == {
        partial: "partial",
        running: "running",
        crashed: "pending",
        pending: "pending",
        failed: "failed",
        ids[5]: "done",
    }
    shown = cdlaw("status", copy, "--json", cwd=tmp_path)
    assert shown.returncode == 0
    assert {r["run_id"]: r["state"] for r in json.loads(shown.stdout)} == states
    table = cdlaw("status", copy.parent, cwd=tmp_path)  # a folder of sweeps works too
    assert table.returncode == 0 and "running" in table.stdout and "boom" in table.stdout
    assert cdlaw("status", tmp_path / "nope", cwd=tmp_path).returncode == 2


def test_restart_only_retrains_the_selected_run(tiny, runs_root, one_thread):
    sweep_dir = tiny["dir"]
    target = sorted(p.name for p in sweep_dir.iterdir() if (p / "result.json").exists())[0]
    stamps = {p: p.stat().st_mtime_ns for p in sweep_dir.glob("*/result.json")}
    before = losses(sweep_dir)
    outcome = run_sweep(
        tiny["path"],
        runs_root,
        SweepOptions(restart=True, only=f"run_id={target}", jobs=1, exec_cfg=one_thread),
    )
    assert outcome.trained == [target]
    after = {p: p.stat().st_mtime_ns for p in sweep_dir.glob("*/result.json")}
    changed = {p.parent.name for p in after if after[p] != stamps.get(p)}
    assert changed == {target}
    assert losses(sweep_dir) == before  # deterministic: the same loss again
    attempts = json.loads((sweep_dir / target / "attempts.json").read_text())
    assert len(attempts) == 1 and attempts[0]["pid"] == os.getpid()


def test_runs_trained_on_other_tokens_are_refused_not_skipped(tiny, runs_root):
    # As after a change to the corpus generator: a finished run's recorded corpus differs.
    sweep_dir = tiny["dir"]
    results = sorted(sweep_dir.glob("*/result.json"))
    recorded = json.loads(results[0].read_text())
    assert recorded["corpus_key"] == corpus_key(load_sweep(tiny["path"]).runs()[0].data)
    texts = {p: p.read_text() for p in results}
    results[0].write_text(json.dumps({**recorded, "corpus_key": "0" * 16}))
    try:
        result = cdlaw("sweep", tiny["path"], "--out", runs_root, cwd=runs_root)
        message = " ".join(result.stderr.split())
        assert result.returncode == 2 and "other tokens" in message and "--restart" in message
        assert result.stderr.count("\n") <= 2  # one sentence, no traceback
        assert {p: p.read_text() for p in results if p != results[0]} == {
            p: t for p, t in texts.items() if p != results[0]
        }
    finally:
        results[0].write_text(texts[results[0]])


def test_dry_run_says_a_sweep_that_adds_a_seed_keeps_the_runs(tiny, runs_root, one_thread):
    path = runs_root.parent / "tiny-seeds.toml"
    path.write_text(tiny["path"].read_text().replace("[data]", "seed = [0, 1]\n[data]"))
    plan = dry_run_sweep(path, runs_root, SweepOptions(exec_cfg=one_thread), calibrate=False)
    assert any("adds 6 run(s) to the 6" in note for note in plan.notes), plan.notes
    assert sum(row["state"] == "done" for row in plan.rows) == 6
    assert (tiny["dir"] / "sweep.toml").read_text() == tiny["path"].read_text()


def test_a_different_sweep_file_under_the_same_name_is_refused(tiny, runs_root, one_thread):
    path = runs_root.parent / "tiny-edited.toml"
    path.write_text(tiny["path"].read_text().replace("eval_every = 4", "eval_every = 8"))
    with pytest.raises(BadInput, match="holds a different sweep"):
        run_sweep(path, runs_root, SweepOptions(jobs=1, exec_cfg=one_thread))
    assert (tiny["dir"] / "sweep.toml").read_text() == tiny["path"].read_text()
    result = cdlaw("sweep", path, "--out", runs_root, cwd=runs_root)
    assert result.returncode == 2 and "--restart" in " ".join(result.stderr.split())


def test_the_dry_run_refuses_what_the_sweep_refuses_and_counts_what_restart_retrains(
    tiny, tmp_path, one_thread
):
    """--dry-run checks as the sweep does: a sweep file that changes runs, and runs trained
    on other inputs, are refused without --restart; with it, the runs it deletes are to
    train again (they showed as done, 0 s to do)."""
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(tiny["dir"], root / "tiny")
    edited = tmp_path / "tiny-edited.toml"
    edited.write_text(tiny["path"].read_text().replace("eval_every = 4", "eval_every = 8"))
    with pytest.raises(BadInput, match="holds a different sweep"):
        dry_run_sweep(edited, root, SweepOptions(exec_cfg=one_thread), calibrate=False)
    plan = dry_run_sweep(
        edited, root, SweepOptions(exec_cfg=one_thread, restart=True), calibrate=False
    )
    assert {row["state"] for row in plan.rows} == {"pending"}
    assert any("--restart deletes 6 run folder(s)" in n for n in plan.notes), plan.notes
    # one run's folder records another corpus: the sweep would refuse it, so does the preview
    run = next(p for p in (root / "tiny").iterdir() if (p / "config.json").is_file())
    config = json.loads((run / "config.json").read_text())
    config["inputs"] = {"corpus_key": "0" * 20, "files": []}
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(BadInput, match="other tokens"):
        dry_run_sweep(tiny["path"], root, SweepOptions(exec_cfg=one_thread), calibrate=False)
    plan = dry_run_sweep(
        tiny["path"],
        root,
        SweepOptions(exec_cfg=one_thread, restart=True, only=f"run_id={run.name}"),
        calibrate=False,
    )
    assert [row["state"] for row in plan.rows] == ["pending"]


def test_a_model_too_big_for_the_machine_is_refused_before_anything(tmp_path):
    """A size of "1T" is a valid name; its training needs ~21,700 GiB. The sweep and its
    dry run (which would build it to time it) refuse it in one sentence, writing nothing;
    workers were killed for memory, and the preview with them."""
    repo = Path(__file__).resolve().parents[2]
    huge = tmp_path / "huge.toml"
    huge.write_text(
        (repo / "sweeps" / "smoke.toml").read_text().replace('["20K", "60K"]', '["20K", "1T"]')
    )
    for extra in (["--dry-run"], []):
        result = cdlaw("sweep", huge, "--out", tmp_path / "runs", *extra, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "the 1T model needs about" in result.stderr and "GiB" in result.stderr
        assert not (tmp_path / "runs").exists()
