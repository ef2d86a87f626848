"""Loading and checking run tables (docs/files.md): every bad table is one clear BadInput."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from shapedtables import PUBLISHED

from cdlaw.fit.cells import duplicate_rows, mixed_cells, seed_noise, select_cells
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs, prepare_runs
from cdlaw.system.errors import BadInput


def runs(**over):
    df = pd.DataFrame(
        {
            "n_params": [1e7, 1e7, 1e7, 2e7, 2e7],
            "fresh_tokens": [1e9, 1e9, 1e9, 2e9, 2e9],
            "derived_tokens": [0.0, 0.0, 3e9, 0.0, 2e9],
            "strategy": ["none", "none", "repetition", "repetition", "paraphrase"],
            "loss": [3.2, 3.0, 2.8, 2.9, 2.7],
            "lr": [1e-3, 3e-3, 1e-3, 1e-3, 1e-3],
            "seed": [0, 0, 0, 0, 0],
            "run_id": list("abcde"),
        }
    )
    for k, v in over.items():
        df[k] = v
    return df


def test_prepare_adds_ids_and_derived_columns():
    df = prepare_runs(runs())
    assert df["row_id"].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(df["derived_ratio"], [0, 0, 3, 0, 1])
    np.testing.assert_allclose(df["tokens_per_param"], [100, 100, 100, 100, 100])
    # a repetition run with no derived tokens is a one-epoch run: strategy none
    assert df["strategy"].tolist() == ["none", "none", "repetition", "none", "paraphrase"]
    assert prepare_runs(df) is df  # idempotent


def test_status_filters_unfinished_runs_and_counts_them():
    df = prepare_runs(runs(status=["done", "diverged", "done", "failed", "done"]))
    assert df["row_id"].tolist() == [0, 2, 4]  # ids stay those of the input rows
    assert df.attrs["not_done"] == 2


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(n_params=[1e7, -1, 1e7, 2e7, 2e7]), ["row 2", "n_params", "positive"]),
        (dict(loss=[3.2, 3.0, np.nan, 2.9, 2.7]), ["row 3", "loss"]),
        (dict(loss=[3.2, 3.0, 0.0, 2.9, 2.7]), ["row 3", "loss", "positive"]),
        (dict(fresh_tokens=[1e9, 1e9, 1e9, np.inf, 2e9]), ["row 4", "fresh_tokens"]),
        (dict(derived_tokens=[0, 0, -5, 0, 0]), ["row 3", "derived_tokens", "≥ 0"]),
        (  # beside tokens_trained (a summary's), a negative D′ is refused as negative
            dict(derived_tokens=[0, 0, -1, 0, 0], tokens_trained=[1e9, 1e9, 4e9, 2e9, 2e9]),
            ["row 3", "derived_tokens must be a finite number ≥ 0, got -1"],
        ),
        (
            dict(strategy=["none", "none", "2 epochs", "none", "none"]),
            ["row 3", "'2 epochs'", "lowercase letter"],
        ),
        (dict(derived_tokens=[0, 7e8, 0, 0, 0]), ["row 2", "strategy is none", "derived_tokens"]),
        (dict(loss=["3.2", "x", "2", "2", "2"]), ["row 2", "loss must be a number", "'x'"]),
    ],
)
def test_bad_values_are_one_sentence_naming_row_and_column(change, words):
    with pytest.raises(BadInput) as e:
        prepare_runs(runs(**change), name="t.csv")
    msg = str(e.value)
    assert msg.startswith("t.csv")
    for w in words:
        assert w in msg
    assert msg.count(". ") == 0 and "\n" not in msg


def test_missing_columns_are_named():
    with pytest.raises(BadInput, match=r"lacks the column\(s\) derived_tokens, loss"):
        prepare_runs(runs().drop(columns=["derived_tokens", "loss"]), name="t.csv")


def test_select_min_keeps_best_hyperparameters_per_cell():
    df = runs(strategy=["none"] * 2 + ["repetition"] * 3)
    out = select_cells(df, "min")
    # rows 0 and 1 are one cell (differ only in lr): the lower loss (row 1) is kept
    assert out["row_id"].tolist() == [1, 2, 3, 4]
    assert out["n_in_cell"].tolist() == [2, 1, 1, 1]
    assert out.attrs["select"] == "min"


def test_select_mean_averages_and_blanks_varying_columns():
    out = select_cells(runs(), "mean")
    assert out["row_id"].tolist() == [0, 2, 3, 4]
    assert out["loss"].iloc[0] == pytest.approx(3.1)
    assert np.isnan(out["lr"].iloc[0]) and out["lr"].iloc[1] == 1e-3
    assert out["seed"].iloc[0] == 0  # the same in the cell: kept
    assert pd.isna(out["run_id"].iloc[0]) and out["run_id"].iloc[1] == "c"


def test_select_none_keeps_every_row_and_bad_select_is_refused():
    assert len(select_cells(runs(), "none")) == 5
    with pytest.raises(BadInput, match="--select must be one of min, mean, none"):
        select_cells(runs(), "best")


def test_seed_noise_pools_replicates_only():
    # Rows 0 and 1 differ in lr: not replicates. Add seeds: cell a has 3 seeds, cell d 2.
    assert seed_noise(runs()) is None
    extra = pd.DataFrame(
        {
            "n_params": [1e7, 1e7, 2e7],
            "fresh_tokens": [1e9, 1e9, 2e9],
            "derived_tokens": [0.0, 0.0, 0.0],
            "strategy": ["none"] * 3,
            "loss": [3.2 * np.exp(0.1), 3.2 * np.exp(-0.1), 2.9 * np.exp(0.2)],
            "lr": [1e-3] * 3,
            "seed": [1, 2, 1],
            "run_id": list("fgh"),
        }
    )
    noise = seed_noise(pd.concat([runs(), extra], ignore_index=True))
    # cell a: log deviations 0, +0.1, −0.1 (mean 0); cell d: ±0.1 around its mean.
    assert noise.n_groups == 2 and noise.n_runs == 5
    assert noise.sd_log == pytest.approx(np.sqrt((0.01 + 0.01 + 2 * 0.01) / (2 + 1)))


def test_load_csv_parquet_and_runs_folder(tmp_path):
    df = runs()
    df.to_csv(tmp_path / "t.csv", index=False)
    df.to_parquet(tmp_path / "t.parquet")
    folder = tmp_path / "sweep"
    folder.mkdir()
    df.assign(status="done").to_parquet(folder / "summary.parquet")
    for path in (tmp_path / "t.csv", tmp_path / "t.parquet", folder):
        got = load_runs(path)
        assert len(got) == 5 and got["loss"].tolist() == df["loss"].tolist()
        assert got.attrs["source"].endswith(("t.csv", "t.parquet", "summary.parquet"))


def test_load_refuses_missing_and_unknown_paths(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        load_runs(tmp_path / "nope.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match=r"no summary\.parquet"):
        load_runs(tmp_path / "empty")
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(BadInput, match="neither a runs folder nor"):
        load_runs(tmp_path / "t.txt")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(BadInput, match="cannot read"):
        load_runs(tmp_path / "bad.parquet")


def replicated():
    """runs() plus seeds: cell a has 3 seeds, cell d 2 (as in the test above)."""
    extra = (
        runs()
        .iloc[[0, 0, 3]]
        .assign(
            loss=[3.2 * np.exp(0.1), 3.2 * np.exp(-0.1), 2.9 * np.exp(0.2)],
            seed=[1, 2, 1],
            run_id=list("fgh"),
        )
    )
    return pd.concat([runs(), extra], ignore_index=True)


def test_exact_duplicate_rows_are_not_seed_replicates():
    df = replicated()
    doubled = pd.concat([df, df.iloc[[0, 5, 5, 7]]], ignore_index=True)  # 4 exact copies
    assert seed_noise(doubled) == seed_noise(df)
    assert duplicate_rows(df) == 0 and duplicate_rows(doubled) == 4
    # a copy that differs in its run_id is a run of its own, but of the same seed (a cell
    # two sweeps trained): not another replicate; under another seed it is one
    other = pd.concat([df, df.iloc[[5]].assign(run_id="z")], ignore_index=True)
    assert duplicate_rows(other) == 0 and seed_noise(other) == seed_noise(df)
    reseeded = pd.concat([df, df.iloc[[5]].assign(run_id="z", seed=9)], ignore_index=True)
    assert seed_noise(reseeded) != seed_noise(df)
    # a table of nothing but copies has no replicates at all
    assert seed_noise(pd.concat([runs(), runs()], ignore_index=True)) is None


def test_fit_warns_about_exact_duplicate_rows():
    from lawtables import make_table

    from cdlaw.fit.procedure import fit_law

    df = make_table(n_derived=60).assign(seed=0)
    seeds = df.iloc[:20].assign(seed=1, loss=df["loss"].iloc[:20] * 1.01)
    df = pd.concat([df, seeds], ignore_index=True)
    copies = pd.concat([df, df.iloc[:7]], ignore_index=True)
    one, two = fit_law(df, n_starts=16), fit_law(copies, n_starts=16)
    assert two.seed_noise == one.seed_noise
    assert not any("duplicate" in w for w in one.warnings)
    (w,) = [w for w in two.warnings if "duplicate" in w]
    assert w.startswith("7 rows are exact duplicates of another row"), w


def test_bad_numbers_are_shown_plainly():
    with pytest.raises(BadInput) as e:
        prepare_runs(runs(loss=[3.2, np.nan, 2.8, 2.9, 2.7]), "t.csv")
    msg = str(e.value)
    assert msg.endswith("got nan") and "np.float64" not in msg, msg
    with pytest.raises(
        BadInput, match=r"fresh_tokens must be a positive finite number, got -0\.003$"
    ):
        prepare_runs(runs(fresh_tokens=[1e9, -3e-3, 1e9, 2e9, 2e9]), "t.csv")
    with pytest.raises(BadInput, match=r"loss must be a number, got 'abc'$"):
        prepare_runs(runs(loss=[3.2, "abc", 2.8, 2.9, 2.7]), "t.csv")


def canonical():
    """Repetition and one-epoch runs as cdlaw names their columns."""
    return pd.DataFrame(
        {
            "n_params": [7e7, 7e7, 7e7, 1.6e8],
            "fresh_tokens": [1.4e9, 1.4e9, 1.4e9, 3.2e9],
            "derived_tokens": [0.0, 1.4e9, 4.2e9, 0.0],
            "strategy": ["none", "repetition", "repetition", "none"],
            "loss": [3.1, 2.9, 2.8, 2.7],
        }
    )


def named(*names):
    """canonical()'s runs without a strategy column, its columns named N, D, D′, loss."""
    return canonical().drop(columns="strategy").set_axis(list(names), axis=1)


