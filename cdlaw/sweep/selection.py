"""A sweep ready to run: its runs checked against the corpus and selected by `--only`.

`parse_only` turns `--only` into a predicate on them (parsed, never evaluated);
`plan_sweep` validates a sweep file, asks the data layer whether the corpus holds the
largest D, and selects the runs. Nothing is written but the tokenised-corpus cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cdlaw.config import RunConfig, unknown_key_message
from cdlaw.errors import BadInput
from cdlaw.sweep.grid import SweepConfig
from cdlaw.sweep.values import same_number, sweep_number
from cdlaw.train.result import run_facts

ONLY_KEYS = (
    "run_id",
    "size",
    "strategy",
    "n_params",
    "fresh_tokens",
    "derived_tokens",
    "derived_ratio",
    "epochs",
    "tokens_trained",
    "tokens_per_param",
    "lr",
    "weight_decay",
    "seed",
)
_ONLY_TEXT_KEYS = ("run_id", "size", "strategy")
_CLAUSE = re.compile(r"^\s*([A-Za-z_]+)\s*(<=|>=|==|!=|=|<|>)\s*(.+?)\s*$")


def parse_only(expr: str):
    """`--only` as a predicate on run_facts(): comma-separated clauses, all must hold.

    A clause is `key OP value`, OP one of = == != < <= > >=; `=`/`!=` take alternatives
    separated by `|`. Examples: `strategy=paraphrase|none`, `n_params<1e6,seed=0`. Parsed
    by a regular expression, never evaluated.
    """
    clauses = []
    for part in expr.split(","):
        m = _CLAUSE.match(part)
        if not m:
            raise BadInput(
                f"--only clause {part.strip()!r} is not `key OP value` "
                "(e.g. strategy=paraphrase, n_params<1e6)"
            )
        key, op, value = m.groups()
        if key not in ONLY_KEYS:
            raise BadInput(unknown_key_message(f"--only key {key}", key, list(ONLY_KEYS)))
        op = "=" if op == "==" else op
        alternatives = value.split("|")
        if key in _ONLY_TEXT_KEYS:
            if op not in ("=", "!="):
                raise BadInput(f"--only {key} compares with = or != only, got {op!r}")
            wants = alternatives
        else:
            if len(alternatives) > 1 and op not in ("=", "!="):
                raise BadInput(f"--only {key}{op}{value}: alternatives (|) need = or !=")
            wants = [sweep_number(v, f"--only {key}") for v in alternatives]
        clauses.append((key, op, wants))

    def keep(facts: dict) -> bool:
        for key, op, wants in clauses:
            have = facts[key]
            if op in ("=", "!="):
                hit = any(
                    (have == w) if isinstance(w, str) else same_number(float(have), w)
                    for w in wants
                )
                if hit != (op == "="):
                    return False
            else:
                w = wants[0]
                ok = {"<": have < w, "<=": have <= w, ">": have > w, ">=": have >= w}[op]
                if not ok:
                    return False
        return True

    return keep


@dataclass
class SweepPlan:
    """A validated sweep with its runs (after --only) and where they go."""

    sweep: SweepConfig
    runs: list[RunConfig]  # the selected runs, in grid order
    all_runs: list[RunConfig]  # every run of the sweep
    out: Path
    vocab_size: int
    prepared: object = None  # the data layer's PreparedCorpus (when it was prepared)

    @property
    def sweep_dir(self) -> Path:
        return self.out / self.sweep.name

    @property
    def cache_dir(self) -> Path:
        return self.out / ".cache"


def plan_sweep(
    sweep: SweepConfig,
    out: str | Path = "runs",
    only: str | None = None,
    cache_dir: Path | None = None,
) -> SweepPlan:
    """Check a loaded sweep's data against the corpus, and select its runs.

    Writes nothing except the tokenised-corpus cache (in cache_dir, default <out>/.cache).
    Every problem is a BadInput.
    """
    keep = parse_only(only) if only else None
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {str(out)!r} is a file; give a folder for the runs")
    from cdlaw.data.ordering import run_stream
    from cdlaw.data.prepare import prepare_corpus

    cache = cache_dir or out / ".cache"
    if sweep.data.tokenizer == "bpe":
        runs = sweep.runs()
    else:  # the vocabulary comes from the tokenizer: ask the data layer first
        runs = sweep.runs(prepare_corpus(sweep.data, cache, 1).vocab_size)
    # The largest D must fit the corpus (BadInput from the data layer if not). Paraphrase
    # passes: the embedded corpus renders any number on demand; paraphrase files must cover
    # each run's D′, which building the longest paraphrase stream of each D checks.
    prepared = prepare_corpus(sweep.data, cache, max(r.fresh_tokens for r in runs))
    vocab = runs[0].model.vocab_size
    if prepared.vocab_size > vocab:
        raise BadInput(
            f"the tokenizer has {prepared.vocab_size} tokens, more than data.vocab_size={vocab}"
        )
    if sweep.data.corpus != "embedded":
        longest: dict[int, RunConfig] = {}
        for r in runs:
            if r.strategy == "paraphrase" and r.derived_tokens > getattr(
                longest.get(r.fresh_tokens), "derived_tokens", -1
            ):
                longest[r.fresh_tokens] = r
        for r in longest.values():
            run_stream(
                prepared, r.strategy, r.fresh_tokens, r.derived_tokens, r.model.seq_len, r.seed
            )
    selected = [r for r in runs if keep is None or keep(run_facts(r))]
    if not selected:
        raise BadInput(f"--only {only!r} selects none of the sweep's {len(runs)} runs")
    return SweepPlan(sweep, selected, runs, out, vocab, prepared)
