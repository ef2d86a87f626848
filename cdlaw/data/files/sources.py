"""Real corpora and paraphrase files, read through the `datasets` library (docs/corpus.md).

`data.corpus` may be
  * a .txt file (one document per blank-line-separated block) or a folder of .txt files
    (one document per file);
  * a .jsonl / .json / .parquet file, or a folder of them, with a text column
    (`data.text_column`) and optionally an id column (`data.id_column`);
  * `hf:<name>[:<config>][@split]`: a Hugging Face dataset; a local folder written by
    `Dataset.save_to_disk` is read with `load_from_disk` (nothing is downloaded), any
    other name goes to `load_dataset` (the user's own Hugging Face cache and network).

Documents keep their source order here, with ids from the id column or, without one, the
document's position in the source: `document_batches` streams them a record batch at a
time (a preparation stores them on disk, doc_store.py), `load_documents` collects them
(`cdlaw paraphrase`). The shuffle and the validation split happen in files/corpus.py.
Paraphrase files are jsonl rows {"id", "pass", "style", "text"} aligned to the documents
by id (what `cdlaw paraphrase` writes), read a line at a time (`iter_rows`).
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cdlaw.data.files import long_lines, read_errors
from cdlaw.system.disk_full import disk_full_error, is_disk_full
from cdlaw.system.errors import BadInput

TEXT_SUFFIXES = (".txt", ".text", ".md")
JSON_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet",)


@dataclass
class Documents:
    """A real corpus in source order."""

    texts: list[str]
    ids: list[str]
    fingerprint: str  # content hash: the same bytes (and options) give the same cache


@dataclass(frozen=True)
class ArrowFiles:
    """A local corpus as the Arrow files `datasets` converted it into, in row order, read
    as files (document_batches). Not a memory-mapped `datasets.Dataset`: opening one
    touches every record batch's page of the file, so its resident pages grew with the
    corpus."""

    files: tuple[str, ...]
    column_names: list[str]
    long_texts: str = ""  # the folder of the texts of lines set aside (long_lines)
    json_columns: tuple[str, ...] = ()  # columns of mixed types, kept as JSON text


def parse_hf(spec: str) -> tuple[str, str | None, str | None]:
    """'hf:name[:config][@split]' → (name, config, split)."""
    rest = spec[3:]
    rest, _, split = rest.partition("@")
    name, _, config = rest.partition(":")
    if not name:
        raise BadInput(f"corpus {spec!r} names no dataset: write hf:<name>[:<config>][@split]")
    return name, config or None, split or None


def corpus_files(spec: str, what: str = "data.corpus") -> tuple[str, list[Path]]:
    """(loader, files) for a local corpus path; BadInput for a missing or unknown one."""
    path = Path(spec).expanduser()
    if not path.exists():
        raise BadInput(
            f"{what} {spec!r} does not exist: give a .txt/.jsonl/.parquet file or a folder of "
            "them, hf:<dataset>, or (for a sweep) 'embedded'"
        )
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    files = [
        p
        for p in files
        if not any(part.startswith(".") for part in p.relative_to(path.parent).parts)
    ]
    kinds = {
        "text": [p for p in files if p.suffix.lower() in TEXT_SUFFIXES],
        "json": [p for p in files if p.suffix.lower() in JSON_SUFFIXES],
        "parquet": [p for p in files if p.suffix.lower() in PARQUET_SUFFIXES],
    }
    found = [k for k, v in kinds.items() if v]
    if len(found) != 1:
        kinds_found = "no" if not found else "mixed (" + ", ".join(found) + ")"
        raise BadInput(
            f"{what} {spec!r} has {kinds_found} corpus files: use .txt, .jsonl/.json or .parquet "
            "files, one kind per corpus"
        )
    return found[0], kinds[found[0]]


def digest_files(files: list[Path], root: Path | None = None, cache_dir: Path | None = None) -> str:
    """SHA-256 of the files' names and bytes, each file's hash remembered by its stat in the
    process and, given a cache_dir, in its fingerprint store (cdlaw.data.fingerprint)."""
    from cdlaw.data.fingerprint import FileHashes

    return FileHashes(cache_dir).files(files, root)


def load_documents(
    corpus: str, text_column: str = "text", id_column: str = "id", what: str = "data.corpus"
) -> Documents:
    """Every non-empty document of a real corpus, in source order, with unique ids, in memory
    (for `cdlaw paraphrase`; a sweep's preparation streams them, doc_store.py).

    Local files go through `datasets` with a throwaway cache folder; a remote hf: name uses
    the user's Hugging Face cache, as `load_dataset` always does.
    """
    import tempfile

    if not corpus.startswith("hf:"):
        corpus_files(corpus, what)  # a missing or unknown path is refused before any import
    with tempfile.TemporaryDirectory(prefix="cdlaw-datasets-") as tmp:
        ds, fingerprint = open_dataset(corpus, text_column, id_column, tmp, what)
        texts: list[str] = []
        ids: list[str] = []
        for batch_texts, batch_ids in document_batches(ds, corpus, text_column, id_column, what):
            texts += [t if isinstance(t, str) else t.text() for t in batch_texts]
            ids += batch_ids
    if not texts:
        raise read_errors.empty_corpus(what, corpus, text_column)
    if len(set(ids)) != len(ids):
        from collections import Counter

        counts = Counter(ids)
        raise read_errors.duplicate_id(
            what, corpus, id_column, next(i for i in ids if counts[i] > 1)
        )
    return Documents(texts, ids, fingerprint)


def open_dataset(corpus: str, text_column: str, id_column: str, tmp: str, what: str):
    """(the corpus on disk, its content fingerprint): local files converted to Arrow under
    `tmp` (ArrowFiles), an `hf:` name as a `datasets.Dataset`; either goes to
    document_batches. BadInput for a file `datasets` cannot read (naming the first byte
    that is not UTF-8, if that is why) or a missing text column.
    """
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    if corpus.startswith("hf:"):
        ds, fingerprint = _open_hf(corpus, what, datasets)
        source = "text/jsonl"
    else:
        loader, files = corpus_files(corpus, what)
        root = Path(corpus).expanduser()
        root = root if root.is_dir() else root.parent
        kwargs = {}
        if loader == "text":  # a folder: one document per file; one file: per blank-line block
            kwargs["sample_by"] = (
                "document" if len(files) > 1 or Path(corpus).is_dir() else "paragraph"
            )
        try:
            ds = _convert(datasets, loader, files, tmp, kwargs, text_column)
        except Exception as e:
            if is_disk_full(e):
                raise disk_full_error(e, "converting the corpus to Arrow", Path(tmp).parent) from e
            raise read_errors.unreadable(what, corpus, loader, files, e, text_column) from None
        if text_column in ds.json_columns:
            raise read_errors.mixed_text(what, corpus, files, text_column)
        fingerprint = digest_files(files, root) + f":{loader}:{kwargs}"
        source = loader
    if text_column not in ds.column_names:
        raise BadInput(
            f"{what} {corpus!r} has no column {text_column!r} (data.text_column): its "
            f"{source} columns are {', '.join(ds.column_names)}"
        )
    fingerprint = hashlib.sha256(f"{fingerprint}|{text_column}|{id_column}".encode()).hexdigest()
    return ds, fingerprint


def _convert(
    datasets, loader: str, files: list[Path], tmp: str, kwargs: dict, text_column: str
) -> ArrowFiles:
    """The local files converted to Arrow under tmp by `datasets`' own loader; a jsonl
    line too long to read whole set aside first (long_lines)."""
    from datasets.arrow_reader import ArrowReader

    long = ""
    if loader == "json":
        long = str(Path(tmp) / "long")
        files = long_lines.set_aside(files, text_column, Path(long))
    builder = datasets.load_dataset_builder(
        loader, data_files=[str(p) for p in files], cache_dir=tmp, **kwargs
    )
    with _system_arrow_pool():
        builder.download_and_prepare()
    splits = builder.info.splits.values()
    parts = ArrowReader(builder.cache_dir, builder.info).get_file_instructions(
        builder.dataset_name, "train", splits
    )
    features = builder.info.features
    # a column of mixed types, which `datasets` keeps as JSON text ('"hello"', '42')
    as_json = tuple(name for name, f in features.items() if type(f).__name__ == "Json")
    return ArrowFiles(tuple(p["filename"] for p in parts), list(features), long, as_json)


@contextmanager
def _system_arrow_pool():
    """Arrow allocates from the C library's malloc meanwhile: its default pool (mimalloc)
    keeps pages it freed, so a conversion's memory grew with the corpus."""
    import pyarrow as pa

    pool = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(pool)


def _open_hf(corpus: str, what: str, datasets):
    name, config, split = parse_hf(corpus)
    local = Path(name).expanduser()
    if not local.is_dir():
        try:
            ds = datasets.load_dataset(name, config, split=split or "train")
        except Exception as e:
            raise BadInput(f"{what} {corpus!r} could not be loaded by datasets: {e}") from None
        return ds, f"hf:{name}:{config}:{split}:{ds._fingerprint}"
    try:
        ds = datasets.load_from_disk(str(local))
    except Exception as e:
        raise BadInput(f"{what} {corpus!r}: {local} is not a saved dataset ({e})") from None
    if isinstance(ds, datasets.DatasetDict):
        split = split or ("train" if "train" in ds else next(iter(ds)))
        if split not in ds:
            raise BadInput(f"{what} {corpus!r} has no split {split!r}: it has {', '.join(ds)}")
        ds = ds[split]
    return ds, digest_files(sorted(p for p in local.rglob("*") if p.is_file()), local)


BATCH_ROWS = 1024  # rows read at a time when a dataset is not in Arrow files


def document_batches(ds, corpus: str, text_column: str, id_column: str, what: str):
    """(texts, ids) of the non-empty documents, a batch at a time, in source order.

    Texts are stripped strings, or a long_lines.LongDoc for a jsonl line set aside; an id is the id column's value or, without one, the row's position.
    The dataset's Arrow files are read as files, not memory-mapped, so memory stays flat
    however large they are. BadInput for a row without text or with a non-text value.
    """
    columns = [text_column] + ([id_column] if id_column in ds.column_names else [])
    row = 0
    for batch in _decoded(_arrow_batches(ds, columns), corpus, what):
        texts = batch[text_column]
        ids = batch[id_column] if id_column in batch else range(row, row + len(texts))
        keep_texts, keep_ids = [], []
        for n, (text, i) in enumerate(zip(texts, ids, strict=True), row + 1):
            if not isinstance(text, str):
                raise read_errors.not_text(
                    what, corpus, text_column, n, text, _row_place(corpus, what, n)
                )
            long = long_lines.long_doc(text, getattr(ds, "long_texts", ""))
            text = text.strip() if long is None else long
            if text:
                keep_texts.append(text)
                keep_ids.append(str(i))
        row += len(texts)
        yield keep_texts, keep_ids


def _decoded(batches, corpus: str, what: str):
    """The batches; BadInput naming the first undecodable byte when one does not decode
    (`datasets` keeps some text columns as raw bytes until they are read)."""
    try:
        yield from batches
    except UnicodeDecodeError as e:
        files = [] if corpus.startswith("hf:") else corpus_files(corpus, what)[1]
        raise read_errors.unreadable(what, corpus, "text", files, e) from None


def _arrow_batches(ds, columns: list[str]):
    """The dataset's columns as dicts of lists, a record batch at a time."""
    if isinstance(ds, ArrowFiles):
        yield from _arrow_file_batches(ds.files, columns)
        return
    files = [f["filename"] for f in ds.cache_files]
    if not files or getattr(ds, "_indices", None) is not None:  # in memory, or a selection
        yield from ds.select_columns(columns).iter(batch_size=BATCH_ROWS)
        return
    yield from _arrow_file_batches(files, columns)


def _arrow_file_batches(files, columns: list[str]):
    import pyarrow as pa

    for name in files:
        with pa.OSFile(name) as src:
            for batch in pa.ipc.open_stream(src):
                yield {c: batch.column(c).to_pylist() for c in columns}


def _row_place(corpus: str, what: str, row: int) -> str:
    """Where row `row` (1-based, source order) of a local jsonl corpus is: "FILE line N";
    "row N" elsewhere."""
    if corpus.startswith("hf:"):
        return f"row {row}"
    loader, files = corpus_files(corpus, what)
    if loader != "json":
        return f"row {row}"
    seen = 0
    for path in files:
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                seen += bool(line.strip())
                if seen == row:
                    return read_errors.line_of(corpus, path, n)
    return f"row {row}"


# ---------------------------------------------------------------------------------------
# Paraphrase files
# ---------------------------------------------------------------------------------------


def paraphrase_files(folder: str, what: str = "") -> list[Path]:
    """The .jsonl files of a folder of rows aligned by id (paraphrase or other derived
    files); `what` names the folder in messages (default: the paraphrase files')."""
    what = what or f"[derived.paraphrase] files {folder!r}"
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise BadInput(
            f"{what} is not a folder: point it to the folder `cdlaw paraphrase` or "
            "`cdlaw distill` wrote (or any folder of jsonl rows aligned by id)"
        )
    files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
    if not files:
        raise BadInput(f"{what} holds no .jsonl files of rows")
    return files


def paraphrases_fingerprint(folder: str, what: str = "", cache_dir: Path | None = None) -> str:
    """The content digest of a folder of rows aligned by id (its .jsonl files)."""
    return digest_files(paraphrase_files(folder, what), cache_dir=cache_dir)


def read_rows(path: Path) -> list[dict]:
    """The rows of one paraphrase jsonl file; a torn last line (a killed writer) is skipped."""
    return [row for *_, row in iter_rows(path)]


def iter_rows(path: Path):
    """(line number, byte offset, byte length, row) of each row of a paraphrase jsonl file,
    read a line at a time; a torn last line (a killed writer) is skipped, any other bad
    line is BadInput."""
    with open(path, "rb") as f:
        offset = 0
        for n, line in enumerate(f, 1):
            row = parse_row(path, n, line, last=not line.endswith(b"\n"))
            if row is not None:
                yield n, offset, len(line), row
            offset += len(line)


def parse_row(path: Path, n: int, line: bytes, last: bool = False) -> dict | None:
    """Line n of a paraphrase file as a row; None for a blank line or a torn last one."""
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except ValueError:
        if last:  # the last line, without its newline: an interrupted write
            return None
        raise BadInput(f"paraphrase file {path}:{n} is not valid JSON") from None
    if not (
        isinstance(row, dict)
        and isinstance(row.get("text"), str)
        and isinstance(row.get("pass"), int)
        and row["pass"] >= 1
        and "id" in row
    ):
        raise BadInput(
            f"paraphrase file {path}:{n} must be a row "
            '{"id": …, "pass": k ≥ 1, "style": …, "text": "…"}'
        )
    return row
