"""A model's scores on downstream tasks (cdlaw.tasks.files): bits per byte and accuracy.

    scores = evaluate_tasks(net, task_tokens, amp)   # {"task_world_mc_acc": 0.41, …}

The model reads each (item, choice) row once, under no_grad and in eval mode, and the
trainer's state is left as it was: no random number is drawn, no parameter or optimizer
state touched, so a run with tasks trains exactly as one without (tests/train). Rows of
similar length are batched together and padded on the right, which a causal model never
sees; the LM head runs on the continuation positions only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from cdlaw.tasks.columns import METRICS, column
from cdlaw.tasks.files import TaskTokens
from cdlaw.train.steps import autocast

BATCH_TOKENS = 8192  # padded tokens per forward: a few MB of activations at the demo's sizes
LN2 = math.log(2.0)


@torch.no_grad()
def evaluate_tasks(net, tasks: list[TaskTokens], amp=None, body=None) -> dict[str, float]:
    """{column: value} for every metric of every task (cdlaw.tasks.files.METRICS).

    `body` runs net.model (e.g. torch.compile(net.model)); amp is bf16 autocast's dtype or
    None. bpb is the mean over items of the gold continuation's bits per UTF-8 byte (as
    OLMo's in-loop evaluator averages it); acc of a cloze task is the share of items whose
    gold continuation greedy decoding would write, of a multiple-choice task the share whose
    gold choice has the highest log-likelihood (acc_norm: per character).
    """
    out: dict[str, float] = {}
    for task in tasks:
        nll, greedy = row_scores(net, task, amp, body)
        out.update(task_metrics(task, nll, greedy))
    return out


def row_scores(net, task: TaskTokens, amp=None, body=None) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the continuation's negative log-likelihood (nats, float64) and whether
    every continuation token is the model's argmax (greedy decoding would write it)."""
    was_training = net.training
    net.eval()
    body = net.model if body is None else body
    device = next(net.parameters()).device
    n = len(task.rows)
    nll, greedy = np.zeros(n), np.zeros(n, dtype=bool)
    try:
        for batch in _batches(task):
            x, pos_r, pos_t, targets, owner = _batch_tensors(task, batch, device)
            with autocast(device, amp):
                hidden = body(input_ids=x, use_cache=False).last_hidden_state
                logits = net.lm_head(hidden[pos_r, pos_t])
            logp = torch.log_softmax(logits.float(), dim=-1)
            token_nll = -logp.gather(1, targets[:, None])[:, 0].double()
            miss = (logp.argmax(dim=-1) != targets).double()
            sums = torch.zeros(len(batch), dtype=torch.float64, device=device)
            misses = torch.zeros_like(sums)
            sums.index_add_(0, owner, token_nll)
            misses.index_add_(0, owner, miss)
            nll[batch] = sums.cpu().numpy()
            greedy[batch] = misses.cpu().numpy() == 0
    finally:
        net.train(was_training)
    return nll, greedy


def _batches(task: TaskTokens) -> list[np.ndarray]:
    """Row indices in batches of similar length (longest first), BATCH_TOKENS padded
    tokens at most: a pure function of the task, so every run batches alike."""
    lengths = np.array([len(r) for r in task.rows])
    order = np.argsort(-lengths, kind="stable")
    batches: list[np.ndarray] = []
    current: list[int] = []
    for r in order:
        if current and (len(current) + 1) * lengths[current[0]] > BATCH_TOKENS:
            batches.append(np.array(current))
            current = []
        current.append(r)
    if current:
        batches.append(np.array(current))
    return batches


def _batch_tensors(task: TaskTokens, batch: np.ndarray, device):
    """Inputs (rows, longest) padded on the right with end-of-text; and for every
    continuation token its (row, position) of the logit that predicts it, the token, and
    which row of the batch it belongs to."""
    rows = [task.rows[r] for r in batch]
    width = max(len(r) for r in rows)
    x = np.zeros((len(rows), width), dtype=np.int64)
    pos_r, pos_t, targets, owner = [], [], [], []
    for i, (r, row) in enumerate(zip(batch, rows, strict=True)):
        x[i, : len(row)] = row
        x[i, len(row) :] = row[0]
        start = int(task.starts[r])
        k = len(row) - start
        pos_r.append(np.full(k, i))
        pos_t.append(np.arange(start - 1, len(row) - 1))  # logit t predicts token t + 1
        targets.append(row[start:])
        owner.append(np.full(k, i))
    cat = lambda parts: torch.from_numpy(np.concatenate(parts)).to(device)  # noqa: E731
    return torch.from_numpy(x).to(device), cat(pos_r), cat(pos_t), cat(targets), cat(owner)


def task_metrics(task: TaskTokens, nll: np.ndarray, greedy: np.ndarray) -> dict[str, float]:
    """The task's metrics from its rows' scores (row_scores)."""
    bits = nll / (LN2 * task.n_bytes)
    if task.kind == "cloze":
        values = {"bpb": float(bits.mean()), "acc": float(greedy.mean())}
    else:
        n_items = len(task.gold)
        ll = np.full((n_items, int(task.choice.max()) + 1), -np.inf)
        per_char = ll.copy()
        ll[task.item, task.choice] = -nll
        per_char[task.item, task.choice] = -nll / task.n_chars
        gold_rows = task.choice == task.gold[task.item]
        values = {
            "bpb": float(bits[gold_rows].mean()),
            "acc": float((ll.argmax(axis=1) == task.gold).mean()),
            "acc_norm": float((per_char.argmax(axis=1) == task.gold).mean()),
        }
    assert tuple(values) == METRICS[task.kind]
    return {column(task.name, m): v for m, v in values.items()}


def score_saved_model(model_dir, tasks: list[TaskTokens], device: str, precision: str) -> dict:
    """evaluate_tasks on a finished run's model/ folder (transformers' from_pretrained), on
    `device` with `precision` as training would use them."""
    from transformers import AutoModelForCausalLM

    from cdlaw.train.run_parts import no_hf_progress
    from cdlaw.train.steps import autocast_dtype, resolve_device

    dev = torch.device(resolve_device(device))
    with no_hf_progress():
        net = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    # transformers types .to() through a decorator that mypy reads as taking the model
    loaded: Any = net
    net = loaded.to(dev)
    return evaluate_tasks(net, tasks, autocast_dtype(precision, dev, net.config.hidden_size))
