"""K OLMo 3 models of one shape as one: stacked weights, one batched forward and backward.

    pack = PackedModels(nets, train_cfgs, device)  # nets: Olmo3ForCausalLM, one shape
    loss, ce = pack.train_loss(x, y, z_loss, n)    # x, y (K, rows, seq); ce: (K,) sums
    loss.backward()                                # (compile=True: compiled, K dynamic)
    logits = pack.forward(x)                       # x (K, rows, seq) → (K, rows, seq, vocab)
    ce, z = pack.losses(x, y)                      # (K,) sums; no whole logits when large
    norms = pack.clip_grads(); pack.adamw_step(lrs); pack.zero_grad()
    pack.copy_to(k, net, optimizer)                # model k back into a real model + AdamW

Why a packed model's numbers are a model alone's: docs/packing.md, "The same run as alone".
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from cdlaw.config import TrainConfig
from cdlaw.shapes import loss_chunk_tokens
from cdlaw.train.steps import autocast, head_losses, token_losses

EMBED = "model.embed_tokens.weight"

# The stacked weights' gradients are views of one (K, P) buffer, laid out as the weights
# are; autograd's note that they are not the layout it would pick itself is expected.
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout")


class PackedModels:
    """K same-shape Olmo3ForCausalLM models and their AdamW states, stacked row-wise.

    Every model's weights live in one row of a (K, P) buffer, its gradients in a row of
    another, AdamW's moments in two more: each layer is one batched matmul over the K
    models (`torch.bmm`) instead of K small steps that each pay Python and dispatch
    overhead. Clipping and AdamW are torch's own kernels on each model's parameter tensors,
    views of its rows, so a packed model's numbers are a model alone's bit for bit
    (eagerly; a compiled `train_loss` rounds its own way). Rows are independent: a model
    whose weights turn NaN leaves the others' numbers untouched.
    """

    def __init__(
        self, nets: list, trains: list[TrainConfig], device: torch.device, compile: bool = False
    ):
        net = nets[0]
        cfg = net.config
        self.arch = Arch(
            cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.rms_norm_eps,
        )  # fmt: skip
        self.compile = compile
        self.inv_freq = net.model.rotary_emb.full_attention_inv_freq.detach().clone().to(device)
        self._rope_cache: dict = {}
        named = dict(net.named_parameters())
        # Decayed matrices first, so weight decay is one slice: AdamW's groups in steps.py.
        decay = [n for n, p in named.items() if p.ndim >= 2 and n != EMBED]
        self.names = decay + [n for n in named if n not in decay]
        self.shapes = {n: tuple(named[n].shape) for n in self.names}
        sizes = [named[n].numel() for n in self.names]
        self.offsets = dict(zip(self.names, _cumsum(sizes), strict=True))
        self.n_decay_names = len(decay)
        self.net_order = list(named)  # the order a run alone clips its gradients in
        self.device = device
        self.param = torch.stack([_flat(n, self.names) for n in nets]).to(device)
        self.exp_avg = torch.zeros_like(self.param)
        self.exp_avg_sq = torch.zeros_like(self.param)
        self.grad = torch.zeros_like(self.param)
        # fused AdamW's step counts: a float32 scalar per model (one for all its tensors)
        self.steps = torch.zeros(len(nets), dtype=torch.float32, device=device)
        self.set_hypers(trains)
        self._views()

    # --- rows in and out --------------------------------------------------------------------

    def set_hypers(self, trains: list[TrainConfig]) -> None:
        self.weight_decay_values = [t.weight_decay for t in trains]
        self.grad_clip_values = [float(t.grad_clip) for t in trains]
        self.beta1, self.beta2, self.eps_adam = trains[0].beta1, trains[0].beta2, trains[0].eps

    def _views(self) -> None:
        """Each parameter as a (K, *shape) leaf view of its rows, its .grad a view of grad's."""
        K = self.param.shape[0]
        self.params, self.grads_of, self.exp_avg_views, self.exp_avg_sq_views = {}, {}, {}, {}
        for n in self.names:
            a = self.offsets[n]
            b = a + _numel(self.shapes[n])
            view = self.param[:, a:b].view(K, *self.shapes[n]).requires_grad_()
            view.grad = self.grad[:, a:b].view(K, *self.shapes[n])
            if self.compile:  # K is the compiled step's one dynamic dimension: one graph, any K
                torch._dynamo.maybe_mark_dynamic(view, 0)
            self.params[n] = view
            self.grads_of[n] = view.grad
            self.exp_avg_views[n] = self.exp_avg[:, a:b].view(K, *self.shapes[n])
            self.exp_avg_sq_views[n] = self.exp_avg_sq[:, a:b].view(K, *self.shapes[n])
        # Each model's tensors as the optimizer and the clip take them, made once (a step
        # would otherwise slice thousands of views): [k] -> (params, grads, m, v) per
        # group (decayed matrices, the rest), and the gradients in the net's own order.
        decayed, rest = self.names[: self.n_decay_names], self.names[self.n_decay_names :]
        self.row_groups = [
            [
                tuple(
                    [t[n].detach()[k] for n in names]
                    for t in (self.params, self.grads_of, self.exp_avg_views, self.exp_avg_sq_views)
                )
                for names in (decayed, rest)
            ]
            for k in range(K)
        ]
        self.row_grads = [[self.grads_of[n][k] for n in self.net_order] for k in range(K)]
        self.row_steps = [self.steps[k] for k in range(K)]

    def load_from(self, k: int, net, optimizer) -> None:
        """Row k := a real model's weights and its AdamW state (a resumed checkpoint)."""
        named = dict(net.named_parameters())
        with torch.no_grad():
            self.param[k] = _flat(net, self.names).to(self.device)
            steps = set()
            for n in self.names:
                state = optimizer.state.get(named[n], {})
                a, b = self.offsets[n], self.offsets[n] + named[n].numel()
                if "exp_avg" in state:
                    self.exp_avg[k, a:b] = state["exp_avg"].reshape(-1)
                    self.exp_avg_sq[k, a:b] = state["exp_avg_sq"].reshape(-1)
                    steps.add(float(state["step"]))
            assert len(steps) <= 1, "one step count for every parameter of a model"
            self.steps[k] = steps.pop() if steps else 0.0

    def copy_to(self, k: int, net, optimizer=None) -> None:
        """Row k into a real model and its AdamW (fused: state on the device), to save or
        evaluate with the code a run alone uses; weights only when optimizer is None."""
        named = dict(net.named_parameters())
        with torch.no_grad():
            for n in self.names:
                a, b = self.offsets[n], self.offsets[n] + named[n].numel()
                p = named[n]
                p.copy_(self.param[k, a:b].view_as(p))
                if optimizer is not None and self.steps[k].item() > 0:
                    optimizer.state[p] = {
                        "step": self.steps[k].clone().to(p.device),
                        "exp_avg": self.exp_avg[k, a:b].view_as(p).clone(),
                        "exp_avg_sq": self.exp_avg_sq[k, a:b].view_as(p).clone(),
                    }

    def keep(self, rows: list[int], trains: list[TrainConfig]) -> None:
        """Drop every row not in `rows` (models that left the pack)."""
        index = torch.tensor(rows, device=self.device)
        for name in ("param", "exp_avg", "exp_avg_sq", "steps"):
            setattr(self, name, getattr(self, name).index_select(0, index).contiguous())
        self.grad = torch.zeros_like(self.param)
        self.set_hypers(trains)
        self._views()

    # --- the step ---------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, models: list[int] | None = None) -> torch.Tensor:
        """Logits (K, rows, seq, vocab) for input ids x (K, rows, seq); with `models`, of
        those models only (x then has one row per model listed; no gradient)."""
        p = self.params
        if models is not None:
            p = {n: v.detach()[models] for n, v in p.items()}
        return packed_forward(p, x, *self._rope(x.shape[-1], x.device), self.arch)

    def losses(
        self, x: torch.Tensor, y: torch.Tensor, models: list[int] | None = None, amp=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per model, sums of cross-entropy and logsumexp² for inputs x and targets y (K,
        rows, seq) under amp (`packed_losses`); with `models`, of those models only (x, y
        then have one row per model listed; no gradient)."""
        p = self.params
        if models is not None:
            p = {n: v.detach()[models] for n, v in p.items()}
        return packed_losses(p, x, y, *self._rope(x.shape[-1], x.device), self.arch, amp)

    def train_loss(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        z_loss: torch.Tensor,
        n_targets: torch.Tensor,
        amp,
        models: list[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The objective to backpropagate for inputs x and targets y (K, rows, seq), and
        each model's summed cross-entropy (K,): Σ_k (ce_k + z_loss_k·z_k) / n_targets_k,
        each model's mean loss of its step, as a run alone's. Compiled when the pack was
        built with compile=True (see `_COMPILE`). With `models`, of those models only (x,
        y, z_loss, n_targets then have one row per model listed; eager): their gradients
        go to their rows, the others' stay as they are."""
        cos, sin = self._rope(x.shape[-1], x.device)
        if models is not None:
            p = {n: v[models] for n, v in self.params.items()}
            return objective(p, x, y, z_loss, n_targets, cos, sin, self.arch, amp)
        if self.compile and _COMPILE["ok"]:
            for t in (x, y, z_loss, n_targets):  # the weights' K was marked in _views
                torch._dynamo.maybe_mark_dynamic(t, 0)
            try:
                # Only K varies: other dims never turn dynamic (that slows every kernel), and a
                # sweep's shapes each keep their own graph (the default limit is 8).
                with torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=64):
                    step = _compiled()
                    return step(self.params, x, y, z_loss, n_targets, cos, sin, self.arch, amp)
            except Exception as e:  # a compile that fails ran nothing: train eagerly
                _COMPILE["ok"] = False
                warnings.warn(
                    f"torch.compile failed here ({type(e).__name__}: {str(e)[:200]}); "
                    "packs train without it",
                    stacklevel=2,
                )
        return objective(self.params, x, y, z_loss, n_targets, cos, sin, self.arch, amp)

    @torch.no_grad()
    def clip_grads(self) -> torch.Tensor:
        """Clip each model's gradient to its own grad_clip; return the norms before (K,).

        torch.nn.utils.clip_grad_norm_'s arithmetic, bit for bit: one norm per parameter
        tensor (torch._foreach_norm), their norm in the model's parameter order, the
        coefficient clamped to 1 and always applied."""
        K, n = self.param.shape[0], len(self.net_order)
        norms = torch._foreach_norm([g for row in self.row_grads for g in row], 2)
        totals = [
            torch.linalg.vector_norm(torch.stack(norms[k * n : (k + 1) * n])) for k in range(K)
        ]
        for k, total in enumerate(totals):
            self.grad[k].mul_(torch.clamp(self.grad_clip_values[k] / (total + 1e-6), max=1.0))
        return torch.stack(totals)

    @torch.no_grad()
    def adamw_step(self, lrs: list[float], idle: Sequence[int] = ()) -> None:
        """One AdamW step of every model (lrs: K learning rates) by torch's fused AdamW
        kernel itself, on each model's parameter tensors as a run alone passes them (so the
        numbers are the same bit for bit): matrices with the run's weight decay, the input
        embedding and norms without. Models with one lr and weight decay share a call.
        Rows in `idle` (a run's lone last input, no target) are left as they were, as a run
        alone skips that step's update."""
        calls: dict[tuple[float, float], list[int]] = {}
        for k, lr in enumerate(lrs):
            if k not in idle:
                calls.setdefault((lr, self.weight_decay_values[k]), []).append(k)
        for (lr, decay), rows in calls.items():
            torch._foreach_add_([self.row_steps[k] for k in rows], 1)
            for group, wd in ((0, decay), (1, 0.0)):
                params, grads, exp_avgs, exp_avg_sqs = (
                    [t for k in rows for t in self.row_groups[k][group][i]] for i in range(4)
                )
                n = len(self.row_groups[rows[0]][group][0])
                no_max_exp_avg_sqs: list[torch.Tensor] = []  # amsgrad is off
                torch._fused_adamw_(
                    params,
                    grads,
                    exp_avgs,
                    exp_avg_sqs,
                    no_max_exp_avg_sqs,
                    [self.row_steps[k] for k in rows for _ in range(n)],
                    amsgrad=False,
                    lr=lr,
                    beta1=self.beta1,
                    beta2=self.beta2,
                    weight_decay=wd,
                    eps=self.eps_adam,
                    maximize=False,
                )

    def zero_grad(self) -> None:
        self.grad.zero_()

    # --- pieces -----------------------------------------------------------------------------

    def _rope(self, seq: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE's cos, sin (seq, head_dim), fp32, as Olmo3RotaryEmbedding computes them."""
        if (seq, str(device)) not in self._rope_cache:
            self._rope_cache[seq, str(device)] = self._rope_tables(seq, device)
        return self._rope_cache[seq, str(device)]

    def _rope_tables(self, seq: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(seq, device=device).float()
        freqs = positions[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class Arch(NamedTuple):
    """What the packed forward needs of a model's shape (plain numbers: a compiled step is
    specialised to them)."""

    vocab: int
    d: int
    n_layers: int
    n_heads: int
    eps: float  # RMSNorm's


def packed_forward(
    p: dict[str, torch.Tensor], x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, arch: Arch
) -> torch.Tensor:
    """Logits (K, rows, seq, vocab) of the stacked weights p (name -> (K, *shape)) for input
    ids x (K, rows, seq): transformers' Olmo3ForCausalLM forward, op for op, for K models.

    Embedding, per layer QK-normed attention with RoPE and reordered RMSNorms, SwiGLU, final
    norm, untied LM head, with the same operations in the same order and dtypes as
    transformers' (tests/train/test_pack_train.py checks its logits against the real model's).
    cdlaw.train.model builds the models, so their shape, init and names are the real ones.
    """
    K, rows, seq = x.shape
    hidden = packed_hidden(p, x, cos, sin, arch)
    return _linear(hidden, p["lm_head.weight"]).view(K, rows, seq, arch.vocab)


def packed_hidden(
    p: dict[str, torch.Tensor], x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, arch: Arch
) -> torch.Tensor:
    """The final norm's output (K, rows·seq, d_model): packed_forward up to the LM head."""
    K, rows, seq = x.shape
    H, d = arch.n_heads, arch.d
    hd = d // H
    embed = p[EMBED].reshape(K * arch.vocab, d)
    shift = torch.arange(K, device=x.device).view(K, 1, 1) * arch.vocab
    h = F.embedding(x + shift, embed).view(K, rows * seq, d)
    for i in range(arch.n_layers):
        w = lambda name, i=i: p[f"model.layers.{i}.{name}.weight"]  # noqa: E731
        q = _norm(_linear(h, w("self_attn.q_proj")), w("self_attn.q_norm"), arch.eps)
        k = _norm(_linear(h, w("self_attn.k_proj")), w("self_attn.k_norm"), arch.eps)
        v = _linear(h, w("self_attn.v_proj"))
        q, k, v = (t.view(K * rows, seq, H, hd).transpose(1, 2) for t in (q, k, v))
        q, k = _rotary(q, cos, sin), _rotary(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=hd**-0.5)
        a = a.transpose(1, 2).reshape(K, rows * seq, d)
        h = h + _norm(_linear(a, w("self_attn.o_proj")), w("post_attention_layernorm"), arch.eps)
        m = F.silu(_linear(h, w("mlp.gate_proj"))) * _linear(h, w("mlp.up_proj"))
        h = h + _norm(_linear(m, w("mlp.down_proj")), w("post_feedforward_layernorm"), arch.eps)
    return _norm(h, p["model.norm.weight"], arch.eps)


def packed_losses(p, x, y, cos, sin, arch: Arch, amp):
    """Per model, sums over the valid targets y (K, rows, seq) of cross-entropy and
    logsumexp² for input ids x, under bf16 autocast when amp is set: cdlaw.train.steps'
    lm_losses for K models, with the same rule for when the LM head and its loss go in
    chunks (loss_chunk_tokens of one model's micro-batch), so a packed model chunks as it would
    alone."""
    K, rows, seq = x.shape
    weight = p["lm_head.weight"]
    chunk = loss_chunk_tokens(rows * seq, arch.vocab)
    with autocast(x.device, amp):
        hidden = packed_hidden(p, x, cos, sin, arch)
        if chunk is None:
            logits = _linear(hidden, weight).view(K, rows, seq, arch.vocab)
    if chunk is None:
        return packed_token_losses(logits, y)
    return head_losses(hidden, weight, y.reshape(K, rows * seq), amp, chunk)


def objective(p, x, y, z_loss, n_targets, cos, sin, arch: Arch, amp):
    """(Σ_k (ce_k + z_loss_k·z_k) / n_targets_k, ce (K,) detached): the packed step's loss,
    under bf16 autocast when amp is set (PackedModels.train_loss)."""
    ce, z = packed_losses(p, x, y, cos, sin, arch, amp)
    return ((ce + z_loss * z) / n_targets).sum(), ce.detach()


# `objective` through torch.compile, made once per process and shared by every pack: the
# first step of each shape compiles it (~15–30 s on a CPU, a few seconds from inductor's
# on-disk cache), and K is a dynamic dimension, so a pack that shrinks as runs leave, or the
# next pack of that shape, reuses the graph (a pack of one gets a graph of its own). "ok"
# turns False where compiling fails (no C++ compiler, say): packs then train eagerly, after
# one warning.
_COMPILE: dict = {"ok": True, "fn": None}


def _compiled():
    if _COMPILE["fn"] is None:
        _COMPILE["fn"] = torch.compile(objective)
    return _COMPILE["fn"]


def packed_token_losses(logits: torch.Tensor, targets: torch.Tensor):
    """Per model (dim 0): sums of cross-entropy and logsumexp² over the valid targets —
    cdlaw.train.steps.token_losses for each model at once, by the same arithmetic."""
    return token_losses(logits, targets, per_model=True)


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Olmo3RMSNorm with per-model weights (K, n): fp32 inside, the input's dtype out."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.unsqueeze(1) * x).to(dtype)


def _linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (K, n, in) @ weight (K, out, in)ᵀ: nn.Linear for each model, one batched matmul."""
    return torch.bmm(x, weight.transpose(1, 2))


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' apply_rotary_pos_emb for one of q, k (fp32 cos/sin, back to x's dtype)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return ((x * cos) + (rotated * sin)).to(x.dtype)


def _flat(net, names: list[str]) -> torch.Tensor:
    named = dict(net.named_parameters())
    return torch.cat([named[n].detach().reshape(-1) for n in names])


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _cumsum(sizes: list[int]) -> list[int]:
    out, total = [], 0
    for s in sizes:
        out.append(total)
        total += s
    return out
