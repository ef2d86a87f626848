"""Experiment trackers: each run's config, metrics rows and result, logged where researchers
look (docs/sweep.md, "Trackers"). `cdlaw sweep --tracker tensorboard,wandb,mlflow`.

    tracked = TrackedRun(("tensorboard",), out, cfg)
    tracked.row(row)          every metrics.parquet row, as the loop appends it
    tracked.finish(result)    the result row; None when the run stopped and resumes later

Local and offline only, everything inside the runs folder OUT:

    OUT/tensorboard/<sweep>/<run_id>/   event files (`tensorboard --logdir OUT/tensorboard`)
    OUT/wandb/offline-run-*-<run_id>/    W&B offline runs (`wandb sync`); WANDB_MODE overrides
    OUT/mlruns/                          an MLflow file store; MLFLOW_TRACKING_URI overrides

A sweep is one group (W&B) or experiment (MLflow) named after the sweep; a run is one run
named by its run_id, its config flattened ("train.lr"), its metrics on the training step
axis, its result's numbers as "result/<name>". Each tracker's package is an extra
(`pip install -e '.[tensorboard]'` in the clone), imported only when asked for. A resumed run logs
only the steps it trains anew: TensorBoard drops what the interrupted session logged past
the checkpoint, MLflow continues the same run and skips steps it has, W&B starts another
offline folder with the same id that `wandb sync` merges. A tracker that fails says so in
one line and the run goes on without it: a lost chart must never cost a trained model.
"""

from __future__ import annotations

import importlib.util
import json
import math
import numbers
import os
import sys
import time
from pathlib import Path

from cdlaw.config import TRACKERS, RunConfig, to_dict
from cdlaw.system.errors import BadInput
from cdlaw.system.extras import install_advice
from cdlaw.train.result import run_facts

# tracker -> the module its extra installs (mlflow-skinny provides `mlflow`)
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def tracker_names(text: str) -> tuple[str, ...]:
    """`--tracker tensorboard,mlflow` as a tuple of names, each once; BadInput for an unknown
    name or a missing package (require_trackers)."""
    names = (name.strip().lower() for name in (text or "").split(","))
    kinds = tuple(dict.fromkeys(name for name in names if name))
    require_trackers(kinds)
    return kinds


def require_trackers(kinds: tuple[str, ...]) -> None:
    """BadInput naming the extra to install when a tracker's package is missing: said before
    any run starts, not after the first one has trained."""
    for kind in kinds:
        if kind not in PACKAGES:
            raise BadInput(f"--tracker must be one of {', '.join(TRACKERS)}, got {kind!r}")
        if importlib.util.find_spec(PACKAGES[kind]) is None:
            raise BadInput(
                f"--tracker {kind} needs the {PACKAGES[kind]} package, which this install "
                f"lacks; install {install_advice(kind)}"
            )


def flat_config(cfg: RunConfig) -> dict:
    """The run's facts (N, D, D′, steps, FLOPs) and its config, one level deep ("model.d_model"),
    every value a number, a bool or a string (what all three trackers take as parameters)."""
    flat: dict = {}

    def put(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, (bool, int, float, str)):
            flat[prefix] = value
        else:  # lists (paraphrase styles), None
            flat[prefix] = json.dumps(value)

    put("", {**run_facts(cfg), **to_dict(cfg)})
    return flat


