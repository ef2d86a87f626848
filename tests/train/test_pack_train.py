"""Packed training (cdlaw.train.packed_loop): runs trained together equal runs trained alone.

Three tiny runs of one shape but different lengths (12, 8 and 3 steps, the last with a lone
input and no target), lrs, schedules (cosine, WSD), strategies (none, repetition), weight
decay, z-loss and gradient clipping train in one pack; each is compared step by step with
the same run trained alone by train_run. Then: a run that diverges leaves the pack while the
others go on; a pack killed with SIGKILL resumes each run from its own checkpoint; the packed
forward equals transformers' model; incompatible runs cannot share a pack.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from tinyrun import SEQ, TRAIN_TOKENS, VAL_TOKENS, VOCAB, make_cfg

import cdlaw.shapes
from cdlaw.data.tokens.streams import Segment, TokenStream, array_stream
from cdlaw.system.errors import BadInput
from cdlaw.train.loop import RunInterrupted, train_run
from cdlaw.train.model import build_model
from cdlaw.train.packed_loop import PackedRun, train_pack
from cdlaw.train.packed_model import PackedModels, packed_token_losses
from cdlaw.train.steps import token_losses

torch.set_num_threads(1)

PER_STEP = dict(log_every=1, eval_every=5, checkpoint_every=4)
REL = 0.0  # fp32 on CPU: a packed run equals the run alone bit for bit


def runs(root: Path, micro: int = 4) -> list[PackedRun]:
    """Three runs of one shape: different lengths, lrs, schedules, strategies, hyperparameters
    (micro-batches of 4 rows: gradient accumulation, packed as alone)."""
    d = 1_000
    repeated = TokenStream(
        [Segment(TRAIN_TOKENS, 0, d), Segment(TRAIN_TOKENS, 0, d, derived=True)],
        info={"epochs": 2.0, "corpus": "markov"},
    )
    per_step = {**PER_STEP, "micro_batch_size": micro}
    a = make_cfg(3_000, seed=0, lr=1e-2, **per_step)
    b = replace(
        make_cfg(d, seed=1, lr=3e-3, schedule="wsd", weight_decay=0.0, grad_clip=0.5, **per_step),
        strategy="repetition",
        derived_tokens=d,
    )
    c = make_cfg(2 * 256 + 1, seed=2, lr=5e-3, z_loss=1e-3, **{**per_step, "checkpoint_every": 2})
    streams = [
        array_stream(TRAIN_TOKENS[:3_000]),
        repeated,
        array_stream(TRAIN_TOKENS[: 2 * 256 + 1]),
    ]
    return [
        PackedRun(cfg, root / cfg.run_id, s, VAL_TOKENS)
        for cfg, s in zip((a, b, c), streams, strict=True)
    ]


def curve(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "metrics.parquet")


def rel_diff(a: pd.Series, b: pd.Series) -> float:
    a, b = a.to_numpy(float), b.to_numpy(float)
    both = np.isfinite(a) & np.isfinite(b)
    assert (np.isnan(a) == np.isnan(b)).all()
    return float(np.max(np.abs(a[both] - b[both]) / np.abs(b[both]), initial=0.0))


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    root = tmp_path_factory.mktemp("alone")
    return {
        r.cfg.run_id: (r.run_dir, train_run(r.cfg, r.run_dir, r.stream, r.val_tokens))
        for r in runs(root)
    }


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    pack = runs(root)
    for r in pack:  # what a tracker would see
        r.on_row = lambda row, r=r: ROWS_SEEN.setdefault(r.cfg.run_id, []).append(row["step"])
    return {r.cfg.run_id: r.run_dir for r in pack}, train_pack(pack)


ROWS_SEEN: dict[str, list[int]] = {}


def assert_same_run(packed_dir: Path, alone_dir: Path, packed_result: dict, alone_result: dict):
    p, a = curve(packed_dir), curve(alone_dir)
    assert p.step.tolist() == a.step.tolist() and p.run_id.tolist() == a.run_id.tolist()
    assert p.tokens_seen.tolist() == a.tokens_seen.tolist() and p.lr.tolist() == a.lr.tolist()
    for column in ("train_loss", "val_loss", "grad_norm"):
        assert rel_diff(p[column], a[column]) <= REL, column
    slow = {"wall_seconds", "tokens_per_second"}
    assert packed_result.keys() == alone_result.keys()
    for key, value in alone_result.items():
        if key in slow:
            continue
        if isinstance(value, float):
            assert packed_result[key] == pytest.approx(value, rel=REL, nan_ok=True), key
        else:
            assert packed_result[key] == value, key
    assert json.loads((packed_dir / "result.json").read_text())["run_id"] == alone_result["run_id"]


def test_packed_runs_equal_runs_trained_alone(alone, packed):
    dirs, results = packed
    worst = 0.0
    for run_id, (alone_dir, alone_result) in alone.items():
        assert_same_run(dirs[run_id], alone_dir, results[run_id], alone_result)
        worst = max(worst, rel_diff(curve(dirs[run_id]).train_loss, curve(alone_dir).train_loss))
        assert ROWS_SEEN[run_id] == curve(dirs[run_id]).step.tolist()
        assert sorted(p.name for p in dirs[run_id].iterdir()) == sorted(
            p.name for p in alone_dir.iterdir()
        )
    print(f"max relative per-step train-loss difference, fp32: {worst:.2e}")
    assert [r["steps"] for r in results.values()] == [12, 8, 3]


def test_a_packed_model_folder_loads_and_holds_the_run_alone_weights(alone, packed):
    from transformers import AutoModelForCausalLM

    dirs, _ = packed
    for run_id, (alone_dir, _) in alone.items():
        mine = AutoModelForCausalLM.from_pretrained(dirs[run_id] / "model")
        theirs = AutoModelForCausalLM.from_pretrained(alone_dir / "model")
        for (name, p), q in zip(mine.named_parameters(), theirs.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


def test_a_finished_pack_is_not_trained_again(packed):
    dirs, results = packed
    root = next(iter(dirs.values())).parent
    assert train_pack(runs(root)) == results


def test_a_run_that_diverges_leaves_the_pack_and_the_others_go_on(alone, tmp_path):
    good, *_ = runs(tmp_path)
    bad_cfg = make_cfg(3_000, seed=3, lr=1e3, warmup_frac=0.0, micro_batch_size=4, **PER_STEP)
    bad = PackedRun(bad_cfg, tmp_path / "bad", array_stream(TRAIN_TOKENS[:3_000]), VAL_TOKENS)
    results = train_pack([bad, good])
    assert results[bad_cfg.run_id]["status"] == "diverged"
    assert not (bad.run_dir / "model").exists() and results[bad_cfg.run_id]["steps"] < 12
    alone_dir, alone_result = alone[good.cfg.run_id]
    assert_same_run(good.run_dir, alone_dir, results[good.cfg.run_id], alone_result)


KILLER = """
import os, signal, sys
from pathlib import Path
import cdlaw.train.packed_loop as packed
from tests.train.test_pack_train import runs
saves, real = [], packed.save_checkpoint
def save_then_die(path, *args):
    real(path, *args)
    saves.append(path)
    if len(saves) == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9, right after this checkpoint
