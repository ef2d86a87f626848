"""A sweep ready to run: its runs checked against the corpus and selected by `--only`.

`parse_only` turns `--only` into a predicate on them (parsed, never evaluated);
`plan_sweep` checks every cell first without touching the corpus (`check_cells`: the
pass limit, paraphrase files for a real corpus, a declared strategy's folder), then asks
the data layer whether the corpus holds the largest D and the derived files each run's D′
(`check_derived_files`), and selects the runs. Nothing is written but the
tokenised-corpus cache, and nothing at all when `check_cells` refuses the sweep.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cdlaw.config import RunConfig, unknown_key_message
from cdlaw.data.files.block_tokens import Workers
from cdlaw.data.inputs import RunInputsMaker
from cdlaw.strategies import FRESH_ONLY, PARAPHRASE, REPETITION, files_command
from cdlaw.sweep.forest import Forest, check_sharing, plan_forest
from cdlaw.sweep.grid import RATIO_KEYS, SweepConfig
from cdlaw.sweep.values import same_number, sweep_number
from cdlaw.system.atomic import check_out_path
from cdlaw.system.errors import BadInput
from cdlaw.tasks.files import resolve_tasks, task_tokens_for
from cdlaw.train.result import run_facts
from cdlaw.units import counted

if TYPE_CHECKING:
    from cdlaw.data.tokens.cache import PreparedCorpus

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


def parse_only(expr: str) -> OnlyFilter:
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

    return OnlyFilter(tuple(clauses))


def _same(key: str, have, want) -> bool:
    """One --only value against a run's: numbers as numbers; a size as a number where both
    read as one ('20K' is 20000, as [[exclude]] compares them), else as its name."""
    if not isinstance(want, str):
        return same_number(float(have), want)
    if have == want:
        return True
    if key == "size":
        try:
            return same_number(sweep_number(have, "size"), sweep_number(want, "size"))
        except BadInput:
            return False
    return False


@dataclass(frozen=True)
class OnlyFilter:
    """--only parsed: (key, op, values) clauses, all of which a run must meet."""

    clauses: tuple[tuple[str, str, list], ...]

    def __call__(self, facts: dict) -> bool:
        for key, op, wants in self.clauses:
            have = facts[key]
            if op in ("=", "!="):
                if any(_same(key, have, w) for w in wants) != (op == "="):
                    return False
            else:
                w = wants[0]
                ok = {"<": have < w, "<=": have <= w, ">": have > w, ">=": have >= w}[op]
                if not ok:
                    return False
        return True

    def check(self, facts: list[dict]) -> None:
        """BadInput naming an alternative of an = or != clause that no run of the sweep
        has (a typo among `a|b` selected the others without a word)."""
        for key, op, wants in self.clauses:
            if op not in ("=", "!="):
                continue
            for w in wants:
                if not any(_same(key, f[key], w) for f in facts):
                    have = sorted({str(f[key]) for f in facts})
                    shown = ", ".join(have[:8]) + (", …" if len(have) > 8 else "")
                    raise BadInput(
                        f"--only {key}{op}{w}: no run of the sweep has {key} {w} "
                        f"(its values: {shown})"
                    )


@dataclass
class SweepPlan:
    """A validated sweep with its runs (after --only) and where they go."""

    sweep: SweepConfig
    runs: list[RunConfig]  # the selected runs, in grid order
    all_runs: list[RunConfig]  # every run of the sweep
    out: Path
    vocab_size: int
    prepared: PreparedCorpus | None = None  # the corpus, when it was prepared
    forest: Forest = field(default_factory=Forest)  # forks (share = true), over all_runs
    # a preview's (plan_sweep(preview=True)) notes: derived files not written yet
    notes: list[str] = field(default_factory=list)

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
    read_corpus: bool = True,
    workers: Workers | None = None,
    check_runs: Callable[[list[RunConfig]], None] | None = None,
    preview: bool = False,
) -> SweepPlan:
    """Check a loaded sweep's data against the corpus, and select its runs.

    Writes nothing except the tokenised-corpus cache (in cache_dir, default <out>/.cache),
    whose blocks `workers` tokenise (default: a process per core; cdlaw.data.files.block_tokens).
    Every problem is a BadInput. Without `read_corpus` (a simulated sweep) the corpus is
    not touched: a BPE's vocabulary is data.vocab_size, a tokenizer file's is taken to be
    OLMo 3's (100,278 tokens, the CD paper's). A `preview` (`--dry-run`) plans runs whose
    derived files are not written yet, saying so in the plan's notes.

    The selected runs carry their `inputs` (every file they read, by content:
    cdlaw.data.inputs); `check_runs` sees them before the corpus is prepared, so a sweep
    it refuses (runs trained on other inputs, cdlaw.sweep.stale) prepares nothing new
    (run ids depend on a tokenizer file's vocabulary: it is read from the file).
    """
    keep = parse_only(only) if only else None
    out = check_out_path(out, "--out", folder=True)
    check_cells(sweep)  # before any corpus work
    check_eval(sweep)
    if not read_corpus:
        from cdlaw.shapes import OLMO3_VOCAB_SIZE

        runs = sweep.runs(None if sweep.data.tokenizer == "bpe" else OLMO3_VOCAB_SIZE)
        selected = _select(runs, keep, only)
        if check_runs is not None:
            check_runs(selected)
        return SweepPlan(
            sweep, selected, runs, out, runs[0].model.vocab_size, None, _forest(sweep, runs)
        )
    from cdlaw.data.tokens.prepare import prepare_corpus

    cache = cache_dir or out / ".cache"
    if sweep.data.tokenizer == "bpe":
        runs = sweep.runs()
    else:  # the vocabulary comes from the tokenizer file, read before any corpus work
        from cdlaw.data.tokens.tokenizer import file_vocab_size

        runs = sweep.runs(file_vocab_size(sweep.data.tokenizer))
    selected = _select(runs, keep, only)
    # the runs to train (--only may leave some out); a preview lists runs still unwritten
    notes, unwritten = check_derived_folders(sweep, selected, missing_ok=preview)
    inputs = RunInputsMaker(sweep.data, sweep.eval, cache)
    selected = [r if r.derived_files in unwritten else inputs.of(r) for r in selected]
    forest = _forest(sweep, runs)
    if check_runs is not None:  # and the trunks whose forks a selected run may start from
        ids = {r.run_id for r in selected}
        trunks = {f.parent for rid in ids for f in forest.fallbacks.get(rid, ())} - ids
        check_runs(selected + [inputs.of(r) for r in runs if r.run_id in trunks])
    # The largest D must fit the corpus (BadInput from the data layer if not). Paraphrase
    # passes: the embedded corpus renders any number on demand (check_cells bounds them);
    # paraphrase files and a declared strategy's files must hold each selected run's D′.
    largest = max(r.fresh_tokens for r in runs)
    prepared = prepare_corpus(sweep.data, cache, largest, workers=workers)
    vocab = runs[0].model.vocab_size
    if prepared.vocab_size > vocab:
        raise BadInput(
            f"the tokenizer has {prepared.vocab_size} tokens, more than data.vocab_size={vocab}"
        )
    written = [r for r in selected if r.derived_files not in unwritten]
    check_derived_files(sweep, written, prepared, workers)
    for seq_len in sorted({r.model.seq_len for r in runs}):  # every continuation fits
        task_tokens_for(sweep.eval, prepared, seq_len)
    inputs.save()  # every check passed: the next sweep stats these files instead of reading them
    return SweepPlan(sweep, selected, runs, out, vocab, prepared, forest, notes)


def _select(runs: list[RunConfig], keep: OnlyFilter | None, only: str | None) -> list[RunConfig]:
    facts = [run_facts(r) for r in runs]
    if keep is not None:
        keep.check(facts)
    selected = [r for r, f in zip(runs, facts, strict=True) if keep is None or keep(f)]
    if not selected:
        raise BadInput(f"--only {only!r} selects none of the sweep's {counted(len(runs), 'run')}")
    return selected


def _forest(sweep: SweepConfig, runs: list[RunConfig]) -> Forest:
    """Who forks from whom, planned over every run of the sweep (so --only does not change
    where a trunk saves its forks); BadInput when share = true cannot apply."""
    if sweep.share:
        check_sharing(runs)
    return plan_forest(runs, sweep.share)


def check_writable(out: Path, sweep_name: str) -> None:
    """BadInput unless a sweep can write its runs folder: --out (or the nearest folder above
    it that exists, where --out will be made), and its .cache and sweep folder where they
    exist (cdlaw.system.atomic.refusal)."""
    from cdlaw.system.atomic import refusal

    if out.is_file():
        return  # plan_sweep says so
    for folder in (out, out / ".cache", out / sweep_name):
        if folder != out and not folder.is_dir():
            continue
        if refused := refusal(folder):
            raise BadInput(
                f"--out {str(out)!r} cannot be written: {refused[0]} refuses new files "
                f"({refused[1]}); give a folder you can write to with --out"
            )


def check_cells(sweep: SweepConfig) -> None:
    """What every cell needs that is known without the corpus: paraphrase files for a real
    corpus, and at most MAX_DERIVED_PASSES passes (D′/D) of any strategy but repetition.
    BadInput if not."""
    from cdlaw.data.tokens.prepare import MAX_DERIVED_PASSES as most

    cells = [c for c in sweep.cells() if c.strategy != REPETITION and c.derived_ratio > 0]
    if not cells:
        return
    if sweep.data.corpus != "embedded" and not sweep.data.paraphrases:
        if any(c.strategy == PARAPHRASE for c in cells):
            raise BadInput(
                f"{sweep.source}: strategy 'paraphrase' on data.corpus {sweep.data.corpus!r} "
                'needs paraphrase files: declare them with [derived.paraphrase] files = "DIR", '
                "the --out folder of `cdlaw paraphrase`, or drop 'paraphrase' from grid.strategy"
            )
    worst = max(cells, key=lambda c: c.derived_ratio)
    if worst.derived_ratio > most:
        name = sweep.ratio_name(worst.strategy)
        raise BadInput(
            f"{sweep.source}: {name} = {worst.ratio_value:.10g} asks strategy "
            f"{worst.strategy!r} for {worst.derived_ratio:.10g} passes (D′/D), more than the "
            f"limit of {most} (cdlaw.data.tokens.prepare.MAX_DERIVED_PASSES); use {name} ≤ "
            f"{most - RATIO_KEYS[worst.ratio_key]:g} for {worst.strategy}"
        )


def check_eval(sweep: SweepConfig) -> None:
    """[eval]'s tasks read and checked, and lm-eval there when it is asked for: BadInput
    naming the task, file, line or field (cdlaw.tasks.files), before any corpus work."""
    resolve_tasks(sweep.eval, sweep.data)
    if sweep.eval.lm_eval:
        from cdlaw.tasks.lm_eval import check_lm_eval

        check_lm_eval(sweep.eval)


def check_derived_folders(
    sweep: SweepConfig, runs: list[RunConfig], missing_ok: bool = False
) -> tuple[list[str], set[str]]:
    """Each run of a declared strategy needs its folder of derived files: BadInput naming
    the folder and what writes it, before any corpus work. With missing_ok (a preview) a
    folder not written yet (missing, or empty) is a note instead: (the notes, those
    folders)."""
    from cdlaw.data.files.sources import paraphrase_files

    notes, missing = [], set()
    for folder, s in sorted({(r.derived_files, r.strategy) for r in runs if r.derived_files}):
        what = f"{sweep.source}: [derived.{s}] files {folder!r}"
        path = Path(folder).expanduser()
        # not written yet: no folder, or one made ahead with nothing in it
        if missing_ok and (not path.exists() or (path.is_dir() and not any(path.iterdir()))):
            n = sum(r.derived_files == folder for r in runs)
            notes.append(
                f"{what} is not written yet: its {n} run(s) are listed, but the sweep trains "
                f"them only once `cdlaw {files_command(s)}` has written it"
            )
            missing.add(folder)
            continue
        paraphrase_files(folder, what)
    return notes, missing


def check_derived_files(
    sweep: SweepConfig, runs: list[RunConfig], prepared, workers: Workers | None = None
) -> None:
    """Each run's D′ must be in its derived files (paraphrase files of a real corpus, the
    files of a declared strategy; after prepare_corpus, tokenised by `workers`): BadInput
    naming the ratio key and the most there is."""
    from cdlaw.data.tokens.cache import DerivedSource
    from cdlaw.data.tokens.prepare import derived_tokens_available, prepare_derived

    need: dict[tuple[str, int, str], int] = {}
    for r in runs:
        rendered = r.strategy == PARAPHRASE and sweep.data.corpus == "embedded"
        if r.strategy not in FRESH_ONLY and not rendered:
            key = (r.strategy, r.fresh_tokens, r.derived_files)
            need[key] = max(need.get(key, 0), r.derived_tokens)
    for (s, D, files), most_asked in sorted(need.items()):
        source = DerivedSource.of(prepared.data, s, files)
        prepare_derived(prepared, source, workers)
        have, passes = derived_tokens_available(prepared, D, source)
        if most_asked > have:
            name = sweep.ratio_name(s)
            offset = RATIO_KEYS[sweep.ratios[s][0]]
            most = math.floor(have / D * 1000) / 1000 - offset
            raise BadInput(
                f"{sweep.source}: {name} = {most_asked / D - offset:.4g} at D = {D:,} fresh "
                f"tokens asks for D′ = {most_asked:,} {s} tokens, but the {source.describe()} "
                f"hold {have:,} for the documents inside D ({passes} full pass(es)); use "
                f"{name} ≤ {most:g} there, or write more passes with `cdlaw {files_command(s)} "
                f"--passes {passes + 1}` or more"
            )
