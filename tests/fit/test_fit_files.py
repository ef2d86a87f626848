"""A fit.json is validated wherever it is read: `cdlaw plan --law`, `cdlaw plot`, `cdlaw report`.

A hand-edited or damaged fit.json is refused with exit 2 and one sentence naming the file
and the parameter, and nothing is planned, drawn or written from it.
"""

import json
import sys

import plotdata
import pytest

from cdlaw.cli import main
from cdlaw.fit.io import FitResult
from cdlaw.law import PRESETS
from cdlaw.system.errors import BadInput

QIN = PRESETS["qin2026"]
MUENNIGHOFF = PRESETS["muennighoff2023"]


def cli(monkeypatch, capsys, *args):
    """`cdlaw ARGS` in-process through the real entry point: (code, stdout, stderr unwrapped)."""
    monkeypatch.setattr(sys, "argv", ["cdlaw", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
        raise SystemExit(0)
    out = capsys.readouterr()
    return e.value.code or 0, out.out, " ".join(out.err.split())


def edited(law=QIN, **change) -> dict:
    """law's fit.json with params / strategies edited: change keys are 'alpha' or 'repetition.K'."""
    d = json.loads(json.dumps({**law.to_dict(), "method": "joint"}))
    for key, value in change.items():
        strategy, _, name = key.rpartition(".")
        (d["strategies"][strategy] if strategy else d["params"])[name] = value
    return d


def one_sentence(err: str, *words) -> None:
    assert err.startswith("error: ") and "Traceback" not in err, err
    body = err.removeprefix("error: ").strip()
    assert body.count(". ") == 0 and body.endswith("."), body
    for w in words:
        assert w in body, (w, body)


BAD = [
    (edited(alpha=-0.5), ("parameter alpha = -0.5 must be > 0",)),
    (edited(MUENNIGHOFF, beta=0), ("parameter beta = 0 must be > 0",)),
    (edited(E=-1e-3), ("parameter E = -0.001 must be ≥ 0",)),
    (edited(B=0), ("parameter B = 0 must be > 0",)),
    (edited(E="nan"), ("parameter E is not a finite number",)),
    ({**edited(), "strategies": {}}, ("a cd law needs parameters for at least one strategy",)),
    (edited(**{"repetition.K": 0.0}), ("parameter repetition.K = 0 must be > 0",)),
    (edited(**{"paraphrase.K": -3}), ("parameter paraphrase.K = -3 must be > 0",)),
    (edited(**{"repetition.rho": None}), ("parameter repetition.rho",)),
    (edited(**{"repetition.sigma": "big"}), ("parameter repetition.sigma",)),
    (edited(MUENNIGHOFF, **{"repetition.rstar_d": -1}), ("repetition.rstar_d = -1 must be > 0",)),
    (edited(MUENNIGHOFF, **{"repetition.rstar_n": 0}), ("repetition.rstar_n = 0 must be > 0",)),
    ({**edited(MUENNIGHOFF), "strategies": {}}, ("a muennighoff law needs parameters",)),
    (
        {**edited(), "strategies": {"Shuffle!": QIN.strategies["repetition"]}},
        ("strategy 'Shuffle!'", "is not a derived strategy's name (a lowercase letter"),
    ),
    (
        {**edited(), "strategies": {"repeat": QIN.strategies["repetition"]}},
        ("strategy 'repeat'", "is how tables write repetition", "fit the table again"),
    ),
    ({**edited(), "data_range": {"n_params": ["big", 1e9]}}, ('"data_range" n_params',)),
    ({**edited(), "dropped": [3, "x"]}, ('"dropped" must be a list of row numbers',)),
    ({**edited(), "n_rows": 2.5}, ('"n_rows" must be a whole number, not 2.5',)),
]


@pytest.mark.parametrize(("fit", "words"), BAD)
def test_from_dict_refuses_parameters_outside_the_law(fit, words):
    with pytest.raises(BadInput) as e:
        FitResult.from_dict(fit, "edited.json")
    msg = str(e.value)
    assert msg.startswith("edited.json: ") and msg.endswith(".") and "\n" not in msg
    for w in words:
        assert w in msg, msg


def test_from_dict_reads_numbers_written_as_strings_or_ints_as_floats():
    fit = FitResult.from_dict(edited(**{"repetition.K": 12, "repetition.rho": "-0.4"}))
    want = {**QIN.strategies["repetition"], "K": 12.0, "rho": -0.4}
    assert fit.law.strategies["repetition"] == want
    assert all(isinstance(v, float) for v in fit.law.strategies["repetition"].values())


@pytest.mark.parametrize(("fit", "words"), BAD)
def test_plan_refuses_an_edited_fit_json(fit, words, tmp_path, monkeypatch, capsys):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(fit))
    code, out, err = cli(
        monkeypatch,
        capsys,
        "plan",
        "--law",
        path,
        "--budget-flops",
        "1e21",
        "--unique-tokens",
        "5e9",
    )
    assert code == 2 and out == "", err
    one_sentence(err, str(path), *words)


def test_plan_with_no_strategy_does_not_plan_a_token_of_derived_data(tmp_path, monkeypatch, capsys):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({**edited(), "strategies": {}}))
    args = ("plan", "--law", path, "--budget-flops", "1e21", "--unique-tokens", "5e9", "--json")
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and out == "" and "derived_tokens" not in out
    one_sentence(err, "strategies")


