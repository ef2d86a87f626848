"""Which `--select` predicts runs it never saw best? min, mean and none on tables with
replicate runs, in one run.

A cell (N, D, D′, strategy) trained more than once (seeds, or a pooled table's several
datasets) has several losses; `--select min` fits the lowest, `mean` their average, `none`
every run. Each is scored by how well the fit predicts every run of cells it did not see:

- extrapolation: fit without the largest model size, predict each of its runs (what a plan
  does: N beyond the runs);
- interpolation: five folds of cells (seeded), each fitted without its cells, predicting
  each of their runs.

The error is the log-RMSE over the held-out runs, and their mean log residual (a fit to the
lowest loss of each cell predicts runs low). Tables: the shipped demo tables (two seeds per
cell), the shared published tables that hold replicate cells, and a simulated table with
planted seed noise (the qin2026 law, 3 seeds per cell, 2% log-normal noise).

    .venv/bin/python benchmarks/bench_select.py [--published DIR] [--folds 5]
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.fit.cells import select_cells
from cdlaw.fit.procedure import default_law, fit_law
from cdlaw.fit.summary import predict_rows
from cdlaw.fit.table import CELL, load_runs
from cdlaw.law import PRESETS

ROOT = Path(__file__).resolve().parents[1]
SELECTS = ("min", "mean", "none")


def simulated(seed: int = 0, noise: float = 0.02, seeds: int = 3) -> pd.DataFrame:
    """qin2026 on a small CD-like grid (5 sizes, 3 tokens per parameter, r ∈ {0, 3, 15}),
    each cell trained `seeds` times with log-normal noise."""
    rng = np.random.default_rng(seed)
    law = PRESETS["qin2026"]
    rows = []
    for n in (20e6, 40e6, 80e6, 160e6, 320e6):
        for tpp in (5, 20, 80):
            d = n * tpp
            cells = [(d, 0.0, "none")] + [
                (d, r * d, s) for s in ("repetition", "paraphrase") for r in (3, 15)
            ]
            for fresh, derived, s in cells:
                for k in range(seeds):
                    rows.append((n, fresh, derived, s, k))
    t = pd.DataFrame(
        rows, columns=["n_params", "fresh_tokens", "derived_tokens", "strategy", "seed"]
    )
    n, d, dp = (t[c].to_numpy(float) for c in ("n_params", "fresh_tokens", "derived_tokens"))
    t["loss"] = [
        float(law.loss(a, b, c, s)) for a, b, c, s in zip(n, d, dp, t["strategy"], strict=True)
    ]
    t["loss"] *= np.exp(noise * rng.standard_normal(len(t)))
    return t


def held_out_error(train: pd.DataFrame, test: pd.DataFrame, law: str, select: str):
    """Log residuals of every test run, predicted by a fit to train under select."""
    fit = fit_law(train, law, select=select, bootstrap=0, naive=law == "chinchilla")
    pred = predict_rows(fit.law, test, naive=law == "chinchilla")
    return np.log(test["loss"].to_numpy(float)) - np.log(pred)


def score(runs: pd.DataFrame, folds: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """Per select: extrapolation and interpolation log-RMSE and mean residual."""
    law = default_law(runs)
    sizes = np.sort(runs["n_params"].unique())
    largest = runs["n_params"] == sizes[-1]
    cell_id = runs.groupby(list(CELL), sort=False).ngroup().to_numpy()
    fold = np.random.default_rng(seed).permutation(cell_id.max() + 1) % folds
    out = {}
    for select in SELECTS:
        ext = held_out_error(runs[~largest], runs[largest], law, select)
        inter = np.concatenate(
            [
                held_out_error(runs[fold[cell_id] != k], runs[fold[cell_id] == k], law, select)
                for k in range(folds)
            ]
        )
        out[select] = {
            "extrapolation": float(np.sqrt(np.mean(ext**2))),
            "extrapolation_bias": float(np.mean(ext)),
            "interpolation": float(np.sqrt(np.mean(inter**2))),
            "interpolation_bias": float(np.mean(inter)),
        }
    return out


def tables(published: Path) -> dict[str, pd.DataFrame]:
    out = {
        "demo-runs": load_runs(ROOT / "examples" / "demo-runs.csv", quiet=True),
        "demo-runs-cosine": load_runs(ROOT / "examples" / "demo-runs-cosine.csv", quiet=True),
        "simulated (3 seeds, 2% noise)": simulated(),
    }
    for f in sorted(published.glob("*.csv")) if published.is_dir() else []:
        try:
            runs = load_runs(f, quiet=True)
        except Exception:  # a table cdlaw cannot read as runs (curves): not this benchmark's
            continue
        if len(select_cells(runs, "min")) < len(runs) and runs["n_params"].nunique() >= 4:
            out[f.name] = runs
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--published", default=str(ROOT.parent / "shared" / "data" / "published"))
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    print(f"\n--select on held-out runs; {os.cpu_count()} cores")
    print(f"{'table':<34} {'select':<6} {'runs→rows':>10} {'extrap.':>8} {'bias':>8} "
          f"{'interp.':>8} {'bias':>8}")  # fmt: skip
    for name, runs in tables(Path(args.published)).items():
        result = score(runs, args.folds)
        for select, s in result.items():
            rows = f"{len(runs)}→{len(select_cells(runs, select))}"
            print(
                f"{name:<34} {select:<6} {rows:>10} {s['extrapolation']:8.4f} "
                f"{s['extrapolation_bias']:+8.4f} {s['interpolation']:8.4f} "
                f"{s['interpolation_bias']:+8.4f}",
                flush=True,
            )
        best = min(result, key=lambda k: result[k]["extrapolation"] + result[k]["interpolation"])
        print(f"{'':<34} best: {best}")


if __name__ == "__main__":
    main()
