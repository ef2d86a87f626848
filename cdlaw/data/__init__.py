"""Corpora, tokenizer and the token streams a run trains on.

    from cdlaw.data.prepare import prepare_corpus
    from cdlaw.data.ordering import run_stream
    prepared = prepare_corpus(data_config, cache_dir, fresh_tokens, paraphrase_passes)
    stream = run_stream(prepared, strategy, fresh_tokens, derived_tokens, seq_len, seed)

The default corpus is generated here (world.py, render.py); real corpora are read through
`datasets` (sources.py); prepare.py tokenises and caches them, ordering.py lays out the
token stream of one run (streams.py holds it); `cdlaw paraphrase` writes paraphrase files
(paraphrase.py).
"""
