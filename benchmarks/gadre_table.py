"""Build gadre2024_overtrained.csv, the table benchmarks/gadre_tasks.py reads, from Gadre et
al. 2024's released runs ("Language models scale reliably with over-training and on
downstream tasks", arXiv 2403.08540; github.com/mlfoundations/scaling, MIT licence):

    git clone https://github.com/mlfoundations/scaling
    .venv/bin/python benchmarks/gadre_table.py scaling --out gadre2024_overtrained.csv

One row per model of exp_data/models/*.json (104 open_lm models of 11M–6.9B parameters on
C4, RedPajama or RefinedWeb, one epoch), by name: n_params and n_params_no_embed, its
tokens as fresh_tokens (derived_tokens 0, strategy none), token_multiplier (tokens per
parameter: 20 × its chinchilla_multiplier), each validation loss as loss_<set> (loss is
the C4 one, loss_c4_val), and the accuracy of each in-context task of
exp_data/evals/evaluation_<name>_heavy.json as task_<task>_acc.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

CHINCHILLA = 20  # tokens per parameter of a chinchilla_multiplier of 1
LOSS = "loss_c4_val"  # the loss the authors fit


def loss_name(val_data: str) -> str:
    """loss_<set> for an evaluation's data path: the folder under eval_data/ (under
    val_tok_mult/ where it sits there), with dashes as underscores."""
    parts = val_data.split("/")
    rest = parts[parts.index("eval_data") + 1 :]
    if rest[0] == "val_tok_mult":
        rest = rest[1:]
    return "loss_" + rest[0].replace("-", "_")


def model_row(model: dict, evals: dict) -> dict:
    """One model's row from its exp_data/models JSON and its evaluation's JSON."""
    hyper = model["hyperparameters"]
    losses = {loss_name(r["val_data"][0]): r["loss"] for r in model["results"]}
    tasks = evals["eval_metrics"]["icl"]
    return {
        "name": model["name"],
        "dataset": model["dataset_name"],
        "n_params": hyper["params"],
        "n_params_no_embed": hyper["params_no_embed"],
        "fresh_tokens": hyper["tokens"],
        "derived_tokens": 0,
        "strategy": "none",
        # as the JSON gives it: 4 (one file) → 80, 4.0 → 80.0, as the released table has it
        "token_multiplier": CHINCHILLA * hyper["chinchilla_multiplier"],
        "loss": losses[LOSS],
        **dict(sorted(losses.items())),
        **{f"task_{t}_acc": tasks[t] for t in sorted(tasks)},
    }


def build(clone: Path) -> list[dict]:
    """The rows from a clone of github.com/mlfoundations/scaling, by model name."""
    data = clone / "exp_data"
    rows = []
    for path in sorted((data / "models").glob("*.json")):
        model = json.loads(path.read_text())
        evals = json.loads((data / "evals" / f"evaluation_{model['name']}_heavy.json").read_text())
        rows.append(model_row(model, evals))
    if not rows:
        raise SystemExit(f"{clone} holds no exp_data/models/*.json: give a clone of the repository")
    return sorted(rows, key=lambda r: r["name"])


def write(rows: list[dict], out: Path) -> None:
    """The rows as CSV, every number as the JSON gave it (the shortest repr of a float)."""
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clone", help="a clone of github.com/mlfoundations/scaling")
    ap.add_argument("--out", default="gadre2024_overtrained.csv")
    args = ap.parse_args()
    rows = build(Path(args.clone))
    write(rows, Path(args.out))
    print(f"wrote {len(rows)} models to {args.out}")


if __name__ == "__main__":
    main()
