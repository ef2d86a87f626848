"""Fitting a law to a table of runs: reading tables (table), checks before fitting (checks),
the fit as an optimisation problem (problem), its start grid (starts), the many-start
batched L-BFGS (optim), thread use (threads), the procedure (procedure), summaries of a
finished fit (summary) and fit.json / fit_rows.parquet (io). Pure numpy, scipy and pandas.
"""
