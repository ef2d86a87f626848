"""The pieces of a training step, each small enough to test on its own: the learning-rate
schedule, batches, the fused cross-entropy + z-loss (over whole logits, or with the LM head
chunk by chunk when they would be large: lm_losses), autocast and the device, AdamW's
parameter groups, the validation loss. cdlaw.train.loop puts them together.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from cdlaw.config import TrainConfig
from cdlaw.data.tokens.streams import TokenStream
from cdlaw.schedule import lr_at  # noqa: F401  (re-exported: a piece of a step)
from cdlaw.shapes import loss_chunk_tokens
from cdlaw.system.errors import BadInput

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


def read_batch(
    stream: TokenStream, start: int, batch_tokens: int, seq_len: int, vocab_size: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The step's batch from stream position `start`: (inputs, targets, n), make_batch's
    arrays of the next n = min(batch_tokens, tokens left) inputs.

    Raises BadInput when a token id is outside the model's vocabulary.
    """
    n = min(batch_tokens, stream.n_tokens - start)
    x, y = make_batch(stream.read(start, n + 1), n, seq_len)
    if x.max() >= vocab_size:
        raise BadInput(
            f"token id {x.max()} at stream position ≥{start} is outside the model's "
            f"vocabulary of {vocab_size}"
        )
    return x, y, n


def token_losses(logits, targets, per_model: bool = False):
    """Sums over the valid targets of cross-entropy and of logsumexp² (the z-loss term).

    One logsumexp serves both (cross-entropy = logsumexp(logits) − logit of the target),
    and the backward pass is one softmax. For tiny models the LM head and its loss are
    most of a step: this costs about what F.cross_entropy alone does, where autograd
    through torch.logsumexp costs twice that.

    per_model: logits (K, …) of K packed models (cdlaw.train.packed_model): a sum per model.
    """
    return _CrossEntropyAndZ.apply(logits, targets, per_model)


def _ce_z_lse(work, safe, valid):
    """Per token: cross-entropy, logsumexp² (0 where not valid) and logsumexp, of fp32
    logits `work`, which it overwrites. logsumexp by hand, in place: twice as fast as
    torch.logsumexp on CPU."""
    target_logit = work.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    top = work.amax(dim=-1, keepdim=True)
    lse = work.sub_(top).exp_().sum(dim=-1).log_().add_(top.squeeze(-1))
    return torch.where(valid, lse - target_logit, 0.0), torch.where(valid, lse.square(), 0.0), lse


def _logits_grad(shifted, safe, valid, lse, grad_ce, grad_z):
    """d(grad_ce·ce + grad_z·lse²)/dlogits from shifted = logits − lse (fp32, overwritten):
    d(ce)/dlogits = softmax − onehot(target); d(lse²)/dlogits = 2·lse·softmax."""
    per_row = torch.where(valid, grad_ce + 2 * grad_z * lse, 0.0)
    grad = shifted.exp_().mul_(per_row.unsqueeze(-1))
    return grad.scatter_add_(
        -1, safe.unsqueeze(-1), torch.where(valid, -grad_ce, 0.0).unsqueeze(-1)
    )


class _CrossEntropyAndZ(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, per_model):
        valid = targets != IGNORE
        safe = targets.clamp(min=0)
        # A copy even when the logits are fp32: they are saved for backward.
        ce, z, lse = _ce_z_lse(logits.to(torch.float32, copy=True), safe, valid)
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
        shifted = logits.float() - lse.unsqueeze(-1)
        grad = _logits_grad(shifted, safe, valid, lse, grad_ce, grad_z)
        return grad.to(logits.dtype), None, None


def head_losses(hidden, weight, targets, amp, chunk: int):
    """Per model, sums over the valid targets of cross-entropy and logsumexp² of the
    logits hidden @ weightᵀ, `chunk` tokens at a time: hidden (K, n, d) (the final norm's
    output), weight (K, vocab, d) (the LM head), targets (K, n); returns (ce, z), each (K,).

    The LM head runs in amp (bf16 autocast's dtype) when set, else in the weights' dtype,
    as autocast would run it; the loss is fp32, token_losses' arithmetic. Backward
    recomputes each chunk's logits instead of keeping them, and sums the LM head's
    gradient over the chunks in fp32: at most one chunk's logits, and its softmax, are
    ever held.
    """
    return _ChunkedHeadLosses.apply(hidden, weight, targets, amp or weight.dtype, chunk)


