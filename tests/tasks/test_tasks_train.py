"""Downstream tasks in a run (cdlaw.tasks.scoring): the scores are the metrics computed by hand,
and scoring changes nothing a run trains: with and without tasks, the same curve and
weights bit for bit; a resumed run and a branch from a fork score as the run alone."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from minitasks import mini_tasks
from safetensors.torch import load_file
from tinyrun import SEQ, TRAIN_TOKENS, VAL_TOKENS, make_cfg
from torch.nn.functional import log_softmax

from cdlaw.config import EvalConfig, ExecConfig
from cdlaw.data.tokens.streams import array_stream
from cdlaw.tasks.scoring import evaluate_tasks
from cdlaw.train.forks import fork_path
from cdlaw.train.loop import RunInterrupted, train_run
from cdlaw.train.model import build_model

torch.set_num_threads(1)
EX = ExecConfig(device="cpu", threads=1)


@pytest.fixture(scope="module")
def tasks():
    return mini_tasks(SEQ)


def by_hand(net, tokens) -> dict:
    """Each row alone through transformers' model: the metrics from their definitions."""
    nll, greedy = [], []
    for row, start in zip(tokens.rows, tokens.starts, strict=True):
        logp = log_softmax(net(torch.from_numpy(row)[None]).logits[0].double(), -1)
        target = torch.from_numpy(row[start:])
        picked = logp[start - 1 : len(row) - 1]
        nll.append(-float(picked.gather(1, target[:, None]).sum()))
        greedy.append(bool((picked.argmax(-1) == target).all()))
    nll = np.array(nll)
    bits = nll / (math.log(2) * tokens.n_bytes)
    if tokens.kind == "cloze":
        return {"bpb": bits.mean(), "acc": np.mean(greedy)}
    items = tokens.gold.size
    ll = (-nll).reshape(items, -1)
    per_char = (-nll / tokens.n_chars).reshape(items, -1)
    gold = tokens.choice == tokens.gold[tokens.item]
    return {
        "bpb": bits[gold].mean(),
        "acc": np.mean(ll.argmax(1) == tokens.gold),
        "acc_norm": np.mean(per_char.argmax(1) == tokens.gold),
    }


@pytest.mark.parametrize("steps", [0, 40])
def test_scores_are_the_metrics_computed_row_by_row(tasks, tmp_path, steps):
    cfg = make_cfg()
    net = build_model(cfg.model, seed=0)
    if steps:  # a trained model, whose choices differ in likelihood
        n = steps * 256
        stream = array_stream(TRAIN_TOKENS[:n])
        train_run(make_cfg(n_tokens=n), tmp_path, stream, VAL_TOKENS, EX)
        net = net.from_pretrained(tmp_path / "model")
    net.eval()
    got = evaluate_tasks(net, tasks)
    with torch.no_grad():
        for t in tasks:
            for metric, want in by_hand(net, t).items():
                assert got[f"task_{t.name}_{metric}"] == pytest.approx(want, rel=1e-5), metric


def curve(run_dir):
    return pd.read_parquet(run_dir / "metrics.parquet")


TRAINING = ["step", "tokens_seen", "lr", "train_loss", "val_loss", "grad_norm"]


def test_scoring_tasks_changes_nothing_the_run_trains(tasks, tmp_path):
    cfg = make_cfg()
    scored = train_run(cfg, tmp_path / "a", array_stream(TRAIN_TOKENS), VAL_TOKENS, EX, tasks=tasks)
    plain = train_run(cfg, tmp_path / "b", array_stream(TRAIN_TOKENS), VAL_TOKENS, EX, tasks=[])
    pd.testing.assert_frame_equal(curve(tmp_path / "a")[TRAINING], curve(tmp_path / "b")[TRAINING])
    assert scored["loss"] == plain["loss"] and scored["train_loss"] == plain["train_loss"]
    wa, wb = (load_file(tmp_path / x / "model" / "model.safetensors") for x in "ab")
    assert all(torch.equal(wa[k], wb[k]) for k in wb)
    columns = [c for t in tasks for c in t.columns]
    assert set(columns) <= set(scored) and not set(columns) & set(plain)
    assert all(0 <= scored[c] <= 1 for c in columns if c.endswith(("acc", "acc_norm")))


def test_tasks_are_scored_at_their_steps_and_at_the_last(tasks, tmp_path):
    # eval_every 25: the loss at 25, 50, 75 and 79; tasks at 50 and at the last step
    cfg = replace(make_cfg(), eval=EvalConfig(every=50))
    result = train_run(cfg, tmp_path, array_stream(TRAIN_TOKENS), VAL_TOKENS, EX, tasks=tasks)
    m = curve(tmp_path)
    col = "task_mini_mc_acc"
    assert m.loc[m[col].notna(), "step"].tolist() == [50, 79]
    assert m["val_loss"].notna().sum() == 4  # 25, 50, 75, 79
    assert result[col] == m[col].iloc[-1]


def test_a_resumed_run_scores_as_the_run_alone(tasks, tmp_path):
    cfg = make_cfg()
    alone = train_run(cfg, tmp_path / "a", array_stream(TRAIN_TOKENS), VAL_TOKENS, EX, tasks=tasks)
    with pytest.raises(RunInterrupted):
        train_run(cfg, tmp_path / "r", array_stream(TRAIN_TOKENS), VAL_TOKENS, EX, tasks=tasks,
                  stop_after_steps=31)  # fmt: skip
    resumed = train_run(
        cfg, tmp_path / "r", array_stream(TRAIN_TOKENS), VAL_TOKENS, EX, tasks=tasks
    )
    pd.testing.assert_frame_equal(curve(tmp_path / "r").drop(columns="elapsed_s"),
                                  curve(tmp_path / "a").drop(columns="elapsed_s"))  # fmt: skip
    assert {k: v for k, v in resumed.items() if k.startswith("task_")} == {
        k: v for k, v in alone.items() if k.startswith("task_")
    }


def test_a_branch_from_a_fork_scores_as_the_run_alone(tasks, tmp_path):
    def cfg(n):
        return make_cfg(n_tokens=n, schedule="wsd", warmup_steps=5)

    tokens = TRAIN_TOKENS
    train_run(cfg(20_001), tmp_path / "trunk", array_stream(tokens), VAL_TOKENS, EX,
              tasks=tasks, fork_steps=(40,))  # fmt: skip
    branch = train_run(cfg(15_000), tmp_path / "b", array_stream(tokens[:15_000]), VAL_TOKENS,
                       EX, tasks=tasks, fork_from=fork_path(tmp_path / "trunk", 40))  # fmt: skip
    train_run(cfg(15_000), tmp_path / "a", array_stream(tokens[:15_000]), VAL_TOKENS, EX,
                      tasks=tasks)  # fmt: skip
    assert branch["fork_step"] == 40  # before both decays (WSD: the last 20% of steps)
    b, a = (
        curve(tmp_path / "b").drop(columns="elapsed_s"),
        curve(tmp_path / "a").drop(columns="elapsed_s"),
    )
    pd.testing.assert_frame_equal(b, a, check_exact=True)
    assert b["task_mini_cloze_bpb"].notna().sum() == 3  # 25 (the trunk's), 50, 59
