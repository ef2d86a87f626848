"""Tables shaped like the published ones the figures must hold on, each with a fit.json beside
it, for the figure tests.

- muennighoff_table: the shape of Muennighoff et al. 2023's 296 runs (arXiv 2305.16264),
  built from their law: 12 sizes 7M–8.7B, 6 unique-token budgets each (100M to 30 tokens per parameter) (72 (N, D) cells,
  most with one to three runs, a few with many), repetition up to 9,000 epochs, runs past
  a few hundred epochs overfitting (the loss rises again), and a few runs whose loss sits
  far below the law (empirical η of 10–27).
- cd_paper_table: the CD paper's 370 runs (Qin et al.) from ../shared/data/published, under
  cdlaw's column names; None where that folder is absent (a user's clone).
- write_with_fit: a table as t.csv with t.fit.json beside it (the law's constants), where
  `cdlaw plot t.csv` reads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.law import PRESETS, Law

ROOT = Path(__file__).resolve().parents[2]
# ../shared beside the checkout (the project's layout), or beside the folder of worktrees.
PUBLISHED = next(
    (r / "shared" / "data" / "published" for r in (ROOT, ROOT.parent, ROOT.parent.parent)
     if (r / "shared" / "data" / "published").is_dir()),
    ROOT.parent / "shared" / "data" / "published",
)  # fmt: skip
MUENNIGHOFF = PRESETS["muennighoff2023"]
MUENNIGHOFF_SIZES = (7.1e6, 14e6, 28e6, 55e6, 110e6, 220e6, 420e6, 620e6, 1.1e9, 2.2e9, 4.2e9,
                     8.7e9)  # fmt: skip
EPOCHS = (1, 2, 4, 7, 14, 30, 60, 150, 400, 1000, 3000, 9000)
N_RUNS = 296
OUTLIER_ETA = (27.0, 18.0, 10.0)


def muennighoff_table(seed: int = 0, law: Law = MUENNIGHOFF) -> pd.DataFrame:
    """296 repetition runs of Muennighoff et al.'s shape (see the module), losses from law
    with 0.5 % log-normal noise; past 300 epochs a run overfits by 0.03·ln(epochs/300)²
    nats; the last len(OUTLIER_ETA) rows are the outliers, with those empirical η."""
    rng = np.random.default_rng(seed)
    cells = [(n, d) for n in MUENNIGHOFF_SIZES for d in _budgets(n)]
    # No run past 1e22 FLOPs: large models repeat their data less.
    allowed = [[e for e in EPOCHS if 6 * n * d * e <= 1e22] or [1] for n, d in cells]
    # Most cells get one to three runs, a few many: runs go to cells by skewed weights.
    weight = rng.dirichlet(np.full(len(cells), 0.3))
    count = np.ones(len(cells), dtype=int)
    while count.sum() < N_RUNS:
        room = count < np.array([len(a) for a in allowed])
        i = rng.choice(len(cells), p=weight * room / (weight * room).sum())
        count[i] += 1
    rows = []
    for (n, d), epochs, k in zip(cells, allowed, count, strict=True):
        rows += [(n, d, (e - 1) * d) for e in sorted(rng.choice(epochs, size=k, replace=False))]
    t = pd.DataFrame(rows, columns=["n_params", "fresh_tokens", "derived_tokens"])
    t["strategy"] = np.where(t["derived_tokens"] > 0, "repetition", "none")
    t["epochs"] = (t["fresh_tokens"] + t["derived_tokens"]) / t["fresh_tokens"]
    n, d, dp = (t[c].to_numpy(float) for c in ("n_params", "fresh_tokens", "derived_tokens"))
    loss = law.loss(n, d, dp, "repetition")
    loss += 0.03 * np.log(np.maximum(t["epochs"].to_numpy() / 300, 1.0)) ** 2
    loss *= np.exp(0.005 * rng.standard_normal(len(t)))
    t["loss"] = loss
    # The outliers: runs of a few epochs whose loss is what D + η·D′ fresh tokens would give.
    few = t.index[(t["epochs"] > 1) & (t["epochs"] <= 7)]
    chosen = rng.choice(few, size=len(OUTLIER_ETA), replace=False)
    for i, eta in zip(chosen, OUTLIER_ETA, strict=True):
        eff = t.loc[i, "fresh_tokens"] + eta * t.loc[i, "derived_tokens"]
        t.loc[i, "loss"] = float(law.loss_one_epoch(t.loc[i, "n_params"], eff))
    order = [i for i in t.index if i not in set(chosen)] + list(chosen)
    return t.loc[order].reset_index(drop=True).drop(columns="epochs")


def _budgets(n: float) -> np.ndarray:
    """Six unique-token budgets for model size n: from max(100M, n/5) to 30·n tokens."""
    return np.geomspace(max(1e8, n / 5), 30 * n, 6).round(-6)


def cd_paper_table() -> pd.DataFrame | None:
    """The CD paper's runs under cdlaw's names, or None without ../shared/data/published."""
    path = PUBLISHED / "qin2026_triple_compact.csv"
    if not path.exists():
        return None
    raw = pd.read_csv(path)
    names = {"1epoch": "none", "repeat": "repetition", "paraphrase": "paraphrase"}
    return pd.DataFrame(
        {
            "strategy": raw["source"].map(names),
            "n_params": raw["N_params"],
            "fresh_tokens": raw["D_tokens"],
            "derived_tokens": raw["D_prime_tokens"],
            "loss": raw["val_loss"],
        }
    )


def write_with_fit(folder: Path, name: str, table: pd.DataFrame, law: Law) -> Path:
    """folder/name.csv and folder/name.fit.json (law's constants, named after the table):
    what `cdlaw fit` would leave beside it. Returns the CSV's path."""
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / f"{name}.csv"
    table.to_csv(csv, index=False)
    fit = {**law.to_dict(), "n_rows": len(table), "n_used": len(table), "source": str(csv)}
    (folder / f"{name}.fit.json").write_text(json.dumps(fit))
    return csv
