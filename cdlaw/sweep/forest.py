"""Shared prefixes: which run forks from which, at which step (docs/sweep.md, "Trunks and branches").

With a WSD schedule and the warmup fixed in steps, a run's lr before its decay starts does
not depend on its length. Two runs with the same model, data, optimisation settings and
seed whose token streams agree on their first P tokens therefore take exactly the same
optimizer steps up to step min((P − 1) // batch_tokens, both decay starts): the later one
need not train them again. It starts from the other's checkpoint at that step (a fork)
and trains the rest, its own decay included, and ends where it would have alone.

    plan_forest(runs, share)      -> Forest: each branch's parent and fork step
    check_sharing(sweep, runs)    BadInput when share = true cannot apply
    fork_dir(sweep_dir, fork)     where a fork checkpoint lives

How P is known without reading a token: cdlaw.data.tokens.ordering.shared_prefix (every stream
starts with the first D fresh tokens; epochs and paraphrase passes extend it in an order
that does not depend on D′). The forest: runs sorted longest first; each forks from the
earlier run it shares the most steps with (longer runs decay later, so they make the best
trunks); a branch whose fork step is not past its parent's own fork point forks from the
grandparent instead (the parent never trains that step). Torch-free: the dry run plans it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from cdlaw.config import RunConfig, to_dict
from cdlaw.data.tokens.ordering import shared_prefix
from cdlaw.schedule import decay_start
from cdlaw.shapes import count_params, flops_per_token
from cdlaw.system.errors import BadInput

FORKS_DIR = "forks"  # <run>/forks/step-<s>/: the checkpoints branches start from


@dataclass(frozen=True)
class Fork:
    """Start from run `parent`'s state after `step` optimizer steps."""

    parent: str
    step: int


@dataclass
class Forest:
    """Who forks from whom. Runs without an entry in `forks` train from step 0."""

    forks: dict[str, Fork] = field(default_factory=dict)  # branch -> its fork
    saves: dict[str, tuple[int, ...]] = field(default_factory=dict)  # trunk -> fork steps it saves
    fallbacks: dict[str, tuple[Fork, ...]] = field(default_factory=dict)  # nearest first
    own_tokens: dict[str, int] = field(default_factory=dict)  # tokens a run trains itself
    own_flops: dict[str, float] = field(default_factory=dict)  # those tokens' FLOPs (6N, attention)
    alone_flops: dict[str, float] = field(default_factory=dict)  # the whole run's, trained alone
    critical: dict[str, float] = field(
        default_factory=dict
    )  # FLOPs on the longest chain from a run

    def needed_forks(self, pending: set[str]) -> set[Fork]:
        """The fork checkpoints some pending run may still start from."""
        return {f for rid in pending for f in self.fallbacks.get(rid, ())}


def fork_dir(sweep_dir: Path, fork: Fork) -> Path:
    return Path(sweep_dir) / fork.parent / FORKS_DIR / f"step-{fork.step:09d}"


def _batch_tokens(cfg: RunConfig) -> int:
    return cfg.train.batch_size * cfg.model.seq_len


def _steps(cfg: RunConfig) -> int:
    return math.ceil(cfg.tokens_trained / _batch_tokens(cfg))


def _group_key(cfg: RunConfig) -> str:
    """Runs can share steps only when everything but their stream's length agrees."""
    model = to_dict(cfg.model)
    model.pop("size")  # a label
    parts = {"model": model, "data": to_dict(cfg.data), "train": to_dict(cfg.train)}
    return json.dumps({**parts, "seed": cfg.seed}, sort_keys=True)


