"""Training: the OLMo 3 model (model), the loop of one run alone (loop), the loop of many runs
of one shape trained at once (packed_loop, on packed_model), the parts both share
(run_parts) and the checkpoints.

Imports torch and transformers; nothing below the sweep stage imports this package.
"""
