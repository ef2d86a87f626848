"""Runs trained on other inputs than a sweep reads now: refused, never kept or resumed
(docs/files.md, "Inputs").

A run id names a run's config, not the content of what it reads. Every run folder that
holds training — a finished run, or a checkpoint a sweep would resume — must have read
what the sweep reads now: the corpus's tokens and every file (cdlaw.data.inputs), the
stream order, and for simulated runs the same law and noise. One rule for all of them:
the sweep stops with one sentence naming each input that changed, how many runs it
touches, and the ways on (`--restart` retrains them, `--out` trains elsewhere), before
anything is prepared or trained. Task files are not here: a changed one re-scores the
runs (cdlaw.sweep.worker.score_finished_run, cdlaw.train.run_parts.open_run).

Folders of an older cdlaw, whose config.json records no inputs, are checked on what their
result.json records (`corpus_key`, `stream_order`) and take on the sweep's inputs the
first time a sweep meets them.
"""

from __future__ import annotations

import json
from pathlib import Path

from cdlaw.config import RunConfig
from cdlaw.data.inputs import OTHER_TOKENS, recorded_inputs, training_changes
from cdlaw.strategies import PARAPHRASE
from cdlaw.sweep.simulate import Simulation
from cdlaw.system.errors import BadInput
from cdlaw.train.damage import json_problem
from cdlaw.train.result import read_result

RESUMABLE = ("checkpoint", "checkpoint.old")
UNKNOWN_TOKENS = (
    "other tokens than its inputs give now (its config.json {}, so which input changed "
    "cannot be told)"
)


def refuse_changed_runs(
    sweep_dir: Path, runs: list[RunConfig], simulation: Simulation | None = None
) -> None:
    """BadInput when a run of `runs` holds training on other inputs than it reads now."""
    reasons, simulated = _changed(sweep_dir, runs, simulation)
    if simulated:
        raise BadInput(_simulated(sweep_dir, simulated, simulation))
    if reasons:
        raise BadInput(_message(sweep_dir, reasons))


def changed_inputs(sweep_dir: Path, runs: list[RunConfig]) -> dict[str, list[str]]:
    """{run_id: what changed} for the runs of `runs` (with their inputs now, as
    RunInputsMaker.of gives them) that hold training on other inputs: what `cdlaw status`
    marks, and the sweep refuses until --restart. Simulated runs are not checked."""
    reasons, _ = _changed(sweep_dir, runs, None)
    out: dict[str, list[str]] = {}
    for what, rids in reasons.items():
        for rid in rids:
            out.setdefault(rid, []).append(what)
    return out


def _changed(sweep_dir: Path, runs: list[RunConfig], simulation: Simulation | None):
    """({what changed: [run_id, …]}, [finished runs of another kind: simulated vs trained])."""
    from cdlaw.data.tokens.ordering import STREAM_ORDER_VERSION

    reasons: dict[str, list[str]] = {}  # what changed -> the runs it touches
    simulated = []  # finished runs of another kind (simulated vs trained)
    for cfg in runs:
        run_dir = Path(sweep_dir) / cfg.run_id
        result = read_result(run_dir) or {}
        finished = result.get("status") in ("done", "diverged")
        if not finished and not any((run_dir / n).is_dir() for n in RESUMABLE):
            continue  # nothing trained to keep: it starts from step 0
        recorded_key = str(result.get("corpus_key") or "")
        if simulation is not None or recorded_key.startswith("simulated:"):
            if finished and (simulation is None or recorded_key != simulation.key):
                simulated.append(cfg.run_id)
            continue
        said = _changes(run_dir, cfg, result, finished)
        if finished and cfg.strategy == PARAPHRASE:
            if int(result.get("stream_order") or 1) != STREAM_ORDER_VERSION:
                said.append("the paraphrase order (stream order 1, before passes nested)")
        for what in said:
            reasons.setdefault(what, []).append(cfg.run_id)
    return reasons, simulated


def _changes(run_dir: Path, cfg: RunConfig, result: dict, finished: bool) -> list[str]:
    """What the run trained on that differs now: by the inputs its config.json records
    (none in an older folder), and for a finished run by its result.json's corpus_key."""
    now = cfg.inputs
    if now is None:
        return []
    damaged = json_problem(run_dir / "config.json")  # named elsewhere (cdlaw.train.damage)
    recorded = (
        None if damaged else recorded_inputs(json.loads((run_dir / "config.json").read_text()))
    )
    said = training_changes(recorded, now) if recorded is not None else []
    key = str(result.get("corpus_key") or "")
    if finished and not said and key and now.corpus_key and key != now.corpus_key:
        # without config.json's record of each file, the tokens differ but not why
        said.append(UNKNOWN_TOKENS.format(damaged.split(" (")[0]) if damaged else OTHER_TOKENS)
    return said


def _message(sweep_dir: Path, reasons: dict[str, list[str]]) -> str:
    runs = sorted({r for rids in reasons.values() for r in rids})
    parts = [f"{what} for {len(rids)} of them (e.g. {rids[0]})" for what, rids in reasons.items()]
    return (
        f"{len(runs)} run(s) in {sweep_dir} trained on other inputs than this sweep reads now: "
        f"{'; '.join(parts)}; pass --restart to retrain them from step 0, or --out to train "
        "elsewhere"
    )


def _simulated(sweep_dir: Path, stale: list[str], simulation: Simulation | None) -> str:
    what = (
        "come from real training or another simulation (law, noise)"
        if simulation
        else "are simulated (cdlaw sweep --executor simulate), not trained"
    )
    return (
        f"{len(stale)} finished run(s) in {sweep_dir} (e.g. {stale[0]}) {what}: "
        "pass --restart to replace them, or --out to write elsewhere"
    )
