"""Run a sweep: the per-run worker, run locks, executors, resume and the summary (SPEC §4, §13).

    runs/<sweep>/sweep.toml           the sweep file, copied verbatim
    runs/<sweep>/summary.parquet      rebuilt from every <run_id>/result.json (atomic)
    runs/<sweep>/<run_id>/            written by train_run; plus, from here:
        .lock                         who trains it now (pid, host, heartbeat = its mtime)
        attempts.json                 one entry per process that started training it
        error.txt                     the traceback of a failed run
    runs/.cache/                      tokenised corpora, shared by every sweep in runs/

A run is done when its result.json exists (train_run writes it last, atomically). Each
run is trained under an exclusive lock file, so two processes (two sweeps on one folder,
or a sweep restarted while an orphan still runs) never train the same run. Stale locks
(the holder died: a dead pid on this host, or no heartbeat from another host for
`LOCK_STALE_S`) are broken under a second lock, so two breakers cannot both win. An
interrupted run continues from its checkpoint (train_run resumes by itself).

Executors: in-process (`jobs=1`), K spawned worker processes (`jobs=K`, torch threads
split between them), or Ray (one task per run, the runs folder on shared storage). All
three go through one scheduling loop over concurrent.futures-style futures.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cdlaw.atomic import write_json_atomic, write_parquet_atomic, write_text_atomic
from cdlaw.config import ExecConfig, RunConfig, from_dict, to_dict
from cdlaw.errors import BadInput
from cdlaw.sweep import SweepConfig, load_sweep, parse_only, run_facts

Event = dict
OnEvent = Callable[[Event], None]

LOCK_NAME = ".lock"
LOCK_HEARTBEAT_S = float(os.environ.get("CDLAW_LOCK_HEARTBEAT_S", 10))
LOCK_STALE_S = float(os.environ.get("CDLAW_LOCK_STALE_S", 120))  # other hosts: no heartbeat
BREAK_GUARD_STALE_S = 30.0  # breaking a lock takes milliseconds; an older guard is debris
POLL_S = 0.2  # how often the scheduler looks at events and finished futures
RETRY_LOCKED_S = 2.0  # how often a run held by another process is looked at again

# SPEC §5: the columns every summary row has (train_run adds a few more of its own).
SUMMARY_COLUMNS = tuple(
    """run_id sweep strategy n_params n_params_total fresh_tokens derived_tokens tokens_trained
    derived_ratio epochs tokens_per_param lr weight_decay seed d_model n_layers n_heads seq_len
    batch_tokens vocab_size schedule loss train_loss status flops wall_seconds tokens_per_second
    device corpus cdlaw_version""".split()
)
FINISHED = ("done", "diverged", "failed")
SORT_COLUMNS = [
    "n_params",
    "fresh_tokens",
    "strategy",
    "derived_tokens",
    "lr",
    "weight_decay",
    "seed",
]


# ---------------------------------------------------------------------------------------
# Run locks.
# ---------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, …] (None off Linux)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of a process (to tell a live pid from a reused one)."""
    stat = _proc_stat(pid)
    return stat[19] if stat and len(stat) > 19 else None  # field 22 of /proc/<pid>/stat


