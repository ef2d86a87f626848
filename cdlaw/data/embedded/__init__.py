"""The embedded corpus, generated from a seed: its world (world.py, kinds.py, lexicon.py),
its documents as text and their paraphrases (render.py), and their tokens (corpus.py)."""
