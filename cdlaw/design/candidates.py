"""Runs `cdlaw next` may choose from, what each costs, and the sweep file of a batch.

Candidates are (1) the cells of the sweep's grid that have not run yet, and (2) cells
around the current plan, scaled down to the sweep's model sizes: for each strategy the
law's best allocation (N_s, D_s, D′_s) at the budget, kept at its tokens per parameter
D_s/N_s and at its ratio r = D′_s/D_s, half and twice that ratio, and r = 0, at every
size of the grid, and at sizes above it, doubling, up to the plan's N (when the grid
has one lr for every size). R* depends on D/N and N, so runs at the plan's D/N and r are
the closest a small run gets to the plan itself.

A batch is written as an ordinary sweep file: the parent's [model], [data], [train],
[derived.<name>] and `share`, and a grid whose size, fresh_tokens, strategy and derived_ratio axes are zipped,
one entry per run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from cdlaw.config import RunConfig
from cdlaw.data.tokens.prepare import MAX_DERIVED_PASSES
from cdlaw.plan.result import Allocation
from cdlaw.shapes import count_params
from cdlaw.strategies import NONE, PARAPHRASE, REPETITION
from cdlaw.sweep.forest import plan_forest
from cdlaw.sweep.grid import SweepConfig, cell_shape
from cdlaw.sweep.spec import parse_sweep
from cdlaw.sweep.toml import toml_text
from cdlaw.system.errors import BadInput
from cdlaw.units import format_number

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

RATIO_STEPS = (0.0, 0.5, 1.0, 2.0)  # around the plan's r = D′/D
ZIPPED = ["size", "fresh_tokens", "strategy", "derived_ratio", "lr", "weight_decay"]


@dataclass(frozen=True)
class Candidate:
    run: RunConfig
    n_params: int
    origin: str  # "grid" or "plan <strategy>"

    @property
    def cell(self) -> tuple[float, float, float, str]:
        return (float(self.n_params), float(self.run.fresh_tokens), float(self.run.derived_tokens),
                self.run.strategy)  # fmt: skip

    @property
    def flops(self) -> float:
        """The law's compute, 6·N·(D + D′), as result rows count it."""
        return 6.0 * self.n_params * self.run.tokens_trained


def _key(n, d, dp, s) -> tuple:
    return (round(float(n)), round(float(d)), round(float(dp)), NONE if float(dp) == 0 else s)


def done_cells(table: pd.DataFrame) -> set[tuple]:
    """The cells a table of runs already has."""
    cols = zip(
        table["n_params"],
        table["fresh_tokens"],
        table["derived_tokens"],
        table["strategy"],
        strict=True,
    )
    return {_key(*c) for c in cols}


def size_settings(parent: SweepConfig) -> dict[str, tuple[float, float]]:
    """Each size's (lr, weight decay): one per size (a grid may zip lr with size), else BadInput."""
    seen: dict[str, set] = {}
    for cell in parent.cells():
        seen.setdefault(cell.size, set()).add((cell.lr, cell.weight_decay))
    several = [size for size, hp in seen.items() if len(hp) > 1]
    if several:
        raise BadInput(
            f"cdlaw next chooses cells for one lr and weight decay per size; the sweep has "
            f"several for {several[0]} (give a sweep file with one, e.g. the best of your lr sweep)"
        )
    return {size: next(iter(hp)) for size, hp in seen.items()}


def one_setting(hp: dict[str, tuple[float, float]]) -> tuple[float, float] | None:
    """The (lr, weight decay) every size shares, or None where they differ by size."""
    values = set(hp.values())
    return next(iter(values)) if len(values) == 1 else None


def sizes_above(parent: SweepConfig, vocab_size: int, plan_n: float) -> list[str]:
    """Model sizes above the grid's largest, doubling, while below the plan's N: the cells
    around the plan there extrapolate less than any grid cell can. Only where the grid
    trains every size with one lr and weight decay, which a new size then uses too (where
    the lr varies with size, cdlaw does not guess a new size's lr)."""
    if one_setting(size_settings(parent)) is None:
        return []
    n_max = max(count_params(cell_shape(parent, z, vocab_size), vocab_size).n_params
                for z in parent.sizes)  # fmt: skip
    out, n = [], 2.0 * n_max
    while n < plan_n:
        out.append(format_number(n))
        n *= 2.0
    return out


def zipped_sweep(
    parent: SweepConfig, name: str, cells: list[tuple[str, int, str, float]]
) -> SweepConfig:
    """A SweepConfig with one zipped entry per (size, D, strategy, r), each size with its own
    lr and weight decay (a size beyond the grid: the one every grid size has), the
    parent's other settings."""
    sizes = tuple(c[0] for c in cells)
    ds = tuple(c[1] for c in cells)
    strategies = tuple(c[2] for c in cells)
    ratios = tuple(c[3] for c in cells)
    hp = size_settings(parent)
    shared = one_setting(hp)
    hp = {**{z: shared for z in sizes if z not in hp and shared is not None}, **hp}
    return dataclasses.replace(
        parent,
        name=name,
        sizes=sizes,
        d_axis="fresh_tokens",
        d_values=tuple(float(d) for d in ds),
        strategies=strategies,
        ratios={s: ("derived_ratio", ratios) for s in dict.fromkeys(strategies)},
        ratio_tables=(),
        lrs=tuple(hp[size][0] for size in sizes),
        weight_decays=tuple(hp[size][1] for size in sizes),
        seeds=parent.seeds[:1],
        zip_groups=(tuple(ZIPPED),),
        exclude=(),
    )


