"""Downstream tasks in a pack: each packed run scores its tasks exactly as the run alone,
at the same steps, with the same numbers (fp32 on CPU: bit for bit)."""

from dataclasses import replace

import pandas as pd
import torch
from minitasks import mini_tasks
from tinyrun import SEQ, TRAIN_TOKENS, VAL_TOKENS, make_cfg

from cdlaw.config import EvalConfig, ExecConfig
from cdlaw.data.tokens.streams import array_stream
from cdlaw.train.loop import train_run
from cdlaw.train.packed_loop import PackedRun, train_pack

torch.set_num_threads(1)
EX = ExecConfig(device="cpu", threads=1)


def test_packed_runs_score_tasks_as_runs_alone(tmp_path):
    tasks = mini_tasks(SEQ, n_quiz=4)
    every = EvalConfig(every=10)
    cfgs = [  # two lengths, lrs and seeds; tasks every 10 steps and at each run's end
        replace(make_cfg(3_000, seed=0, eval_every=5, log_every=1), eval=every),
        replace(make_cfg(2_000, seed=1, eval_every=5, log_every=1, lr=3e-3), eval=every),
    ]
    streams = [array_stream(TRAIN_TOKENS[: c.tokens_trained]) for c in cfgs]
    alone = [
        train_run(c, tmp_path / "alone" / c.run_id, s, VAL_TOKENS, EX, tasks=tasks)
        for c, s in zip(cfgs, streams, strict=True)
    ]
    pack = [
        PackedRun(c, tmp_path / "pack" / c.run_id, s, VAL_TOKENS, tasks=tasks)
        for c, s in zip(cfgs, streams, strict=True)
    ]
    packed = train_pack(pack, EX)
    for c, a in zip(cfgs, alone, strict=True):
        p = packed[c.run_id]
        m_alone = pd.read_parquet(tmp_path / "alone" / c.run_id / "metrics.parquet")
        m_pack = pd.read_parquet(tmp_path / "pack" / c.run_id / "metrics.parquet")
        pd.testing.assert_frame_equal(
            m_pack.drop(columns="elapsed_s"), m_alone.drop(columns="elapsed_s"), check_exact=True
        )
        scored = m_alone.loc[m_alone["task_mini_mc_acc"].notna(), "step"].tolist()
        assert scored == [s for s in (10, 20, 30) if s < m_alone["step"].max()] + [
            int(m_alone["step"].max())
        ]
        for col in [c for t in tasks for c in t.columns]:
            assert p[col] == a[col], col
