"""Compute is counted the same everywhere: C = 6·N·(D + D′), derived tokens included."""

import pytest

from cdlaw.config import ModelConfig, RunConfig
from cdlaw.shapes import count_params
from cdlaw.train.result import result_row, run_facts


@pytest.mark.parametrize("strategy", ["repetition", "paraphrase"])
def test_run_facts_count_every_token_trained(strategy):
    cfg = RunConfig(
        sweep="t",
        strategy=strategy,
        fresh_tokens=4096,
        derived_tokens=3 * 4096,
        model=ModelConfig(size="20K"),
    )
    facts = run_facts(cfg)
    n = count_params(cfg.model).n_params
    assert facts["n_params"] == n and facts["derived_tokens"] == 3 * 4096 > 0
    assert facts["tokens_trained"] == 4096 + 3 * 4096 == cfg.tokens_trained
    assert facts["flops"] == 6 * n * facts["tokens_trained"]
    if strategy == "repetition":
        assert facts["epochs"] == 4
    # the result row of the finished run counts the same FLOPs
    assert result_row(cfg, status="done")["flops"] == facts["flops"]
