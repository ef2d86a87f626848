"""How does `cdlaw fit` grow with the rows? Law-built tables of distinct rows, in one run.

Each table is made from the qin2026 constants with 0.5% multiplicative noise, every row a
cell of its own: N log-uniform over 14M–600M, fresh tokens per parameter log-uniform over
1–320 (0.05× to 16× of 20), a third of the rows one-epoch and the rest split between
repetition and paraphrase at D′/D log-uniform over 1–60. Pooled tables and checkpoint-rich
ladders reach such sizes. Each fit (the joint cd law, cdlaw's default starts, no
bootstrap) runs in a fresh process, which reports its wall and CPU time and its peak
resident memory (the interpreter and its imports included; the table's own build is
reported beside it).

    .venv/bin/python benchmarks/bench_fit_rows.py [--rows 1000,10000,100000]

Goals: the largest fit within 20× the time of the one ten times smaller (linear would be
10×), at no more than 2 GB peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np
import pandas as pd

from cdlaw.law import PRESETS


def law_table(n_rows: int, noise: float = 0.005, seed: int = 0) -> pd.DataFrame:
    """n_rows distinct cells from qin2026 (see the module docstring)."""
    rng = np.random.default_rng(seed)
    law = PRESETS["qin2026"]
    N = np.exp(rng.uniform(np.log(14e6), np.log(600e6), n_rows))
    D = N * np.exp(rng.uniform(np.log(1.0), np.log(320.0), n_rows))
    kind = rng.integers(0, 3, n_rows)  # 0: one epoch, 1: repetition, 2: paraphrase
    r = np.where(kind == 0, 0.0, np.exp(rng.uniform(0.0, np.log(60.0), n_rows)))
    strategy = np.array(["none", "repetition", "paraphrase"])[kind]
    loss = np.empty(n_rows)
    for s in ("none", "repetition", "paraphrase"):
        m = strategy == s
        loss[m] = law.loss(N[m], D[m], r[m] * D[m], s)
    loss *= np.exp(noise * rng.standard_normal(n_rows))
    return pd.DataFrame(
        {"n_params": N, "fresh_tokens": D, "derived_tokens": r * D, "strategy": strategy,
         "loss": loss}
    )  # fmt: skip


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one(n_rows: int) -> dict:
    """Fit one table in this process: what the parent prints."""
    from cdlaw.fit.procedure import fit_law

    df = law_table(n_rows)
    before = peak_rss_mb()
    t, c = time.perf_counter(), time.process_time()
    result = fit_law(df, law="cd", bootstrap=0)
    return {
        "rows": n_rows,
        "wall_s": time.perf_counter() - t,
        "cpu_s": time.process_time() - c,
        "peak_mb": peak_rss_mb(),
        "table_mb": before,
        "objective": result.objective,
        "starts": result.optimizer.n_starts,
        "alpha": result.law.params["alpha"],
        "beta": result.law.params["beta"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1000,10000,100000")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: fit one table
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    sizes = [int(float(x)) for x in args.rows.split(",")]
    print(f"\ncdlaw fit rows benchmark: joint cd law, distinct law-built rows {sizes}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}")
    results = []
    for n in sizes:
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(n)], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(done.stderr[-2000:])
            raise SystemExit(f"the {n}-row fit failed")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(
            f"{r['rows']:>9,} rows: {r['wall_s']:8.2f} s wall {r['cpu_s']:8.2f} s CPU; peak "
            f"{r['peak_mb']:7.0f} MB (table built: {r['table_mb']:.0f} MB); objective "
            f"{r['objective']:.6g}; alpha {r['alpha']:.4f} beta {r['beta']:.4f}",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.1f} (other users)")
    by = {r["rows"]: r for r in results}
    for n in sizes:
        if n // 10 in by:
            ratio = by[n]["wall_s"] / by[n // 10]["wall_s"]
            cpu = by[n]["cpu_s"] / by[n // 10]["cpu_s"]
            print(
                f"{n:,} rows against {n // 10:,}: {ratio:.1f}x wall, {cpu:.1f}x CPU "
                f"(goal ≤ 20x: {'met' if ratio <= 20 else 'MISSED'}); peak "
                f"{by[n]['peak_mb'] / 1024:.2f} GB (goal ≤ 2 GB: "
                f"{'met' if by[n]['peak_mb'] <= 2048 else 'MISSED'})"
            )


if __name__ == "__main__":
    main()
