"""Derived tokens beyond repetition: text a model writes from each fresh document
(`cdlaw paraphrase`, `cdlaw distill`: generate.py, endpoint.py, prompts.py), and any
strategy's derived files joined to the training documents by id (joined.py)."""
