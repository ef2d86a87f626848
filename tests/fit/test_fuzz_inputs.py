"""Property-based fuzzing of the readers a user's files go through: any input either parses
or raises BadInput (one sentence, exit 2) — never another exception (exit 1, a traceback).

The table reader (cdlaw.fit.table: load_runs / prepare_runs, and what the fit computes from
a prepared table before optimising) gets DataFrames and CSV text with the required columns
and junk values; the fit-file reader (FitResult.from_dict, cdlaw.plan.source.load_law) gets
JSON-like dicts shaped like a fit, arbitrary JSON, and arbitrary bytes.
"""

import json
import math
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cdlaw.fit.cells import duplicate_rows, seed_noise, select_cells
from cdlaw.fit.io import FitResult
from cdlaw.fit.table import REQUIRED, load_runs, prepare_runs
from cdlaw.law import PRESETS
from cdlaw.plan.source import load_law
from cdlaw.strategies import is_name
from cdlaw.system.errors import BadInput

# 200 examples per test keeps each under ~20 s; CDLAW_FUZZ_EXAMPLES=5000 fuzzes longer.
FUZZ = settings(
    max_examples=int(os.environ.get("CDLAW_FUZZ_EXAMPLES", "200")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# ---------------------------------------------------------------------------------------
# Values: numbers of every kind, text that may or may not be a number, and other JSON.
# ---------------------------------------------------------------------------------------

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, -1, 1e9, 2e7, 3.2, 1e-300, 1e308, 10**400]),
)
texts = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["nan", "inf", "-inf", "1e9", "2e7", " 3.0 ", "none", "repetition",
                     "Paraphrase", "done", "DONE", "x", "", "1e400", "0x10", "True"]),
)  # fmt: skip
cells = st.one_of(numbers, texts, st.none(), st.booleans())
json_scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def good_row(rng_value):
    """A plausible row: most fuzzed tables should get past the first check sometimes."""
    N = [1e7, 2e7, 6e7][rng_value % 3]
    D = N * [5, 20, 80][(rng_value // 3) % 3]
    r = [0, 1, 4][(rng_value // 9) % 3]
    return {"n_params": N, "fresh_tokens": D, "derived_tokens": r * D,
            "strategy": "repetition" if r else "none", "loss": 3.0 + 0.01 * rng_value}  # fmt: skip


@st.composite
def tables(draw):
    """A table with the required columns (some rows plausible, some junk) and extra columns."""
    n = draw(st.integers(min_value=0, max_value=8))
    rows = []
    for _ in range(n):
        row = good_row(draw(st.integers(min_value=0, max_value=26)))
        for col in draw(st.sets(st.sampled_from(REQUIRED), max_size=3)):
            row[col] = draw(cells)
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(REQUIRED)) if rows else pd.DataFrame(columns=REQUIRED)
    for extra in draw(st.sets(st.sampled_from(["status", "row_id", "lr", "seed", "weight_decay"]))):
        df[extra] = [draw(cells) for _ in range(n)]
    if n and draw(st.booleans()):
        df = pd.concat([df, df.iloc[: draw(st.integers(1, n))]], ignore_index=True)
    return df


def parses_or_bad_input(call):
    """call() returns, or raises BadInput with a one-line message; anything else fails."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return call()
    except BadInput as e:
        msg = str(e)
        assert msg and "\n" not in msg and "np.float64" not in msg, msg
        return None


def read_table(df):
    prepared = prepare_runs(df, "fuzz.csv")
    seed_noise(prepared)
    duplicate_rows(prepared)
    for how in ("min", "mean", "none"):
        select_cells(prepared, how)
    return prepared


@FUZZ
@given(tables())
def test_prepare_runs_parses_or_refuses_any_table(df):
    prepared = parses_or_bad_input(lambda: read_table(df))
    if prepared is not None:  # what it accepts is what the fit relies on
        for col in ("n_params", "fresh_tokens", "loss"):
            assert (prepared[col] > 0).all() and np.isfinite(prepared[col]).all()
        assert (prepared["derived_tokens"] >= 0).all()
        assert all(s == "none" or is_name(s) for s in prepared["strategy"])  # named by the rule


csv_fields = st.one_of(
    texts.map(str),
    numbers.map(str),
    st.text(alphabet=st.sampled_from(list("0123456789.e-+\",'; \tnaif\r")), max_size=10),
)


@FUZZ
@given(
    st.lists(st.lists(csv_fields, min_size=0, max_size=7), max_size=6),
    st.sampled_from(
        [
            ",".join(REQUIRED),
            ",".join(REQUIRED) + ",status,seed",
            "loss,n_params",
            "params,tokens,unique_tokens,loss",
            "N,D,D',epochs,loss,status",
        ]
    ),
)
def test_load_runs_parses_or_refuses_any_csv_text(lines, header):
    text = header + "\n" + "\n".join(",".join(fields) for fields in lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.csv"
        path.write_text(text)
        parses_or_bad_input(lambda: read_table(load_runs(path)))


@FUZZ
@given(st.binary(max_size=200), st.sampled_from(["t.csv", "t.parquet"]))
def test_load_runs_parses_or_refuses_any_file_bytes(data, name):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        parses_or_bad_input(lambda: read_table(load_runs(path)))


# ---------------------------------------------------------------------------------------
# fit.json
# ---------------------------------------------------------------------------------------

FITS = [
    {**law.to_dict(), "method": "joint", "bootstrap": [], "bootstrap_params": []}
    for law in PRESETS.values()
]
FIT_KEYS = ["law", "params", "strategies", "source", "method", "huber_delta", "naive",
            "select", "bootstrap", "bootstrap_params", "ci95", "n_rows", "n_used",
            "dropped", "objective", "rmse_log", "seed_noise", "holdout", "optimizer",
            "data_range", "model_floor", "rstar", "regime_counts", "warnings"]  # fmt: skip
PARAM_KEYS = ["E", "A", "B", "alpha", "beta", "K", "rho", "sigma", "rstar_d", "rstar_n"]


@st.composite
def fit_dicts(draw):
    """A real fit.json with some keys (top level, params, strategy params) replaced by junk."""
    d = json.loads(json.dumps(draw(st.sampled_from(FITS))))
    for key in draw(st.sets(st.sampled_from(FIT_KEYS), max_size=3)):
        if draw(st.booleans()):
            d[key] = draw(json_values)
        else:
            d.pop(key, None)
    strategies = d.get("strategies")
    targets = [d.get("params")] + (
        list(strategies.values()) if isinstance(strategies, dict) else []
    )
    for target in targets:
        if isinstance(target, dict) and draw(st.booleans()):
            target[draw(st.sampled_from(PARAM_KEYS))] = draw(json_values)
    if draw(st.booleans()):  # bootstrap vectors: names and values, consistent or not
        names = draw(st.lists(st.sampled_from(["E", "A", "B", "alpha", "beta", "rstar_n",
                                               "repetition.K", "repetition.rstar_d"]), max_size=7))  # fmt: skip
        d["bootstrap_params"] = names
        d["bootstrap"] = draw(st.lists(st.lists(json_scalars, max_size=8), max_size=3))
    if draw(st.booleans()):
        d["data_range"] = draw(
            st.dictionaries(
                st.sampled_from(["n_params", "fresh_tokens", "derived_ratio", "repetition"]),
                json_values,
                max_size=3,
            )
        )
    return d


def read_fit(d):
    fit = FitResult.from_dict(d, "fuzz.json")
    law = fit.law
    for name in ("E", "A", "B", "alpha", "beta"):
        assert math.isfinite(law.params[name])
    fit.bootstrap_laws()
    fit.to_dict()
    return fit


@FUZZ
@given(fit_dicts())
@example(  # a strategy name with a newline once made a two-line message
    {
        "law": "chinchilla",
        "params": {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28},
        "strategies": {"\n": {"": None}},
    }
)
def test_fit_from_dict_parses_or_refuses_any_fit_shaped_dict(d):
    parses_or_bad_input(lambda: read_fit(d))


@FUZZ
@given(json_values)
def test_fit_from_dict_parses_or_refuses_any_json(d):
    parses_or_bad_input(lambda: read_fit(d))


@st.composite
def file_bytes(draw):
    """Raw bytes, a fuzzed fit as JSON, or a real fit.json cut short or with bytes flipped."""
    kind = draw(st.sampled_from(["raw", "fit", "damaged"]))
    if kind == "raw":
        return draw(st.binary(max_size=300))
    text = json.dumps(draw(fit_dicts()) if kind == "fit" else draw(st.sampled_from(FITS)))
    data = bytearray(text.encode())
    if kind == "damaged":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@FUZZ
@given(file_bytes())
def test_load_law_parses_or_refuses_any_file(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fit.json"
        path.write_bytes(data)
        source = parses_or_bad_input(lambda: load_law(str(path)))
        if source is not None:
            assert source.law.form in ("cd", "muennighoff", "chinchilla")