_C = canonical()
SAME_RUNS = {
    # the columns papers print: total tokens trained and the unique ones
    "papers": pd.DataFrame(
        {
            "params": _C.n_params,
            "tokens": _C.fresh_tokens + _C.derived_tokens,
            "unique_tokens": _C.fresh_tokens,
            "loss": _C.loss,
        }
    ),
    "N D D'": named("N", "D", "D'", "loss"),
    "n d Dprime": named("n", "d", "Dprime", "Loss"),
    "D_prime, case and spaces": named(" Params ", "Unique_Tokens", "D_PRIME", "loss"),
    "D′": named("n_params", "fresh_tokens", "D′", "loss"),
    "epochs": _C.assign(epochs=1 + _C.derived_tokens / _C.fresh_tokens).drop(
        columns=["derived_tokens", "strategy"]
    ),
    "no strategy": _C.drop(columns="strategy"),
    "epochs of runs labelled repeat": _C.assign(
        epochs=1 + _C.derived_tokens / _C.fresh_tokens,
        strategy=["none", "repeat", "repeats", "none"],
    ).drop(columns="derived_tokens"),
    # the CD paper's release (qin2026_triple_compact.csv): its names, its label for D′ = 0
    "the CD paper's": _C.assign(strategy=["1epoch", "repeat", "Repeat", "1epoch"]).set_axis(
        ["N_params", "D_tokens", "D_prime_tokens", "strategy", "val_loss"], axis=1
    ),
    "70M and 1.4B as text": _C.assign(
        n_params=["70M", "70M", "70m", "160M"], fresh_tokens=["1.4B", "1.4B", "1.4e9", "3.2B"]
    ),
}


