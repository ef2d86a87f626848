"""Training throughput: cdlaw's train_run beside a bare PyTorch loop, in the same process.

Both train the same transformers Olmo3ForCausalLM (same shape, batch, precision and AdamW)
on the same tokens. The bare loop is what a person would write first: forward, cross-
entropy, backward, optimizer step; no z-loss, clipping, schedule, logging, evaluation or
files. train_run is timed end to end (model build, evaluation on 65,536 validation tokens
every 200 steps and at the end, a metrics row every 10 steps, the final model and
result.json), at the sweep's defaults. Goal: ratio ≥ 0.9 at every size.

    .venv/bin/python benchmarks/bench_train.py              # CPU: ~0.2M, ~1M, ~5M parameters
    .venv/bin/python benchmarks/bench_train.py --gpu        # GPU: 14M, 60M, 190M at seq 2048

--gpu reports tokens/s and MFU (6N + attention FLOPs per token over the chip's peak bf16
FLOP/s) for train_run, compiled, bf16.

--pack measures packed training (cdlaw.train.packed_loop): the total tokens/s of K runs of one
shape trained in one process, one batched step for all, against the same runs trained one
at a time by train_run, in the same process run, for K = 1, 2, 4, 8, 16, and reports the K
after which doubling the pack gains under 10% ("flattens at"):

    .venv/bin/python benchmarks/bench_train.py --pack        # CPU, the demo's sizes and batch
    .venv/bin/python benchmarks/bench_train.py --pack --gpu  # 14M/30M/60M, seq 2048, bf16, MFU
    .venv/bin/python benchmarks/bench_train.py --pack --tiny # both, seconds on CPU (a test runs it)
    .venv/bin/python benchmarks/bench_train.py --pack --compile  # packs through torch.compile

Both sides train every run end to end as a sweep would (model build, the demo's WSD
schedule, a metrics row every 10 steps, one evaluation on the validation set, model/ and
result.json). Runs alone are not compiled; with --compile the packs are (warmed up first,
so compile time is not in the rates; docs/packing.md says what it costs).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from cdlaw.config import DataConfig, ExecConfig, RunConfig, TrainConfig
from cdlaw.data.tokens.streams import array_stream
from cdlaw.shapes import count_params, flops_per_token, named_shape, shape_for_params
from cdlaw.train.loop import train_run
from cdlaw.train.model import build_model
from cdlaw.train.packed_loop import PackedRun, train_pack
from cdlaw.train.steps import CPU_BF16_MIN_D_MODEL, autocast, autocast_dtype, resolve_device


class Clock:
    """Wall-clock and CPU seconds (all threads) since start: CPU time is what a busy
    shared machine distorts least, wall time is what a user waits."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def rates(self, tokens: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return tokens / wall, tokens / cpu


