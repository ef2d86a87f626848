"""Derived-token strategies are named, not listed: the rule a name follows, and their order.

A strategy is what a run trains on beyond one pass of its fresh tokens. "none" is D′ = 0;
every other name is a derived strategy with its own R* (docs/law.md). Two are built in:
`repetition` (the fresh tokens again) and `paraphrase` (rendered by the embedded corpus, or
files of paraphrases); any other name a sweep declares ([derived.<name>], docs/sweep.md)
or a table carries is as good: a fit gives it its own K, ρ, σ.

A name is lowercase: a letter, then letters, digits, `_` or `-`, at most 40 characters
(`self-distill`, `qa_synthetic`). It names columns, fit.json keys ("<name>.rho") and
folders, so nothing else is allowed. `none` and `auto` are taken (D′ = 0, and the plan's
"choose for me"), and so are `repeat`, `repeated`, `repeats` and `repetitions`: tables
write repetition so, and read them as repetition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from cdlaw.system.errors import BadInput

NONE = "none"
REPETITION = "repetition"
PARAPHRASE = "paraphrase"
BUILT_IN = (REPETITION, PARAPHRASE)  # need no declaration; listed first wherever names are
# train on the fresh tokens only, once or again: their epochs say what D′ is, no files needed
FRESH_ONLY = (NONE, REPETITION)
# How tables write repetition (the CD paper's release: "repeat"): read as repetition
# (canonical), and so not a name a declared strategy may take.
REPETITION_SPELLINGS = ("repeat", "repeated", "repeats", "repetitions")
RESERVED = (NONE, "auto", *REPETITION_SPELLINGS)
NAME_RULE = "a lowercase letter then up to 39 lowercase letters, digits, '_' or '-'"
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


def is_name(name) -> bool:
    """Whether `name` is a valid derived strategy's name (not none or auto)."""
    return isinstance(name, str) and bool(_NAME.match(name)) and name not in RESERVED


def check_name(name, where: str) -> str:
    """`name` if it is a derived strategy's name, else BadInput naming `where` and the rule."""
    if is_name(name):
        return name
    if name == NONE:
        why = "'none' is the strategy of runs without derived tokens"
    elif name == "auto":
        why = "'auto' is the plan's choice among the strategies"
    elif name in REPETITION_SPELLINGS:
        why = f"{name!r} is how tables write {REPETITION}: name it {REPETITION}"
    else:
        why = f"a strategy's name is {NAME_RULE}"
    raise BadInput(f"{where} {name!r} cannot name a derived strategy: {why}")


def canonical(label: str) -> str:
    """A table's strategy label (lowercase) as cdlaw names it: repetition for each of
    REPETITION_SPELLINGS, any other label as it is."""
    return REPETITION if label in REPETITION_SPELLINGS else label


def files_command(strategy: str) -> str:
    """The cdlaw command that writes a strategy's derived files, for messages: `paraphrase`
    for paraphrase files, `distill` for a declared strategy's."""
    return "paraphrase" if strategy == PARAPHRASE else "distill"


def ordered(names: Iterable[str]) -> tuple[str, ...]:
    """The names once each: none, repetition, paraphrase first, then the rest alphabetically.

    Every table, fit vector and figure lists strategies in this order, so a fit of the same
    rows always has the same parameter vector."""
    names = set(names)
    first = [s for s in (NONE, *BUILT_IN) if s in names]
    return (*first, *sorted(names - set(first)))
