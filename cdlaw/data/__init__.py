"""Corpora, tokenizer and the token streams a run trains on (SPEC §3, §11).

    from cdlaw.data import prepare_corpus, run_stream
    prepared = prepare_corpus(data_config, cache_dir, fresh_tokens, paraphrase_passes)
    stream = run_stream(prepared, strategy, fresh_tokens, derived_tokens, seq_len, seed)

The default corpus is generated here (world.py, render.py); real corpora are read through
`datasets` (sources.py); `cdlaw paraphrase` writes paraphrase files (paraphrase.py).
"""

from cdlaw.data.ordering import run_stream
from cdlaw.data.prepare import PreparedCorpus, corpus_key, prepare_corpus

__all__ = ["PreparedCorpus", "corpus_key", "prepare_corpus", "run_stream"]
