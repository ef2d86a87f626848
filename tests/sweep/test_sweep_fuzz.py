"""Property-based tests of the sweep parser: whatever a sweep file holds — arbitrary bytes,
TOML-ish text, or well-formed TOML with valid and junk values anywhere — load_sweep either
returns a SweepConfig (whose runs expand) or raises BadInput; never another exception."""

import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cdlaw.sweep.spec import GRID_AXES, TOP_KEYS, load_sweep
from cdlaw.system.errors import BadInput

# Bounded: each test takes a few seconds; no example database is written.
FUZZ = settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def load_sweep_text(content: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.toml"
        path.write_bytes(content)
        return load_sweep(path)


def load(content: bytes):
    """load_sweep on a file holding `content`: the SweepConfig, or None for BadInput."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.toml"
        path.write_bytes(content)
        try:
            sweep = load_sweep(path)
        except BadInput as e:
            message = str(e)
            assert message and "\n" not in message and "np.float64" not in message, message
            event("bad input: " + message.partition(": ")[2][:25])
            return None
    event("parsed")
    if sweep.data.tokenizer == "bpe":
        assert sweep.runs()  # the parser already expanded them once; again, they agree
    return sweep


# --- values, valid and junk --------------------------------------------------------------

NUMBERS = st.one_of(
    st.sampled_from([0, -1, 1e-300, 1e300, 1e308, 2**53, 2**63 - 1, math.inf, math.nan]),
    st.integers(-5, 10**6),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 100),
    st.sampled_from(
        ["20K", "60K", "1M", "2.5e3", "olmo3_14M", "olmo3_x", "", "abc", "1e999", "-1"]
    ),
)
WORDS = st.sampled_from(
    ["repetition", "paraphrase", "none", "cosine", "wsd", "bpe", "embedded", "auto", "x"]
)
SCALARS = st.one_of(NUMBERS, WORDS, st.booleans(), st.text(max_size=8))
KEYS = st.one_of(
    st.sampled_from([*TOP_KEYS, *GRID_AXES, "passes", "zip", "seq_len", "lr", "batch_size"]),
    st.text(min_size=1, max_size=6),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)


def axis(values=NUMBERS):
    """A grid axis: a short list of values (or one bare value), now and then junk."""
    return st.one_of(st.lists(values, min_size=1, max_size=3, unique_by=repr), values, VALUES)


SIZES = ["20K", "60K", "100K", "olmo3_14M", 3e4]
TABLE_KEYS = {  # per table: keys and values, valid (or just past the edge)
    "model": {"seq_len": [16, 64], "rope_theta": [1e4]},
    "data": {"vocab_size": [512, 256], "val_tokens": [1000], "corpus_seed": [0, 3]},
    "train": {
        "lr": [1e-3],
        "weight_decay": [0.1, 0.0],
        "batch_size": [4, 8],
        "micro_batch_size": [0, 2],
        "beta2": [0.95, 0.9],
        "schedule": ["cosine", "wsd"],
    },
}


@st.composite
def sweeps(draw):
    """A sweep as a dict: mostly valid (so later checks are reached), junk anywhere."""

    def pick(valid, junk=VALUES):  # junk one time in ten
        return draw(junk if draw(st.sampled_from([False] * 9 + [True])) else valid)

    def axis_of(values, n=3):
        return pick(st.lists(st.sampled_from(values), min_size=1, max_size=n, unique=True), axis())

    grid = {"size": axis_of(SIZES, 2)}
    d_keys = draw(
        st.sampled_from(
            [["fresh_tokens"], ["tokens_per_param"]] * 4
            + [[], ["fresh_tokens", "tokens_per_param"]]
        )
    )
    for key in d_keys:
        grid[key] = axis_of([2048, 4096, "8K"] if key == "fresh_tokens" else [2, 8, 20])
    ratio_key = draw(st.sampled_from(["derived_ratio", "epochs", None]))
    if ratio_key:
        grid[ratio_key] = axis_of([0, 1, 3, 1001] if ratio_key == "derived_ratio" else [1, 2, 3])
    for key, values in (("strategy", ["repetition", "paraphrase"]), ("lr", [1e-3, 3e-3]),
                        ("weight_decay", [0, 0.1]), ("seed", [0, 1])):  # fmt: skip
        if draw(st.booleans()):
            grid[key] = axis_of(values, 2)
    if draw(st.integers(0, 3)) == 0:
        grid["zip"] = pick(
            st.sampled_from([[["size", "lr"]], [["size", "seed"]], [["derived_ratio", "size"]]])
        )
    for strategy, key in (("paraphrase", "passes"), ("repetition", "epochs")):
        if draw(st.integers(0, 3)) == 0:
            grid[strategy] = pick(
                st.fixed_dictionaries(
                    {
                        key: st.lists(
                            st.sampled_from([1, 2, 3, 1001]), min_size=1, max_size=2, unique=True
                        )
                    }
                )
            )
    sweep = {"grid": pick(st.just(grid))}
    if draw(st.booleans()):
        sweep["name"] = pick(st.sampled_from(["fuzz", "f-1.x"]))
    if draw(st.integers(0, 3)) == 0:
        sweep["description"] = pick(st.text(max_size=10))
    for table, keys in TABLE_KEYS.items():
        if draw(st.booleans()):
            values = st.fixed_dictionaries(
                {}, optional={k: st.sampled_from(v) for k, v in keys.items()}
            )
            sweep[table] = pick(values)
    if draw(st.integers(0, 3)) == 0:
        entry = st.dictionaries(
            st.sampled_from(["size", "strategy", "derived_ratio", "seed", "lr"]),
            VALUES | st.sampled_from(["20K", "repetition", 1, 0]),
            min_size=1,
            max_size=2,
        )
        sweep["exclude"] = pick(st.lists(entry, min_size=1, max_size=2))
    return sweep


def toml(value) -> str:
    """A value as TOML (inline tables and arrays; any float, nan and inf included)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml(k)} = {toml(v)}" for k, v in value.items()) + "}"


