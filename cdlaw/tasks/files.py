"""Downstream tasks: what a sweep's [eval] names, read, checked and tokenised (docs/downstream.md).

    tasks = resolve_tasks(eval_cfg, data_cfg)        # Task per name, every item checked
    tokens = tokenise_tasks(tasks, prepared, seq_len) # TaskTokens: the rows a model scores

A task is a list of items, each a context and its continuations:

- a **cloze** item has one continuation, the gold one: the run's bits per byte on it
  (`bpb`) and whether greedy decoding would write it (`acc`, LAMBADA's accuracy);
- a **multiple-choice** item has several, and the index of the gold one: `bpb` of the gold
  continuation, and accuracy by the choices' log-likelihood, raw (`acc`) and divided by
  each choice's length in characters (`acc_norm`), as OLMES ranks choices (Gu et al.
  2024, arXiv 2406.08446) and lm-evaluation-harness names them.

Two tasks are built in, generated from the embedded corpus's world (`world_cloze`,
`world_mc`); any other entry of eval.tasks is a task file, a .jsonl of items:

    {"context": "…", "continuation": " Paris"}                   cloze
    {"context": "…", "choices": [" red", " blue"], "gold": 1}      multiple choice

Torch-free: the sweep checks tasks before anything trains, without the trainer.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from cdlaw.config import DataConfig, EvalConfig
from cdlaw.system.errors import BadInput
from cdlaw.tasks.columns import METRICS, column

BUILTIN_TASKS = ("world_cloze", "world_mc")
BUILTIN_ITEMS = 500  # items generated per built-in task (eval.max_items takes the first ones)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TaskItem:
    """One item: a context, its continuations (one for a cloze) and the gold one's index."""

    context: str
    choices: tuple[str, ...]
    gold: int = 0


@dataclass(frozen=True)
class Task:
    """A named task: its kind ("cloze" or "mc"), its items, and where it came from."""

    name: str
    kind: str
    items: tuple[TaskItem, ...]
    source: str  # "built-in" or the task file's path

    @property
    def columns(self) -> list[str]:
        return [column(self.name, m) for m in METRICS[self.kind]]


# ---------------------------------------------------------------------------------------
# Reading and checking
# ---------------------------------------------------------------------------------------


def resolve_tasks(ev: EvalConfig, data: DataConfig) -> list[Task]:
    """The tasks eval.tasks names, each read (or generated) and checked, with at most
    eval.max_items items; BadInput names the entry, file, line or field at fault."""
    tasks = []
    for entry in ev.tasks:
        if entry in BUILTIN_TASKS:
            if data.corpus != "embedded":
                raise BadInput(
                    f"eval.tasks {entry!r} is built from the embedded corpus's world, but "
                    f"data.corpus is {data.corpus!r}: give task files (.jsonl) instead"
                )
            task = builtin_task(entry, data)
        elif entry.endswith(".jsonl"):
            task = read_task_file(Path(entry))
        else:
            raise BadInput(
                f"eval.tasks {entry!r} is neither a built-in task ({', '.join(BUILTIN_TASKS)}) "
                "nor a task file (a .jsonl path)"
            )
        if ev.max_items and len(task.items) > ev.max_items:
            task = Task(task.name, task.kind, task.items[: ev.max_items], task.source)
        tasks.append(task)
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadInput(f"eval.tasks names task {twice[0]!r} twice (a task's name is its file stem)")
    return tasks


def task_name(entry: str) -> str:
    """The name of an eval.tasks entry: a built-in task's own, a task file's stem."""
    return entry if entry in BUILTIN_TASKS else Path(entry).name.removesuffix(".jsonl")


