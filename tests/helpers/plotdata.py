"""Synthetic inputs for the plot and report tests, written to the file contracts of docs/files.md.

Losses come from a known CD law (the CD paper's published constants) times log-normal
noise, so a figure's content can be checked against exact numbers. Files are written
independently of cdlaw.figures.plot, so a mismatch between the contract and the reader fails.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from cdlaw.law import PRESETS, Law, empirical_eta
from cdlaw.regimes import classify

TRUE_LAW = PRESETS["qin2026"]
SIZES = (14e6, 30e6, 60e6, 100e6)
TOKENS_PER_PARAM = (5.0, 20.0)
RATIOS = (1.0, 3.0, 7.0, 15.0)
STRATEGIES = ("repetition", "paraphrase")
NOISE = 0.004  # log-space standard deviation of the synthetic losses
DROPPED_ROW = 5  # one row the "fit" dropped as an outlier

SWEEP_TOML = """# synthetic sweep for the plot tests
name = "synthetic"
sizes = ["14M", "30M", "60M", "100M"]
tokens_per_param = [5, 20]
derived_ratio = [0, 1, 3, 7, 15]
strategies = ["repetition", "paraphrase"]
"""


def run_table(seed: int = 0, law: Law = TRUE_LAW) -> pd.DataFrame:
    """The sweep grid with noisy losses: per (N, D) one 1-epoch run + 4 ratios × 2 strategies."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in SIZES:
        for tpp in TOKENS_PER_PARAM:
            d = n * tpp
            cells = [("none", 0.0)] + [(s, r) for s in STRATEGIES for r in RATIOS]
            for s, r in cells:
                dp = r * d
                loss = float(law.loss(n, d, dp, s)) * float(np.exp(NOISE * rng.standard_normal()))
                rows.append(
                    {
                        "n_params": n,
                        "fresh_tokens": d,
                        "derived_tokens": dp,
                        "strategy": s,
                        "loss": loss,
                    }
                )
    df = pd.DataFrame(rows)
    df.insert(0, "run_id", [_run_id(r) for r in df.to_dict("records")])
    return df


def _run_id(rec: dict) -> str:
    key = f"{rec['n_params']:.0f}-{rec['fresh_tokens']:.0f}-{rec['derived_tokens']:.0f}-{rec['strategy']}"
    return hashlib.sha1(key.encode()).hexdigest()[:10]


def summary_table(table: pd.DataFrame) -> pd.DataFrame:
    """The docs/files.md summary.parquet columns for the synthetic runs."""
    t = table.copy()
    n, d, dp = t["n_params"], t["fresh_tokens"], t["derived_tokens"]
    t["sweep"] = "synthetic"
    t["n_params_total"] = n * 1.3
    t["tokens_trained"] = d + dp
    t["derived_ratio"] = dp / d
    t["epochs"] = np.where(t["strategy"] == "repetition", (d + dp) / d, 1.0)
    t["tokens_per_param"] = d / n
    t["lr"], t["weight_decay"], t["seed"] = 3e-3, 0.1, 0
    t["d_model"], t["n_layers"], t["n_heads"] = 256, 4, 8
    t["seq_len"], t["batch_tokens"], t["vocab_size"] = 256, 16384, 4096
    t["schedule"] = "wsd"
    t["train_loss"] = t["loss"] - 0.05
    t["status"] = "done"
    t["flops"] = 6 * n * (d + dp)
    t["wall_seconds"] = 12.5
    t["tokens_per_second"] = (d + dp) / 12.5
    t["device"] = "cpu"
    t["corpus"] = "synthetic"
    t["cdlaw_version"] = "0.1.0"
    # a downstream task whose accuracy follows the loss (cdlaw downstream links them)
    noise = np.random.default_rng(7).normal(0, 0.01, len(t))
    t["task_quiz_acc"] = 0.25 + 0.5 / (1 + np.exp(3.0 * (t["loss"] - t["loss"].median()))) + noise
    return t


def fit_rows(table: pd.DataFrame, law: Law, heldout_n: float | None) -> pd.DataFrame:
    """fit_rows.parquet as the fit writes it (docs/files.md + the plot brief's column list)."""
    t = table.copy().reset_index(drop=True)
    t.insert(0, "row_id", np.arange(len(t)))
    N, D, Dp = (t[c].to_numpy(float) for c in ("n_params", "fresh_tokens", "derived_tokens"))
    pred = np.array(
        [float(law.loss(a, b, c, s)) for a, b, c, s in zip(N, D, Dp, t["strategy"], strict=True)]
    )
    regime = [classify(law, a, b, c, s) for a, b, c, s in zip(N, D, Dp, t["strategy"], strict=True)]
    t["derived_ratio"] = Dp / D
    t["tokens_per_param"] = D / N
    t["predicted_loss"] = pred
    t["residual_log"] = np.log(t["loss"]) - np.log(pred)
    t["empirical_eta"] = empirical_eta(law, N, D, Dp, t["loss"].to_numpy())
    t["regime"] = [str(r.regime[()]) for r in regime]
    t["loss_one_epoch"] = [float(r.loss_one_epoch[()]) for r in regime]
    t["loss_data_floor"] = [float(r.loss_data_floor[()]) for r in regime]
    t["loss_model_floor"] = [float(r.loss_model_floor[()]) for r in regime]
    t["derived_gain_share"] = [float(r.derived_gain_share[()]) for r in regime]
    t["heldout"] = (N >= heldout_n) if heldout_n else False
    t["used"] = ~t["heldout"] & (t["row_id"] != DROPPED_ROW)
    return t


