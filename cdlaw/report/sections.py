"""The sections of the `cdlaw report` page below the answer, each an HTML fragment.

The figures (base64 PNG, each with a caption, or why it was not drawn), the fit with its
95% intervals, the regime of every run with L_1ep, L_D, L_N and the thresholds, the run
table, and the sweep settings (sweep.toml). The answer at the top of the page (fit
headline, plan) is cdlaw.report.answer; cdlaw.report.page puts them on one page.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from cdlaw.figures.inputs import PlotInputs
from cdlaw.fit.findings import seed_noise_between
from cdlaw.regimes import SATURATION, TOLERANCE, classify
from cdlaw.report.answer import holdout_beside
from cdlaw.report.gather import Report
from cdlaw.report.tables import cell, format_cell, html_table
from cdlaw.strategies import NONE
from cdlaw.units import counted, format_number

RUN_COLUMNS = (
    "run_id",
    "strategy",
    "n_params",
    "fresh_tokens",
    "derived_tokens",
    "epochs",
    "tokens_per_param",
    "lr",
    "seed",
    "loss",
    "train_loss",
    "status",
    "flops",
    "wall_seconds",
    "tokens_per_second",
    "device",
)


def downstream_section(report: Report) -> str:
    """The task links: per task metric its link, fit against the seed noise and the
    collapse test, with the metric the plan predicts and what predicted it (an accuracy
    with predictors is predicted by its chosen one, which may not be this link: plan
    --link, `cdlaw predict`); then the figure."""
    e = html.escape
    result = report.inputs.downstream
    note = f'<p class="note">{e(report.downstream_note)}</p>'
    if result is None or not result.links:
        return note
    predicted = {t["column"]: t for t in (report.plan or {}).get("tasks") or []}
    head = ["task", "metric", "link", "runs", "RMSE", "seed sd", "F", "p", "strategies",
            "at the plan", "predicted by", "95% band"]  # fmt: skip
    body = []
    for lk in result.links:
        c, t = lk.collapse, predicted.get(lk.column) or {}
        band = t.get("ci95")
        body.append(
            [
                lk.task, lk.metric, lk.equation(), str(lk.n_runs), format_cell(lk.rmse),
                format_cell(lk.seed_sd), format_cell(c.f if c else None),
                format_cell(c.p_value if c else None),
                ("one curve" if c.collapses else "differ") if c else
                ("—" if lk.follows_loss else "no trend"),
                format_cell(t.get("value")),
                _predicted_by(t),
                f"{format_cell(band[0])} to {format_cell(band[1])}" if band else "—",
            ]
        )  # fmt: skip
    verdicts = "".join(
        f"<li><code>{e(lk.column)}</code>: {e(lk.verdict())}</li>" for lk in result.links
    )
    return (
        note
        + html_table(head, body, {0, 1, 2, 8, 10})
        + f"<ul>{verdicts}</ul>"
        + figures_section(report, ("downstream",))
    )


def _predicted_by(task: dict) -> str:
    """Which predictor gave the plan's value: a chosen predictor (cdlaw.fit.predictors)
    with its held-out error, and why the runs cannot support it where they cannot; or this
    row's link; "—" where the plan predicts none."""
    if not task:
        return "—"
    name = task.get("predictor")
    if not name:
        return "this link"
    err = task.get("heldout_error")
    said = f"{name} (held-out error {format_cell(err)})" if err is not None else str(name)
    if task.get("unsupported"):  # the runs rise by a few steps of the task's noise
        said += f"; the runs cannot support it: {task['unsupported']}"
    return said


def settings_section(sweep: Path) -> str:
    """The sweep file, verbatim (a page without one has no settings section)."""
    return f"<pre>{html.escape(sweep.read_text())}</pre>"


