"""The names of the downstream tasks' columns: the contract between the runs that write
them (cdlaw.train) and the stages that read them (cdlaw.tasks.links, figures, report).

    column("world_mc", "acc")            -> "task_world_mc_acc"
    parse_column("task_world_mc_acc")    -> ("world_mc", "acc")

A task's metrics (docs/names.md): `bpb`, bits per UTF-8 byte of the gold continuation;
`acc`, accuracy (a cloze: greedy decoding writes the gold continuation; multiple choice:
the gold choice has the highest log-likelihood); `acc_norm`, multiple-choice accuracy with
each choice's log-likelihood divided by its length in characters.
"""

from __future__ import annotations

METRICS = {"cloze": ("bpb", "acc"), "mc": ("bpb", "acc", "acc_norm")}  # by kind of task
COLUMN_PREFIX = "task_"
# Metric names, longest first: a column's task is what is left before its metric.
_COLUMN_METRICS = sorted({m for ms in METRICS.values() for m in ms}, key=lambda m: (-len(m), m))


def column(task: str, metric: str) -> str:
    """The column a task's metric gets in metrics.parquet, result.json and summary.parquet."""
    return f"{COLUMN_PREFIX}{task}_{metric}"


def parse_column(name: str) -> tuple[str, str] | None:
    """(task, metric) of a task column `task_<task>_<metric>` (bpb, acc, acc_norm), else None."""
    if not name.startswith(COLUMN_PREFIX):
        return None
    rest = name[len(COLUMN_PREFIX) :]
    for metric in _COLUMN_METRICS:
        if rest.endswith("_" + metric) and len(rest) > len(metric) + 1:
            return rest[: -len(metric) - 1], metric
    return None


def without_tasks(row: dict, tasks: set[str]) -> dict:
    """A row (result.json, a metrics row) without the columns of the tasks named."""
    return {k: v for k, v in row.items() if (parse_column(k) or ("",))[0] not in tasks}


def task_columns(columns) -> dict[str, list[str]]:
    """{task: [its metrics]} of the task columns among `columns`, in their order."""
    out: dict[str, list[str]] = {}
    for c in columns:
        parsed = parse_column(str(c))
        if parsed is not None:
            out.setdefault(parsed[0], []).append(parsed[1])
    return out


SHOWN = 6  # columns a message names before it counts the rest


def columns_text(named: list[str], of: int) -> str:
    """Columns for a warning that applies to `named` of `of` predicted metrics: "every
    metric (47)" when it is all of many, else the first SHOWN and how many more, so that a
    warning on Gadre et al.'s 46 tasks stays a line."""
    if len(named) == of and of > SHOWN:
        return f"every metric ({of})"
    if len(named) > SHOWN:
        return f"{', '.join(named[:SHOWN])} and {len(named) - SHOWN} more"
    return ", ".join(named)