class _ChunkedHeadLosses(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, dtype, chunk):
        h, w = hidden.to(dtype), weight.to(dtype)  # autocast's casts (none in fp32)
        valid, safe = targets != IGNORE, targets.clamp(min=0)
        ce, z, lse = torch.empty((3, *targets.shape), dtype=torch.float32, device=h.device)
        for a in range(0, targets.shape[1], chunk):
            b = a + chunk
            # One expression, so that under amp the bf16 logits go as their fp32 copy comes.
            logits = torch.bmm(h[:, a:b], w.transpose(1, 2)).float()
            parts = _ce_z_lse(logits, safe[:, a:b], valid[:, a:b])
            for out, part in zip((ce, z, lse), parts, strict=True):
                out[:, a:b] = part
        ctx.chunk, ctx.dtypes = chunk, (hidden.dtype, weight.dtype)
        ctx.save_for_backward(h, w, safe, valid, lse)
        return ce.sum(dim=1), z.sum(dim=1)

    @staticmethod
    def backward(ctx, grad_ce, grad_z):
        h, w, safe, valid, lse = ctx.saved_tensors
        chunk = ctx.chunk
        grad_ce, grad_z = grad_ce.view(-1, 1), grad_z.view(-1, 1)  # one per model
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
        for a in range(0, h.shape[1], chunk):
            b = a + chunk
            shifted = torch.bmm(h[:, a:b], w.transpose(1, 2)).float().sub_(lse[:, a:b, None])
            grad = _logits_grad(shifted, safe[:, a:b], valid[:, a:b], lse[:, a:b], grad_ce, grad_z)
            del shifted  # it is grad, overwritten: under amp only grad's bf16 cast stays
            grad = grad.to(h.dtype)
            grad_h[:, a:b] = torch.bmm(grad, w)
            if grad_w.dtype == h.dtype:
                grad_w.baddbmm_(grad.transpose(1, 2), h[:, a:b])
            else:
                grad_w += torch.bmm(grad.transpose(1, 2), h[:, a:b])
        hidden_dtype, weight_dtype = ctx.dtypes
        return grad_h.to(hidden_dtype), grad_w.to(weight_dtype), None, None, None


def lm_losses(net, x, y, amp, body=None):
    """(ce, z): sums over the valid targets y of cross-entropy and logsumexp² of
    transformers' causal LM `net` on input ids x (rows, seq), under bf16 autocast when amp
    is set. `body` runs net.model (the default), e.g. torch.compile(net.model).

    The LM head is applied here, to the base model's last hidden state (OLMo 3 neither
    scales nor caps its logits): whole, as transformers applies it, when the micro-batch's
    logits are small, else chunk by chunk (cdlaw.shapes.loss_chunk_tokens, `head_losses`).
    """
    body = net.model if body is None else body
    weight = net.lm_head.weight
    chunk = loss_chunk_tokens(y.numel(), weight.shape[0])
    with autocast(x.device, amp):
        hidden = body(input_ids=x, use_cache=False).last_hidden_state
        if chunk is None:
            logits = net.lm_head(hidden)
    if chunk is None:
        return token_losses(logits, y)
    ce, z = head_losses(hidden.flatten(0, 1)[None], weight[None], y.reshape(1, -1), amp, chunk)
    return ce[0], z[0]


def optimizer_step(
    net,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    n_targets: int,
    train: TrainConfig,
    micro_rows: int,
    amp: torch.dtype | None,
    interval: torch.Tensor,
    body=None,
) -> torch.Tensor:
    """One training step of a run alone on a batch (rows, seq): the forward and backward
    micro-batch by micro-batch of (cross-entropy + z_loss·z) / n_targets (lm_losses; `body`
    as there), each micro-batch moved to the device of `interval` (a scalar) and its
    cross-entropy added to `interval` in place, the gradients
    clipped to train.grad_clip, AdamW's step at its groups' lr, the gradients dropped.
    Returns the gradient norm before clipping.

    The step train_run trains and `--pack auto` times (cdlaw.sweep.pack.calibration); a
    pack's is cdlaw.train.packed_step."""
    device = interval.device
    for i in range(0, inputs.shape[0], micro_rows):
        xb = inputs[i : i + micro_rows].to(device, non_blocking=True)
        yb = targets[i : i + micro_rows].to(device, non_blocking=True)
        ce, z = lm_losses(net, xb, yb, amp, body)
        ((ce + train.z_loss * z) / n_targets).backward()
        interval += ce.detach()
    norm = torch.nn.utils.clip_grad_norm_(net.parameters(), train.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


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
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
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


def loss_on_batches(net, x, y, batch_rows: int, amp, body=None) -> float:
    """Mean cross-entropy of net on inputs x and targets y, batch_rows rows at a time
    (lm_losses; `body` as there)."""
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    total = torch.zeros((), dtype=torch.float64, device=device)
    with torch.no_grad():
        for i in range(0, x.shape[0], batch_rows):
            xb = x[i : i + batch_rows].to(device, non_blocking=True)
            yb = y[i : i + batch_rows].to(device, non_blocking=True)
            total += lm_losses(net, xb, yb, amp, body)[0].double()
    net.train(was_training)
    return total.item() / int((y != IGNORE).sum())


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
