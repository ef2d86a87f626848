"""The per-run worker: train one run under its lock and record what happened (SPEC §4, §13).

    runs/<sweep>/<run_id>/     written by train_run; plus, from here:
        attempts.json          one entry per process that started training it
        error.txt              the traceback of a failed run
    runs/.cache/               tokenised corpora, shared by every sweep in runs/

A run is done when its result.json exists (train_run writes it last, atomically). A crash
in training is recorded as a failed result.json and the sweep goes on; an interrupted run
continues from its checkpoint (train_run resumes by itself). Executors call `execute_run`
in this process, in worker processes or in Ray tasks.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from cdlaw.atomic import write_json_atomic, write_text_atomic
from cdlaw.config import ExecConfig, RunConfig, to_dict
from cdlaw.sweep.locks import LOCK_NAME, RunLock
from cdlaw.sweep.selection import run_facts

Event = dict
OnEvent = Callable[[Event], None]


# SPEC §5: the columns every summary row has (train_run adds a few more of its own).
SUMMARY_COLUMNS = tuple(
    """run_id sweep strategy n_params n_params_total fresh_tokens derived_tokens tokens_trained
    derived_ratio epochs tokens_per_param lr weight_decay seed d_model n_layers n_heads seq_len
    batch_tokens vocab_size schedule loss train_loss status flops wall_seconds tokens_per_second
    device corpus cdlaw_version""".split()
)
FINISHED = ("done", "diverged", "failed")


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
        from cdlaw.data.ordering import run_stream
        from cdlaw.data.prepare import prepare_corpus
        from cdlaw.train.loop import RunInterrupted, train_run

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
