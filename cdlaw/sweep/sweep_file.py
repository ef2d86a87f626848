"""The copy of a sweep file in its runs folder, and which sweep files may run there.

    growth = check_sweep_file(sweep, Path("runs"), restart=False)  # BadInput if it may not run
    growth = sweep_growth(Path("runs/demo/sweep.toml").read_text(), sweep)  # no check

`runs/<name>/sweep.toml` records the sweep its runs belong to. Another sweep file of that
name may run there without `--restart` when it keeps every run of the copy: the same file,
one that differs only in [eval] or [plan] (no run id hashes them), or one that adds runs — another
seed, size or ratio — and drops and changes none. Its finished runs are kept and the copy
is replaced by the larger sweep. A file that drops or changes a run would leave run
folders that are no run of the sweep, which summary.parquet would still gather.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cdlaw.shapes import OLMO3_VOCAB_SIZE
from cdlaw.sweep.grid import SweepConfig
from cdlaw.sweep.spec import parse_sweep, same_runs
from cdlaw.system.errors import BadInput


@dataclass(frozen=True)
class SweepGrowth:
    """How a sweep file that keeps every run of the copy in its runs folder relates to it."""

    kept: int  # runs of the copy, every one a run of the new sweep
    added: int  # runs of the new sweep that the copy does not define (0: the same runs)


def sweep_growth(text: str, sweep: SweepConfig) -> SweepGrowth | None:
    """`sweep` against the copy `text`: a SweepGrowth when it keeps every run of the copy,
    None when it drops or changes one (or the copy no longer parses)."""
    if text == sweep.text or same_runs(text, sweep.text):
        return SweepGrowth(kept=len(_run_ids(sweep)), added=0)
    try:
        old = _run_ids(parse_sweep(text, default_name=sweep.name))
    except BadInput:
        return None
    new = _run_ids(sweep)
    if not old <= new:
        return None
    return SweepGrowth(kept=len(old), added=len(new - old))


def _run_ids(sweep: SweepConfig) -> set[str]:
    """The sweep's run ids, for comparing two sweeps: a tokenizer file's vocabulary is not
    read (a simulated sweep's file need not exist) but taken to be OLMo 3's. Its path is
    in every run id, so two sweeps with the same path get the same vocabulary either way,
    and two with different paths share no run."""
    return {
        r.run_id for r in sweep.runs(None if sweep.data.tokenizer == "bpe" else OLMO3_VOCAB_SIZE)
    }


@dataclass(frozen=True)
class RunFolders:
    """What a sweep finds of its own in out/<name>/ before it claims the folder."""

    same: bool  # the copy there keeps every run of this sweep's (or grows into it)
    orphans: list[str]  # run folders there that are no run of this sweep
    doomed: list[Path]  # what `--restart` deletes: every run folder when not `same`, else
    # the selected runs' and the orphans


def run_folders(
    sweep: SweepConfig, out: Path, all_ids: set[str], selected: set[str], restart: bool
) -> RunFolders:
    """The run folders of out/<sweep.name>/ as `--restart` and the orphan check see them
    (all_ids: every run of the sweep; selected: those --only keeps), after
    check_sweep_file(sweep, out, restart): BadInput for a sweep file that drops or changes
    runs without restart. `cdlaw sweep` deletes `doomed` under --restart; `--dry-run
    --restart` counts them as runs to train."""
    from cdlaw.sweep.summary import RUN_ID_PATTERN

    sweep_dir = out / sweep.name
    same = check_sweep_file(sweep, out, restart) is not None
    folders = [
        p for p in sorted(sweep_dir.glob("*")) if p.is_dir() and RUN_ID_PATTERN.match(p.name)
    ]
    orphans = [p.name for p in folders if p.name not in all_ids]
    doomed = [p for p in folders if not same or p.name in selected or p.name in orphans]
    if restart and (links := [p for p in doomed if p.is_symlink()]):
        # rmtree refuses a link; deleting what it points to would reach outside the folder
        more = f" (and {len(links) - 1} more run folder(s) are links)" if len(links) > 1 else ""
        raise BadInput(
            f"--restart deletes run folders, and {links[0]} is a symbolic link to "
            f"{os.readlink(links[0])}{more}: remove the link (`rm {links[0]}` keeps what it "
            "points to) or move the folder it points to in its place, then run again"
        )
    return RunFolders(same, orphans, doomed)


def restart_text(folders: RunFolders, sweep_dir: Path) -> str:
    """What --restart deletes, in words: "N run folder(s) of DIR (why)"."""
    if not folders.same:
        why = "every one: the sweep file drops or changes runs of its copy there"
    else:
        why = "the selected runs'"
        if folders.orphans:
            why += f", and {len(folders.orphans)} of no run of this sweep"
    return f"{len(folders.doomed)} run folder(s) of {sweep_dir} ({why})"


def check_out_folder(sweep: SweepConfig, out: Path) -> None:
    """Refuse (BadInput) an --out that is this sweep's own runs folder (`runs/demo` for the
    sweep demo, where `cdlaw fit` reads it): its runs would go to runs/demo/demo and every
    one be trained again. A sweep of another name may live inside it (`cdlaw next`'s
    rounds: runs/demo/next-1)."""
    if out.name == sweep.name and (out / "sweep.toml").is_file():
        raise BadInput(
            f"--out {str(out)!r} is the runs folder of the sweep {sweep.name!r} itself; "
            f"give the folder that holds it, --out {str(out.parent)!r}, to resume it there"
        )


def check_sweep_file(sweep: SweepConfig, out: Path, restart: bool) -> SweepGrowth | None:
    """Refuse (BadInput) an --out that is the sweep's own folder, and a sweep file that
    drops or changes runs of the copy in out/<name>/ unless `restart`. Returns the
    sweep's growth over the copy; None where there is no copy, or (with `restart`) one
    whose runs this sweep drops or changes."""
    check_out_folder(sweep, out)
    toml = out / sweep.name / "sweep.toml"
    if not toml.is_file():
        return None
    growth = sweep_growth(toml.read_text(), sweep)
    if growth is None and not restart:
        raise BadInput(
            f"{toml} holds a different sweep than {sweep.source}, and this one drops or "
            "changes some of its runs; add runs without changing the others, give the sweep "
            "another name, or pass --restart to delete its runs and start over"
        )
    return growth
