"""The embedded corpus: a seeded world of entities, and documents that state its facts.

This module builds the world (entities, names, facts, popularity) and samples its
documents; the kinds of entity and their attributes are in kinds.py, the words and
name syllables in lexicon.py, the text of a document in render.py.

Why this scales like a real corpus (docs/corpus.md has the long version):

* The world holds `n_entities` people, cities, companies, elements, rivers and species,
  each with eight or nine attributes (a year, a number, a word from a list, or another
  entity). Those facts are fixed: every document that mentions one states the same value.
* A document picks its subject by popularity, which follows a Zipf law, and states a
  random subset of the subject's facts in plain prose. More fresh tokens keep revealing
  facts of rarer entities (loss falls as a power law in D); a bigger model stores more of
  them (loss falls in N); the random choice of subject, facts and wording is the
  irreducible part E.
* A paraphrase (render.py) states exactly the facts of its document in another style,
  so it adds new surface for the same information; repetition replays the same tokens.

Everything is a pure function of (corpus_seed, options, document index): documents are
sampled block by block from their own seeded generator, so any block can be (re)built in
any process and a run with more fresh tokens sees a superset of the documents of a run
with fewer.

Validation documents come from a separate stream, and the two streams never share a
(subject, set of facts) pair: a hash of the pair assigns it to validation (1 in
`VAL_MODULUS`) or training, and each stream only keeps its own pairs. So no validation
document, and no paraphrase of a training document, can ever be a validation document.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import numpy as np

from cdlaw.data.embedded.kinds import KINDS, MAX_FACTS, Kind
from cdlaw.data.embedded.lexicon import (
    COMPANY_SUFFIXES,
    LISTS,
    SPECIES_ADJECTIVES,
    syllable_word,
    unique_names,
)
from cdlaw.system.errors import BadInput

BLOCK_DOCS = 2048  # documents per block (~90K tokens): generated, tokenised and cached as one
VAL_MODULUS = 8  # 1 in 8 (subject, fact set) pairs is reserved for validation
TRAIN_STREAM, VAL_STREAM = 1, 2
# The built-in downstream tasks' documents (cdlaw.tasks.files): a stream of its own, drawn
# from the validation side of the (subject, facts) pairs, so no task document is a
# training document or a paraphrase of one.
TASK_STREAM = 3


@dataclass(frozen=True)
class WorldOptions:
    """Options of the embedded world (`data.world` in a sweep file); defaults in docs/corpus.md."""

    n_entities: int = 8000  # people, cities, companies, elements, rivers and species
    zipf_exponent: float = 1.1  # popularity of the entity ranked r is ∝ r^-zipf_exponent
    min_facts: int = 2  # facts stated per document: uniform in [min_facts, max_facts]
    max_facts: int = 6

    def __post_init__(self):
        if not 50 <= self.n_entities <= 10_000_000:
            raise BadInput(f"data.world.n_entities must lie in [50, 1e7], got {self.n_entities}")
        if not 0 < self.zipf_exponent <= 4:
            raise BadInput(f"data.world.zipf_exponent must lie in (0, 4], got {self.zipf_exponent}")
        if not 1 <= self.min_facts <= self.max_facts <= MAX_FACTS:
            raise BadInput(
                f"data.world.min_facts ({self.min_facts}) and max_facts ({self.max_facts}) must "
                f"satisfy 1 ≤ min_facts ≤ max_facts ≤ {MAX_FACTS}"
            )

    @classmethod
    def from_config(cls, world: dict) -> WorldOptions:
        from cdlaw.config import from_dict

        return from_dict(cls, dict(world), "data.world")


# ---------------------------------------------------------------------------------------
# The world
# ---------------------------------------------------------------------------------------


@dataclass
class World:
    """Entities (indexed by popularity rank: 0 is the most popular) and their facts."""

    seed: int
    options: WorldOptions
    kind: np.ndarray  # kind index per entity
    names: list[str]  # as written inside a sentence ("the Velor River", "Ama Tovik")
    values: list[tuple[str, ...]]  # per entity, per attribute of its kind: the value as written
    targets: list[tuple[int, ...]]  # per entity, per attribute: the entity it names, or -1
    lists: dict[str, tuple[str, ...]]  # the value lists, with the world's own countries etc.
    popularity: np.ndarray  # probability that a document is about each entity

    def kind_of(self, entity: int) -> Kind:
        return KINDS[int(self.kind[entity])]

    def facts(self, entity: int, attrs) -> list[tuple[str, str]]:
        """(attribute name, value) for the given attribute indices of an entity."""
        kind = self.kind_of(entity)
        return [(kind.attributes[a].name, self.values[entity][a]) for a in attrs]


def build_world(seed: int, options: WorldOptions | None = None) -> World:
    """The world for a seed: entities, names, facts and popularity (pure function).

    Every draw comes from one generator, in this order: kinds, value lists, names, facts.
    """
    options = options or WorldOptions()
    rng = np.random.default_rng([seed, 0])
    n = options.n_entities
    shares = np.array([k.share for k in KINDS])
    kind = rng.choice(len(KINDS), size=n, p=shares / shares.sum())
    kind[: len(KINDS)] = np.arange(len(KINDS))  # every kind exists, even in a tiny world
    ranks = np.arange(1, n + 1, dtype=np.float64)
    popularity = ranks**-options.zipf_exponent
    popularity /= popularity.sum()

    taken: set[str] = set()  # every name in the world, lower-cased: no two things share one
    lists = _world_lists(rng, taken)
    names = _entity_names(rng, kind, taken)
    values, targets = _entity_facts(rng, kind, names, lists, popularity)
    return World(seed, options, kind, names, values, targets, lists, popularity)


def _world_lists(rng, taken: set[str]) -> dict[str, tuple[str, ...]]:
    """The value lists, with the world's own countries, mountains and seas."""
    lists = dict(LISTS)
    lists["countries"] = tuple(unique_names(rng, 40, taken, lambda r: syllable_word(r, 2, 3)))
    lists["mountains"] = tuple(
        unique_names(rng, 40, taken, lambda r: f"the {syllable_word(r, 2, 2)} Mountains")
    )
    lists["seas"] = tuple(
        unique_names(rng, 24, taken, lambda r: f"the {syllable_word(r, 2, 3)} Sea")
    )
    return lists


