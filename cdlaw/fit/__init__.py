"""Fitting a law to a table of runs: reading tables (table), checks before fitting (checks),
the many-start optimiser (optim), the procedure (procedure), summaries of a finished fit
(summary) and fit.json / fit_rows.parquet (io). Pure numpy, scipy and pandas.
"""
