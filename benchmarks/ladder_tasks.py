"""The OLMo model ladder's check, by cdlaw's task predictors: from its 190M and 370M runs
(every evaluation, checkpoints included), predict the ten task accuracies of its 760M runs,
each with its band, as `cdlaw downstream` then `cdlaw predict` would (docs/results.md).

    .venv/bin/python benchmarks/ladder_tasks.py --table olmo_ladder_190M_760M.csv [--bootstrap 200]

The table is Bhagia et al. 2024's (arXiv 2412.04403) ladder, one row per evaluation of
each run as github.com/allenai/OLMo-ladder releases them (src/scripts/paper/data/ladder-runs): OLMo 2 models of 190M, 370M
and 760M parameters at 1, 2, 5 and 10× Chinchilla's 20 tokens per parameter. Prints, per
task, the predictor chosen, the noise and whether the runs support a prediction, then each
760M run's prediction, band and truth; then the mean |error|, the count within 2 points and
how many bands hold the truth, for the 10×C run (the most over-trained, as the ladder's
own targets are) and for all four.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.forecast import forecast
from cdlaw.fit.predictors import fit_task_predictors
from cdlaw.fit.table import prepare_runs

FILE = "olmo_ladder_190M_760M.csv"
TARGET = 700e6  # the runs at or above this N are predicted, the rest fitted


def check(table_path: Path, boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """One row per (task, 760M run): ratio, predictor, value, lo, hi, truth, supported, for
    the ladder's table at `table_path`."""
    table = pd.read_csv(table_path)
    fitted = prepare_runs(table[table["n_params"] < TARGET].copy(), FILE, checkpoints=True)
    tps = [tp for tp in fit_task_predictors(fitted, boot, seed) if tp.task != "average"]
    rows = []
    final = table[(table["n_params"] >= TARGET) & (table["checkpoint"] == 0)]
    for tp in tps:
        for _, r in final.iterrows():
            f = forecast(tp, r["n_params"], r["fresh_tokens"] + r["derived_tokens"])
            assert f is not None and f.ci95 is not None
            rows.append({
                "task": tp.task, "ratio": r["fresh_tokens"] / r["n_params"],
                "predictor": f.predictor, "value": f.value, "lo": f.ci95[0], "hi": f.ci95[1],
                "truth": float(r[tp.column]), "noise": tp.noise.sd if tp.noise else np.nan,
                "supported": f.unsupported is None, "spread": f.spread,
            })  # fmt: skip
    out = pd.DataFrame(rows)
    out["error"] = out["value"] - out["truth"]
    out["held"] = (out["lo"] <= out["truth"]) & (out["truth"] <= out["hi"])
    return out


def summary(d: pd.DataFrame) -> str:
    """Mean |error|, within 2 points, bands that hold the truth: "in points"."""
    a = d["error"].abs()
    return (
        f"mean |error| {100 * a.mean():.2f} points, {int((a <= 0.02).sum())} of {len(d)} within "
        f"2 points, {int(d['held'].sum())} of {len(d)} bands hold the truth"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--table",
        default=str(Path(__file__).parents[1].parent / "shared/data/published" / FILE),
        help=f"the ladder's evaluations, one row each ({FILE})",
    )
    ap.add_argument("--bootstrap", type=int, default=200)
    args = ap.parse_args()
    if not Path(args.table).is_file():
        raise SystemExit(
            f"{args.table} does not exist: give the ladder's evaluations (from "
            "github.com/allenai/OLMo-ladder) as one table with --table"
        )
    d = check(Path(args.table), args.bootstrap)
    print("| task | by | noise | supported | 760M at 10×C: predicted (95% band) | observed |")
    print("|---|---|---|---|---|---|")
    top = d[d["ratio"] > 150]
    for _, r in top.iterrows():
        print(
            f"| {r.task} | {r.predictor} | {r.noise:.4f} | {'yes' if r.supported else 'no'} | "
            f"{r.value:.3f} ({r.lo:.3f}–{r.hi:.3f}) | {r.truth:.3f} |"
        )
    print()
    print("| task | 760M at 1×C | 2×C | 5×C | predicted − observed, 10×C |")
    print("|---|---|---|---|---|")
    for task, g in d.groupby("task", sort=False):
        cells = [
            f"{e:+.3f}" + ("" if h else " ✗") for e, h in zip(g["error"], g["held"], strict=True)
        ]
        print(f"| {task} | " + " | ".join(cells) + " |")
    print(f"\n760M at 10×C: {summary(top)}")
    print(f"every 760M run: {summary(d)}")
    ok = d[d["supported"]]
    print(f"tasks the runs support ({ok['task'].nunique()}): {summary(ok)}")


if __name__ == "__main__":
    main()
