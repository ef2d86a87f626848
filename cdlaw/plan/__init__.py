"""Planning a budget with a law: where the law comes from (source), the optimum over N and
strategy (planner), what a plan reports (result: Plan, Allocation, Frontier), checks on a
plan (checks: the bands), where it leaves the fitted range (guard: the one guard), the
budgets a law supports (support) and its
memory and GPU cost (memory).
"""

# How far beyond the range its law was fitted on a plan may go before `cdlaw plan` refuses
# it without --extrapolate: its N, or its fresh tokens per parameter D/N, above this many
# times the largest fitted value or below 1/this the smallest, or its derived ratio D′/D
# above this many times the largest of its strategy's runs (docs/plan.md). Kept here, in a
# module without imports, so that the command's --help can name it.
EXTRAPOLATION_LIMIT = 30.0