def read_task_file(path: Path) -> Task:
    """A .jsonl task file: one item per line, all cloze or all multiple choice."""
    name = task_name(str(path))
    if not NAME_RE.match(name):
        raise BadInput(
            f"task file {path}: its name {name!r} becomes column names, so it must be letters, "
            "digits and '_' (rename the file)"
        )
    if name in BUILTIN_TASKS:
        raise BadInput(f"task file {path} is named like the built-in task {name!r}: rename it")
    if not path.is_file():
        raise BadInput(f"eval.tasks: task file {path} does not exist")
    items, kind, offset = [], None, 0
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            where = f"task file {path} line {line_no}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadInput(
                    f"{where} is not UTF-8 text (an undecodable byte at offset "
                    f"{offset + e.start} of the file): re-encode the file as UTF-8"
                ) from None
            offset += len(raw)
            if not line.strip():
                continue
            item, item_kind = _item(line, where)
            if kind is not None and item_kind != kind:
                raise BadInput(
                    f"task file {path} line {line_no} is a {_KIND_WORDS[item_kind]} item in a "
                    f"file of {_KIND_WORDS[kind]} items: keep one kind per file"
                )
            kind = item_kind
            items.append(item)
    if not items:
        raise BadInput(f"task file {path} holds no items: give one JSON object per line")
    return Task(name, kind or "cloze", tuple(items), str(path))


_KIND_WORDS = {"cloze": "cloze (context, continuation)", "mc": "multiple-choice"}


