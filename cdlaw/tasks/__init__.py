"""Downstream tasks, in one place: each module sits at its stage of the pipeline
(tests/test_layout.py checks it), so the fit and the planner never import torch.

- columns.py, chance.py — the task columns' names and a task's chance level (any stage).
- files.py — the tasks a sweep's [eval] names: built in or from files, checked, tokenised.
- scoring.py — a model's bits per byte and accuracy on them (torch); lm_eval.py — the
  lm-evaluation-harness on a run's model/ folder.
- links.py — the link from validation loss to each task's metric, fitted (`cdlaw downstream`);
  downstream_json.py — those links as typed objects, read and written as downstream.json.
- plan_metrics.py — the task metrics a plan or `cdlaw predict` reports through the links.
"""
