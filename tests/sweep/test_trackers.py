"""`cdlaw sweep --tracker tensorboard,wandb,mlflow`: each tracker's own files, read back with
the tracker's own reader, hold the run's config, every metrics.parquet row on the same step
axis, and the result; metrics.parquet names its run; a log gets plain progress lines; a
missing tracker package is bad input before anything runs; a resumed run logs no step twice.

One tiny run (8 steps) trains once with every tracker that is installed (`make test-all`
installs all three), and once more stopped at step 5 and resumed; a tracker that is not
installed skips."""

import importlib.util
import json
import math
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from runhelpers import cdlaw

from cdlaw.config import RunConfig
from cdlaw.train.metrics import read_metrics, resumed_rows, write_metrics
from cdlaw.train.trackers import PACKAGES, TrackedRun

SWEEP = "trackers"
INSTALLED = [k for k, m in PACKAGES.items() if importlib.util.find_spec(m) is not None]
METRICS = ["tokens_seen", "epoch", "lr", "train_loss", "val_loss", "grad_norm", "flops"]


def clean_env() -> dict:
    """The environment without a user's tracker settings (they would send runs elsewhere)."""
    drop = ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT")
    return {k: v for k, v in os.environ.items() if k not in drop} | {"COLUMNS": "1000"}


