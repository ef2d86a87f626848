"""The runs behind a fit.json or downstream.json, as they are now: a command that reads one
(plan, predict, govern, report) warns when the runs beside it were trained on inputs
edited since, or their folders deleted, and for task links when they were scored on task
files edited since (cdlaw.sweep.summary.folder_warnings). A command that reads a runs
folder (fit, compare, downstream, next, plot, report) first has a damaged summary.parquet
rebuilt from its run folders (readable_runs).

    warnings = runs_now_warnings("runs/demo/fit.json", "fit.json", "this fit")
    source = checked_law("runs/demo/fit.json")   # load_law, its `stale` saying it too
    readable_runs("runs/demo")                   # before reading its summary.parquet

A file that no longer matches its runs' summary says so itself (stale_fit_file,
stale_links_file); this is what it cannot see: the runs are the ones fitted, but what
they trained on (a derived file, the corpus) has changed since. The check lives here
because fit, plan and report may not read sweeps (the pipeline flows one way); the
command composes both.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cdlaw.plan.source import PlanningLaw, load_law


def runs_now_warnings(made: str | Path | None, name: str, what: str) -> list[str]:
    """folder_warnings of the runs folder that `made` (a NAME written beside its runs:
    fit.json, downstream.json) was made from, saying what of it is of the old inputs
    (`what`: "this fit", "this link file"; a downstream.json's task scores too); [] for a
    preset, a table of runs, or a file written elsewhere."""
    from cdlaw.fit.table import runs_beside
    from cdlaw.sweep.summary import folder_warnings

    if made is None or not Path(made).is_file():
        return []
    runs = runs_beside(Path(made), name)
    if runs is None or not runs.is_dir():
        return []
    return folder_warnings(runs, f"{what} ({made})", tasks=name == "downstream.json")


def checked_law(spec: str) -> PlanningLaw:
    """load_law(spec), its `stale` also saying when the fit's runs were trained on inputs
    edited since or are gone (runs_now_warnings); a fit older than its runs says that
    first, and refitting it brings this warning into the new fit.json."""
    source = load_law(spec)
    if source.stale is not None:
        return source
    found = runs_now_warnings(spec, "fit.json", "this fit")
    return dataclasses.replace(source, stale="; ".join(found)) if found else source


def links_of_other_runs(law: str, link: str | Path | None) -> str | None:
    """A warning when a fit.json and a downstream.json were made from different runs (each
    found beside its file: runs_beside), or the law is a preset (a paper's fit, on its own
    corpus) and the links are of runs: a link reads the validation loss of its own runs,
    which may be another set's (another corpus or tokenizer) than the law's. None when
    both are of the same runs, or either file lies elsewhere (written with --out), where
    nothing says whose they are."""
    from cdlaw.fit.table import runs_beside

    linked = None if link is None else runs_beside(Path(link), "downstream.json")
    if linked is None:
        return None
    if Path(law).is_file():
        fitted = runs_beside(Path(law), "fit.json")
        if fitted is None or fitted.resolve() == linked.resolve():
            return None
        whose = f"the law ({law}) to those of {fitted}"
    else:
        whose = f"the law {law} is a paper's fit, to its own runs and validation set"
    return (
        f"the links ({link}) were fitted to the runs of {linked} and {whose}: a link reads "
        "its own runs' validation loss, so the task metrics mean something at this loss "
        "only if both measured it on one validation set"
    )


def readable_runs(path: str | Path) -> None:
    """Before a command reads the runs folder `path` (or its summary.parquet): its damaged
    summary.parquet, and its rounds' (`cdlaw next`), rebuilt from their run folders as a
    sweep rebuilds them, said in one line (cdlaw.sweep.summary.readable_summary; BadInput
    where that cannot be done). Nothing for a table file or a folder of no sweep."""
    from cdlaw.sweep.summary import readable_summary

    path = Path(path)
    folder = path.parent if path.name == "summary.parquet" else path
    if not (folder / "sweep.toml").is_file():
        return
    for sweep_dir in (folder, *sorted(p.parent for p in folder.glob("*/sweep.toml"))):
        readable_summary(sweep_dir)