@pytest.mark.parametrize("kind", list(SAME_RUNS))
def test_tables_under_other_column_names_read_as_the_same_runs(tmp_path, kind):
    path = tmp_path / "t.csv"
    SAME_RUNS[kind].to_csv(path, index=False)
    got = load_runs(path)
    want = prepare_runs(canonical())
    cols = ["n_params", "fresh_tokens", "derived_tokens", "strategy", "loss"]
    pd.testing.assert_frame_equal(got[cols], want[cols])


def test_how_a_table_was_read_is_one_line_and_only_when_not_as_named(tmp_path, caplog):
    caplog.set_level("INFO", logger="cdlaw")
    for kind in ("papers", "epochs", "no strategy"):
        caplog.clear()
        prepare_runs(SAME_RUNS[kind], "x.csv")
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith("read x.csv: N ← ") and "strategy ← repetition" in line, line
    caplog.clear()
    prepare_runs(SAME_RUNS["papers"], "x.csv")
    assert caplog.records[0].getMessage() == (
        "read x.csv: N ← params, D ← unique_tokens, D′ ← tokens − unique_tokens, strategy ← "
        "repetition (no strategy column; the tokens beyond D repeat it), loss ← loss"
    )
    caplog.clear()
    prepare_runs(SAME_RUNS["N D D'"], "x.csv")
    assert "D′ read as repeated tokens" in caplog.records[0].getMessage()
    caplog.clear()
    # cdlaw's own names, with tokens_trained and epochs beside them (a summary): nothing
    prepare_runs(canonical().assign(tokens_trained=lambda d: d.fresh_tokens + d.derived_tokens,
                                    epochs=[1.0, 2.0, 4.0, 1.0]), "x.csv")  # fmt: skip
    assert not caplog.records