def _entity_names(rng, kind: np.ndarray, taken: set[str]) -> list[str]:
    """A name per entity in the style of its kind, none taken before."""
    given = unique_names(rng, 600, set(), lambda r: syllable_word(r, 2, 2))
    namers = {
        "person": lambda r: f"{given[r.integers(len(given))]} {syllable_word(r, 2, 3)}",
        "city": lambda r: syllable_word(r, 2, 3),
        "company": lambda r: (
            f"{syllable_word(r, 2, 2)} {COMPANY_SUFFIXES[r.integers(len(COMPANY_SUFFIXES))]}"
        ),
        "element": lambda r: syllable_word(r, 2, 2) + ("ium", "on", "ine", "ite")[r.integers(4)],
        "river": lambda r: f"the {syllable_word(r, 1, 2)} River",
        "species": lambda r: (
            f"the {SPECIES_ADJECTIVES[r.integers(len(SPECIES_ADJECTIVES))]} {syllable_word(r, 2, 2).lower()}"
        ),
    }
    names = [""] * len(kind)
    for i in range(len(kind)):
        make = namers[KINDS[kind[i]].name]
        name = make(rng)
        while name.lower() in taken:
            name = make(rng)
        taken.add(name.lower())
        names[i] = name
    return names


def _entity_facts(rng, kind: np.ndarray, names: list[str], lists: dict, popularity: np.ndarray):
    """Per entity, per attribute of its kind: the value as written, and the entity it names
    (or -1)."""
    # Entity-valued facts point at other entities, the popular ones more often (as real
    # text mentions famous people more), which also makes popular names more frequent.
    by_kind = {k.name: np.flatnonzero(kind == i) for i, k in enumerate(KINDS)}
    cdf_by_kind = {
        name: np.cumsum(popularity[ids]) / popularity[ids].sum() for name, ids in by_kind.items()
    }
    n_elements = int(sum(KINDS[k].name == "element" for k in kind))
    serials = iter(rng.permutation(np.arange(1, n_elements + 1)).tolist())
    upper, lower = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"
    symbols = iter(
        [u + a for u in upper for a in lower][i] for i in rng.permutation(26 * 26).tolist()
    )
    more_symbols = (u + a + b for u in upper for a in lower for b in lower)

    def fact(i: int, value: str) -> tuple[str, int]:
        kind_name, _, rest = value.partition(":")
        if kind_name == "entity":
            ids = by_kind[rest]
            target = i
            while target == i:
                target = int(ids[np.searchsorted(cdf_by_kind[rest], rng.random())])
                if len(ids) == 1:
                    break
            return names[target], target
        if kind_name == "list":
            return lists[rest][rng.integers(len(lists[rest]))], -1
        if kind_name == "serial":  # atomic numbers: unique, so no two elements share one
            return str(next(serials)), -1
        if kind_name == "symbol":  # two letters while they last, then three
            return next(symbols, None) or next(more_symbols), -1
        lo, hi = map(int, rest.split(":"))
        if kind_name == "year":
            return str(int(rng.integers(lo, hi + 1))), -1
        # "int": log-uniform, two significant digits, as people round numbers
        x = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        return str(max(lo, int(float(f"{x:.2g}")))), -1

    values, targets = [], []
    for i in range(len(kind)):
        stated = [fact(i, attr.value) for attr in KINDS[kind[i]].attributes]
        values.append(tuple(text for text, _ in stated))
        targets.append(tuple(target for _, target in stated))
    return values, targets


