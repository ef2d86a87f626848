"""Damaged files: how a run's files are checked, set aside and named (docs/files.md).

A file a run wrote can be lost or cut short (a full disk, failing storage, a copy that
stopped, a careless `rm`). One rule, wherever a run's files are read:

- result.json that cannot be read means the run is not done: it is set aside as
  result.json.bad (named once, in one line) and the run is trained again, resumed from
  its checkpoint if one is there. `cdlaw status` calls such a run pending (or partial).
- A checkpoint that cannot be read is set aside as checkpoint.bad/ and named; the run
  resumes from checkpoint.old/ when that one is whole, else restarts from step 0.
- An unfinished run's config.json that cannot be read is set aside and written again; its
  metrics.parquet that lacks the rows up to the checkpoint is set aside, and the run
  restarts from step 0 (resuming would leave a hole in its curve).
- A finished run stays finished: result.json is the truth. A damaged config.json,
  metrics.parquet or model/ of a finished run is named by every sweep and flagged by
  `cdlaw status` until the researcher retrains it (`--restart --only run_id=…`).

Each damaged file is named in one line on stderr that starts with "damaged:". A full disk
is no damage: DiskFull stops the sweep with one sentence and keeps every finished run
(cdlaw.disk_full).
Torch-free: `cdlaw status` reads these checks.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

from cdlaw.train.result import SIMULATED_DEVICE, read_result

SAY = "damaged:"
# What the trainer writes into model/ (save_pretrained): config, generation config, weights.
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")
SHARD_INDEX = "model.safetensors.index.json"  # save_pretrained's index of sharded weights
SET_ASIDE = re.compile(r"\.bad(-\d+)?$")


def report_damage(message: str) -> None:
    """Name a damaged file: one line on stderr."""
    print(f"{SAY} {message}", file=sys.stderr, flush=True)


def set_aside(path: Path) -> Path:
    """Rename a damaged file or folder to <name>.bad (or .bad-2, .bad-3, …); return that."""
    path = Path(path)
    n = 1
    while True:
        target = path.with_name(f"{path.name}.bad" + (f"-{n}" if n > 1 else ""))
        if not target.exists():
            path.rename(target)
            return target
        n += 1


def set_aside_names(run_dir: Path) -> list[str]:
    """The names of what was set aside in a run folder (result.json.bad, checkpoint.bad, …)."""
    return sorted(p.name for p in Path(run_dir).glob("*.bad*") if SET_ASIDE.search(p.name))


# --- checks: None when the file is whole, else what is wrong with it ----------------------


def unreadable(e: Exception) -> str:
    """What to say of a file that raised `e` when read: on one line, kept short."""
    return f"is unreadable ({type(e).__name__}: {' '.join(str(e).split())[:120]})"


def json_problem(path: Path) -> str | None:
    """A JSON object file: missing, or unreadable (cut short, not text, not an object)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return "is missing"
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        return unreadable(e)
    return None if isinstance(data, dict) else "is unreadable (not a JSON object)"


def safetensors_problem(path: Path) -> str | None:
    """A safetensors file: missing, or its header unreadable or its data cut short."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8:
                return f"is truncated ({size} bytes, header of {n})"
            header = json.loads(f.read(n))
    except FileNotFoundError:
        return "is missing"
    except (ValueError, struct.error) as e:
        return unreadable(e)
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    if size != 8 + n + max(ends, default=0):
        return f"is truncated ({size} bytes, {8 + n + max(ends, default=0)} expected)"
    return None


def parquet_problem(path: Path) -> str | None:
    """A parquet file: missing, or its footer unreadable (a cut-short file has none)."""
    import pyarrow.parquet as pq

    try:
        pq.ParquetFile(path).metadata  # noqa: B018 (reads and checks the footer)
    except FileNotFoundError:
        return "is missing"
    except Exception as e:  # pyarrow's ArrowInvalid and kin
        return unreadable(e)
    return None


def model_problems(model_dir: Path) -> dict[str, str]:
    """{file: problem} of a finished run's model/ (the files save_pretrained wrote)."""
    model_dir = Path(model_dir)
    weights = ["model.safetensors"]
    if (model_dir / SHARD_INDEX).exists():
        problem = json_problem(model_dir / SHARD_INDEX)
        if problem:
            return {SHARD_INDEX: problem}
        index = json.loads((model_dir / SHARD_INDEX).read_text())
        weights = sorted(set(index.get("weight_map", {}).values()))
    problems = {}
    for name in [n for n in MODEL_FILES if n != "model.safetensors"] + weights:
        check = safetensors_problem if name.endswith(".safetensors") else json_problem
        if problem := check(model_dir / name):
            problems[name] = problem
    return problems


def finished_run_problems(run_dir: Path, status: str, trained: bool = True) -> dict[str, str]:
    """{file relative to the run folder: problem} for the files a finished run keeps (a
    simulated run, not `trained`, keeps no model/)."""
    run_dir = Path(run_dir)
    problems = {}
    if problem := json_problem(run_dir / "config.json"):
        problems["config.json"] = problem
    if status in ("done", "diverged") and (problem := parquet_problem(run_dir / "metrics.parquet")):
        problems["metrics.parquet"] = problem
    if status == "done" and trained:
        problems.update({f"model/{k}": v for k, v in model_problems(run_dir / "model").items()})
    return problems


def run_problems(run_dir: Path, result: dict | None) -> dict[str, str]:
    """What is damaged in a run folder now: an unreadable result.json (the run is then not
    done), or the files a finished run keeps ({} for an unfinished run's other files: they
    are checked when it resumes)."""
    run_dir = Path(run_dir)
    if result is None:
        path = run_dir / "result.json"
        return {"result.json": json_problem(path) or "is unreadable"} if path.exists() else {}
    if result.get("status") == "failed":
        return {}  # a failed run is trained again: its files will be written anew
    trained = result.get("device") != SIMULATED_DEVICE  # a law's draw: nothing was trained
    return finished_run_problems(run_dir, result.get("status", "done"), trained)


def name_finished_run_damage(run_dir: Path, result: dict) -> None:
    """One line per damaged file of a finished run (the run stays finished)."""
    run_dir = Path(run_dir)
    status = result.get("status", "done")
    for name, problem in run_problems(run_dir, result).items():
        report_damage(
            f"{run_dir / name} {problem}; run {run_dir.name} stays {status} (its result.json "
            f"stands); `cdlaw sweep … --restart --only run_id={run_dir.name}` retrains it"
        )


def set_aside_unreadable_result(run_dir: Path) -> bool:
    """An unreadable result.json: set it aside and say so (the run is not done). True if so.

    Call only while holding the run's lock (or owning the folder): the file must not be
    written by someone else between the check and the rename.
    """
    path = Path(run_dir) / "result.json"
    if not path.exists() or read_result(run_dir) is not None:
        return False
    problem = json_problem(path) or "is unreadable (not a result row)"
    try:
        bad = set_aside(path)
    except FileNotFoundError:  # set aside by another process meanwhile
        return False
    report_damage(
        f"{path} {problem}; set aside as {bad.name}: the run is not done and is trained again"
    )
    return True