@pytest.mark.parametrize(("fit", "words"), BAD[:7] + BAD[10:11])
def test_plot_refuses_an_edited_fit_json(fit, words, tmp_path, monkeypatch, capsys):
    csv, fit_path = plotdata.write_external(tmp_path)
    fit_path.write_text(json.dumps({**json.loads(fit_path.read_text()), **fit}))
    out = tmp_path / "figs"
    for args in ((fit_path,), (csv,), (csv, "--fit", fit_path)):
        code, stdout, err = cli(monkeypatch, capsys, "plot", *args, "--out", out)
        assert code == 2 and stdout == "", err
        one_sentence(err, str(fit_path), *words)
    assert not out.exists()


def test_plot_of_a_sound_fit_is_unchanged(tmp_path):
    from cdlaw.figures.inputs import load_inputs

    csv, fit_path = plotdata.write_external(tmp_path)
    inputs = load_inputs(csv)
    assert inputs.law == type(QIN).from_dict(json.loads(fit_path.read_text()))
    assert inputs.fit == json.loads(fit_path.read_text())


def test_report_refuses_an_edited_fit_json(tmp_path, monkeypatch, capsys):
    runs = plotdata.write_runs(tmp_path)
    fit = json.loads((runs / "fit.json").read_text())
    fit["params"]["alpha"] = -0.5
    (runs / "fit.json").write_text(json.dumps(fit))
    out = tmp_path / "r.html"
    code, stdout, err = cli(monkeypatch, capsys, "report", runs, "--out", out)
    assert code == 2 and stdout == "", err
    one_sentence(err, str(runs / "fit.json"), "alpha = -0.5 must be > 0")
    assert not out.exists()


def test_a_frontier_json_of_a_preset_still_plots(tmp_path):
    from cdlaw.figures.inputs import load_inputs

    frontier = plotdata.brute_force_frontier(QIN, [1e19, 1e20, 1e21], 5e9)
    path = tmp_path / "frontier.json"
    path.write_text(json.dumps(frontier))
    assert load_inputs(path).law == QIN  # the law as published, its source included
    frontier["law_params"]["strategies"]["repetition"]["K"] = -1.0
    path.write_text(json.dumps(frontier))
    with pytest.raises(BadInput, match=r"frontier\.json: parameter repetition\.K = -1 must be > 0"):
        load_inputs(path)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"params": {"E": 1' + "0" * 5000 + "}}", "not a readable JSON fit file"),
        ("[" * 100_000 + "]" * 100_000, "not a readable JSON fit file"),
        (json.dumps({**edited(), "bootstrap": "12"}), '"bootstrap" must be a list'),
    ],
)
def test_load_law_refuses_json_no_fit_is_made_of(text, words, tmp_path):
    from cdlaw.plan.source import load_law

    path = tmp_path / "fit.json"
    path.write_text(text)
    with pytest.raises(BadInput) as e:
        load_law(str(path))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_plot_refuses_json_no_fit_is_made_of(tmp_path, monkeypatch, capsys):
    path = tmp_path / "fit.json"
    for text in ('{"params": {"E": 1' + "0" * 5000 + "}}", "[" * 100_000, b"\xff{}"):
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        code, out, err = cli(monkeypatch, capsys, "plot", path, "--out", tmp_path / "figs")
        assert code == 2 and out == "", err
        assert "is not readable JSON" in err and "Traceback" not in err
    assert not (tmp_path / "figs").exists()


