"""`cdlaw sweep --pack`: the scheduler packs runs of one shape, and a packed sweep is the same
sweep bit for bit (forks included, packs re-formed mid-run); bad --pack input; the dry run."""

import json
from pathlib import Path

import pandas as pd
import pytest
from runhelpers import cdlaw, result_losses
from runhelpers import write_shared_sweep as write

import cdlaw.sweep.pack.groups as packed_groups
import cdlaw.sweep.runner as runner
from cdlaw.cli.sweep_show import pack_line
from cdlaw.config import ExecConfig
from cdlaw.sweep.handoffs import Outcome, PackTask, RunTask
from cdlaw.sweep.locks import LOCK_NAME, RunLock
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.pack import size as pack_size
from cdlaw.sweep.pack.size import PackProbe, choose_packing, pick_size
from cdlaw.sweep.pack.worker import execute_pack
from cdlaw.sweep.runner import run_sweep
from cdlaw.sweep.selection import plan_sweep
from cdlaw.sweep.spec import load_sweep
from cdlaw.system.errors import BadInput


def curves(sweep_dir: Path) -> dict[str, pd.DataFrame]:
    """run_id -> metrics.parquet without wall-clock time."""
    return {
        p.parent.name: pd.read_parquet(p).drop(columns="elapsed_s")
        for p in sorted(Path(sweep_dir).glob("*/metrics.parquet"))
    }


def test_a_packed_sweep_equals_the_sweep_trained_alone_bit_for_bit(
    runs_root, share_alone, one_thread, monkeypatch
):
    # Packs hand their runs back every 0.3 s: packs are re-formed many times, branches join
    # once their trunk has saved the fork, and every run resumes from its checkpoint.
    monkeypatch.setattr(packed_groups, "PACK_PAUSE_S", 0.3)
    chosen = []  # the pack size is decided once a sweep

    def choose_once(runs, pack, *args):
        chosen.append(pack)
        return choose_packing(runs, pack, *args)

    monkeypatch.setattr(runner, "choose_packing", choose_once)
    out = runs_root / "pack-4"
    outcome = run_sweep(write(out, "share"), out, SweepOptions(exec_cfg=one_thread, pack=4))
    assert chosen == [4]
    packed = out / "share"
    alone = share_alone  # the same grid, every run alone and from step 0
    assert set(outcome.statuses.values()) == {"done"}
    assert outcome.packs == {"20K": 4}
    assert result_losses(packed) == result_losses(alone)  # fp32 on CPU: exactly equal
    mine, theirs = curves(packed), curves(alone)
    assert mine.keys() == theirs.keys()
    for rid in mine:
        pd.testing.assert_frame_equal(mine[rid], theirs[rid], check_exact=True)
    results = [json.loads(p.read_text()) for p in packed.glob("*/result.json")]
    assert sum(1 for r in results if r["fork_parent"]) == len(outcome.plan.forest.forks) > 0
    attempts = [len(json.loads(p.read_text())) for p in packed.glob("*/attempts.json")]
    assert max(attempts) > 1  # some pack was paused and re-formed
    assert not list(packed.glob("*/forks"))  # forks no pending run needs are deleted


def test_a_run_held_by_another_process_is_left_out_of_the_pack(runs_root, tmp_path, one_thread):
    path = write(tmp_path / "held", "held")
    plan = plan_sweep(load_sweep(path), runs_root / "pack-held")
    runs = [r for r in plan.runs if r.strategy == "none"][:2]
    tasks = [
        RunTask(r, plan.sweep_dir, plan.cache_dir, one_thread, retry_failed=False) for r in runs
    ]
    held = RunLock(plan.sweep_dir / runs[0].run_id / LOCK_NAME)
    assert held.acquire()
    try:
        outcomes = execute_pack(PackTask(tuple(tasks)))
    finally:
        held.release()
    assert [o.kind for o in outcomes] == [Outcome.LOCKED, Outcome.DONE]
    assert not (plan.sweep_dir / runs[0].run_id / "result.json").exists()
    assert json.loads((plan.sweep_dir / runs[1].run_id / "result.json").read_text())["loss"] > 0
    # done runs are skipped, not trained again
    assert [o.kind for o in execute_pack(PackTask(tuple(tasks[1:])))] == [Outcome.SKIPPED]


@pytest.mark.parametrize("value", ["0", "two"])
def test_pack_zero_or_not_a_size_is_refused_and_nothing_is_written(tmp_path, value):
    path = write(tmp_path / "bad", "bad")
    out = tmp_path / "runs"
    r = cdlaw("sweep", path, "--out", out, "--pack", value)
    assert r.returncode == 2, r.stderr
    assert "--pack" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


def test_a_pack_too_big_for_memory_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(pack_size, "available_bytes", lambda device: 10 * 2**20)  # 10 MiB
    path = write(tmp_path / "mem", "mem")
    out = tmp_path / "runs"
    with pytest.raises(BadInput, match=r"--pack 64: a pack of 64 runs .* GiB.*--pack \d+ or"):
        run_sweep(path, out, SweepOptions(pack=64, exec_cfg=ExecConfig(device="cpu", threads=1)))
    assert not out.exists()


