"""`cdlaw next` and `cdlaw adapt`: the value of a run, the batch, its sweep file,
rounds inside a runs folder, the loop, and bad input. Simulated runs: exact and cheap."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cdlaw.design.adaptive import run_adaptive
from cdlaw.design.batch import next_batch
from cdlaw.design.value import Ensemble, choose, ensemble_covariance, plan_value, uncertainty
from cdlaw.fit.findings import DataRange
from cdlaw.fit.io import FitResult, write_fit
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.law import PRESETS
from cdlaw.plan.planner import plan
from cdlaw.plan.source import load_law
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.simulate import Simulation
from cdlaw.sweep.spec import load_sweep, parse_sweep
from cdlaw.sweep.toml import toml_text
from cdlaw.system.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "sweeps" / "qin2026-seed.toml"
GRID = ROOT / "sweeps" / "qin2026-grid.toml"
SIM = Simulation(PRESETS["qin2026"], "qin2026", noise=0.02)
SIMULATED = SweepOptions(executor="simulate", simulation=SIM)
FAST = {"n_starts": 64, "bootstrap": 12, "seed": 0}


# ---------------------------------------------------------------------------------------
# The value of a run: the Kalman update on the bootstrap ensemble.
# ---------------------------------------------------------------------------------------


def toy_ensemble(rng, draws=400):
    """Target loss t; candidate 0 = t + small noise (tells t), 1 = independent, 2 = 2·t."""
    t = rng.normal(0, 0.05, draws)
    targets = np.column_stack([t, np.zeros(draws), np.zeros(draws)])
    cands = np.column_stack([t + rng.normal(0, 0.01, draws), rng.normal(0, 0.05, draws), 2 * t])
    return Ensemble(targets, cands, gap_mean=0.0)


def test_a_run_that_tracks_the_plan_loss_is_picked_and_shrinks_it_by_the_kalman_formula():
    ens = toy_ensemble(np.random.default_rng(0))
    noise = 0.02
    picks = choose(ens, noise, lambda picked: np.array([1.0, 1.0, 1.0]), max_runs=1)
    assert [p.index for p in picks] == [2]  # 2·t: the most signal over the same noise
    cov = ensemble_covariance(ens)
    j = 3 + 2
    expected = cov[0, 0] - cov[0, j] ** 2 / (cov[j, j] + noise**2)
    assert picks[0].after.loss_sd == pytest.approx(math.sqrt(expected), rel=1e-12)
    assert picks[0].before.loss_sd == pytest.approx(math.sqrt(cov[0, 0]), rel=1e-12)


def test_a_second_run_that_repeats_the_first_is_worth_little():
    ens = toy_ensemble(np.random.default_rng(1))
    picks = choose(ens, 0.02, lambda picked: np.ones(3), max_runs=2)
    assert picks[0].index == 2
    assert picks[1].gain < 0.1 * picks[0].gain  # candidate 0 tells what 2 already told


def test_per_flop_picks_the_cheap_run_unless_a_budget_buys_a_much_better_one():
    ens = toy_ensemble(np.random.default_rng(2))
    cost = lambda picked: np.array([1e3, 1e-3, 1e3])  # noqa: E731 — the useless run is cheap
    per_flop = choose(ens, 0.02, cost, max_runs=1)
    assert per_flop[0].index == 1
    budgeted = choose(ens, 0.02, cost, max_runs=1, max_flops=1e3)
    assert budgeted[0].index in (0, 2) and budgeted[0].gain > 10 * per_flop[0].gain


def test_a_forced_first_run_comes_first_and_conditions_the_rest():
    ens = toy_ensemble(np.random.default_rng(3))
    picks = choose(ens, 0.02, lambda picked: np.ones(3), max_runs=2, max_flops=10, first=(1,))
    assert [p.index for p in picks] == [1, 2]  # the run the ensemble sees no value in, first
    assert abs(picks[0].gain) < 0.05 * picks[1].gain
    # a forced run that does not fit the budget is left out, not waited for
    cost = lambda picked: np.array([1.0, 100.0, 1.0])  # noqa: E731
    assert 1 not in [p.index for p in choose(ens, 0.02, cost, max_runs=2, max_flops=10, first=(1,))]


def test_each_halving_of_the_plan_loss_sd_is_worth_the_same():
    # the loss term is information, ½·ln(Var/Var₀): a third halving counts as much as the
    # first, so the rounds keep narrowing the loss the team bets on
    v0 = 0.05**2
    values = [plan_value(v0 / 4**k, 0.2, 0.5, v0) for k in range(4)]
    assert np.diff(values) == pytest.approx([-math.log(2)] * 3, rel=1e-12)
    assert values[0] == pytest.approx(0.2 + 0.5 * 0.5, rel=1e-12)  # P(flip) + ½·P(move)
    u = uncertainty(np.diag([v0 / 16, 1e-2, 0.02**2]), gap_mean=0.01)
    assert u.value(v0) == pytest.approx(plan_value(v0 / 16, u.flip, u.n_move, v0), rel=1e-12)


def test_the_strategy_flip_chance_is_the_normal_tail_of_the_gap():
    cov = np.diag([1e-4, 1e-2, 0.02**2])
    u = uncertainty(cov, gap_mean=0.01)
    assert u.flip == pytest.approx(0.3085375, abs=1e-6)  # Φ(−0.5)
    assert u.n_move == pytest.approx(2 * 0.1704, abs=2e-3)  # 2Φ(−log 1.1 / 0.1)


def test_most_draws_choosing_the_rival_is_a_flip_chance_above_half_and_a_risk_below():
    cov = np.diag([1e-4, 1e-2, 0.02**2])
    u = uncertainty(cov, gap_mean=-0.01)  # the draws lean to the rival
    assert u.flip == pytest.approx(1 - 0.3085375, abs=1e-6)  # Φ(0.5)
    # the value counts the risk of either answer being wrong: a run that settles it towards
    # the rival is worth as much as one that settles it towards the plan
    assert plan_value(1.0, u.flip, 0.0, 1.0) == pytest.approx(0.3085375, abs=1e-6)
    assert plan_value(1.0, 0.999, 0.0, 1.0) == pytest.approx(0.001)


def test_the_gaps_centre_puts_the_rivals_share_of_draws_in_its_tail():
    """Skewed gaps (most just on the rival's side, a few far on the plan's): the normal with
    their sd, centred on their mean, gives the rival less than half, against its 60%."""
    from scipy.stats import norm

    from cdlaw.design.targets import gap_centre

    # 60% of the draws (gap < 0) choose the rival, by little; the mean is on the plan's side
    gaps = np.concatenate([np.full(60, -0.001), np.linspace(0.001, 0.002, 26), np.full(14, 0.2)])
    centre, sd = gap_centre(gaps), gaps.std(ddof=1)
    assert norm.cdf(-centre / sd) == pytest.approx((gaps < 0).mean(), abs=1e-12)
    assert norm.cdf(-gaps.mean() / sd) < 0.5 < (gaps < 0).mean()
    assert gap_centre(np.full(5, 0.01)) == 0.01 and gap_centre(np.zeros(5)) == 0.0


# ---------------------------------------------------------------------------------------
# Sweep files of a batch.
# ---------------------------------------------------------------------------------------


def test_zipped_axes_may_repeat_values_but_not_entries():
    text = toml_text(
        {
            "name": "b",
            "grid": {
                "size": ["20K", "20K", "60K"],
                "fresh_tokens": [4096, 8192, 4096],
                "strategy": ["repetition", "paraphrase", "repetition"],
                "derived_ratio": [1.0, 2.0, 0.0],
                "zip": [["size", "fresh_tokens", "strategy", "derived_ratio"]],
            },
            "data": {"corpus": "embedded", "vocab_size": 512, "val_tokens": 4096},
            "model": {"seq_len": 64},
        }
    )
    runs = parse_sweep(text).runs()
    got = sorted((r.model.size, r.fresh_tokens, r.derived_tokens, r.strategy) for r in runs)
    assert got == [("20K", 4096, 4096, "repetition"), ("20K", 8192, 16384, "paraphrase"),
                   ("60K", 4096, 0, "none")]  # fmt: skip
    twice = (
        text.replace("4096, 8192, 4096]", "4096, 4096, 4096]")
        .replace('"paraphrase", "repetition"]', '"repetition", "repetition"]')
        .replace("[1.0, 2.0, 0.0]", "[1.0, 1.0, 0.0]")
    )
    with pytest.raises(BadInput, match="twice"):
        parse_sweep(twice)
    with pytest.raises(BadInput, match="twice"):  # not zipped: still refused
        parse_sweep(
            text.replace('zip = [["size", "fresh_tokens", "strategy", "derived_ratio"]]', "")
        )


def test_sweep_files_round_trip_floats_bit_for_bit():
    x = 2.6798064099910333
    assert parse_sweep(
        toml_text(
            {
                "grid": {"size": ["20K"], "fresh_tokens": [4096], "derived_ratio": [x]},
                "data": {"vocab_size": 512},
                "model": {"seq_len": 64},
            }
        )
    ).ratios["repetition"][1] == (x,)


# ---------------------------------------------------------------------------------------
# next_batch on a simulated seed grid.
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    out = tmp_path_factory.mktemp("next")
    run_sweep(SEED, out, SIMULATED)
    folder = out / "qin2026-seed"
    table = load_runs(folder)
    fit = fit_law(table, "cd", source=str(folder), **FAST)
    write_fit(fit, folder / "fit.json", folder / "fit_rows.parquet")
    return folder, table, fit


def test_a_batch_is_unrun_cells_whose_sweep_file_gives_exactly_them(seeded):
    _, table, fit = seeded
    batch = next_batch(table, fit, load_sweep(GRID), 1e21, 5e9, max_runs=5, name="next-1")
    assert 1 <= len(batch.chosen) <= 5 and len(batch.reasons) == len(batch.chosen)
    done = set(zip(table["n_params"], table["fresh_tokens"], table["derived_tokens"], strict=True))
    for c in batch.chosen:
        assert (c.n_params, c.run.fresh_tokens, c.run.derived_tokens) not in done
    back = parse_sweep(batch.text, default_name="next-1")
    assert {r.run_id for r in back.runs(100278)} == {c.run.run_id for c in batch.chosen}
    assert back.name == "next-1" and {r.train.lr for r in back.runs(100278)} == {4e-3}
    # each pick narrows the plan's loss interval, and the batch costs what its picks cost
    sds = [batch.picks[0].before.loss_sd] + [p.after.loss_sd for p in batch.picks]
    assert all(b > a for a, b in zip(sds[1:], sds[:-1], strict=True))
    assert batch.flops == pytest.approx(sum(c.flops for c in batch.chosen))
    # with only a run count, a batch costs at most what the runs so far cost
    spent = (6.0 * table["n_params"] * (table["fresh_tokens"] + table["derived_tokens"])).sum()
    assert batch.flops <= spent


def test_the_flip_chance_before_any_run_is_the_plans_bootstrap_share(seeded):
    _, table, fit = seeded
    batch = next_batch(table, fit, load_sweep(GRID), 1e21, 5e9, max_runs=1)
    p = plan(load_law(str(seeded[0] / "fit.json")), 1e21, 5e9)
    assert p.strategy_share is not None and len(p.strategy_share) > 1
    rival = 1 - p.strategy_share[p.strategy]
    assert batch.picks[0].before.flip == pytest.approx(rival, abs=0.5 / FAST["bootstrap"])


def test_a_flop_budget_is_kept(seeded):
    _, table, fit = seeded
    batch = next_batch(table, fit, load_sweep(GRID), 1e21, 5e9, max_flops=3e18)
    assert 0 < batch.flops <= 3e18


def test_no_run_dearer_than_the_budget_it_plans_is_chosen(seeded):
    _, table, fit = seeded
    budget = 3e18
    batch = next_batch(table, fit, load_sweep(GRID), budget, 5e9, max_runs=4)
    assert batch.chosen and max(c.flops for c in batch.chosen) <= budget
    assert any("cost more than the budget itself (3e+18 FLOPs)" in w for w in batch.warnings)
    # nor a batch dearer than it, unless --flops asks for one, and then it says so
    assert batch.flops <= budget and not any("the batch costs" in w for w in batch.warnings)
    dear = next_batch(table, fit, load_sweep(GRID), budget, 5e9, max_flops=4 * budget)
    assert dear.flops > budget, "the test needs a batch above the budget"
    assert any(w.startswith(f"the batch costs {dear.flops:.3g} FLOPs, more than the 3e+18")
               for w in dear.warnings)  # fmt: skip
    with pytest.raises(BadInput, match=r"every candidate run costs more than the budget \(1e\+14"):
        next_batch(table, fit, load_sweep(GRID), 1e14, 5e9, max_runs=4)


def test_a_plan_beyond_its_strategys_runs_gets_the_cheapest_run_at_its_ratio_first(seeded):
    # The seed's paraphrase runs stop at r = 4 and the plan for 1e20 wants r ≈ 7: the
    # refits all extrapolate the same way, so the batch must start with a run that tests it.
    _, table, fit = seeded
    batch = next_batch(table, fit, load_sweep(GRID), 1e20, 2e9, max_runs=3)
    best = batch.plan.best
    assert best.strategy == "paraphrase" and best.derived_ratio > 4.5
    first = batch.chosen[0]
    r = first.run.derived_tokens / first.run.fresh_tokens
    assert first.origin == "plan paraphrase" and r == pytest.approx(best.derived_ratio, rel=1e-3)
    assert first.run.fresh_tokens / first.n_params == pytest.approx(
        best.fresh_tokens / best.n_params, rel=1e-3
    )
    assert (
        "plan check" in batch.reasons[0]
        and "beyond every paraphrase run (r ≤ 4)" in batch.reasons[0]
    )
    assert not any("plan check" in why for why in batch.reasons[1:])
    # a batch too small for that run says so instead
    small = next_batch(table, fit, load_sweep(GRID), 1e20, 2e9, max_flops=0.5 * first.flops)
    assert not any("plan check" in why for why in small.reasons)
    assert any("no run at the plan's D′/D fits" in w for w in small.warnings)


def test_the_plan_check_asks_for_nothing_inside_the_runs_and_names_an_unpinned_rstar(seeded):
    import dataclasses

    from cdlaw.design.batch import plan_check
    from cdlaw.design.candidates import candidates, done_cells
    from cdlaw.plan.source import PlanningLaw

    _, table, fit = seeded
    source = dataclasses.replace(PlanningLaw.of_fit(fit), at_bound=())
    current = plan(source, 1e20, 2e9)
    r = current.best.derived_ratio
    cands = candidates(load_sweep(GRID), 100278, done_cells(table), current.candidates)
    at_r = [c for c in cands if c.origin == "plan paraphrase"
            and abs(c.run.derived_tokens / c.run.fresh_tokens - r) < 1e-3 * r]  # fmt: skip
    check, beyond = plan_check(current, source, cands, 1e30)
    assert len(at_r) >= 3 and cands[check].flops == min(c.flops for c in at_r)
    # the cheapest that fits the batch's FLOPs, and none when none fits
    second = sorted(c.flops for c in at_r)[1]
    assert cands[plan_check(current, source, cands, second)[0]].flops <= second
    assert plan_check(current, source, cands, 1.0) == (None, beyond)
    # inside the paraphrase runs' ratios the fit saw: nothing to check, unless its R* sits
    # at a bound; another strategy's runs reaching r = 16 do not count
    rng = source.data_range
    assert rng.strategies["paraphrase"].derived_ratio == (0.0, 4.0)
    sixteen = DataRange(derived_ratio=(0, 16))
    other = dataclasses.replace(source, data_range=dataclasses.replace(
        rng, derived_ratio=(0, 16), strategies={**rng.strategies, "repetition": sixteen}))  # fmt: skip
    assert plan_check(current, other, cands, 1e30)[1] == beyond
    wide = dataclasses.replace(source, data_range=dataclasses.replace(
        rng, strategies={**rng.strategies, "paraphrase": sixteen}))  # fmt: skip
    assert plan_check(current, wide, cands, 1e30) == (None, "")
    stuck = dataclasses.replace(wide, at_bound=("paraphrase.sigma (lower bound)",))
    check, why = plan_check(current, stuck, cands, 1e30)
    assert check is not None and why == "paraphrase.sigma at a bound, paraphrase's R* is not pinned"
    for note in ("E (lower bound)", "repetition.rho (upper bound)"):  # not the plan's R*
        assert plan_check(current, dataclasses.replace(wide, at_bound=(note,)),
                          cands, 1e30) == (None, "")  # fmt: skip


def test_a_fit_without_bootstrap_says_how_to_get_one(seeded):
    _, table, _ = seeded
    bare = fit_law(table, "cd", n_starts=64)
    with pytest.raises(BadInput, match="--bootstrap"):
        next_batch(table, bare, load_sweep(GRID), 1e21, 5e9)


def test_a_runs_folder_reads_its_rounds(seeded, tmp_path):
    folder, table, fit = seeded
    batch = next_batch(table, fit, load_sweep(GRID), 1e21, 5e9, max_runs=3, name="next-1")
    import shutil

    copy = tmp_path / "runs"
    shutil.copytree(folder, copy)
    (copy / "next-1.toml").write_text(batch.text)
    run_sweep(copy / "next-1.toml", copy, SIMULATED)
    both = load_runs(copy)
    assert len(both) == len(table) + len(batch.chosen)
    assert set(both["run_id"]) >= {c.run.run_id for c in batch.chosen}


# ---------------------------------------------------------------------------------------
# The adaptive loop.
# ---------------------------------------------------------------------------------------


def test_the_adaptive_loop_writes_rounds_narrows_the_plan_and_resumes(tmp_path):
    kw = dict(until=1e-6, max_flops=2e20, round_runs=6, max_rounds=2, grid_path=GRID,
              sweep_options=SIMULATED, **FAST)  # fmt: skip
    res = run_adaptive(SEED, tmp_path, 1e21, 5e9, **kw)
    assert [r.round for r in res.rounds] == [0, 1, 2] and res.stopped == "2 rounds done"
    rounds = pd.read_parquet(res.folder / "rounds.parquet")
    assert list(rounds["round"]) == [0, 1, 2]
    assert (res.folder / "next-1").is_dir() and (
        res.folder / "next-2" / "summary.parquet"
    ).is_file()
    assert rounds["runs"].is_monotonic_increasing and rounds["flops"].iloc[-1] <= 2e20 * 1.0001
    assert len(load_runs(res.folder)) == rounds["runs"].iloc[-1]
    assert rounds["width_nats"].iloc[-1] < rounds["width_nats"].iloc[0]
    # how settled the strategy is, as `cdlaw plan` on the round's fit says it
    last = load_law(str(res.folder / "fit.json"))
    shares = plan(last, 1e21, 5e9).strategy_share
    # the last plan's extrapolation warnings come back with the loop (the CLI says them)
    assert res.warnings == plan(last, 1e21, 5e9).warnings and res.warnings
    assert rounds["strategy_agreement"].iloc[-1] == shares[rounds["strategy"].iloc[-1]]
    assert rounds["strategy_agreement"].between(0, 1).all()
    # killed and restarted: the batch files are reused, no run trains again
    before = {p.name: p.stat().st_mtime_ns for p in res.folder.glob("next-*.toml")}
    again = run_adaptive(SEED, tmp_path, 1e21, 5e9, **kw)
    assert {p.name: p.stat().st_mtime_ns for p in res.folder.glob("next-*.toml")} == before
    assert again.rounds[-1].runs == res.rounds[-1].runs


def test_the_adaptive_loop_stops_when_the_interval_is_narrow_enough(tmp_path):
    # U 2e10: the plan's paraphrase ratio (≈ 0.4) lies inside the seed's paraphrase runs
    res = run_adaptive(SEED, tmp_path, 1e21, 2e10, until=10.0, grid_path=GRID,
                       sweep_options=SIMULATED, **FAST)  # fmt: skip
    assert len(res.rounds) == 1 and "narrower than 10" in res.stopped


def test_a_narrow_interval_beyond_the_strategys_runs_does_not_end_the_loop(tmp_path):
    # U 5e9: the plan wants paraphrase r ≈ 4.5, past the seed's r ≤ 4, where every refit
    # extrapolates alike; the loop goes on, and its round starts with the plan check
    res = run_adaptive(SEED, tmp_path, 1e21, 5e9, until=10.0, max_rounds=1, round_runs=2,
                       grid_path=GRID, sweep_options=SIMULATED, **FAST)  # fmt: skip
    assert res.rounds[0].width_nats < 10 and len(res.rounds) == 2
    assert "plan check" in (res.folder / "next-1.toml").read_text()


def test_a_narrow_interval_on_an_unpinned_rstar_does_not_end_the_loop(tmp_path, monkeypatch):
    # As if every round's fit left both strategies' sigma at a bound: the refits then agree
    # with each other for no reason, and a narrow interval proves nothing.
    import dataclasses

    import cdlaw.design.adaptive as adaptive

    def unpinned(*args, **kwargs):
        fit = fit_law(*args, **kwargs)
        stuck = ("repetition.sigma (lower bound)", "paraphrase.sigma (upper bound)")
        return dataclasses.replace(
            fit, optimizer=dataclasses.replace(fit.optimizer, at_bound=stuck)
        )

    monkeypatch.setattr(adaptive, "fit_law", unpinned)
    res = run_adaptive(SEED, tmp_path, 1e21, 5e9, until=10.0, max_rounds=1, round_runs=2,
                       grid_path=GRID, sweep_options=SIMULATED, **FAST)  # fmt: skip
    assert len(res.rounds) == 2 and res.stopped == "1 round done"  # not "narrower than 10"
    assert res.rounds[0].width_nats < 10
    assert any("not pinned" in w for w in res.warnings)


# ---------------------------------------------------------------------------------------
# The CLI: one sentence and exit 2 for bad input, nothing written.
# ---------------------------------------------------------------------------------------


def cdlaw(*args):
    return subprocess.run(
        [sys.executable, "-m", "cdlaw", *map(str, args)], capture_output=True, text=True
    )


def test_cli_next_writes_the_batch_and_refuses_bad_input(seeded):
    folder, _, _ = seeded
    # the seed's fit plans 1e21 at 107× its largest size: beyond the limit, so --extrapolate
    common = [folder, "--budget-flops", "1e21", "--unique-tokens", "5e9", "--grid", GRID,
              "--extrapolate"]  # fmt: skip
    for extra, words in ((["--runs", "0"], "--runs 0"), (["--flops", "10"], "buys no candidate")):
        r = cdlaw("next", *common, *extra)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1
    table = [folder / "summary.parquet", *common[1:5], "--extrapolate", "--fit",
             folder / "fit.json"]  # fmt: skip
    r = cdlaw("next", *table)  # a table has no sweep file of its own
    assert r.returncode == 2 and "is a table" in r.stderr and "--grid sweeps/" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list(folder.glob("next-*.toml")) and not list(folder.glob("*-next-*.toml"))
    r = cdlaw("next", *common, "--runs", "2", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert len(got["runs"]) == 2 and Path(got["file"]) == folder / "next-1.toml"
    r = cdlaw("adapt", SEED, "--unique-tokens", "5e9", "--executor", "simulate",
              "--law", "qin2026", "--out", folder.parent / "other")  # fmt: skip
    assert r.returncode == 2 and "--budget-flops" in r.stderr
    assert not (folder.parent / "other").exists()


@pytest.mark.parametrize("option", ["--adaptive", "--budget-flops", "--grid"])
def test_cli_sweep_points_the_adaptive_options_at_cdlaw_adapt(tmp_path, option):
    r = cdlaw("sweep", SEED, option, *(["1e21"] if option != "--adaptive" else []),
              "--executor", "simulate", "--law", "qin2026", "--out", tmp_path / "runs")  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"`cdlaw sweep` has no {option}: the adaptive loop is `cdlaw adapt " in r.stderr
    assert not (tmp_path / "runs").exists()


def test_cli_adapt_runs_its_rounds(tmp_path):
    # every option `cdlaw adapt` hands the loop must reach it (--pack once did not)
    # (U 2e10: the plan's ratio lies inside the seed's runs, so a wide --until stops it)
    r = cdlaw("adapt", SEED, "--budget-flops", "1e21", "--unique-tokens", "2e10",
              "--until", "10", "--executor", "simulate", "--law", "qin2026", "--noise", "0.02",
              "--out", tmp_path, "--json", "--extrapolate")  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert "narrower than 10" in got["stopped"] and len(got["rounds"]) == 1
    assert got["warnings"] and all("fitted" in w for w in got["warnings"])
    assert all(f"warning: the last plan: {w}" in r.stderr for w in got["warnings"])
    assert (tmp_path / "qin2026-seed" / "rounds.parquet").is_file()


def test_a_grid_that_zips_lr_with_size_gives_each_picked_run_its_own_lr(tmp_path):
    # drawn from the demo's own fit: the CD paper's law scores these tiny models above ln V
    law = FitResult.read(ROOT / "tests" / "fit" / "golden" / "demo-runs.fit.json").law
    demo_law = SweepOptions(executor="simulate", simulation=Simulation(law, "demo", noise=0.02))
    run_sweep(ROOT / "sweeps" / "demo-seed.toml", tmp_path, demo_law)
    table = load_runs(tmp_path / "demo-seed")
    fit = fit_law(table, "cd", **FAST)
    demo = load_sweep(ROOT / "sweeps" / "demo.toml")
    batch = next_batch(table, fit, demo, 2e12, 96e3, max_runs=6, name="next-1")
    lr_of = {"20K": 3e-2, "60K": 2e-2, "200K": 1e-2}
    back = parse_sweep(batch.text, default_name="next-1").runs()
    assert {r.run_id for r in back} == {c.run.run_id for c in batch.chosen}
    assert all(r.train.lr == lr_of[r.model.size] for r in back)
    assert all(r.seed == 0 for r in back)


def test_cells_around_the_plan_go_above_the_grid_where_its_lr_is_one_for_every_size(seeded):
    import dataclasses

    from cdlaw.design.candidates import batch_sweep_text, candidates, done_cells, sizes_above
    from cdlaw.plan.source import PlanningLaw
    from cdlaw.shapes import count_params, named_shape

    _, table, fit = seeded
    grid = dataclasses.replace(load_sweep(GRID), name="next-1")  # every size at lr 4e-3
    top = count_params(named_shape("olmo3_600M"), 100278).n_params
    above = sizes_above(grid, 100278, 5e9)
    targets = [float(z[:-1]) * {"M": 1e6, "B": 1e9}[z[-1]] for z in above]
    assert targets == pytest.approx([2 * top, 4 * top, 8 * top], rel=5e-3) and 16 * top > 5e9
    assert sizes_above(grid, 100278, 1.5 * top) == []
    # a grid whose lr changes with size gives a new size no lr to use: nothing above it
    assert sizes_above(load_sweep(ROOT / "sweeps" / "demo.toml"), 512, 1e9) == []
    # the cells there: at the plan's tokens per parameter, the grid's lr, a sweep file
    # that gives them back
    current = plan(PlanningLaw.of_fit(fit), 1e21, 5e9)
    best = current.candidates["paraphrase"]
    cands = candidates(grid, 100278, done_cells(table), current.candidates)
    new = [c for c in cands if c.run.model.size in sizes_above(grid, 100278, best.n_params)]
    assert new and all(c.origin.startswith("plan") and c.run.train.lr == 4e-3 for c in new)
    para = [c for c in new if c.origin == "plan paraphrase"]
    assert all(c.run.fresh_tokens / c.n_params == pytest.approx(
        best.fresh_tokens / best.n_params, rel=1e-3) for c in para)  # fmt: skip
    text = batch_sweep_text(grid, "next-1", para[:3], ["three runs above the grid"])
    assert {r.run_id for r in parse_sweep(text, default_name="next-1").runs(100278)} == {
        c.run.run_id for c in para[:3]
    }


# ---------------------------------------------------------------------------------------
# Any number of strategies: a third, declared one, simulated, fitted and designed for.
# ---------------------------------------------------------------------------------------

THIRD = {"K": math.exp(4.0), "rho": -0.15, "sigma": -0.05}  # worth most at large N


def with_third(path: Path, name: str) -> str:
    """A sweep file of `path` with a declared strategy `self-distill` beside the built-ins."""
    text = path.read_text().replace(f'name = "{path.stem}"', f'name = "{name}"')
    text = text.replace('strategy = ["repetition", "paraphrase"]',
                        'strategy = ["repetition", "paraphrase", "self-distill"]')  # fmt: skip
    text = text.replace(
        "[grid.paraphrase]", "[grid.self-distill]\npasses = [0, 4]\n[grid.paraphrase]", 1
    )
    return text + '\n[derived.self-distill]\nfiles = "/nowhere/self-distill"  # never read\n'


def test_a_third_strategy_is_simulated_fitted_and_designed_for(tmp_path):
    from cdlaw.law import Law

    qin = PRESETS["qin2026"]
    law = Law("cd", qin.params, {**qin.strategies, "self-distill": THIRD})
    seed = tmp_path / "seed3.toml"
    seed.write_text(with_third(SEED, "seed3"))
    simulated = SweepOptions(executor="simulate", simulation=Simulation(law, "three", noise=0.02))
    run_sweep(seed, tmp_path / "runs", simulated)
    folder = tmp_path / "runs" / "seed3"
    table = load_runs(folder)
    assert set(table["strategy"]) == {"none", "repetition", "paraphrase", "self-distill"}
    fit = fit_law(table, "cd", source=str(folder), **FAST)
    assert list(fit.law.strategies) == ["repetition", "paraphrase", "self-distill"]
    grid = tmp_path / "grid3.toml"
    grid.write_text(with_third(GRID, "grid3"))
    batch = next_batch(table, fit, load_sweep(grid), 1e21, 5e9, max_runs=6, name="next-1")
    assert 1 <= len(batch.chosen) <= 6
    back = parse_sweep(batch.text, default_name="next-1")
    assert {r.run_id for r in back.runs(100278)} == {c.run.run_id for c in batch.chosen}
    from cdlaw.design.candidates import batch_sweep_text, candidates

    cands = candidates(load_sweep(grid), 100278, set(), plan(fit.law, 1e21, 5e9).candidates)
    assert {"repetition", "paraphrase", "self-distill"} <= {c.run.strategy for c in cands}
    # a batch with a run of the third strategy declares it; one without it does not
    mine = [c for c in cands if c.run.strategy == "self-distill"][:1]
    others = [c for c in cands if c.run.strategy == "repetition"][:1]
    for chosen, declared in ((mine + others, True), (others, False)):
        text = batch_sweep_text(load_sweep(grid), "grid3", chosen, [])  # the candidates' name
        assert ("self-distill" in parse_sweep(text).derived) == declared


def test_a_batch_of_a_grid_with_data_paraphrases_declares_them_the_one_way(caplog):
    from cdlaw.design.candidates import batch_sweep_text, candidates

    text = GRID.read_text()
    old = text.replace("[derived.paraphrase]\n", "[unused]\n").replace(
        "[data]\n", '[data]\nparaphrases = "/path/to/paraphrases"\n'
    )
    old = old.replace('[unused]\nfiles = "/path/to/paraphrases"', "")
    grid = parse_sweep(old, default_name="qin2026-grid")
    assert grid.data.paraphrases == "/path/to/paraphrases"
    cands = candidates(grid, 100278, set(), plan(PRESETS["qin2026"], 1e21, 5e9).candidates)
    chosen = [c for c in cands if c.run.strategy == "paraphrase"][:2]
    caplog.set_level("INFO", logger="cdlaw")
    caplog.clear()
    batch = batch_sweep_text(grid, "qin2026-grid", chosen, [])  # parsed back: the same ids
    assert "paraphrases =" not in batch and '[derived.paraphrase]\nfiles = "/path' in batch
    assert caplog.messages == []  # no deprecation note on the batch it wrote


def test_no_run_is_chosen_where_the_law_predicts_worse_than_guessing(seeded):
    """The plan's cells scaled down to 14M at its few tokens per parameter would score
    above ln V under the law: past where it means anything, they are left out."""
    _, table, fit = seeded
    batch = next_batch(table, fit, load_sweep(GRID), 1e21, 5e9, max_runs=6)
    uniform = math.log(100278)
    assert all(fit.law.loss(*c.cell) <= uniform for c in batch.chosen)
    assert any("above ln V = 11.52" in w for w in batch.warnings), batch.warnings
