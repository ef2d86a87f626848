"""Training one run: the OLMo 3 model (model), the training loop (loop) and its checkpoints.

Imports torch and transformers; nothing below the sweep stage imports this package.
"""