def bare_loop(cfg: RunConfig, tokens: np.ndarray, exec_cfg: ExecConfig) -> tuple[float, float]:
    """Tokens per wall second and per CPU second of a plain PyTorch loop (build included)."""
    device = torch.device(resolve_device(exec_cfg.device))
    amp = autocast_dtype(exec_cfg.precision, device, cfg.model.d_model)
    clock = Clock()
    net = build_model(cfg.model, seed=cfg.seed).to(device)
    lm = torch.compile(net) if exec_cfg.compile else net
    t = cfg.train
    optimizer = torch.optim.AdamW(
        net.parameters(),
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        eps=t.eps,
        weight_decay=t.weight_decay,
        fused=True,
    )
    data = torch.from_numpy(tokens).to(device)
    rows, seq_len = t.batch_size, cfg.model.seq_len
    micro = t.micro_batch_size or rows
    batch = rows * seq_len
    steps = len(tokens) // batch  # the very last token is an input only, as in train_run
    for step in range(steps):
        chunk = data[step * batch : (step + 1) * batch + 1]
        if len(chunk) == batch:  # the last batch: its last input has no target
            chunk = torch.cat([chunk, chunk[-1:]])
        x, y = chunk[:-1].view(rows, seq_len), chunk[1:].view(rows, seq_len)
        for i in range(0, rows, micro):
            with autocast(device, amp):
                logits = lm(input_ids=x[i : i + micro]).logits
            loss = F.cross_entropy(logits.float().flatten(0, 1), y[i : i + micro].flatten())
            (loss * (micro / rows)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    loss.item()  # wait for the device
    return clock.rates(steps * batch)


def cdlaw_run(cfg: RunConfig, tokens: np.ndarray, val: np.ndarray, exec_cfg: ExecConfig):
    with tempfile.TemporaryDirectory() as run_dir:
        clock = Clock()
        result = train_run(cfg, run_dir, array_stream(tokens), val, exec_cfg)
        return clock.rates(result["tokens_trained"]), result


def make_run(shape, vocab: int, seq_len: int, n_tokens: int, **train) -> RunConfig:
    model = shape.model_config(vocab_size=vocab, seq_len=seq_len)
    return RunConfig(
        sweep="bench",
        strategy="none",
        fresh_tokens=n_tokens,
        derived_tokens=0,
        model=model,
        data=DataConfig(vocab_size=vocab),
        train=TrainConfig(**train),
    )


def cpu(steps: int, repeats: int, threads: int, sizes: list[float]) -> None:
    torch.set_num_threads(threads)
    vocab, seq_len, batch = 2048, 128, 16  # the sweep's defaults (data, model, train)
    exec_cfg = ExecConfig(device="cpu")
    rng = np.random.default_rng(0)
    val = rng.integers(0, vocab, DataConfig().val_tokens)
    print(
        f"CPU, {torch.get_num_threads()} threads, precision auto (bf16 from d_model "
        f"{CPU_BF16_MIN_D_MODEL}); {steps} steps of {batch}×{seq_len}"
    )
    print(
        f"tokens, fused AdamW; evaluation every 200 steps and at the end on {len(val):,} tokens; best of {repeats}"
    )
    print(
        f"{'target':>7} {'n_params':>10} {'d/L/heads':>10} {'bare tok/s':>11} {'cdlaw tok/s':>12} "
        f"{'ratio':>6} {'bare tok/cpu-s':>15} {'cdlaw tok/cpu-s':>16} {'ratio':>6}"
    )
    for target in sizes:
        shape = shape_for_params(target, vocab)
        n_tokens = steps * batch * seq_len
        tokens = rng.integers(0, vocab, n_tokens)
        cfg = make_run(shape, vocab, seq_len, n_tokens, batch_size=batch)
        bare, ours = [], []
        for _ in range(repeats):  # interleaved, best of each: the machine is shared
            bare.append(bare_loop(cfg, tokens, exec_cfg))
            ours.append(cdlaw_run(cfg, tokens, val, exec_cfg)[0])
        bw, bc = (max(r[i] for r in bare) for i in (0, 1))
        ow, oc = (max(r[i] for r in ours) for i in (0, 1))
        n = count_params(shape, vocab).n_params
        dims = f"{shape.d_model}/{shape.n_layers}/{shape.n_heads}"
        print(
            f"{target:>7.0e} {n:>10,} {dims:>10} {bw:>11,.0f} {ow:>12,.0f} {ow / bw:>6.2f} "
            f"{bc:>15,.0f} {oc:>16,.0f} {oc / bc:>6.2f}",
            flush=True,
        )


def gpu(steps: int, peak_tflops: float) -> None:
    vocab, seq_len = 100_278, 2048
    exec_cfg = ExecConfig(device="cuda", precision="bf16", compile=True)
    rng = np.random.default_rng(0)
    val = rng.integers(0, vocab, 65_536)
    print(
        f"GPU {torch.cuda.get_device_name()}, bf16, compiled, seq {seq_len}, peak {peak_tflops} TFLOP/s"
    )
    print(
        f"{'size':>6} {'n_params':>12} {'batch':>6} {'bare tok/s':>11} {'cdlaw tok/s':>12} {'ratio':>6} {'MFU':>6}"
    )
    for name, batch, micro in (("14M", 64, 32), ("60M", 64, 16), ("190M", 64, 16)):
        shape = named_shape(name)
        n_tokens = steps * batch * seq_len
        tokens = rng.integers(0, vocab, n_tokens)
        cfg = make_run(shape, vocab, seq_len, n_tokens, batch_size=batch, micro_batch_size=micro)
        bare = bare_loop(cfg, tokens, exec_cfg)[0]
        ours = cdlaw_run(cfg, tokens, val, exec_cfg)[0][0]
        n = count_params(shape, vocab).n_params
        mfu = (
            ours * flops_per_token(n, shape.n_layers, shape.d_model, seq_len) / (peak_tflops * 1e12)
        )
        print(
            f"{name:>6} {n:>12,} {batch:>6} {bare:>11,.0f} {ours:>12,.0f} {ours / bare:>6.2f} {mfu:>6.1%}"
        )


# ---------------------------------------------------------------------------------------
# Packed runs (--pack).
# ---------------------------------------------------------------------------------------


def packed_rates(cfg: RunConfig, tokens: np.ndarray, val: np.ndarray, exec_cfg: ExecConfig, ks):
    """Total tokens/s of one run alone (train_run), then of packs of each K (train_pack):
    {0: alone, K: packed}. Run k of a pack is cfg with seed k on the same tokens."""
    rates = {}
    with tempfile.TemporaryDirectory() as root:
        # Untimed warm-up of both paths (first calls load kernels and transformers' modules).
        short = tokens[: 2 * cfg.train.batch_size * cfg.model.seq_len]
        warm = replace(cfg, fresh_tokens=len(short))
        train_run(warm, Path(root) / "warm", array_stream(short), val, exec_cfg)
        for k in (1, 2):  # with --compile: the graph of a pack of one, and the one of any K
            warm_pack = [
                PackedRun(replace(warm, seed=i), Path(root) / f"warm{k}" / str(i), array_stream(short), val)
                for i in range(k)
            ]  # fmt: skip
            train_pack(warm_pack, exec_cfg)
        alone = []
        for i in range(2):  # best of two: the machine may be shared
            clock = Clock()
            train_run(cfg, Path(root) / f"alone{i}", array_stream(tokens), val, exec_cfg)
            alone.append(clock.rates(len(tokens))[0])
        rates[0] = max(alone)
        for k in ks:
            runs = [
                PackedRun(
                    replace(cfg, seed=i), Path(root) / f"k{k}" / str(i), array_stream(tokens), val
                )
                for i in range(k)
            ]
            clock = Clock()
            results = train_pack(runs, exec_cfg)
            rates[k] = clock.rates(k * len(tokens))[0]
            statuses = {r["status"] for r in results.values()}
            assert statuses == {"done"}, f"a benchmark run ended {statuses}: rates would mislead"
    return rates


def flattens_at(rates: dict, ks) -> int:
    """The K after which doubling the pack gains under 10% total tokens/s."""
    for a, b in itertools.pairwise(ks):
        if rates[b] < 1.1 * rates[a]:
            return a
    return ks[-1]


def pack_table(
    shapes, vocab, seq_len, batch, steps, ks, exec_cfg, n_val, peak_tflops=None, **train
):
    rng = np.random.default_rng(0)
    val = rng.integers(0, vocab, n_val)
    head = f"{'size':>6} {'n_params':>11} {'alone tok/s':>12}"
    head += "".join(f" {f'K={k} tok/s':>12} {'×':>5}" for k in ks) + f" {'flattens at':>11}"
    print(head + (f" {'MFU best':>8}" if peak_tflops else ""))
    out = {}
    for name, shape in shapes:
        n_tokens = steps * batch * seq_len
        tokens = rng.integers(0, vocab, n_tokens + 1)
        cfg = make_run(shape, vocab, seq_len, n_tokens, batch_size=batch, **train)
        rates = packed_rates(cfg, tokens[:n_tokens], val, exec_cfg, ks)
        n = count_params(shape, vocab).n_params
        line = f"{name:>6} {n:>11,} {rates[0]:>12,.0f}"
        line += "".join(f" {rates[k]:>12,.0f} {rates[k] / rates[0]:>5.2f}" for k in ks)
        line += f" {flattens_at(rates, ks):>11}"
        if peak_tflops:
            fpt = flops_per_token(n, shape.n_layers, shape.d_model, seq_len)
            line += f" {max(rates.values()) * fpt / (peak_tflops * 1e12):>8.1%}"
        print(line, flush=True)
        out[name] = rates
    return out


DEMO_TRAIN = dict(schedule="wsd", warmup_steps=30, decay_frac=0.2, eval_every=500, log_every=10)


def pack_cpu(steps: int, threads: int, ks, tiny: bool = False, compile: bool = False) -> dict:
    """The demo's sizes (vocab 512, batch 4×64, 2 threads, fp32 as precision auto picks);
    compile: packs through torch.compile (the runs alone stay eager: the yardstick)."""
    torch.set_num_threads(threads)
    sizes = [2e4] if tiny else [2e4, 6e4, 2e5]
    shapes = [(f"{n / 1e3:.0f}K", shape_for_params(n, 512)) for n in sizes]
    print(
        f"CPU, {torch.get_num_threads()} threads, batch 4×64, vocab 512, {steps} steps per run"
        + (", packs compiled" if compile else "")
    )
    exec_cfg = ExecConfig(device="cpu", compile=compile)
    return pack_table(shapes, 512, 64, 4, steps, ks, exec_cfg, 16_384, lr=2e-2, **DEMO_TRAIN)


def pack_gpu(steps: int, ks, peak_tflops: float, tiny: bool = False, compile: bool = False) -> dict:
    """14M/30M/60M at seq 2048, bf16 (the CD paper's small sizes); --tiny: the same code on
    CPU at a toy shape, so CI keeps it working where there is no GPU."""
    if tiny:
        shapes, vocab, seq_len, batch, micro = (
            [("tiny", shape_for_params(2e4, 512))],
            512,
            128,
            2,
            1,
        )
        exec_cfg = ExecConfig(device="cpu", precision="bf16", compile=compile)
        print(
            "the GPU table's code on CPU at a toy shape, bf16"
            + (", packs compiled" if compile else "")
        )
    else:
        if not torch.cuda.is_available():
            print(
                "bench_train.py --gpu: no CUDA GPU is visible here; run it where one is",
                file=sys.stderr,
            )
            raise SystemExit(2)
        shapes = [(n, named_shape(n)) for n in ("14M", "30M", "60M")]
        # Micro-batches of 2 rows: a pack of 8 holds 8·2·2048·100,278 logits (~33 GB with
        # the loss's fp32 copy and gradient) at once.
        vocab, seq_len, batch, micro = 100_278, 2048, 16, 2
        exec_cfg = ExecConfig(device="cuda", precision="bf16", compile=compile)
        print(
            f"GPU {torch.cuda.get_device_name()}, bf16, seq {seq_len}, batch {batch}, peak {peak_tflops} TFLOP/s"
            + (", packs compiled" if compile else "")
        )
    return pack_table(
        shapes, vocab, seq_len, batch, steps, ks, exec_cfg, 4 * seq_len, peak_tflops,
        micro_batch_size=micro, lr=1e-3, **DEMO_TRAIN,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pack", action="store_true", help="packed runs against runs alone")
    parser.add_argument("--tiny", action="store_true", help="--pack: seconds-long, on CPU (CI)")
    parser.add_argument("--ks", default="", help="--pack: pack sizes (1,2,4,8,16; GPU 1,2,4,8)")
    parser.add_argument("--gpu", action="store_true", help="the GPU table instead of the CPU one")
    parser.add_argument(
        "--compile", action="store_true", help="--pack: packs through torch.compile"
    )
    parser.add_argument(
        "--steps", type=int, default=0, help="steps per run (default 200 CPU, 300 GPU)"
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="CPU: interleaved repeats, best kept"
    )
    parser.add_argument("--threads", type=int, default=2, help="CPU: torch threads")
    parser.add_argument(
        "--sizes", default="2e5,1e6,5e6", help="CPU: target n_params, comma-separated"
    )
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="GPU bf16 dense peak")
    args = parser.parse_args(argv)
    if args.pack:
        default = "1,2" if args.tiny else "1,2,4,8" if args.gpu else "1,2,4,8,16"
        ks = [int(k) for k in (args.ks or default).split(",")]
        if args.gpu:
            steps = args.steps or (3 if args.tiny else 30)
            pack_gpu(steps, ks, args.peak_tflops, args.tiny, args.compile)
        else:
            steps = args.steps or (4 if args.tiny else 200)
            pack_cpu(steps, args.threads, ks, args.tiny, args.compile)
    elif args.gpu:
        gpu(args.steps or 300, args.peak_tflops)
    else:
        cpu(
            args.steps or 200, args.repeats, args.threads, [float(x) for x in args.sizes.split(",")]
        )


if __name__ == "__main__":
    main()