def _pid_alive(pid: int, proc_start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    stat = _proc_stat(pid)
    if stat is None:
        return True
    # A zombie (killed, not yet reaped: containers often lack an init that reaps) is dead;
    # a different start time means the pid was reused by another process.
    return stat[0] not in ("Z", "X") and (proc_start is None or stat[19] == proc_start)


def read_lock(path: Path) -> dict | None:
    """The lock's holder with `stale` (bool) and `age_s`, or None when there is no lock."""
    try:
        stat = path.stat()
        text = path.read_text()
    except FileNotFoundError:
        return None
    age = time.time() - stat.st_mtime
    try:
        info = json.loads(text)
    except json.JSONDecodeError:  # the holder died between creating and writing it
        return {"token": None, "stale": age > BREAK_GUARD_STALE_S, "age_s": age}
    if info.get("host") == socket.gethostname():
        stale = not _pid_alive(int(info["pid"]), info.get("proc_start"))
    else:
        stale = age > LOCK_STALE_S
    return {**info, "stale": stale, "age_s": age}


class RunLock:
    """An exclusive lock file (O_EXCL) holding pid, host and a token; its mtime is a heartbeat.

    Works on shared storage where fcntl locks may not (NFS, Lustre): creation with O_EXCL
    is atomic there. `acquire()` never blocks: it returns False while a live process holds
    the lock.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self) -> bool:
        for _ in range(2):  # once, and once more after breaking a stale lock
            if self._create():
                self._beat = threading.Thread(target=self._heartbeat, daemon=True)
                self._beat.start()
                return True
            holder = read_lock(self.path)
            if holder is not None and not holder["stale"]:
                return False
            self._break(holder)
        return False

    def _create(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        pid = os.getpid()
        info = {
            "pid": pid,
            "host": socket.gethostname(),
            "token": self.token,
            "started": time.time(),
            "proc_start": _proc_start(pid),
        }
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        return True

    def _break(self, seen: dict | None) -> None:
        """Remove a stale lock, under a guard file so that two breakers cannot both win.

        Without the guard, A and B could both judge the lock stale, A remove it and take a
        fresh one, and B then remove A's fresh lock.
        """
        guard = self.path.with_name(self.path.name + ".break")
        try:
            fd = os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - guard.stat().st_mtime > BREAK_GUARD_STALE_S:
                    guard.unlink()  # a breaker died mid-break
            return
        try:
            now = read_lock(self.path)
            if now is not None and now["stale"] and (seen is None or now["token"] == seen["token"]):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)
            guard.unlink(missing_ok=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(LOCK_HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            if json.loads(self.path.read_text()).get("token") == self.token:
                self.path.unlink()  # only our own lock, never one that replaced it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


# ---------------------------------------------------------------------------------------
# One run.
# ---------------------------------------------------------------------------------------


def read_result(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "result.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def execute_run(
    cfg: RunConfig,
    sweep_dir: Path,
    cache_dir: Path,
    exec_cfg: ExecConfig = ExecConfig(),
    retry_failed: bool = False,
    on_event: OnEvent | None = None,
) -> dict:
    """Train one run unless it is done or another process holds it.

    Returns {"run_id", "outcome": done|diverged|failed|skipped|locked, "result": row|None}.
    A crash inside training is recorded as a failed result.json (with error.txt holding the
    traceback) and returned, never raised; KeyboardInterrupt is raised (the trainer has
    saved a checkpoint, so the run resumes next time).
    """
    run_dir = Path(sweep_dir) / cfg.run_id
    emit = on_event or (lambda e: None)
    result = read_result(run_dir)
    if result is not None and not (retry_failed and result.get("status") == "failed"):
        return {"run_id": cfg.run_id, "outcome": "skipped", "result": result}
    lock = RunLock(run_dir / LOCK_NAME)
    if not lock.acquire():
        return {"run_id": cfg.run_id, "outcome": "locked", "result": None}
    with lock:
        result = read_result(run_dir)  # it may have finished while we looked at the lock
        if result is not None:
            if not (retry_failed and result.get("status") == "failed"):
                return {"run_id": cfg.run_id, "outcome": "skipped", "result": result}
            os.replace(run_dir / "result.json", run_dir / "result.failed.json")
        _record_attempt(run_dir, exec_cfg)
        emit({"event": "start", "run_id": cfg.run_id, "pid": os.getpid()})
        started = time.time()
        from cdlaw.data import prepare_corpus, run_stream
        from cdlaw.train import RunInterrupted, train_run

        try:
            prepared = prepare_corpus(cfg.data, Path(cache_dir), cfg.fresh_tokens)
            stream = run_stream(
                prepared,
                cfg.strategy,
                cfg.fresh_tokens,
                cfg.derived_tokens,
                seq_len=cfg.model.seq_len,
                seed=cfg.seed,
            )

            def progress(p: dict) -> None:
                emit({"event": "progress", "run_id": cfg.run_id, **p})

            result = train_run(cfg, run_dir, stream, prepared.val_tokens, exec_cfg, progress)
        except RunInterrupted:  # stopped by a signal with a checkpoint saved: not a failure
            raise
        except Exception as e:  # recorded, and the sweep goes on (SPEC §13)
            result = failed_result(cfg, e, time.time() - started, exec_cfg)
            write_text_atomic(run_dir / "error.txt", traceback.format_exc())
            write_json_atomic(run_dir / "result.json", result)
        else:
            (run_dir / "error.txt").unlink(missing_ok=True)  # from a failed earlier attempt
        (run_dir / "result.failed.json").unlink(missing_ok=True)
    status = result.get("status", "done")
    emit({"event": "end", "run_id": cfg.run_id, "status": status, "loss": result.get("loss")})
    return {"run_id": cfg.run_id, "outcome": status, "result": result}


def _record_attempt(run_dir: Path, exec_cfg: ExecConfig) -> None:
    """attempts.json: one entry per process that started (or resumed) training this run."""
    path = run_dir / "attempts.json"
    try:
        attempts = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        attempts = []
    attempts.append(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "time": time.time(),
            "resumed": any((run_dir / n).exists() for n in ("checkpoint", "checkpoint.old")),
            "exec": to_dict(exec_cfg),
        }
    )
    write_json_atomic(path, attempts)


def failed_result(cfg: RunConfig, error: BaseException | str, wall: float, exec_cfg=None) -> dict:
    """The result row of a run that crashed: the config's columns, NaN losses, the error."""
    from cdlaw import __version__

    facts = run_facts(cfg)
    row = {k: facts[k] for k in facts if k in SUMMARY_COLUMNS}
    row.update(
        run_id=cfg.run_id,
        sweep=cfg.sweep,
        d_model=cfg.model.d_model,
        n_layers=cfg.model.n_layers,
        n_heads=cfg.model.n_heads,
        seq_len=cfg.model.seq_len,
        vocab_size=cfg.model.vocab_size,
        schedule=cfg.train.schedule,
        loss=float("nan"),
        train_loss=float("nan"),
        status="failed",
        wall_seconds=wall,
        tokens_per_second=float("nan"),
        device=(exec_cfg.device if exec_cfg else ""),
        corpus=cfg.data.corpus,
        cdlaw_version=__version__,
        error=error if isinstance(error, str) else f"{type(error).__name__}: {error}",
    )
    return {k: row.get(k) for k in (*SUMMARY_COLUMNS, "error")}


# ---------------------------------------------------------------------------------------
# The summary and the states of runs.
# ---------------------------------------------------------------------------------------


def rebuild_summary(sweep_dir: Path):
    """summary.parquet from every <run_id>/result.json, written atomically; returns the frame.

    Serialised by a lock so that the last process to rebuild it has seen every result
    written before it (two sweeps finishing at once cannot leave a summary that lacks one).
    """
    import pandas as pd
    from filelock import FileLock

    sweep_dir = Path(sweep_dir)
    with FileLock(str(sweep_dir / ".summary.lock")):
        rows = [r for p in sorted(sweep_dir.glob("*/result.json")) if (r := read_result(p.parent))]
        columns = list(SUMMARY_COLUMNS) + sorted(
            {k for r in rows for k in r} - set(SUMMARY_COLUMNS)
        )
        df = pd.DataFrame(rows, columns=columns)
        if len(df):
            df = df.sort_values(SORT_COLUMNS, kind="stable").reset_index(drop=True)
        write_parquet_atomic(sweep_dir / "summary.parquet", df)
    return df


def run_state(run_dir: Path) -> dict:
    """done | diverged | failed | running (a live lock) | partial (a checkpoint) | pending."""
    result = read_result(run_dir)
    if result is not None:
        return {"state": result.get("status", "done"), "result": result}
    holder = read_lock(run_dir / LOCK_NAME)
    if holder is not None and not holder["stale"]:
        return {"state": "running", "holder": holder, "tokens_seen": _tokens_seen(run_dir)}
    if (run_dir / "checkpoint").exists() or (run_dir / "checkpoint.old").exists():
        return {"state": "partial", "tokens_seen": _tokens_seen(run_dir)}
    return {"state": "pending"}


def _tokens_seen(run_dir: Path) -> int | None:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(run_dir / "metrics.parquet", columns=["tokens_seen"])
        return int(table.column("tokens_seen")[-1].as_py()) if table.num_rows else None
    except Exception:  # missing or being replaced: no number is better than a crash
        return None


def sweep_status(path: str | Path) -> list[dict]:
    """One row per run, with its state, for a sweep folder or a runs folder of sweeps.

    Planned runs (from the copied sweep.toml) come first, then any other run folders.
    """
    path = Path(path)
    if (path / "sweep.toml").is_file():
        return _one_sweep_status(path)
    sweeps = sorted(p.parent for p in path.glob("*/sweep.toml"))
    if not sweeps:
        raise BadInput(
            f"{str(path)!r} holds no sweep (no sweep.toml in it or in its folders); "
            "give runs/<sweep> or the runs folder"
        )
    return [row for p in sweeps for row in _one_sweep_status(p)]


def _one_sweep_status(sweep_dir: Path) -> list[dict]:
    sweep = load_sweep(sweep_dir / "sweep.toml")
    runs = sweep.runs(_known_vocab_size(sweep, sweep_dir))
    planned = {r.run_id for r in runs}
    rows = [
        {"sweep": sweep.name, **run_facts(cfg), **_state_row(sweep_dir / cfg.run_id)}
        for cfg in runs
    ]
    for run_dir in sorted(p for p in sweep_dir.iterdir() if _RUN_ID.match(p.name)):
        if run_dir.name in planned or not run_dir.is_dir():
            continue
        try:
            facts = run_facts(from_dict(RunConfig, _run_config_dict(run_dir)))
        except (BadInput, OSError, ValueError, KeyError):
            facts = {"run_id": run_dir.name}
        rows.append({"sweep": sweep.name, **facts, **_state_row(run_dir), "planned": False})
    return rows


def _state_row(run_dir: Path) -> dict:
    state = run_state(run_dir)
    row = {"state": state["state"], "planned": True}
    result = state.get("result") or {}
    for key in ("loss", "wall_seconds", "tokens_per_second", "error"):
        if key in result:
            row[key] = result[key]
    if "tokens_seen" in state:
        row["tokens_seen"] = state["tokens_seen"]
    if "holder" in state:
        row["holder"] = f"pid {state['holder'].get('pid')} on {state['holder'].get('host')}"
    return row


def _run_config_dict(run_dir: Path) -> dict:
    """config.json minus what train_run adds beside the RunConfig (exec, run_id)."""
    data = json.loads((run_dir / "config.json").read_text())
    names = {f.name for f in dataclasses.fields(RunConfig)}
    return {k: v for k, v in data.items() if k in names}


def _known_vocab_size(sweep: SweepConfig, sweep_dir: Path) -> int:
    """The tokenizer's vocabulary without preparing data: the config, or a run's config.json."""
    if sweep.data.tokenizer == "bpe":
        return sweep.data.vocab_size
    for path in sorted(sweep_dir.glob("*/config.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            return int(json.loads(path.read_text())["model"]["vocab_size"])
    from cdlaw.data import prepare_corpus

    return prepare_corpus(sweep.data, sweep_dir.parent / ".cache", 1).vocab_size


# ---------------------------------------------------------------------------------------
# Preparing a sweep: validation (nothing written), the corpus check, the folder.
# ---------------------------------------------------------------------------------------


@dataclass
class SweepPlan:
    """A validated sweep with its runs (after --only) and where they go."""

    sweep: SweepConfig
    runs: list[RunConfig]  # the selected runs, in grid order
    all_runs: list[RunConfig]  # every run of the sweep
    out: Path
    vocab_size: int
    prepared: object = None  # the data layer's PreparedCorpus (when it was prepared)

    @property
    def sweep_dir(self) -> Path:
        return self.out / self.sweep.name

    @property
    def cache_dir(self) -> Path:
        return self.out / ".cache"


def plan_sweep(
    path: str | Path,
    out: str | Path = "runs",
    only: str | None = None,
    cache_dir: Path | None = None,
) -> SweepPlan:
    """Validate a sweep file, check its data against the corpus, and select its runs.

    Writes nothing except the tokenised-corpus cache (in cache_dir, default <out>/.cache).
    Every problem is a BadInput.
    """
    sweep = load_sweep(path)
    keep = parse_only(only) if only else None
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r} is a file; give a folder for the runs")
    from cdlaw.data import prepare_corpus, run_stream

    cache = cache_dir or out / ".cache"
    if sweep.data.tokenizer == "bpe":
        runs = sweep.runs()
    else:  # the vocabulary comes from the tokenizer: ask the data layer first
        runs = sweep.runs(prepare_corpus(sweep.data, cache, 1).vocab_size)
    # The largest D must fit the corpus (BadInput from the data layer if not). Paraphrase
    # passes: the embedded corpus renders any number on demand; paraphrase files must cover
    # each run's D′, which building the longest paraphrase stream of each D checks.
    prepared = prepare_corpus(sweep.data, cache, max(r.fresh_tokens for r in runs))
    vocab = runs[0].model.vocab_size
    if prepared.vocab_size > vocab:
        raise BadInput(
            f"the tokenizer has {prepared.vocab_size} tokens, more than data.vocab_size={vocab}"
        )
    if sweep.data.corpus != "embedded":
        longest: dict[int, RunConfig] = {}
        for r in runs:
            if r.strategy == "paraphrase" and r.derived_tokens > getattr(
                longest.get(r.fresh_tokens), "derived_tokens", -1
            ):
                longest[r.fresh_tokens] = r
        for r in longest.values():
            run_stream(
                prepared, r.strategy, r.fresh_tokens, r.derived_tokens, r.model.seq_len, r.seed
            )
    selected = [r for r in runs if keep is None or keep(run_facts(r))]
    if not selected:
        raise BadInput(f"--only {only!r} selects none of the sweep's {len(runs)} runs")
    return SweepPlan(sweep, selected, runs, out, vocab, prepared)


# ---------------------------------------------------------------------------------------
# Executors: in-process, worker processes, Ray. Each submits execute_run and hands back a
# concurrent.futures.Future; events from workers come back through a queue.
# ---------------------------------------------------------------------------------------


@dataclass
class RunTask:
    """What a worker needs to run one run (plain data: it crosses process boundaries)."""

    config: dict  # to_dict(RunConfig)
    sweep_dir: str
    cache_dir: str
    exec_cfg: dict  # to_dict(ExecConfig)
    retry_failed: bool


def _task_run(task: RunTask, on_event: OnEvent | None) -> dict:
    cfg = from_dict(RunConfig, task.config)
    return execute_run(
        cfg,
        Path(task.sweep_dir),
        Path(task.cache_dir),
        from_dict(ExecConfig, task.exec_cfg),
        task.retry_failed,
        on_event,
    )


class _Throttle:
    """Forward every event, but progress events of a run at most every `every` seconds."""

    def __init__(self, send: Callable[[Event], None], every: float = 0.5):
        self.send, self.every, self.last = send, every, {}

    def __call__(self, event: Event) -> None:
        if event.get("event") == "progress":
            now = time.monotonic()
            final = event.get("step") == event.get("steps_total")
            if not final and now - self.last.get(event["run_id"], -math.inf) < self.every:
                return
            self.last[event["run_id"]] = now
        with contextlib.suppress(Exception):  # a lost progress line must not fail a run
            self.send(event)


class InProcessExecutor:
    """Runs each task right here, when submitted (the `local` executor with one job)."""

    capacity = 1

    def __init__(self, on_event: OnEvent | None, threads: int = 0):
        self.on_event = on_event
        self.threads = threads

    def submit(self, task: RunTask) -> cf.Future:
        future: cf.Future = cf.Future()
        try:
            future.set_result(_task_run(task, self.on_event))
        except Exception as e:
            future.set_exception(e)
        return future

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


# Worker-process globals, set by _pool_init in each spawned worker.
_WORKER: dict = {}


def _pool_init(queue, slot_counter, threads: int, gpus: int, parent: int) -> None:
    """In each worker: die with the parent, pin torch threads and (with GPUs) one device."""
    _die_with_parent(parent)
    with slot_counter.get_lock():
        slot = slot_counter.value
        slot_counter.value += 1
    _WORKER.update(queue=queue, threads=threads, device=f"cuda:{slot % gpus}" if gpus else None)
    import torch

    torch.set_num_threads(max(1, threads))


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this worker when the sweep process dies (even by kill -9), so that no
    orphan keeps training a run the restarted sweep then waits for."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    # The sweep may have died while this worker started, before the line above: then no
    # signal comes, and the worker would take queued runs as an orphan.
    if os.getppid() != parent:
        os._exit(1)


def _pool_task(task: RunTask) -> dict:
    if _WORKER.get("device"):
        task = dataclasses.replace(task, exec_cfg={**task.exec_cfg, "device": _WORKER["device"]})
    return _task_run(task, _Throttle(_WORKER["queue"].put))


class PoolExecutor:
    """K spawned worker processes (spawn, not fork: torch and fork do not mix)."""

    def __init__(self, jobs: int, threads: int, gpus: int, on_event: OnEvent | None):
        import multiprocessing as mp

        self.capacity = jobs
        self.on_event = on_event
        self._ctx = mp.get_context("spawn")
        self._queue = self._ctx.Queue()
        self._args = (jobs, threads, gpus)
        self._pool = None

    def _ensure_pool(self):
        if self._pool is None:
            jobs, threads, gpus = self._args
            counter = self._ctx.Value("i", 0)
            self._pool = cf.ProcessPoolExecutor(
                jobs,
                mp_context=self._ctx,
                initializer=_pool_init,
                initargs=(self._queue, counter, threads, gpus, os.getpid()),
            )
        return self._pool

    def submit(self, task: RunTask) -> cf.Future:
        try:
            return self._ensure_pool().submit(_pool_task, task)
        except cf.process.BrokenProcessPool:  # a worker died: start a fresh pool
            self._pool = None
            return self._ensure_pool().submit(_pool_task, task)

    def broken(self) -> None:
        """A worker died: the pool is unusable; the next submit starts a new one."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def terminate_workers(self, timeout: float = 120.0) -> None:
        """SIGTERM each worker (it checkpoints and exits) and wait for them."""
        import signal

        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.join(timeout)

    def drain(self) -> None:
        import queue as queue_mod

        while True:
            try:
                event = self._queue.get_nowait()
            except queue_mod.Empty:
                return
            if self.on_event:
                self.on_event(event)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self.drain()


def _ray_task(task: RunTask, queue) -> dict:
    send = _Throttle(queue.put_nowait) if queue is not None else None
    return _task_run(task, send)


class RayExecutor:
    """One Ray task per run, with its CPU / GPU request; the runs folder on shared storage."""

    def __init__(self, address: str | None, threads: int, gpus_per_run: float, on_event):
        try:
            import ray
            from ray.util.queue import Queue
        except ImportError:
            raise BadInput(
                "--executor ray needs Ray: pip install 'cdlaw[ray]' (or 'ray[default]')"
            ) from None
        self.ray = ray
        self._started = False
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
            self._started = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus_per_run < 0:  # auto: a GPU per run when the cluster has GPUs
            gpus_per_run = 1 if gpus else 0
        self.threads = max(1, threads)
        self.gpus_per_run = gpus_per_run
        self.capacity = max(1, gpus // gpus_per_run if gpus_per_run else cpus // self.threads)
        self.on_event = on_event
        self._queue = Queue(actor_options={"num_cpus": 0})  # progress events from the tasks
        self._remote = ray.remote(_ray_task).options(
            num_cpus=self.threads, num_gpus=gpus_per_run, max_retries=0
        )

    def submit(self, task: RunTask) -> cf.Future:
        exec_cfg = {**task.exec_cfg, "threads": self.threads}
        if self.gpus_per_run:  # Ray sets CUDA_VISIBLE_DEVICES for the task
            exec_cfg["device"] = "cuda"
        elif exec_cfg["device"] == "auto":
            exec_cfg["device"] = "cpu"
        task = dataclasses.replace(task, exec_cfg=exec_cfg)
        return self._remote.remote(task, self._queue).future()

    def broken(self) -> None:
        pass

    def drain(self) -> None:
        with contextlib.suppress(Exception):
            for event in self._queue.get_nowait_batch(self._queue.qsize()):
                if self.on_event:
                    self.on_event(event)

    def close(self) -> None:
        self.drain()
        with contextlib.suppress(Exception):
            self.ray.kill(self._queue.actor)
        if self._started:
            self.ray.shutdown()


# ---------------------------------------------------------------------------------------
# The scheduling loop and the sweep.
# ---------------------------------------------------------------------------------------


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def resolve_device(device: str) -> str:
    """'auto' → 'cuda' when a GPU is visible, else 'cpu'; a missing GPU is bad input."""
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise BadInput(f"--device {device} was asked for but no CUDA GPU is visible; use cpu")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise BadInput(
            f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible (cuda:0 …)"
        )
    return device


def choose_jobs(device: str, n_runs: int, jobs: int = 0, threads: int = 0) -> tuple[int, int, int]:
    """(jobs, torch threads per job, GPUs to spread jobs over) for the local executors.

    CPU: one job per core, one thread each, by default. Measured on a 2-core machine: two
    1-thread processes train as many tokens per second as one 2-thread process, and a
    2-thread run slows 3–17× as soon as anything else runs beside it, so independent
    1-thread runs are both as fast and far steadier. GPU: one job per visible GPU.
    """
    n_runs = max(1, n_runs)
    if device.startswith("cuda"):
        import torch

        gpus = 1 if ":" in device else max(1, torch.cuda.device_count())
        jobs = jobs or min(gpus, n_runs)
        return jobs, threads or max(1, cpu_count() // jobs), 0 if ":" in device else gpus
    cores = cpu_count()
    jobs = jobs or min(cores, n_runs, 8)
    return jobs, threads or max(1, cores // jobs), 0


@dataclass
class SweepOutcome:
    """What a sweep did: per selected run its status, and the rebuilt summary."""

    plan: SweepPlan
    statuses: dict[str, str]  # run_id -> done | diverged | failed (after this sweep)
    trained: list[str]  # run ids this process trained (finished or not)
    summary: object  # pandas DataFrame (summary.parquet)
    wall_seconds: float
    executor: str = "local"
    jobs: int = 1
    threads: int = 0
    failures: list[dict] = field(default_factory=list)  # {run_id, error} of failed runs

    @property
    def exit_code(self) -> int:
        """1 when any selected run failed (diverged runs are results, not failures)."""
        return 1 if self.failures else 0


def run_sweep(
    path: str | Path,
    out: str | Path = "runs",
    *,
    only: str | None = None,
    restart: bool = False,
    executor: str = "local",
    jobs: int = 0,
    ray_address: str | None = None,
    exec_cfg: ExecConfig = ExecConfig(),
    on_event: OnEvent | None = None,
) -> SweepOutcome:
    """Validate, then train every selected run not yet done; rebuild the summary.

    Resumes by default: finished runs are skipped, interrupted ones continue from their
    checkpoint, runs that failed before this sweep started are tried again. `restart`
    deletes the selected runs' folders first (all of the sweep's run folders when the
    sweep file changed). Runs held by another live process are waited for, not trained.
    """
    if executor not in ("local", "ray"):
        raise BadInput(f"--executor must be local or ray, got {executor!r}")
    if jobs < 0:
        raise BadInput(f"--jobs must be ≥ 1, got {jobs}")
    started = time.time()
    out = Path(out)
    _check_sweep_file(load_sweep(path), out, restart)  # before any work
    device = resolve_device(exec_cfg.device) if executor == "local" else exec_cfg.device
    plan = _plan_or_clean_up(path, out, only)
    sweep_dir = plan.sweep_dir
    _claim_sweep_dir(plan, restart)
    emit = on_event or (lambda e: None)

    facts = [run_facts(r) for r in plan.runs]
    emit({"event": "plan", "sweep": plan.sweep.name, "runs": facts, "sweep_dir": str(sweep_dir)})
    before = {r.run_id: (read_result(sweep_dir / r.run_id) or {}).get("status") for r in plan.runs}
    retry = {rid for rid, s in before.items() if s == "failed"}
    todo = [r for r in plan.runs if before[r.run_id] in (None, "failed")]
    for r in plan.runs:
        if r.run_id not in {t.run_id for t in todo}:
            emit({"event": "skip", "run_id": r.run_id, "status": before[r.run_id]})

    n_jobs, threads, gpus = choose_jobs(device, len(todo), jobs, exec_cfg.threads)
    if executor == "ray":
        gpus_per_run = 1 if device.startswith("cuda") else (0 if device == "cpu" else -1)
        ex = RayExecutor(ray_address, exec_cfg.threads or 1, gpus_per_run, on_event)
        n_jobs, threads = ex.capacity, ex.threads
    elif n_jobs == 1:
        ex = InProcessExecutor(on_event)
    else:
        ex = PoolExecutor(n_jobs, threads, gpus, on_event)
    if executor == "local":
        exec_cfg = dataclasses.replace(exec_cfg, device=device, threads=threads)
    # In parallel, longest first (it shortens the makespan); alone, in grid order.
    if n_jobs > 1:
        todo.sort(key=lambda r: -_cost(run_facts(r)))

    trained: list[str] = []
    try:
        with _forward_sigterm(ex):
            trained = _schedule(plan, todo, retry, ex, exec_cfg, emit)
    finally:
        ex.close()
    summary = rebuild_summary(sweep_dir)
    statuses = {
        r.run_id: (read_result(sweep_dir / r.run_id) or {}).get("status") for r in plan.runs
    }
    failures = [
        {"run_id": rid, "error": (read_result(sweep_dir / rid) or {}).get("error", "")}
        for rid, s in statuses.items()
        if s == "failed"
    ]
    return SweepOutcome(
        plan,
        statuses,
        trained,
        summary,
        time.time() - started,
        executor,
        n_jobs,
        threads,
        failures,
    )


def _plan_or_clean_up(path, out: Path, only: str | None) -> SweepPlan:
    """plan_sweep; on bad input remove the folders it created (bad input writes nothing)."""
    created = [p for p in (out, out / ".cache") if not p.exists()]
    try:
        return plan_sweep(path, out, only)
    except BadInput:
        for p in reversed(created):
            shutil.rmtree(p, ignore_errors=True)
        raise


_RUN_ID = re.compile(r"^[0-9a-f]{12}$")


def _check_sweep_file(sweep: SweepConfig, out: Path, restart: bool) -> None:
    """runs/<sweep>/sweep.toml is never edited: a different sweep of that name needs restart."""
    toml = out / sweep.name / "sweep.toml"
    if toml.is_file() and toml.read_text() != sweep.text and not restart:
        raise BadInput(
            f"{toml} holds a different sweep than {sweep.source}; keep the file as it was, "
            "give the sweep another name, or pass --restart to delete its runs and start over"
        )


def _claim_sweep_dir(plan: SweepPlan, restart: bool) -> None:
    """Copy the sweep file into runs/<sweep>/; with restart, delete the old runs first."""
    sweep_dir = plan.sweep_dir
    toml = sweep_dir / "sweep.toml"
    same = toml.is_file() and toml.read_text() == plan.sweep.text
    _check_sweep_file(plan.sweep, plan.out, restart)
    if restart:
        selected = {r.run_id for r in plan.runs}
        doomed = [
            p
            for p in sorted(sweep_dir.glob("*"))
            if p.is_dir() and _RUN_ID.match(p.name) and (not same or p.name in selected)
        ]
        for p in doomed:
            holder = read_lock(p / LOCK_NAME)
            if holder is not None and not holder["stale"]:
                raise BadInput(
                    f"run {p.name} is being trained by pid {holder.get('pid')} on "
                    f"{holder.get('host')}; stop that sweep before --restart"
                )
        for p in doomed:
            shutil.rmtree(p)
        (sweep_dir / "summary.parquet").unlink(missing_ok=True)
    if not same:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(toml, plan.sweep.text)


@contextlib.contextmanager
def _forward_sigterm(ex):
    """On SIGTERM (a scheduler's stop, `kill`), let the workers checkpoint, then exit 143.

    train_run stops at the end of its step and saves a checkpoint on SIGTERM; worker
    processes get the signal passed on, instead of dying with the sweep mid-step.
    """
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough
        if isinstance(ex, PoolExecutor):
            ex.terminate_workers()
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _cost(facts: dict) -> float:
    """Relative work of a run: tokens × FLOPs per token (attention included)."""
    return facts["tokens_trained"] * facts["flops_per_token"]


def _schedule(plan, todo, retry, ex, exec_cfg, emit) -> list[str]:
    """Keep `ex` busy with runs until every run is finished here or elsewhere.

    A run another live process holds ("locked") is looked at again every RETRY_LOCKED_S
    until that process finishes it (then it is skipped) or dies (then it is taken over).
    A worker that dies (killed, out of memory) loses nothing: its run is queued again and
    resumes from its checkpoint; a run that kills its worker twice is recorded as failed.
    """
    from collections import deque

    queue = deque(todo)
    waiting: dict[str, tuple[RunConfig, float]] = {}
    deaths: dict[str, int] = {}
    inflight: dict[cf.Future, RunConfig] = {}
    trained: list[str] = []

    def task(cfg: RunConfig) -> RunTask:
        return RunTask(
            to_dict(cfg),
            str(plan.sweep_dir.resolve()),
            str(plan.cache_dir.resolve()),
            to_dict(exec_cfg),
            cfg.run_id in retry,
        )

    while queue or inflight or waiting:
        now = time.monotonic()
        for rid, (cfg, when) in list(waiting.items()):
            if when <= now:
                queue.append(cfg)
                del waiting[rid]
        while queue and len(inflight) < ex.capacity:
            cfg = queue.popleft()
            inflight[ex.submit(task(cfg))] = cfg
        if not inflight:
            ex.drain()
            time.sleep(POLL_S)
            continue
        done, _ = cf.wait(list(inflight), timeout=POLL_S, return_when=cf.FIRST_COMPLETED)
        ex.drain()
        for future in done:
            cfg = inflight.pop(future)
            try:
                outcome = future.result()
            except Exception as e:  # the worker process died under the run
                if isinstance(e, cf.process.BrokenProcessPool):
                    ex.broken()
                deaths[cfg.run_id] = deaths.get(cfg.run_id, 0) + 1
                if deaths[cfg.run_id] >= 2:
                    _record_failure(plan, cfg, exec_cfg, f"the worker died twice: {e!r}")
                    emit({"event": "end", "run_id": cfg.run_id, "status": "failed"})
                else:
                    emit({"event": "retry", "run_id": cfg.run_id, "reason": repr(e)})
                    queue.appendleft(cfg)
                continue
            if outcome["outcome"] == "locked":
                if cfg.run_id not in waiting:
                    holder = read_lock(plan.sweep_dir / cfg.run_id / LOCK_NAME) or {}
                    emit(
                        {
                            "event": "locked",
                            "run_id": cfg.run_id,
                            "pid": holder.get("pid"),
                            "host": holder.get("host"),
                        }
                    )
                waiting[cfg.run_id] = (cfg, time.monotonic() + RETRY_LOCKED_S)
            elif outcome["outcome"] == "skipped":
                emit(
                    {
                        "event": "skip",
                        "run_id": cfg.run_id,
                        "status": (outcome["result"] or {}).get("status"),
                    }
                )
            else:
                trained.append(cfg.run_id)
        if done:
            rebuild_summary(plan.sweep_dir)
    return trained


def _record_failure(plan: SweepPlan, cfg: RunConfig, exec_cfg: ExecConfig, error: str) -> None:
    run_dir = plan.sweep_dir / cfg.run_id
    lock = RunLock(run_dir / LOCK_NAME)
    if lock.acquire():  # the dead worker's lock is stale (its pid is gone)
        with lock:
            if read_result(run_dir) is None:
                write_json_atomic(run_dir / "result.json", failed_result(cfg, error, 0.0, exec_cfg))


# ---------------------------------------------------------------------------------------
# --dry-run: the table of runs and a time estimate from a short measured calibration.
# ---------------------------------------------------------------------------------------


@dataclass
class DryRun:
    plan: SweepPlan
    rows: list[dict]  # run_facts + state + est_seconds, per selected run
    serial_seconds: float  # the runs still to do, one after another
    wall_seconds: float  # … spread over `jobs` workers
    jobs: int
    threads: int
    device: str
    calibration: list[dict]  # per measured shape: n_params, tokens_per_second, setup_s
    notes: list[str] = field(default_factory=list)


class _CalibrationDone(Exception):
    pass


def measure_throughput(cfg: RunConfig, exec_cfg: ExecConfig, budget_s: float = 2.0) -> dict:
    """Train a few steps of cfg's model on random tokens: steady tokens/s and setup time.

    The first step (allocation, kernel selection) is excluded from the rate. Stops after
    `budget_s` seconds of steps (at least 3 steps) or 30 steps, whichever comes first.
    """
    import tempfile

    import numpy as np

    from cdlaw.streams import array_stream
    from cdlaw.train import train_run

    batch_tokens = cfg.train.batch_size * cfg.model.seq_len
    steps = 30
    train = dataclasses.replace(
        cfg.train, log_every=1, eval_every=10**9, checkpoint_every=10**9, lr=1e-4
    )
    probe = dataclasses.replace(
        cfg,
        sweep="calibration",
        strategy="none",
        fresh_tokens=steps * batch_tokens,
        derived_tokens=0,
        train=train,
    )
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.model.vocab_size, probe.fresh_tokens, dtype=np.int64)
    marks: list[tuple[float, int]] = []

    def on_progress(p: dict) -> None:
        marks.append((time.perf_counter(), p["tokens_seen"]))
        if len(marks) >= 4 and marks[-1][0] - marks[0][0] > budget_s:
            raise _CalibrationDone

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cdlaw-calibration-") as tmp:
        with contextlib.suppress(_CalibrationDone):
            train_run(
                probe,
                Path(tmp),
                array_stream(tokens),
                tokens[: cfg.model.seq_len + 1],
                exec_cfg,
                on_progress,
            )
    (t1, n1), (tn, nn) = marks[0], marks[-1]
    tps = (nn - n1) / max(tn - t1, 1e-9)
    return {
        "n_params": run_facts(cfg)["n_params"],
        "flops_per_token": run_facts(cfg)["flops_per_token"],
        "tokens_per_second": tps,
        "setup_s": max(0.0, t1 - start - n1 / tps),
        "steps_timed": len(marks) - 1,
    }


def estimate_seconds(facts: dict, calibration: list[dict], val_tokens: int, eval_every: int):
    """A run's time: setup + tokens / rate + evaluations (a forward pass, ~1/3 of a step).

    Seconds per token are interpolated linearly in FLOPs per token between the measured
    shapes (extrapolated beyond them), which holds once the matmuls dominate.
    """
    pts = sorted(calibration, key=lambda c: c["flops_per_token"])
    lo, hi = pts[0], pts[-1]
    spt_lo, spt_hi = 1 / lo["tokens_per_second"], 1 / hi["tokens_per_second"]
    x = facts["flops_per_token"]
    if hi["flops_per_token"] > lo["flops_per_token"]:
        w = (x - lo["flops_per_token"]) / (hi["flops_per_token"] - lo["flops_per_token"])
        spt = max(min(spt_lo, spt_hi), spt_lo + w * (spt_hi - spt_lo))
    else:
        spt = spt_lo * x / lo["flops_per_token"]
    setup = min(c["setup_s"] for c in pts)  # the first probe also paid the imports, once
    evals = facts["steps"] // eval_every + 1
    return setup + facts["tokens_trained"] * spt + evals * val_tokens * spt / 3


def makespan(durations: list[float], jobs: int) -> float:
    """Wall time of running these durations, in this order, on `jobs` workers (greedy)."""
    import heapq

    free = [0.0] * max(1, jobs)
    for d in durations:
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def dry_run_sweep(
    path: str | Path,
    out: str | Path = "runs",
    *,
    only: str | None = None,
    executor: str = "local",
    jobs: int = 0,
    exec_cfg: ExecConfig = ExecConfig(),
    calibrate: bool = True,
) -> DryRun:
    """Validate a sweep and estimate its time; writes nothing into the runs folder.

    The corpus is prepared in the runs folder's cache when that exists (it is needed
    anyway), else in a temporary folder that is removed afterwards.
    """
    import tempfile

    out = Path(out)
    notes = []
    try:
        device = resolve_device(exec_cfg.device)
    except BadInput:
        if executor != "ray":
            raise
        device = "cpu"  # the cluster has the GPUs; the estimate can only measure this machine
        notes.append("no GPU here: calibrated on this CPU; the cluster's GPUs will be faster")
    with contextlib.ExitStack() as stack:
        cache = out / ".cache"
        if not cache.is_dir():
            cache = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdlaw-cache-")))
        plan = plan_sweep(path, out, only, cache_dir=cache)
    toml = plan.sweep_dir / "sweep.toml"
    if toml.is_file() and toml.read_text() != plan.sweep.text:
        notes.append(f"{toml} holds a different sweep: running this one needs --restart")
    rows = [
        {**run_facts(r), "state": run_state(plan.sweep_dir / r.run_id)["state"]} for r in plan.runs
    ]
    todo = [row for row in rows if row["state"] not in ("done", "diverged")]
    n_jobs, threads, _ = choose_jobs(device, len(todo), jobs, exec_cfg.threads)
    if executor == "ray":
        notes.append("the estimate is for this machine; a Ray cluster spreads runs wider")
    calibration = []
    if calibrate and todo:  # the smallest and the largest model still to train
        probe_exec = dataclasses.replace(exec_cfg, device=device, threads=threads)
        pending = {row["run_id"] for row in todo}
        by_cost = sorted(
            (r for r in plan.runs if r.run_id in pending),
            key=lambda r: run_facts(r)["flops_per_token"],
        )
        shapes = {by_cost[0].model: by_cost[0], by_cost[-1].model: by_cost[-1]}
        calibration = [measure_throughput(cfg, probe_exec) for cfg in shapes.values()]
    val_tokens = len(getattr(plan.prepared, "val_tokens", ())) or plan.sweep.data.val_tokens
    for row in rows:
        if row["state"] in ("done", "diverged"):
            row["est_seconds"] = 0.0
        elif calibration:
            row["est_seconds"] = estimate_seconds(
                row, calibration, val_tokens, plan.sweep.train.eval_every
            )
        else:
            row["est_seconds"] = float("nan")
    durations = [row["est_seconds"] for row in todo]
    if n_jobs > 1:
        durations.sort(reverse=True)
    # each process pays the imports (torch, transformers) once
    startup = (
        max(c["setup_s"] for c in calibration) - min(c["setup_s"] for c in calibration)
        if calibration
        else 0.0
    )
    return DryRun(
        plan=plan,
        rows=rows,
        serial_seconds=float(sum(durations)),
        wall_seconds=makespan(durations, n_jobs) + startup if durations else 0.0,
        jobs=n_jobs,
        threads=threads,
        device=device,
        calibration=calibration,
        notes=notes,
    )
