"""A sweep file's [derived.<name>] tables: derived strategies beyond the built-in ones.

Each table declares one strategy by the folder of its derived files — jsonl rows
{"id", "pass", "text"} aligned to the corpus's documents by id (what `cdlaw distill`
writes, or any pipeline's synthetic rewrites, QA or translations) — or a folder per
fresh-token count, for derived text that may only come from the run's own D (a teacher
trained on those fresh tokens):

    [derived.distill]
    files = "derived/distill"                             # one folder for every D
    [derived.qa]
    files = { "48K" = "derived/qa-48K", "96K" = "derived/qa-96K" }   # a folder per D

Paraphrase files are declared the same way, `[derived.paraphrase] files = DIR` (one folder:
they cover every D); `repetition` reads no files and is never declared. The older
`[data] paraphrases = DIR` is still read, with a deprecation note: the same runs, with the
same ids, since both become data.paraphrases, the field that run ids and config.json keep.
Paths are read as `data.corpus` is: relative to the folder cdlaw runs in.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass

from cdlaw.config import DataConfig, unknown_key_message
from cdlaw.strategies import PARAPHRASE, REPETITION, check_name
from cdlaw.sweep.values import positive_number
from cdlaw.system.errors import BadInput
from cdlaw.units import format_number, plain

DERIVED_KEYS = ("files",)
log = logging.getLogger("cdlaw.sweep")


@dataclass(frozen=True)
class Declared:
    """One declared strategy: the folder of its derived files, or a folder per D."""

    name: str
    files: str = ""  # one folder for every fresh-token count
    per_fresh_tokens: tuple[tuple[int, str], ...] = ()  # (D, folder) pairs, without `files`

    def folder(self, fresh_tokens: int) -> str:
        """The folder a run of this strategy at D = fresh_tokens reads."""
        if self.files:
            return self.files
        for d, folder in self.per_fresh_tokens:
            if d == fresh_tokens:
                return folder
        have = ", ".join(format_number(d) for d, _ in self.per_fresh_tokens)
        raise BadInput(
            f"[derived.{self.name}] files names no folder for fresh_tokens {fresh_tokens:,} "
            f"(it has {have}); add one, or drop that D for {self.name}"
        )


def parse_derived(
    raw: dict, data: DataConfig, source: str = "sweep.toml"
) -> tuple[dict[str, Declared], DataConfig]:
    """The [derived.<name>] tables as Declared strategies in file order, and `data` with the
    paraphrase files' folder as its data.paraphrases; a note on logger cdlaw.sweep when
    `source` still declares them as [data] paraphrases."""
    old_way = data.paraphrases  # [data] paraphrases
    tables = raw.get("derived", {})
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise BadInput('derived must hold one table per strategy: [derived.<name>] files = "DIR"')
    declared = {}
    for name, table in tables.items():
        check_name(name, "[derived.<name>] table")
        where = f"[derived.{name}]"
        if name == REPETITION:
            raise BadInput(f"{where}: repetition is built in and reads no files; remove the table")
        for key in table:
            if key not in DERIVED_KEYS:
                raise BadInput(
                    unknown_key_message(f"derived.{name}.{key}", key, list(DERIVED_KEYS))
                )
        if "files" not in table:
            raise BadInput(f'{where} needs files = "DIR", the folder of its derived files')
        files, per_d = _files(table["files"], where)
        if name == PARAPHRASE:
            data = _paraphrase_files(files, per_d, data, where)
            continue
        declared[name] = Declared(name, files, per_d)
    if old_way:
        _say_deprecated(source, old_way)
    return declared, data


def _files(value, where: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """`files` as (one folder, ()) or ("", (D, folder) pairs in D order)."""
    if isinstance(value, str):
        return _folder(value, f"{where} files"), ()
    if not isinstance(value, dict) or not value:
        raise BadInput(
            f'{where} files must be a folder ("DIR") or a table of folders per fresh_tokens '
            f'({{ "48K" = "DIR", … }}), got {plain(value)}'
        )
    pairs: dict[int, str] = {}
    for key, folder in value.items():
        d = positive_number(key, f"{where} files key")
        if not float(d).is_integer():
            raise BadInput(f"{where} files key {key!r} must be a whole number of fresh tokens")
        if int(d) in pairs:
            raise BadInput(f"{where} files names fresh_tokens {key!r} twice")
        pairs[int(d)] = _folder(folder, f"{where} files.{key}")
    return "", tuple(sorted(pairs.items()))


def _folder(value, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{name} must be a folder name, got {plain(value)}")
    return value


def _say_deprecated(source: str, folder: str) -> None:
    log.warning(
        f"note: {source}: [data] paraphrases is deprecated; declare the paraphrase files as "
        f"[derived.paraphrase] files = {json.dumps(folder, ensure_ascii=False)} (the same "
        "runs, with the same ids)"
    )


def _paraphrase_files(files: str, per_d, data: DataConfig, where: str) -> DataConfig:
    """[derived.paraphrase] files = DIR, kept as data.paraphrases = DIR (hashed into run ids)."""
    if per_d:
        raise BadInput(f'{where} files must be one folder ("DIR"): paraphrase files cover every D')
    if data.paraphrases:
        raise BadInput(
            f"{where} and [data] paraphrases both declare the paraphrase files: keep {where} "
            "files and remove [data] paraphrases"
        )
    return dataclasses.replace(data, paraphrases=files)


def distill_target(sweep, runs, strategy: str, fresh_tokens: float | None) -> tuple[int, str]:
    """(D, folder) that `cdlaw distill` writes for a declared strategy of `sweep` (whose
    `runs` are given): the folder of the strategy's runs at D (default: its one folder,
    for its largest D)."""
    if strategy not in sweep.derived:
        have = ", ".join(sweep.derived) or "none"
        hint = " (`cdlaw paraphrase` writes paraphrase files)" if strategy == PARAPHRASE else ""
        raise BadInput(
            f"--strategy {strategy!r} is no [derived.<name>] strategy of {sweep.source} "
            f"(declared: {have}){hint}"
        )
    declared = sweep.derived[strategy]
    sizes = sorted({r.fresh_tokens for r in runs if r.strategy == strategy})
    if fresh_tokens is None:
        if not declared.files:
            have = ", ".join(format_number(d) for d, _ in declared.per_fresh_tokens)
            raise BadInput(
                f"[derived.{strategy}] has a folder per fresh_tokens ({have}): give "
                "--fresh-tokens, the D whose documents to write"
            )
        return sizes[-1], declared.files
    d = round(fresh_tokens)
    if d not in sizes:
        have = ", ".join(format_number(x) for x in sizes)
        raise BadInput(f"--fresh-tokens {d:,} is no D of {strategy}'s runs ({have})")
    return d, declared.folder(d)
