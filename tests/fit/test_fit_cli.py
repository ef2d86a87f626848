"""`cdlaw fit` from the command line: tables and runs folders, JSON, files, exit codes."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from cdlaw.cli import main
from cdlaw.law import PRESETS

QIN = PRESETS["qin2026"]
SIZES = (14e6, 30e6, 60e6, 100e6)


def table(seed=0, sizes=SIZES):
    """Runs from the qin2026 law with 0.5% noise: 3 tokens-per-param × (1 + 3 r × 2 strategies)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in sizes:
        for tpp in (5, 20, 80):
            D = N * tpp
            rows.append((N, D, 0.0, "none"))
            rows += [(N, D, r * D, s) for s in ("repetition", "paraphrase") for r in (1, 4, 16)]
    df = pd.DataFrame(rows, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy"])
    df["loss"] = [QIN.loss(*r) for r in rows] * np.exp(0.005 * rng.standard_normal(len(df)))
    return df


def run(monkeypatch, capsys, *args):
    """`cdlaw fit ARGS` in-process through the real entry point: (code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["cdlaw", "fit", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def test_csv_json_equals_written_fit_json(tmp_path, monkeypatch, capsys):
    path = tmp_path / "runs.csv"
    table().to_csv(path, index=False)
    code, out, err = run(monkeypatch, capsys, path, "--starts", "32", "--json")
    assert code == 0, err
    printed = json.loads(out)
    written = json.loads((tmp_path / "runs.fit.json").read_text())
    assert printed == written
    assert printed["law"] == "cd" and printed["source"] == str(path)
    assert printed["optimizer"]["n_starts"] == 32 and printed["n_used"] == 84
    assert abs(printed["params"]["beta"] - QIN.params["beta"]) < 0.03
    rows = pd.read_parquet(tmp_path / "runs.fit_rows.parquet")
    assert len(rows) == 84 and rows["used"].all() and not rows["heldout"].any()
    assert "wrote" in err and "runs.fit.json" in err


def test_runs_folder_human_output_and_files(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "sweep"
    runs.mkdir()
    df = table()
    # two learning rates per cell (the worse one must not be fitted) and one diverged run
    worse = df.assign(loss=df["loss"] * 1.05, lr=3e-3)
    df = pd.concat([df.assign(lr=1e-3), worse], ignore_index=True)
    df["status"] = "done"
    df.loc[5, "status"] = "diverged"
    df["run_id"] = [f"r{i:03d}" for i in range(len(df))]
    df.to_parquet(runs / "summary.parquet")
    code, out, err = run(monkeypatch, capsys, runs, "--starts", "32", "--bootstrap", "20")
    assert code == 0, err
    assert "wrote" in err and "wrote" not in out  # the summary on stdout, notes on stderr
    for words in ("parameter", "95% CI", "repetition.rho", "R* at the median cell",
                  "E + A/N^alpha", "rmse_log", "optimizer: converged", "regimes", "L_1ep"):  # fmt: skip
        assert words in out, words
    fit = json.loads((runs / "fit.json").read_text())
    rows = pd.read_parquet(runs / "fit_rows.parquet")
    assert fit["n_rows"] == 84 and fit["select"] == "auto"
    assert "1 run(s) whose status is not done were left out" in " ".join(fit["warnings"])
    # --select auto kept the better learning rate of each cell (except the diverged run's cell)
    assert (rows["lr"] == 1e-3).sum() == 83 and set(rows["run_id"]) <= set(df["run_id"])
    assert len(fit["bootstrap"]) == 20 and "alpha" in fit["ci95"]


def test_out_option_and_holdout(tmp_path, monkeypatch, capsys):
    path = tmp_path / "runs.parquet"
    table().to_parquet(path)
    out = tmp_path / "fits" / "cd.json"
    code, _, err = run(
        monkeypatch, capsys, path, "--starts", "32", "--holdout-largest", "--out", out
    )
    assert code == 0, err
    fit = json.loads(out.read_text())
    assert fit["holdout"]["n_params"] == 100e6 and fit["holdout"]["rmse_log"] < 0.02
    rows = pd.read_parquet(tmp_path / "fits" / "cd_rows.parquet")
    assert rows["heldout"].sum() == 21 and not (tmp_path / "runs.fit.json").exists()


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda df: df.drop(columns=["loss"]), "lacks the column(s) loss"),
        (lambda df: df.assign(n_params=-df["n_params"]), "n_params must be a positive"),
        (lambda df: df[df["n_params"] == 30e6], "1 model size(s) (30M)"),
    ],
)
def test_bad_tables_exit_2_with_one_sentence_and_write_nothing(
    tmp_path, monkeypatch, capsys, change, words
):
    path = tmp_path / "bad.csv"
    change(table()).to_csv(path, index=False)
    code, out, err = run(monkeypatch, capsys, path, "--starts", "8")
    assert code == 2 and out == ""
    assert words in err
    assert err.strip().startswith("error:") and len(err.strip().splitlines()) <= 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


def test_a_table_too_large_for_the_free_memory_is_refused_up_front(tmp_path, monkeypatch, capsys):
    """84 rows need 84 × (1,000 + 200) bytes with the default bootstrap: refused where only
    90 kB are free, in one sentence naming the rows and the memory; fitted without it."""
    from cdlaw.fit import checks

    monkeypatch.setattr(checks, "available_memory", lambda: 90_000)
    path = tmp_path / "big.csv"
    table().to_csv(path, index=False)
    code, out, err = run(monkeypatch, capsys, path, "--starts", "8")
    assert code == 2 and out == ""
    said = " ".join(err.split())
    assert "has 84 rows, and fitting them with 200 bootstrap refits needs about" in said
    assert "fit a random sample of the rows, or fewer refits (--bootstrap)" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.csv"]
    code, _, err = run(monkeypatch, capsys, path, "--starts", "8", "--bootstrap", "0")
    assert code == 0, err


@pytest.mark.parametrize(
    "select, said",
    [
        ("min", "84 of 168 rows: 84 replicates collapsed by --select min (the lowest loss"),
        ("mean", "84 of 168 rows: 84 replicates collapsed by --select mean (the mean loss"),
        ("none", "all 168 rows (--select none: each replicate fitted as it is)"),
    ],
)
def test_the_fit_says_how_it_combined_replicate_runs(tmp_path, monkeypatch, capsys, select, said):
    """Every cell trained twice (seeds 0 and 1): the fit says how many rows the replicates
    became, in its summary and in fit.json (n_runs beside n_rows)."""
    df = table()
    twice = pd.concat([df.assign(seed=0), df.assign(seed=1, loss=df["loss"] * 1.01)])
    path = tmp_path / "seeds.csv"
    twice.to_csv(path, index=False)
    code, out, err = run(
        monkeypatch, capsys, path, "--select", select, "--starts", "8", "--bootstrap", "0"
    )
    assert code == 0, err
    assert f"rows: {said}" in " ".join(out.split())
    fit = json.loads((tmp_path / "seeds.fit.json").read_text())
    assert fit["n_runs"] == 168 and fit["n_rows"] == (168 if select == "none" else 84)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--naive"], "--naive counts derived tokens as fresh"),
        (["--out", "fit.txt"], "--out must name a .json file"),
        (["--starts", "many"], "--starts must be a number"),
        (["--law", "kaplan"], "--law must be one of"),
    ],
)
def test_bad_options_exit_2(tmp_path, monkeypatch, capsys, args, words):
    path = tmp_path / "t.csv"
    table().to_csv(path, index=False)
    code, _, err = run(monkeypatch, capsys, path, "--starts", "8", *args)
    assert code == 2 and words in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_a_table_in_papers_columns_fits_as_cdlaw_columns_and_says_how_it_was_read(
    tmp_path, monkeypatch, capsys
):
    df = table()
    df = df[df["strategy"] != "paraphrase"]
    df.to_csv(tmp_path / "cdlaw.csv", index=False)
    papers = pd.DataFrame(
        {
            "params": [f"{n / 1e6:g}M" for n in df["n_params"]],  # 14M, as the command line
            "tokens": df["fresh_tokens"] + df["derived_tokens"],
            "unique_tokens": df["fresh_tokens"],
            "loss": df["loss"],
        }
    )
    papers.to_csv(tmp_path / "papers.csv", index=False)
    fits = {}
    for name in ("cdlaw", "papers"):
        code, _, err = run(monkeypatch, capsys, tmp_path / f"{name}.csv", "--starts", "8")
        assert code == 0, err
        fits[name] = json.loads((tmp_path / f"{name}.fit.json").read_text())
        fits[name][name] = [ln for ln in err.splitlines() if ln.startswith("read ")]
    assert fits["cdlaw"]["cdlaw"] == []  # cdlaw's own names: nothing to say
    assert fits["papers"]["papers"] == [
        f"read {tmp_path / 'papers.csv'}: N ← params, D ← unique_tokens, D′ ← tokens − "
        "unique_tokens, strategy ← repetition (no strategy column; the tokens beyond D repeat "
        "it), loss ← loss"
    ]
    assert fits["papers"]["params"] == fits["cdlaw"]["params"]
    assert fits["papers"]["strategies"] == fits["cdlaw"]["strategies"]


def test_entry_point_help_and_exit_code(tmp_path):
    help_text = subprocess.run(
        [sys.executable, "-m", "cdlaw", "fit", "--help"], capture_output=True, text=True
    )
    assert help_text.returncode == 0 and "Example: cdlaw fit" in help_text.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "cdlaw", "fit", str(tmp_path / "nope.csv")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def law_table(law, seed=0):
    """Runs made with `law` (0.5% noise): 4 sizes × 3 tokens-per-param × (1 + 3 r per strategy)."""
    rng = np.random.default_rng(seed)
    strategies = list(law.strategies) or ["repetition"]  # chinchilla: D′ rows are not fitted
    rows = []
    for N in SIZES:
        for tpp in (5, 20, 80):
            D = N * tpp
            rows.append((N, D, 0.0, "none"))
            rows += [(N, D, r * D, s) for s in strategies for r in (1, 4, 16)]
    df = pd.DataFrame(rows, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy"])
    loss = [float(law.loss(N, D, Dp, s if s in law.strategies else "none")) for N, D, Dp, s in rows]
    df["loss"] = np.array(loss) * np.exp(0.005 * rng.standard_normal(len(df)))
    return df


@pytest.mark.parametrize("preset", ["qin2026", "muennighoff2023", "chinchilla-hoffmann"])
def test_human_summary_of_every_law(tmp_path, monkeypatch, capsys, preset):
    law = PRESETS[preset]
    path = tmp_path / "runs.csv"
    law_table(law).to_csv(path, index=False)
    args = (path, "--law", law.form, "--starts", "32", "--bootstrap", "4")
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "Traceback" not in err
    fit = json.loads((tmp_path / "runs.fit.json").read_text())
    assert fit["law"] == law.form and (tmp_path / "runs.fit_rows.parquet").exists()
    table_text = out.split("E + A/N^alpha")[0]
    for name in fit["bootstrap_params"]:  # every fitted parameter has its row, with its CI
        line = next((ln for ln in table_text.splitlines() if ln.split()[:1] == [name]), None)
        assert line is not None and line.count("[") == 1, (name, table_text)
    if law.form != "chinchilla":
        assert "R* at the median cell" in out
    assert err.rstrip().splitlines()[-1].startswith("wrote ")


def test_files_are_written_only_after_the_summary_is_printed(tmp_path, monkeypatch, capsys):
    import cdlaw.cli.fit as fit_command

    def broken(result):
        raise RuntimeError("the summary could not be printed")

    monkeypatch.setattr(fit_command, "_render", broken)
    path = tmp_path / "runs.csv"
    table().to_csv(path, index=False)
    code, _, err = run(monkeypatch, capsys, path, "--starts", "8")
    assert code == 1 and "the summary could not be printed" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv"]


def test_the_model_floor_table_shows_a_dozen_sizes_of_a_long_table():
    from cdlaw.cli.fit import SHOWN_SIZES, _shown_sizes

    sizes = sorted(np.geomspace(1e7, 1e10, 140))
    shown = _shown_sizes(sizes)
    assert len(shown) == SHOWN_SIZES and shown == sorted(shown)
    assert shown[0] == 0 and shown[-1] == len(sizes) - 1  # both ends
    assert _shown_sizes([1e6, 2e6, 4e6]) == [0, 1, 2]  # a short table: every size
    assert _shown_sizes([73.80e6, 73.81e6, 90e6]) == [0, 2]  # printed alike (73.8M): once
