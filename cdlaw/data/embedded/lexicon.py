"""The words the embedded world is made of: the lists that list-valued facts draw from,
and the syllables (and suffixes, adjectives) that entity names are built from."""

from __future__ import annotations

import numpy as np

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


def syllable_word(rng: np.random.Generator, lo: int, hi: int) -> str:
    """A capitalised made-up word of lo…hi syllables."""
    n = int(rng.integers(lo, hi + 1))
    parts = []
    for _ in range(n):
        parts.append(ONSETS[rng.integers(len(ONSETS))])
        parts.append(VOWELS[rng.integers(len(VOWELS))])
        parts.append(CODAS[rng.integers(len(CODAS))])
    return "".join(parts).capitalize()


def unique_names(rng, count: int, taken: set[str], make) -> list[str]:
    """`count` names from make(rng) not yet in `taken` (case-insensitive); adds them."""
    out: list[str] = []
    while len(out) < count:
        name = make(rng)
        if name.lower() not in taken:
            taken.add(name.lower())
            out.append(name)
    return out
