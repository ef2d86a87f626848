"""The kinds of entity in the embedded world, and the attributes each kind has.

Each attribute has a noun ("founding year"), a value type, a question, and several
predicates ("was founded in {v}") that documents and paraphrases (render.py) choose from.
world.py builds the entities and their facts from this table.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
