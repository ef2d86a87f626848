"""Gadre et al. 2024's check, by cdlaw's task predictors: from the RedPajama runs their
notebook fits, predict the 17-task average top-1 error, and each task's accuracy, of the
1.4B at 640 tokens per parameter and of the 6.9B at 20 (docs/results.md).

    .venv/bin/python benchmarks/gadre_tasks.py [--published ../shared/data/published] [--bootstrap 200]

Two protocols, each a way a user would run cdlaw:

- **cdlaw alone** (`cdlaw downstream` on the six runs, then `cdlaw predict`): every
  predictor, step 1 and link, fitted to the six runs the authors' link is fitted to.
- **the authors' loss law** (`cdlaw predict --law`): the authors fit their loss law to five
  runs only (the four small sizes at 20 tokens per parameter and the 11M at 320, not the
  1.4B: their scaling/shared.py fit_ds), in their form, L = E + A/N^α + B/D^α (one
  exponent, four parameters), by least squares of the loss itself; cdlaw's links, fitted
  to the six, then read the loss that law gives at each model, as `predict --law` reads a
  fit.json. cdlaw's own fit refuses five runs for five parameters, so the law is fitted
  here, as the authors fit it.

Prints a markdown table of the average error by each predictor and protocol beside the
authors' relative errors, then each task's accuracy. tests/fit/test_published_tasks.py
reads the average table back from docs/results.md and checks it against this computation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

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
LAW_CHAINS = ("val-loss", "val-loss-exp")  # the predictors a law's loss feeds
FILE = "gadre2024_overtrained.csv"


def fitting_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The authors' fitting runs (their scaling/shared.py fit_ds): RedPajama, the four
    small models at 20 tokens per parameter, the 11M at 320, and the 1.4B at 20."""
    r = table[table["dataset"] == "rpj"]
    small = r[~r["name"].str.contains("open_lm")]
    smallest = small["n_params"] == small["n_params"].min()
    keep = (small["token_multiplier"] == 20) | (smallest & (small["token_multiplier"] == 320))
    return pd.concat([small[keep], r[r["name"] == "rpj-open_lm_1b-1.0"]])


def authors_law(runs: pd.DataFrame):
    """The authors' loss law fitted as they fit it: to the fitting runs but the 1.4B, in
    their form E + A/N^α + B/D^α, by least squares of the loss, the best of a grid of
    starts (their curve_fit_powlaw_ours). Returns loss(N, D)."""
    five = runs[~runs["name"].str.contains("open_lm")]
    N, D, y = (five[c].to_numpy(float) for c in ("n_params", "fresh_tokens", "loss"))

    def law(p, N, D):
        return p[0] + p[1] * N ** -p[2] + p[3] * D ** -p[2]

    best = None
    for a0 in (0.1, 0.2, 0.3, 0.5):
        for e0 in (0.0, 1.0, 2.0):
            for c0 in (1e2, 1e3):
                r = least_squares(
                    lambda p: law(p, N, D) - y, [e0, c0, a0, c0], bounds=(0, np.inf),
                    max_nfev=20000,
                )  # fmt: skip
                if best is None or r.cost < best.cost:
                    best = r
    assert best is not None
    return lambda n, d: float(law(best.x, n, d))


def check(published: Path, boot: int = 200, seed: int = 0) -> dict:
    """{"average": {target: {(protocol, predictor): (predicted error, observed, relative
    %, band)}}, "tasks": {target: {task: (predicted acc by val-loss, by val-loss-exp,
    observed)}}}; protocol "cdlaw" or "authors' law" (module doc)."""
    table = pd.read_csv(published / FILE)
    cols = ["n_params", "fresh_tokens", "derived_tokens", "strategy", "loss"]
    cols += [f"task_{t}_acc" for t in SUBSET]
    runs = fitting_runs(table)
    law = authors_law(runs)
    prepared = prepare_runs(runs[cols].copy(), FILE)
    tps = {tp.task: tp for tp in fit_task_predictors(prepared, boot, seed, average=list(SUBSET))}
    out: dict = {"average": {}, "tasks": {}}
    for label, name in TARGETS.items():
        row = table[table["name"] == name].iloc[0]
        N, T = float(row["n_params"]), float(row["fresh_tokens"])
        observed = 1 - float(np.mean([row[f"task_{t}_acc"] for t in SUBSET]))
        avg = {}
        for protocol, loss in (("cdlaw", None), ("authors' law", law(N, T))):
            for p in AVERAGE_PREDICTORS:
                if loss is not None and p not in LAW_CHAINS:
                    continue
                f = forecast(tps["average"], N, T, loss=loss, predictor=p)
                if f is not None:
                    err = 1 - f.value
                    band = (1 - f.ci95[1], 1 - f.ci95[0]) if f.ci95 else None
                    avg[(protocol, p)] = (err, observed, 100 * abs(err - observed) / observed, band)
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
        "--published", default=str(Path(__file__).parents[1].parent / "shared/data/published")
    )
    ap.add_argument("--bootstrap", type=int, default=200)
    args = ap.parse_args()
    res = check(Path(args.published), args.bootstrap)
    print(
        "| target | loss from | predictor | predicted error | 95% band | observed | "
        "relative error | authors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, avg in res["average"].items():
        for (protocol, p), (err, obs, rel, band) in avg.items():
            b = f"{band[0]:.4f}–{band[1]:.4f}" if band else "none"
            print(
                f"| {label} | {protocol} | {p} | {err:.4f} | {b} | {obs:.4f} | {rel:.2f}% | "
                f"{AUTHORS[label]}% |"
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