def fit_json(rows: pd.DataFrame, law: Law, heldout_n: float | None, source: str) -> dict:
    """A fit.json (docs/files.md) whose parameters are the true ones (the test is the figure)."""
    used = rows["used"].to_numpy(bool)
    held = rows["heldout"].to_numpy(bool)
    res = rows["residual_log"].to_numpy(float)
    d = law.to_dict()
    ci = {k: [v * 0.95, v * 1.05] for k, v in d["params"].items()}
    for s, p in d["strategies"].items():
        ci.update({f"{s}.{k}": [v - abs(v) * 0.05, v + abs(v) * 0.05] for k, v in p.items()})
    return {
        "law": law.form,
        "method": "joint",
        "huber_delta": 0.1,
        "params": d["params"],
        "strategies": d["strategies"],
        "ci95": ci,
        "n_rows": len(rows),
        "n_used": int(used.sum()),
        "dropped": [DROPPED_ROW],
        "objective": float(np.sum(res[used] ** 2)),
        "rmse_log": float(np.sqrt(np.mean(res[used] ** 2))),
        "holdout": {"n_params": heldout_n, "rmse_log": float(np.sqrt(np.mean(res[held] ** 2)))}
        if heldout_n
        else None,
        "optimizer": {"success": True, "message": "synthetic", "n_starts": 1, "at_bound": []},
        "data_range": {
            "n_params": [float(rows["n_params"].min()), float(rows["n_params"].max())],
            "fresh_tokens": [float(rows["fresh_tokens"].min()), float(rows["fresh_tokens"].max())],
            "derived_ratio": [0.0, float(rows["derived_ratio"].max())],
        },
        "bootstrap": [],
        "bootstrap_params": [],
        "warnings": [],
        "source": source,
    }


def metrics_frame(rec: dict, points: int = 24) -> pd.DataFrame:
    """A training curve ending at the run's final loss; val_loss every 3rd step, NaN between."""
    total = rec["fresh_tokens"] + rec["derived_tokens"]
    seen = np.geomspace(total / 60, total, points)
    val = rec["loss"] + 0.5 * ((total / seen) ** 0.45 - 1)
    val[np.arange(points) % 3 != 2] = np.nan
    val[-1] = rec["loss"]
    return pd.DataFrame(
        {
            "step": np.arange(1, points + 1),
            "tokens_seen": seen,
            "epoch": seen / rec["fresh_tokens"],
            "lr": np.full(points, 3e-3),
            "train_loss": rec["loss"] + 0.5 * ((total / seen) ** 0.45 - 1) - 0.05,
            "val_loss": val,
            "grad_norm": np.full(points, 0.8),
            "flops": 6 * rec["n_params"] * seen,
            "elapsed_s": np.linspace(0.5, 12.5, points),
        }
    )


def write_runs(
    root: Path,
    seed: int = 0,
    with_fit: bool = True,
    heldout: bool = True,
    n_runs: int | None = None,
) -> Path:
    """A complete runs/<sweep>/ folder (docs/files.md) in root/synthetic; returns its path.

    n_runs keeps only the first n runs of the grid (too few to fit, when small).
    """
    runs = Path(root) / "synthetic"
    runs.mkdir(parents=True, exist_ok=True)
    table = run_table(seed).iloc[:n_runs]
    summary = summary_table(table)
    summary.to_parquet(runs / "summary.parquet", index=False)
    (runs / "sweep.toml").write_text(SWEEP_TOML)
    for rec in summary.to_dict("records"):
        d = runs / rec["run_id"]
        d.mkdir(exist_ok=True)
        metrics_frame(rec).to_parquet(d / "metrics.parquet", index=False)
        (d / "config.json").write_text(
            json.dumps(
                {
                    k: rec[k]
                    for k in ("run_id", "n_params", "fresh_tokens", "derived_tokens", "strategy")
                }
            )
        )
        (d / "result.json").write_text(json.dumps(rec))
    if with_fit:
        heldout_n = max(SIZES) if heldout else None
        rows = fit_rows(table, TRUE_LAW, heldout_n)
        rows.to_parquet(runs / "fit_rows.parquet", index=False)
        fit = fit_json(rows, TRUE_LAW, heldout_n, str(runs))
        (runs / "fit.json").write_text(json.dumps(fit, indent=2))
        comparison, left_out = compare_files(table, str(runs))
        left_out.to_parquet(runs / "compare_rows.parquet", index=False)
        (runs / "compare.json").write_text(json.dumps(comparison, indent=2))
        from cdlaw.fit.table import prepare_runs
        from cdlaw.tasks.links import fit_downstream

        links = fit_downstream(prepare_runs(summary), n_boot=10, source=str(runs))
        links.write(runs / "downstream.json")
    return runs