@pytest.fixture(scope="module")
def tracked(runs_root, write_sweep):
    """One 8-step run trained by `cdlaw sweep --tracker <every installed tracker>`."""
    if not INSTALLED:
        pytest.skip("no tracker package installed (pip install -e '.[trackers]')")
    path = write_sweep(runs_root, SWEEP, sizes='"20K"')
    args = [sys.executable, "-m", "cdlaw", "sweep", path, "--out", runs_root, "--restart"]
    args += ["--only", "derived_ratio=0", "--device", "cpu", "--threads", "1", "--jobs", "1"]
    args += ["--tracker", ",".join(INSTALLED)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = [p.parent for p in (runs_root / SWEEP).glob("*/result.json")]
    return {
        "stderr": proc.stderr,
        "out": runs_root,
        "run_id": run_dir.name,
        "metrics": pd.read_parquet(run_dir / "metrics.parquet"),
        "result": json.loads((run_dir / "result.json").read_text()),
        "config": json.loads((run_dir / "config.json").read_text()),
    }


def finite(metrics: pd.DataFrame, column: str) -> tuple[list[int], np.ndarray]:
    """The steps and values of a metrics column where it has a value (val_loss: evaluations)."""
    m = metrics[np.isfinite(metrics[column].to_numpy(float))]
    return m["step"].tolist(), m[column].to_numpy(float)


# --- metrics.parquet and the log ------------------------------------------------------------


def test_metrics_parquet_names_its_run_and_old_files_still_read(tracked, tmp_path):
    metrics, rid = tracked["metrics"], tracked["run_id"]
    assert list(metrics.columns[:2]) == ["run_id", "step"]
    assert (metrics["run_id"] == rid).all() and metrics["step"].tolist() == list(range(1, 9))

    old = tmp_path / "metrics.parquet"  # written before the column existed
    metrics.drop(columns="run_id").to_parquet(old)
    rows = resumed_rows(old, 4, [1, 2, 3, 4], "b" * 12)
    assert [r["run_id"] for r in rows] == ["b" * 12] * 4
    write_metrics(old, rows)
    assert [r["run_id"] for r in read_metrics(old)] == ["b" * 12] * 4

    from cdlaw.figures.curves import curves_figure

    for frame in (metrics, metrics.drop(columns="run_id")):
        curves_figure({rid: frame})


def test_a_log_gets_about_ten_progress_lines_per_run(tracked):
    """stderr is a pipe here: no bars, but plain lines between the run's start and end."""
    rid = tracked["run_id"]
    lines = re.findall(
        rf"(?m)^run {rid} step (\d+)/8 loss \d+\.\d+( val \d+\.\d+)? tok/s \S+$", tracked["stderr"]
    )
    steps = [int(s) for s, _ in lines]
    assert 4 <= len(steps) <= 10 and steps == sorted(set(steps)) and steps[-1] == 8, tracked[
        "stderr"
    ]
    order = [tracked["stderr"].index(w) for w in (f"start {rid}", f"run {rid} step", f"done {rid}")]
    assert order == sorted(order)


# --- each tracker, read back with its own reader ---------------------------------------------


def test_tensorboard_event_files_hold_every_row_and_the_result(tracked):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tracked["out"] / "tensorboard" / SWEEP / tracked["run_id"]
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    for column in METRICS:
        steps, values = finite(tracked["metrics"], column)
        scalars = events.Scalars(column)
        assert [s.step for s in scalars] == steps, column
        assert np.allclose([s.value for s in scalars], values, rtol=1e-6), column
    (loss,) = events.Scalars("result/loss")
    assert loss.step == 8 and math.isclose(loss.value, tracked["result"]["loss"], rel_tol=1e-6)
    config = json.loads(events.Tensors("config")[0].tensor_proto.string_val[0])
    assert (
        config["run_id"] == tracked["run_id"]
        and config["train.lr"] == tracked["config"]["train"]["lr"]
    )
    assert "_hparams_/session_start_info" in events.Tags()["tensors"]


def wandb_records(path: Path) -> list:
    """The records of a W&B transaction log (.wandb): a LevelDB-style log of 32 KiB blocks,
    each record a 7-byte header (crc, length, type: full/first/middle/last) and a Record proto."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, chunks, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        left = block - pos % block
        _, n, kind = struct.unpack("<IHB", data[pos : pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:  # the zero padding at a block's end
            pos += left
            continue
        chunks += data[pos + 7 : pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(chunks)
            records.append(record)
            chunks = b""
    return records


def test_wandb_offline_run_holds_config_history_and_summary(tracked):
    pytest.importorskip("wandb")
    rid = tracked["run_id"]
    (folder,) = (tracked["out"] / "wandb").glob(f"offline-run-*-{rid}")
    records = wandb_records(folder / f"run-{rid}.wandb")
    by_kind: dict[str, list] = {}
    for r in records:
        by_kind.setdefault(r.WhichOneof("record_type"), []).append(r)
    (run,) = by_kind["run"]
    assert (run.run.run_group, run.run.display_name, run.run.run_id) == (SWEEP, rid, rid)
    config = {u.key: json.loads(u.value_json) for u in run.run.config.update}
    assert config["run_id"] == rid and config["train.lr"] == tracked["config"]["train"]["lr"]

    history = [
        {i.nested_key[0] or i.key: json.loads(i.value_json) for i in r.history.item}
        for r in by_kind["history"]
    ]
    assert [h["_step"] for h in history] == tracked["metrics"]["step"].tolist()
    for column in METRICS:
        steps, values = finite(tracked["metrics"], column)
        logged = [(h["_step"], h[column]) for h in history if column in h]
        assert [s for s, _ in logged] == steps, column
        assert np.allclose([v for _, v in logged], values, rtol=1e-12), column
    summary = {
        (u.nested_key[0] if u.nested_key else u.key): json.loads(u.value_json)
        for r in by_kind["summary"]
        for u in r.summary.update
    }
    assert summary["result/loss"] == tracked["result"]["loss"] and summary["status"] == "done"
    assert by_kind["exit"][0].exit.exit_code == 0


def mlflow_client(out: Path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())


def test_mlflow_store_has_the_sweep_as_experiment_and_the_run(tracked, monkeypatch):
    client = mlflow_client(tracked["out"], monkeypatch)
    experiment = client.get_experiment_by_name(SWEEP)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == tracked["run_id"] and run.info.status == "FINISHED"
    assert float(run.data.params["train.lr"]) == tracked["config"]["train"]["lr"]
    assert run.data.params["strategy"] == "none" and run.data.tags["cdlaw.status"] == "done"
    for column in METRICS:
        steps, values = finite(tracked["metrics"], column)
        history = client.get_metric_history(run.info.run_id, column)
        assert [m.step for m in history] == steps, column
        assert np.allclose([m.value for m in history], values, rtol=1e-12), column
    assert math.isclose(run.data.metrics["result/loss"], tracked["result"]["loss"])
    assert run.data.metrics["result/flops"] == tracked["result"]["flops"]


# --- a simulated sweep, a missing package, a resumed run, a broken tracker -----------------------


def test_a_simulated_sweep_logs_its_runs_too(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = tmp_path / "sim.toml"
    path.write_text(
        'name = "sim"\n[grid]\nsize = ["olmo3_14M"]\nfresh_tokens = [1e8, 2e8]\n'
        'strategy = ["repetition"]\nderived_ratio = [0]\n'
        '[data]\ntokenizer = "/nowhere/tokenizer.json"  # never read: nothing is trained\n'
    )
    proc = cdlaw(
        "sweep",
        path,
        "--out",
        tmp_path / "runs",
        "--executor",
        "simulate",
        "--law",
        "qin2026",
        "--tracker",
        "tensorboard",
    )
    assert proc.returncode == 0, proc.stderr
    results = list((tmp_path / "runs" / "sim").glob("*/result.json"))
    assert len(results) == 2
    for p in results:
        events = EventAccumulator(str(tmp_path / "runs" / "tensorboard" / "sim" / p.parent.name))
        events.Reload()
        loss = json.loads(p.read_text())["loss"]
        assert math.isclose(events.Scalars("val_loss")[0].value, loss, rel_tol=1e-6)
        assert math.isclose(events.Scalars("result/loss")[0].value, loss, rel_tol=1e-6)


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_missing_tracker_package_is_bad_input_before_anything_runs(tmp_path, dry_run):
    """The package is hidden from this interpreter (sys.modules[name] = None: not installed)."""
    path = tmp_path / "t.toml"  # a valid sweep: without the check it would run
    path.write_text(
        'name = "t"\n[grid]\nsize = ["20K"]\nfresh_tokens = [2048]\n'
        'strategy = ["repetition"]\nderived_ratio = [0]\n'
    )
    out = tmp_path / "runs"
    argv = ["cdlaw", "sweep", str(path), "--out", str(out), "--tracker", "wandb"]
    argv += ["--dry-run"] if dry_run else []
    code = (
        f"import sys; sys.modules['wandb'] = None; sys.argv = {argv!r}; "
        "from cdlaw.cli import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env()
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install -e '.[wandb]'" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    proc = cdlaw("sweep", path, "--out", out, "--tracker", "neptune", "--dry-run")
    assert proc.returncode == 2 and "--tracker must be one of" in proc.stderr, proc.stderr


def resumed_twice(kind: str, out: Path) -> tuple[str, list[dict]]:
    """A run logs steps 1-6, stops (its checkpoint is at step 4), resumes at 5 and ends at 8."""
    cfg = RunConfig(sweep="resumed", strategy="none", fresh_tokens=2048, derived_tokens=0)
    first = TrackedRun((kind,), out, cfg)
    for step in range(1, 7):
        first.row({"run_id": cfg.run_id, "step": step, "train_loss": 10.0 - step})
    first.finish(None)
    rows = [{"run_id": cfg.run_id, "step": s, "train_loss": 100.0 - s} for s in range(5, 9)]
    again = TrackedRun((kind,), out, cfg)
    for row in rows:
        again.row(row)
    again.finish({"status": "done", "loss": 1.5, "steps": 8})
    return cfg.run_id, rows


def test_a_resumed_run_logs_no_step_twice_in_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rid, _ = resumed_twice("tensorboard", tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard" / "resumed" / rid))
    events.Reload()
    logged = [(s.step, s.value) for s in events.Scalars("train_loss")]
    assert logged == [(1, 9), (2, 8), (3, 7), (4, 6), (5, 95), (6, 94), (7, 93), (8, 92)]


def test_a_resumed_run_continues_its_mlflow_run_without_doubled_steps(tmp_path, monkeypatch):
    client = mlflow_client(tmp_path, monkeypatch)
    rid, _ = resumed_twice("mlflow", tmp_path)
    (run,) = client.search_runs([client.get_experiment_by_name("resumed").experiment_id])
    assert run.info.run_name == rid and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in history) == list(range(1, 9))
    assert run.data.metrics["result/loss"] == 1.5


def test_a_run_stopped_mid_way_and_resumed_logs_each_step_once(runs_root, write_sweep, monkeypatch):
    """The sweep is stopped at step 5 (its checkpoint is at step 4) by an interrupt raised in
    its progress callback, then run again: it resumes at step 5 and logs steps 5-8 anew."""
    kinds = tuple(k for k in ("tensorboard", "mlflow") if k in INSTALLED)
    if not kinds:
        pytest.skip("needs tensorboard or mlflow")
    from cdlaw.config import ExecConfig
    from cdlaw.sweep.events import RunProgress
    from cdlaw.sweep.options import SweepOptions
    from cdlaw.sweep.runner import run_sweep

    def stop_at_step_5(event):
        if isinstance(event, RunProgress) and event.step == 5:
            raise KeyboardInterrupt

    name, out = "trackers-resumed", runs_root
    path = write_sweep(runs_root, name, sizes='"20K"')
    ex = ExecConfig(device="cpu", threads=1, trackers=kinds)
    kw = {"only": "derived_ratio=0", "jobs": 1, "exec_cfg": ex, "restart": True}
    with pytest.raises(KeyboardInterrupt):
        run_sweep(path, out, SweepOptions(**kw), on_event=stop_at_step_5)
    assert run_sweep(path, out, SweepOptions(**{**kw, "restart": False})).statuses.keys()
    (run_dir,) = [p.parent for p in (out / name).glob("*/result.json")]
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    steps, values = finite(metrics, "train_loss")
    assert steps == list(range(1, 9))
    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert [a["resumed"] for a in attempts] == [False, True]  # it did resume mid-way
    if "tensorboard" in kinds:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(out / "tensorboard" / name / run_dir.name))
        events.Reload()
        logged = events.Scalars("train_loss")
        assert [s.step for s in logged] == steps
        assert np.allclose([s.value for s in logged], values, rtol=1e-6)
    if "mlflow" in kinds:
        client = mlflow_client(out, monkeypatch)
        (run,) = client.search_runs([client.get_experiment_by_name(name).experiment_id])
        assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert sorted(m.step for m in history) == steps


def test_a_tracker_that_fails_warns_once_and_the_run_goes_on(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # OUT/tensorboard cannot be made inside a file
    cfg = RunConfig(sweep="broken", strategy="none", fresh_tokens=2048, derived_tokens=0)
    tracked = TrackedRun(("tensorboard",), blocked, cfg)
    for step in (1, 2):
        tracked.row({"step": step, "train_loss": 1.0})
    tracked.finish({"status": "done", "loss": 1.0})
    warnings = [line for line in capsys.readouterr().err.splitlines() if "tracker failed" in line]
    assert len(warnings) == 1 and cfg.run_id in warnings[0] and "tensorboard" in warnings[0]