@pytest.mark.parametrize(
    "table, words",
    [
        (canonical().assign(params=1e8), "2 columns that each read as N (n_params): 'n_params', 'params'"),
        (SAME_RUNS["N D D'"].assign(n=1e8), "'N', 'n'"),
        (canonical().assign(epochs=[1.0, 3.0, 4.0, 1.0]), "row 2: epochs is 3 but (fresh_tokens + derived_tokens)/fresh_tokens is 2;"),
        (canonical().assign(tokens=[1.4e9, 2.8e9, 5.6e9, 1e9]), "row 4: tokens is 1e+09 but fresh_tokens + derived_tokens is 3.2e+09;"),
        (SAME_RUNS["epochs"].assign(strategy="paraphrase"), "for repetition only"),
        (SAME_RUNS["epochs"].assign(epochs=0.5), "epochs must be at least 1"),
        (SAME_RUNS["papers"].assign(tokens=1e9), "tokens must be at least unique_tokens"),
        (canonical().drop(columns="derived_tokens"), "lacks the column(s) derived_tokens"),
    ],
)  # fmt: skip
def test_columns_that_disagree_or_mean_the_same_are_refused(table, words):
    with pytest.raises(BadInput) as e:
        prepare_runs(table, "t.parquet")
    msg = str(e.value)
    assert words in msg and msg.startswith("t.parquet") and "\n" not in msg, msg


def test_epochs_beside_derived_tokens_may_round_and_mean_passes_for_paraphrase():
    # epochs printed to 3 digits agree; a paraphrase run's epochs (passes over D, as cdlaw's
    # summary has them) say nothing of its D′
    df = canonical().assign(derived_tokens=[0.0, 1.4e9, 2.8e9 + 1e6, 0.0], epochs=[1, 2, 3.0, 1])
    df.loc[1, "strategy"] = "paraphrase"
    df.loc[1, "epochs"] = 1.0
    assert prepare_runs(df)["derived_tokens"].tolist() == [0.0, 1.4e9, 2.8e9 + 1e6, 0.0]


