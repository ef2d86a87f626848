"""Real corpora (txt, jsonl, parquet, hf:) read from files through `datasets` (sources.py),
held on disk by index (doc_store.py), and tokenised in blocks (block_tokens.py, corpus.py)."""