def runs_section(inputs: PlotInputs) -> str:
    df = inputs.summary
    if df is None or not len(df):
        return '<p class="note">No finished runs yet (no summary.parquet or result.json).</p>'
    df = df.sort_values(
        [c for c in ("n_params", "fresh_tokens", "strategy", "derived_tokens") if c in df.columns]
    )
    cols = [c for c in RUN_COLUMNS if c in df.columns]
    rows = [[cell(r[c], c) for c in cols] for r in df.to_dict("records")]
    status = df["status"].value_counts().to_dict() if "status" in df.columns else {}
    counts = ", ".join(f"{n} {s}" for s, n in status.items()) or counted(len(df), "run")
    left = {i for i, c in enumerate(cols) if c in ("run_id", "strategy", "status", "device")}
    return f"<p>{counted(len(df), 'run')} ({html.escape(counts)}).</p>" + html_table(
        cols, rows, left, sortable=True
    )


def _ci(fit: dict, key: str) -> tuple[str, str]:
    ci = (fit.get("ci95") or {}).get(key)
    if not ci:
        return "—", "—"
    return format_cell(ci[0]), format_cell(ci[1])


def fit_section(report: Report) -> str:
    fit, law = report.inputs.fit, report.inputs.law
    e = html.escape
    parts = [f'<p class="note">{e(report.fit_note)}</p>']
    if fit is None or law is None:
        return "".join(parts)
    rows = []
    for k, v in (fit.get("params") or {}).items():
        rows.append([k, format_cell(v), *_ci(fit, k)])
    for s, p in (fit.get("strategies") or {}).items():
        for k, v in p.items():
            rows.append([f"{s}.{k}", format_cell(v), *_ci(fit, f"{s}.{k}")])
    parts.append(html_table(["parameter", "value", "95% CI low", "95% CI high"], rows, {0}))
    holdout = fit.get("holdout") or holdout_beside(report.path)
    opt = fit.get("optimizer") or {}
    facts = [
        ("law", fit.get("law")),
        ("method", fit.get("method")),
        ("huber_delta", fit.get("huber_delta")),
        ("n_rows", fit.get("n_rows")),
        ("n_used", fit.get("n_used")),
        ("dropped", ", ".join(map(str, fit.get("dropped") or [])) or "none"),
        ("rmse_log", fit.get("rmse_log")),
        (
            "seed noise (log sd)",
            f"{format_cell(noise['sd_log'])} {seed_noise_between(noise)} "
            f"({counted(noise['n_runs'], 'run')} in {counted(noise['n_groups'], 'cell')}): "
            "the floor under rmse_log"
            if (noise := fit.get("seed_noise"))
            else "no replicate seeds",
        ),
        (
            "held out",
            f"N ≥ {format_number(holdout['n_params'])}, rmse_log {format_cell(holdout.get('rmse_log'))}"
            if holdout.get("n_params")
            else "none",
        ),
        (
            "optimizer",
            f"{'converged' if opt.get('success') else 'NOT converged'}: "
            f"{opt.get('message', '')}; at bound: {', '.join(opt.get('at_bound') or []) or 'none'}"
            if opt
            else "—",
        ),
        ("bootstrap samples", len(fit.get("bootstrap") or [])),
        ("source", fit.get("source")),
    ]
    parts.append(html_table(["", ""], [[k, format_cell(v)] for k, v in facts], {0, 1}))
    # E, A and α trade off; E + A/N^α is what the fit pins down (docs/fit.md).
    floor = fit.get("model_floor") or {}
    if not floor.get("n_params"):
        rng = (fit.get("data_range") or {}).get("n_params") or []
        sizes = sorted({float(x) for x in rng})
        floor = {"n_params": sizes, "loss": [float(law.loss_model_floor(n)) for n in sizes]}
    if floor.get("n_params"):
        cis = floor.get("ci95") or [None] * len(floor["n_params"])
        rows = [
            [format_number(n), format_cell(v), *(format_cell(c) for c in (ci or [None, None]))]
            for n, v, ci in zip(floor["n_params"], floor["loss"], cis, strict=True)
        ]
        parts.append(
            '<p class="note">E, A and α trade off against each other; what the runs pin '
            "down is E + A/N^α, the model floor L_N at the fitted sizes (nats/token):</p>"
            + html_table(["N", "E + A/N^α", "95% CI low", "95% CI high"], rows)
        )
    rstar = fit.get("rstar") or {}
    per = [(s, v) for s, v in rstar.items() if isinstance(v, dict) and "value" in v]
    if per:
        rows = [
            [s, format_cell(v["value"]), *(format_cell(c) for c in v.get("ci95") or [None, None])]
            for s, v in per
        ]
        parts.append(
            f'<p class="note">R* at the median cell (N = {format_number(rstar["n_params"])}, '
            f"D = {format_number(rstar['fresh_tokens'])}): passes over D that still pay off.</p>"
            + html_table(["strategy", "R*", "95% CI low", "95% CI high"], rows, {0})
        )
    for w in fit.get("warnings") or []:
        parts.append(f'<p class="warn">warning: {e(str(w))}</p>')
    return "".join(parts)