def test_a_bad_cell_names_its_line_in_a_csv_and_its_row_in_a_parquet(tmp_path):
    df = SAME_RUNS["papers"].assign(params=["70M", "70M", "lots", "160M"])
    df.to_csv(tmp_path / "t.csv", index=False)
    df.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(BadInput) as e:
        load_runs(tmp_path / "t.csv")  # header on line 1: the third run is line 4
    assert str(e.value) == (
        f"{tmp_path / 't.csv'} line 4: params must be a number such as 3e9 or 70M, got 'lots'"
    )
    with pytest.raises(BadInput, match=r"t\.parquet row 3: params must be a number"):
        load_runs(tmp_path / "t.parquet")
    # an empty line is skipped but counted; every check names the line
    lines = (tmp_path / "t.csv").read_text().splitlines()
    lines[3] = "160M,6.4e9,3.2e9,-2"  # the third run, after the empty line below
    (tmp_path / "t.csv").write_text("\n".join([lines[0], "", *lines[1:]]) + "\n")
    with pytest.raises(BadInput, match=r"t\.csv line 5: loss must be a positive"):
        load_runs(tmp_path / "t.csv")


def test_fit_and_figures_keep_the_same_finished_runs():
    """status "Done", " done" and a blank cell are finished runs, "diverged" is not: the fit's
    table and the figures' rows hold the same 14 of 16 runs."""
    from cdlaw.figures.inputs import prepare_rows

    t = pd.read_csv("examples/demo-runs.csv").iloc[:16].copy()
    t["status"] = ["Done"] * 8 + [" done"] * 4 + [np.nan] * 2 + ["diverged"] * 2
    fitted = prepare_runs(t.copy(), "t")
    drawn = prepare_rows(t.copy(), None)
    assert len(fitted) == len(drawn) == 14 and fitted.attrs["not_done"] == 2
    assert sorted(fitted["loss"]) == sorted(drawn["loss"])


def test_a_loss_above_ln_v_is_flagged_where_the_table_is_read(tmp_path, caplog):
    """A uniform guess over V tokens scores ln V: a run above it is broken, or simulated
    from a law far outside its range (`cdlaw adapt --executor simulate` once fitted losses
    of 26.5 nats against ln V = 11.5 without a word). Said as the table is read, with the
    worst row; a table without a vocabulary, or inside it, says nothing."""
    from cdlaw.fit.summary import data_range

    t = pd.DataFrame({"n_params": [1e5, 2e5, 4e5], "fresh_tokens": [1e6] * 3,
                      "derived_tokens": [0.0] * 3, "strategy": ["none"] * 3,
                      "loss": [3.0, 7.5, 6.0], "vocab_size": [512] * 3})  # fmt: skip
    path = tmp_path / "t.csv"
    t.to_csv(path, index=False)
    with caplog.at_level("WARNING", logger="cdlaw"):
        df = load_runs(path)
    said = [r.getMessage() for r in caplog.records if "ln V" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"warning: {path}: 1 run(s) have a loss above")
    assert "worst: 7.5 nats at line 3, against ln 512 = 6.238" in said[0]
    assert data_range(df).vocab_size == 512 and data_range(df).to_dict()["vocab_size"] == 512
    caplog.clear()
    with caplog.at_level("WARNING", logger="cdlaw"):
        plain = prepare_runs(t.drop(columns="vocab_size").assign(loss=[3.0, 7.5, 6.0]))
    assert not caplog.records and data_range(plain).vocab_size is None


def test_simulated_losses_above_ln_v_are_flagged_when_read(tmp_path, caplog):
    """qin2026 simulated on the demo's 20K–200K models gives losses far above ln 512."""
    from pathlib import Path

    from cdlaw.law import PRESETS
    from cdlaw.sweep.options import SweepOptions
    from cdlaw.sweep.runner import run_sweep
    from cdlaw.sweep.simulate import Simulation

    seed = Path(__file__).resolve().parents[2] / "sweeps" / "demo-seed.toml"
    sim = Simulation(PRESETS["qin2026"], "qin2026", noise=0.0)
    run_sweep(seed, tmp_path, SweepOptions(executor="simulate", simulation=sim))
    with caplog.at_level("WARNING", logger="cdlaw"):
        load_runs(tmp_path / "demo-seed")
    assert any("run(s) have a loss above ln V" in r.getMessage() for r in caplog.records)


