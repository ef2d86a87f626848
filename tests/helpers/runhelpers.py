"""Helpers the sweep tests share: the CLI in a subprocess, and what a runs folder holds."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path


def cdlaw(*args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """`python -m cdlaw ARGS` in a subprocess, wide enough that rich does not wrap stderr."""
    return subprocess.run(
        [sys.executable, "-m", "cdlaw", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "1000"},
    )


def cdlaw_here(monkeypatch, capsys, cwd, *args) -> tuple[int, str, str]:
    """`cdlaw ARGS` in this process (no start-up cost) in cwd: (exit code, stdout, stderr)."""
    import pytest

    from cdlaw.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["cdlaw", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
        raise SystemExit(0)
    captured = capsys.readouterr()
    return e.value.code or 0, captured.out, captured.err


def result_losses(sweep_dir: Path) -> dict[str, tuple]:
    """run_id -> (status, loss) of every result.json in a sweep folder."""
    out = {}
    for p in sorted(Path(sweep_dir).glob("*/result.json")):
        row = json.loads(p.read_text())
        out[p.parent.name] = (row["status"], row["loss"])
    return out


# 1 size × D 2,048 and 4,096 × r 0, 1, 3 × both strategies: 10 runs of 8–64 steps.
SHARED_SWEEP = """
name = "{name}"
share = {share}
[grid]
size = ["20K"]
fresh_tokens = [2048, 4096]
strategy = ["repetition", "paraphrase"]
derived_ratio = [0, 1, 3]
[data]
vocab_size = 512
val_tokens = 2048
[model]
seq_len = 32
[train]
batch_size = 8
schedule = "wsd"
warmup_steps = 3
eval_every = 4
log_every = 1
checkpoint_every = 4
"""


def write_shared_sweep(root: Path, name: str, share: bool = True, **train) -> Path:
    """A sweep of 10 runs that share prefixes (`share`), [train] keys overridden by `train`."""
    text = SHARED_SWEEP.format(name=name, share="true" if share else "false")
    for key, value in train.items():
        line = f"{key} = {json.dumps(value)}"
        if re.search(rf"(?m)^{key} = .*$", text):
            text = re.sub(rf"(?m)^{key} = .*$", line, text)
        else:
            text = text.replace("[train]\n", f"[train]\n{line}\n")
    path = root.parent / f"{name}-{'shared' if share else 'alone'}.toml"
    path.write_text(text)
    return path


def write_demo_runs(folder: Path):
    """examples/demo-runs.csv (the 72 runs of `make demo`) as a sweep's runs folder at
    `folder`: summary.parquet (each run given an id from its row) and sweep.toml. Returns
    the summary."""
    import hashlib

    import pandas as pd

    root = Path(__file__).resolve().parents[2]
    folder.mkdir(parents=True, exist_ok=True)
    summary = pd.read_csv(root / "examples" / "demo-runs.csv")
    summary.insert(0, "run_id", [
        hashlib.sha1(json.dumps(r, sort_keys=True, default=str).encode()).hexdigest()[:10]
        for r in summary.to_dict("records")
    ])  # fmt: skip
    summary.to_parquet(folder / "summary.parquet", index=False)
    (folder / "sweep.toml").write_text((root / "sweeps" / "demo.toml").read_text())
    return summary


def chunks_taken(monkeypatch) -> list[int]:
    """The chunk size of every call of the chunked LM-head loss from here on, by a run alone
    (cdlaw.train.steps) or a pack (cdlaw.train.packed_model): empty while logits are whole."""
    import cdlaw.train.packed_model
    import cdlaw.train.steps

    calls, real = [], cdlaw.train.steps.head_losses

    def counted(*args):
        calls.append(args[-1])
        return real(*args)

    monkeypatch.setattr(cdlaw.train.steps, "head_losses", counted)
    monkeypatch.setattr(cdlaw.train.packed_model, "head_losses", counted)
    return calls
