"""benchmarks/bench_train.py --pack in its reduced CPU form, so the benchmark cannot rot:
the CPU table and the GPU table's code (--gpu --tiny runs it on CPU at a toy shape), and
--gpu without a GPU failing in one sentence with exit code 2."""

import importlib.util
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).parents[2] / "benchmarks" / "bench_train.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_train", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    torch.set_num_threads(1)


@pytest.mark.parametrize(
    "gpu, compile",
    [(False, False), (True, False), pytest.param(True, True, marks=pytest.mark.slow)],
)
def test_the_pack_benchmark_runs_in_its_tiny_form(bench, capsys, gpu, compile):
    from torch._dynamo.utils import counters

    graphs = counters["stats"]["unique_graphs"]
    flags = (["--gpu"] if gpu else []) + (["--compile"] if compile else [])
    bench.main(["--pack", "--tiny", "--threads", "1", "--steps", "2", *flags])
    table = capsys.readouterr().out.splitlines()
    assert ("packs compiled" in table[-3]) == compile
    assert (counters["stats"]["unique_graphs"] > graphs) == compile  # compiled for real
    assert "K=1 tok/s" in table[-2] and "K=2 tok/s" in table[-2] and "flattens at" in table[-2]
    assert ("MFU best" in table[-2]) == gpu
    size, n_params, *numbers = table[-1].split()
    assert size == ("tiny" if gpu else "20K") and n_params == "26,328"
    if gpu:  # MFU against an H100's peak: a CPU's is 0.0%
        assert numbers.pop().endswith("%")
    assert all(float(x.replace(",", "")) > 0 for x in numbers)


def test_flattens_at_is_the_pack_size_after_which_doubling_gains_under_10_percent(bench):
    ks = [1, 2, 4, 8, 16]
    rates = {0: 10, 1: 10, 2: 19, 4: 30, 8: 32, 16: 33}
    assert bench.flattens_at(rates, ks) == 4
    assert bench.flattens_at({k: k for k in ks}, ks) == 16


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: --gpu would run")
def test_the_gpu_pack_benchmark_without_a_gpu_says_so_and_exits_2(bench, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(["--pack", "--gpu"])
    assert stop.value.code == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err
