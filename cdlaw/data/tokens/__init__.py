"""Tokens of a prepared corpus: the BPE (tokenizer.py), the cache and its preparation once per
sweep (cache.py, prepare.py), and each run's exact, ordered stream (ordering.py, streams.py)."""
