"""Typed, validated configs for one training run, saved with every run (docs/files.md).

As in OLMo-core: plain dataclasses with defaults that read as a table, validated on
construction, turned into JSON for `config.json`, and built back from dicts (TOML or JSON)
with unknown keys rejected by name. A run's identity (`run_id`) is a hash of the fields
that define what is trained; how it is executed (device, threads, compile) is kept apart
in `ExecConfig` so the same run on a laptop and on a GPU has the same id.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Literal, get_args

from cdlaw import strategies
from cdlaw.system.errors import BadInput
from cdlaw.units import plain

Schedule = Literal["cosine", "wsd"]
# Fields added after runs were first named: left out of run_id at their default, so a run
# trained before a field existed keeps its id (and its folder) when the field is unused.
# A key is the field's path in config.json: ("train", "warmup_steps") or ("derived_files",).
ADDED_FIELDS: dict[tuple[str, ...], object] = {("train", "warmup_steps"): 0, ("derived_files",): ""}
Precision = Literal["auto", "bf16", "fp32"]
Tracker = Literal["tensorboard", "wandb", "mlflow"]  # cdlaw.train.trackers
TRACKERS: tuple[str, ...] = get_args(Tracker)


@dataclass(frozen=True)
class ModelConfig:
    """The shape of an OLMo 3 model (transformers' Olmo3ForCausalLM)."""

    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 8
    mlp_hidden: int = 512  # SwiGLU inner width
    vocab_size: int = 2048
    seq_len: int = 128  # context length (max_position_embeddings)
    rope_theta: float = 500_000.0  # OLMo 3 (CD paper configs)
    size: str = ""  # the name or target it came from ("1M", "olmo3_14M"): a label, not in run_id

    def __post_init__(self):
        for k in ("d_model", "n_layers", "n_heads", "mlp_hidden", "vocab_size", "seq_len"):
            _require(getattr(self, k) > 0, f"model.{k}", getattr(self, k), "a positive integer")
        _require(self.rope_theta > 0, "model.rope_theta", self.rope_theta, "a positive number")
        if self.d_model % self.n_heads:
            raise BadInput(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )


@dataclass(frozen=True)
class DataConfig:
    """Where tokens come from. The embedded corpus is generated; nothing is downloaded."""

    corpus: str = (
        "embedded"  # "embedded", a local file/folder (txt, jsonl, parquet) or "hf:<dataset>"
    )
    corpus_seed: int = 0  # seeds the embedded world and the document shuffle
    text_column: str = "text"  # for jsonl / parquet / HF datasets
    id_column: str = "id"  # document ids, to align paraphrase files
    paraphrases: str = ""  # paraphrase files: a sweep's [derived.paraphrase] files (real corpora)
    paraphrase_styles: tuple[str, ...] = ("tutorial", "faq", "math", "table")  # the CD paper's four
    tokenizer: str = "bpe"  # "bpe" = train a BPE on the corpus, or a tokenizer.json / HF folder
    vocab_size: int = 2048  # for the trained BPE
    val_tokens: int = 65_536  # held-out fresh documents, the same for every run of a sweep
    world: dict = field(default_factory=dict)  # embedded generator options (entities, zipf, ...)

    def __post_init__(self):
        _require(
            64 <= self.vocab_size <= 2**32, "data.vocab_size", self.vocab_size, "in [64, 2^32]"
        )
        _require(self.val_tokens > 0, "data.val_tokens", self.val_tokens, "positive")
        _require(self.corpus_seed >= 0, "data.corpus_seed", self.corpus_seed, "≥ 0")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation. Defaults follow the CD paper / OLMo: AdamW, cosine, z-loss, clipping."""

    lr: float = 3e-3
    weight_decay: float = 0.1  # not applied to embeddings and norms
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    schedule: Schedule = "cosine"  # or "wsd" (warmup-stable-decay)
    warmup_frac: float = 0.02  # of all steps
    warmup_steps: int = (
        0  # when > 0: warmup fixed in steps, overriding warmup_frac (needed to share prefixes)
    )
    final_lr_frac: float = 0.1  # cosine ends at 10% of peak
    decay_frac: float = 0.2  # wsd: last 20% of steps decay linearly to final_lr_frac
    z_loss: float = 1e-5
    grad_clip: float = 1.0
    batch_size: int = 16  # sequences per optimizer step (batch_tokens = batch_size · seq_len)
    micro_batch_size: int = 0  # 0 = whole batch at once; else gradient accumulation
    eval_every: int = 200  # steps; also evaluated at the end
    log_every: int = 10  # steps between rows of metrics.parquet
    checkpoint_every: int = 500  # steps; also on SIGTERM / SIGINT
    diverge_factor: float = 3.0  # loss above factor × its initial value (or NaN) = diverged

    def __post_init__(self):
        _require(self.lr > 0, "train.lr", self.lr, "positive")
        _require(self.weight_decay >= 0, "train.weight_decay", self.weight_decay, "≥ 0")
        for k in ("beta1", "beta2"):
            _require(0 <= getattr(self, k) < 1, f"train.{k}", getattr(self, k), "in [0, 1)")
        _require(self.eps > 0, "train.eps", self.eps, "positive")
        _require(self.z_loss >= 0, "train.z_loss", self.z_loss, "≥ 0 (0 turns it off)")
        _require(self.grad_clip > 0, "train.grad_clip", self.grad_clip, "positive")
        _require(self.diverge_factor > 1, "train.diverge_factor", self.diverge_factor, "above 1")
        _check_literal(Schedule, self.schedule, "train.schedule")
        if not (
            0 <= self.warmup_frac < 1 and 0 <= self.final_lr_frac <= 1 and 0 < self.decay_frac <= 1
        ):
            raise BadInput(
                "train.warmup_frac, train.final_lr_frac and train.decay_frac must lie in "
                f"[0, 1), [0, 1] and (0, 1], got {self.warmup_frac}, {self.final_lr_frac}, "
                f"{self.decay_frac}"
            )
        _require(self.warmup_steps >= 0, "train.warmup_steps", self.warmup_steps, "≥ 0")
        _require(self.batch_size > 0, "train.batch_size", self.batch_size, "positive")
        _require(
            self.micro_batch_size >= 0,
            "train.micro_batch_size",
            self.micro_batch_size,
            "≥ 0 (0 = the whole batch at once)",
        )
        if self.micro_batch_size and self.batch_size % self.micro_batch_size:
            raise BadInput(
                f"train.batch_size ({self.batch_size}) must be a multiple of train.micro_batch_size "
                f"({self.micro_batch_size})"
            )
        for k in ("eval_every", "log_every", "checkpoint_every"):
            _require(
                getattr(self, k) > 0, f"train.{k}", getattr(self, k), "a positive number of steps"
            )


@dataclass(frozen=True)
class ExecConfig:
    """How a run is executed. Not part of the run's identity."""

    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:1"
    precision: Precision = "auto"  # bf16 where faster (GPUs; CPUs with native bf16, d_model ≥ 256)
    compile: bool = False  # torch.compile (1.1-1.55× on CPU here, ~20 s cold start)
    threads: int = 0  # torch threads; 0 = leave torch's default
    trackers: tuple[Tracker, ...] = ()  # log each run to these too (cdlaw.train.trackers)

    def __post_init__(self):
        _check_literal(Precision, self.precision, "precision")
        _require(self.threads >= 0, "threads", self.threads, "≥ 0 (0 = torch's default)")
        for name in self.trackers:
            _check_literal(Tracker, name, "--tracker")


@dataclass(frozen=True)
class EvalConfig:
    """Downstream tasks every run is evaluated on (a sweep's [eval]; docs/downstream.md).

    Not part of the run's identity: tasks measure a run, they do not change what it trains
    on, so adding, changing or dropping [eval] keeps every run id.
    """

    tasks: tuple[str, ...] = ()  # built-in task names (world_cloze, world_mc) or .jsonl task files
    every: int = (
        0  # steps between task evaluations (a multiple of train.eval_every); 0: at every one
    )
    max_items: int = 0  # at most this many items of each task, the first ones (0: all)
    lm_eval: tuple[str, ...] = ()  # lm-evaluation-harness tasks, run on model/ when a run ends
    lm_eval_include: str = ""  # a folder of lm-eval task YAML files (lm-eval's include_path)

    def __post_init__(self):
        _require(self.every >= 0, "eval.every", self.every, "≥ 0 (0: at every evaluation)")
        _require(self.max_items >= 0, "eval.max_items", self.max_items, "≥ 0 (0: every item)")
        if len(set(self.tasks)) != len(self.tasks):
            raise BadInput(f"eval.tasks lists a task twice: {list(self.tasks)}")

    @property
    def enabled(self) -> bool:
        return bool(self.tasks or self.lm_eval)


@dataclass(frozen=True)
class PlanConfig:
    """The plan a sweep's runs are for (a sweep's [plan]; docs/sweep.md): what `cdlaw
    report` plans and `cdlaw plot` draws the frontier for, unless their options say
    otherwise (cdlaw.plan.question). In no run id: it asks a question of the runs, it does
    not change them."""

    budget_flops: float | None = None  # C = 6·N·(D + D′), FLOPs
    unique_tokens: float | None = None  # U: the unique tokens of the corpus the plan may use

    def __post_init__(self):
        for name, value in (
            ("budget_flops", self.budget_flops),
            ("unique_tokens", self.unique_tokens),
        ):
            _require(
                value is None or value > 0, f"plan.{name}", value, "a positive number like 2e12"
            )


@dataclass(frozen=True)
class InputFile:
    """One file or folder a run reads, named by its content (cdlaw.data.inputs)."""

    setting: str  # what names it: data.corpus, data.tokenizer, data.paraphrases, eval.tasks, …
    path: str  # as the setting gives it
    sha256: str  # of its bytes; a folder's: of its files' names and bytes
    files: dict = field(default_factory=dict)  # a folder's files (a few): name -> sha256


@dataclass(frozen=True)
class RunInputs:
    """What a run read, by content: the corpus's exact tokens and every input file.

    Recorded in config.json and compared at resume and whenever a sweep meets the run
    (docs/files.md, "Inputs"); not part of run_id, which names the config alone.
    """

    corpus_key: str = ""  # cdlaw.data.tokens.prepare.corpus_key ("" when it cannot be known)
    files: tuple[InputFile, ...] = ()
    # the folder the sweep ran in, which relative paths were read from (absolute; "" for a
    # folder written before it was recorded): a reader elsewhere reads them there
    workdir: str = ""

    def trained_on(self) -> tuple[InputFile, ...]:
        """The files that decide what the run trains on (all but the task files)."""
        return tuple(f for f in self.files if f.setting != TASKS_SETTING)

    def tasks(self) -> dict[str, InputFile]:
        """The task files the run is scored on, by path."""
        return {f.path: f for f in self.files if f.setting == TASKS_SETTING}


TASKS_SETTING = "eval.tasks"


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one run: what is trained, on which tokens, how."""

    sweep: str
    strategy: str  # "none" (D′ = 0), "repetition", "paraphrase" or a declared name (strategies.py)
    fresh_tokens: int  # D, exact
    derived_tokens: int  # D′, exact: repetition (epochs − 1)·D, else derived tokens consumed
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)  # not in run_id: it trains nothing
    # The folder of jsonl rows aligned to the documents by id that a strategy declared with
    # [derived.<name>] files reads ("" for none, repetition and paraphrase, whose
    # paraphrase files are data.paraphrases): docs/corpus.md, "Derived files".
    derived_files: str = ""
    # The content of what the run reads, fingerprinted by the sweep (None: not known, as
    # for a run built by hand or a config.json written before it was recorded).
    inputs: RunInputs | None = None

    def __post_init__(self):
        if self.strategy != strategies.NONE:
            strategies.check_name(self.strategy, "strategy")
        declared = self.strategy not in (strategies.NONE, *strategies.BUILT_IN)
        if declared != bool(self.derived_files):
            raise BadInput(
                f"strategy {self.strategy!r} with derived_files={self.derived_files!r}: a "
                "strategy other than none, repetition and paraphrase reads its derived files "
                "(declare them with [derived.<name>] files = DIR), and those three read none"
            )
        _require(self.fresh_tokens > 0, "fresh_tokens", self.fresh_tokens, "positive")
        _require(self.derived_tokens >= 0, "derived_tokens", self.derived_tokens, "≥ 0")
        _require(self.seed >= 0, "seed", self.seed, "≥ 0")
        if (self.strategy == strategies.NONE) != (self.derived_tokens == 0):
            raise BadInput(
                f"strategy {self.strategy!r} with derived_tokens={self.derived_tokens}: "
                "use strategy 'none' exactly when derived_tokens is 0"
            )
        if self.model.vocab_size != self.data.vocab_size and self.data.tokenizer == "bpe":
            raise BadInput(
                f"model.vocab_size ({self.model.vocab_size}) must equal data.vocab_size "
                f"({self.data.vocab_size}) for a trained BPE"
            )

    @property
    def tokens_trained(self) -> int:
        return self.fresh_tokens + self.derived_tokens

    @property
    def run_id(self) -> str:
        """A short hash of the defining config: the same run always gets the same id.

        The model's `size` label is left out: a run is its shape, so "20K" and 20000 that
        resolve to the same shape are the same run. So is `eval`: the tasks a run is
        evaluated on do not change what it trains. So are `inputs`: the content of the
        files is checked against each run folder, never hashed into the id
        (cdlaw.data.inputs).
        """
        defining = to_dict(self)
        defining["model"].pop("size")
        defining.pop("eval")
        defining.pop("inputs")
        for (*tables, key), default in ADDED_FIELDS.items():  # ids of older runs stay the same
            holder = defining
            for table in tables:
                holder = holder[table]
            if holder[key] == default:
                holder.pop(key)
        blob = json.dumps(defining, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------
# dict <-> dataclass, with unknown keys and wrong types named (used for TOML and JSON).
# ---------------------------------------------------------------------------------------


def to_dict(cfg) -> dict:
    """A dataclass as plain JSON-able data (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg)))


