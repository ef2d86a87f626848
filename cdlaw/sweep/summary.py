"""What a sweep folder says: summary.parquet and the state of each run (docs/files.md).

    runs/<sweep>/summary.parquet   rebuilt from every <run_id>/result.json (atomic)

The summary is rebuilt from the run folders, so nothing is lost if a sweep dies while
writing it; a command that reads a damaged one rebuilds it too (readable_summary). A run's state (`cdlaw status`) is read from its folder alone: done / diverged /
failed (result.json), running (a live lock), partial (a checkpoint) or pending. An
unreadable result.json means not done, and is listed under `damaged` with the damaged
files a finished run keeps (cdlaw.train.damage).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from pathlib import Path

from cdlaw.config import RunConfig, from_dict
from cdlaw.sweep.grid import SweepConfig
from cdlaw.sweep.locks import LOCK_NAME, read_lock
from cdlaw.sweep.spec import load_sweep
from cdlaw.system.atomic import write_parquet_atomic
from cdlaw.system.errors import BadInput
from cdlaw.train.damage import parquet_problem, report_damage, run_problems, set_aside_names
from cdlaw.train.result import SUMMARY_COLUMNS, read_result, run_facts

SORT_COLUMNS = [
    "n_params",
    "fresh_tokens",
    "strategy",
    "derived_tokens",
    "lr",
    "weight_decay",
    "seed",
]


RUN_ID_PATTERN = re.compile(r"^[0-9a-f]{12}$")


def rebuild_summary(sweep_dir: Path):
    """summary.parquet from every <run_id>/result.json, written atomically; returns the frame.

    Serialised by a lock so that the last process to rebuild it has seen every result
    written before it (two sweeps finishing at once cannot leave a summary that lacks one);
    a temporary summary found under the lock is a killed writer's, and is removed.
    """
    import pandas as pd
    from filelock import FileLock

    sweep_dir = Path(sweep_dir)
    with FileLock(str(sweep_dir / ".summary.lock")):
        for left in sweep_dir.glob(".summary.parquet.*.tmp"):
            left.unlink(missing_ok=True)
        rows = [r for p in sorted(sweep_dir.glob("*/result.json")) if (r := read_result(p.parent))]
        columns = list(SUMMARY_COLUMNS) + sorted(
            {k for r in rows for k in r} - set(SUMMARY_COLUMNS)
        )
        df = pd.DataFrame(rows, columns=columns)
        if len(df):
            df = df.sort_values(SORT_COLUMNS, kind="stable").reset_index(drop=True)
        write_parquet_atomic(sweep_dir / "summary.parquet", df)
    return df


def readable_summary(sweep_dir: Path) -> Path:
    """sweep_dir/summary.parquet for a command that reads it (fit, plot, report, …). One
    that is damaged (cut short, not parquet) is rebuilt from the run folders as a sweep
    rebuilds it (rebuild_summary: atomic, under its lock) and the rebuild is said in one
    line on stderr; BadInput naming the file and the way on when it cannot be rebuilt. A
    missing summary is left to the caller (a sweep that finished no run has none)."""
    file = Path(sweep_dir) / "summary.parquet"
    problem = parquet_problem(file)
    if problem is None or problem == "is missing":
        return file
    try:
        rows = len(rebuild_summary(Path(sweep_dir)))
    except OSError as e:  # a read-only folder, a full disk
        raise BadInput(
            f"{file} {problem}, and rebuilding it from the run folders failed "
            f"({type(e).__name__}: {' '.join(str(e).split())[:120]}): copy {sweep_dir} "
            "somewhere writable and give that folder (the copy rebuilds it)"
        ) from None
    report_damage(
        f"{file} {problem}; rebuilt from the result.json of the run folders beside it, as "
        f"`cdlaw sweep` does ({rows} run(s))"
    )
    return file


def run_state(run_dir: Path) -> dict:
    """done | diverged | failed | running (a live lock) | partial (a checkpoint) | pending.

    With `damaged` ({file: problem}: an unreadable result.json, which makes the run not
    done, a damaged file that a finished run keeps, or what a sweep will find damaged when
    it resumes an unfinished run: cdlaw.train.damage.run_problems) and `set_aside` (the names of files
    set aside as damaged: result.json.bad, checkpoint.bad, …) when there are any.
    """
    result = read_result(run_dir)
    if result is None:  # a live process writes its files: they are checked once it stops
        holder = read_lock(run_dir / LOCK_NAME)
        if holder is not None and not holder["stale"]:
            return {"state": "running", "holder": holder, "tokens_seen": _tokens_seen(run_dir)}
    notes: dict = {}
    if damaged := run_problems(run_dir, result):
        notes["damaged"] = damaged
    if aside := set_aside_names(run_dir):
        notes["set_aside"] = aside
    if result is not None:
        return {"state": result.get("status", "done"), "result": result, **notes}
    if (run_dir / "checkpoint").exists() or (run_dir / "checkpoint.old").exists():
        return {"state": "partial", "tokens_seen": _tokens_seen(run_dir), **notes}
    return {"state": "pending", **notes}


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
    if not path.exists():
        raise BadInput(
            f"{str(path)!r} does not exist; give the --out folder of a `cdlaw sweep` "
            "(runs, or runs/<sweep>)"
        )
    if not path.is_dir():
        raise BadInput(f"{str(path)!r} is a file; give a runs folder (runs, or runs/<sweep>)")
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
    changed, rescore = _changed_inputs(sweep, sweep_dir, runs)
    rows = [
        {"sweep": sweep.name, **run_facts(cfg), **_state_row(sweep_dir / cfg.run_id)}
        | ({"changed": changed[cfg.run_id]} if cfg.run_id in changed else {})
        | ({"rescore": rescore[cfg.run_id]} if cfg.run_id in rescore else {})
        for cfg in runs
    ]
    for run_dir in sorted(p for p in sweep_dir.iterdir() if RUN_ID_PATTERN.match(p.name)):
        if run_dir.name in planned or not run_dir.is_dir():
            continue
        try:
            facts = run_facts(from_dict(RunConfig, _run_config_dict(run_dir)))
        except (BadInput, OSError, ValueError, KeyError):
            facts = {"run_id": run_dir.name}
        rows.append({"sweep": sweep.name, **facts, **_state_row(run_dir), "planned": False})
    return rows


def changed_runs(sweep_dir: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """For the runs of one sweep folder, as `cdlaw status` marks them: ({run_id: what
    changed} for runs trained on other inputs than its sweep.toml reads now
    (cdlaw.sweep.stale), {run_id: [task, …]} for finished runs whose scores of those tasks
    are of task files edited since, which the next sweep scores again); ({}, {}) for a
    folder without a readable sweep.toml or whose inputs cannot be read from here."""
    toml = Path(sweep_dir) / "sweep.toml"
    if not toml.is_file():
        return {}, {}
    try:
        sweep = load_sweep(toml)
        runs = sweep.runs(_known_vocab_size(sweep, Path(sweep_dir)))
    except (BadInput, OSError, ValueError):
        return {}, {}
    return _changed_inputs(sweep, Path(sweep_dir), runs)


def folder_warnings(path: Path, made: str = "this fit", tasks: bool = False) -> list[str]:
    """What a command that fits a runs folder (and the rounds inside it) warns of, and one
    that reads what was fitted there (`made`: "this fit", "this link file"): the runs its
    summaries list that were trained on inputs edited since (changed_runs), and those
    whose folders are gone (a sweep rebuilds summary.parquet; a reader only a damaged
    one: readable_summary); with `tasks`
    (what reads the task scores), the runs scored on task files edited since. [] for a
    table file, or a folder whose runs are all as listed."""
    path = Path(path)
    if not (path / "sweep.toml").is_file():
        return []
    folders = (path, *sorted(p.parent for p in path.glob("*/sweep.toml")))
    listed = [(f, rid) for f in folders for rid in _summary_ids(f)]
    changed, rescore = {}, {}
    for f in folders:
        trained, scored = changed_runs(f)
        changed.update(trained)
        rescore.update(scored)
    old = [rid for _, rid in listed if rid in changed]
    gone = [rid for f, rid in listed if not (f / rid).is_dir()]
    scored_old = [rid for _, rid in listed if rid in rescore] if tasks else []
    warnings = []
    if old:
        warnings.append(
            f"{len(old)} of the runs fitted were trained on other inputs than {path}'s sweep "
            f"reads now (e.g. {old[0]}: {'; '.join(changed[old[0]])}): {made} is of the old "
            f"inputs; `cdlaw status {path}` names them, and `cdlaw sweep SWEEP_FILE "
            "--restart` retrains them"
        )
    if gone:
        warnings.append(
            f"{len(gone)} run(s) in {path}'s summary.parquet have no run folder any more (e.g. "
            f"{gone[0]}): {made} has them as the summary last saw them; `cdlaw sweep "
            "SWEEP_FILE` rebuilds the summary (and trains them again)"
        )
    if scored_old:
        warnings.append(
            f"{len(scored_old)} of the runs were scored on task files edited since (e.g. "
            f"{scored_old[0]}: {', '.join(rescore[scored_old[0]])}): {made} is of the old "
            f"tasks there; `cdlaw sweep SWEEP_FILE` scores them again (no training)"
        )
    return warnings


def _summary_ids(sweep_dir: Path) -> list[str]:
    """The run ids a sweep folder's summary.parquet lists; [] without a readable one."""
    import pyarrow.parquet as pq

    with contextlib.suppress(OSError, ValueError, KeyError):
        table = pq.read_table(sweep_dir / "summary.parquet", columns=["run_id"])
        return [str(rid) for rid in table.column(0).to_pylist()]
    return []


