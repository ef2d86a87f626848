"""`cdlaw adapt SEED_SWEEP_FILE`: a seed grid, then fit → next → sweep until the plan is known.

    OUT/<sweep>/               the seed grid's runs folder (an ordinary sweep)
    OUT/<sweep>/next-k.toml    round k's batch, as `cdlaw next` writes it
    OUT/<sweep>/next-k/        round k's runs (an ordinary runs folder)
    OUT/<sweep>/fit.json       the latest fit, of every round's runs (cdlaw fit reads them all)
    OUT/<sweep>/rounds.parquet one row per round: runs, FLOPs, plan, its 95% interval, and how
                               many refits' own plans pick its strategy

It stops when the plan's 95% loss interval is narrower than `until` nats, when the
experiment's FLOPs (what its runs trained, shared prefixes counted once) reach
`max_flops`, or after `max_rounds` rounds. Killed, it resumes: finished rounds are
skipped (their batch files are reused, never chosen again) and the sweep of an
unfinished round resumes as any sweep does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.design.batch import next_batch, plan_doubt, trained_flops
from cdlaw.fit.io import FitResult, write_fit
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.plan.planner import plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.spec import load_sweep
from cdlaw.system.atomic import write_parquet_atomic, write_text_atomic
from cdlaw.system.errors import BadInput
from cdlaw.units import counted

ROUNDS_FILE = "rounds.parquet"


@dataclass(frozen=True)
class Round:
    """One row of rounds.parquet: the state after a round's runs were fitted."""

    round: int
    sweep: str  # the seed sweep's name, or next-k
    runs: int  # runs fitted so far
    round_flops: float
    flops: float  # all rounds so far
    n_params: float
    strategy: str
    predicted_loss: float
    ci_low: float
    ci_high: float
    width_nats: float
    rmse_log: float
    # the share of bootstrap refits whose own plan picks `strategy` (NaN: one strategy, or
    # a plan without derived tokens): how settled the strategy decision is
    strategy_agreement: float = math.nan


@dataclass(frozen=True)
class Adaptive:
    folder: Path
    rounds: list[Round]
    stopped: str  # why the loop ended
    fit: FitResult
    warnings: tuple[str, ...] = ()  # the last plan's: where it leaves the fitted range


def check_adaptive(budget_flops, unique_tokens, until, max_flops, round_runs, max_rounds) -> None:
    for name, v in (("--budget-flops", budget_flops), ("--unique-tokens", unique_tokens),
                    ("--until", until)):  # fmt: skip
        if v is None or not (math.isfinite(v) and v > 0):
            raise BadInput(f"cdlaw adapt needs {name} > 0 (got {v})")
    if max_flops is not None and not (math.isfinite(max_flops) and max_flops > 0):
        raise BadInput(f"--experiment-flops must be > 0, got {max_flops}")
    if round_runs < 1:
        raise BadInput(f"--round-runs must be at least 1, got {round_runs}")
    if max_rounds < 0:
        raise BadInput(f"--max-rounds must be ≥ 0, got {max_rounds}")