# ---------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """One document: a subject, the attributes it states (in order), and a salt that seeds
    every other choice (wording, referents) so the text is a pure function of this."""

    subject: int
    attrs: tuple[int, ...]
    salt: int


def is_validation_pair(seed: int, subject: int, attrs) -> bool:
    """Whether a (subject, set of facts) pair belongs to validation: a stable hash, 1 in 8."""
    mask = sum(1 << a for a in attrs)
    digest = hashlib.blake2b(f"{seed}:{subject}:{mask}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % VAL_MODULUS == 0


def documents(world: World, block: int, stream: int = TRAIN_STREAM) -> list[Document]:
    """The BLOCK_DOCS documents of block `block` of a stream (training, validation, or the
    tasks', whose documents are drawn from the validation side too)."""
    rng = np.random.default_rng([world.seed, stream, block])
    cdf = np.cumsum(world.popularity)
    cdf[-1] = 1.0
    subjects = np.searchsorted(cdf, rng.random(BLOCK_DOCS * 2), side="right")
    salts = rng.integers(0, 2**62, size=BLOCK_DOCS * 2)
    want_val = stream != TRAIN_STREAM
    out: list[Document] = []
    opts = world.options
    for subject, salt in zip(subjects.tolist(), salts.tolist(), strict=True):
        r = random.Random(salt)
        n_attrs = len(world.kind_of(subject).attributes)
        for _ in range(200):
            k = r.randint(opts.min_facts, opts.max_facts)
            attrs = tuple(r.sample(range(n_attrs), k))
            if is_validation_pair(world.seed, subject, attrs) == want_val:
                out.append(Document(subject, attrs, salt))
                break
        # else: this subject has no pair of the wanted side (tiny worlds); take the next draw
        if len(out) == BLOCK_DOCS:
            return out
    raise RuntimeError("the world is too small to fill a block of documents")  # pragma: no cover