def candidates(
    parent: SweepConfig,
    vocab_size: int,
    done: set[tuple],
    plans: dict[str, Allocation],
) -> list[Candidate]:
    """Unrun grid cells, then cells around each strategy's plan, without duplicates."""
    if not parent.sizes:
        raise BadInput(
            "cdlaw next needs a sweep with grid.size (a fixed [model] shape has one size)"
        )
    hp = size_settings(parent)
    seen = set(done)
    out: list[Candidate] = []

    def add(runs: list[RunConfig], origin) -> None:
        for cfg in runs:
            n = count_params(cfg.model, vocab_size).n_params
            key = _key(n, cfg.fresh_tokens, cfg.derived_tokens, cfg.strategy)
            if key not in seen and cfg.seed == parent.seeds[0]:
                seen.add(key)
                out.append(Candidate(cfg, n, origin(cfg)))

    add(parent.runs(vocab_size), lambda cfg: "grid")
    above = sizes_above(parent, vocab_size, max((b.n_params for b in plans.values()), default=0))
    for strategy, best in plans.items():
        if best.derived_tokens <= 0:
            continue
        r = best.derived_tokens / best.fresh_tokens
        cells = []
        for size in [*(z for z in parent.sizes if z in hp), *above]:
            n = count_params(cell_shape(parent, size, vocab_size), vocab_size).n_params
            d = round(n * best.fresh_tokens / best.n_params)
            if d < parent.model.get("seq_len", 2048):
                continue
            cells += [
                (size, d, strategy, r * k)
                for k in RATIO_STEPS
                if (k == 0 or r * k * d >= 1)
                and (strategy == REPETITION or r * k <= MAX_DERIVED_PASSES)
            ]
        if cells:
            add(
                zipped_sweep(parent, parent.name, cells).runs(vocab_size),
                lambda cfg, s=strategy: f"plan {s}",
            )
    return out


def batch_cost(chosen: list[Candidate], share: bool) -> float:
    """FLOPs to train these runs together (6N per token each trains itself)."""
    if not chosen:
        return 0.0
    forest = plan_forest([c.run for c in chosen], share)
    return sum(6.0 * c.n_params * forest.own_tokens[c.run.run_id] for c in chosen)


def training_flops(chosen: list[Candidate], share: bool) -> float:
    """FLOPs to train these runs together as `cdlaw sweep --dry-run` counts them: each
    run's own tokens (a shared prefix once) at 6·N plus attention per token."""
    forest = plan_forest([c.run for c in chosen], share)
    return float(sum(forest.own_flops.values()))


def marginal_costs(cands: list[Candidate], picked: list[int], share: bool) -> list[float]:
    """Each candidate's FLOPs if added to the picked ones: only runs of its own model size
    can share a prefix with it, so only those are planned with it."""
    by_size: dict[int, list[Candidate]] = {}
    for i in picked:
        by_size.setdefault(cands[i].n_params, []).append(cands[i])
    base = {n: batch_cost(group, share) for n, group in by_size.items()}
    out = []
    taken = set(picked)
    for i, c in enumerate(cands):
        group = by_size.get(c.n_params, [])
        if i in taken:
            out.append(float("inf"))  # never twice (and a run cannot fork from itself)
        elif not share or not group:
            out.append(c.flops)
        else:
            out.append(batch_cost([*group, c], share) - base[c.n_params])
    return out


def batch_sweep_text(
    parent: SweepConfig, name: str, chosen: list[Candidate], header: list[str]
) -> str:
    """The sweep file that trains `chosen` and nothing else (checked by parsing it back)."""
    raw = tomllib.loads(parent.text)
    out: dict = {"name": name}
    if raw.get("description"):
        out["description"] = f"{raw['description']} (a `cdlaw next` batch)"
    if parent.share:
        out["share"] = True
    grid: dict = {
        "size": [c.run.model.size for c in chosen],
        "fresh_tokens": [c.run.fresh_tokens for c in chosen],
        "strategy": [c.run.strategy if c.run.strategy != NONE else REPETITION for c in chosen],
        "derived_ratio": [c.run.derived_tokens / c.run.fresh_tokens for c in chosen],
        "lr": [c.run.train.lr for c in chosen],
        "weight_decay": [c.run.train.weight_decay for c in chosen],
        "seed": parent.seeds[0],
        "zip": [ZIPPED],
    }
    out["grid"] = grid
    for table in ("model", "data", "train"):
        if raw.get(table):
            out[table] = {k: v for k, v in raw[table].items() if k not in ("lr", "weight_decay")}
    used = {PARAPHRASE, *(c.run.strategy for c in chosen)}  # the strategies it declares
    derived = {k: v for k, v in raw.get("derived", {}).items() if k in used}
    if "paraphrases" in out.get("data", {}):  # written the one way: the same runs and ids
        derived[PARAPHRASE] = {"files": out["data"].pop("paraphrases")}
        out = {k: v for k, v in out.items() if v != {}}
    if derived:
        out["derived"] = derived
    text = toml_text(out, header)
    back = parse_sweep(text, source=f"{name}.toml", default_name=name)
    want = {c.run.run_id for c in chosen}
    got = {r.run_id for r in back.runs(chosen[0].run.model.vocab_size)} if chosen else set()
    if got != want:  # a token rounding or a setting the writer dropped: never hand it out
        raise RuntimeError(
            f"the batch sweep file does not give back its runs ({len(got ^ want)} differ)"
        )
    return text
