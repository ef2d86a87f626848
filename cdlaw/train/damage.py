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
  restarts from step 0 (resuming would leave a hole in its curve). Until a sweep does so,
  `cdlaw status` flags each of these files (unfinished_run_problems: the same checks).
- A finished run stays finished: result.json is the truth. A damaged config.json,
  metrics.parquet or model/ of a finished run is named by every sweep and flagged by
  `cdlaw status` until the researcher retrains it (`--restart --only run_id=…`).

Each damaged file is named in one line on stderr that starts with "damaged:". A full disk
is no damage: DiskFull stops the sweep with one sentence and keeps every finished run
(cdlaw.system.disk_full).
Torch-free: `cdlaw status` reads these checks.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import sys
from pathlib import Path

from cdlaw.config import TrainConfig, from_dict
from cdlaw.schedule import logged_steps
from cdlaw.train.result import SIMULATED_DEVICE, read_result

SAY = "damaged:"
# A checkpoint folder (cdlaw.train.checkpoint): its tensor files, and state.json, which
# records their SHA-256 under DIGESTS. A run resumes from the first whole one of CHECKPOINTS.
CHECKPOINTS = ("checkpoint", "checkpoint.old")
TENSOR_FILES = ("model.safetensors", "optimizer.safetensors")
STATE_FILE = "state.json"
DIGESTS = "sha256"
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


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, hex, read in 4 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_problem(path: Path, run_id: str) -> tuple[str, str] | None:
    """The first file of checkpoint folder `path` that is missing, cut short, unreadable,
    of another run than `run_id`, or not the file state.json's checksum records, as (its
    name, the problem); None when the folder is whole. What can be told without the model:
    cdlaw.train.checkpoint.read_checkpoint checks the rest (the weights are this model's)."""
    path = Path(path)
    if problem := json_problem(path / STATE_FILE):
        return STATE_FILE, problem
    state = json.loads((path / STATE_FILE).read_text())
    if "run_id" not in state:
        return STATE_FILE, "lacks run_id"
    if state["run_id"] != run_id:
        return STATE_FILE, f"belongs to run {state['run_id']}"
    digests = state.get(DIGESTS) or {}
    for name in TENSOR_FILES:
        problem = safetensors_problem(path / name)
        if problem is None and name in digests and file_sha256(path / name) != digests[name]:
            problem = "is corrupt (its SHA-256 is not the one in state.json)"
        if problem:
            return name, problem
    return None


def metrics_problem(path: Path, step: int, logged: list[int]) -> str | None:
    """metrics.parquet beside a checkpoint at `step`: None when it holds a row for each
    step of `logged` up to there (cdlaw.schedule.logged_steps), else what is wrong (missing,
    unreadable, or lacking rows): resuming would leave a hole in the run's curve."""
    import pyarrow.parquet as pq

    if problem := parquet_problem(path):
        return problem
    try:
        steps = pq.read_table(path).column("step").to_pylist()
    except Exception as e:  # pyarrow's errors on a damaged column chunk, a column missing
        return unreadable(e)
    if [s for s in steps if s <= step] != logged:
        return f"lacks rows up to step {step} of the checkpoint"
    return None


def unfinished_run_problems(run_dir: Path) -> dict[str, str]:
    """{file relative to the run folder: problem} of an unfinished run, as a sweep finds
    them when it resumes the run (cdlaw.train.run_parts.open_run): each checkpoint
    folder's damaged file; config.json unreadable, or missing beside a whole checkpoint;
    metrics.parquet lacking the rows up to the checkpoint the run resumes from."""
    run_dir = Path(run_dir)
    problems: dict[str, str] = {}
    resumes_from = None  # the checkpoint's state.json the run resumes from
    for name in CHECKPOINTS:
        if not (run_dir / name).is_dir():
            continue
        if found := checkpoint_problem(run_dir / name, run_dir.name):
            problems[f"{name}/{found[0]}"] = found[1]
        elif resumes_from is None:
            resumes_from = json.loads((run_dir / name / STATE_FILE).read_text())
    config = run_dir / "config.json"
    if (config.exists() or resumes_from is not None) and (problem := json_problem(config)):
        problems["config.json"] = problem
    if resumes_from is not None:
        step = int(resumes_from["step"])
        try:  # the rows a run logs follow its [train] settings, recorded in config.json
            saved = json.loads(config.read_text())
            logged = logged_steps(step, int(saved["steps"]), from_dict(TrainConfig, saved["train"]))
        except Exception:  # damaged (named above), or an older cdlaw's: the file itself only
            problem = parquet_problem(run_dir / "metrics.parquet")
        else:
            problem = metrics_problem(run_dir / "metrics.parquet", step, logged)
        if problem:
            problems["metrics.parquet"] = problem
    return problems


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
    """What is damaged in a run folder now: for an unfinished run an unreadable result.json
    (the run is then not done) and what its sweep will find when it resumes it
    (unfinished_run_problems); for a finished run, the files it keeps."""
    run_dir = Path(run_dir)
    if result is None:
        path = run_dir / "result.json"
        problems = {"result.json": json_problem(path) or "is unreadable"} if path.exists() else {}
        return problems | unfinished_run_problems(run_dir)
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
