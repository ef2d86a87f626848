"""One tiny run the training tests share: a 2-layer OLMo 3 on learnable Markov tokens."""

import numpy as np

from cdlaw.config import DataConfig, ModelConfig, RunConfig, TrainConfig

VOCAB, SEQ = 256, 32
MODEL = ModelConfig(d_model=32, n_layers=2, n_heads=2, mlp_hidden=96, vocab_size=VOCAB, seq_len=SEQ)
# 79 steps of 8·32 tokens (the last one partial: 20,001 = 78·256 + 33).
N_TOKENS = 20_001


def markov_tokens(n: int, seed: int) -> np.ndarray:
    """Learnable tokens (each depends on the one before), so the loss really falls."""
    table = np.random.default_rng(42).integers(0, VOCAB, (VOCAB, 4))  # one language …
    rng = np.random.default_rng(seed)  # … many texts
    out = np.empty(n, dtype=np.int64)
    out[0] = 0
    choice = rng.integers(0, 4, n)
    for i in range(1, n):
        out[i] = table[out[i - 1], choice[i]]
    return out


TRAIN_TOKENS = markov_tokens(N_TOKENS, 0)
VAL_TOKENS = markov_tokens(2_000, 1)


def make_cfg(n_tokens=N_TOKENS, seed=0, **train) -> RunConfig:
    defaults = dict(batch_size=8, eval_every=25, log_every=5, checkpoint_every=30, lr=1e-2)
    return RunConfig(
        sweep="test",
        strategy="none",
        fresh_tokens=n_tokens,
        derived_tokens=0,
        seed=seed,
        model=MODEL,
        data=DataConfig(vocab_size=VOCAB),
        train=TrainConfig(**{**defaults, **train}),
    )