def _numbers(row: dict, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a row (NaN marks a step that did not evaluate: nothing to log)."""
    return {
        f"{prefix}{k}": float(v)
        for k, v in row.items()
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
    }


class TensorBoardRun:
    """Event files written with tensorboard's own writer and protos (no torch, no TF)."""

    def __init__(self, out: Path, sweep: str, run_id: str, config: dict, first_step: int | None):
        from tensorboard.compat.proto.event_pb2 import SessionLog
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.writer = EventFileWriter(str(out / "tensorboard" / sweep / run_id))
        if first_step is not None:  # TensorBoard purges events at ≥ this step: no doubled steps
            self._event(first_step, session_log=SessionLog(status=SessionLog.START))
        self._event(0, summary=hparams_pb(config, trial_id=run_id))
        self._event(0, summary=self._text("config", json.dumps(config, indent=1)))

    def _event(self, step: int, **fields) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.writer.add_event(Event(wall_time=time.time(), step=step, **fields))

    @staticmethod
    def _text(tag: str, text: str):
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)])
        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()], tensor_shape=shape)
        return Summary(value=[Summary.Value(tag=tag, metadata=meta, tensor=tensor)])

    def log(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        scalars = [Summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        self._event(step, summary=Summary(value=scalars))

    def finish(self, step: int, result: dict | None) -> None:
        if result is not None:
            self.log(step, _numbers(result, "result/"))
            self._event(step, summary=self._text("result/status", str(result.get("status"))))
        self.writer.close()


class WandbRun:
    """A W&B run in offline mode (unless WANDB_MODE says otherwise), under OUT/wandb."""

    def __init__(self, out: Path, sweep: str, run_id: str, config: dict, first_step: int | None):
        import wandb

        self.run = wandb.init(
            dir=str(out),
            mode=None if os.environ.get("WANDB_MODE") else "offline",  # None: wandb reads it
            project=os.environ.get("WANDB_PROJECT") or "cdlaw",
            group=sweep,
            name=run_id,
            id=run_id,
            resume="allow",
            config=config,
            # console="off": wandb must not take over the sweep's stdout and stderr
            settings=wandb.Settings(console="off", silent=True),
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def finish(self, step: int, result: dict | None) -> None:
        if result is not None:
            self.run.summary.update({**_numbers(result, "result/"), "status": result["status"]})
        failed = result is None or result.get("status") == "failed"
        self.run.finish(exit_code=1 if failed else 0)


class MlflowRun:
    """An MLflow run in the sweep's experiment, in a file store at OUT/mlruns unless
    MLFLOW_TRACKING_URI names another (a server, a database)."""

    def __init__(self, out: Path, sweep: str, run_id: str, config: dict, first_step: int | None):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (out / "mlruns").resolve().as_uri()
            # MLflow 3 keeps the file store in maintenance and asks for this opt-in; it is
            # the one backend that many worker processes can write to without locking.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = client = MlflowClient(tracking_uri=uri)
        experiment = self._experiment(sweep)
        self.logged = 0  # steps up to here are in the run already (a resumed run)
        earlier = None
        if first_step != 1:  # resumed: continue the unfinished run of this run_id
            found = client.search_runs(
                [experiment],
                filter_string=f"attributes.run_name = '{run_id}'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
            earlier = found[0] if found and found[0].info.status != "FINISHED" else None
        if earlier is not None:
            self.id = earlier.info.run_id
            history = (client.get_metric_history(self.id, k) for k in earlier.data.metrics)
            self.logged = max((m.step for h in history for m in h), default=0)
            client.update_run(self.id, status="RUNNING")
        else:
            tags = {"cdlaw.sweep": sweep, "cdlaw.run_id": run_id}
            self.id = client.create_run(experiment, run_name=run_id, tags=tags).info.run_id
            params = [Param(k, str(v)[:500]) for k, v in config.items()]
            for i in range(0, len(params), 100):  # MLflow takes 100 params a batch
                client.log_batch(self.id, params=params[i : i + 100])

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:  # another worker created it a moment ago
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def log(self, step: int, values: dict[str, float], *, final: bool = False) -> None:
        from mlflow.entities import Metric

        if step <= self.logged and not final:
            return
        ms = int(time.time() * 1000)
        metrics = [Metric(k, v, ms, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.id, metrics=metrics[i : i + 1000])

    def finish(self, step: int, result: dict | None) -> None:
        status = "KILLED"  # stopped; resumes later
        if result is not None:
            self.log(step, _numbers(result, "result/"), final=True)
            self.client.set_tag(self.id, "cdlaw.status", result.get("status"))
            status = "FAILED" if result.get("status") == "failed" else "FINISHED"
        self.client.set_terminated(self.id, status)


TRACKER_RUNS = {"tensorboard": TensorBoardRun, "wandb": WandbRun, "mlflow": MlflowRun}


class TrackedRun:
    """One run, logged to every tracker asked for. Trackers open at the first row, whose step
    says whether the run starts afresh (1) or resumes from a checkpoint (later)."""

    def __init__(self, kinds: tuple[str, ...], out: Path, cfg: RunConfig):
        self.kinds, self.out = tuple(kinds), Path(out)
        self.sweep, self.run_id, self.config = cfg.sweep, cfg.run_id, flat_config(cfg)
        self.runs: dict | None = None  # kind -> its run, once open
        self.step = 0

    def row(self, row: dict) -> None:
        step = int(row["step"])
        self._open(step)
        values = _numbers({k: v for k, v in row.items() if k != "step"})
        for kind, run in list(self._runs().items()):
            self._guard(kind, run.log, step, values)
        self.step = step

    def finish(self, result: dict | None) -> None:
        """Log the result row's numbers (None: the run stopped and resumes later), close."""
        self._open(None)
        step = self.step or int((result or {}).get("steps") or 0)
        for kind, run in list(self._runs().items()):
            self._guard(kind, run.finish, step, result)
        self.runs = {}

    def _open(self, first_step: int | None) -> None:
        if self.runs is not None:
            return
        self.runs = {}
        for kind in self.kinds:
            where = (self.out, self.sweep, self.run_id, self.config, first_step)
            run = self._guard(kind, TRACKER_RUNS[kind], *where)
            if run is not None:
                self.runs[kind] = run

    def _runs(self) -> dict:
        return self.runs or {}

    def _guard(self, kind: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            self._runs().pop(kind, None)
            print(
                f"warning: run {self.run_id}: the {kind} tracker failed "
                f"({type(e).__name__}: {e}); the run goes on without it",
                file=sys.stderr,
                flush=True,
            )
            return None
