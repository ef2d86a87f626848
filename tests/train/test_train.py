"""train_run: schedule, token accounting, determinism, exact resume, divergence, HF round-trip."""

import itertools
import json
import math
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from tinyrun import MODEL, N_TOKENS, SEQ, TRAIN_TOKENS, VAL_TOKENS, VOCAB, make_cfg

import cdlaw.shapes
from cdlaw.config import ExecConfig, TrainConfig
from cdlaw.data.tokens.streams import Segment, TokenStream, array_stream
from cdlaw.shapes import loss_chunk_tokens
from cdlaw.system.errors import BadInput
from cdlaw.train.loop import RunInterrupted, train_run
from cdlaw.train.model import build_model
from cdlaw.train.steps import (
    IGNORE,
    lm_losses,
    lr_at,
    make_batch,
    token_losses,
    validation_loss,
)

torch.set_num_threads(1)


def curve(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "metrics.parquet").drop(columns="elapsed_s")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run, shared by the tests that compare against it."""
    run_dir = tmp_path_factory.mktemp("reference")
    result = train_run(make_cfg(), run_dir, array_stream(TRAIN_TOKENS), VAL_TOKENS)
    return run_dir, result


# --- pieces -----------------------------------------------------------------------------


def test_cosine_schedule():
    train = TrainConfig(lr=1.0, warmup_frac=0.02, final_lr_frac=0.1)
    lrs = [lr_at(s, 1000, train) for s in range(1000)]
    assert lrs[:20] == pytest.approx([(s + 1) / 20 for s in range(20)])  # 2% linear warmup
    assert lrs[20] == 1.0 and max(lrs) == 1.0
    assert lrs[-1] == pytest.approx(0.1, abs=1e-12)  # ends at 10% of peak
    assert lrs[510] == pytest.approx(0.55, abs=1e-3)  # halfway down the cosine
    assert all(a >= b for a, b in itertools.pairwise(lrs[20:]))


def test_wsd_schedule():
    train = TrainConfig(lr=2.0, schedule="wsd", warmup_frac=0.1, decay_frac=0.2, final_lr_frac=0.1)
    lrs = [lr_at(s, 100, train) for s in range(100)]
    assert lrs[9] == 2.0 and lrs[10:80] == [2.0] * 70  # warmup, then stable
    assert lrs[80] < 2.0 and lrs[-1] == pytest.approx(0.2)  # linear decay over the last 20%
    assert np.diff(lrs[80:]) == pytest.approx(np.full(19, -1.8 / 20))


def test_make_batch_shifts_and_pads():
    tokens = np.arange(1, 12)  # n = 10 inputs and the 11th as the last target
    x, y = make_batch(tokens, 10, 4)
    assert x.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 0, 0]]
    assert y.tolist() == [[2, 3, 4, 5], [6, 7, 8, 9], [10, 11, IGNORE, IGNORE]]
    x, y = make_batch(tokens[:10], 10, 4)  # end of the stream: the last input has no target
    assert y[-1].tolist() == [10, IGNORE, IGNORE, IGNORE]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_token_losses_match_torch(dtype):
    # A non-leaf tensor, as a model's logits are: fp32 logits once came back overwritten
    # in place (.float() of an fp32 tensor is the tensor itself), so fp32 runs never learnt.
    base = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    logits = base.to(dtype)
    before = logits.detach().clone()
    targets = torch.tensor([[1, 2, 3, 4, 5], [6, 0, IGNORE, IGNORE, IGNORE]])
    ce, z = token_losses(logits, targets)
    assert torch.equal(logits.detach(), before)
    (ce + 0.3 * z).backward()
    ours = base.grad.clone()
    base.grad = None
    flat = logits.double().reshape(-1, 7)
    ref_ce = F.cross_entropy(flat, targets.reshape(-1), reduction="sum")
    ref_z = torch.logsumexp(flat, -1)[targets.reshape(-1) != IGNORE].square().sum()
    (ref_ce + 0.3 * ref_z).backward()
    tol = {torch.float64: 1e-6, torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    assert ce.item() == pytest.approx(ref_ce.item(), rel=tol)
    assert z.item() == pytest.approx(ref_z.item(), rel=tol)
    torch.testing.assert_close(ours, base.grad, rtol=tol * 10, atol=tol)
    assert ours[1, 2:].abs().max() == 0  # padding gets no gradient


def lm_losses_and_grads(net, x, y, amp):
    net.zero_grad(set_to_none=True)
    ce, z = lm_losses(net, x, y, amp)
    (ce + 0.1 * z).backward()
    return ce.detach(), z.detach(), {n: p.grad.clone() for n, p in net.named_parameters()}


@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_the_chunked_lm_head_loss_equals_the_whole_logits(monkeypatch, amp):
    """The LM head and its loss in chunks of tokens (CHUNK_LOGITS lowered: 4 × 32 tokens
    in chunks of 27, the last short; padded targets) against the whole logits, which are
    transformers' model's own: cross-entropy and z sums bit for bit, and every gradient but
    the LM head's (each token's logits and softmax gradient are the same numbers); the LM
    head's gradient, a sum over the chunks, within fp32's rounding (bf16's under bf16)."""
    from runhelpers import chunks_taken  # here: kill -9 children import this module

    calls = chunks_taken(monkeypatch)
    net = build_model(MODEL, seed=0)
    x = torch.from_numpy(TRAIN_TOKENS[: 4 * SEQ].reshape(4, SEQ))
    y = torch.from_numpy(TRAIN_TOKENS[1 : 4 * SEQ + 1].reshape(4, SEQ)).clone()
    y[3, 20:] = IGNORE
    whole = lm_losses_and_grads(net, x, y, amp)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp is not None):
        logits = net(input_ids=x, use_cache=False).logits
    ce, z = token_losses(logits, y)  # what train_run computed before it chunked
    assert torch.equal(whole[0], ce.detach()) and torch.equal(whole[1], z.detach())
    monkeypatch.setattr(cdlaw.shapes, "CHUNK_LOGITS", 27 * VOCAB)
    assert loss_chunk_tokens(4 * SEQ, VOCAB) == 27 and loss_chunk_tokens(27, VOCAB) is None
    assert calls == []
    chunked = lm_losses_and_grads(net, x, y, amp)
    assert calls == [27]  # the loss really went in chunks
    assert torch.equal(chunked[0], whole[0]) and torch.equal(chunked[1], whole[1])
    for name, grad in whole[2].items():
        if name == "lm_head.weight":
            tol = 1e-6 if amp is None else 1e-2
            torch.testing.assert_close(
                chunked[2][name], grad, rtol=tol, atol=tol * grad.abs().max()
            )
        else:
            assert torch.equal(chunked[2][name], grad), name


