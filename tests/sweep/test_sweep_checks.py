"""Sweeps refused before any work (issue #17): every cell's feasibility (the paraphrase pass
limit, paraphrase files on a real corpus), files that are not UTF-8, non-finite values —
each one sentence, exit 2, nothing written. Nothing here trains."""

import json
import re

import pytest
from runhelpers import cdlaw

from cdlaw.data.tokens.prepare import MAX_DERIVED_PASSES
from cdlaw.sweep.selection import check_cells, plan_sweep
from cdlaw.sweep.spec import load_sweep, parse_sweep
from cdlaw.system.errors import BadInput

PARA = """
name = "para"
[grid]
size = ["20K"]
fresh_tokens = [2048]
strategy = ["paraphrase"]
{ratio}
[data]
vocab_size = 512
val_tokens = 2048
{data}
[model]
seq_len = 32
"""


def para(ratio: str = "derived_ratio = [2000]", data: str = ""):
    return parse_sweep(PARA.format(ratio=ratio, data=data), source="para.toml")


def one_sentence(stderr: str) -> str:
    assert stderr.strip().count("\n") == 0 and "Traceback" not in stderr, stderr
    return stderr


# --- every cell's feasibility, before any work ----------------------------------------------


def test_the_paraphrase_pass_limit_is_a_public_constant_checked_on_every_cell(tmp_path):
    assert MAX_DERIVED_PASSES == 1000
    check_cells(para("derived_ratio = [0, 1000]"))  # at the limit: fine
    cases = [
        ("derived_ratio = [1, 2000]", "grid.derived_ratio = 2000", "grid.derived_ratio ≤ 1000"),
        ("[grid.paraphrase]\npasses = [1, 1000.5]", "grid.paraphrase.passes = 1000.5", "≤ 1000"),
        ("epochs = [1, 1002]", "grid.epochs = 1002", "grid.epochs ≤ 1001"),
    ]
    for ratio, names, valid in cases:
        with pytest.raises(BadInput) as e:
            plan_sweep(para(ratio), tmp_path / "runs", cache_dir=tmp_path / "cache")
        message = str(e.value)
        assert message.startswith("para.toml: ") and names in message and valid in message
        assert "limit of 1000" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []  # no corpus was prepared to find out
    # Repetition has no such limit: 2000 epochs is a (long) run like any other.
    text = PARA.format(ratio="derived_ratio = [2000]", data="").replace("paraphrase", "repetition")
    check_cells(parse_sweep(text))