def test_the_rows_digest_is_of_the_rows_not_their_order():
    from cdlaw.fit.table import rows_digest

    cells = pd.DataFrame({"n_params": [1e6, 2e6], "fresh_tokens": [1e8, 1e8],
                          "derived_tokens": [0.0, 3e8], "strategy": ["none", "paraphrase"],
                          "loss": [3.1, 2.9]})  # fmt: skip
    same = rows_digest(cells)
    assert rows_digest(cells.iloc[::-1]) == same
    assert rows_digest(cells.assign(loss=[3.1, 2.9 + 1e-15])) == same  # summed in another order
    assert rows_digest(cells.assign(loss=[3.1, 2.91])) != same
    assert rows_digest(cells.assign(strategy=["none", "repetition"])) != same


def test_a_hand_written_fit_is_not_called_stale():
    """law, params and strategies are enough to plan with (docs/files.md): without n_rows
    there is nothing to compare the runs with; with a count, the count is checked."""
    from cdlaw.fit.cells import stale_fit

    df = runs()
    assert stale_fit(df, {"law": "cd", "params": {}}, "t.csv") is None
    assert "now gives" in stale_fit(df, {"n_rows": len(df) + 1}, "t.csv")
    # the refit it names is the fit's own: its law and its number of bootstrap refits
    again = {"n_rows": len(df) + 1, "law": "chinchilla", "bootstrap": [[1.0]] * 3}
    assert "(`cdlaw fit t.csv --law chinchilla --select min --bootstrap 3`)" in stale_fit(
        df, again, "t.csv"
    )
    assert "(`cdlaw fit t.csv --select min`)" in stale_fit(df, {"n_rows": 1, "law": "cd"}, "t.csv")


def test_seed_noise_says_whether_the_table_names_its_seeds():
    """Without a seed column the runs of a cell may differ in more than their seed (a
    published table of runs on three datasets): the same scatter, said as such."""
    from cdlaw.fit.findings import SeedNoise, seed_noise_between

    df = replicated()
    named, unnamed = seed_noise(df), seed_noise(df.drop(columns=["seed"]))
    assert named.seeds_named and not unnamed.seeds_named
    assert seed_noise_between(named.to_dict()) == "between replicate seeds"
    assert "no seed column" in seed_noise_between(unnamed.to_dict())
    assert SeedNoise.from_dict(unnamed.to_dict(), "fit.json") == unnamed
    old = {"sd_log": 0.02, "n_groups": 3, "n_runs": 6}  # a fit.json of an older cdlaw
    assert SeedNoise.from_dict(old, "fit.json").seeds_named


def test_a_strategy_column_under_another_name_is_refused_not_read_as_repetition():
    """The CD paper's release names its strategies in `source`: without a strategy column
    its paraphrase runs would be fitted as repeats, so the table is refused, naming it."""
    table = canonical().rename(columns={"strategy": "source"})
    table.loc[2, "source"] = "paraphrase"
    with pytest.raises(BadInput, match=r"its column 'source' names strategies \(none, para"):
        prepare_runs(table, "t.csv")
    # a text column that names no strategy (a dataset) is no reason to refuse
    read = prepare_runs(canonical().drop(columns="strategy").assign(dataset="c4"), "t.csv")
    assert list(read.strategy) == ["none", "repetition", "repetition", "none"]


def test_a_validation_loss_is_the_loss_only_where_no_column_is_called_loss():
    table = canonical().assign(val_loss=[9.0, 9.0, 9.0, 9.0])
    assert list(prepare_runs(table, "t.csv").loss) == [3.1, 2.9, 2.8, 2.7]
    table = canonical().rename(columns={"loss": "Validation_Loss"})
    assert list(prepare_runs(table, "t.csv").loss) == [3.1, 2.9, 2.8, 2.7]