# --- runs -------------------------------------------------------------------------------


def test_run_files_and_result(reference):
    run_dir, result = reference
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.json",
        "metrics.parquet",
        "model",
        "result.json",
    ]
    assert json.loads((run_dir / "result.json").read_text())["loss"] == result["loss"]
    cfg = make_cfg()
    assert json.loads((run_dir / "config.json").read_text())["run_id"] == cfg.run_id
    assert result["status"] == "done" and result["steps"] == 79
    assert result["n_params"] == 2 * (4 * 32**2 + 3 * 32 * 96 + 4 * 32) + 32 + VOCAB * 32
    assert result["flops"] == 6 * result["n_params"] * N_TOKENS
    assert result["tokens_trained"] == N_TOKENS and result["batch_tokens"] == 256
    # Each token has 4 equally likely successors: the loss falls from ln 256 towards ln 4.
    m = curve(run_dir)
    assert m.train_loss.iloc[0] > 5.5 and result["loss"] < 4.1
    assert result["loss"] == m.val_loss.iloc[-1]
    # Rows at step 1, every log_every steps, every evaluation and the last step.
    assert m.step.tolist() == [1, *range(5, 79, 5), 79]
    assert m.val_loss.notna().tolist() == [s in (25, 50, 75, 79) for s in m.step]
    assert m.tokens_seen.iloc[-1] == N_TOKENS and m.epoch.iloc[-1] == 1.0


def test_every_token_once_in_order(tmp_path):
    class RecordingStream(TokenStream):
        reads: ClassVar[list] = []

        def read(self, start, count):
            self.reads.append((start, count))
            return super().read(start, count)

    stream = RecordingStream(array_stream(TRAIN_TOKENS[:3_000]).segments)
    train_run(make_cfg(3_000, eval_every=100), tmp_path, stream, VAL_TOKENS)
    starts = [s for s, _ in stream.reads]
    # Each read asks for one token beyond its batch (the last target); batches tile the stream.
    assert starts == list(range(0, 3_000, 256))
    assert [c - 1 for _, c in stream.reads] == [256] * 11 + [3_000 - 11 * 256]


