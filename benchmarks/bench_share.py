"""What do shared prefixes save? The demo grid trained with and without sharing, in one run.

Trains the sweep twice on this machine, same jobs × threads, one after the other:
`share = true` as written, and the same file with `share = false` (every run from step 0).
The corpus cache is prepared before either clock starts. Then it checks that the two
folders hold the same runs with the same losses, fits both the way `make demo` does
(seeds averaged, bootstrap), and prints:

- training FLOPs with sharing / without (each run's own steps; attention included),
- sweep wall time with sharing / without,
- the fitted parameters with their bootstrap intervals side by side, and log-RMSE;
  with --baseline CSV also a third fit (e.g. examples/demo-runs-cosine.csv, the cosine demo).

    .venv/bin/python benchmarks/bench_share.py [--sweep sweeps/demo.toml] [--jobs 2]
        [--out runs-bench-share] [--bootstrap 20] [--baseline examples/demo-runs-cosine.csv]

Writes <out>/share.json with every number printed.

    .venv/bin/python benchmarks/bench_share.py --plan-only sweeps/qin2026-small.toml

plans the forest of any sweep file without training or reading its corpus (a paper-scale
grid): the file is switched to WSD with share = true and a warmup fixed in steps (as many
steps as its warmup_frac gives its shortest run), and the FLOPs with and without sharing
are printed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

CDLAW = [sys.executable, "-m", "cdlaw"]


def run(args: list[str]) -> None:
    subprocess.run(CDLAW + args, check=True, stdout=subprocess.DEVNULL)


def variant(text: str, share: bool) -> str:
    """The sweep file with `share` set (the same name, so the same run ids)."""
    line = f"share = {'true' if share else 'false'}"
    if re.search(r"(?m)^share\s*=.*$", text):
        return re.sub(r"(?m)^share\s*=.*$", line, text)
    return re.sub(r"(?m)^(name\s*=.*)$", rf"\1\n{line}", text, count=1)


def fit(path: Path | str, out: Path, bootstrap: int) -> dict:
    args = ["fit", str(path), "--select", "mean", "--bootstrap", str(bootstrap), "--seed", "0"]
    run([*args, "--out", str(out)])
    return json.loads(out.read_text())


def flat(f: dict) -> dict:
    """A fit.json's parameters as one flat dict ("repetition.K", …), with intervals."""
    params = dict(f["params"])
    for strategy, values in f.get("strategies", {}).items():
        params.update({f"{strategy}.{k}": v for k, v in values.items()})
    return {"params": params, "ci95": f.get("ci95") or {}, "rmse_log": f["rmse_log"]}


def trained_flops(summary: pd.DataFrame) -> tuple[float, float]:
    """(FLOPs of the steps each run trained itself, FLOPs had every run trained alone)."""
    alone = summary["flops_with_attention"]
    shared_tokens = summary["fork_step"].fillna(0) * summary["batch_tokens"]
    own = alone * (1 - shared_tokens / summary["tokens_trained"])
    return float(own.sum()), float(alone.sum())


