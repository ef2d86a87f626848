"""What content fingerprints cost a resumed sweep: `cdlaw sweep` run again over a finished
sweep on a real corpus (jsonl, a tokenizer file, a task file), timed whole, with the part
that fingerprints the runs' inputs (cdlaw.data.inputs.RunInputsMaker) timed inside it.

    python benchmarks/bench_resume.py                 # a 0.25 GB corpus, 5 resumes
    python benchmarks/bench_resume.py --gb 0.05 --repeat 3
    python benchmarks/bench_resume.py --code . /path/to/other/checkout   # compare

The corpus is bench_data.py's (Zipf-distributed English words); the sweep trains one
100K-parameter run on 2,048 fresh tokens. The corpus is prepared and the run trained once,
untimed; each resume is a fresh process (`python -m cdlaw sweep`), as a user runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import train_tokenizer, write_corpus

ROOT = Path(__file__).resolve().parent.parent
SWEEP = """
name = "resume"
[grid]
size = ["100K"]
fresh_tokens = [2048]
derived_ratio = [0]
[data]
corpus = "{corpus}"
tokenizer = "{tokenizer}"
val_tokens = 2048
[model]
seq_len = 32
[train]
batch_size = 8
[eval]
tasks = ["{task}"]
"""
# A resume in a fresh process, with the fingerprinting timed where plan_sweep calls it.
TIMED = """
import sys, time
from cdlaw.sweep import selection
spent = []
if hasattr(selection, "RunInputsMaker"):  # older checkouts (--code) fingerprint no inputs
    class Timed(selection.RunInputsMaker):
        def __init__(self, *a, **k):
            t = time.perf_counter(); super().__init__(*a, **k); spent.append(time.perf_counter() - t)
    selection.RunInputsMaker = Timed
from cdlaw.cli import main
sys.argv = ["cdlaw", "sweep", sys.argv[1], "--out", sys.argv[2]]
try:
    main()
finally:
    print("FINGERPRINT", sum(spent), file=sys.stderr)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=0.25, help="Corpus size in GB.")
    ap.add_argument("--repeat", type=int, default=5, help="Resumes timed.")
    ap.add_argument(
        "--code", type=Path, nargs="+", default=[ROOT],
        help="The cdlaw checkouts to time (each in its own runs folder, resumes interleaved).",
    )  # fmt: skip
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        folder = Path(tmp)
        corpus, tok, task = folder / "corpus.jsonl", folder / "tokenizer.json", folder / "q.jsonl"
        write_corpus(corpus, int(args.gb * 1e9))
        train_tokenizer(corpus, tok, 4096)
        item = {"context": "The river", "choices": [" is", " was"], "gold": 0}
        task.write_text(json.dumps(item) + "\n")
        sweep = folder / "s.toml"
        sweep.write_text(SWEEP.format(corpus=corpus, tokenizer=tok, task=task))
        walls: dict[int, list[float]] = {i: [] for i in range(len(args.code))}
        prints: dict[int, list[float]] = {i: [] for i in range(len(args.code))}
        for i, code in enumerate(args.code):  # prepare and train, untimed
            env = {**os.environ, "PYTHONPATH": str(code), "COLUMNS": "200"}
            cli = [sys.executable, "-m", "cdlaw", "sweep", str(sweep), "--out", f"runs-{i}"]
            # run in the temporary folder, so that `python -m cdlaw` imports code's cdlaw
            first = subprocess.run(cli, env=env, capture_output=True, text=True, cwd=folder)
            if first.returncode:
                raise SystemExit(first.stderr)
        for _ in range(args.repeat):
            for i, code in enumerate(args.code):
                env = {**os.environ, "PYTHONPATH": str(code), "COLUMNS": "200"}
                t = time.perf_counter()
                r = subprocess.run(
                    [sys.executable, "-c", TIMED, str(sweep), f"runs-{i}"],
                    env=env, capture_output=True, text=True, check=True, cwd=folder,
                )  # fmt: skip
                walls[i].append(time.perf_counter() - t)
                prints[i].append(float(r.stderr.split("FINGERPRINT")[-1].split()[0]))
    for i, code in enumerate(args.code):
        wall, spent = statistics.median(walls[i]), statistics.median(prints[i])
        print(
            f"{code}: {args.gb:g} GB corpus, finished sweep resumed {args.repeat}x: median "
            f"wall {wall:.2f} s (min {min(walls[i]):.2f}, max {max(walls[i]):.2f}); "
            f"fingerprinting the inputs {1000 * spent:.1f} ms median "
            f"({100 * spent / wall:.2f}% of the wall)"
        )


if __name__ == "__main__":
    main()