CELL_KEYS = ("n_params", "fresh_tokens", "derived_tokens")


def _cell_key(rec: dict) -> tuple:
    return (*(float(rec[k]) for k in CELL_KEYS), str(rec["strategy"]))


def run_labels(rows, summary, select: str = "mean") -> list[str]:
    """What names each fitted row: its run id; for a cell of several runs without one (a
    table without run ids, or `cdlaw fit --select mean`, whose run_id is empty) the ids of
    its runs, as the fit's `select` reduced them ("mean of 2", "best of 2"); else its row."""
    runs: dict[tuple, list[str]] = {}
    if summary is not None and {*CELL_KEYS, "strategy", "run_id"} <= set(summary.columns):
        done = (
            summary
            if "status" not in summary.columns
            else summary[summary["status"].fillna("done") == "done"]
        )
        for rec in done.to_dict("records"):
            rec["strategy"] = NONE if not rec["derived_tokens"] else rec["strategy"]
            runs.setdefault(_cell_key(rec), []).append(str(rec["run_id"]))
    out = []
    for rec in rows.to_dict("records"):
        rid = rec.get("run_id")
        if rid is not None and not (isinstance(rid, float) and math.isnan(rid)):
            out.append(str(rid))
            continue
        ids = runs.get(_cell_key(rec), [])
        n_in = rec.get("n_in_cell")  # absent from fits older than --select
        n = int(n_in) if n_in is not None and n_in == n_in else len(ids) or 1
        if n > 1:
            how = {"min": "best", "auto": "seeds averaged, best setting"}.get(select, "mean")
            out.append(f"{how} of {n}: {', '.join(ids)}" if len(ids) == n else f"{how} of {n} runs")
        else:
            out.append(ids[0] if len(ids) == 1 else f"row {rec.get('row_id')}")
    return out


