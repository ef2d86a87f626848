"""The embedded corpus: a seeded world of entities, and documents that state its facts.

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
from dataclasses import dataclass, field

import numpy as np

from cdlaw.errors import BadInput

BLOCK_DOCS = 2048  # documents per block (~90K tokens): generated, tokenised and cached as one
VAL_MODULUS = 8  # 1 in 8 (subject, fact set) pairs is reserved for validation
TRAIN_STREAM, VAL_STREAM = 1, 2


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
# What the world is made of. Each attribute has a noun ("founding year"), a question, and
# several predicates ("was founded in {v}") that documents and paraphrases choose from.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attribute:
    name: str
    noun: str  # "the {noun} of X is V"
    # "year:LO:HI"; "int:LO:HI" (log-uniform, two significant digits); "list:NAME";
    # "entity:KIND" (another entity); "serial" / "symbol" (unique per entity of the kind)
    value: str
    says: tuple[str, ...]  # predicates with {v}; third person singular
    ask: str  # a question with {s}


@dataclass(frozen=True)
class Kind:
    name: str
    share: float  # share of the world's entities
    referent: str  # how later sentences may refer to the subject ("the city")
    attributes: tuple[Attribute, ...] = field(default_factory=tuple)


def A(name, noun, value, says, ask):  # a table row, kept short on purpose
    return Attribute(name, noun, value, tuple(says), ask)


KINDS: tuple[Kind, ...] = (
    Kind("person", 0.36, "", (
        A("born", "year of birth", "year:1850:2005",
          ["was born in {v}", "came into the world in {v}", "has {v} as a birth year"],
          "When was {s} born?"),
        A("hometown", "hometown", "entity:city",
          ["grew up in {v}", "comes from {v}", "was raised in the town of {v}"],
          "Where does {s} come from?"),
        A("job", "occupation", "list:jobs",
          ["works as {a}", "earns a living as {a}", "is {a} by trade"],
          "What does {s} do for a living?"),
        A("employer", "employer", "entity:company",
          ["works for {v}", "is employed by {v}", "has a job at {v}"],
          "Who employs {s}?"),
        A("hobby", "favorite pastime", "list:hobbies",
          ["enjoys {v} in their free time", "spends weekends {v}", "has a passion for {v}"],
          "What does {s} do for fun?"),
        A("color", "favorite color", "list:colors",
          ["likes the color {v} best", "prefers the color {v} above all others",
           "always picks something {v}"],
          "What is the favorite color of {s}?"),
        A("mentor", "mentor", "entity:person",
          ["was trained by {v}", "learned the trade from {v}", "studied under {v}"],
          "Who was the mentor of {s}?"),
        A("home", "place of residence", "entity:city",
          ["lives in {v}", "has a home in {v}", "resides in {v}"],
          "Where does {s} live?"),
        A("pet", "pet", "list:pets",
          ["owns {a}", "keeps {a} as a pet", "shares the house with {a}"],
          "What pet does {s} have?"),
    )),
    Kind("city", 0.16, "the city", (
        A("country", "country", "list:countries",
          ["lies in {v}", "is a city in {v}", "is located in {v}"],
          "In which country is {s}?"),
        A("population", "population", "int:2000:3000000",
          ["has {v} inhabitants", "is home to {v} people", "counts {v} residents"],
          "How many people live in {s}?"),
        A("founded", "founding year", "year:800:1950",
          ["was founded in {v}", "dates back to {v}", "was established in {v}"],
          "When was {s} founded?"),
        A("river", "river", "entity:river",
          ["sits on the banks of {v}", "is crossed by {v}", "lies along {v}"],
          "Which river runs through {s}?"),
        A("mayor", "mayor", "entity:person",
          ["is governed by mayor {v}", "has {v} as its mayor", "elected {v} as mayor"],
          "Who is the mayor of {s}?"),
        A("climate", "climate", "list:climates",
          ["has a {v} climate", "is known for its {v} weather", "enjoys {v} weather most of the year"],
          "What is the climate of {s} like?"),
        A("famous", "main attraction", "list:sights",
          ["is famous for {v}", "is best known for {v}", "draws visitors with {v}"],
          "What is {s} known for?"),
        A("twin", "sister city", "entity:city",
          ["is twinned with {v}", "has a partnership with {v}", "is a sister city of {v}"],
          "Which city is twinned with {s}?"),
        A("elevation", "elevation in meters", "int:5:3000",
          ["sits {v} meters above sea level", "lies at an altitude of {v} meters",
           "has an elevation of {v} meters"],
          "How high above sea level is {s}?"),
    )),
    Kind("company", 0.16, "the company", (
        A("founded", "founding year", "year:1800:2020",
          ["was founded in {v}", "opened its doors in {v}", "was set up in {v}"],
          "When was {s} founded?"),
        A("headquarters", "headquarters", "entity:city",
          ["is headquartered in {v}", "has its main office in {v}", "is based in {v}"],
          "Where is {s} based?"),
        A("founder", "founder", "entity:person",
          ["was founded by {v}", "was started by {v}", "owes its existence to {v}"],
          "Who founded {s}?"),
        A("industry", "industry", "list:industries",
          ["operates in the {v} industry", "is a {v} business", "does business in {v}"],
          "What industry is {s} in?"),
        A("employees", "number of employees", "int:10:200000",
          ["employs {v} people", "has a staff of {v}", "has {v} employees"],
          "How many people work at {s}?"),
        A("product", "best known product", "list:products",
          ["makes {v}", "is known for its {v}", "sells {v} around the world"],
          "What does {s} make?"),
        A("ceo", "chief executive", "entity:person",
          ["is led by {v}", "has {v} as its chief executive", "is run by {v}"],
          "Who runs {s}?"),
        A("rival", "main rival", "entity:company",
          ["competes with {v}", "has a long rivalry with {v}", "sees {v} as its main rival"],
          "Who is the main rival of {s}?"),
    )),
    Kind("element", 0.10, "the element", (
        A("number", "atomic number", "serial",
          ["has atomic number {v}", "sits at position {v} in the periodic table",
           "carries {v} protons"],
          "What is the atomic number of {s}?"),
        A("symbol", "chemical symbol", "symbol",
          ["has the symbol {v}", "is written as {v} in formulas", "is abbreviated {v}"],
          "What is the symbol of {s}?"),
        A("color", "color", "list:colors",
          ["has a {v} color", "looks {v} in pure form", "shines {v} when polished"],
          "What color is {s}?"),
        A("state", "state at room temperature", "list:states",
          ["is {a} at room temperature", "exists as {a} under normal conditions",
           "is found as {a} on a mild day"],
          "Is {s} a solid, a liquid or a gas?"),
        A("melting", "melting point in kelvin", "int:10:4000",
          ["melts at {v} kelvin", "has a melting point of {v} kelvin", "turns liquid at {v} kelvin"],
          "At what temperature does {s} melt?"),
        A("discoverer", "discoverer", "entity:person",
          ["was discovered by {v}", "was first isolated by {v}", "was identified by {v}"],
          "Who discovered {s}?"),
        A("discovered", "year of discovery", "year:1650:2010",
          ["was discovered in {v}", "was first isolated in {v}", "has been known since {v}"],
          "When was {s} discovered?"),
        A("use", "main use", "list:uses",
          ["is used in {v}", "finds use in {v}", "is valued for {v}"],
          "What is {s} used for?"),
        A("mine", "main mine", "entity:city",
          ["is mined near {v}", "is extracted near {v}", "occurs in the hills around {v}"],
          "Where is {s} mined?"),
    )),
    Kind("river", 0.08, "the river", (
        A("length", "length in kilometers", "int:20:6000",
          ["is {v} kilometers long", "runs for {v} kilometers", "stretches over {v} kilometers"],
          "How long is {s}?"),
        A("country", "country", "list:countries",
          ["flows through {v}", "runs across {v}", "winds its way through {v}"],
          "Which country does {s} flow through?"),
        A("source", "source", "list:mountains",
          ["rises in {v}", "has its source in {v}", "starts high up in {v}"],
          "Where does {s} begin?"),
        A("mouth", "mouth", "list:seas",
          ["empties into {v}", "flows into {v}", "ends in {v}"],
          "Where does {s} end?"),
        A("fish", "most common animal", "entity:species",
          ["is home to {v}", "is full of {v}", "supports large numbers of {v}"],
          "What lives in {s}?"),
        A("named", "namesake", "entity:person",
          ["is named after {v}", "takes its name from {v}", "bears the name of {v}"],
          "Who is {s} named after?"),
        A("width", "width in meters", "int:5:3000",
          ["is {v} meters wide at its widest point", "reaches a width of {v} meters",
           "spreads to {v} meters across"],
          "How wide is {s}?"),
        A("bridges", "number of bridges", "int:1:300",
          ["is spanned by {v} bridges", "has {v} bridges", "can be crossed on {v} bridges"],
          "How many bridges cross {s}?"),
    )),
    Kind("species", 0.14, "the species", (
        A("habitat", "habitat", "list:habitats",
          ["lives in {v}", "makes its home in {v}", "is found in {v}"],
          "Where does {s} live?"),
        A("diet", "diet", "list:diets",
          ["feeds on {v}", "eats mostly {v}", "lives on a diet of {v}"],
          "What does {s} eat?"),
        A("lifespan", "lifespan in years", "int:2:150",
          ["lives for about {v} years", "has a lifespan of {v} years", "can reach {v} years of age"],
          "How long does {s} live?"),
        A("weight", "weight in grams", "int:2:900000",
          ["weighs around {v} grams", "has a typical weight of {v} grams", "tips the scales at {v} grams"],
          "How much does {s} weigh?"),
        A("color", "color", "list:colors",
          ["is {v} in color", "has a {v} coat", "shows {v} markings"],
          "What color is {s}?"),
        A("native", "native land", "list:countries",
          ["is native to {v}", "originally comes from {v}", "was first seen in {v}"],
          "Where does {s} come from?"),
        A("describer", "first describer", "entity:person",
          ["was first described by {v}", "was named by {v}", "was catalogued by {v}"],
          "Who first described {s}?"),
        A("group", "group", "list:groups",
          ["belongs to the {v}", "is one of the {v}", "is classified among the {v}"],
          "What kind of animal is {s}?"),
    )),
)  # fmt: skip

MAX_FACTS = min(len(k.attributes) for k in KINDS) - 1  # a document never states them all

LISTS: dict[str, tuple[str, ...]] = {
    "jobs": tuple(
        "baker carpenter chemist dentist diver editor engineer farmer florist geologist "
        "glassblower historian illustrator jeweler journalist judge librarian locksmith "
        "mechanic midwife miner musician nurse optician painter pharmacist photographer pilot "
        "plumber poet potter printer professor sailor sculptor shepherd surgeon surveyor "
        "tailor teacher translator veterinarian weaver architect astronomer beekeeper "
        "cartographer".split()
    ),
    "hobbies": (
        "painting",
        "sailing",
        "chess",
        "gardening",
        "fishing",
        "hiking",
        "knitting",
        "birdwatching",
        "baking bread",
        "collecting stamps",
        "playing the violin",
        "playing the flute",
        "rock climbing",
        "cycling",
        "swimming",
        "archery",
        "pottery",
        "woodcarving",
        "juggling",
        "stargazing",
        "writing poems",
        "dancing",
        "rowing",
        "skating",
        "singing in a choir",
        "building model ships",
        "calligraphy",
        "origami",
        "beekeeping",
        "running marathons",
        "cooking soups",
        "solving puzzles",
    ),
    "colors": tuple(
        "red blue green yellow orange purple violet silver golden grey white black brown "
        "pink crimson amber teal indigo turquoise copper ivory scarlet olive maroon".split()
    ),
    "pets": (
        "a cat",
        "a dog",
        "a parrot",
        "a rabbit",
        "a turtle",
        "a goldfish",
        "a hamster",
        "a ferret",
        "a canary",
        "a tortoise",
        "a lizard",
        "a pony",
        "a goat",
        "an iguana",
        "an owl",
        "a hedgehog",
        "a snake",
        "a pig",
        "a duck",
        "a donkey",
    ),
    "climates": tuple(
        "dry humid cold mild rainy windy foggy snowy hot temperate stormy sunny".split()
    ),
    "sights": (
        "its glass bridge",
        "a spring festival",
        "its old harbor",
        "a clock tower",
        "its botanical garden",
        "a salt market",
        "its painted houses",
        "a stone castle",
        "its night market",
        "a music festival",
        "its hot springs",
        "a lighthouse",
        "its cathedral",
        "a wine fair",
        "its marble fountains",
        "an ancient library",
        "its lantern parade",
        "a flower market",
        "its canals",
        "a mountain railway",
        "its cheese",
        "a kite festival",
        "its copper domes",
        "a puppet theater",
        "its rose gardens",
        "a horse race",
        "its floating market",
        "an old university",
        "its sea caves",
        "a winter carnival",
    ),
    "industries": (
        "shipping",
        "mining",
        "banking",
        "textile",
        "software",
        "steel",
        "chemical",
        "furniture",
        "printing",
        "insurance",
        "aviation",
        "toy",
        "glass",
        "paper",
        "dairy",
        "tea",
        "coffee",
        "perfume",
        "railway",
        "fishing",
        "timber",
        "energy",
        "robotics",
        "clothing",
        "pharmaceutical",
        "publishing",
        "ceramics",
        "brewing",
    ),
    "products": (
        "bicycles",
        "solar panels",
        "wristwatches",
        "umbrellas",
        "pianos",
        "tractors",
        "candles",
        "telescopes",
        "sewing machines",
        "typewriters",
        "sailboats",
        "lamps",
        "radios",
        "skis",
        "kettles",
        "violins",
        "boots",
        "maps",
        "chocolates",
        "soaps",
        "rugs",
        "microscopes",
        "compasses",
        "cameras",
        "tents",
        "fountain pens",
        "locks",
        "engines",
        "ladders",
        "backpacks",
        "helmets",
        "batteries",
        "scissors",
        "mirrors",
        "blankets",
        "biscuits",
        "jam",
        "hats",
        "gloves",
        "paints",
    ),
    "states": ("a solid", "a liquid", "a gas"),
    "uses": (
        "batteries",
        "medicine",
        "glass making",
        "jewelry",
        "fertilizers",
        "paints",
        "rocket fuel",
        "magnets",
        "mirrors",
        "dental fillings",
        "light bulbs",
        "coins",
        "ceramics",
        "water filters",
        "lasers",
        "fireworks",
        "soap",
        "photography",
        "pipes",
        "alloys",
        "dyes",
        "lenses",
        "wires",
        "cosmetics",
    ),
    "habitats": (
        "dense forests",
        "coastal marshes",
        "dry deserts",
        "high mountains",
        "river banks",
        "open grasslands",
        "deep caves",
        "coral reefs",
        "frozen tundra",
        "swamps",
        "rocky shores",
        "bamboo groves",
        "salt lakes",
        "pine woods",
        "city parks",
        "volcanic islands",
        "sand dunes",
        "misty valleys",
    ),
    "diets": (
        "insects",
        "seeds",
        "fruit",
        "small fish",
        "leaves",
        "grass",
        "worms",
        "nectar",
        "snails",
        "roots",
        "mushrooms",
        "berries",
        "shrimp",
        "nuts",
        "algae",
        "moss",
    ),
    "groups": (
        "birds",
        "fish",
        "insects",
        "mammals",
        "reptiles",
        "amphibians",
        "spiders",
        "crabs",
        "snails",
        "beetles",
    ),
}

# Names are built from syllables, so the tokenizer learns pieces of them (as BPE does with
# real names) and an entity's name spans a few tokens.
ONSETS = (
    "b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
    "kr", "st", "th", "sh", "ch", "gr", "tr", "pl", "fl", "sk", "w", "j", "qu",
)  # fmt: skip
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou", "ia", "y")
CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "th", "nd", "rk", "sh", "x")
COMPANY_SUFFIXES = (
    "Works", "Labs", "Industries", "Systems", "Group", "Holdings", "Company", "Trading",
    "Motors", "Foods", "Brothers", "Partners",
)  # fmt: skip
SPECIES_ADJECTIVES = (
    "common", "great", "lesser", "red", "spotted", "striped", "golden", "pale", "dusky",
    "northern", "southern", "long-tailed", "horned", "crested", "giant", "little",
)  # fmt: skip

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
    """The world for a seed: entities, names, facts and popularity (pure function)."""
    options = options or WorldOptions()
    rng = np.random.default_rng([seed, 0])
    n = options.n_entities
    shares = np.array([k.share for k in KINDS])
    kind = rng.choice(len(KINDS), size=n, p=shares / shares.sum())
    kind[: len(KINDS)] = np.arange(len(KINDS))  # every kind exists, even in a tiny world
    ranks = np.arange(1, n + 1, dtype=np.float64)
    popularity = ranks**-options.zipf_exponent
    popularity /= popularity.sum()

    lists = dict(LISTS)
    taken: set[str] = set()
    lists["countries"] = tuple(_unique_names(rng, 40, taken, lambda r: _word(r, 2, 3)))
    lists["mountains"] = tuple(
        _unique_names(rng, 40, taken, lambda r: f"the {_word(r, 2, 2)} Mountains")
    )
    lists["seas"] = tuple(_unique_names(rng, 24, taken, lambda r: f"the {_word(r, 2, 3)} Sea"))

    given = _unique_names(rng, 600, set(), lambda r: _word(r, 2, 2))
    namers = {
        "person": lambda r: f"{given[r.integers(len(given))]} {_word(r, 2, 3)}",
        "city": lambda r: _word(r, 2, 3),
        "company": lambda r: (
            f"{_word(r, 2, 2)} {COMPANY_SUFFIXES[r.integers(len(COMPANY_SUFFIXES))]}"
        ),
        "element": lambda r: _word(r, 2, 2) + ("ium", "on", "ine", "ite")[r.integers(4)],
        "river": lambda r: f"the {_word(r, 1, 2)} River",
        "species": lambda r: (
            f"the {SPECIES_ADJECTIVES[r.integers(len(SPECIES_ADJECTIVES))]} {_word(r, 2, 2).lower()}"
        ),
    }
    names = [""] * n
    for i in range(n):
        make = namers[KINDS[kind[i]].name]
        name = make(rng)
        while name.lower() in taken:
            name = make(rng)
        taken.add(name.lower())
        names[i] = name

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
    values, targets = [], []
    for i in range(n):
        vals, tgts = [], []
        for attr in KINDS[kind[i]].attributes:
            kind_name, _, rest = attr.value.partition(":")
            target = -1
            if kind_name == "entity":
                ids = by_kind[rest]
                target = i
                while target == i:
                    target = int(ids[np.searchsorted(cdf_by_kind[rest], rng.random())])
                    if len(ids) == 1:
                        break
                text = names[target]
            elif kind_name == "list":
                text = lists[rest][rng.integers(len(lists[rest]))]
            elif kind_name == "serial":  # atomic numbers: unique, so no two elements share one
                text = str(next(serials))
            elif kind_name == "symbol":  # two letters while they last, then three
                text = next(symbols, None) or next(more_symbols)
            elif kind_name == "year":
                lo, hi = map(int, rest.split(":"))
                text = str(int(rng.integers(lo, hi + 1)))
            else:  # "int": log-uniform, two significant digits, as people round numbers
                lo, hi = map(int, rest.split(":"))
                x = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
                text = str(max(lo, int(float(f"{x:.2g}"))))
            vals.append(text)
            tgts.append(target)
        values.append(tuple(vals))
        targets.append(tuple(tgts))
    return World(seed, options, kind, names, values, targets, lists, popularity)


def _word(rng: np.random.Generator, lo: int, hi: int) -> str:
    n = int(rng.integers(lo, hi + 1))
    parts = []
    for _ in range(n):
        parts.append(ONSETS[rng.integers(len(ONSETS))])
        parts.append(VOWELS[rng.integers(len(VOWELS))])
        parts.append(CODAS[rng.integers(len(CODAS))])
    return "".join(parts).capitalize()


def _unique_names(rng, count: int, taken: set[str], make) -> list[str]:
    out = []
    while len(out) < count:
        name = make(rng)
        if name.lower() not in taken:
            taken.add(name.lower())
            out.append(name)
    return out


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
    """The BLOCK_DOCS documents of block `block` of a stream (training or validation)."""
    rng = np.random.default_rng([world.seed, stream, block])
    cdf = np.cumsum(world.popularity)
    cdf[-1] = 1.0
    subjects = np.searchsorted(cdf, rng.random(BLOCK_DOCS * 2), side="right")
    salts = rng.integers(0, 2**62, size=BLOCK_DOCS * 2)
    want_val = stream == VAL_STREAM
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