def toml_file(sweep: dict) -> bytes:
    return "".join(f"{toml(k)} = {toml(v)}\n" for k, v in sweep.items()).encode()


# --- the properties ----------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_are_bad_input(content):
    load(content)


TOMLISH = st.lists(
    st.one_of(
        st.builds(lambda k, v: f"{k} = {v}", KEYS, st.text(max_size=12)),
        st.builds(lambda k, v: f"{k} = {toml(v)}", KEYS, VALUES),
        st.sampled_from(
            [
                "[grid]",
                "[train]",
                "[data]",
                "[model]",
                "[[exclude]]",
                "[grid.paraphrase]",
                "[",
                "= 1",
                '"',
                "#",
            ]
        ),
    ),
    max_size=10,
)


@FUZZ
@given(TOMLISH)
def test_tomlish_text_parses_or_is_bad_input(lines):
    load("\n".join(lines).encode())


@FUZZ
@given(sweeps())
def test_structured_sweeps_with_junk_values_parse_or_are_bad_input(sweep):
    load(toml_file(sweep))


BASE = {
    "name": "fuzz",
    "grid": {"size": ["20K", "60K"], "tokens_per_param": [2, 8], "derived_ratio": [0, 1]},
    "data": {"vocab_size": 512},
    "model": {"seq_len": 64},
    "train": {"batch_size": 4},
}


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [("grid", k) for k in GRID_AXES]
                + [(t, k) for t, ks in TABLE_KEYS.items() for k in ks]
            ),
            VALUES | axis(),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_one_junk_value_in_a_valid_sweep_parses_or_is_bad_input(edits):
    """A valid sweep with a few keys replaced: every check behind the first one is reached."""
    sweep = json.loads(json.dumps(BASE))
    for (table, key), value in edits:
        sweep[table][key] = value
    if "fresh_tokens" in sweep["grid"]:
        sweep["grid"].pop("tokens_per_param", None)
    if "epochs" in sweep["grid"]:
        sweep["grid"].pop("derived_ratio", None)
    load(toml_file(sweep))


def test_the_valid_base_parses():
    assert load_sweep_text(toml_file(BASE)).name == "fuzz"
