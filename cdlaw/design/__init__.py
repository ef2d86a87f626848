"""Experiment design: which runs to train next so the plan for a budget is best known.

batch (`cdlaw next`), candidates (what may be run, its cost, its sweep file), targets (the
bootstrap ensemble's predictions), value (the Kalman update and the greedy choice),
adaptive (`cdlaw adapt`: seed grid, then fit → next → sweep in rounds).
"""
