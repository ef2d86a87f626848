"""[derived.<name>] in sweep files: declared strategies expand into runs that carry their
folder, every existing run keeps its id, and every mistake is one sentence naming the key.
Nothing here trains."""

import pytest
from runhelpers import cdlaw

from cdlaw.sweep.derived import distill_target
from cdlaw.sweep.selection import plan_sweep
from cdlaw.sweep.spec import parse_sweep
from cdlaw.system.errors import BadInput

BASE = """
name = "t"
[grid]
size = ["20K", "60K"]
fresh_tokens = ["2K", "4K"]
derived_ratio = [0, 1, 3]
{grid}
{derived}
[data]
vocab_size = 512
val_tokens = 2048
{data}
[model]
seq_len = 32
"""
DISTILL = '[derived.distill]\nfiles = "derived/distill"'


def sweep(grid: str = "", derived: str = "", data: str = ""):
    return parse_sweep(BASE.format(grid=grid, derived=derived, data=data), source="t.toml")


def bad(match: str, **parts):
    with pytest.raises(BadInput, match=match) as e:
        sweep(**parts)
    message = str(e.value)
    assert message.startswith("t.toml: ") and "\n" not in message and message.count(". ") == 0
    return message


def test_a_declared_strategy_joins_the_grid_and_its_runs_carry_their_folder():
    plain, declared = sweep(), sweep(derived=DISTILL)
    assert plain.strategies == ("repetition", "paraphrase")  # the default: the built-ins
    assert declared.strategies == ("repetition", "paraphrase", "distill")  # + the declared
    runs = declared.runs()
    distill = [r for r in runs if r.strategy == "distill"]
    assert len(distill) == 2 * 2 * 2 and {r.derived_files for r in distill} == {"derived/distill"}
    assert all(not r.derived_files for r in runs if r.strategy != "distill")
    # the other runs are the runs of the sweep without it, with the same ids
    assert {r.run_id for r in plain.runs()} == {r.run_id for r in runs if r.strategy != "distill"}


def test_a_folder_per_fresh_token_count_and_per_strategy_ratio_axes():
    s = sweep(
        grid='strategy = ["repetition", "distill"]\n[grid.distill]\npasses = [0, 2]',
        derived='[derived.distill]\nfiles = { "2K" = "d/2K", "4_000" = "d/4K" }',
    )
    folders = {r.fresh_tokens: r.derived_files for r in s.runs() if r.strategy == "distill"}
    assert folders == {2000: "d/2K", 4000: "d/4K"}
    assert s.ratio_name("distill") == "grid.distill.passes"
    assert {r.derived_tokens / r.fresh_tokens for r in s.runs() if r.strategy == "distill"} == {2}
    assert distill_target(s, s.runs(), "distill", 2000) == (2000, "d/2K")
    with pytest.raises(BadInput, match=r"has a folder per fresh_tokens .* give --fresh-tokens"):
        distill_target(s, s.runs(), "distill", None)
    with pytest.raises(
        BadInput, match=r"--fresh-tokens 3,000 is no D of distill's runs \(2K, 4K\)"
    ):
        distill_target(s, s.runs(), "distill", 3000)
    one = sweep(derived=DISTILL)
    assert distill_target(one, one.runs(), "distill", None) == (4000, "derived/distill")
    with pytest.raises(
        BadInput, match=r"'paraphrase' is no \[derived.<name>\] strategy.*cdlaw paraphrase"
    ):
        distill_target(one, one.runs(), "paraphrase", None)


