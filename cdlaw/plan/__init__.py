"""Planning a budget with a law: where the law comes from (source), the optimum over N and
strategy (planner), what a plan reports (result: Plan, Allocation, Frontier), checks on a
plan (checks) and its memory and GPU cost (memory).
"""
