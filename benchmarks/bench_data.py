"""Preparing a real corpus at scale: peak memory, wall time and MB/s of `prepare_corpus`
on synthetic jsonl corpora of growing size, against raw `tokenizers` encode_batch of the
same text on the same cores, in one run.

    python benchmarks/bench_data.py                      # 0.25, 1 and 4 GB
    python benchmarks/bench_data.py --sizes 0.01,0.05    # small, quick
    python benchmarks/bench_data.py --workers 2 --vocab 32768 --json out.json
    python benchmarks/bench_data.py --long-doc 50 --sizes 0.005  # one 50 MB document

With --long-doc MB, each corpus is prepared twice: as generated, and with one more
document of MB megabytes (a single jsonl line) appended; the peak memory of the two is
compared (a document of any length is tokenised in bounded pieces).

Each corpus is generated into a temporary folder: documents of 100–1,500 Zipf-distributed
English words (the embedded world's word lists and a list of common words), in sentences.
A byte-level BPE of up to --vocab tokens is trained once on the first 16 MB of the first
corpus and given as `[data] tokenizer` (a tokenizer file, as a paper-scale sweep would
use, so no BPE training is timed). Each preparation runs in a fresh process with a cold
cache; its peak memory is sampled every 50 ms over the whole process tree (the preparing
process and its workers): RSS summed (shared pages counted in each process) and PSS
(shared pages split between the processes that map them). The raw side reads the same
documents (untimed) and times `Tokenizer.encode_batch` on them, 4,096 at a time, with the
tokenizer's own threads on every core. Then, in a fresh process, the corpus is
fingerprinted (cdlaw.data.fingerprint) cold, read whole as a first preparation does, and
warm, from the store the preparation left, as every later sweep does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
COMMON = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there one all we their been has would when who "
    "will more no if out so said what up its about into than them can only other new some "
    "could time these two may then do first any my now such like our over man me even most "
    "made after also did many before must through back years where much your way well down "
    "should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take "
    "three small large water house river city company country school family system number"
).split()


def vocabulary() -> list[str]:
    from cdlaw.data.embedded.lexicon import LISTS

    words = list(COMMON)
    for values in LISTS.values():
        words += [w for v in values for w in v.split() if w.isalpha()]
    return list(dict.fromkeys(words))


class ZipfText:
    """Sentences of 6–23 Zipf-distributed words (exponent 1.05) from vocabulary()."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.words = np.array(vocabulary())
        self.p = 1.0 / np.arange(1, len(self.words) + 1) ** 1.05
        self.p /= self.p.sum()

    def text(self, n: int) -> str:
        """n words in sentences, each capitalised and ended by a full stop."""
        picks = self.words[self.rng.choice(len(self.words), size=n, p=self.p)]
        cuts = np.cumsum(self.rng.integers(6, 24, size=n // 6 + 1))
        sentences = [" ".join(s) for s in np.split(picks, cuts[cuts < n]) if len(s)]
        return " ".join(s[:1].upper() + s[1:] + "." for s in sentences)


def write_corpus(path: Path, n_bytes: int, seed: int = 0) -> int:
    """Write about n_bytes of jsonl documents; the bytes written."""
    zipf = ZipfText(seed)
    written, doc = 0, 0
    with open(path, "w") as f:
        while written < n_bytes:
            lines = []
            for _ in range(256):
                text = zipf.text(int(zipf.rng.integers(100, 1500)))
                lines.append(json.dumps({"id": f"doc{doc}", "text": text}) + "\n")
                doc += 1
            chunk = "".join(lines)
            f.write(chunk)
            written += len(chunk.encode())
    return written


def append_long_document(path: Path, n_bytes: int, seed: int = 1) -> int:
    """Append one document of about n_bytes (a single jsonl line), written a sentence
    batch at a time; the bytes appended."""
    zipf = ZipfText(seed)
    written = 0
    with open(path, "a") as f:
        f.write('{"id": "long", "text": "')
        while written < n_bytes:
            chunk = zipf.text(20_000) + " "
            f.write(chunk)
            written += len(chunk)
        f.write('end."}\n')
    return written


def train_tokenizer(corpus: Path, out: Path, vocab: int) -> None:
    from cdlaw.data.tokens.tokenizer import train_bpe

    texts, size = [], 0
    with open(corpus) as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            size += len(line)
            if size > 16 << 20:
                break
    train_bpe(texts, vocab).save(str(out))


PREPARE = """
import sys
from pathlib import Path
from cdlaw.config import DataConfig
from cdlaw.data.files.block_tokens import Workers
from cdlaw.data.tokens.prepare import prepare_corpus
corpus, tok, cache, workers = sys.argv[1:5]
data = DataConfig(corpus=corpus, tokenizer=tok, val_tokens=65536)
pc = prepare_corpus(data, Path(cache), 1, workers=Workers(int(workers)))
print(pc.train_tokens_available + len(pc.val_tokens))
"""

RAW = """
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[2])
spent, tokens, batch = 0.0, 0, []
def encode(batch):
    t = time.perf_counter()
    n = sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
    return time.perf_counter() - t, n
with open(sys.argv[1]) as f:
    for line in f:
        batch.append(json.loads(line)["text"])
        if len(batch) == 4096:
            s, n = encode(batch); spent += s; tokens += n; batch = []
if batch:
    s, n = encode(batch); spent += s; tokens += n
print(json.dumps({"seconds": spent, "tokens": tokens}))
"""


# Fingerprinting the corpus (cdlaw.data.fingerprint) in a fresh process: cold (read whole,
# as the first preparation does for the cache key and the runs' inputs) and warm (the
# store the preparation left: a stat, as every later sweep does).
FINGERPRINT = """
import json, sys, time
from pathlib import Path
from cdlaw.data.fingerprint import FileHashes
t = time.perf_counter(); FileHashes().files([Path(sys.argv[1])]); cold = time.perf_counter() - t
t = time.perf_counter(); FileHashes(sys.argv[2]).files([Path(sys.argv[1])]); warm = time.perf_counter() - t
print(json.dumps({"cold": cold, "warm": warm}))
"""


def tree_memory(pid: int) -> tuple[int, int]:
    """(RSS summed, PSS summed) in bytes of pid and its descendants."""
    pids, frontier = [pid], [pid]
    while frontier:
        nxt = []
        for p in frontier:
            try:
                kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
            except OSError:
                kids = []
            nxt += [int(k) for k in kids]
        pids += nxt
        frontier = nxt
    rss = pss = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss


def run_sampled(args: list[str], env) -> tuple[str, float, int, int]:
    """(stdout, wall seconds, peak tree RSS, peak tree PSS) of a command."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        rss, pss = tree_memory(proc.pid)
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(0.05)
    wall = time.perf_counter() - start
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        raise SystemExit(f"{args[:3]} failed with exit code {proc.returncode}")
    return out, wall, peak_rss, peak_pss


def bench_size(gb: float, folder: Path, tok: Path, workers: int, env, long_mb: float = 0):
    corpus = folder / f"corpus-{gb:g}GB.jsonl"
    n_bytes = write_corpus(corpus, int(gb * 1e9))
    if not tok.is_file():
        train_tokenizer(corpus, tok, ARGS.vocab)
    if long_mb:
        n_bytes += append_long_document(corpus, int(long_mb * 1e6))
    cache = folder / f"cache-{gb:g}"
    py = [sys.executable, "-c"]
    out, wall, rss, pss = run_sampled(
        [*py, PREPARE, str(corpus), str(tok), str(cache), str(workers)], env
    )
    raw = {"seconds": float("nan")}  # raw encode_batch of a long document takes GBs: skipped
    if not long_mb:
        raw = json.loads(subprocess.run([*py, RAW, str(corpus), str(tok)], capture_output=True,
                                        text=True, check=True, env=env).stdout)  # fmt: skip
    hashed = json.loads(subprocess.run([*py, FINGERPRINT, str(corpus), str(cache)],
                                       capture_output=True, text=True, check=True,
                                       env=env).stdout)  # fmt: skip
    corpus.unlink()
    subprocess.run(["rm", "-rf", str(cache)], check=True)
    return {
        "gb": gb, "long_doc_mb": long_mb, "bytes": n_bytes, "tokens": int(out.strip().splitlines()[-1]),
        "wall_s": wall, "peak_rss_gb": rss / 1e9, "peak_pss_gb": pss / 1e9,
        "mb_per_s": n_bytes / 1e6 / wall, "raw_s": raw["seconds"],
        "raw_mb_per_s": n_bytes / 1e6 / raw["seconds"],
        "hash_s": hashed["cold"], "hash_warm_s": hashed["warm"],
        "hash_share": hashed["cold"] / wall,
    }  # fmt: skip


def main() -> None:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.25,1,4", help="Corpus sizes in GB, comma-separated.")
    ap.add_argument("--workers", type=int, default=0, help="Workers (0: one per core).")
    ap.add_argument("--vocab", type=int, default=32768, help="The tokenizer's vocabulary.")
    ap.add_argument("--json", type=Path, help="Also write the rows as JSON here.")
    ap.add_argument(
        "--long-doc",
        type=float,
        default=0.0,
        help="Also prepare each corpus with one document of this many MB.",
    )
    ARGS = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        tok = Path(tmp) / "tokenizer.json"
        cases = [(float(s), 0.0) for s in ARGS.sizes.split(",")]
        if ARGS.long_doc:
            cases = [(gb, mb) for gb, _ in cases for mb in (0.0, ARGS.long_doc)]
        for gb, mb in cases:
            rows.append(bench_size(gb, Path(tmp), tok, ARGS.workers, env, mb))
            r = rows[-1]
            long = f" + one {mb:g} MB document" if mb else ""
            print(f"{r['gb']:g} GB{long}: {r['tokens']:,} tokens, wall {r['wall_s']:.1f} s, "
                  f"peak RSS {r['peak_rss_gb']:.2f} GB (PSS {r['peak_pss_gb']:.2f}), "
                  f"{r['mb_per_s']:.2f} MB/s vs raw encode_batch {r['raw_mb_per_s']:.2f} MB/s "
                  f"({r['mb_per_s'] / r['raw_mb_per_s']:.2f}x); fingerprint "
                  f"{r['hash_s']:.2f} s cold ({100 * r['hash_share']:.1f}% of the wall), "
                  f"{1000 * r['hash_warm_s']:.2f} ms warm", flush=True)  # fmt: skip
    if ARGS.json:
        ARGS.json.write_text(json.dumps(rows, indent=2) + "\n")


ARGS: argparse.Namespace


if __name__ == "__main__":
    main()
