"""`cdlaw next`: the runs worth training next for one question, written as a sweep file.

The question is the plan for a budget C and U unique tokens. From the current fit and its
bootstrap, every candidate run (cdlaw.design.candidates) is scored by how much it would
narrow the plan's uncertainty per FLOP it costs (cdlaw.design.value), a batch is chosen
greedily, and the batch is written as a sweep file `cdlaw sweep` runs as is. Each pick
comes with one line saying why.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pandas as pd

from cdlaw.design.candidates import (
    Candidate,
    batch_sweep_text,
    candidates,
    done_cells,
    marginal_costs,
    training_flops,
)
from cdlaw.design.targets import build_ensemble
from cdlaw.design.value import Pick, choose
from cdlaw.fit.io import FitResult
from cdlaw.plan.checks import strategy_bounds
from cdlaw.plan.guard import fitted_range
from cdlaw.plan.planner import plan
from cdlaw.plan.result import Plan
from cdlaw.plan.source import PlanningLaw
from cdlaw.strategies import NONE
from cdlaw.sweep.grid import SweepConfig
from cdlaw.system.errors import BadInput
from cdlaw.units import format_apart, format_number, plain

MIN_DRAWS = 10  # fewer bootstrap draws than this cannot say which runs matter
DEFAULT_RUNS = 4  # with neither --runs nor --flops
NOISE_FLOOR = 1e-3  # a fit with no residual at all would make every run look decisive


@dataclass(frozen=True)
class NextBatch:
    """A chosen batch, why each run is in it, and its sweep file."""

    name: str
    plan: Plan
    chosen: list[Candidate]
    picks: list[Pick]
    reasons: list[str]
    text: str
    flops: float  # the batch's FLOPs, shared prefixes counted once
    n_candidates: int
    n_draws: int
    noise_sd: float
    warnings: list[str] = field(default_factory=list)
    # what training them costs with attention too (`cdlaw sweep --dry-run`'s count);
    # `flops` is the law's 6·N per token, as the table's runs are counted
    training_flops: float = math.nan

    def to_dict(self) -> dict:
        last = self.picks[-1].after if self.picks else None
        first = self.picks[0].before if self.picks else None
        return {
            "name": self.name,
            "plan": self.plan.to_dict(),
            "flops": self.flops,
            "training_flops": self.training_flops,
            "n_candidates": self.n_candidates,
            "n_draws": self.n_draws,
            "noise_sd": self.noise_sd,
            "loss_sd_before": first.loss_sd if first else None,
            "loss_sd_after": last.loss_sd if last else None,
            "flip_before": first.flip if first else None,
            "flip_after": last.flip if last else None,
            "runs": [
                {
                    "run_id": c.run.run_id,
                    "size": c.run.model.size,
                    "n_params": c.n_params,
                    "fresh_tokens": c.run.fresh_tokens,
                    "derived_tokens": c.run.derived_tokens,
                    "strategy": c.run.strategy,
                    "origin": c.origin,
                    "flops": p.flops,
                    "loss_sd_after": p.after.loss_sd,
                    "flip_after": p.after.flip,
                    "n_move_after": p.after.n_move,
                    "why": why,
                }
                for c, p, why in zip(self.chosen, self.picks, self.reasons, strict=True)
            ],
            "warnings": self.warnings,
        }


def _reason(c: Candidate, p: Pick, check: str = "") -> str:
    b, a = p.before, p.after
    r = c.run.derived_tokens / c.run.fresh_tokens
    what = f"{c.run.model.size} {c.run.strategy} D={format_number(c.run.fresh_tokens)} r={r:.3g}"
    origin = c.origin
    if c.run.strategy == NONE and origin.startswith("plan "):  # the plan's D/N, one epoch
        origin = f"{origin}'s one-epoch cell"
    origin = f"{origin}; {check}" if check else origin
    parts = [f"plan-loss sd {b.loss_sd:.2%} → {a.loss_sd:.2%}"]
    if b.flip > 0.005 or a.flip > 0.005:
        parts.append(f"strategy flip {b.flip:.0%} → {a.flip:.0%}")
    if b.n_move > 0.005:
        parts.append(f"N* off >10% {b.n_move:.0%} → {a.n_move:.0%}")
    return f"{what} ({origin}): {', '.join(parts)}; {p.flops:.3g} FLOPs"


def plan_doubt(current: Plan, source: PlanningLaw) -> str:
    """Why the bootstrap cannot be trusted about the plan's own ratio ("" when it can).

    Where the plan's D′/D lies beyond every run of its strategy the fit saw, the refits
    all extrapolate R* with the same fitted shape; where the fit left a parameter of that
    strategy's R* at a bound, they all sit at that bound. Either way they agree about the
    plan's ratio for no reason: its interval is narrow and a run there looks worth nothing.
    The range is the fit's own (the one the plan warns with): the ensemble knows no more.
    """
    best = current.best
    s = best.strategy
    if s == NONE or best.derived_tokens <= 0:
        return ""
    bounds = fitted_range(source, s).get("derived_ratio")
    r_max = float(bounds[1]) if isinstance(bounds, (list, tuple)) and len(bounds) == 2 else None
    r = best.derived_ratio
    stuck = [name for name, _ in strategy_bounds(source.at_bound, s)]
    if r_max is not None and r > r_max * (1 + 1e-6):
        return f"its D′/D {format_number(r)} is beyond every {s} run (r ≤ {format_number(r_max)})"
    if stuck:
        return f"{', '.join(stuck)} at a bound, {s}'s R* is not pinned"
    return ""


def plan_check(
    current: Plan,
    source: PlanningLaw,
    cands: list[Candidate],
    max_flops: float,
) -> tuple[int | None, str]:
    """The run a batch must include whatever the ensemble says, and why ("" when none).

    Where there is a plan_doubt, the one run that tests the plan is valued at nothing by
    the ensemble, so the batch starts with the cheapest candidate at the plan's tokens per
    parameter and ratio (a "plan" cell at the grid's smallest size that fits); each later
    round checks its own plan while the doubt remains (one size up if the plan stays).
    """
    why = plan_doubt(current, source)
    if not why:
        return None, ""
    s, r = current.best.strategy, current.best.derived_ratio
    at_plan = [
        i
        for i, c in enumerate(cands)
        if c.origin == f"plan {s}"
        and abs(c.run.derived_tokens / c.run.fresh_tokens - r) <= 1e-3 * r
        and c.flops <= max_flops
    ]
    if not at_plan:
        return None, why
    return min(at_plan, key=lambda i: cands[i].flops), why


def check_limits(max_runs: int | None, max_flops: float | None) -> tuple[int | None, float | None]:
    if max_runs is not None and max_runs < 1:
        raise BadInput(f"--runs {max_runs}: give at least 1 run")
    if max_flops is not None and not (math.isfinite(max_flops) and max_flops > 0):
        raise BadInput(f"--flops {plain(max_flops)}: give a positive number of FLOPs, e.g. 1e18")
    if max_runs is None and max_flops is None:
        max_runs = DEFAULT_RUNS
    return max_runs, max_flops


def affordable(cands: list[Candidate], budget_flops: float) -> tuple[list[Candidate], int]:
    """The candidates that cost no more than the budget they would plan, and how many did:
    a run dearer than the budget is no experiment, since the plan itself could be trained
    with its FLOPs. BadInput when none is left."""
    kept = [c for c in cands if c.flops <= budget_flops]
    if not kept:
        cheapest = min(c.flops for c in cands)
        raise BadInput(
            f"every candidate run costs more than the budget ({budget_flops:.3g} FLOPs; the "
            f"cheapest {cheapest:.3g}): train the plan itself, or give a sweep file of "
            "smaller runs with --grid"
        )
    return kept, len(cands) - len(kept)


def below_uniform(
    cands: list[Candidate], fit: FitResult, vocab: int
) -> tuple[list[Candidate], int]:
    """The candidates where the fitted law predicts a loss below ln V, and how many it did
    not: above a uniform guess's loss the law describes no run (a tiny model on a sliver of
    its tokens), so what the refits say of such a run is no guide. BadInput when none is
    left."""
    uniform = math.log(vocab)
    kept = [c for c in cands if fit.law.loss(*c.cell) <= uniform]
    if not kept:
        raise BadInput(
            f"the law predicts a loss above ln V = {uniform:.4g} for every candidate run: "
            "give a sweep file whose grid lies where the runs were fitted, with --grid"
        )
    return kept, len(cands) - len(kept)


def _usable(cands, budget_flops: float, fit: FitResult, vocab: int):
    """The candidates worth weighing (affordable, below_uniform), and a warning for each
    kind left out."""
    cands, too_dear = affordable(cands, budget_flops)
    cands, past_meaning = below_uniform(cands, fit, vocab)
    said = []
    if past_meaning:
        said.append(
            f"{past_meaning} candidate run(s) were left out where the law predicts a loss "
            f"above ln V = {math.log(vocab):.4g} (a uniform guess over {vocab} tokens): it is "
            "past where it means anything there, as `cdlaw plan` says of such a plan"
        )
    if too_dear:
        said.append(
            f"{too_dear} candidate run(s) would cost more than the budget itself "
            f"({budget_flops:.3g} FLOPs) and were left out: with those FLOPs, train the plan"
        )
    return cands, said


def trained_flops(table: pd.DataFrame) -> float:
    """FLOPs a table's runs trained themselves, 6·N per token, a branch's shared prefix
    counted by its trunk only (fork_step · batch_tokens, where the table records them)."""
    tokens = table["fresh_tokens"].astype(float) + table["derived_tokens"].astype(float)
    if "fork_step" in table and "batch_tokens" in table:
        tokens = tokens - table["fork_step"].fillna(0) * table["batch_tokens"].fillna(0)
    return float((6.0 * table["n_params"].astype(float) * tokens).sum())


def next_batch(
    table: pd.DataFrame,
    fit: FitResult,
    parent: SweepConfig,
    budget_flops: float,
    unique_tokens: float,
    max_runs: int | None = None,
    max_flops: float | None = None,
    name: str = "next-1",
    strategy: str = "auto",
    current: Plan | None = None,
    extrapolate: bool = True,
) -> NextBatch:
    """Choose the next batch of runs for the plan at (budget_flops, unique_tokens).

    table: the runs already done (any table load_runs reads); fit: its fit with a
    bootstrap; parent: the sweep whose settings and grid the batch uses; current: the
    plan this fit makes for the budget, when the caller has it already; extrapolate False
    (`cdlaw next` without --extrapolate): a plan beyond the extrapolation limit is refused
    as `cdlaw plan` refuses it (BeyondLimit).
    """
    max_runs, max_flops = check_limits(max_runs, max_flops)
    source = PlanningLaw.of_fit(fit)  # the bootstrap refits as laws, built once
    draws = _enough_draws(source)
    if current is None:
        current = plan(
            source, budget_flops, unique_tokens, strategy=strategy, extrapolate=extrapolate
        )
    parent = dataclasses.replace(parent, name=name)  # a run's id includes its sweep's name
    vocab = _vocab_size(table, parent)
    cands = candidates(parent, vocab, done_cells(table), current.candidates)
    if not cands:
        raise BadInput("every candidate run is already in the table: widen the sweep's grid")
    cands, left_out = _usable(cands, budget_flops, fit, vocab)
    ens, dropped = _ensemble(fit, draws, current, budget_flops, unique_tokens, cands)
    cheapest = min(c.flops for c in cands)
    if max_flops is not None and cheapest > max_flops:
        raise BadInput(
            f"--flops {max_flops:.3g} buys no candidate run: the cheapest costs {cheapest:.3g} "
            "FLOPs; raise --flops or give --runs"
        )
    noise = max(float(fit.rmse_log), NOISE_FLOOR)
    if max_flops is None:
        # Only a run count: value per FLOP alone would pick the tiniest runs, which tell
        # almost nothing; a batch may cost what the runs so far cost (it at most doubles
        # the experiment), and within that the better of the two greedy batches wins. Never
        # more than the budget it plans: with those FLOPs the plan itself could be trained.
        max_flops = min(max(trained_flops(table), cheapest), budget_flops)
    check, check_why = plan_check(current, source, cands, max_flops)
    picks = choose(
        ens,
        noise,
        lambda picked: marginal_costs(cands, picked, parent.share),
        max_runs=max_runs,
        max_flops=max_flops,
        first=() if check is None else (check,),
    )
    warnings = _warnings(dropped, check, check_why) + left_out
    if not picks:
        raise BadInput(
            "no candidate run would narrow the plan's uncertainty (the bootstrap refits agree "
            "on every candidate); the plan's interval is as narrow as these runs can make it"
        )
    chosen = [cands[p.index] for p in picks]
    reasons = [
        _reason(c, p, f"plan check: {check_why}" if p.index == check else "")
        for c, p in zip(chosen, picks, strict=True)
    ]
    header = _header(fit, current, budget_flops, unique_tokens, len(ens.targets), noise, reasons)
    text = batch_sweep_text(parent, name, chosen, header)
    flops = sum(p.flops for p in picks)
    if flops > budget_flops:  # only a --flops above the budget lets it
        costs, budget = format_apart(flops, budget_flops)
        warnings.append(
            f"the batch costs {costs} FLOPs, more than the {budget} it plans: "
            "with those FLOPs the plan itself could be trained"
        )
    return NextBatch(name, current, chosen, picks, reasons, text, flops, len(cands),
                     len(ens.targets), noise, warnings,
                     training_flops(chosen, parent.share))  # fmt: skip


def _ensemble(fit, draws, current: Plan, budget_flops, unique_tokens, cands):
    """The bootstrap draws' predictions for the plan and every candidate (build_ensemble),
    and the draws dropped; BadInput when too few give finite predictions."""
    chosen_strategy = min(current.candidates, key=lambda s: current.candidates[s].predicted_loss)
    cells = [c.cell for c in cands]
    ens, dropped = build_ensemble(
        fit.law, draws, current.best, chosen_strategy, budget_flops, unique_tokens, cells
    )
    if len(ens.targets) < MIN_DRAWS:
        raise BadInput(
            f"only {len(ens.targets)} of {len(draws)} bootstrap refits give finite predictions "
            "for the plan and the candidates; refit with more --bootstrap samples"
        )
    return ens, dropped


def _enough_draws(source: PlanningLaw) -> list:
    """The fit's bootstrap refits; BadInput when there are too few to say which runs matter."""
    draws = list(source.bootstrap)
    if len(draws) < MIN_DRAWS:
        why = f" ({source.notes[0]})" if source.notes else ""
        raise BadInput(
            f"the fit has {len(draws)} bootstrap refits{why}; cdlaw next needs at least "
            f"{MIN_DRAWS} to know what the data leave open: run `cdlaw fit RUNS --bootstrap 50`"
        )
    return draws


