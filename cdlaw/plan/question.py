"""The plan a command is asked for: its budget C and unique tokens U, and who asked.

`cdlaw report` plans, and `cdlaw plot` draws the frontier, for what their options give
(--budget-flops, --unique-tokens), else for what the runs folder's sweep file asks (its
[plan], cdlaw.config.PlanConfig, in RUNS/sweep.toml), else for a default of the command's
own, which it names. Each command says which, so a page never plans silently for another
corpus than the one the user means.

    asked = plan_asked(Path("runs/demo"), budget_flops=None, unique_tokens=None)
    asked.unique_tokens, asked.unique_from   # 96000.0, "the sweep file's [plan]"
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from cdlaw.config import PlanConfig, from_dict
from cdlaw.system.errors import BadInput

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the `tomli` package
    import tomli as tomllib

BUDGET_OPTION = "--budget-flops"
UNIQUE_OPTION = "--unique-tokens"
SWEEP_PLAN = "the sweep file's [plan]"


@dataclass(frozen=True)
class PlanAsked:
    """C and U as asked, each with who asked: an option (BUDGET_OPTION, UNIQUE_OPTION),
    the sweep file (SWEEP_PLAN), or nobody (None and "": the command's default)."""

    budget_flops: float | None = None  # C, FLOPs
    unique_tokens: float | None = None  # U, unique tokens of the corpus
    budget_from: str = ""
    unique_from: str = ""

    def sources(self) -> dict[str, str]:
        """Who asked for each, for JSON: {"budget_flops": "option" | "sweep" | "default",
        "unique_tokens": …}."""
        word = {SWEEP_PLAN: "sweep", "": "default"}
        return {
            "budget_flops": word.get(self.budget_from, "option"),
            "unique_tokens": word.get(self.unique_from, "option"),
        }


def sweep_plan(path: str | Path) -> PlanConfig:
    """The [plan] of runs folder `path`'s sweep.toml: PlanConfig() for a table, a folder
    without a sweep file, or a file without [plan]. BadInput naming the file when it cannot
    be read or its [plan] is wrong."""
    toml = Path(path) / "sweep.toml"
    if not toml.is_file():
        return PlanConfig()
    try:
        raw = tomllib.loads(toml.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BadInput(
            f"{toml} cannot be read for its [plan] ({' '.join(str(e).split())}); give "
            f"{BUDGET_OPTION} and {UNIQUE_OPTION}"
        ) from None
    try:
        return from_dict(PlanConfig, raw.get("plan", {}), "plan")
    except BadInput as e:
        raise BadInput(f"{toml}: {e}") from None


def plan_asked(
    path: str | Path, budget_flops: float | None = None, unique_tokens: float | None = None
) -> PlanAsked:
    """C and U for the runs at `path` (a runs folder, or a table: no sweep file): the
    options where given, else the sweep file's [plan]. BadInput for an option that is no
    positive number."""
    check_asked(budget_flops, unique_tokens)
    sweep = sweep_plan(path) if budget_flops is None or unique_tokens is None else PlanConfig()
    c, c_from = _either(budget_flops, BUDGET_OPTION, sweep.budget_flops)
    u, u_from = _either(unique_tokens, UNIQUE_OPTION, sweep.unique_tokens)
    return PlanAsked(c, u, c_from, u_from)


def check_asked(budget_flops: float | None, unique_tokens: float | None) -> list[str]:
    """The options given, by name; BadInput for one that is no positive number."""
    given = []
    for value, option in ((budget_flops, BUDGET_OPTION), (unique_tokens, UNIQUE_OPTION)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise BadInput(f"{option} must be a positive number like 1e21 or 5e9, not {value:g}")
        if value is not None:
            given.append(option)
    return given


def _either(given: float | None, option: str, sweep: float | None) -> tuple[float | None, str]:
    if given is not None:
        return given, option
    if sweep is not None:
        return sweep, SWEEP_PLAN
    return None, ""