def regimes_section(report: Report) -> str:
    inputs = report.inputs
    if inputs.law is None or inputs.rows is None or not len(inputs.rows):
        return '<p class="note">Regimes need a fit.</p>'
    rows = inputs.rows.sort_values(["n_params", "fresh_tokens", "strategy", "derived_tokens"])
    # a strategy the law has no parameters for: no regime
    rows = rows[rows["strategy"].map(inputs.law.knows_strategy).to_numpy(bool)]
    config = (rows["n_params"], rows["fresh_tokens"], rows["derived_tokens"])
    strategy = rows["strategy"].to_numpy(object)
    # The measured run placed in the bands by its observed loss (as `cdlaw fit` labels its
    # rows), and the configuration by the law's prediction (as `cdlaw plan` labels plans).
    seen = classify(inputs.law, *config, strategy, loss=rows["loss"].to_numpy(float))
    pred = classify(inputs.law, *config, strategy)
    head = [
        "run",
        "strategy",
        "N",
        "D",
        "D′",
        "observed loss",
        "regime (observed)",
        "predicted loss",
        "regime (predicted)",
        "L_1ep",
        "L_D",
        "L_N",
        "derived-gain share (observed)",
    ]
    body = []
    ids = run_labels(rows, inputs.summary, str((inputs.fit or {}).get("select") or "mean"))
    for i, (rid, rec) in enumerate(zip(ids, rows.to_dict("records"), strict=True)):
        body.append(
            [
                rid,
                rec["strategy"],
                cell(rec["n_params"], "n_params"),
                cell(rec["fresh_tokens"], "fresh_tokens"),
                cell(rec["derived_tokens"], "derived_tokens"),
                cell(rec["loss"]),
                seen.regime[i],
                cell(pred.loss[i]),
                pred.regime[i],
                cell(seen.loss_one_epoch[i]),
                cell(seen.loss_data_floor[i]),
                cell(seen.loss_model_floor[i]),
                cell(seen.derived_gain_share[i]),
            ]
        )
    intro = (
        "<p>Every run in the bands of the fitted law (docs/regimes.md), labelled by what would still "
        "lower its loss L: <b>compute-bound</b> while the share of the derived-token gain "
        "already realised, (L_1ep − L)/(L_1ep − L_D), is below the saturation threshold "
        f"<b>{SATURATION}</b>; <b>data-bound</b> when that gain is saturated but fresh data "
        f"would still gain more than the tolerance, <b>{TOLERANCE}</b> nats (L_D − L_N &gt; "
        "tolerance); <b>model-bound</b> otherwise. L_1ep: one epoch of D, no derived tokens; "
        "L_D: the data floor as D′ → ∞; L_N: the model floor E + A/N^α; all in nats/token. "
        "For runs without derived tokens L_D is the best strategy's floor. "
        "<i>Observed</i> places the run by its measured loss, <i>predicted</i> by the law's.</p>"
    )
    counts = ", ".join(
        f"{int((seen.regime == r).sum())} {r}"
        for r in ("compute-bound", "data-bound", "model-bound")
    )
    classes = [str(r) for r in seen.regime]
    return (
        intro
        + f"<p>By observed loss: {counts}.{_off_the_bands(seen.derived_gain_share)}</p>"
        + html_table(head, body, {0, 1, 6, 8}, classes, sortable=True)
    )


def _off_the_bands(share) -> str:
    """A note for observed shares outside [0, 1]: runs the law's bands do not hold."""
    below, above = int((share < 0).sum()), int((share > 1).sum())
    if not (above or below):
        return ""
    parts = []
    if below:
        parts.append(f"{below} below 0 (a loss above the law's L_1ep)")
    if above:
        parts.append(f"{above} above 1 (a loss below the law's L_D, which no D′ reaches)")
    return (
        f" Derived-gain shares outside [0, 1]: {' and '.join(parts)}; there the share "
        "measures the law's miss of the run (its residual, in the residuals figure), not a "
        "gain realised."
    )


FIGURE_TEXT = {
    "loss": "Loss against tokens trained with the fitted curves: per (N, D) in the "
    "compute-, data- and model-bound bands for a sweep with derived tokens, else one "
    "colour per model size.",
    "eta": "Empirical η (worth of a derived token) against r = D′/D, with the fitted η(r).",
    "rstar": "R* over model size and D/N, and where each strategy's derived tokens are worth most.",
    "frontier": "The best plan over a range of budgets, against the naive Chinchilla and "
    "four-epoch plans.",
    "residuals": "Predicted against observed loss; held-out runs ringed.",
    "curves": "Validation loss during training, one line per run.",
    "compare": "Every law fitted without each model size, predicting it (`cdlaw compare`); "
    "the largest size, an extrapolation, ranks the laws.",
    "downstream": "Each task's metric against validation loss, by strategy, with the pooled "
    "link and its 95% band; strategies on one curve buy the same task ability per nat.",
}


def figures_section(report: Report, kinds) -> str:
    """The figures of these kinds, each with its caption, or why it was not drawn."""
    e = html.escape
    out = []
    for kind in kinds:
        if kind in report.figures:
            out.append(
                f'<figure id="fig-{kind}"><img alt="{kind} figure" '
                f'src="data:image/png;base64,{report.figures[kind]}">'
                f"<figcaption><b>{kind}</b>: {e(FIGURE_TEXT[kind])}</figcaption></figure>"
            )
        else:
            out.append(f'<p class="note"><b>{kind}</b>: not drawn: {e(report.skipped[kind])}.</p>')
    return "".join(out)
