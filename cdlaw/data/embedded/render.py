"""Documents of the embedded world as text: the original prose, and its paraphrases.

The original style ("prose") is what the corpus and its validation set are made of:
short encyclopedic paragraphs, one sentence per fact. A paraphrase states exactly the
same facts of the same document (same subject, same attributes, same values) in another
style: the CD paper's four — tutorial, faq, math, table — or a reworded "prose". Each
style has several frames, and every fact is restated with a predicate other than the one
the original used, in a new order, so a paraphrase is new surface for the same
information. The style, frame, order and wording of pass k of a document are a pure
function of (document, k).

Why mostly prose: the validation set is held-out original prose, and at D′/D = 15 a
model reads 94% paraphrases, so every systematic difference from the validation
documents costs loss. An earlier probe found bare faq/table/bullet paraphrases worse than
exact repetition (+0.12 to +0.24 nats) while prose rewrites beat it at 16 epochs. So
tutorial is prose with teaching phrases, and faq/math/table state every fact in a plain
sentence around short framing (question, equation, table), with the originals'
connectives; all but faq open as the originals do (docs/corpus.md has the measurements).
"""

from __future__ import annotations

import random

from cdlaw.data.embedded.kinds import KINDS
from cdlaw.data.embedded.world import Document, World
from cdlaw.system.errors import BadInput

PARAPHRASE_STYLES = ("tutorial", "faq", "math", "table", "prose")


def parse_styles(styles, allowed=PARAPHRASE_STYLES) -> list[tuple[str, float]]:
    """`data.paraphrase_styles` entries "name" or "name:weight" → [(name, weight)]."""
    out: list[tuple[str, float]] = []
    for entry in styles:
        name, _, weight = str(entry).partition(":")
        name = name.strip()
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            w = -1.0
        if not w > 0:
            raise BadInput(
                f"data.paraphrase_styles entry {entry!r} has a bad weight: write 'name' or "
                "'name:weight' with a positive weight, e.g. 'tutorial:2'"
            )
        if allowed is not None and name not in allowed:
            raise BadInput(
                f"data.paraphrase_styles entry {entry!r} is not a style of the embedded corpus: "
                f"use {', '.join(allowed)}"
            )
        out.append((name, w))
    if not out:
        raise BadInput("data.paraphrase_styles is empty: name at least one style, e.g. tutorial")
    return out


# ---------------------------------------------------------------------------------------
# Pieces shared by every style
# ---------------------------------------------------------------------------------------


def _article(word: str) -> str:
    if word.startswith(("a ", "an ")):
        return word
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _predicate(world: World, doc: Document, attr: int, wording: int) -> str:
    a = world.kind_of(doc.subject).attributes[attr]
    v = world.values[doc.subject][attr]
    return a.says[wording % len(a.says)].format(v=v, a=_article(v))


def _referents(world: World, subject: int) -> tuple[str, ...]:
    """How a later sentence may refer to the subject, besides its full name."""
    name = world.names[subject]
    kind = world.kind_of(subject)
    if kind.name == "person":
        return (name, name.split()[-1])  # "Ama Tovik" → also "Tovik"
    return (name, kind.referent, "it")


def _prose_choices(world: World, doc: Document) -> tuple[random.Random, list[int]]:
    r = random.Random(doc.salt)
    kind = world.kind_of(doc.subject)
    return r, [r.randrange(len(kind.attributes[a].says)) for a in doc.attrs]


def original_wordings(world: World, doc: Document) -> list[int]:
    """The predicate wording the original document uses for each of its facts."""
    return _prose_choices(world, doc)[1]


def render(world: World, doc: Document) -> str:
    """The original document: one plain sentence per fact, in the document's order."""
    r, wordings = _prose_choices(world, doc)
    refs = _referents(world, doc.subject)
    sentences = []
    for i, (attr, w) in enumerate(zip(doc.attrs, wordings, strict=True)):
        subject = world.names[doc.subject] if i == 0 else r.choice(refs)
        lead = r.choice(("", "", "", "Also, ", "In addition, ", "Moreover, ")) if i else ""
        sentences.append(_cap(f"{lead}{subject} {_predicate(world, doc, attr, w)}."))
    return " ".join(sentences)


# ---------------------------------------------------------------------------------------
# Paraphrases
# ---------------------------------------------------------------------------------------


