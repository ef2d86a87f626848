"""Corpora, tokenizer and the token streams a run trains on, in four sub-packages:

- `embedded/` — the default corpus, generated: a seeded world (world, kinds, lexicon), its
  documents as text (render), and their tokens (corpus).
- `files/` — real corpora read from files (sources, doc_store, long_lines, read_errors),
  tokenised in blocks (block_tokens, corpus).
- `tokens/` — the token cache (cache, prepare), the BPE (tokenizer), and each run's exact
  stream (ordering, streams).
- `derived/` — derived tokens written by a model (`cdlaw paraphrase`, `cdlaw distill`: generate,
  endpoint, prompts) and any strategy's derived files joined to the documents (joined).

`fingerprint.py` and `inputs.py` record what a run reads, by content. A run's stream:

    from cdlaw.data.tokens.prepare import prepare_corpus
    from cdlaw.data.tokens.ordering import run_stream
    prepared = prepare_corpus(data_config, cache_dir, fresh_tokens, paraphrase_passes)
    stream = run_stream(prepared, strategy, fresh_tokens, derived_tokens, seq_len, seed)
"""
