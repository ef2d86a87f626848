"""Gadre et al. 2024's check, by cdlaw's task predictors: from the RedPajama runs their
notebook fits (the four small sizes at 20 tokens per parameter, the 11M at 320, and the
1.4B at 20), predict the 17-task average top-1 error, and each task's accuracy, of the
1.4B at 640 tokens per parameter and of the 6.9B at 20 (docs/results.md).

    .venv/bin/python benchmarks/gadre_tasks.py --table gadre2024_overtrained.csv [--bootstrap 200]

The table is the authors' released runs, one row per model: benchmarks/gadre_table.py
builds it from a clone of github.com/mlfoundations/scaling. Prints a markdown table of the average error by each predictor beside the authors'
relative errors, then each task's accuracy. tests/fit/test_published_tasks.py reads the
average table back from docs/results.md and checks it against this computation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.forecast import forecast
from cdlaw.fit.predictors import fit_task_predictors
from cdlaw.fit.table import prepare_runs

SUBSET = (
    "bigbench_operators pubmed_qa_labeled hellaswag_zeroshot boolq arc_easy coqa "
    "bigbench_dyck_languages lambada_openai bigbench_novel_concepts winograd "
    "bigbench_cs_algorithms commonsense_qa bigbench_qa_wikidata hellaswag copa squad piqa"
).split()
TARGETS = {"1.4B at 640": "rpj-open_lm_1b-32.0", "6.9B at 20": "rpj-open_lm_7b-1.0"}
AUTHORS = {"1.4B at 640": 3.64, "6.9B at 20": 0.05}  # their notebook's relative errors, %
AVERAGE_PREDICTORS = ("val-loss", "val-loss-exp", "direct")
FILE = "gadre2024_overtrained.csv"


def fitting_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The authors' fitting runs (their scaling/shared.py fit_ds): RedPajama, the four
    small models at 20 tokens per parameter, the 11M at 320, and the 1.4B at 20."""
    r = table[table["dataset"] == "rpj"]
    small = r[~r["name"].str.contains("open_lm")]
    smallest = small["n_params"] == small["n_params"].min()
    keep = (small["token_multiplier"] == 20) | (smallest & (small["token_multiplier"] == 320))
    return pd.concat([small[keep], r[r["name"] == "rpj-open_lm_1b-1.0"]])


def check(table_path: Path, boot: int = 200, seed: int = 0) -> dict:
    """{"average": {target: {predictor: (predicted error, observed, relative %)}},
    "tasks": {target: {task: (predicted acc by val-loss, by val-loss-exp, observed)}}}
    for the table at `table_path` (benchmarks/gadre_table.py's)."""
    table = pd.read_csv(table_path)
    cols = ["n_params", "fresh_tokens", "derived_tokens", "strategy", "loss"]
    cols += [f"task_{t}_acc" for t in SUBSET]
    runs = prepare_runs(fitting_runs(table)[cols].copy(), FILE)
    tps = {tp.task: tp for tp in fit_task_predictors(runs, boot, seed, average=list(SUBSET))}
    out: dict = {"average": {}, "tasks": {}}
    for label, name in TARGETS.items():
        row = table[table["name"] == name].iloc[0]
        N, T = float(row["n_params"]), float(row["fresh_tokens"])
        observed = 1 - float(np.mean([row[f"task_{t}_acc"] for t in SUBSET]))
        avg = {}
        for p in AVERAGE_PREDICTORS:
            f = forecast(tps["average"], N, T, predictor=p)
            if f is not None:
                err = 1 - f.value
                band = (1 - f.ci95[1], 1 - f.ci95[0]) if f.ci95 else None
                avg[p] = (err, observed, 100 * abs(err - observed) / observed, band)
        out["average"][label] = avg
        tasks = {}
        for t in SUBSET:
            a, b = (forecast(tps[t], N, T, predictor=p) for p in ("val-loss", "val-loss-exp"))
            tasks[t] = (a.value if a else np.nan, b.value if b else np.nan, row[f"task_{t}_acc"])
        out["tasks"][label] = tasks
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--table",
        default=str(Path(__file__).parents[1].parent / "shared/data/published" / FILE),
        help=f"the runs as benchmarks/gadre_table.py builds them ({FILE})",
    )
    ap.add_argument("--bootstrap", type=int, default=200)
    args = ap.parse_args()
    if not Path(args.table).is_file():
        raise SystemExit(
            f"{args.table} does not exist: build it with benchmarks/gadre_table.py from a clone "
            "of github.com/mlfoundations/scaling, and give it with --table"
        )
    res = check(Path(args.table), args.bootstrap)
    print(
        "| target | predictor | predicted error | 95% band | observed | relative error | authors |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, avg in res["average"].items():
        for p, (err, obs, rel, band) in avg.items():
            b = f"{band[0]:.4f}–{band[1]:.4f}" if band else "none"
            print(
                f"| {label} | {p} | {err:.4f} | {b} | {obs:.4f} | {rel:.2f}% | {AUTHORS[label]}% |"
            )
    print()
    labels = list(res["tasks"])
    head = " | ".join(f"{lb}: val-loss, val-loss-exp, observed" for lb in labels)
    print(f"| task | {head} |")
    print("|---" * (1 + len(labels)) + "|")
    for t in SUBSET:
        cells = []
        for lb in labels:
            a, b, o = res["tasks"][lb][t]
            cells.append(f"{a:.3f}, {b:.3f}, {o:.3f}")
        print(f"| {t} | " + " | ".join(cells) + " |")
    for lb in labels:
        rows = np.array(list(res["tasks"][lb].values()), float)
        mae = np.nanmean(np.abs(rows[:, :2] - rows[:, 2:3]), axis=0)
        print(
            f"\n{lb}: mean |error| over the 17 tasks: val-loss {mae[0]:.4f}, val-loss-exp {mae[1]:.4f}"
        )


if __name__ == "__main__":
    main()
