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
document's position in the source; the shuffle and the validation split happen in
file_corpus.py. Paraphrase files are jsonl rows {"id", "pass", "style", "text"} aligned to
the documents by id (what `cdlaw paraphrase` writes).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from cdlaw.errors import BadInput

TEXT_SUFFIXES = (".txt", ".text", ".md")
JSON_SUFFIXES = (".jsonl", ".json")
PARQUET_SUFFIXES = (".parquet",)


@dataclass
class Documents:
    """A real corpus in source order."""

    texts: list[str]
    ids: list[str]
    fingerprint: str  # content hash: the same bytes (and options) give the same cache


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


_DIGESTS: dict[tuple, str] = {}


def digest_files(files: list[Path], root: Path | None = None) -> str:
    """SHA-256 of the files' names and bytes (memoised per process by size and mtime)."""
    h = hashlib.sha256()
    for p in files:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _DIGESTS:
            fh = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    fh.update(chunk)
            _DIGESTS[key] = fh.hexdigest()
        h.update(str(p.relative_to(root) if root else p.name).encode() + b"\0")
        h.update(_DIGESTS[key].encode())
    return h.hexdigest()


def load_documents(
    corpus: str, text_column: str = "text", id_column: str = "id", what: str = "data.corpus"
) -> Documents:
    """Every non-empty document of a real corpus, in source order, with unique ids.

    Local files go through `datasets` with a throwaway cache folder (the texts are read
    into memory and the token cache is what persists); a remote hf: name uses the user's
    Hugging Face cache, as `load_dataset` always does.
    """
    import tempfile

    if not corpus.startswith("hf:"):
        corpus_files(corpus, what)  # a missing or unknown path is refused before any import
    with tempfile.TemporaryDirectory(prefix="cdlaw-datasets-") as tmp:
        return _load_documents(corpus, text_column, id_column, tmp, what)


def _load_documents(
    corpus: str, text_column: str, id_column: str, tmp: str, what: str
) -> Documents:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    if corpus.startswith("hf:"):
        name, config, split = parse_hf(corpus)
        local = Path(name).expanduser()
        if local.is_dir():
            try:
                ds = datasets.load_from_disk(str(local))
            except Exception as e:
                raise BadInput(f"{what} {corpus!r}: {local} is not a saved dataset ({e})") from None
            if isinstance(ds, datasets.DatasetDict):
                split = split or ("train" if "train" in ds else next(iter(ds)))
                if split not in ds:
                    raise BadInput(
                        f"{what} {corpus!r} has no split {split!r}: it has {', '.join(ds)}"
                    )
                ds = ds[split]
            fingerprint = digest_files(sorted(p for p in local.rglob("*") if p.is_file()), local)
        else:
            try:
                ds = datasets.load_dataset(name, config, split=split or "train")
            except Exception as e:
                raise BadInput(f"{what} {corpus!r} could not be loaded by datasets: {e}") from None
            fingerprint = f"hf:{name}:{config}:{split}:{ds._fingerprint}"
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
            ds = datasets.load_dataset(
                loader, data_files=[str(p) for p in files], split="train", cache_dir=tmp, **kwargs
            )
        except Exception as e:
            raise BadInput(f"{what} {corpus!r} could not be read as {loader}: {e}") from None
        fingerprint = digest_files(files, root) + f":{loader}:{kwargs}"
        source = loader
    if text_column not in ds.column_names:
        raise BadInput(
            f"{what} {corpus!r} has no column {text_column!r} (data.text_column): its "
            f"{source} columns are {', '.join(ds.column_names)}"
        )
    texts = ds[text_column]
    ids = [str(i) for i in ds[id_column]] if id_column in ds.column_names else None
    if ids is None:
        ids = [str(i) for i in range(len(texts))]
    keep = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
    if not keep:
        raise BadInput(f"{what} {corpus!r} is empty: it has no non-empty {text_column!r} text")
    bad = next((t for t in texts if t is not None and not isinstance(t, str)), None)
    if bad is not None:
        raise BadInput(
            f"{what} {corpus!r} column {text_column!r} must hold text, found {type(bad).__name__}"
        )
    texts = [texts[i].strip() for i in keep]
    ids = [ids[i] for i in keep]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise BadInput(
            f"{what} {corpus!r} has duplicate document id {dup!r} in column {id_column!r}: "
            "ids must be unique (or drop the column to use positions)"
        )
    fingerprint = hashlib.sha256(f"{fingerprint}|{text_column}|{id_column}".encode()).hexdigest()
    return Documents(texts, ids, fingerprint)


# ---------------------------------------------------------------------------------------
# Paraphrase files
# ---------------------------------------------------------------------------------------


def paraphrase_files(folder: str) -> list[Path]:
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise BadInput(
            f"data.paraphrases {folder!r} is not a folder: point it to the --out folder of "
            "`cdlaw paraphrase`"
        )
    files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
    if not files:
        raise BadInput(f"data.paraphrases folder {folder!r} holds no .jsonl paraphrase files")
    return files


def paraphrases_fingerprint(folder: str) -> str:
    return digest_files(paraphrase_files(folder))


def read_rows(path: Path) -> list[dict]:
    """The rows of one paraphrase jsonl file; a torn last line (a killed writer) is skipped."""
    rows = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if n == len(lines):  # the last line, without its newline: an interrupted write
                continue
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
        rows.append(row)
    return rows


def load_paraphrases(folder: str, styles: list[str]) -> dict[str, list[str]]:
    """id → its paraphrase texts in pass order, keeping only rows whose style is in `styles`.

    The kept rows of a document, sorted by (pass, style), are its passes 1, 2, …: so
    `data.paraphrase_styles` selects which of the generated paraphrases are used.
    """
    by_id: dict[str, list[tuple[int, str, str]]] = {}
    wanted = set(styles)
    for path in paraphrase_files(folder):
        for row in read_rows(path):
            style = str(row.get("style", ""))
            if style in wanted and row["text"].strip():
                by_id.setdefault(str(row["id"]), []).append(
                    (row["pass"], style, row["text"].strip())
                )
    return {i: [t for *_, t in sorted(v)] for i, v in by_id.items()}