packed.save_checkpoint = save_then_die
packed.train_pack(runs(Path(sys.argv[1])))
"""


@pytest.mark.slow  # a subprocess that imports torch and transformers
def test_a_pack_killed_with_sigkill_resumes_each_run_from_its_own_checkpoint(alone, tmp_path):
    # Checkpoints: c at step 2 (its last is step 3), a and b at 4, c … : the 3rd save is b's
    # at step 4; c is done, a has its step-4 checkpoint, b dies right after its own.
    tests = Path(__file__).parents[1]  # the child imports this file and tests/helpers
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests / "helpers")])}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLER), str(tmp_path), "3"], env=env, check=False
    )
    assert proc.returncode == -signal.SIGKILL
    pack = runs(tmp_path)
    a, b, c = (r.run_dir for r in pack)
    assert (c / "result.json").exists() and not (a / "result.json").exists()
    assert json.loads((b / "checkpoint" / "state.json").read_text())["step"] == 4
    results = train_pack(pack)  # the pack re-formed from the same runs
    for r in pack:
        alone_dir, alone_result = alone[r.cfg.run_id]
        assert_same_run(r.run_dir, alone_dir, results[r.cfg.run_id], alone_result)


def test_stop_after_steps_checkpoints_every_run_and_resumes(alone, tmp_path):
    pack = runs(tmp_path)
    with pytest.raises(RunInterrupted):
        train_pack(pack, stop_after_steps=5)
    assert [
        json.loads((r.run_dir / "checkpoint/state.json").read_text())["step"] for r in pack[:2]
    ] == [5, 5]
    # A packed run's checkpoint is a run's checkpoint: train_run resumes the first alone.
    first = pack[0]
    results = {first.cfg.run_id: train_run(first.cfg, first.run_dir, first.stream, VAL_TOKENS)}
    results |= train_pack(runs(tmp_path)[1:])
    for r in pack:
        alone_dir, alone_result = alone[r.cfg.run_id]
        assert_same_run(r.run_dir, alone_dir, results[r.cfg.run_id], alone_result)


@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_the_packed_forward_and_backward_are_transformers_model(amp):
    cfg = make_cfg()
    nets = [build_model(cfg.model, seed=s) for s in range(3)]
    pack = PackedModels(nets, [cfg.train] * 3, torch.device("cpu"))
    x = torch.from_numpy(TRAIN_TOKENS[: 3 * 4 * 32].reshape(3, 4, 32))
    y = torch.from_numpy(TRAIN_TOKENS[1 : 3 * 4 * 32 + 1].reshape(3, 4, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp is not None):
        logits = pack.forward(x)
    ce, z = packed_token_losses(logits, y)
    (ce + 1e-4 * z).sum().backward()
    for k, net in enumerate(nets):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp is not None):
            theirs = net(input_ids=x[k], use_cache=False).logits
        torch.testing.assert_close(logits[k], theirs, rtol=0, atol=0)
        c, zz = token_losses(theirs, y[k])
        (c + 1e-4 * zz).backward()
        grads = torch.cat([dict(net.named_parameters())[n].grad.reshape(-1) for n in pack.names])
        torch.testing.assert_close(pack.grad[k], grads, rtol=1e-6, atol=1e-7)


def test_incompatible_runs_cannot_share_a_pack(tmp_path):
    a, b, _ = runs(tmp_path)
    wide = replace(b.cfg, train=replace(b.cfg.train, batch_size=4))
    with pytest.raises(BadInput, match="cannot share a pack"):
        train_pack([a, PackedRun(wide, tmp_path / "wide", b.stream, VAL_TOKENS)])
    assert not any(tmp_path.iterdir())


def test_bf16_packed_runs_equal_runs_alone(tmp_path):
    """bf16 autocast: the same ops in the same dtypes, so the same numbers bit for bit."""
    from cdlaw.config import ExecConfig

    bf16 = ExecConfig(device="cpu", precision="bf16")
    a, b, _ = runs(tmp_path / "packed", micro=0)
    results = train_pack([a, b], bf16)
    worst = 0.0
    for r in (a, b):
        alone_dir = tmp_path / "alone" / r.cfg.run_id
        alone_result = train_run(r.cfg, alone_dir, r.stream, VAL_TOKENS, bf16)
        worst = max(worst, rel_diff(curve(r.run_dir).train_loss, curve(alone_dir).train_loss))
        assert results[r.cfg.run_id]["precision"] == alone_result["precision"] == "bfloat16"
    print(f"max relative per-step train-loss difference, bf16: {worst:.2e}")
    assert worst == 0.0  # the same ops in the same dtypes: bit for bit in bf16 too


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_packed_runs_equal_runs_alone_with_the_loss_in_chunks(tmp_path, monkeypatch, precision):
    """CHUNK_LOGITS lowered so that every micro-batch's LM head and loss go in chunks (of
    27 tokens, the last short), in training and in evaluation: packed runs still equal the
    runs alone bit for bit, and the chunks change the loss by fp32 rounding at most."""
    from cdlaw.config import ExecConfig

    exec_cfg = ExecConfig(device="cpu", precision=precision)
    whole = {}
    for r in runs(tmp_path / "whole")[:2]:
        whole[r.cfg.run_id] = train_run(r.cfg, r.run_dir, r.stream, VAL_TOKENS, exec_cfg)
    from runhelpers import chunks_taken  # here: the kill -9 child imports this module

    calls = chunks_taken(monkeypatch)
    assert calls == []  # the runs above were whole
    monkeypatch.setattr(cdlaw.shapes, "CHUNK_LOGITS", 27 * VOCAB)
    assert cdlaw.shapes.loss_chunk_tokens(4 * SEQ, VOCAB) == 27
    pack = runs(tmp_path / "packed")[:2]
    results = train_pack(pack, exec_cfg)
    assert calls and set(calls) == {27}, calls  # the pack's loss really went in chunks
    calls.clear()
    for r in pack:
        alone_dir = tmp_path / "alone" / r.cfg.run_id
        alone_result = train_run(r.cfg, alone_dir, r.stream, VAL_TOKENS, exec_cfg)
        assert calls and set(calls) == {27}, calls  # and the run alone's
        assert_same_run(r.run_dir, alone_dir, results[r.cfg.run_id], alone_result)
        first = curve(alone_dir).train_loss.iloc[0]
        assert first == curve(tmp_path / "whole" / r.cfg.run_id).train_loss.iloc[0]
        # fp32: chunks change the loss by rounding. bf16: the LM head runs in bf16 under
        # autocast, and on CPUs with native bf16 (AVX512-BF16, AMX) oneDNN picks its kernel,
        # and so its order of accumulation, by shape: a chunk rounds otherwise than the whole.
        rel = 1e-5 if precision == "fp32" else 1e-3
        assert alone_result["loss"] == pytest.approx(whole[r.cfg.run_id]["loss"], rel=rel)


def test_sigterm_checkpoints_every_run_of_the_pack_then_the_previous_handler_runs(
    alone, tmp_path, monkeypatch
):
    import cdlaw.train.packed_loop as packed

    calls, seen = [], []
    real_lr_at = packed.lr_at

    def lr_at(step, total, train):  # the pack's 7th batch read sends SIGTERM to this process
        calls.append(step)
        if len(calls) == 7:
            signal.raise_signal(signal.SIGTERM)
        return real_lr_at(step, total, train)

    monkeypatch.setattr(packed, "lr_at", lr_at)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        pack = runs(tmp_path)
        with pytest.raises(RunInterrupted, match="signal"):
            train_pack(pack)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [signal.SIGTERM]  # delivered again to the handler that was there before
    a, b, c = (r.run_dir for r in pack)
    assert (c / "result.json").exists()  # 3 steps: done before the signal
    steps = [json.loads((d / "checkpoint/state.json").read_text())["step"] for d in (a, b)]
    assert steps == [3, 3]
    monkeypatch.setattr(packed, "lr_at", real_lr_at)
    results = train_pack(runs(tmp_path))
    for r in pack:
        alone_dir, alone_result = alone[r.cfg.run_id]
        assert_same_run(r.run_dir, alone_dir, results[r.cfg.run_id], alone_result)


COMPILED_REL = 1e-5  # compiled: fused kernels round differently; measured ~3e-7 here


@pytest.mark.slow  # compiles the packed step: ~40 s on a cold CPU, a few from inductor's cache
@pytest.mark.parametrize("chunks", [False, True])
def test_compiled_packed_runs_equal_runs_alone_within_1e_5(alone, tmp_path, monkeypatch, chunks):
    """--compile: the same three runs through the compiled packed step (K = 3, then 2 and 1
    as runs leave): per-step losses within 1e-5 of the runs alone in fp32, compiled for real
    (graphs made, not the eager fallback) and once for every pack size above one. chunks:
    with the LM head and loss in chunks (CHUNK_LOGITS lowered; the runs alone are whole)."""
    from torch._dynamo.utils import counters

    from cdlaw.config import ExecConfig

    if chunks:
        monkeypatch.setattr(cdlaw.shapes, "CHUNK_LOGITS", 27 * VOCAB)
    graphs = counters["stats"]["unique_graphs"]
    pack = runs(tmp_path)
    results = train_pack(pack, ExecConfig(device="cpu", compile=True))
    # compiled for real, and K is dynamic: one graph serves K = 3 and 2, one K = 1
    assert counters["stats"]["unique_graphs"] - graphs == 2
    worst = 0.0
    for r in pack:
        alone_dir, alone_result = alone[r.cfg.run_id]
        p, a = curve(r.run_dir), curve(alone_dir)
        assert p.step.tolist() == a.step.tolist() and p.lr.tolist() == a.lr.tolist()
        assert p.tokens_seen.tolist() == a.tokens_seen.tolist()
        for column in ("train_loss", "val_loss"):
            assert rel_diff(p[column], a[column]) <= COMPILED_REL, column
            worst = max(worst, rel_diff(p[column], a[column]))
        assert rel_diff(p.grad_norm, a.grad_norm) <= 1e-3
        assert results[r.cfg.run_id]["steps"] == alone_result["steps"]
        assert results[r.cfg.run_id]["loss"] == pytest.approx(
            alone_result["loss"], rel=COMPILED_REL, nan_ok=True
        )
    print(f"max relative per-step loss difference, compiled fp32: {worst:.2e}")


def test_a_pack_whose_compile_fails_warns_and_trains_eagerly(alone, tmp_path, monkeypatch):
    import cdlaw.train.packed_model as packed_model
    from cdlaw.config import ExecConfig

    def no_compiler(*args):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setitem(packed_model._COMPILE, "fn", no_compiler)
    monkeypatch.setitem(packed_model._COMPILE, "ok", True)
    pack = runs(tmp_path)
    with pytest.warns(UserWarning, match="torch.compile failed here .*no C\\+\\+ compiler"):
        results = train_pack(pack, ExecConfig(device="cpu", compile=True))
    for r in pack:  # eager: bit for bit again
        alone_dir, alone_result = alone[r.cfg.run_id]
        assert_same_run(r.run_dir, alone_dir, results[r.cfg.run_id], alone_result)


def test_a_partial_last_batch_beside_full_ones_equals_the_run_alone(tmp_path):
    """A run whose last batch has 12 of 16 rows, packed with a run whose batches are all
    full: it trains that step on its own 12 rows, as alone, not on 16 with 4 of padding (a
    matmul summing over 384 tokens rounds otherwise than over 512 with 128 zeros), so the
    last step's gradient norm and the validation loss after it are the same bit for bit."""
    per_step = dict(batch_size=16, log_every=1, eval_every=2, checkpoint_every=10)
    full = make_cfg(4 * 512, seed=0, **per_step)
    part = make_cfg(3 * 512 + 12 * SEQ, seed=1, lr=3e-3, **per_step)
    pack = [
        PackedRun(c, tmp_path / "packed" / c.run_id, array_stream(TRAIN_TOKENS[: c.fresh_tokens]),
                  VAL_TOKENS)
        for c in (full, part)
    ]  # fmt: skip
    results = train_pack(pack)
    for r in pack:
        alone_dir = tmp_path / "alone" / r.cfg.run_id
        alone = train_run(r.cfg, alone_dir, r.stream, VAL_TOKENS)
        assert_same_run(r.run_dir, alone_dir, results[r.cfg.run_id], alone)
        mine, theirs = (
            load_file(d / "model" / "model.safetensors") for d in (r.run_dir, alone_dir)
        )
        assert all(torch.equal(mine[n], theirs[n]) for n in theirs), "the last update differs"
    assert [r["steps"] for r in results.values()] == [4, 4]