def test_a_packs_memory_counts_one_chunk_of_logits_whatever_its_micro_batch():
    """olmo3_14M at seq 2048 and a 32K vocabulary: 4 or 32 rows a micro-batch hold one
    chunk of 2^24 logits at once (the loss goes in chunks), so a run's estimate grows
    with its rows by the layers' activations alone, and by no seq_len² attention scores
    (flash attention, on CPU as on GPU); a pack of k needs k runs' worth."""
    from dataclasses import replace

    from cdlaw.config import DataConfig, RunConfig, TrainConfig
    from cdlaw.shapes import count_params, named_shape

    model = named_shape("olmo3_14M").model_config(vocab_size=32768, seq_len=2048)
    four = RunConfig(
        sweep="mem", strategy="none", fresh_tokens=10**6, derived_tokens=0, model=model,
        data=DataConfig(vocab_size=32768), train=TrainConfig(batch_size=32, micro_batch_size=4),
    )  # fmt: skip
    many = replace(four, train=replace(four.train, micro_batch_size=32))
    per_token = model.n_layers * (14 * model.d_model + 4 * model.mlp_hidden) * 4
    assert pack_size.pack_bytes(many, 1) - pack_size.pack_bytes(four, 1) == 28 * 2048 * per_token
    assert pack_size.pack_bytes(four, 1) == (
        28 * count_params(model).n_params_total + 4 * 2048 * per_token + 8 * 2**24
    )
    assert pack_size.pack_bytes(four, 3) == 3 * pack_size.pack_bytes(four, 1)


def test_jobs_spread_over_gpus_size_their_packs_by_one_gpus_memory(tmp_path, monkeypatch):
    """Jobs go round-robin over the GPUs, so a pack shares its GPU only with the jobs on
    that GPU: four jobs on four GPUs each have a whole GPU, eight have half of one."""
    import torch

    from cdlaw.sweep.executors import packs_per_device
    from cdlaw.sweep.runner import _choose_packing

    assert [packs_per_device(j, g) for j, g in [(4, 4), (8, 4), (5, 4), (3, 0)]] == [1, 2, 2, 3]
    runs = load_sweep(write(tmp_path / "gpus", "gpus")).runs()
    one_gpu = int(1.5 * pack_size.pack_bytes(runs[0], 4) / pack_size.MEMORY_SHARE)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(pack_size, "available_bytes", lambda device: one_gpu)
    cuda = ExecConfig(device="cuda")
    packing, _ = _choose_packing(runs, 4, cuda, "cuda", 0, None)  # one job per GPU
    assert packing is not None and packing.size(runs[0]) == 4
    with pytest.raises(BadInput, match=r"each of 2 job\(s\) on this device"):
        _choose_packing(runs, 4, cuda, "cuda", 8, None)  # two jobs per GPU


def test_auto_takes_the_smallest_pack_within_ten_percent_of_the_best():
    probes = [PackProbe(10, k, 0.0, g) for k, g in [(1, 1.0), (2, 1.8), (4, 2.9), (8, 3.1)]]
    assert pick_size(probes) == 4  # 2.9 ≥ 0.9 × 3.1
    assert pick_size(probes[:2]) == 2
    flat = [PackProbe(10, k, 0.0, g) for k, g in [(1, 1.0), (2, 0.8), (4, 0.7)]]
    assert pick_size(flat) == 1  # no pack gains: every run alone


def test_auto_measures_each_shape_against_the_run_alone(tmp_path, runs_root):
    plan = plan_sweep(load_sweep(write(tmp_path / "auto", "auto")), runs_root / "pack-auto")
    runs = plan.runs[:3]
    packing, probes = choose_packing(runs, "auto", ExecConfig(device="cpu", threads=1), sharing=2)
    assert [p.k for p in probes] == [1, 2, 3]  # never more runs than the shape has
    assert probes[0].gain == 1.0 and all(p.seconds_per_step > 0 for p in probes)
    size = packing.size(runs[0]) if packing else 1
    assert size == pick_size(probes)


def test_the_dry_run_shows_the_packs_and_the_time_with_and_without_them(tmp_path):
    path = write(tmp_path / "dry", "dry")
    out = tmp_path / "runs"
    r = cdlaw("sweep", path, "--out", out, "--pack", "4", "--dry-run", "--json", "--jobs", "1")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["packs"] == {"20K": 4} and plan["pack_probes"] == []  # K given: not chosen
    # The estimate divides each run's time by the gain measured now (whichever way a busy
    # machine makes it go): with one job, packing saves serial × (gain − 1) seconds.
    gain = plan["pack_gains"]["20K"]
    saved = plan["wall_seconds_unpacked"] - plan["wall_seconds"]
    assert gain > 0 and saved == pytest.approx(plan["serial_seconds"] * (gain - 1), rel=1e-9)
    assert not (out / "dry").exists()
    line = pack_line({"20K": 4, "200K": 2}, {"20K": 3.14})
    assert line == "packs (most runs per pack): 20K ×4 (3.1× tokens/s measured), 200K ×2"