def test_cli_paraphrase_beyond_the_limit_exits_2_before_any_work(tmp_path):
    """derived_ratio = [2000] on the embedded corpus once passed --dry-run, then the sweep
    rendered ~400 MB of paraphrases for minutes and recorded the run as failed (exit 1)."""
    path = tmp_path / "para.toml"
    path.write_text(PARA.format(ratio="derived_ratio = [2000]", data=""))
    out = tmp_path / "runs"
    for extra in (["--dry-run"], []):
        result = cdlaw("sweep", path, "--out", out, *extra, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        message = one_sentence(result.stderr)
        assert "para.toml: grid.derived_ratio = 2000" in message and "limit of 1000" in message
        assert not out.exists()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory):
    """A real (jsonl) corpus of 300 documents and one pass of paraphrase files for it."""
    from cdlaw.data.embedded import render, world

    w = world.build_world(0, world.WorldOptions(n_entities=120))
    texts = [render.render(w, d) for d in world.documents(w, 0)[:300]]
    root = tmp_path_factory.mktemp("real")
    corpus = write_jsonl(
        root / "docs.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    )
    paras = root / "paras"
    paras.mkdir()
    write_jsonl(
        paras / "paraphrases.jsonl",
        [
            {"id": f"d{i}", "pass": 1, "style": "faq", "text": f"In other words: {t}"}
            for i, t in enumerate(texts)
        ],
    )
    return corpus, paras


def real(corpus, paras, ratio: str) -> str:
    lines = [f'corpus = "{corpus}"', "vocab_size = 300", "val_tokens = 1000"]
    text = PARA.format(ratio=ratio, data="\n".join(lines))
    text = text.replace("vocab_size = 512\nval_tokens = 2048\n", "")
    return text + (f'\n[derived.paraphrase]\nfiles = "{paras}"\n' if paras else "")


def test_paraphrase_on_a_real_corpus_needs_files_known_before_any_work(tmp_path, real_corpus):
    corpus, _ = real_corpus
    sweep = parse_sweep(real(corpus, None, "derived_ratio = [0, 1]"), source="para.toml")
    with pytest.raises(
        BadInput,
        match=r"^para\.toml: strategy 'paraphrase' on .* with \[derived\.paraphrase\] files =",
    ):
        plan_sweep(sweep, tmp_path / "runs", cache_dir=tmp_path / "cache")
    assert list(tmp_path.iterdir()) == []  # the corpus was not tokenised to find out


@pytest.mark.slow  # tokenises a corpus and its paraphrase files
def test_paraphrase_tokens_beyond_the_files_name_the_key_and_the_most_there_is(
    tmp_path, real_corpus
):
    corpus, paras = real_corpus
    cache = tmp_path / "cache"
    ok = parse_sweep(real(corpus, paras, "derived_ratio = [0, 0.5]"), source="para.toml")
    plan = plan_sweep(ok, tmp_path / "runs", cache_dir=cache)
    assert {r.strategy for r in plan.runs} == {"none", "paraphrase"}
    for ratio, name in (("derived_ratio = [1, 3]", "grid.derived_ratio = 3"),
                        ("[grid.paraphrase]\npasses = [2]", "grid.paraphrase.passes = 2")):  # fmt: skip
        too_many = parse_sweep(real(corpus, paras, ratio), source="para.toml")
        with pytest.raises(BadInput) as e:
            plan_sweep(too_many, tmp_path / "runs", cache_dir=cache)
        message = str(e.value)
        assert message.startswith(f"para.toml: {name} at D = 2,048 fresh tokens asks for D′ = ")
        assert "(1 full pass(es))" in message and "cdlaw paraphrase --passes 2" in message
        assert "\n" not in message
    # From the command line: exit 2, one sentence, nothing left behind.
    path = tmp_path / "para.toml"
    path.write_text(real(corpus, paras, "derived_ratio = [3]"))
    out = tmp_path / "runs"
    for extra in (["--dry-run"], []):
        result = cdlaw("sweep", path, "--out", out, *extra, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "grid.derived_ratio = 3 at D = 2,048" in one_sentence(result.stderr)
        assert not out.exists()


# --- files and values that are not what they seem -------------------------------------------

SMALL = PARA.format(ratio="derived_ratio = [0, 1]", data="").replace('"paraphrase"', '"repetition"')


@pytest.mark.parametrize(
    "content, message",
    [
        (b'name = "x"\n# caf\xe9 au lait\n', "bad.toml is not UTF-8 text (byte 0xe9 at offset 16)"),
        (
            f"{SMALL}[train]\nbatch_size = inf\n".encode(),
            "train.batch_size must be finite, not inf",
        ),
        (
            f"{SMALL}[train]\nbatch_size = nan\n".encode(),
            "train.batch_size must be finite, not nan",
        ),
        (f"{SMALL}[train]\nweight_decay = nan\n".encode(), "train.weight_decay must be finite"),
        (f"{SMALL}[train]\nbeta2 = 1.5\n".encode(), "train.beta2 must be in [0, 1), got 1.5"),
        (SMALL.replace("[0, 1]", "[0, inf]").encode(), "grid.derived_ratio must be finite"),
        (SMALL.replace("[2048]", "[1e400]").encode(), "grid.fresh_tokens must be finite"),
    ],
)
def test_cli_sweep_files_not_utf8_or_not_finite_exit_2_writing_nothing(tmp_path, content, message):
    """Once: UnicodeDecodeError and OverflowError (exit 1), and weight_decay = nan accepted
    (the run ended "diverged")."""
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(BadInput, match=re.escape(message)):
        load_sweep(path)  # what --dry-run and the sweep both start with
    out = tmp_path / "runs"
    result = cdlaw("sweep", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in one_sentence(result.stderr) and not out.exists()


def test_messages_show_numbers_plainly():
    """Values that arrive as numpy scalars once read `np.float64(-1.0)` in the sentence."""
    import numpy as np

    from cdlaw.config import TrainConfig
    from cdlaw.sweep.values import nonnegative_number, positive_number, seed_entry

    for check, value, shown in (
        (positive_number, np.float64(-1.0), "got -1.0"),
        (nonnegative_number, np.float32(-2.0), "got -2.0"),
        (positive_number, np.float64("nan"), "not nan"),
        (seed_entry, np.float64(1.5), "got 1.5"),
    ):
        with pytest.raises(BadInput) as e:
            check(value, "grid.lr") if check is not seed_entry else check(value)
        assert str(e.value).endswith(shown) and "np." not in str(e.value), str(e.value)
    with pytest.raises(BadInput, match=r"^train\.lr must be positive, got -1\.0$"):
        TrainConfig(lr=np.float64(-1.0))