def fork_step(a: RunConfig, b: RunConfig) -> int:
    """The last step at which b can start from a's state (0: none), both runs of one group.

    Step s reads tokens [(s − 1)·B, s·B) and predicts up to token s·B, so the streams must
    agree on s·B + 1 tokens; and s must not be past either run's decay start."""
    prefix = shared_prefix(
        (a.strategy, a.fresh_tokens, a.derived_tokens),
        (b.strategy, b.fresh_tokens, b.derived_tokens),
    )
    by_tokens = max(0, (prefix - 1) // _batch_tokens(a))
    return min(by_tokens, decay_start(_steps(a), a.train), decay_start(_steps(b), b.train))


def plan_forest(runs: list[RunConfig], share: bool) -> Forest:
    """Each run's fork (if any), the fork steps each trunk saves, and FLOP accounting."""
    forest = Forest()
    for cfg in runs:
        n = count_params(cfg.model).n_params
        per_token = flops_per_token(n, cfg.model.n_layers, cfg.model.d_model, cfg.model.seq_len)
        forest.alone_flops[cfg.run_id] = per_token * cfg.tokens_trained
    longest_first = sorted(runs, key=lambda c: (-c.tokens_trained, c.run_id))
    if share:
        groups: dict[str, list[RunConfig]] = {}
        for cfg in longest_first:
            if cfg.train.schedule == "wsd":
                groups.setdefault(_group_key(cfg), []).append(cfg)
        for members in groups.values():
            _plan_group(forest, members)
    for cfg in runs:
        rid = cfg.run_id
        share_tokens = forest.forks[rid].step * _batch_tokens(cfg) if rid in forest.forks else 0
        forest.own_tokens[rid] = cfg.tokens_trained - share_tokens
        forest.own_flops[rid] = (
            forest.alone_flops[rid] * forest.own_tokens[rid] / cfg.tokens_trained
        )
    steps_of: dict[str, set[int]] = {}
    for fork in forest.forks.values():
        steps_of.setdefault(fork.parent, set()).add(fork.step)
    forest.saves = {rid: tuple(sorted(s)) for rid, s in steps_of.items()}
    for rid in forest.forks:
        forest.fallbacks[rid] = _fallbacks(forest, rid)
    # Critical path: a run's own FLOPs plus its costliest line of descendants (branches
    # start before their parent ends, so this overstates; it only orders the queue).
    # A branch always comes after its trunk in longest-first order, so walk it backwards.
    children: dict[str, list[str]] = {}
    for branch, fork in forest.forks.items():
        children.setdefault(fork.parent, []).append(branch)
    for cfg in reversed(longest_first):
        kids = [forest.critical[k] for k in children.get(cfg.run_id, ())]
        forest.critical[cfg.run_id] = forest.own_flops[cfg.run_id] + max(kids, default=0.0)
    return forest


def _plan_group(forest: Forest, members: list[RunConfig]) -> None:
    """members longest first; each forks from the earlier run it shares the most steps with."""
    for i, b in enumerate(members):
        best, best_step = None, 0
        for a in members[:i]:
            s = fork_step(a, b)
            if s > best_step:
                best, best_step = a, s
        if best is None:
            continue
        parent = best.run_id
        # The parent may itself start at a fork at or after this step: it never trains
        # that step, so go up to the run that does (its stream agrees even longer).
        while parent in forest.forks and forest.forks[parent].step >= best_step:
            parent = forest.forks[parent].parent
        forest.forks[b.run_id] = Fork(parent, best_step)


def _fallbacks(forest: Forest, rid: str) -> tuple[Fork, ...]:
    """Fork checkpoints run `rid` may start from, nearest (latest step) first: its own fork,
    earlier fork points of the same trunk, then those of each ancestor up to its fork."""
    out, fork = [], forest.forks[rid]
    parent, limit = fork.parent, fork.step
    while True:
        out += [Fork(parent, s) for s in forest.saves.get(parent, ()) if s <= limit]
        if parent not in forest.forks:
            break
        limit = min(limit, forest.forks[parent].step)
        parent = forest.forks[parent].parent
    return tuple(sorted(set(out), key=lambda f: -f.step))


def check_sharing(runs: list[RunConfig]) -> None:
    """share = true: a WSD schedule, warmup fixed in steps, and a stable phase in every run.

    One BadInput sentence naming the key otherwise (nothing has been written yet)."""
    for cfg in runs:
        train = cfg.train
        if train.schedule != "wsd":
            raise BadInput(
                f'share = true needs train.schedule = "wsd", got "{train.schedule}": a cosine '
                "lr depends on the run's length from the first step, so no two runs share one"
            )
        if train.warmup_frac > 0 and not train.warmup_steps:
            raise BadInput(
                "share = true needs train.warmup_steps (the warmup fixed in steps): with "
                f"train.warmup_frac = {train.warmup_frac} each run warms up over a share of its "
                "own length, so runs of different lengths differ from the first step"
            )
        if train.decay_frac >= 1:
            raise BadInput(
                f"share = true needs train.decay_frac below 1, got {train.decay_frac}: the "
                "decay would start at the first step and leave no stable phase to fork from"
            )
        steps = _steps(cfg)
        stable_end = steps - max(1, round(train.decay_frac * steps))
        if train.warmup_steps > stable_end:
            raise BadInput(
                f"train.warmup_steps = {train.warmup_steps} is longer than the stable phase of "
                f"run {cfg.run_id} ({cfg.strategy}, D {cfg.fresh_tokens}, D′ {cfg.derived_tokens}: "
                f"{steps} steps, decay from step {stable_end}): lower train.warmup_steps to at "
                f"most {stable_end} or drop share = true"
            )
