"""What a run reads, by content: every input file fingerprinted, and two records compared
(docs/files.md, "Inputs").

    inputs = RunInputsMaker(data, eval_cfg, cache_dir)    # hashes each input once
    cfg = inputs.of(cfg)                                   # the run with its RunInputs
    inputs.save()                                          # the hashes, for the next sweep
    training_changes(recorded, now)                        # what changed, said per file
    changed_tasks(recorded, now, recorded_eval, now_eval)  # the task files that changed
    stale_tasks(saved_config, cfg)                         # … by name, from config.json
    config_outdated(saved_config, cfg)                     # config.json to be rewritten

A run reads the corpus's tokens (`corpus_key`: the corpus files, the embedded generator's
version, the tokenizer, the split), the corpus files themselves, a tokenizer file, the
paraphrase files (strategy paraphrase on a real corpus), its declared strategy's derived
files, and the task files of [eval]. Files are hashed streamed, and a file whose stat did
not change since it was last hashed is not read again (cdlaw.data.fingerprint).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cdlaw.config import (
    TASKS_SETTING,
    DataConfig,
    EvalConfig,
    InputFile,
    RunConfig,
    RunInputs,
    to_dict,
)
from cdlaw.data.fingerprint import FileHashes
from cdlaw.strategies import PARAPHRASE

OTHER_TOKENS = (
    "other tokens than the corpus gives now (its generator, the tokenizer or the split changed)"
)
LISTED = (
    64  # a folder's files are recorded one by one up to this many (to name the one that changed)
)


class RunInputsMaker:
    """The inputs of a sweep's runs, each file hashed once (with the store in cache_dir).

    `workdir`: for a command that checks runs from another folder (cdlaw status, fit's
    warnings), the folder their sweep read relative paths from (RunInputs.workdir): they
    are read there, not in the current folder, where a file of the same name may be
    another. None: the current folder, as a sweep reads them."""

    def __init__(
        self, data: DataConfig, eval_cfg: EvalConfig, cache_dir: Path, workdir: Path | None = None
    ) -> None:
        from cdlaw.data.tokens.prepare import corpus_key

        self.root = workdir
        self.workdir = str(Path(workdir if workdir is not None else Path.cwd()).absolute())
        if workdir is not None:
            data = dataclasses.replace(
                data,
                corpus=self._at(data.corpus),
                tokenizer=self._at(data.tokenizer),
                paraphrases=self._at(data.paraphrases),
            )
            tasks = tuple(self._at(t) if t.endswith(".jsonl") else t for t in eval_cfg.tasks)
            eval_cfg = dataclasses.replace(eval_cfg, tasks=tasks)
        self.hashes = FileHashes(cache_dir)
        self.data = data
        self.corpus_key = corpus_key(data, cache_dir) or ""
        shared = [self._corpus(), self._tokenizer()]
        shared += [self._file(TASKS_SETTING, t) for t in eval_cfg.tasks if t.endswith(".jsonl")]
        self.shared = tuple(f for f in shared if f is not None)
        self.folders: dict[tuple[str, str], InputFile] = {}

    def of(self, cfg: RunConfig) -> RunConfig:
        """cfg with `inputs`: the shared files and its own derived or paraphrase files."""
        own = []
        if cfg.derived_files:
            own.append(self._folder(f"[derived.{cfg.strategy}] files", self._at(cfg.derived_files)))
        elif cfg.strategy == PARAPHRASE and self.data.paraphrases:
            own.append(self._folder("data.paraphrases", self.data.paraphrases))
        files = self.shared[:1] + tuple(own) + self.shared[1:]
        return dataclasses.replace(cfg, inputs=RunInputs(self.corpus_key, files, self.workdir))

    def _at(self, spec: str) -> str:
        """A setting's relative path, read in `workdir` (as given without one, and for what
        names no path: "", embedded, bpe, an hf: dataset, whose key names its spec)."""
        plain = not spec or spec in ("embedded", "bpe") or spec.startswith("hf:")
        if self.root is None or plain or Path(spec).expanduser().is_absolute():
            return spec
        return str(self.root / spec)

    def save(self) -> None:
        """Remember the hashes taken (the corpus's for its cache key too) in the store."""
        self.hashes.save()

    def _corpus(self) -> InputFile | None:
        from cdlaw.data.files import sources

        spec = self.data.corpus
        if spec == "embedded":
            return None  # generated: corpus_key names its generator
        if spec.startswith("hf:"):
            local = Path(sources.parse_hf(spec)[0]).expanduser()
            if not local.is_dir():
                return None  # a remote dataset: known only by datasets' own fingerprint
            return self._listed("data.corpus", spec, local, sorted(local.rglob("*")))
        _, files = sources.corpus_files(spec)
        path = Path(spec).expanduser()
        if path.is_file():
            return self._file("data.corpus", spec)
        return self._listed("data.corpus", spec, path, files)

    def _tokenizer(self) -> InputFile | None:
        if self.data.tokenizer == "bpe":
            return None  # trained from the corpus: corpus_key names it
        from cdlaw.data.tokens.tokenizer import tokenizer_file

        path = tokenizer_file(self.data.tokenizer)
        return InputFile("data.tokenizer", self.data.tokenizer, self.hashes.file(path))

    def _file(self, setting: str, spec: str) -> InputFile:
        return InputFile(setting, spec, self.hashes.file(Path(spec).expanduser()))

    def _folder(self, setting: str, folder: str) -> InputFile:
        """A folder of rows aligned by id (its .jsonl files), hashed once per sweep."""
        from cdlaw.data.files.sources import paraphrase_files

        if (setting, folder) not in self.folders:
            files = paraphrase_files(folder, f"{setting} {folder!r}")
            self.folders[setting, folder] = self._listed(
                setting, folder, Path(folder).expanduser(), files
            )
        return self.folders[setting, folder]

    def _listed(self, setting: str, spec: str, root: Path, files: list[Path]) -> InputFile:
        files = [p for p in files if p.is_file()]
        digest = self.hashes.files(files, root)
        listed = {}
        if len(files) <= LISTED:
            listed = {str(p.relative_to(root)): self.hashes.file(p) for p in files}
        return InputFile(setting, spec, digest, listed)


def recorded_inputs(config: dict) -> RunInputs | None:
    """The inputs a config.json records; None when it records none (an older cdlaw's)."""
    from cdlaw.config import from_dict

    raw = config.get("inputs")
    if not isinstance(raw, dict):
        return None
    try:
        return from_dict(RunInputs, raw)
    except Exception:  # hand-edited: as unknown as none
        return None


def config_outdated(saved: dict, cfg: RunConfig) -> bool:
    """A config.json (`saved`) records other inputs or [eval] than cfg has: a task file
    changed, tasks added, or a folder of an older cdlaw that recorded no inputs. False
    when cfg's inputs are not known (a run built by hand)."""
    if cfg.inputs is None:
        return False
    now = to_dict(cfg)
    return saved.get("inputs") != now["inputs"] or saved.get("eval") != now["eval"]


def training_changes(recorded: RunInputs, now: RunInputs) -> list[str]:
    """What differs in what the run trains on, each said in a few words naming the file:
    "[derived.distill] files 'der' (rows.jsonl changed)". [] when nothing does."""
    said = []
    now_files = {f.setting: f for f in now.trained_on()}
    for old in recorded.trained_on():
        new = now_files.get(old.setting)
        if new is None:
            continue  # the run id would differ: another run
        if new.sha256 != old.sha256:
            said.append(describe_change(old, new))
    # a key not known now (a local hf: folder not found from this folder) is no evidence
    if (
        not said
        and recorded.corpus_key
        and now.corpus_key
        and now.corpus_key != recorded.corpus_key
    ):
        said.append(OTHER_TOKENS)
    return said


def describe_change(old: InputFile, new: InputFile) -> str:
    """ "<setting> '<path>' (<which of its files> changed)"."""
    where = f"{old.setting} {old.path!r}"
    if not (old.files and new.files):
        return f"{where} (its content changed)"
    changed = sorted(n for n in old.files.keys() & new.files.keys() if old.files[n] != new.files[n])
    parts = [f"{n} changed" for n in changed]
    parts += [f"{n} added" for n in sorted(new.files.keys() - old.files.keys())]
    parts += [f"{n} removed" for n in sorted(old.files.keys() - new.files.keys())]
    return f"{where} ({', '.join(parts[:3])}{', …' if len(parts) > 3 else ''})"


def changed_tasks(
    recorded: RunInputs | None, now: RunInputs | None, recorded_eval: dict, now_eval: EvalConfig
) -> set[str]:
    """The task entries of now_eval whose recorded scores no longer hold: a task file whose
    content changed, and every task when eval.max_items did (it decides the items). A file
    is matched to what was scored by its path, else by its name (its columns'): the same
    name at a new path (another file, or the project moved) scored other content when the
    hashes differ."""
    from cdlaw.tasks.files import task_name

    if recorded is None or now is None:
        return set()  # not known: what was scored is taken as it is
    if recorded_eval.get("max_items", now_eval.max_items) != now_eval.max_items:
        return set(now_eval.tasks)
    old = recorded.tasks()
    by_name = {task_name(p): f for p, f in old.items()}
    changed = set()
    for p, f in now.tasks().items():
        scored = old.get(p) or by_name.get(task_name(p))
        if scored is not None and scored.sha256 != f.sha256:
            changed.add(p)
    return changed


def stale_tasks(saved: dict, cfg: RunConfig) -> set[str]:
    """The names of the tasks (their column names' stem) whose scores a run's config.json
    (`saved`) recorded from other task files, or other eval.max_items, than cfg has."""
    from cdlaw.tasks.files import task_name

    recorded = recorded_inputs(saved)
    changed = changed_tasks(recorded, cfg.inputs, saved.get("eval") or {}, cfg.eval)
    return {task_name(t) for t in changed}