class _Facts:
    """The facts of a document prepared for one paraphrase: new order, new wordings."""

    def __init__(self, world: World, doc: Document, r: random.Random):
        kind = world.kind_of(doc.subject)
        old = dict(zip(doc.attrs, original_wordings(world, doc), strict=True))
        self.name = world.names[doc.subject]
        self.refs = _referents(world, doc.subject)
        self.r = r
        order = list(doc.attrs)
        r.shuffle(order)
        self.rows = []  # (noun, value, sentence body "X was founded in 1923", question)
        for attr in order:
            a = kind.attributes[attr]
            new = [w for w in range(len(a.says)) if w != old[attr]] or [old[attr]]
            pred = _predicate(world, doc, attr, r.choice(new))
            self.rows.append((a.noun, world.values[doc.subject][attr], pred, a.ask))

    def sentence(self, i: int, pred: str, first_is_name: bool = True) -> str:
        """'Subject predicate' with the name first, then a mix of name and referents."""
        subject = self.name if (i == 0 and first_is_name) else self.r.choice(self.refs)
        return f"{subject} {pred}"


# Each style below is lean and mostly prose on purpose. Every fact is stated in a plain
# sentence with the original documents' connectives; a style's own framing (a teaching
# phrase, a question, an equation, a table) is short, and — except for the FAQ's
# questions — comes after the opening sentence, so a document still begins as the
# validation documents do. When paraphrases are 90% of what a model reads (D′/D = 15),
# every systematic difference from the validation set costs loss (docs/corpus.md).
CONNECTIVES = ("Also,", "In addition,", "Moreover,")  # the original documents' own
TEACHING = ("Note that", "Remember that", "It is worth knowing that", "Keep in mind that")


def _sentences(f: _Facts, rows=None, extra: tuple[str, ...] = (), share: float = 0.5):
    """Plain sentences; after the first, a `share` open with a connective (or `extra`)."""
    out = []
    for i, (*_, pred, _) in enumerate(f.rows if rows is None else rows):
        lead = ""
        if i and f.r.random() < share:
            lead = f.r.choice(extra if extra and f.r.random() < 0.5 else CONNECTIVES) + " "
        out.append(_cap(f"{lead}{f.sentence(i, pred)}."))
    return out


def _tutorial(f: _Facts) -> str:
    """Prose that teaches (the CD paper's tutorial style): the facts, with teaching phrases."""
    return " ".join(_sentences(f, extra=TEACHING, share=0.6))


def _faq(f: _Facts) -> str:
    """Questions, each answered in full sentences that may add one or two related facts."""
    frame = f.r.randrange(3)
    parts, i = [], 0
    while i < len(f.rows):
        take = min(f.r.choice((1, 2, 2, 3)), len(f.rows) - i)
        ask = f.rows[i][3].format(s=f.name)
        answer = " ".join(_sentences(f, f.rows[i : i + take], share=0.3))
        if frame == 0:
            parts.append(f"Q: {ask} A: {answer}")
        elif frame == 1:
            parts.append(f"Question: {ask}\nAnswer: {answer}")
        else:
            parts.append(f"{ask} {answer}")
        i += take
    return "\n".join(parts) if frame < 2 else " ".join(parts)


def _math(f: _Facts) -> str:
    """Prose in which every quantity is also written as an equation."""
    frame = f.r.randrange(3)
    out = []
    for sentence, (noun, v, _, _) in zip(_sentences(f), f.rows, strict=True):
        if not v.isdigit():
            out.append(sentence)
        elif frame == 0:
            out.append(f"{sentence[:-1]}, so {noun} = {v}.")
        elif frame == 1:
            out.append(f"{sentence[:-1]} ({noun} = {v}).")
        else:
            out.append(f"{sentence[:-1]}; in symbols, {noun} = {v}.")
    return " ".join(out)


def _table(f: _Facts) -> str:
    """The facts in sentences, then the same facts as a compact table."""
    frame = f.r.randrange(3)
    if frame == 0:
        table = "| fact | value |\n" + "\n".join(f"| {noun} | {v} |" for noun, v, _, _ in f.rows)
    elif frame == 1:
        table = "\n".join(f"- {noun}: {v}" for noun, v, _, _ in f.rows)
    else:
        table = "; ".join(f"{noun}: {v}" for noun, v, _, _ in f.rows) + "."
    return f"{' '.join(_sentences(f))}\n{table}"


def _prose(f: _Facts) -> str:
    """The original style, reworded and reordered."""
    return " ".join(_sentences(f))


RENDERERS = {"tutorial": _tutorial, "faq": _faq, "math": _math, "table": _table, "prose": _prose}
assert set(RENDERERS) == set(PARAPHRASE_STYLES)
assert all(k.name for k in KINDS)


def paraphrase_rng(doc: Document, k: int) -> random.Random:
    return random.Random(doc.salt * 1_000_003 + k)


def render_paraphrase(
    world: World, doc: Document, k: int, styles: list[tuple[str, float]]
) -> tuple[str, str]:
    """Pass k's paraphrase of a document: (style, text). Pure function of (document, k)."""
    r = paraphrase_rng(doc, k)
    names, weights = zip(*styles, strict=True)
    style = r.choices(names, weights=weights)[0]
    return style, RENDERERS[style](_Facts(world, doc, r))
