"""The pieces of a training step, each small enough to test on its own: the learning-rate
schedule, batches, the fused cross-entropy + z-loss, autocast and the device, AdamW's
parameter groups, the validation loss. cdlaw.train.loop puts them together.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from cdlaw.config import TrainConfig
from cdlaw.errors import BadInput
from cdlaw.schedule import lr_at  # noqa: F401  (re-exported: a piece of a step)

IGNORE = -100  # target id of padding positions (a partial last row)


# ---------------------------------------------------------------------------------------
# Pieces of a training step (each small enough to test on its own).
# ---------------------------------------------------------------------------------------


def make_batch(tokens: np.ndarray, n: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs tokens[:n] and targets tokens[1:n+1] as (rows, seq_len) arrays.

    `tokens` holds n + 1 tokens, or n at the very end of a stream (then the last input has
    no target). A partial last row is padded: input 0, target IGNORE.
    """
    rows = -(-n // seq_len)
    x = np.zeros(rows * seq_len, dtype=np.int64)
    y = np.full(rows * seq_len, IGNORE, dtype=np.int64)
    x[:n] = tokens[:n]
    y[: len(tokens) - 1] = tokens[1 : n + 1]
    return x.reshape(rows, seq_len), y.reshape(rows, seq_len)


def token_losses(logits, targets, per_model: bool = False):
    """Sums over the valid targets of cross-entropy and of logsumexp² (the z-loss term).

    One logsumexp serves both (cross-entropy = logsumexp(logits) − logit of the target),
    and the backward pass is one softmax. For tiny models the LM head and its loss are
    most of a step: this costs about what F.cross_entropy alone does, where autograd
    through torch.logsumexp costs twice that.

    per_model: logits (K, …) of K packed models (cdlaw.train.packed_model): a sum per model.
    """
    return _CrossEntropyAndZ.apply(logits, targets, per_model)


class _CrossEntropyAndZ(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, per_model):
        valid = targets != IGNORE
        safe = targets.clamp(min=0)
        # logsumexp by hand, in place on one fp32 copy: twice as fast as torch.logsumexp on CPU.
        # A copy even when the logits are fp32: they are saved for backward.
        work = logits.to(torch.float32, copy=True)
        target_logit = work.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        top = work.amax(dim=-1, keepdim=True)
        lse = work.sub_(top).exp_().sum(dim=-1).log_().add_(top.squeeze(-1))
        ce, z = torch.where(valid, lse - target_logit, 0.0), torch.where(valid, lse.square(), 0.0)
        if per_model:
            dims = tuple(range(1, targets.ndim))
            ce, z = ce.sum(dim=dims), z.sum(dim=dims)
        else:
            ce, z = ce.sum(), z.sum()
        ctx.per_model = per_model
        ctx.save_for_backward(logits, safe, valid, lse)
        return ce, z

    @staticmethod
    def backward(ctx, grad_ce, grad_z):
        logits, safe, valid, lse = ctx.saved_tensors
        if ctx.per_model:  # one gradient per model: broadcast it over that model's tokens
            shape = (-1,) + (1,) * (valid.ndim - 1)
            grad_ce, grad_z = grad_ce.view(shape), grad_z.view(shape)
        # d(ce)/dlogits = softmax − onehot(target); d(lse²)/dlogits = 2·lse·softmax.
        per_row = torch.where(valid, grad_ce + 2 * grad_z * lse, 0.0)
        grad = (logits.float() - lse.unsqueeze(-1)).exp_().mul_(per_row.unsqueeze(-1))
        grad.scatter_add_(-1, safe.unsqueeze(-1), torch.where(valid, -grad_ce, 0.0).unsqueeze(-1))
        return grad.to(logits.dtype), None, None


def forward_logits(net, x):
    """Logits of a causal LM for input ids x (transformers' model or its compiled wrapper)."""
    return net(input_ids=x, use_cache=False).logits


def autocast(device: torch.device, amp: torch.dtype | None):
    """bf16 autocast on device, or nothing when amp is None (full fp32)."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=amp)


def resolve_device(device: str) -> str:
    """'auto' → 'cuda' when a GPU is visible, else 'cpu'; a GPU that is not there is bad input."""
    if device == "cpu":
        return device
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise BadInput(f"--device {device} was asked for but no CUDA GPU is visible; use cpu")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise BadInput(
            f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible (cuda:0 …)"
        )
    return device


# Below this width bf16 autocast is slower than fp32 on CPU: its casts cost more than the
# small matmuls save. Measured on this repository's 2-core AVX512-BF16 machine (one step
# with fused AdamW, vocab 512; fp32 vs bf16 tokens/s): d 24, batch 4×64, 1 thread: 49.1K vs
# 29.3K; d 40: 38.6K vs 21.6K; d 224, batch 16×128, 2 threads: 9.0K vs 7.6K; d 304: 4.3K
# vs 4.8K. Pass precision="bf16" to force it.
CPU_BF16_MIN_D_MODEL = 256


def autocast_dtype(
    precision: str, device: torch.device, d_model: int | None = None
) -> torch.dtype | None:
    """bf16 for "bf16", and for "auto" where it is faster than fp32; else None (fp32).

    On GPU "auto" is bf16 wherever the chip supports it. On CPU it is bf16 only with
    oneDNN's native bf16 kernels (AVX512-BF16 / AMX) and a model at least
    CPU_BF16_MIN_D_MODEL wide (d_model None: assume wide enough).
    """
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if d_model is not None and d_model < CPU_BF16_MIN_D_MODEL:
        return None
    mkldnn_bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return torch.bfloat16 if mkldnn_bf16 is not None and mkldnn_bf16() else None


def make_optimizer(net, train: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not the input embedding, not norms)."""
    embedding = net.get_input_embeddings().weight
    decay, no_decay = [], []
    for p in net.parameters():
        (decay if p.ndim >= 2 and p is not embedding else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": train.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=train.lr,
        betas=(train.beta1, train.beta2),
        eps=train.eps,
        # One fused kernel per step, on GPU and on CPU (torch ≥ 2.4). Measured on CPU at the
        # demo's smallest size (d 24, batch 4×64, fp32, 1 thread): the optimizer step 1.62 →
        # 0.69 ms, 36.1K → 48.3K tokens/s.
        fused=device.type in ("cuda", "cpu"),
    )


@torch.no_grad()
def validation_loss(
    net, val_tokens: np.ndarray, seq_len: int, batch_rows: int = 16, precision: str = "auto"
) -> float:
    """Mean cross-entropy (nats/token) of net on val_tokens, predicting val[1:] from val[:-1]."""
    device = next(net.parameters()).device
    amp = autocast_dtype(precision, device, net.config.hidden_size)
    x, y = make_batch(np.asarray(val_tokens, dtype=np.int64), len(val_tokens) - 1, seq_len)
    return loss_on_batches(net, torch.from_numpy(x), torch.from_numpy(y), batch_rows, amp)


def loss_on_batches(net, x, y, batch_rows: int, amp) -> float:
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    total = torch.zeros((), dtype=torch.float64, device=device)
    with torch.no_grad():
        for i in range(0, x.shape[0], batch_rows):
            xb = x[i : i + batch_rows].to(device, non_blocking=True)
            yb = y[i : i + batch_rows].to(device, non_blocking=True)
            with autocast(device, amp):
                logits = forward_logits(net, xb)
            total += token_losses(logits, yb)[0].double()
    net.train(was_training)
    return total.item() / int((y != IGNORE).sum())


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