def test_a_lone_last_token_is_read_but_not_trained_on(tmp_path):
    n = 2 * 256 + 1  # the third step holds one input and no target
    cfg = make_cfg(n, log_every=2)
    result = train_run(cfg, tmp_path, array_stream(TRAIN_TOKENS[:n]), VAL_TOKENS)
    assert result["status"] == "done" and result["steps"] == 3
    m = curve(tmp_path)
    assert m.step.tolist() == [1, 2, 3] and m.tokens_seen.tolist() == [256, 512, n]
    assert m.train_loss[2] == m.train_loss[1] != m.train_loss[0]  # step 3: no new loss


def test_same_seed_same_loss_bit_for_bit(reference, tmp_path):
    run_dir, result = reference
    again = train_run(make_cfg(), tmp_path, array_stream(TRAIN_TOKENS), VAL_TOKENS)
    assert again["loss"] == result["loss"]
    pd.testing.assert_frame_equal(curve(tmp_path), curve(run_dir))
    other = train_run(make_cfg(seed=1), tmp_path / "seed1", array_stream(TRAIN_TOKENS), VAL_TOKENS)
    assert other["loss"] != result["loss"]


def test_resume_is_exact(reference, tmp_path):
    run_dir, result = reference
    with pytest.raises(RunInterrupted):
        train_run(make_cfg(), tmp_path, array_stream(TRAIN_TOKENS), VAL_TOKENS, stop_after_steps=37)
    assert (tmp_path / "checkpoint" / "model.safetensors").exists()
    assert not (tmp_path / "result.json").exists()
    # The checkpoint at step 30 is replaced by the one at 37; metrics hold rows to step 35.
    assert curve(tmp_path).step.max() == 35
    # As if killed mid-swap: the new folder half-written, the last good one renamed aside.
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")
    (tmp_path / "checkpoint.tmp").mkdir()
    (tmp_path / "checkpoint.tmp" / "model.safetensors").write_bytes(b"partial")
    resumed = train_run(make_cfg(), tmp_path, array_stream(TRAIN_TOKENS), VAL_TOKENS)
    assert resumed["loss"] == result["loss"]
    pd.testing.assert_frame_equal(curve(tmp_path), curve(run_dir))  # no lost or repeated rows
    # A finished run drops its optimizer state (and the leftovers of the cut-short swap).
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "config.json",
        "metrics.parquet",
        "model",
        "result.json",
    ]
    # Asking again returns the finished result without training.
    assert train_run(make_cfg(), tmp_path, array_stream(TRAIN_TOKENS), VAL_TOKENS) == resumed


