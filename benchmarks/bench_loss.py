"""Peak memory and step time of a training step with the chunked LM-head loss and with whole
logits, at one of the CD paper's model shapes, in one run.

    .venv/bin/python benchmarks/bench_loss.py              # olmo3_14M, seq 2048, vocab 32,768,
                                                           # micro-batch 4, 2 steps, CPU, fp32
    .venv/bin/python benchmarks/bench_loss.py --pack       # a pack of one run, its estimate
    .venv/bin/python benchmarks/bench_loss.py --size olmo3_30M --vocab 50304 --steps 3

Both sides train the same freshly built model on the same random token ids with the step
`--pack auto` times (cdlaw.sweep.pack.calibration: train_run's step, or with --pack a
packed step of one run): "chunked" is cdlaw's default (cdlaw.shapes.CHUNK_LOGITS), "full"
raises CHUNK_LOGITS above the micro-batch's logits, so they are made whole. Each side runs
in a process of its own, so one side's peak cannot hide the other's. Peak memory is
ru_maxrss (the kernel's high-water mark of the process's resident memory: no sampling that
could miss a short peak, and every allocator counted, oneDNN's scratch space too) less the
resident memory before the model is built. Step time is the median of the steps after the
first. The estimate beside them is cdlaw.sweep.pack.size.pack_bytes for one run (fp32 on
CPU, what a pack of it would hold).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_config(size: str, vocab: int, seq_len: int, micro_batch: int):
    """A RunConfig of the named shape, one micro-batch per step."""
    from cdlaw.config import DataConfig, RunConfig, TrainConfig
    from cdlaw.shapes import named_shape

    return RunConfig(
        sweep="bench",
        strategy="none",
        fresh_tokens=10 * micro_batch * seq_len,
        derived_tokens=0,
        model=named_shape(size).model_config(vocab_size=vocab, seq_len=seq_len, size=size),
        data=DataConfig(vocab_size=vocab),
        train=TrainConfig(batch_size=micro_batch, z_loss=1e-4),
    )


def measure(
    size: str, vocab: int, seq_len: int, micro_batch: int, steps: int, threads: int,
    chunked: bool, pack: bool, precision: str = "fp32",
) -> dict:  # fmt: skip
    """Train `steps` steps in this process; return its peak memory growth (bytes), the
    median step time (s) and each step's mean cross-entropy. Sets cdlaw.shapes.CHUNK_LOGITS
    for the whole process when not chunked: call it in a process of its own."""
    import torch

    import cdlaw.shapes
    from cdlaw.config import ExecConfig
    from cdlaw.sweep.pack.calibration import alone_step, pack_step

    if not chunked:
        cdlaw.shapes.CHUNK_LOGITS = 2**62
    cfg = run_config(size, vocab, seq_len, micro_batch)
    exec_cfg = ExecConfig(device="cpu", precision=precision, threads=threads)
    before = resident_bytes()
    step = pack_step(cfg, 1, exec_cfg) if pack else alone_step(cfg, exec_cfg)
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        ce = step()
        times.append(time.perf_counter() - start)
        losses.append(float(ce.sum()) / (micro_batch * seq_len))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    timed = sorted(times[1:] or times)
    return {
        "peak_bytes": peak - before,
        "step_s": timed[len(timed) // 2],
        "losses": losses,
        "threads": torch.get_num_threads(),
    }


def resident_bytes() -> int:
    """This process's resident memory now (/proc/self/statm)."""
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_in_subprocess(**kwargs) -> dict:
    """`measure` in a fresh Python process (this file run with --one)."""
    args = [sys.executable, __file__, "--one"]
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args += [flag] if value else []
        else:
            args += [flag, str(value)]
    out = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="olmo3_14M", help="a named shape (cdlaw.shapes)")
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--pack", action="store_true", help="a packed step of one run")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chunked", action="store_true", help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    shape = dict(size=a.size, vocab=a.vocab, seq_len=a.seq_len, micro_batch=a.micro_batch)
    common = dict(shape, steps=a.steps, threads=a.threads, pack=a.pack, precision=a.precision)
    if a.one:
        print(json.dumps(measure(**common, chunked=a.chunked)))
        return
    from cdlaw.sweep.pack.size import pack_bytes

    estimate = pack_bytes(run_config(**shape), 1)
    print(
        f"{a.size}, seq {a.seq_len}, vocab {a.vocab:,}, micro-batch {a.micro_batch}, "
        f"{'a pack of one run' if a.pack else 'train_run step'}, {a.precision}, CPU, {a.threads} "
        f"threads, {a.steps} steps; pack_bytes estimate {estimate / 2**30:.2f} GiB"
    )
    print(f"{'loss':<8} {'peak GiB':>9} {'step s':>7} {'tok/s':>7}  per-step mean cross-entropy")
    for name, chunked in (("chunked", True), ("full", False)):
        r = measure_in_subprocess(**common, chunked=chunked)
        rate = a.micro_batch * a.seq_len / r["step_s"]
        losses = " ".join(f"{x:.9g}" for x in r["losses"])
        print(
            f"{name:<8} {r['peak_bytes'] / 2**30:>9.2f} {r['step_s']:>7.2f} {rate:>7.0f}  {losses}"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
