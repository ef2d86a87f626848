"""Summaries computed from a finished fit, for fit.json and fit_rows.parquet.

One job: given the fitted law, its bootstrap refits and the rows, say what the fit
found — parameters at a bound or outside the start grid, 95% percentile intervals, the
model floor E + A/N^α at the table's sizes, each strategy's R* at the median cell (with
warnings where it is barely identified), and the per-row table of predictions, log
residuals, empirical η and regimes. cdlaw.fit.procedure calls these after the search; nothing
here optimises.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cdlaw import law as lawlib
from cdlaw.fit.findings import RANGE_COLUMNS, DataRange, ModelFloor, RStarAtMedian, RStarEstimate
from cdlaw.fit.problem import Problem
from cdlaw.fit.table import table_vocab_size
from cdlaw.strategies import NONE

RSTAR_SPREAD = 3.0  # an R* interval wider than this factor gets a warning


def params_at_bound(z, problem: Problem, span, names) -> list[str]:
    out = []
    width = problem.upper - problem.lower
    for j, name in enumerate(names):
        if width[j] == 0:  # a parameter the form takes from the table (LawForm.fixed)
            continue
        if z[j] <= problem.lower[j] + 1e-6 * width[j]:
            absent = name.rsplit(".", 1)[-1] in problem.form.vanishing
            out.append(
                f"{name} (at its floor: the term is absent)" if absent else f"{name} (lower bound)"
            )
        elif z[j] >= problem.upper[j] - 1e-6 * width[j]:
            out.append(f"{name} (upper bound)")
        elif np.isfinite(span[j, 0]) and not (span[j, 0] <= z[j] <= span[j, 1]):
            out.append(f"{name} (outside the start grid)")
    return out


def data_range(rows: pd.DataFrame) -> DataRange:
    """[min, max] of each coordinate a plan is checked against, over the fitted rows, and
    per strategy the derived ratios its own runs reached ([0, max]: the one-epoch runs
    anchor r = 0). A plan of 47 repetition epochs extrapolates R* when only paraphrase
    runs went past r = 7, whatever the table's largest r (cdlaw.plan.guard)."""
    bounds = {c: (float(rows[c].min()), float(rows[c].max())) for c in RANGE_COLUMNS}
    derived = rows[rows["derived_tokens"] > 0]
    per = {
        str(strategy): DataRange(derived_ratio=(0.0, float(group["derived_ratio"].max())))
        for strategy, group in derived.groupby("strategy")
    }
    return DataRange(**bounds, strategies=per, vocab_size=table_vocab_size(rows))


def percentile_intervals(names, boot) -> dict[str, list[float]]:
    if len(boot) == 0:
        return {}
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    return {n: [float(a), float(b)] for n, a, b in zip(names, lo, hi, strict=True)}


def model_floor_at_sizes(fitted, boot_laws, sizes) -> ModelFloor:
    """E + A/N^α at each model size of the table, with its bootstrap interval."""
    ci95 = None
    if boot_laws:
        b = np.array([bl.loss_model_floor(sizes) for bl in boot_laws])
        ci95 = tuple((lo, hi) for lo, hi in np.percentile(b, [2.5, 97.5], axis=0).T.tolist())
    return ModelFloor(tuple(sizes.tolist()), tuple(fitted.loss_model_floor(sizes).tolist()), ci95)


def rstar_at_median(fitted, boot_laws, rows, strategies, warnings) -> RStarAtMedian | None:
    """R* per strategy at the table's median cell (median N, median tokens per param),
    with a warning where it is barely identified; None for a form without R*."""
    if fitted.form_decl.rstar is None or not strategies:  # a form without R*
        return None
    n_med = float(np.exp(np.median(np.log(np.unique(rows["n_params"])))))
    tpp = float(np.exp(np.median(np.log(np.unique(rows["tokens_per_param"])))))
    per = {}
    for s in strategies:
        value = float(fitted.rstar(n_med, n_med * tpp, s))
        ci95 = None
        if boot_laws:
            b = [float(bl.rstar(n_med, n_med * tpp, s)) for bl in boot_laws]
            lo, hi = np.percentile(b, [2.5, 97.5]).tolist()
            ci95 = (lo, hi)
        per[s] = RStarEstimate(value, ci95)
        d = rows[(rows["strategy"] == s) & (rows["derived_tokens"] > 0)]
        R = fitted.rstar(d["n_params"].to_numpy(), d["fresh_tokens"].to_numpy(), s)
        r_max = d["derived_ratio"].max()
        if not np.any(d["derived_ratio"].to_numpy() >= 0.5 * R) or r_max < 0.5 * value:
            warnings.append(
                f"{s}: the runs' derived_ratio (at most {r_max:.3g}) stays well below R* "
                f"({value:.3g} at the median cell), so R* is barely identified; see its "
                "bootstrap interval, and add runs with larger r"
            )
        elif ci95 is not None and ci95[1] > RSTAR_SPREAD * ci95[0]:
            lo, hi = ci95
            warnings.append(
                f"{s}: R* at the median cell is poorly identified (95% interval {lo:.3g} to "
                f"{hi:.3g})"
            )
    return RStarAtMedian(n_med, n_med * tpp, per)


def predict_rows(law, rows: pd.DataFrame, naive: bool = False) -> np.ndarray:
    """The law's loss for each row of a runs table (n_params, fresh_tokens, derived_tokens,
    strategy): a strategy the law has no parameters for is scored as D′ = 0; `naive`
    counts derived tokens as fresh (how a naive Chinchilla fit reads them)."""
    N, D, Dp = (rows[c].to_numpy(float) for c in ("n_params", "fresh_tokens", "derived_tokens"))
    if naive:
        return np.asarray(law.loss(N, D + Dp, 0.0, NONE), dtype=float)
    strategy = rows["strategy"].to_numpy(object)
    predicted = np.empty(len(rows))
    for s in np.unique(strategy):
        m = strategy == s
        predicted[m] = law.loss(N[m], D[m], Dp[m], s if law.knows_strategy(s) else NONE)
    return predicted


def rows_table(cells, fitted, naive, used, heldout) -> pd.DataFrame:
    """fit_rows.parquet: the inputs with prediction, residual, empirical η and regime."""
    from cdlaw.regimes import classify

    N, D, Dp, loss = (
        cells[c].to_numpy(float) for c in ("n_params", "fresh_tokens", "derived_tokens", "loss")
    )
    strategy = cells["strategy"].to_numpy(object)
    predicted = predict_rows(fitted, cells, naive)
    regimes = classify(
        fitted,
        N,
        D,
        Dp,
        [s if fitted.knows_strategy(s) else NONE for s in strategy],
        loss=loss,
    )
    first = [
        "row_id",
        "n_params",
        "fresh_tokens",
        "derived_tokens",
        "strategy",
        "loss",
        "derived_ratio",
        "tokens_per_param",
    ]
    out = cells[first].copy()
    out["predicted_loss"] = predicted
    out["residual_log"] = np.log(loss) - np.log(predicted)
    out["empirical_eta"] = lawlib.empirical_eta(fitted, N, D, Dp, loss)
    out["regime"] = regimes.regime.astype(str)
    out["loss_one_epoch"] = regimes.loss_one_epoch
    out["loss_data_floor"] = regimes.loss_data_floor
    out["loss_model_floor"] = regimes.loss_model_floor
    out["derived_gain_share"] = regimes.derived_gain_share
    out["used"] = np.asarray(used, bool)
    out["heldout"] = np.asarray(heldout, bool)
    rest = [c for c in cells.columns if c not in out.columns]
    return pd.concat([out, cells[rest]], axis=1).reset_index(drop=True)