def _item(line: str, where: str) -> tuple[TaskItem, str]:
    """One line of a task file as an item and its kind; BadInput naming `where`."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise BadInput(f"{where} is not JSON ({e.args[0] if e.args else e})") from None
    if not isinstance(obj, dict):
        raise BadInput(f'{where} is not a JSON object: give {{"context": …, …}}')
    context = obj.get("context")
    if not isinstance(context, str):
        raise BadInput(f'{where} lacks a "context" string (it may be empty)')
    if "choices" in obj:
        choices, gold = obj["choices"], obj.get("gold")
        if not isinstance(choices, list) or len(choices) < 2:
            raise BadInput(f'{where}: "choices" must be a list of at least 2 strings')
        if not all(isinstance(c, str) and c for c in choices):
            raise BadInput(f'{where}: every entry of "choices" must be a non-empty string')
        if len(set(choices)) < len(choices):
            first = next(c for c in choices if choices.count(c) > 1)
            same = [i for i, c in enumerate(choices) if c == first]
            raise BadInput(
                f"{where}: choices {' and '.join(map(str, same))} are the same text "
                f"{first!r}, so no model can rank the gold one first: make every choice differ"
            )
        if isinstance(gold, bool) or not isinstance(gold, int):
            raise BadInput(f'{where} lacks "gold", the index of the right choice (0-based)')
        if not 0 <= gold < len(choices):
            raise BadInput(
                f'{where}: "gold" = {gold} is out of range for {len(choices)} choices '
                f"(0 to {len(choices) - 1})"
            )
        return TaskItem(context, tuple(choices), gold), "mc"
    cont = obj.get("continuation")
    if not isinstance(cont, str) or not cont:
        raise BadInput(
            f'{where} has neither "continuation" (a non-empty string: a cloze item) nor '
            '"choices" and "gold" (a multiple-choice item)'
        )
    return TaskItem(context, (cont,)), "cloze"


# ---------------------------------------------------------------------------------------
# The built-in tasks: generated from the embedded corpus's world
# ---------------------------------------------------------------------------------------

# The frame no training document or paraphrase style writes (cdlaw.data.embedded.render): a fact
# restated after "In short," in one of its kind's own wordings, its value the last word.
CLOZE_TEMPLATE = "{document} In short, {name} {predicate}"
MC_TEMPLATE = "In short, {name} {predicate}"
MC_CHOICES = 4


def builtin_task(name: str, data: DataConfig) -> Task:
    """world_cloze or world_mc for the sweep's world (its corpus_seed and [data.world]).

    Every item is about a document of the world's task stream, which draws its
    (subject, facts) pairs from the validation side: no training document or paraphrase
    states that set of facts together, and no document or paraphrase opens a sentence
    with "In short,". A fact is restated as "In short, <subject> <predicate>" with a
    predicate its value ends (e.g. "was founded in"), worded otherwise than the document
    worded it, and the value, one word, is the gold continuation.

    - world_cloze (LAMBADA-like): the document, then the restated fact: its last word is
      in the context (or known, if training taught the fact).
    - world_mc: the restated fact alone, closed book, with four choices: the values four
      entities of one kind (the document's subject and its nearest neighbours in
      popularity) have for that fact, each entity asked in its own item with the same
      choices. Only what training taught about each entity answers it: a guess that
      ignores the entity scores 25% however it ranks the values. Facts that name another
      entity are not asked (their values are few and skewed by popularity).
    """
    return _builtin(name, data.corpus_seed, json.dumps(data.world, sort_keys=True))


@lru_cache(maxsize=8)
def _builtin(name: str, seed: int, world_json: str) -> Task:
    from cdlaw.data.embedded import render, world
    from cdlaw.data.embedded.corpus import cached_world

    w = cached_world(seed, world.WorldOptions.from_config(json.loads(world_json)))
    rng = random.Random(f"{seed}:{name}")
    make = _cloze_item if name == "world_cloze" else _mc_group
    by_kind = _entities_by_kind(w) if name == "world_mc" else {}
    items: list[TaskItem] = []
    for block in itertools.count():
        for doc in world.documents(w, block, world.TASK_STREAM):
            items += make(w, doc, rng, render, by_kind)
            if len(items) >= BUILTIN_ITEMS:
                items = items[:BUILTIN_ITEMS]
                return Task(
                    name, "cloze" if name == "world_cloze" else "mc", tuple(items), "built-in"
                )
        if block > 64:  # pragma: no cover - a world too small to hold the facts asked for
            raise BadInput(f"the embedded world is too small for the built-in task {name!r}")
    raise AssertionError("unreachable")


def _restatable(w, doc, attrs, render) -> list[tuple[int, str]]:
    """(attribute, predicate before its value) for each fact of `attrs` that has a one-word
    value and a wording ending in it other than the one the document used."""
    kind = w.kind_of(doc.subject)
    used = dict(zip(doc.attrs, render.original_wordings(w, doc), strict=True))
    out = []
    for a in attrs:
        if " " in w.values[doc.subject][a]:
            continue
        for i, say in enumerate(kind.attributes[a].says):
            if say.endswith("{v}") and i != used[a]:
                out.append((a, say[: -len("{v}")].rstrip()))
    return out


def _cloze_item(w, doc, rng: random.Random, render, by_kind) -> list[TaskItem]:
    facts = _restatable(w, doc, doc.attrs, render)
    if not facts:
        return []
    attr, predicate = rng.choice(facts)
    context = CLOZE_TEMPLATE.format(
        document=render.render(w, doc), name=w.names[doc.subject], predicate=predicate
    )
    return [TaskItem(context, (" " + w.values[doc.subject][attr],))]


def _mc_group(w, doc, rng: random.Random, render, by_kind) -> list[TaskItem]:
    """Four items that share their four choices: the document's subject and the three
    entities of its kind nearest it in popularity with other values for the fact, each
    asked its own. Whatever ignores the subject ranks the four choices alike for all four
    questions, so it answers one of them right: 25%, whatever it knows of the values'
    frequency."""
    kind = w.kind_of(doc.subject)
    plain = [a for a in doc.attrs if not kind.attributes[a].value.startswith("entity:")]
    facts = _restatable(w, doc, plain, render)
    if not facts:
        return []
    attr, predicate = rng.choice(facts)
    same = by_kind[kind.name]
    here = same.index(doc.subject)
    group, values = [doc.subject], [w.values[doc.subject][attr]]
    for i in sorted(range(len(same)), key=lambda i: (abs(i - here), i))[1:64]:
        v = w.values[same[i]][attr]
        if v not in values:
            group.append(same[i])
            values.append(v)
            if len(group) == MC_CHOICES:
                break
    else:
        return []  # a fact with too few values to ask (solid, liquid or gas)
    items = []
    for entity, gold in zip(group, values, strict=True):
        choices = list(values)
        rng.shuffle(choices)
        context = MC_TEMPLATE.format(name=w.names[entity], predicate=predicate)
        items.append(TaskItem(context, tuple(" " + c for c in choices), choices.index(gold)))
    return items


def _entities_by_kind(w) -> dict[str, list[int]]:
    """{kind: its entities}, in index order."""
    out: dict[str, list[int]] = {}
    for entity in range(len(w.values)):
        out.setdefault(w.kind_of(entity).name, []).append(entity)
    return out


# ---------------------------------------------------------------------------------------
# Tokens: the rows a model scores
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskTokens:
    """A task as token rows: one row per (item, choice), end-of-text + context + choice.

    The continuation of row r is rows[r][starts[r]:]; n_bytes and n_chars are its length
    in UTF-8 bytes (for bits per byte) and characters (for acc_norm).
    """

    name: str
    kind: str
    rows: tuple[np.ndarray, ...]
    starts: np.ndarray  # (rows,) where each row's continuation begins
    item: np.ndarray  # (rows,) the item each row belongs to
    choice: np.ndarray  # (rows,) its choice index within the item
    gold: np.ndarray  # (items,) the gold choice of each item
    n_bytes: np.ndarray  # (rows,)
    n_chars: np.ndarray  # (rows,)

    @property
    def columns(self) -> list[str]:
        return [column(self.name, m) for m in METRICS[self.kind]]


def tokenise_tasks(tasks: list[Task], tokenizer, eos_id: int, seq_len: int) -> list[TaskTokens]:
    """Each task's rows for a `tokenizers` Tokenizer whose end-of-text id is eos_id.

    Context and continuation are encoded apart (a space that ends the context moves to the
    continuation, as lm-evaluation-harness does), so a continuation's tokens are exactly
    its own. Each row starts with end-of-text, the token before every training document;
    a row longer than seq_len loses context from the left. A continuation that does not
    fit seq_len is BadInput.
    """
    return [_tokenise(t, tokenizer, eos_id, seq_len) for t in tasks]


def _tokenise(task: Task, tok, eos_id: int, seq_len: int) -> TaskTokens:
    pairs = []
    for i, item in enumerate(task.items):
        context = item.context
        spaces = len(context) - len(context.rstrip(" "))
        context, lead = context[: len(context) - spaces], " " * spaces
        for c, text in enumerate(item.choices):
            pairs.append((i, c, context, lead + text))
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    contexts = encode([p[2] for p in pairs], add_special_tokens=False)
    conts = encode([p[3] for p in pairs], add_special_tokens=False)
    rows, starts = [], []
    for (i, _, _, text), ctx, cont in zip(pairs, contexts, conts, strict=True):
        if len(cont.ids) > seq_len - 1:
            raise BadInput(
                f"task {task.name!r} item {i + 1}: its continuation {text[:40]!r} is "
                f"{len(cont.ids)} tokens, more than a model of seq_len {seq_len} can score"
            )
        ids = [eos_id, *ctx.ids][-(seq_len - len(cont.ids)) :] + cont.ids
        rows.append(np.asarray(ids, dtype=np.int64))
        starts.append(len(ids) - len(cont.ids))
    return TaskTokens(
        task.name,
        task.kind,
        tuple(rows),
        np.asarray(starts, dtype=np.int64),
        np.asarray([p[0] for p in pairs], dtype=np.int64),
        np.asarray([p[1] for p in pairs], dtype=np.int64),
        np.asarray([it.gold for it in task.items], dtype=np.int64),
        np.asarray([len(p[3].encode("utf-8")) for p in pairs], dtype=np.int64),
        np.asarray([len(p[3]) for p in pairs], dtype=np.int64),
    )


def task_tokens_for(ev: EvalConfig, prepared, seq_len: int) -> list[TaskTokens]:
    """The tokenised tasks of a run (its [eval], the corpus its tokens came from),
    made once per process for each (tasks, corpus, seq_len)."""
    if not ev.tasks:
        return []
    from cdlaw.config import to_dict

    # the task files' content is part of the key: a file edited between two sweeps in one
    # process is read again
    from cdlaw.data.fingerprint import FileHashes

    hashes = FileHashes()
    files = {
        t: hashes.file(Path(t)) for t in ev.tasks if t.endswith(".jsonl") and Path(t).is_file()
    }
    key = json.dumps([to_dict(ev), to_dict(prepared.data), files], sort_keys=True)
    return _cached_tokens(key, str(prepared.tokenizer_path), prepared.eos_id, seq_len)


@lru_cache(maxsize=8)
def _cached_tokens(key: str, tokenizer_path: str, eos_id: int, seq_len: int):
    from cdlaw.config import from_dict
    from cdlaw.data.tokens.cache import load_tokenizer_once

    ev, data, _ = json.loads(key)
    tasks = resolve_tasks(from_dict(EvalConfig, ev), from_dict(DataConfig, data))
    return tokenise_tasks(tasks, load_tokenizer_once(tokenizer_path), eos_id, seq_len)
