"""Documents of the embedded world as text: the original prose, and its paraphrases.

The original style ("prose") is what the corpus and its validation set are made of:
short encyclopedic paragraphs, one sentence per fact. A paraphrase states exactly the
same facts of the same document (same subject, same attributes, same values) in another
style: the CD paper's four — tutorial, faq, math, table — or a reworded "prose". Each
style has several frames, and every fact is restated with a predicate other than the one
the original used, in a new order, so a paraphrase is new surface for the same
information. The style, frame, order and wording of pass k of a document are a pure
function of (document, k).

Why mostly prose: a probe here found that paraphrases in bare faq/table/bullet formats
were worse than exact repetition (+0.12 to +0.24 nats), while prose rewrites matched
repetition at 4 epochs and beat it clearly at 16 (1.89 vs 2.20 nats), because the
validation set is prose. So tutorial is prose, and faq/math/table carry a full prose
sentence for every fact around their own framing (question, equation, table row).
"""

from __future__ import annotations

import random

from cdlaw.data.world import KINDS, Document, World
from cdlaw.errors import BadInput

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


def _tutorial(f: _Facts) -> str:
    n, r = f.name, f.r
    frame = r.randrange(3)
    if frame == 0:
        middle = (
            "Next, remember that",
            "It is also worth knowing that",
            "On top of that,",
            "Another point to learn is that",
        )
        body = []
        for i, (*_, pred, _) in enumerate(f.rows):
            if i == 0:
                lead = "First, note that"
            elif i == len(f.rows) - 1:
                lead = "Finally, keep in mind that"
            else:
                lead = r.choice(middle)
            body.append(f"{lead} {f.sentence(i, pred)}.")
        return " ".join(
            [f"In this lesson we look at {n}.", *body, f"That is what you need to know about {n}."]
        )
    if frame == 1:
        body = [
            f"Step {i + 1}: {_cap(f.sentence(i, pred))}." for i, (*_, pred, _) in enumerate(f.rows)
        ]
        return " ".join(
            [
                f"Let us learn about {n} step by step.",
                *body,
                f"Now you know {len(f.rows)} facts about {n}.",
            ]
        )
    body = []
    for i, (noun, v, pred, _) in enumerate(f.rows):
        if i % 2:
            body.append(
                f"You should also know that the {noun} of {n} is {v}, since {f.sentence(1, pred)}."
            )
        else:
            body.append(_cap(f"{f.sentence(i, pred)}."))
    return " ".join([f"Here is a short guide to {n}.", *body, "Keep these facts in mind."])


def _faq(f: _Facts) -> str:
    n, r = f.name, f.r
    frame = r.randrange(3)
    qa = [
        (ask.format(s=n), _cap(f.sentence(i, pred))) for i, (_, _, pred, ask) in enumerate(f.rows)
    ]
    if frame == 0:
        return "\n".join(
            [f"Frequently asked questions about {n}."] + [f"Q: {q} A: {a}." for q, a in qa]
        )
    if frame == 1:
        return "\n".join(
            [f"Questions and answers on {n}."] + [f"Question: {q}\nAnswer: {a}." for q, a in qa]
        )
    return " ".join([f"People often ask about {n}."] + [f"{q} {a}." for q, a in qa])


def _math(f: _Facts) -> str:
    n, r = f.name, f.r
    frame = r.randrange(3)
    if frame == 0:
        body = [
            f"Let x{i + 1} be the {noun} of {n}. Then x{i + 1} = {v}, because "
            f"{f.sentence(i, pred)}."
            for i, (noun, v, pred, _) in enumerate(f.rows)
        ]
        return " ".join([f"Consider {n}.", *body])
    if frame == 1:
        body = [
            f"{_cap(noun)}({n}) = {v}. In words, {f.sentence(i, pred)}."
            for i, (noun, v, pred, _) in enumerate(f.rows)
        ]
        return " ".join([f"We write the facts about {n} as equations.", *body])
    body = [
        f"We are told that the {noun} of {n} equals {v}; that is, {f.sentence(i, pred)}."
        for i, (noun, v, pred, _) in enumerate(f.rows)
    ]
    return " ".join(
        [f"A word problem about {n}.", *body, "Every answer below must agree with these givens."]
    )


def _table(f: _Facts) -> str:
    n, r = f.name, f.r
    frame = r.randrange(3)
    prose = " ".join(_cap(f"{f.sentence(i, pred)}.") for i, (*_, pred, _) in enumerate(f.rows))
    if frame == 0:
        rows = "\n".join(f"| {noun} | {v} |" for noun, v, _, _ in f.rows)
        return f"Facts about {n}:\n| fact | value |\n{rows}\nIn full sentences: {prose}"
    if frame == 1:
        rows = "\n".join(f"- {noun}: {v}" for noun, v, _, _ in f.rows)
        return f"{n} at a glance.\n{rows}\nTo put it in words: {prose}"
    rows = "; ".join(f"{noun} = {v}" for noun, v, _, _ in f.rows)
    return f"Table for {n}: {rows}.\nReading the table row by row: {prose}"


def _prose(f: _Facts) -> str:
    sentences = []
    for i, (*_, pred, _) in enumerate(f.rows):
        lead = f.r.choice(("", "", "Besides, ", "What is more, ", "Likewise, ")) if i else ""
        sentences.append(_cap(f"{lead}{f.sentence(i, pred)}."))
    return " ".join(sentences)


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