def test_a_derived_run_still_needs_a_strategy_name():
    table = canonical().assign(strategy=["1epoch", "2epochs", "repetition", "none"])
    with pytest.raises(BadInput, match=r"row 2: strategy '2epochs' is neither none"):
        prepare_runs(table, "t.csv")


def test_the_cd_papers_released_table_reads_once_its_strategy_column_is_named():
    path = PUBLISHED / "qin2026_triple_compact.csv"
    if not path.exists():
        pytest.skip("the published tables (../shared/data/published) are not here")
    with pytest.raises(BadInput, match="its column 'source' names strategies"):
        load_runs(path)
    raw = pd.read_csv(path)
    runs = prepare_runs(raw.rename(columns={"source": "strategy"}), path.name)
    assert len(runs) == 370 and set(runs.strategy) == {"none", "repetition", "paraphrase"}
    assert (runs.fresh_tokens == raw.D_tokens).all() and (runs.loss == raw.val_loss).all()


def two_datasets():
    """Every cell of canonical() trained on two datasets (a Gadre et al.-style table)."""
    table = pd.concat([canonical().assign(dataset="c4"), canonical().assign(dataset="rpj")])
    return table.assign(loss=table.loss + np.where(table.dataset == "c4", 0.0, 0.3))


def test_select_warns_when_a_cells_runs_differ_in_their_setup():
    (warning,) = mixed_cells(two_datasets(), "min")
    assert "reduced 8 runs to 4 cells" in warning and "differ in 'dataset'" in warning
    assert "(e.g. N 70M, D 1.4B, D′ 0, none: c4, rpj)" in warning
    assert mixed_cells(two_datasets(), "none") == []
    # seeds, and what records each run (its id, its trunk, its sweep), are replicates' own
    seeds = pd.concat([canonical().assign(seed=s, run_id=[f"{s}{i}" for i in range(4)],
                                          fork_parent=f"t{s}", sweep=f"round-{s}")
                       for s in (0, 1)])  # fmt: skip
    assert mixed_cells(seeds, "min") == []
    assert mixed_cells(seeds.assign(name=[f"m{i}" for i in range(8)]), "mean") == []
    labels = ["70M", "70M", "70M", "160M", "7e7", "70M", "70M", "1.6e8"]  # one shape each
    assert mixed_cells(seeds.assign(size=labels), "min") == []


def test_a_fit_of_mixed_setups_says_so():
    N, D = (a.ravel() for a in np.meshgrid([1e7, 3e7, 1e8, 3e8], [1e9, 3e9, 1e10]))
    loss = 1.7 + 400 / N**0.34 + 400 / D**0.28
    table = pd.concat([pd.DataFrame({"n_params": N, "fresh_tokens": D, "derived_tokens": 0.0,
                                     "loss": loss + shift, "dataset": name})
                       for name, shift in (("c4", 0.0), ("rpj", 0.2))])  # fmt: skip
    fit = fit_law(table, "chinchilla", n_starts=16)
    assert any("differ in 'dataset'" in w for w in fit.warnings)


def test_a_blank_strategy_of_a_one_epoch_run_is_none():
    """A column of blank cells (pandas reads them as NaN) is no spelling of a strategy."""
    table = canonical().assign(strategy=None)
    table = table[table.derived_tokens == 0]
    assert list(prepare_runs(table).strategy) == ["none", "none"]