@pytest.mark.slow  # a subprocess that imports torch and transformers: 6-15 s
def test_resume_after_sigterm(reference, tmp_path):
    """A real SIGTERM to a training process: it checkpoints, dies by the signal, resumes exactly."""
    _, result = reference
    script = f"""
import sys, time, numpy as np, torch
sys.path.insert(0, {str(Path(__file__).parents[1] / "helpers")!r})
torch.set_num_threads(1)
from tinyrun import make_cfg, TRAIN_TOKENS, VAL_TOKENS
from cdlaw.data.tokens.streams import array_stream
from cdlaw.train.loop import train_run
def progress(p):
    if p.step >= 20:
        print("step", p.step, flush=True)
        time.sleep(0.2)  # leave the parent time to send the signal before the run ends
train_run(make_cfg(checkpoint_every=1000), {str(tmp_path)!r}, array_stream(TRAIN_TOKENS), VAL_TOKENS,
          on_progress=progress)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("step")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert 20 <= state["step"] < 79
    resumed = train_run(
        make_cfg(checkpoint_every=1000), tmp_path, array_stream(TRAIN_TOKENS), VAL_TOKENS
    )
    assert resumed["loss"] == result["loss"]


def test_divergence_is_recorded(tmp_path):
    result = train_run(
        make_cfg(3_000, lr=1e3, warmup_frac=0.0),
        tmp_path,
        array_stream(TRAIN_TOKENS[:3_000]),
        VAL_TOKENS,
    )
    assert result["status"] == "diverged" and math.isnan(result["loss"])
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["status"] == "diverged" and saved["loss"] is None  # strict JSON: NaN → null
    m = curve(tmp_path)
    assert len(m) >= 1 and not (tmp_path / "model").exists()
    last = m.train_loss.iloc[-1]
    assert not math.isfinite(last) or last > 3 * m.train_loss.iloc[0]


def test_hf_round_trip(reference):
    from transformers import AutoModelForCausalLM

    run_dir, result = reference
    net = AutoModelForCausalLM.from_pretrained(run_dir / "model")
    assert type(net).__name__ == "Olmo3ForCausalLM"
    assert validation_loss(net, VAL_TOKENS, SEQ, batch_rows=8) == result["loss"]


def test_gradient_accumulation_matches_one_batch(tmp_path):
    whole = make_cfg(2_000, eval_every=100)
    fp32 = ExecConfig(precision="fp32")
    stream = array_stream(TRAIN_TOKENS[:2_000])
    a = train_run(whole, tmp_path / "a", stream, VAL_TOKENS, fp32)
    accumulated = replace(whole, train=replace(whole.train, micro_batch_size=2))
    b = train_run(accumulated, tmp_path / "b", stream, VAL_TOKENS, fp32)
    assert a["run_id"] != b["run_id"]
    assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)


def test_repetition_stream_epochs(tmp_path):
    d = 1_000
    stream = TokenStream(
        [Segment(TRAIN_TOKENS, 0, d), Segment(TRAIN_TOKENS, 0, d, derived=True)],
        info={"epochs": 2.0, "corpus": "markov"},
    )
    cfg = replace(make_cfg(d, eval_every=100), strategy="repetition", derived_tokens=d)
    result = train_run(cfg, tmp_path, stream, VAL_TOKENS)
    assert (result["epochs"], result["derived_ratio"], result["corpus"]) == (2.0, 1.0, "markov")
    assert curve(tmp_path).epoch.iloc[-1] == 2.0


def test_bad_input_writes_nothing(tmp_path):
    with pytest.raises(BadInput, match="vocabulary"):
        train_run(make_cfg(), tmp_path, array_stream(TRAIN_TOKENS), np.array([1, 2, VOCAB]))
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "config.json").write_text(json.dumps({"run_id": "someoneelse"}))
    with pytest.raises(BadInput, match="someoneelse"):
        train_run(make_cfg(), tmp_path, array_stream(TRAIN_TOKENS), VAL_TOKENS)
    with pytest.raises(ValueError, match="stream has"):
        train_run(make_cfg(), tmp_path / "x", array_stream(TRAIN_TOKENS[:100]), VAL_TOKENS)


# --- bugs that once slipped through (issue #17): each test fails with its bug planted ------


def test_the_z_loss_term_reaches_the_gradient_of_the_logits():
    """d(ce + z_loss·z)/dlogits against autograd of a plain torch reference; z_loss large
    enough that a backward pass dropping the z term is far outside the tolerance."""
    z_loss = 0.5
    base = (4 * torch.randn(3, 6, 11, generator=torch.Generator().manual_seed(0))).double()
    base.requires_grad_()
    logits = base.float() * 1.0  # a non-leaf fp32 tensor, as a model's logits are
    targets = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(1))
    targets[2, 3:] = IGNORE
    ce, z = token_losses(logits, targets)
    (ce + z_loss * z).backward()
    ours, base.grad = base.grad.clone(), None
    flat, flat_targets = base.reshape(-1, 11), targets.reshape(-1)
    ref_ce = F.cross_entropy(flat, flat_targets, reduction="sum", ignore_index=IGNORE)
    ref_z = torch.logsumexp(flat, -1)[flat_targets != IGNORE].square().sum()
    (want,) = torch.autograd.grad(ref_ce + z_loss * ref_z, base, retain_graph=True)
    (ce_only,) = torch.autograd.grad(ref_ce, base)
    assert (want - ce_only).abs().max() > 1.0  # the z term matters here
    torch.testing.assert_close(ours, want, rtol=1e-4, atol=1e-4)
    assert ours[2, 3:].abs().max() == 0  # padding gets no gradient


def test_weight_decay_is_on_the_matrices_only():
    """Decay on every ≥2-D weight but the input embedding; none on it, the norms, 1-D params."""
    from cdlaw.train.steps import make_optimizer

    net = build_model(MODEL, seed=0)
    optimizer = make_optimizer(net, TrainConfig(weight_decay=0.1), torch.device("cpu"))
    name_of = {id(p): n for n, p in net.named_parameters()}
    decayed, not_decayed = [], []
    for group in optimizer.param_groups:
        assert group["weight_decay"] in (0.0, 0.1)
        names = [name_of[id(p)] for p in group["params"]]
        (decayed if group["weight_decay"] else not_decayed).extend(names)
    assert sorted(decayed + not_decayed) == sorted(name_of.values())  # each once
    params = dict(net.named_parameters())
    embedding = name_of[id(net.get_input_embeddings().weight)]
    matrices = {n for n, p in params.items() if p.ndim >= 2}
    assert set(decayed) == matrices - {embedding}
    assert set(not_decayed) == {embedding} | {n for n, p in params.items() if p.ndim < 2}
    norms = {n for n in params if "norm" in n}
    assert norms and norms <= set(not_decayed) and "lm_head.weight" in decayed


def test_resume_restores_the_torch_rng_state_the_checkpoint_saved(tmp_path):
    """A resumed run draws from the RNG state saved with its checkpoint, not from whatever
    the process holds; the progress callback draws numbers to advance it (as sampling
    would), so a resume that forgot to restore it starts from another state."""

    def recorder(states: dict):
        def progress(p):
            states[p.step] = torch.get_rng_state().clone()
            torch.rand(7)

        return progress

    cfg = make_cfg(3_000, eval_every=100, log_every=1, checkpoint_every=100)  # 12 steps
    stream = array_stream(TRAIN_TOKENS[:3_000])
    whole, cut, resumed = {}, {}, {}
    train_run(cfg, tmp_path / "whole", stream, VAL_TOKENS, on_progress=recorder(whole))
    with pytest.raises(RunInterrupted):
        train_run(
            cfg, tmp_path / "cut", stream, VAL_TOKENS, on_progress=recorder(cut), stop_after_steps=5
        )
    torch.rand(100)  # the process draws on before it resumes
    train_run(cfg, tmp_path / "cut", stream, VAL_TOKENS, on_progress=recorder(resumed))
    assert min(resumed) == 6 and max(resumed) == 12
    for step, state in resumed.items():
        assert torch.equal(state, whole[step]), f"step {step}: another RNG state"


def test_a_checkpoints_state_json_keeps_its_keys(tmp_path):
    """state.json is a file format (docs/files.md): the loop's RunState writes the keys a
    resuming cdlaw reads, a branch's fork adds forked_from, and nothing else."""
    cfg = make_cfg(3_000, eval_every=100, log_every=1, checkpoint_every=100)  # 12 steps
    stream = array_stream(TRAIN_TOKENS[:3_000])
    with pytest.raises(RunInterrupted):
        train_run(cfg, tmp_path, stream, VAL_TOKENS, stop_after_steps=3)
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert list(state) == [
        "run_id", "step", "tokens_seen", "elapsed_s", "initial_loss", "interval_loss",
        "interval_targets", "train_loss", "val_loss", "sha256",
    ]  # fmt: skip
    assert state["run_id"] == cfg.run_id and state["step"] == 3 and state["val_loss"] is None


