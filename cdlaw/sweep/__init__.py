"""Running a sweep: the sweep file (spec), its single values (values), the validated sweep
and its grid (grid), which runs it has (selection), the per-run lock (locks), one run
under its lock (worker), what goes out to a worker and comes back (handoffs), where runs
execute (executors), packs (pack), the scheduling loop (runner),
summary.parquet and run states (summary), and --dry-run.

Torch is imported only when a run trains (by the worker, through cdlaw.train).
"""