def _changed_inputs(
    sweep: SweepConfig, sweep_dir: Path, runs: list[RunConfig]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """({run_id: what changed} for runs trained on other inputs than the sweep reads now
    (cdlaw.sweep.stale), {run_id: [task, …]} for finished runs scored on task files edited
    since); ({}, {}) where the inputs cannot be read from here (a relative path from
    another folder, a file gone): the sweep itself says so when it runs. Relative paths are
    read in the folder the runs' sweep ran in (RunInputs.workdir), where recorded."""
    from cdlaw.data.inputs import RunInputsMaker
    from cdlaw.sweep.stale import changed_inputs

    if not any((sweep_dir / r.run_id).is_dir() for r in runs):
        return {}, {}
    try:
        cache, workdir = sweep_dir.parent / ".cache", sweep_workdir(sweep_dir)
        maker = RunInputsMaker(sweep.data, sweep.eval, cache, workdir)
        now = [maker.of(r) for r in runs]
        return changed_inputs(sweep_dir, now), _old_scores(sweep_dir, now)
    except (BadInput, OSError):
        return {}, {}


def sweep_workdir(sweep_dir: Path) -> Path | None:
    """The folder a runs folder's sweep read relative paths from, as its run folders'
    config.json record it (RunInputs.workdir), while the runs folder still lies in it;
    None (the current folder, as the next sweep reads them) where none is recorded (an
    older cdlaw's), or the project was moved or copied since (the folder is gone, or the
    runs are no longer in it), or the runs were written outside it (--out elsewhere)."""
    for config in sorted(Path(sweep_dir).glob("*/config.json")):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            workdir = (json.loads(config.read_text()).get("inputs") or {}).get("workdir")
            if workdir:
                there = Path(workdir)
                inside = Path(sweep_dir).resolve().is_relative_to(there.resolve())
                return there if there.is_dir() and inside else None
    return None


def _old_scores(sweep_dir: Path, runs: list[RunConfig]) -> dict[str, list[str]]:
    """{run_id: [task, …]} for the finished runs of `runs` (with their inputs now) whose
    config.json records other task files (or eval.max_items) than they read now
    (cdlaw.data.inputs.stale_tasks): their scores of those tasks are of the old files."""
    from cdlaw.data.inputs import stale_tasks

    out = {}
    for cfg in runs:
        run_dir = sweep_dir / cfg.run_id
        if (read_result(run_dir) or {}).get("status") != "done":
            continue
        with contextlib.suppress(OSError, ValueError):
            if names := stale_tasks(json.loads((run_dir / "config.json").read_text()), cfg):
                out[cfg.run_id] = sorted(names)
    return out


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
    for key in ("damaged", "set_aside"):
        if key in state:
            row[key] = state[key]
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
    from cdlaw.data.tokens.tokenizer import file_vocab_size

    return file_vocab_size(sweep.data.tokenizer)