def test_a_one_epoch_table_of_flops_reads_d_as_c_over_6n():
    """Chinchilla's runs as published: size, training FLOPs and loss, no tokens."""
    table = pd.DataFrame({"Model Size": [7e7, 4e8], "Training FLOP": ["8.4e17", 2.4e19],
                          "loss": [3.1, 2.7]})  # fmt: skip
    runs = prepare_runs(table, "t.csv")
    assert np.allclose(runs.fresh_tokens, [2e9, 1e10]) and (runs.derived_tokens == 0).all()
    assert list(runs.strategy) == ["none", "none"] and list(runs.n_params) == [7e7, 4e8]
    # where the table gives D, FLOPs are carried through, never read over it
    given = prepare_runs(table.assign(D=[1e9, 1e9], derived_tokens=0.0), "t.csv")
    assert (given.fresh_tokens == 1e9).all()
    with pytest.raises(BadInput, match=r"row 2: Training FLOP must be a number"):
        prepare_runs(table.assign(**{"Training FLOP": ["8.4e17", "lots"]}), "t.csv")
    with pytest.raises(BadInput, match=r"row 2: flops gives D = C / \(6N\) only for one-epoch"):
        prepare_runs(table.rename(columns={"Training FLOP": "flops"})
                     .assign(Strategy=["none", "Repeat"]), "t.csv")  # fmt: skip
    labelled = prepare_runs(table.assign(strategy=["1epoch", "none"]), "t.csv")
    assert list(labelled.strategy) == ["none", "none"]  # one-epoch labels, as anywhere


def test_chinchillas_published_runs_read_as_the_shipped_table():
    path = PUBLISHED / "chinchilla_svg.csv"
    if not path.exists():
        pytest.skip("the published tables (../shared/data/published) are not here")
    runs = load_runs(path)
    shipped = load_runs(Path(__file__).parents[2] / "examples" / "chinchilla-besiroglu.csv")
    assert len(runs) == len(shipped) == 245
    assert np.allclose(runs.n_params, shipped.n_params, rtol=1e-9)
    assert np.allclose(runs.fresh_tokens, shipped.fresh_tokens, rtol=1e-8)
    assert np.allclose(runs.loss, shipped.loss, rtol=1e-9)


def test_a_spreadsheets_export_reads_and_a_decimal_comma_is_refused(tmp_path):
    """Thousands separators read (1,000,000); a decimal comma is never read as one (3,5
    was read as 35, 0,03 as 3); a CSV a spreadsheet wrote with semicolons reads."""
    table = canonical().astype(object)
    table["n_params"] = ["70,000,000", "70,000,000", "70,000,000", "160,000,000"]
    assert list(prepare_runs(table, "t.csv").n_params) == [7e7, 7e7, 7e7, 1.6e8]
    with pytest.raises(BadInput, match=r"loss must be a number, got '2,9' \(a decimal comma"):
        prepare_runs(canonical().astype(object).assign(loss=[3.1, "2,9", 2.8, 2.7]), "t.csv")
    with pytest.raises(BadInput, match=r"got '0,4B' \(a decimal comma"):
        prepare_runs(canonical().astype(object).assign(n_params=[7e7, "0,4B", 7e7, 1.6e8]))
    semicolons = tmp_path / "t.csv"
    canonical().to_csv(semicolons, sep=";", index=False)
    assert list(load_runs(semicolons).loss) == list(canonical().loss)


def test_a_table_without_finished_runs_says_what_a_finished_run_needs(tmp_path):
    """A header alone, runs none of which is done, and checkpoints only: each says why
    there is nothing to fit and what a finished run is."""
    demo = pd.read_csv("examples/demo-runs.csv")
    need = "a finished run is a row with its n_params, fresh_tokens, derived_tokens and final loss"
    demo.iloc[:0].to_csv(tmp_path / "header.csv", index=False)
    with pytest.raises(BadInput, match="holds no runs, only its header: " + need):
        load_runs(tmp_path / "header.csv")
    running = demo.iloc[:3].assign(status=["running", "running", "failed"])
    running.to_csv(tmp_path / "running.csv", index=False)
    with pytest.raises(BadInput, match=r"none of the 3 runs in .* is finished \(status 'running', "
                       "'failed'\\): " + need):  # fmt: skip
        load_runs(tmp_path / "running.csv")
    demo.iloc[:2].assign(checkpoint=True).to_csv(tmp_path / "ckpt.csv", index=False)
    with pytest.raises(BadInput, match=r"every row of .* is a checkpoint"):
        load_runs(tmp_path / "ckpt.csv")
    runs = tmp_path / "runs"
    runs.mkdir()
    demo.iloc[:2].assign(status="failed").to_parquet(runs / "summary.parquet")
    with pytest.raises(BadInput, match=f"`cdlaw status {runs}` shows where its runs stand"):
        load_runs(runs)
