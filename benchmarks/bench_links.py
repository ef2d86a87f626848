"""The links' bootstrap refits: the scipy loop against the batched fit, on the same resamples.

    python benchmarks/bench_links.py RUNS_OR_TABLE [B]

For each task link of a runs folder (checkpoint rows included, as `cdlaw downstream` fits
them) or a table: the full fit, then B resamples of its points refitted by one
`fit_link` (scipy) per resample from the full fit, and by `refit_link` (one batched
Levenberg–Marquardt run), timed in one process. Prints per link the largest change of the
95% band of the metric over the runs' losses (a share of the metric's range) and how many
refits reached a lower or higher cost; then the totals (docs/results.md, "The links'
bootstrap, batched").
"""

import sys
import time

import numpy as np
import pandas as pd

from cdlaw.fit.checkpoints import with_checkpoints
from cdlaw.fit.link import FORM_OF_METRIC, LINK_FORMS, fit_link, refit_link
from cdlaw.fit.table import load_runs
from cdlaw.tasks.columns import parse_column


def main(path: str, boot: int) -> None:
    runs = with_checkpoints(path, load_runs(path, checkpoints=True))
    t_old = t_new = 0.0
    worst, n, lower, higher = (0.0, ""), 0, 0, 0
    for c in runs.columns:
        p = parse_column(str(c))
        if not p or p[1] not in FORM_OF_METRIC:
            continue
        v = pd.to_numeric(runs[c], errors="coerce").to_numpy(float)
        L = runs["loss"].to_numpy(float)
        m = np.isfinite(v) & np.isfinite(L)
        L, y = L[m], v[m]
        form = LINK_FORMS[FORM_OF_METRIC[p[1]]]
        if len(L) < len(form.params) + 2:
            continue
        pooled = fit_link(form, L, y)
        rng = np.random.default_rng(0)
        idx = [rng.integers(0, len(L), len(L)) for _ in range(boot)]
        t = time.perf_counter()
        old = np.array([fit_link(form, L[i], y[i], start=pooled.theta).theta for i in idx])
        t_old += time.perf_counter() - t
        t = time.perf_counter()
        w = np.array([np.bincount(i, minlength=len(L)) for i in idx], float)
        new = refit_link(form, L, y, w, pooled.theta)
        t_new += time.perf_counter() - t
        co = np.array(
            [np.sum(wi * (form.predict(th, L) - y) ** 2) for wi, th in zip(w, old, strict=True)]
        )
        cn = np.array(
            [np.sum(wi * (form.predict(th, L) - y) ** 2) for wi, th in zip(w, new, strict=True)]
        )
        lo_, hi_ = int((cn < co * (1 - 1e-6)).sum()), int((cn > co * (1 + 1e-6)).sum())
        lower, higher = lower + lo_, higher + hi_
        grid = np.linspace(L.min(), L.max(), 30)
        qo = np.percentile([form.predict(th, grid) for th in old], [2.5, 97.5], 0)
        qn = np.percentile([form.predict(th, grid) for th in new], [2.5, 97.5], 0)
        d = float(np.max(np.abs(qo - qn)) / max(np.ptp(y), 1e-12))
        n += 1
        worst = max(worst, (d, str(c)))
        print(
            f"  {c}: {len(L)} points, band change {d:.1e} of range, cost lower {lo_}, higher {hi_}"
        )
    print(
        f"{path}: {n} links x {boot} refits: scipy loop {t_old:.1f} s, batched {t_new:.1f} s; "
        f"refits with a lower cost {lower}, higher {higher} (rel. 1e-6); largest band change "
        f"{worst[0]:.1e} of the metric's range ({worst[1]})"
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100)
