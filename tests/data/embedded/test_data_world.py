"""The embedded world: deterministic, Zipfian, and paraphrases that keep exactly the facts."""

import re
from collections import Counter

import numpy as np
import pytest

from cdlaw.data.embedded import render, world
from cdlaw.system.errors import BadInput

OPTIONS = world.WorldOptions(n_entities=400, zipf_exponent=1.1)


@pytest.fixture(scope="module")
def w():
    return world.build_world(3, OPTIONS)


@pytest.fixture(scope="module")
def docs(w):
    return world.documents(w, 0)


def test_world_is_a_pure_function_of_the_seed(w):
    again = world.build_world(3, OPTIONS)
    assert again.names == w.names and again.values == w.values
    other = world.build_world(4, OPTIONS)
    assert other.names != w.names
    assert len(set(n.lower() for n in w.names)) == len(w.names)  # names are unique
    assert world.documents(w, 1) == world.documents(again, 1)
    assert world.documents(w, 1) != world.documents(w, 2)


def test_every_attribute_value_is_fixed_and_of_its_type(w):
    for e in range(len(w.names)):
        kind = w.kind_of(e)
        assert len(w.values[e]) == len(kind.attributes)
        for a, value, target in zip(kind.attributes, w.values[e], w.targets[e], strict=True):
            source, _, rest = a.value.partition(":")
            if source == "entity":
                assert w.kind_of(target).name == rest and w.names[target] == value
                assert target != e
            elif source == "list":
                assert value in w.lists[rest]
            elif source == "year":
                lo, hi = map(int, rest.split(":"))
                assert lo <= int(value) <= hi
    elements = [e for e in range(len(w.names)) if w.kind_of(e).name == "element"]
    numbers = [w.values[e][0] for e in elements]
    symbols = [w.values[e][1] for e in elements]
    assert len(set(numbers)) == len(numbers) and len(set(symbols)) == len(symbols)


def test_subjects_follow_the_zipf_popularity(w, docs):
    counts = np.bincount([d.subject for d in docs], minlength=len(w.names))
    # The most popular entity gets its share of documents, within sampling noise.
    expected = w.popularity[0] * len(docs)
    assert abs(counts[0] - expected) < 4 * np.sqrt(expected)
    # log frequency vs log rank over the head of the distribution: slope ≈ −zipf_exponent.
    ranks = np.arange(1, 41)
    slope = np.polyfit(np.log(ranks), np.log(counts[:40] + 0.5), 1)[0]
    assert slope == pytest.approx(-OPTIONS.zipf_exponent, abs=0.2)
    sizes = Counter(len(d.attrs) for d in docs)
    assert set(sizes) == set(range(OPTIONS.min_facts, OPTIONS.max_facts + 1))


def test_documents_state_their_facts(w, docs):
    from cdlaw.data.tokens.tokenizer import ASCII

    styles = render.parse_styles(render.PARAPHRASE_STYLES)
    for d in docs[:300]:
        text = render.render(w, d)
        # The embedded BPE knows only these characters: anything else would be lost.
        assert set(text + render.render_paraphrase(w, d, 1, styles)[1]) <= set(ASCII)
        assert text.startswith(render._cap(w.names[d.subject]))
        for _, value in w.facts(d.subject, d.attrs):
            assert value in text
        assert len(set(d.attrs)) == len(d.attrs)


def _names_in(text, w, candidates):
    return {
        e for e in candidates if re.search(rf"(?<!\w){re.escape(w.names[e])}(?!\w)", text, re.I)
    }


def test_a_paraphrase_states_exactly_the_same_facts_in_new_words(w, docs):
    styles = render.parse_styles(render.PARAPHRASE_STYLES)
    seen_styles = Counter()
    overlaps = []
    everyone = range(len(w.names))
    for d in docs[:120]:
        original = render.render(w, d)
        named = _names_in(original, w, everyone)
        for k in (1, 2, 3):
            style, text = render.render_paraphrase(w, d, k, styles)
            seen_styles[style] += 1
            assert text != original
            # The same entities: the subject and the entities its stated facts point to...
            assert _names_in(text, w, everyone) == named
            # ...every stated value, and no value of a fact the document does not state.
            for _, value in w.facts(d.subject, d.attrs):
                assert value in text, (style, value, text)
            unstated = [a for a in range(len(w.values[d.subject])) if a not in d.attrs]
            for _, value in w.facts(d.subject, unstated):
                pattern = rf"(?<!\w){re.escape(value)}(?!\w)"
                if not re.search(pattern, original):
                    assert not re.search(pattern, text), (style, value, text)
            a, b = _trigrams(original), _trigrams(text)
            overlaps.append(len(a & b) / len(a | b))
        # A pass is a pure function of (document, k).
        assert render.render_paraphrase(w, d, 2, styles) == render.render_paraphrase(
            w, d, 2, styles
        )
    assert set(seen_styles) == set(render.PARAPHRASE_STYLES)
    assert np.mean(overlaps) < 0.35  # new surface: most word trigrams are new


def _trigrams(text):
    words = re.findall(r"\w+", text.lower())
    return set(zip(words, words[1:], words[2:], strict=False))


def test_paraphrase_styles_can_be_selected_and_weighted(w, docs):
    only = render.parse_styles(["tutorial"])
    assert {render.render_paraphrase(w, d, 1, only)[0] for d in docs[:50]} == {"tutorial"}
    heavy = render.parse_styles(["tutorial:9", "faq:1"])
    picks = Counter(render.render_paraphrase(w, d, 1, heavy)[0] for d in docs[:400])
    assert picks["tutorial"] > 5 * picks["faq"] > 0
    with pytest.raises(BadInput, match="not a style"):
        render.parse_styles(["poem"])
    with pytest.raises(BadInput, match="positive weight"):
        render.parse_styles(["faq:-1"])


def test_validation_and_training_documents_never_share_a_fact_set(w, docs):
    val = world.documents(w, 0, world.VAL_STREAM)
    val_pairs = {(d.subject, frozenset(d.attrs)) for d in val}
    train_pairs = {(d.subject, frozenset(d.attrs)) for d in docs}
    assert not val_pairs & train_pairs
    assert all(world.is_validation_pair(w.seed, d.subject, d.attrs) for d in val)
    # So no training text (nor any paraphrase of one, which states the same facts) is a
    # validation text.
    assert not {render.render(w, d) for d in val} & {render.render(w, d) for d in docs}
    # Validation is the same distribution over subjects: the head entities dominate both.
    top = Counter(d.subject for d in val).most_common(3)
    assert top[0][0] in range(5)


def test_world_options_are_validated_by_name():
    with pytest.raises(BadInput, match="did you mean 'n_entities'"):
        world.WorldOptions.from_config({"n_entity": 10})
    with pytest.raises(BadInput, match="zipf_exponent"):
        world.WorldOptions(zipf_exponent=0)
    with pytest.raises(BadInput, match="max_facts"):
        world.WorldOptions(min_facts=5, max_facts=3)
    assert world.WorldOptions.from_config({"n_entities": "20K"}).n_entities == 20_000
