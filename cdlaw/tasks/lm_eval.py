"""lm-evaluation-harness on a run's model/ folder: [eval] lm_eval (docs/downstream.md).

    check_lm_eval(eval_cfg)                       # before training: installed, tasks exist
    lm_eval_scores(run_dir / "model", eval_cfg)   # {"task_hellaswag_acc": 0.27, …}

A done run's model/ is a whole Hugging Face folder (cdlaw.train.export), so lm-eval's
`hf` model reads it as any checkpoint. Its scores become result columns named like
cdlaw's own tasks: task_<task>_<metric>, with lm-eval's `bits_per_byte` as `bpb` and its
filter suffix (",none") dropped. The `lm-eval` extra installs it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import re
from pathlib import Path

from cdlaw.config import EvalConfig
from cdlaw.system.errors import BadInput

METRIC_NAMES = {"bits_per_byte": "bpb"}  # lm-eval's name -> cdlaw's, where they differ
BATCH_SIZE = 32


def _harness():
    """lm_eval's simple_evaluate, TaskManager and HFLM, or BadInput naming the extra."""
    from cdlaw.system.extras import install_advice

    try:
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise BadInput(
            "eval.lm_eval needs lm-evaluation-harness (lm_eval with its hf model), which this "
            f"install lacks; install {install_advice('lm-eval')}"
        ) from None
    return simple_evaluate, TaskManager, HFLM


def check_lm_eval(ev: EvalConfig) -> None:
    """BadInput before any training unless lm-eval is installed and knows every task of
    eval.lm_eval (its own tasks, and those in eval.lm_eval_include)."""
    if not ev.lm_eval:
        return
    _harness()
    manager = _manager(ev.lm_eval_include, ev.lm_eval)
    unknown = [t for t in ev.lm_eval if t not in manager.all_tasks]
    if unknown:
        where = f" or in {ev.lm_eval_include}" if ev.lm_eval_include else ""
        raise BadInput(
            f"eval.lm_eval names {unknown[0]!r}, which is no lm-eval task{where}: see "
            "`lm-eval ls tasks`, or set eval.lm_eval_include to the folder of its YAML file"
        )


@functools.lru_cache(maxsize=4)
def _manager(include: str, tasks: tuple[str, ...]):
    """lm-eval's TaskManager, made once per process: over the include folder alone when it
    holds every task (indexing lm-eval's own thousands of task files takes a minute), else
    over both."""
    _, task_manager, _ = _harness()
    if include and not Path(include).is_dir():
        raise BadInput(f"eval.lm_eval_include {include!r} is not a folder of lm-eval task YAMLs")
    if include:
        local = task_manager(include_path=include, include_defaults=False)
        if all(t in local.all_tasks for t in tasks):
            return local
    return task_manager(include_path=include or None)


def lm_eval_scores(model_dir: Path | None, ev: EvalConfig, device: str = "cpu") -> dict:
    """lm-eval's scores of the model in model_dir on eval.lm_eval, as result columns; NaN
    for each task's accuracy when there is no model (a run that did not finish).

    The harness seeds Python's, numpy's and torch's generators; they are put back after,
    so runs still training beside this one (a pack) draw what they would have drawn.
    """
    if model_dir is None:
        return {column(t, "acc"): math.nan for t in ev.lm_eval}
    simple_evaluate, _, hflm = _harness()
    with _generators_kept():
        model = hflm(pretrained=str(model_dir), device=device, batch_size=BATCH_SIZE)
        results = simple_evaluate(
            model=model,
            tasks=list(ev.lm_eval),
            task_manager=_manager(ev.lm_eval_include, ev.lm_eval),
            log_samples=False,
            bootstrap_iters=0,
            verbosity="ERROR",
        )
    return scores_of(results["results"])


def scores_of(results: dict) -> dict[str, float]:
    """lm-eval's {task: {"acc,none": 0.3, "acc_stderr,none": …}} as {column: value}."""
    out = {}
    for task, metrics in results.items():
        for key, value in metrics.items():
            name, _, _ = key.partition(",")
            if "stderr" in name or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            out[column(task, METRIC_NAMES.get(name, name))] = float(value)
    return out


def column(task: str, metric: str) -> str:
    """cdlaw's column for an lm-eval task's metric (characters other than letters, digits
    and "_" in the task's name become "_")."""
    from cdlaw.tasks.columns import column as task_column

    return task_column(re.sub(r"[^A-Za-z0-9_]", "_", task), metric)


@contextlib.contextmanager
def _generators_kept():
    import numpy as np
    import torch

    state = random.getstate(), np.random.get_state()
    gpus = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=gpus):
        try:
            yield
        finally:
            random.setstate(state[0])
            np.random.set_state(state[1])
