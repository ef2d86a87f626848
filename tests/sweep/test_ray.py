"""The Ray executor against a local Ray instance this test starts: one task per run."""

import json
import os

import pandas as pd
import pytest
import torch

from cdlaw.config import ExecConfig
from cdlaw.sweep.options import SweepOptions
from cdlaw.sweep.runner import run_sweep

ray = pytest.importorskip("ray")
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_executor_runs_each_run_as_a_task(local_ray, runs_root, write_sweep):
    root = runs_root  # the session's shared corpus cache
    paths = {name: write_sweep(root, name, sizes='"20K"') for name in ("on-ray", "here")}

    events = []
    outcome = run_sweep(
        paths["on-ray"],
        root,
        SweepOptions(executor="ray", exec_cfg=ExecConfig(device="cpu", threads=1)),
        on_event=events.append,
    )
    assert outcome.exit_code == 0 and outcome.executor == "ray"
    assert outcome.jobs == 2 and outcome.threads == 1  # 2 CPUs, one per task
    assert set(outcome.statuses.values()) == {"done"} and len(outcome.trained) == 3
    sweep_dir = root / "on-ray"
    for run_id in outcome.trained:
        (attempt,) = json.loads((sweep_dir / run_id / "attempts.json").read_text())
        assert attempt["pid"] != os.getpid()  # trained in a Ray worker, not here
        assert attempt["exec"]["threads"] == 1 and attempt["exec"]["device"] == "cpu"
    kinds = {type(e).__name__ for e in events}
    assert {"SweepPlanned", "RunStarted", "RunProgress", "RunEnded"} <= kinds  # from workers

    # The same runs trained here give the same losses (deterministic on CPU).
    run_sweep(
        paths["here"], root, SweepOptions(jobs=1, exec_cfg=ExecConfig(device="cpu", threads=1))
    )
    key = ["strategy", "fresh_tokens", "derived_tokens"]
    ours = pd.read_parquet(sweep_dir / "summary.parquet").set_index(key).loss
    local = pd.read_parquet(root / "here" / "summary.parquet").set_index(key).loss
    pd.testing.assert_series_equal(ours.sort_index(), local.sort_index())

    # Resuming on Ray trains nothing.
    again = run_sweep(
        paths["on-ray"], root, SweepOptions(executor="ray", exec_cfg=ExecConfig(device="cpu"))
    )
    assert again.trained == [] and again.exit_code == 0


@pytest.mark.slow
def test_ray_runs_branches_from_their_trunks_forks(local_ray, runs_root):
    from runhelpers import result_losses, write_shared_sweep

    out = runs_root / "share-ray"
    cpu = ExecConfig(device="cpu", threads=1)
    outcome = run_sweep(
        write_shared_sweep(out, "share"), out, SweepOptions(executor="ray", exec_cfg=cpu)
    )
    assert set(outcome.statuses.values()) == {"done"}
    forest = outcome.plan.forest
    assert forest.forks
    for rid, fork in forest.forks.items():
        row = json.loads((out / "share" / rid / "result.json").read_text())
        assert (row["fork_parent"], row["fork_step"]) == (fork.parent, fork.step)
    alone = runs_root / "share-ray-alone"
    run_sweep(
        write_shared_sweep(alone, "share", share=False), alone, SweepOptions(jobs=1, exec_cfg=cpu)
    )
    assert result_losses(out / "share") == result_losses(alone / "share")


@pytest.mark.slow
def test_ray_trains_packs_as_tasks_with_the_same_numbers(local_ray, runs_root, monkeypatch):
    from runhelpers import result_losses, write_shared_sweep

    from cdlaw.sweep.pack import size as pack_size

    # Packs are sized on a Ray worker, by its memory: the driver's (1 MiB here, too little
    # for a pack of 4) is not consulted.
    monkeypatch.setattr(pack_size, "available_bytes", lambda device: 2**20)
    cpu = ExecConfig(device="cpu", threads=1)
    out = runs_root / "packs-ray"
    outcome = run_sweep(
        write_shared_sweep(out, "share", share=False),
        out,
        SweepOptions(executor="ray", exec_cfg=cpu, pack=4),
    )
    assert outcome.exit_code == 0 and outcome.packs == {"20K": 4}
    attempts = [
        json.loads(p.read_text())[0] for p in sorted((out / "share").glob("*/attempts.json"))
    ]
    assert all(a["pid"] != os.getpid() for a in attempts)  # trained in Ray workers
    together = [
        (a, b)
        for i, a in enumerate(attempts)
        for b in attempts[i + 1 :]
        if a["pid"] == b["pid"] and abs(a["time"] - b["time"]) < 1.0
    ]
    assert together  # some runs started together in one task: a pack
    alone = runs_root / "packs-ray-alone"
    run_sweep(
        write_shared_sweep(alone, "share", share=False), alone, SweepOptions(jobs=1, exec_cfg=cpu)
    )
    assert result_losses(out / "share") == result_losses(alone / "share")


def test_ray_refuses_a_pack_too_big_for_a_workers_memory_before_writing(local_ray, tmp_path):
    from runhelpers import write_shared_sweep

    from cdlaw.system.errors import BadInput

    out = tmp_path / "runs"
    path = write_shared_sweep(out, "huge", share=False)
    with pytest.raises(BadInput, match=r"^--pack 100000: a pack of 100000 runs .*--pack auto$"):
        run_sweep(
            path, out, SweepOptions(executor="ray", exec_cfg=ExecConfig(device="cpu"), pack=100_000)
        )
    assert not out.exists()


@pytest.mark.slow
def test_a_ray_sweep_tokenises_its_real_corpus_as_ray_tasks(local_ray, tmp_path, monkeypatch):
    from prepare_corpora import digests, world_texts

    from cdlaw.data.files import block_tokens
    from cdlaw.data.tokens.prepare import prepare_corpus
    from cdlaw.sweep.spec import load_sweep

    corpus = tmp_path / "corpus.jsonl"
    texts = world_texts(600)
    corpus.write_text(
        "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts))
    )
    sweep_file = tmp_path / "real.toml"
    sweep_file.write_text(
        f'name = "real"\n[grid]\nsize = ["20K"]\nfresh_tokens = [2048]\nstrategy = ["repetition"]\n'
        f'derived_ratio = [0]\n[data]\ncorpus = "{corpus}"\nvocab_size = 512\nval_tokens = 2048\n'
        "[model]\nseq_len = 32\n[train]\nbatch_size = 8\n"
    )
    on_ray = []
    real = block_tokens._on_ray
    monkeypatch.setattr(
        block_tokens, "_on_ray", lambda jobs, *a: on_ray.append(len(jobs)) or real(jobs, *a)
    )
    options = SweepOptions(executor="ray", exec_cfg=ExecConfig(device="cpu", threads=1))
    assert run_sweep(sweep_file, tmp_path / "runs", options).exit_code == 0
    assert on_ray and on_ray[0] >= 1  # the blocks went to Ray tasks

    # ... and the cache is the one a preparation here writes
    here = tmp_path / "here"
    prepare_corpus(load_sweep(sweep_file).data, here, 2048, workers=block_tokens.Workers(count=1))
    assert digests(here / "data") == digests(tmp_path / "runs" / ".cache" / "data")
