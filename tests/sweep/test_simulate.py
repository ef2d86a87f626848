"""`cdlaw sweep --executor simulate`: losses drawn from a known law through the same run
folders, rows and FLOP accounting as trained runs, seeded, and refused when mixed."""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cdlaw.fit.procedure import fit_law
from cdlaw.law import PRESETS
from cdlaw.shapes import OLMO3_VOCAB_SIZE, count_params
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.simulate import Simulation, simulated_loss, simulated_result
from cdlaw.sweep.spec import load_sweep
from cdlaw.system.errors import BadInput
from cdlaw.train.result import SUMMARY_COLUMNS

QIN = PRESETS["qin2026"]
# 4 sizes × 3 D × (r = 0, and 4 ratios per strategy): 108 runs; SMALL has 6.
GRID = """
name = "{name}"
[grid]
size = ["olmo3_14M", "olmo3_30M", "olmo3_60M", "olmo3_100M"]
tokens_per_param = [1, 4, 16]
strategy = ["repetition", "paraphrase"]
derived_ratio = [0, 1, 4, 16, 48]
[data]
tokenizer = "/nowhere/tokenizer.json"  # never read: a simulated sweep needs no corpus
[model]
seq_len = 2048
"""


SMALL = (
    GRID.replace('"olmo3_30M", "olmo3_60M", "olmo3_100M"', '"olmo3_30M"')
    .replace("[1, 4, 16]", "[4]")
    .replace("[0, 1, 4, 16, 48]", "[0, 4]")
)


def grid_runs(seeds=(0,)):
    """The grid's runs (as a sweep would run them) without writing anything."""
    path = Path(tempfile.mkdtemp()) / "g.toml"
    path.write_text(GRID.format(name="g").replace("[data]", f"seed = {list(seeds)}\n[data]"))
    return load_sweep(path).runs(OLMO3_VOCAB_SIZE)


def n_params(cfg) -> int:
    return count_params(cfg.model).n_params


def simulate(tmp_path, name="sim", text=GRID, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(name=name))
    sim = Simulation(QIN, "qin2026", **kw)
    outcome = run_sweep(path, tmp_path / "runs", SweepOptions(executor="simulate", simulation=sim))
    return outcome, pd.read_parquet(tmp_path / "runs" / name / "summary.parquet")


def test_noiseless_runs_are_the_law_and_are_accounted_like_trained_ones(tmp_path):
    outcome, df = simulate(tmp_path)
    assert outcome.exit_code == 0 and set(outcome.statuses.values()) == {"done"}
    assert set(SUMMARY_COLUMNS) <= set(df.columns) and (df["device"] == "simulated").all()
    want = [
        float(QIN.loss(r.n_params, r.fresh_tokens, r.derived_tokens, r.strategy))
        for r in df.itertuples()
    ]
    np.testing.assert_allclose(df["loss"], want, rtol=1e-12)
    np.testing.assert_allclose(
        df["flops"], 6.0 * df["n_params"] * df["tokens_trained"].astype(float)
    )
    assert (df["tokens_trained"] == df["fresh_tokens"] + df["derived_tokens"]).all()
    run_dir = tmp_path / "runs" / "sim" / df["run_id"].iloc[0]
    assert {"config.json", "metrics.parquet", "result.json"} <= {p.name for p in run_dir.iterdir()}
    assert json.loads((run_dir / "config.json").read_text())["simulation"]["law"] == "qin2026"


def test_a_simulated_sweep_run_again_skips_its_runs_and_finds_nothing_damaged(tmp_path, capsys):
    from cdlaw.sweep.summary import run_state

    _, df = simulate(tmp_path, text=SMALL)
    capsys.readouterr()
    again, _ = simulate(tmp_path, text=SMALL)  # nothing trained, so no model/ to look for
    assert again.trained == [] and "damaged" not in capsys.readouterr().err
    states = [run_state(tmp_path / "runs" / "sim" / rid) for rid in df["run_id"]]
    assert all(s["state"] == "done" and "damaged" not in s for s in states)


def test_noise_is_seeded_per_cell_and_per_run():
    runs = grid_runs(seeds=(0, 1))

    def losses(**kw):
        sim = Simulation(QIN, "qin2026", **kw)
        return {(r.run_id, r.seed): simulated_loss(sim, r) for r in runs}

    a, b, c = losses(noise=0.02), losses(noise=0.02), losses(noise=0.02, noise_seed=1)
    assert a == b  # the same simulation, the same losses
    assert not np.allclose(list(a.values()), list(c.values()))  # another seed, other draws
    law = np.array(
        [float(QIN.loss(n_params(r), r.fresh_tokens, r.derived_tokens, r.strategy)) for r in runs]
    )
    z = np.log(np.array(list(a.values())) / law)
    assert 0.012 < z.std() < 0.03 and abs(z.mean()) < 0.01  # log-sd 0.02 over 108 cells
    # --noise is shared by a cell's seeds; --seed-noise separates them
    cells = {}
    for r, value in zip(runs, a.values(), strict=True):
        cells.setdefault((n_params(r), r.fresh_tokens, r.derived_tokens, r.strategy), []).append(
            value
        )
    assert all(len(set(v)) == 1 for v in cells.values())
    d = losses(noise=0.02, seed_noise=0.01)
    pairs = {}
    for r, value in zip(runs, d.values(), strict=True):
        pairs.setdefault((n_params(r), r.fresh_tokens, r.derived_tokens, r.strategy), []).append(
            value
        )
    spread = np.array([np.log(v[0] / v[1]) for v in pairs.values()])
    assert 0.007 < spread.std() / math.sqrt(2) < 0.014


