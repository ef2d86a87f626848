"""Sweep files: grids, zip, exclude, exact token counts, --only, and bad input (exit 2,
one sentence, nothing written). Nothing here trains."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from runhelpers import cdlaw

from cdlaw.shapes import count_params, resolve_size
from cdlaw.sweep.grid import round_tokens
from cdlaw.sweep.selection import parse_only
from cdlaw.sweep.spec import load_sweep, parse_sweep
from cdlaw.system.errors import BadInput
from cdlaw.train.result import run_facts

REPO = Path(__file__).resolve().parents[2]

BASE = """
name = "t"
[grid]
size = ["20K", "60K"]
tokens_per_param = [2, 8]
derived_ratio = [0, 1, 3]
{extra_grid}
{extra}
[data]
vocab_size = 512
[model]
seq_len = 64
"""


def text(extra_grid: str = "", extra: str = "", edit: tuple[str, str] = ("", "")) -> str:
    """The base sweep with extra [grid] lines, extra tables, and one text replacement."""
    return BASE.format(extra_grid=extra_grid, extra=extra).replace(*edit)


def sweep(extra_grid: str = "", extra: str = ""):
    return parse_sweep(text(extra_grid, extra), source="t.toml")


def bad(toml: str, match: str):
    with pytest.raises(BadInput, match=match) as e:
        parse_sweep(toml, source="bad.toml")
    message = str(e.value)
    assert message.startswith("bad.toml") and "\n" not in message
    return message


# --- the grid --------------------------------------------------------------------------


def test_grid_counts_shared_none_run_and_exact_tokens():
    s = sweep()
    runs = s.runs()
    # 2 sizes × 2 D × (1 shared r = 0 run + 2 strategies × 2 ratios)
    assert len(s.cells()) == 2 * 2 * 2 * 3
    assert len(runs) == 2 * 2 * (1 + 2 * 2)
    assert len({r.run_id for r in runs}) == len(runs)
    none = [r for r in runs if r.strategy == "none"]
    assert len(none) == 4 and all(r.derived_tokens == 0 for r in none)
    for r in runs:
        n = count_params(resolve_size(r.model.size, 512), 512).n_params
        assert r.model.vocab_size == 512 and r.data.vocab_size == 512 and r.model.seq_len == 64
        assert isinstance(r.fresh_tokens, int) and isinstance(r.derived_tokens, int)
        tpp = r.fresh_tokens / n
        assert r.fresh_tokens == round_tokens(round(tpp) * n)  # D = round(tokens_per_param · N)
        ratio = r.derived_tokens / r.fresh_tokens
        assert r.derived_tokens == round_tokens(round(ratio) * r.fresh_tokens)
    assert {round(r.derived_tokens / r.fresh_tokens) for r in runs} == {0, 1, 3}


def test_rounding_is_half_up_and_deterministic():
    assert [round_tokens(x) for x in (0.5, 1.5, 2.5, 2.4999, 7.5e6 + 0.5)] == [1, 2, 3, 2, 7500001]
    s = parse_sweep(
        text()
        .replace("tokens_per_param = [2, 8]", "fresh_tokens = [1001]")
        .replace("derived_ratio = [0, 1, 3]", "derived_ratio = [0.5, 1.5]")
    )
    d_prime = sorted({r.derived_tokens for r in s.runs()})
    assert d_prime == [501, 1502]  # 500.5 → 501, 1501.5 → 1502 (banker's would give 500, 1502)


def test_epochs_and_passes_per_strategy():
    toml = text().replace(
        "derived_ratio = [0, 1, 3]",
        "[grid.repetition]\nepochs = [1, 4]\n[grid.paraphrase]\npasses = [0, 2, 5]",
    )
    runs = parse_sweep(toml).runs()
    for r in runs:
        epochs = r.tokens_trained / r.fresh_tokens
        if r.strategy == "repetition":
            assert epochs == 4
        elif r.strategy == "paraphrase":
            assert r.derived_tokens / r.fresh_tokens in (2, 5)
    # per (size, D): the shared r = 0 run, repetition ×4, paraphrase ×2 and ×5
    assert len(runs) == 4 * 4


def test_zip_pairs_axes_instead_of_product():
    s = sweep(extra_grid='lr = [1e-2, 3e-3]\nzip = [["size", "lr"]]')
    pairs = {(r.model.size, r.train.lr) for r in s.runs()}
    assert pairs == {("20K", 1e-2), ("60K", 3e-3)}
    assert len(s.runs()) == 2 * 2 * 5
    bad(text('lr = [1e-2]\nzip = [["size", "lr"]]'), "same length")
    bad(text('zip = [["size", "sead"]]'), "not a grid axis")


def test_exclude_drops_matching_cells_only():
    s = sweep(extra='[[exclude]]\nsize = "60K"\nderived_ratio = 3\nstrategy = "paraphrase"')
    runs = s.runs()
    assert len(runs) == 20 - 2
    assert not any(
        r.model.size == "60K"
        and r.strategy == "paraphrase"
        and r.derived_tokens == 3 * r.fresh_tokens
        for r in runs
    )
    # strategy = "none" names the shared D′ = 0 runs
    s = sweep(extra='[[exclude]]\nstrategy = "none"')
    assert all(r.strategy != "none" for r in s.runs()) and len(s.runs()) == 16
    bad(text(extra='[[exclude]]\nsize = "1M"'), "matches no cell")
    bad(text(extra='[[exclude]]\nsise = "20K"'), "did you mean 'size'")


def test_exclude_list_matches_any_of_its_values():
    # Only the one-epoch runs at the larger D/N: a fresh-token ladder beside the grid.
    s = sweep(extra="[[exclude]]\ntokens_per_param = 8\nderived_ratio = [1, 3]")
    runs = s.runs()
    assert len(runs) == 20 - 2 * 4
    big = [r for r in runs if r.fresh_tokens / count_params(r.model)[0] > 4]
    assert len(big) == 2 and all(r.strategy == "none" for r in big)
    bad(text(extra="[[exclude]]\nderived_ratio = []"), "a value or a list of values")


def test_fixed_shape_from_model_table():
    text = """
    [grid]
    fresh_tokens = ["8K"]
    derived_ratio = [0, 2]
    strategy = ["repetition"]
    [model]
    d_model = 64
    n_layers = 2
    n_heads = 4
    mlp_hidden = 192
    seq_len = 32
    [data]
    vocab_size = 256
    """
    runs = parse_sweep(text).runs()
    assert [r.derived_tokens for r in runs] == [0, 16000]
    assert all((r.model.d_model, r.model.n_heads, r.model.mlp_hidden) == (64, 4, 192) for r in runs)


def test_shipped_sweep_files_parse_and_expand():
    smoke = load_sweep(REPO / "sweeps/smoke.toml")
    assert smoke.name == "smoke" and len(smoke.runs()) == 12
    demo = load_sweep(REPO / "sweeps/demo.toml")
    facts = [run_facts(r) for r in demo.runs()]
    assert len({f["size"] for f in facts}) >= 3
    assert 15e3 < min(f["n_params"] for f in facts) and max(f["n_params"] for f in facts) < 1.2e6
    for strategy in ("repetition", "paraphrase"):
        ratios = {f["derived_ratio"] for f in facts if f["strategy"] == strategy}
        assert len(ratios) >= 4
    assert len(load_sweep(REPO / "sweeps/cpu-hour.toml").runs()) > len(facts)
    qin = load_sweep(REPO / "sweeps/qin2026-small.toml")  # a real tokenizer: vocab from data
    runs = qin.runs(100_278)
    sizes = {r.model.size: run_facts(r)["n_params"] for r in runs}
    assert set(sizes) == {f"olmo3_{s}" for s in ("14M", "30M", "60M", "100M", "190M")}
    for name, n in sizes.items():  # the paper's N is the nominal size (docs/names.md)
        nominal = float(name.removeprefix("olmo3_").removesuffix("M")) * 1e6
        assert 0.8 < n / nominal < 1.1, (name, n)
    epochs = {r.tokens_trained / r.fresh_tokens for r in runs if r.strategy == "repetition"}
    assert epochs == {2, 4, 8, 16, 32}
    checks = load_sweep(REPO / "sweeps/demo-plan.toml").runs()  # the demo's plan, trained
    assert sorted(r.seed for r in checks) == [0, 1]
    for r in checks:  # C = 2e12, U = 96K, paraphrase, on the ladder's shape nearest 275K
        assert r.strategy == "paraphrase" and r.fresh_tokens == 96_000
        n = run_facts(r)["n_params"]
        assert 6 * n * r.tokens_trained == pytest.approx(2e12, rel=1e-3) and 0.9 < n / 275e3 < 1.1
    three = load_sweep(REPO / "sweeps/strategies.toml").runs()  # the strategies sweep
    assert len(three) == 84 and {r.strategy for r in three} >= {
        "repetition",
        "paraphrase",
        "distill",
    }
    assert {r.fresh_tokens: r.derived_files for r in three if r.strategy == "distill"} == {
        48_000: "runs/strategies-derived/distill-48K",
        96_000: "runs/strategies-derived/distill-96K",
    }  # a teacher per D, each trained on that D alone
    for path in sorted((REPO / "sweeps").glob("*.toml")):  # every shipped file
        sweep_file = load_sweep(path)
        assert sweep_file.runs(None if sweep_file.data.tokenizer == "bpe" else 100_278), path


# --- --only ------------------------------------------------------------------------------


def test_only_filter():
    facts = [run_facts(r) for r in sweep().runs()]
    keep = parse_only("strategy=paraphrase|none, n_params<40000")
    kept = [f for f in facts if keep(f)]
    assert kept and all(f["strategy"] in ("paraphrase", "none") for f in kept)
    assert all(f["n_params"] < 40000 for f in kept)
    assert len(kept) == 2 * (1 + 2)  # one size, 2 D, (none + 2 paraphrase ratios)
    assert [f for f in facts if parse_only("derived_ratio>=3")(f)] == [
        f for f in facts if f["derived_ratio"] >= 3
    ]
    assert len([f for f in facts if parse_only("run_id!=" + facts[0]["run_id"])(f)]) == 19
    with pytest.raises(BadInput, match="did you mean 'strategy'"):
        parse_only("stratgy=none")
    with pytest.raises(BadInput, match="not `key OP value`"):
        parse_only("__import__('os').system('true')")
    with pytest.raises(BadInput, match="must be a number"):
        parse_only("n_params<many")


def test_only_reads_sizes_as_numbers_and_names_an_alternative_no_run_has():
    facts = [run_facts(r) for r in sweep().runs()]
    named = [f for f in facts if parse_only("size=20K")(f)]
    assert named and [f for f in facts if parse_only("size=20000")(f)] == named
    assert [f for f in facts if parse_only("size=20k")(f)] == named
    with pytest.raises(BadInput, match="strategy=paraphrse: no run of the sweep has strategy"):
        parse_only("strategy=paraphrse|none").check(facts)
    parse_only("strategy=paraphrase|none").check(facts)  # every alternative has runs


# --- bad sweep files ----------------------------------------------------------------------


def test_unknown_keys_name_the_nearest_valid_one():
    bad("nmae = 'x'\n[grid]\nsize=['20K']", "unknown key 'nmae': did you mean 'name'")
    bad(text("derived_ration = [1]"), "did you mean 'derived_ratio'")
    bad(text(extra="[train]\nlrr = 1e-3"), "train.lrr.*did you mean 'lr'")
    bad(
        text().replace("vocab_size", "vocab_sise"),
        "data.vocab_sise.*did you mean 'vocab_size'",
    )


def test_wrong_types_and_impossible_values():
    bad(text("lr = ['fast']"), "grid.lr must be a number")
    bad(text(edit=('["20K", "60K"]', "[true]")), "grid.size entries")
    bad(text().replace("[0, 1, 3]", "[0, -1]"), "must be ≥ 0")
    bad(text(edit=("derived_ratio = [0, 1, 3]", "epochs = [0.5, 2]")), "at least 1")
    bad(text().replace("[2, 8]", "[0]"), "must be positive")
    bad(text().replace("[2, 8]", "[0.001]"), "fewer than one sequence")
    bad(text(edit=('["20K", "60K"]', '["20K", "21K"]')), "give the same model")
    bad(text(edit=('["20K", "60K"]', '["olmo3_15M"]')), "unknown model size name")
    bad(text("fresh_tokens = [1000]"), "exactly one of")
    bad(text("strategy = ['none']"), "get strategy 'none'")
    bad(text(extra="[train]\nbatch_size = 2.5"), "whole number")
    bad("[grid\n", "not valid TOML")


@pytest.mark.parametrize(
    "edit, message",
    [
        (("derived_ratio", "derived_ration"), "did you mean 'derived_ratio'"),
        (('"20K", "60K"', '"20K", 60000, false'), "grid.size entries"),
        (("[2, 8]", "[-2, 8]"), "must be positive"),
    ],
)
def test_cli_bad_sweep_file_exits_2_with_one_sentence_and_writes_nothing(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(text(edit=edit))
    out = tmp_path / "runs"
    result = cdlaw("sweep", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "bad.toml" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert result.stdout == "" and not out.exists()


@pytest.mark.slow  # tokenises a corpus
def test_cli_fresh_tokens_beyond_the_corpus_exits_2_and_writes_nothing(tmp_path):
    corpus = tmp_path / "tiny.jsonl"
    words = "alpha beta gamma delta river city the of a is born in year".split()
    with corpus.open("w") as f:
        for i in range(300):
            text = " ".join(words[(i * 7 + j) % len(words)] for j in range(12 + i % 9))
            f.write(json.dumps({"id": str(i), "text": f"doc {i}: {text}."}) + "\n")
    path = tmp_path / "big.toml"
    path.write_text(
        f"""
        [grid]
        size = ["20K"]
        fresh_tokens = ["5M"]
        derived_ratio = [0, 1]
        strategy = ["repetition"]
        [data]
        corpus = "{corpus}"
        vocab_size = 320
        val_tokens = 512
        """
    )
    out = tmp_path / "runs"
    result = cdlaw("sweep", path, "--out", out, "--dry-run", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "too small" in result.stderr and "fresh_tokens=5000000" in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert not out.exists()
    result = cdlaw("sweep", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 2 and "too small" in result.stderr
    assert not out.exists()  # the corpus cache made while checking is removed too


def test_cli_help_mentions_example_and_stays_torch_free():
    code = (
        "import sys; from cdlaw.cli import register_commands; register_commands(); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
    for command in ("sweep", "status"):
        result = cdlaw(command, "--help", cwd=REPO)
        assert result.returncode == 0 and "Example:" in result.stdout


def test_cli_asking_for_a_missing_gpu_is_bad_input(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    out = tmp_path / "runs"
    result = cdlaw(
        "sweep", REPO / "sweeps/smoke.toml", "--device", "cuda", "--out", out, cwd=tmp_path
    )
    assert result.returncode == 2 and "no CUDA GPU" in result.stderr and not out.exists()


def test_the_plan_a_sweep_is_for_is_read_checked_and_in_no_run_id():
    """[plan] names the budget and unique tokens `cdlaw report` and `cdlaw plot` plan for;
    the runs are the same with and without it, and `same_runs` ignores it."""
    from cdlaw.config import PlanConfig
    from cdlaw.sweep.spec import same_runs

    asked = text(extra="[plan]\nbudget_flops = 2e12\nunique_tokens = '96K'")
    sweep = parse_sweep(asked, default_name="s")
    assert sweep.plan == PlanConfig(budget_flops=2e12, unique_tokens=96e3)
    assert parse_sweep(text(), default_name="s").plan == PlanConfig()
    ids = [r.run_id for r in sweep.runs()]
    assert ids == [r.run_id for r in parse_sweep(text(), default_name="s").runs()]
    assert same_runs(asked, text())
    bad(text(extra="[plan]\nbudget_flops = -1"), "plan.budget_flops must be a positive number")
    bad(text(extra="[plan]\nunique_tokens = 'lots'"), "plan.unique_tokens must be a number")
    bad(
        text(extra="[plan]\nbudget = 1e21"),
        "unknown key 'plan.budget': did you mean 'budget_flops'",
    )