def compare_files(table: pd.DataFrame, source: str) -> tuple[dict, pd.DataFrame]:
    """compare.json and compare_rows.parquet (docs/fit.md) as `cdlaw compare` would write
    them for two laws: the true one, and a worse one (each row's loss 3% off)."""
    rows, laws = [], []
    for law, bias in (("cd", 1.0), ("chinchilla", 1.03)):
        pred = [float(TRUE_LAW.loss(r.n_params, r.fresh_tokens, r.derived_tokens, r.strategy))
                * bias for r in table.itertuples()]  # fmt: skip
        left = table.assign(law=law, row_id=range(len(table)), predicted=pred,
                            largest=table["n_params"] == max(SIZES))  # fmt: skip
        rows.append(left[["law", "row_id", "n_params", "fresh_tokens", "derived_tokens",
                          "strategy", "loss", "predicted", "largest"]])  # fmt: skip
        err = np.log(left["loss"]) - np.log(left["predicted"])
        rmse = float(np.sqrt(np.mean(err**2)))
        held = float(np.sqrt(np.mean(err[left["largest"]] ** 2)))
        laws.append({"law": law, "n_params": 11 if law == "cd" else 5, "params": {},
                     "rmse_log": rmse, "objective": 0.0, "aic": 0.0, "bic": 0.0,
                     "heldout_rmse_log": held, "loso_rmse_log": rmse, "converged": True,
                     "plan": None, "skipped_sizes": []})  # fmt: skip
    comparison = {"source": source, "huber_delta": 0.1, "n_rows": len(table),
                  "seed_noise": None, "winner": "cd", "verdict": "cd predicts best",
                  "laws": laws, "skipped": {}}  # fmt: skip
    return comparison, pd.concat(rows, ignore_index=True)


def write_external(root: Path, seed: int = 1) -> tuple[Path, Path]:
    """A published-style CSV (only the five required columns) and a fit.json beside it."""
    root = Path(root) / "external"
    root.mkdir(parents=True, exist_ok=True)
    table = run_table(seed).drop(columns=["run_id"])
    csv = root / "published.csv"
    table.to_csv(csv, index=False)
    rows = fit_rows(table, TRUE_LAW, None)
    fit = fit_json(rows, TRUE_LAW, None, str(csv))
    fit_path = root / "published.fit.json"  # where `cdlaw fit published.csv` writes
    fit_path.write_text(json.dumps(fit, indent=2))
    return csv, fit_path


def brute_force_frontier(law: Law, budgets, unique_tokens: float) -> dict:
    """A frontier JSON by grid search (docs/plan.md), independent of cdlaw.plan.planner."""
    n_grid = np.geomspace(1e6, 1e12, 1500)
    g = (law.params["alpha"] * law.params["A"] / (law.params["beta"] * law.params["B"])) ** (
        1 / (law.params["alpha"] + law.params["beta"])
    )

    def spend(c, n, s):
        total = c / (6 * n)
        d = np.minimum(unique_tokens, total)
        dp = total - d
        return d, dp, law.loss(n, d, dp, s)

    rows = []
    for c in budgets:
        best = None
        for s in law.strategies:
            d, dp, loss = spend(c, n_grid, s)
            i = int(np.argmin(loss))
            if best is None or loss[i] < best[4]:
                best = (s, n_grid[i], d[i], dp[i], loss[i])
        s, n, d, dp, loss = best
        naive_n = g * (c / 6) ** (law.params["beta"] / (law.params["alpha"] + law.params["beta"]))
        nd, ndp, nloss = spend(c, naive_n, "repetition")
        # four-epoch rule: at most 4 passes over the unique data, model takes the rest.
        four_n = max(c / (6 * 4 * unique_tokens), float(naive_n))
        fd, fdp, floss = spend(c, four_n, "repetition")
        rows.append(
            {
                "budget_flops": float(c),
                "n_params": float(n),
                "fresh_tokens": float(d),
                "derived_tokens": float(dp),
                "strategy": s,
                "epochs": float((d + dp) / d) if s == "repetition" else 1.0,
                "paraphrase_passes": float(dp / d) if s == "paraphrase" else 0.0,
                "predicted_loss": float(loss),
                "regime": "compute-bound",
                "naive": {
                    "n_params": float(naive_n),
                    "derived_tokens": float(ndp),
                    "epochs": float((nd + ndp) / nd),
                    "predicted_loss": float(nloss),
                },
                "four_epoch": {
                    "n_params": float(four_n),
                    "derived_tokens": float(fdp),
                    "epochs": float((fd + fdp) / fd),
                    "predicted_loss": float(floss),
                },
            }
        )
    return {
        "law": "qin2026",
        "law_params": law.to_dict(),
        "unique_tokens": float(unique_tokens),
        "strategy": "auto",
        "rows": rows,
    }