def from_dict(cls, data: dict, where: str = ""):
    """Build dataclass `cls` from a dict, recursing into nested dataclasses.

    Unknown keys raise BadInput naming the key and the nearest valid one; values are
    checked against the annotated types (ints are accepted where floats are expected).
    """
    if not isinstance(data, dict):
        raise BadInput(
            f"{where or cls.__name__} must be a table of keys, got {type(data).__name__}"
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        name = f"{where}.{key}" if where else key
        if key not in fields:
            raise BadInput(unknown_key_message(name, key, list(fields)))
        kwargs[key] = _coerce(hints[key], value, name)
    return cls(**kwargs)


def _require(ok: bool, name: str, value, valid: str) -> None:
    """BadInput unless ok and value is a finite number: "{name} must be {valid}, got {value}"."""
    finite = not isinstance(value, (int, float)) or isinstance(value, int) or math.isfinite(value)
    if not (ok and finite):
        raise BadInput(f"{name} must be {valid}, got {plain(value)}")


def _check_literal(tp, value, name: str) -> None:
    valid = get_args(tp)
    if value not in valid:
        raise BadInput(f"{name} must be one of {', '.join(valid)}, got {plain(value)}")


def unknown_key_message(name: str, key: str, valid: list[str]) -> str:
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    hint = f"did you mean {near[0]!r}?" if near else f"valid keys: {', '.join(sorted(valid))}"
    return f"unknown key {name!r}: {hint}"


def _finite(value: int | float | str, name: str) -> float:
    """A number (or "25M") as a finite float, else BadInput naming the key."""
    from cdlaw.units import parse_number

    return parse_number(value, name)  # refuses inf, nan and numbers beyond a float


def _coerce(tp, value, name: str):
    origin = typing.get_origin(tp)
    if origin is Literal:
        _check_literal(tp, value, name)
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, name)
    if tp is type(None):
        if value is not None:
            raise BadInput(f"{name} has the wrong type: {plain(value)}")
        return None
    if origin in (typing.Union, types.UnionType):
        first = None  # what the first type says of the value: "must be a number, got 'x'"
        for arg in typing.get_args(tp):
            try:
                return _coerce(arg, value, name)
            except BadInput as e:
                first = first or e
        raise first or BadInput(f"{name} has the wrong type: {plain(value)}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise BadInput(f"{name} must be a list, got {plain(value)}")
        (arg, *_) = typing.get_args(tp)
        return tuple(_coerce(arg, v, name) for v in value)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise BadInput(f"{name} must be a table, got {plain(value)}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise BadInput(f"{name} must be true or false, got {plain(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise BadInput(f"{name} must be an integer, got {plain(value)}")
        x = value if isinstance(value, int) else _finite(value, name)
        if isinstance(x, float) and not x.is_integer():
            raise BadInput(f"{name} must be a whole number, got {plain(value)}")
        if abs(x) >= 2**63:  # TOML's own range; beyond it counts overflow floats
            raise BadInput(f"{name} must be an integer below 2^63, got {plain(value)}")
        return int(x)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise BadInput(f"{name} must be a number, got {plain(value)}")
        return _finite(value, name)
    if tp is str:
        if not isinstance(value, str):
            raise BadInput(f"{name} must be a string, got {plain(value)}")
        return value
    return value