def test_a_fit_recovers_the_simulating_law_and_says_the_rows_are_simulated():
    sim = Simulation(QIN, "qin2026", noise=0.005)
    df = pd.DataFrame([simulated_result(sim, r) for r in grid_runs()])
    result = fit_law(df, bootstrap=0, n_starts=512, seed=0)
    assert (
        abs(result.law.params["alpha"] - QIN.params["alpha"]) < 0.05
        and abs(result.law.params["beta"] - QIN.params["beta"]) < 0.05
    )
    rho = result.law.strategies["repetition"]["rho"]
    assert abs(rho - QIN.strategies["repetition"]["rho"]) < 0.15
    assert any("simulated" in w for w in result.warnings)


def test_simulated_and_other_runs_are_never_mixed(tmp_path):
    simulate(tmp_path, text=SMALL, noise=0.01)
    with pytest.raises(BadInput, match="real training or another simulation"):
        simulate(tmp_path, text=SMALL, noise=0.02)  # other noise: refused, not skipped
    outcome = run_sweep(
        tmp_path / "sim.toml",
        tmp_path / "runs",
        SweepOptions(
            restart=True,  # replaces them
            executor="simulate",
            simulation=Simulation(QIN, "qin2026", noise=0.02),
        ),
    )
    assert outcome.exit_code == 0 and len(outcome.trained) == len(outcome.statuses)


def test_bad_simulation_input_is_one_sentence(tmp_path):
    with pytest.raises(BadInput, match="--noise"):
        Simulation(QIN, "qin2026", noise=-0.1)
    path = tmp_path / "s.toml"
    path.write_text(GRID.format(name="s"))
    with pytest.raises(BadInput, match="needs --law"):
        run_sweep(path, tmp_path / "runs", SweepOptions(executor="simulate"))
    chinchilla_only = Simulation(PRESETS["muennighoff2023"], "muennighoff2023")
    with pytest.raises(BadInput, match="no parameters for strategy 'paraphrase'"):
        run_sweep(
            path, tmp_path / "runs2", SweepOptions(executor="simulate", simulation=chinchilla_only)
        )


def test_the_cli_simulates_without_torch(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SMALL.format(name="s"))
    code = (
        "import sys; sys.modules['torch'] = None; from cdlaw.cli import main; "
        "sys.argv = ['cdlaw', *sys.argv[1:]]; main()"
    )
    args = ["sweep", str(path), "--executor", "simulate", "--law", "qin2026", "--noise", "0.01"]
    r = subprocess.run(
        [sys.executable, "-c", code, *args, "--out", str(tmp_path / "runs"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["counts"] == {"done": out["runs"]}
    # The summary line: simulated runs, and no training jobs or threads (none ran)
    line = next(x for x in r.stderr.splitlines() if "summary:" in x)
    assert f"simulated {out['runs']} from qin2026 in " in line, line
    assert "job" not in line and "thread" not in line, line
    r = subprocess.run(
        [sys.executable, "-c", code, "sweep", str(path), "--law", "qin2026"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "--executor simulate" in r.stderr


def test_run_folders_of_no_run_of_the_sweep_are_refused_then_restart_clears_them(tmp_path):
    """summary.parquet gathers every run folder: one that is no run of the sweep (e.g. named
    by an older run identity) would be fitted with it, so the sweep refuses it by name."""
    simulate(tmp_path, text=SMALL)
    sweep_dir = tmp_path / "runs" / "sim"
    stray = sweep_dir / "0123456789ab"
    shutil.copytree(next(p for p in sweep_dir.iterdir() if p.is_dir()), stray)
    with pytest.raises(BadInput, match=r"0123456789ab.*--restart"):
        simulate(tmp_path, text=SMALL)
    outcome = run_sweep(
        tmp_path / "sim.toml",
        tmp_path / "runs",
        SweepOptions(
            restart=True,
            only="strategy=none",  # even a selective restart clears the strays
            executor="simulate",
            simulation=Simulation(QIN, "qin2026"),
        ),
    )
    assert outcome.exit_code == 0 and not stray.exists()
    assert len(pd.read_parquet(sweep_dir / "summary.parquet")) == len(outcome.plan.all_runs)


def test_jobs_is_refused_where_it_would_be_ignored(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SMALL.format(name="s"))
    sim = Simulation(QIN, "qin2026")
    with pytest.raises(BadInput, match="--jobs is for the local executor"):
        run_sweep(
            path, tmp_path / "runs", SweepOptions(executor="simulate", simulation=sim, jobs=2)
        )
    with pytest.raises(BadInput, match="--jobs is for the local executor"):
        run_sweep(path, tmp_path / "runs", SweepOptions(executor="ray", jobs=2))
    assert not (tmp_path / "runs").exists()  # refused before anything was written
