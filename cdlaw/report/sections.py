"""The sections of the `cdlaw report` page, each an HTML fragment made from a Report.

Sweep settings (sweep.toml), the run table, the fit with its 95% intervals, the regime of
every run with L_1ep, L_D, L_N and the thresholds, the plan for the default budget, and the
figures (base64 PNG, each with a caption, or why it was not drawn). cdlaw.report.page puts
them on one page.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from cdlaw.figures.inputs import PlotInputs
from cdlaw.figures.plot import KINDS
from cdlaw.regimes import SATURATION, TOLERANCE, classify
from cdlaw.report.gather import BUDGET_MULTIPLE, Report
from cdlaw.report.tables import format_cell, html_table
from cdlaw.units import format_number

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


def settings_section(runs_dir: Path) -> str:
    sweep = runs_dir / "sweep.toml"
    if sweep.exists():
        return f"<pre>{html.escape(sweep.read_text())}</pre>"
    return f'<p class="note">No sweep.toml in {html.escape(str(runs_dir))}.</p>'


def runs_section(inputs: PlotInputs) -> str:
    df = inputs.summary
    if df is None or not len(df):
        return '<p class="note">No finished runs yet (no summary.parquet or result.json).</p>'
    df = df.sort_values(
        [c for c in ("n_params", "fresh_tokens", "strategy", "derived_tokens") if c in df.columns]
    )
    cols = [c for c in RUN_COLUMNS if c in df.columns]
    rows = [[format_cell(r[c], c) for c in cols] for r in df.to_dict("records")]
    status = df["status"].value_counts().to_dict() if "status" in df.columns else {}
    counts = ", ".join(f"{n} {s}" for s, n in status.items()) or f"{len(df)} runs"
    left = {i for i, c in enumerate(cols) if c in ("run_id", "strategy", "status", "device")}
    return f"<p>{len(df)} runs ({html.escape(counts)}).</p>" + html_table(cols, rows, left)


def _ci(fit: dict, key: str) -> tuple[str, str]:
    ci = (fit.get("ci95") or {}).get(key)
    if not ci:
        return "—", "—"
    return format_cell(ci[0]), format_cell(ci[1])


def _holdout_beside(runs_dir: Path) -> dict:
    """The held-out check of a separate `cdlaw fit --holdout-largest --out fit_holdout.json`
    (what `make demo` writes), when fit.json itself was fitted on every size."""
    try:
        return json.loads((Path(runs_dir) / "fit_holdout.json").read_text()).get("holdout") or {}
    except (OSError, ValueError, AttributeError):
        return {}


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
    holdout = fit.get("holdout") or _holdout_beside(report.runs_dir)
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
            f"{format_cell(noise['sd_log'])} between replicate seeds ({noise['n_runs']} runs in "
            f"{noise['n_groups']} cells): the floor under rmse_log"
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
    ids = rows["run_id"] if "run_id" in rows.columns else rows["row_id"]
    for i, (rid, rec) in enumerate(zip(ids, rows.to_dict("records"), strict=True)):
        body.append(
            [
                rid,
                rec["strategy"],
                format_number(rec["n_params"]),
                format_number(rec["fresh_tokens"]),
                format_number(rec["derived_tokens"]) if rec["derived_tokens"] else "0",
                format_cell(rec["loss"]),
                seen.regime[i],
                format_cell(pred.loss[i]),
                pred.regime[i],
                format_cell(seen.loss_one_epoch[i]),
                format_cell(seen.loss_data_floor[i]),
                format_cell(seen.loss_model_floor[i]),
                format_cell(seen.derived_gain_share[i]),
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
        + f"<p>By observed loss: {counts}.</p>"
        + html_table(head, body, {0, 1, 6, 8}, classes)
    )


def plan_section(report: Report) -> str:
    e = html.escape
    why = (
        f"Budget C = {report.budget_flops:.3g} FLOPs and U = "
        f"{format_number(report.unique_tokens)} unique tokens"
        if report.budget_flops and report.unique_tokens
        else "No budget"
    )
    choice = (
        f"<p class='note'>{e(why)}. Defaults: {BUDGET_MULTIPLE:g}× the compute of the sweep's "
        "largest run, 6·N·(D + D′), and the sweep's largest fresh-token count (the corpus it "
        "could use); choose others with <code>cdlaw report RUNS --budget-flops C "
        "--unique-tokens U</code> or plan any budget with <code>cdlaw plan</code>.</p>"
    )
    p = report.plan
    if p is None:
        return choice + f'<p class="note">{e(report.plan_note)}</p>'
    head = [
        "plan",
        "strategy",
        "N",
        "D",
        "D′",
        "epochs",
        "paraphrase passes",
        "predicted loss",
        "loss above the CD plan",
    ]
    body = []
    for name, a in (
        ("CD law", p),
        ("naive Chinchilla", p["naive"]),
        ("four-epoch rule", p["four_epoch"]),
    ):
        body.append(
            [
                name,
                a.get("strategy", "—"),
                format_number(a["n_params"]),
                format_number(a["fresh_tokens"]),
                format_number(a["derived_tokens"]) if a["derived_tokens"] else "0",
                format_cell(a.get("epochs")),
                format_cell(a.get("paraphrase_passes")),
                format_cell(a["predicted_loss"]),
                format_cell(a.get("loss_gap", 0.0)) if name != "CD law" else "—",
            ]
        )
    ci = p.get("predicted_loss_ci95")
    lines = [
        f"predicted loss {format_cell(p['predicted_loss'])} nats/token"
        + (f" (95% band {format_cell(ci[0])} to {format_cell(ci[1])})" if ci else ""),
        f"regime <b>{e(str(p['regime']))}</b>: L_1ep {format_cell(p['loss_one_epoch'])}, "
        f"L_D {format_cell(p['loss_data_floor'])}, L_N {format_cell(p['loss_model_floor'])}; "
        f"saturation {p.get('saturation', SATURATION)}, tolerance {p.get('tolerance', TOLERANCE)} nats",
        f"marginal gain {format_cell(p.get('marginal_gain_per_flop'))} nats per FLOP "
        f"({format_cell(p.get('marginal_gain_per_doubling'))} nats per doubling of the budget)",
    ]
    warn = "".join(f'<p class="warn">warning: {e(str(w))}</p>' for w in p.get("warnings") or [])
    return (
        choice
        + html_table(head, body, {0, 1})
        + "<ul>"
        + "".join(f"<li>{line}</li>" for line in lines)
        + "</ul>"
        + warn
    )


FIGURE_TEXT = {
    "loss": "Loss against tokens trained per (N, D), with the fitted curves and the "
    "compute-, data- and model-bound bands.",
    "eta": "Empirical η (worth of a derived token) against r = D′/D, with the fitted η(r).",
    "rstar": "R* over model size and D/N, and where paraphrasing beats repetition.",
    "frontier": "The best plan over a range of budgets, against the naive Chinchilla and "
    "four-epoch plans.",
    "residuals": "Predicted against observed loss; held-out runs ringed.",
    "curves": "Validation loss during training, one line per run.",
    "compare": "Every law fitted without each model size, predicting it (`cdlaw compare`); "
    "the largest size, an extrapolation, ranks the laws.",
}


def figures_section(report: Report) -> str:
    e = html.escape
    out = []
    for kind in KINDS:
        if kind in report.figures:
            out.append(
                f'<figure id="fig-{kind}"><img alt="{kind} figure" '
                f'src="data:image/png;base64,{report.figures[kind]}">'
                f"<figcaption><b>{kind}</b>: {e(FIGURE_TEXT[kind])}</figcaption></figure>"
            )
        else:
            out.append(f'<p class="note"><b>{kind}</b>: not drawn: {e(report.skipped[kind])}.</p>')
    return "".join(out)