def _warnings(dropped: int, check: int | None, check_why: str) -> list[str]:
    """What the batch's reader should know about how it was chosen."""
    warnings = (
        [f"{dropped} bootstrap refits gave non-finite predictions and were left out"]
        if dropped
        else []
    )
    if check_why and check is None:
        warnings.append(f"{check_why}, but no run at the plan's D′/D fits this batch's FLOPs")
    return warnings


def _header(
    fit: FitResult,
    current: Plan,
    budget_flops: float,
    unique_tokens: float,
    n_draws: int,
    noise: float,
    reasons: list[str],
) -> list[str]:
    """The batch sweep file's opening comment: the question, the fit, the plan, and why
    each run."""
    return [
        f"`cdlaw next` batch for a budget of {budget_flops:.3g} FLOPs and {unique_tokens:.3g} unique tokens",
        f"from the fit {fit.source or ''} ({n_draws} bootstrap refits, residual sd {noise:.3g}).",
        f"Plan now: N = {current.n_params:.3g}, {current.strategy}, loss {current.predicted_loss:.4g}"
        + (
            f" [{current.predicted_loss_ci95[0]:.4g}, {current.predicted_loss_ci95[1]:.4g}]"
            if current.predicted_loss_ci95
            else ""
        ),
        "Why each run (in the order chosen):",
        *[f"  {why}" for why in reasons],
    ]


def _vocab_size(table: pd.DataFrame, parent: SweepConfig) -> int:
    if "vocab_size" in table and table["vocab_size"].notna().any():
        return int(table["vocab_size"].dropna().iloc[0])
    return int(parent.data.vocab_size)