def run_adaptive(
    sweep_path: str | Path,
    out: str | Path,
    budget_flops: float,
    unique_tokens: float,
    until: float,
    max_flops: float | None = None,
    round_runs: int = 4,
    max_rounds: int = 10,
    law: str = "cd",
    bootstrap: int = 50,
    n_starts: int = 512,
    seed: int = 0,
    grid_path: str | Path | None = None,
    sweep_options: SweepOptions = SweepOptions(),
    on_event: Callable | None = None,
    on_round: Callable[[Round], None] | None = None,
    extrapolate: bool = True,
) -> Adaptive:
    """The loop in the module doc; every sweep through run_sweep (with `sweep_options`,
    which must select every run and restart none), every fit through fit_law, every plan
    through the guard of `cdlaw plan`: with extrapolate False a round whose plan is beyond
    the extrapolation limit ends the loop with BeyondLimit (its runs and fit are kept; the
    loop resumes from them)."""
    check_adaptive(budget_flops, unique_tokens, until, max_flops, round_runs, max_rounds)
    if bootstrap < 10:
        raise BadInput(f"--bootstrap {bootstrap}: the loop needs at least 10 refits per round")
    if sweep_options.only or sweep_options.restart:
        raise BadInput("the adaptive loop runs its rounds itself: drop --only and --restart")
    seed_sweep = load_sweep(sweep_path)
    # the grid later rounds choose from (its settings, sizes and cells); the seed's own by default
    grid = load_sweep(grid_path) if grid_path is not None else seed_sweep
    run_sweep(sweep_path, out, sweep_options, on_event=on_event)
    folder = Path(out) / seed_sweep.name
    rounds: list[Round] = []
    fit: FitResult | None = None
    k = 0
    while True:
        table = load_runs(folder)
        fit = fit_law(table, law, bootstrap=bootstrap, n_starts=n_starts, seed=seed,
                      source=str(folder), warm_starts=(fit.law,) if fit is not None else (),
                      )  # fmt: skip
        write_fit(fit, folder / "fit.json", folder / "fit_rows.parquet")
        source = PlanningLaw.of_fit(fit, str(folder))
        now = plan(source, budget_flops, unique_tokens, extrapolate=extrapolate)
        name = seed_sweep.name if k == 0 else f"next-{k}"
        row = _round(k, name, table, fit, now, rounds[-1].flops if rounds else 0.0)
        rounds.append(row)
        write_parquet_atomic(folder / ROUNDS_FILE, pd.DataFrame([asdict(r) for r in rounds]))
        if on_round is not None:
            on_round(row)
        stopped = _stop(row, now, source, until, max_flops, k >= max_rounds, max_rounds)
        if stopped:
            break
        k += 1
        batch_file = folder / f"next-{k}.toml"
        if not batch_file.is_file():  # a resumed loop reuses the batch it chose before
            # each round may spend its share of what is left of the experiment's FLOPs
            left = None if max_flops is None else (max_flops - row.flops) / (max_rounds - k + 1)
            try:
                batch = next_batch(table, fit, grid, budget_flops, unique_tokens,
                                   max_runs=round_runs, max_flops=left, name=batch_file.stem,
                                   current=now)  # fmt: skip
            except BadInput as e:
                stopped = f"no next round: {e}"
                break
            write_text_atomic(batch_file, batch.text)
        run_sweep(batch_file, folder, sweep_options, on_event=on_event)
    return Adaptive(folder, rounds, stopped, fit, tuple(now.warnings))


def _round(k: int, name: str, table, fit: FitResult, now, done_flops: float) -> Round:
    """Round k's row: the runs fitted so far, what they trained, and the plan now."""
    lo, hi = now.predicted_loss_ci95 or (math.nan, math.nan)
    flops = trained_flops(table)
    return Round(k, name, len(table), flops - done_flops, flops, now.n_params, now.strategy,
                 now.predicted_loss, lo, hi, hi - lo, fit.rmse_log,
                 _nan_if_none(now.strategy_agreement))  # fmt: skip


def _stop(
    row: Round, now, source, until: float, max_flops: float | None, last: bool, max_rounds: int
) -> str:
    """Why the loop ends after this round ("" if it goes on)."""
    # A narrow interval ends the loop only where the plan's ratio is inside its
    # strategy's runs and the fit pins that strategy's R*: refits that extrapolate
    # alike, or sit at the same bound, agree with each other and prove nothing.
    narrow = np.isfinite(row.width_nats) and row.width_nats < until
    if narrow and not plan_doubt(now, source):
        return f"the plan's 95% interval ({row.width_nats:.3g} nats) is narrower than {until:g}"
    if max_flops is not None and row.flops >= max_flops:
        return f"the experiment's {max_flops:.3g} FLOPs are spent ({row.flops:.3g})"
    if last:
        return f"{counted(max_rounds, 'round')} done"
    return ""


def _nan_if_none(x: float | None) -> float:
    return math.nan if x is None else float(x)