def test_a_run_resumed_before_its_first_evaluation_reports_nan_not_none(tmp_path):
    """state.json stores the not-yet-known validation loss as JSON null; a resumed run (or
    a branch started from a fork) must carry on with NaN, which every reader of progress
    and metrics expects (a None crashed the sweep display)."""
    cfg = make_cfg(3_000, eval_every=100, log_every=1, checkpoint_every=100)  # 12 steps
    stream = array_stream(TRAIN_TOKENS[:3_000])
    with pytest.raises(RunInterrupted):
        train_run(cfg, tmp_path, stream, VAL_TOKENS, stop_after_steps=3)
    seen = []
    train_run(cfg, tmp_path, stream, VAL_TOKENS, on_progress=seen.append)
    first = seen[0]
    assert first.step == 4 and isinstance(first.val_loss, float)
    assert math.isnan(first.val_loss) and math.isfinite(seen[-1].val_loss)


# --- the CD paper's model shapes, in memory --------------------------------------------

AT_14M = dict(size="olmo3_14M", vocab=32768, seq_len=2048, micro_batch=4, threads=2)
PACK_ESTIMATE_FACTOR = 1.5  # pack_bytes against a measured pack of one run, either way


@pytest.fixture(scope="module")
def at_14M():
    """Measured in fresh processes by benchmarks/bench_loss.py (peak RSS growth, per-step
    losses): olmo3_14M at seq 2048, a 32K vocabulary, one micro-batch of 4 rows a step, fp32
    on CPU, on random token ids; train_run's step with the loss in chunks and whole (two
    steps each), and a packed step of one run with the loss in chunks."""
    import importlib.util

    path = Path(__file__).parents[2] / "benchmarks" / "bench_loss.py"
    spec = importlib.util.spec_from_file_location("bench_loss", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return {
        "chunked": bench.measure_in_subprocess(**AT_14M, steps=2, chunked=True, pack=False),
        "full": bench.measure_in_subprocess(**AT_14M, steps=2, chunked=False, pack=False),
        "pack": bench.measure_in_subprocess(**AT_14M, steps=1, chunked=True, pack=True),
        "config": bench.run_config(**{k: v for k, v in AT_14M.items() if k != "threads"}),
    }


@pytest.mark.slow  # ~3 min on 2 cores: five steps of a 14M model at 8,192 tokens
def test_olmo3_14M_at_seq_2048_trains_in_a_fraction_of_the_memory_with_the_same_loss(at_14M):
    """The loss in chunks: the first step's mean cross-entropy equals the whole logits'
    bit for bit (same weights, same batch), the second within fp32 rounding (the LM head's
    gradient, summed over chunks, rounded its own way); the peak memory is under half of
    what whole logits take (4 × 2048 × 32K fp32 logits are 1 GiB, and their gradient)."""
    chunked, full = at_14M["chunked"], at_14M["full"]
    print({k: (at_14M[k]["peak_bytes"] / 2**30, at_14M[k]["losses"]) for k in ("chunked", "full")})
    assert chunked["losses"][0] == full["losses"][0]
    assert chunked["losses"][1] == pytest.approx(full["losses"][1], rel=1e-6, abs=0)
    assert chunked["peak_bytes"] < 0.5 * full["peak_bytes"]
    assert full["peak_bytes"] - chunked["peak_bytes"] > 2**30


@pytest.mark.slow
def test_the_memory_estimates_hold_at_olmo3_14M(at_14M, monkeypatch):
    """pack_bytes (fp32, what `--pack K` is refused on) is within PACK_ESTIMATE_FACTOR of a
    measured pack of one run. plan --gpu-memory's activation_bytes (bf16 GPU accounting)
    puts the saving of the chunks within 10% of the measured one, and its whole estimate
    (16 bytes per parameter, bf16 activations) under this fp32 run's peak but above 40% of
    it (fp32 holds each activation in twice bf16's bytes)."""
    from cdlaw.plan.memory import BYTES_PER_PARAM, ModelShape, activation_bytes
    from cdlaw.shapes import count_params
    from cdlaw.sweep.pack.size import pack_bytes

    cfg = at_14M["config"]
    m, tokens = cfg.model, AT_14M["micro_batch"] * AT_14M["seq_len"]
    estimate, measured = pack_bytes(cfg, 1), at_14M["pack"]["peak_bytes"]
    print(f"pack_bytes {estimate / 2**30:.3f} GiB, measured {measured / 2**30:.3f} GiB")
    assert 1 / PACK_ESTIMATE_FACTOR < estimate / measured < PACK_ESTIMATE_FACTOR
    shape = ModelShape(m.d_model, m.n_layers, m.n_heads, m.mlp_hidden, "olmo3_14M")
    chunked = activation_bytes(shape, m.vocab_size, tokens)
    monkeypatch.setattr(cdlaw.shapes, "CHUNK_LOGITS", 2**62)
    saving = activation_bytes(shape, m.vocab_size, tokens) - chunked
    measured_saving = at_14M["full"]["peak_bytes"] - at_14M["chunked"]["peak_bytes"]
    print(f"chunks save {saving / 2**30:.3f} GiB, measured {measured_saving / 2**30:.3f} GiB")
    assert saving == pytest.approx(measured_saving, rel=0.1)
    total = sum(BYTES_PER_PARAM.values()) * count_params(m).n_params_total + chunked
    alone = at_14M["chunked"]["peak_bytes"]
    print(f"plan's estimate {total / 2**30:.3f} GiB, fp32 measured {alone / 2**30:.3f} GiB")
    assert 0.4 < total / alone < 1