SIMULATED = """
name = "sim"
[grid]
size = ["olmo3_14M", "olmo3_30M", "olmo3_60M"]
tokens_per_param = [4, 16]
strategy = ["repetition", "paraphrase"]
derived_ratio = [0, 4, 16]
[data]
tokenizer = "/nowhere/tokenizer.json"  # never read: a simulated sweep needs no corpus
[model]
seq_len = 2048
"""


def simulated_runs(tmp_path):
    """A runs folder of 30 runs drawn from the CD paper's law: (its sweep folder, summary)."""
    import pandas as pd

    from cdlaw.sweep.options import SweepOptions
    from cdlaw.sweep.runner import run_sweep
    from cdlaw.sweep.simulate import Simulation

    path = tmp_path / "sim.toml"
    path.write_text(SIMULATED)
    options = SweepOptions(executor="simulate", simulation=Simulation(QIN, "qin2026"))
    assert run_sweep(path, tmp_path / "runs", options).exit_code == 0
    sweep_dir = tmp_path / "runs" / "sim"
    return sweep_dir, pd.read_parquet(sweep_dir / "summary.parquet")


def test_a_damaged_summary_is_rebuilt_from_the_run_folders_by_fit_and_plot(
    tmp_path, monkeypatch, capsys
):
    """A summary.parquet cut short: `cdlaw fit` and `cdlaw plot` rebuild it from the run
    folders as a sweep does (the same table), say so in one line, and go on."""
    import pandas as pd

    sweep_dir, before = simulated_runs(tmp_path)
    summary = sweep_dir / "summary.parquet"
    summary.write_bytes(summary.read_bytes()[:1000])  # cut short
    code, _, err = cli(
        monkeypatch, capsys, "fit", sweep_dir, "--law", "chinchilla", "--naive", "--starts", 8
    )
    assert code == 0, err
    said = f"damaged: {summary} is unreadable ("
    assert said in err and "rebuilt from the result.json of the run folders beside it" in err
    pd.testing.assert_frame_equal(pd.read_parquet(summary), before)
    assert not list(sweep_dir.glob(".summary.parquet.*"))  # written atomically

    summary.write_bytes(b"PAR1 cut")
    code, _, err = cli(monkeypatch, capsys, "plot", sweep_dir, "--kind", "loss", "--out", tmp_path)
    assert code == 0 and said in err, err
    pd.testing.assert_frame_equal(pd.read_parquet(summary), before)


def test_a_damaged_summary_that_cannot_be_rebuilt_is_one_sentence(tmp_path, monkeypatch, capsys):
    from cdlaw.sweep import summary as summary_module

    sweep_dir, _ = simulated_runs(tmp_path)
    summary = sweep_dir / "summary.parquet"
    summary.write_bytes(b"PAR1 not a table")

    def read_only(folder):
        raise PermissionError(13, "Permission denied", str(summary))

    monkeypatch.setattr(summary_module, "rebuild_summary", read_only)
    code, out, err = cli(monkeypatch, capsys, "fit", sweep_dir, "--law", "chinchilla")
    assert code == 2 and out == ""
    assert err.startswith(f"error: {summary} is unreadable (")
    assert "rebuilding it from the run folders failed (PermissionError:" in err
    assert err.endswith(
        f"copy {sweep_dir} somewhere writable and give that folder (the copy rebuilds it)"
    )
    assert not (sweep_dir / "fit.json").exists()