def plan_only(path: str) -> dict:
    """FLOPs of a sweep's runs with and without sharing, from its configs alone."""
    from cdlaw.schedule import warmup_steps
    from cdlaw.shapes import OLMO3_VOCAB_SIZE
    from cdlaw.sweep.forest import plan_forest
    from cdlaw.sweep.spec import parse_sweep

    text = variant(Path(path).read_text(), True)
    text = re.sub(r"(?m)^schedule\s*=.*$", 'schedule = "wsd"', text)
    first = parse_sweep(re.sub(r"(?m)^share\s*=.*$", "share = false", text))
    vocab = None if first.data.tokenizer == "bpe" else OLMO3_VOCAB_SIZE
    runs = first.runs(vocab)
    batch = first.train.batch_size * runs[0].model.seq_len
    shortest = min(-(-r.tokens_trained // batch) for r in runs)
    warmup = max(1, warmup_steps(shortest, first.train))
    text = re.sub(r"(?m)^warmup_frac\s*=.*$", f"warmup_steps = {warmup}", text)
    if "warmup_steps" not in text:
        text = text.replace("[train]\n", f"[train]\nwarmup_steps = {warmup}\n", 1)
    sweep = parse_sweep(text)
    forest = plan_forest(sweep.runs(vocab), share=True)
    own, alone = sum(forest.own_flops.values()), sum(forest.alone_flops.values())
    out = {"sweep": path, "runs": len(runs), "forks": len(forest.forks), "warmup_steps": warmup,
           "flops_alone": alone, "flops_shared": own, "flops_ratio": own / alone}  # fmt: skip
    print(json.dumps(out, indent=2))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan-only", default="", help="a sweep file: plan its forest, train nothing")
    ap.add_argument("--sweep", default="sweeps/demo.toml")
    ap.add_argument("--out", default="runs-bench-share")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--bootstrap", type=int, default=20)
    ap.add_argument(
        "--baseline", default="", help="a runs table to fit beside (e.g. the cosine demo)"
    )
    args = ap.parse_args()
    if args.plan_only:
        plan_only(args.plan_only)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = Path(args.sweep).read_text()
    name = re.search(r'(?m)^name\s*=\s*"([^"]+)"', text).group(1)
    results: dict = {"sweep": args.sweep, "jobs": args.jobs}
    for label, share in (("independent", False), ("shared", True)):
        toml = out / f"{label}.toml"
        toml.write_text(variant(text, share))
        root = out / label
        run(["sweep", str(toml), "--out", str(root), "--dry-run"])  # prepares the corpus cache
        start = time.perf_counter()
        run(["sweep", str(toml), "--out", str(root), "--jobs", str(args.jobs)])
        wall = time.perf_counter() - start
        summary = pd.read_parquet(root / name / "summary.parquet")
        own, alone = trained_flops(summary)
        results[label] = {"wall_s": wall, "trained_flops": own, "alone_flops": alone}
        print(f"{label:12s} {len(summary)} runs in {wall:7.1f} s, {own:.3e} FLOPs trained")

    a = pd.read_parquet(out / "independent" / name / "summary.parquet").set_index("run_id")
    b = pd.read_parquet(out / "shared" / name / "summary.parquet").set_index("run_id")
    same_runs = sorted(a.index) == sorted(b.index)
    diff = (a["loss"] - b.loc[a.index, "loss"]).abs().max() if same_runs else float("nan")
    results["same_runs"], results["max_loss_difference"] = same_runs, float(diff)
    flops_ratio = results["shared"]["trained_flops"] / results["independent"]["trained_flops"]
    wall_ratio = results["shared"]["wall_s"] / results["independent"]["wall_s"]
    results["flops_ratio"], results["wall_ratio"] = flops_ratio, wall_ratio
    print(f"same runs: {same_runs}; largest |loss difference|: {diff:.3g}")
    print(f"FLOPs shared / independent: {flops_ratio:.3f}; wall time: {wall_ratio:.3f}")

    fits = {
        label: fit(out / label / name, out / f"fit-{label}.json", args.bootstrap)
        for label in ("independent", "shared")
    }
    if args.baseline:
        fits["baseline"] = fit(args.baseline, out / "fit-baseline.json", args.bootstrap)
    results["fits"] = {label: flat(f) for label, f in fits.items()}
    print(f"\n{'':18s}" + "".join(f"{k:>32s}" for k in fits))
    for p in results["fits"]["independent"]["params"]:
        cells = []
        for f in results["fits"].values():
            value, (lo, hi) = f["params"].get(p), f["ci95"].get(p) or (None, None)
            ci = f" [{lo:.3g}, {hi:.3g}]" if lo is not None else ""
            cells.append(f"{value:.4g}{ci}" if value is not None else "-")
        print(f"{p:18s}" + "".join(f"{c:>32s}" for c in cells))
    print(
        f"{'log-RMSE':18s}" + "".join(f"{f['rmse_log']:>32.4f}" for f in results["fits"].values())
    )
    (out / "share.json").write_text(json.dumps(results, indent=2, default=float))
    print(f"\nwrote {out / 'share.json'}")


if __name__ == "__main__":
    main()