def test_derived_paraphrase_files_are_data_paraphrases_with_the_same_run_ids(caplog):
    caplog.set_level("INFO", logger="cdlaw")
    new = sweep(derived='[derived.paraphrase]\nfiles = "paras"', data='corpus = "c.jsonl"')
    assert caplog.messages == []  # the one way says nothing
    old = sweep(data='corpus = "c.jsonl"\nparaphrases = "paras"')
    assert new.data == old.data and [r.run_id for r in new.runs()] == [r.run_id for r in old.runs()]
    # the older way is read, with one note naming the line that replaces it
    assert caplog.messages == [
        "note: t.toml: [data] paraphrases is deprecated; declare the paraphrase files as "
        '[derived.paraphrase] files = "paras" (the same runs, with the same ids)'
    ]
    # and a run of it keeps the config.json form of every run before: data.paraphrases
    para = next(r for r in new.runs() if r.strategy == "paraphrase")
    assert para.data.paraphrases == "paras" and para.derived_files == ""


@pytest.mark.parametrize(
    "parts, match",
    [
        (dict(derived='[derived.distill]\nfile = "d"'), r"unknown key 'derived.distill.file': did you mean 'files'"),
        (dict(derived="[derived.distill]"), r"\[derived.distill\] needs files"),
        (dict(derived='[derived.distill]\nfiles = 3'), "files must be a folder"),
        (dict(derived='[derived.distill]\nfiles = {"2K" = "a", "2000" = "b"}'), "names fresh_tokens '2000' twice"),
        (dict(derived='[derived.distill]\nfiles = {"4K" = "a"}'), r"names no folder for fresh_tokens 2,000 \(it has 4K\)"),
        (dict(derived='[derived.repetition]\nfiles = "d"'), "repetition is built in and reads no files"),
        (dict(derived='[derived.Distill]\nfiles = "d"'), "'Distill' cannot name a derived strategy: a strategy's name is a lowercase"),
        (dict(derived='[derived.none]\nfiles = "d"'), "'none' is the strategy of runs without derived tokens"),
        (dict(derived='[derived.paraphrase]\nfiles = "p"', data='paraphrases = "q"'), r"both declare the paraphrase files: keep \[derived.paraphrase\] files and remove \[data\] paraphrases"),
        (dict(grid='strategy = ["repetition", "distil"]', derived=DISTILL), "'distil' is neither built in nor declared: did you mean 'distill'"),
        (dict(grid='strategy = ["repetition"]', derived=DISTILL), r"\[derived.distill\] is declared but 'distill' is not in grid.strategy"),
        (dict(grid='strategy = ["distill", "distill"]', derived=DISTILL), "lists a strategy twice"),
        (dict(grid="[grid.distill]\nepochs = [2]", derived=DISTILL), r"unknown key 'grid.distill.epochs': valid keys: derived_ratio, passes"),
        (dict(grid="[grid.distil]\npasses = [2]", derived=DISTILL), r"\[grid.distil\] is given but 'distil' is not in grid.strategy"),
        (dict(grid="strategy = ['auto']"), "'auto' is the plan's choice"),
    ],
)  # fmt: skip
def test_mistakes_are_one_sentence_naming_the_key(parts, match):
    bad(match, **parts)


def test_a_table_declared_twice_is_not_toml():
    with pytest.raises(BadInput, match="is not valid TOML"):
        sweep(derived=f"{DISTILL}\n{DISTILL}")


def test_missing_files_are_refused_for_the_runs_a_sweep_trains_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = sweep(derived=DISTILL)
    with pytest.raises(
        BadInput,
        match=r"\[derived.distill\] files 'derived/distill' is not a folder: .*cdlaw distill",
    ):
        plan_sweep(s, tmp_path / "runs", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()
    plan = plan_sweep(
        s, tmp_path / "runs", only="strategy=none|repetition", cache_dir=tmp_path / "cache"
    )
    assert {r.strategy for r in plan.runs} == {"none", "repetition"}
    # from the command line: exit 2, one sentence, nothing written
    path = tmp_path / "t.toml"
    path.write_text(BASE.format(grid="", derived=DISTILL, data=""))
    result = cdlaw("sweep", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2 and "derived/distill" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and not (tmp_path / "out").exists()
