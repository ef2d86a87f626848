"""`cdlaw report`: one self-contained HTML page for a sweep.

The page holds the sweep's settings (sweep.toml), the run table, the fit with its 95%
intervals, the regime of every run with L_1ep, L_D, L_N and the thresholds, the plan for
a default budget, and every figure `cdlaw plot` can draw, embedded as base64 PNG. It has
no script and loads nothing from the network, so it opens anywhere, offline.

Default plan (documented on the page): budget = 100× the compute of the sweep's largest
run (6·N·(D + D′)), the first budget a sweep is usually run to inform; unique tokens =
the largest fresh-token count of the sweep, the corpus it could actually use.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from cdlaw.errors import BadInput
from cdlaw.figures.inputs import PlotInputs, load_inputs, prepare_rows
from cdlaw.figures.plot import KINDS, make_figure, why_not
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.plan.planner import plan
from cdlaw.plan.source import load_law
from cdlaw.regimes import SATURATION, TOLERANCE, classify
from cdlaw.units import format_number

BUDGET_MULTIPLE = 100.0  # default plan budget, in units of the largest run's FLOPs
FIGURE_DPI = 110  # enough for a screen; keeps the page a few MB at most

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
COUNT_COLUMNS = {"n_params", "fresh_tokens", "derived_tokens", "flops"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#111}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:12px;margin:.6em 0}
th,td{border:1px solid #ddd;padding:2px 7px;text-align:right;white-space:nowrap}
th{background:#f2f2f2}td.l,th.l{text-align:left}
pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:12px}
.note{color:#444}.warn{color:#8a3b00}.scroll{overflow-x:auto}
figure{margin:1.4em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#444;font-size:12px}
.compute-bound{background:#e3f1fb}.data-bound{background:#fbf6c9}.model-bound{background:#e4e4e4}
"""


@dataclass
class Report:
    """What the page is built from (kept so tests and callers can inspect it)."""

    runs_dir: Path
    inputs: PlotInputs
    fit_note: str = ""  # how the fit was obtained, or why there is none
    plan: dict | None = None
    plan_note: str = ""
    budget_flops: float | None = None
    unique_tokens: float | None = None
    figures: dict[str, str] = field(default_factory=dict)  # kind -> base64 PNG
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why not drawn


# ---------------------------------------------------------------------------------------
# Gathering
# ---------------------------------------------------------------------------------------


def _fit_now(runs_dir: Path, inputs: PlotInputs) -> str:
    """No fit.json: fit in memory with cdlaw's defaults, and say how to save a fit."""
    how = f"create one with `cdlaw fit {runs_dir}`, then run `cdlaw report {runs_dir}` again"
    try:
        table = load_runs(runs_dir)
        result = fit_law(table, source=str(runs_dir))
    except BadInput as e:
        return f"No fit.json in {runs_dir}, and the runs cannot be fitted yet ({e}); {how}."
    fit = result.to_dict()
    inputs.fit = fit
    inputs.law = result.law
    inputs.rows = prepare_rows(result.rows, inputs.law, fit)
    return (
        f"No fit.json in {runs_dir}: this fit was made for the report with cdlaw's defaults "
        f"and not saved; {how.replace('create one', 'save it')}."
    )


def _default_budget(inputs: PlotInputs) -> tuple[float | None, float | None]:
    """100× the largest run's 6·N·(D + D′), and the largest fresh-token count."""
    rows = inputs.rows if inputs.rows is not None else inputs.summary
    if rows is None or not len(rows):
        return None, None
    n = rows["n_params"].to_numpy(float)
    trained = rows["fresh_tokens"].to_numpy(float) + rows["derived_tokens"].to_numpy(float)
    return BUDGET_MULTIPLE * float(np.nanmax(6 * n * trained)), float(
        np.nanmax(rows["fresh_tokens"].to_numpy(float))
    )


def _plan(runs_dir: Path, report: Report) -> None:
    inputs = report.inputs
    if inputs.law is None:
        report.plan_note = "No plan without a fit."
        return
    if report.budget_flops is None or report.unique_tokens is None:
        report.plan_note = "No plan: the sweep has no finished runs to size a budget from."
        return
    fit_path = runs_dir / "fit.json"
    # The planner reads the fit.json itself when there is one, for the bootstrap 95% band.
    law = load_law(str(fit_path)) if fit_path.exists() else inputs.law
    try:
        report.plan = plan(law, report.budget_flops, report.unique_tokens).to_dict()
    except BadInput as e:
        report.plan_note = f"No plan: {e}"


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def gather(
    runs_dir: str | Path,
    budget_flops: float | None = None,
    unique_tokens: float | None = None,
) -> Report:
    """Read the runs folder, fit if needed, plan, and draw every figure it allows."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise BadInput(f"{runs_dir} is not a folder; pass a runs folder written by `cdlaw sweep`")
    for value, what in ((budget_flops, "--budget-flops"), (unique_tokens, "--unique-tokens")):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise BadInput(f"{what} must be a positive number like 1e21 or 5e9, not {value:g}")
    inputs = load_inputs(runs_dir)
    report = Report(runs_dir, inputs)
    if inputs.fit is None:
        report.fit_note = _fit_now(runs_dir, inputs)
    else:
        report.fit_note = f"From {runs_dir / 'fit.json'}."
    default_budget, default_unique = _default_budget(inputs)
    report.budget_flops = budget_flops or default_budget
    report.unique_tokens = unique_tokens or default_unique
    _plan(runs_dir, report)
    for kind in KINDS:
        reason = why_not(kind, inputs)
        if reason is not None:
            report.skipped[kind] = reason
            continue
        report.figures[kind] = _png(make_figure(kind, inputs))
    return report


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


def _fmt(value, column: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            return "—"
        if column in COUNT_COLUMNS:
            return format_number(v, 3)
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.4g}"
    return str(value)


def _table(headers: list[str], rows: list[list], left: set[int] = frozenset(), cls=None) -> str:
    e = html.escape
    head = "".join(
        f'<th class="{"l" if i in left else ""}">{e(h)}</th>' for i, h in enumerate(headers)
    )
    body = []
    for j, r in enumerate(rows):
        row_cls = f' class="{e(cls[j])}"' if cls and cls[j] else ""
        cells = "".join(
            f'<td class="{"l" if i in left else ""}">{e(str(c))}</td>' for i, c in enumerate(r)
        )
        body.append(f"<tr{row_cls}>{cells}</tr>")
    head = f"<tr>{head}</tr>" if any(headers) else ""
    return f'<div class="scroll"><table>{head}{"".join(body)}</table></div>'


def _section_settings(runs_dir: Path) -> str:
    sweep = runs_dir / "sweep.toml"
    if sweep.exists():
        return f"<pre>{html.escape(sweep.read_text())}</pre>"
    return f'<p class="note">No sweep.toml in {html.escape(str(runs_dir))}.</p>'


def _section_runs(inputs: PlotInputs) -> str:
    df = inputs.summary
    if df is None or not len(df):
        return '<p class="note">No finished runs yet (no summary.parquet or result.json).</p>'
    df = df.sort_values(
        [c for c in ("n_params", "fresh_tokens", "strategy", "derived_tokens") if c in df.columns]
    )
    cols = [c for c in RUN_COLUMNS if c in df.columns]
    rows = [[_fmt(r[c], c) for c in cols] for r in df.to_dict("records")]
    status = df["status"].value_counts().to_dict() if "status" in df.columns else {}
    counts = ", ".join(f"{n} {s}" for s, n in status.items()) or f"{len(df)} runs"
    left = {i for i, c in enumerate(cols) if c in ("run_id", "strategy", "status", "device")}
    return f"<p>{len(df)} runs ({html.escape(counts)}).</p>" + _table(cols, rows, left)


def _ci(fit: dict, key: str) -> tuple[str, str]:
    ci = (fit.get("ci95") or {}).get(key)
    if not ci:
        return "—", "—"
    return _fmt(ci[0]), _fmt(ci[1])


def _holdout_beside(runs_dir: Path) -> dict:
    """The held-out check of a separate `cdlaw fit --holdout-largest --out fit_holdout.json`
    (what `make demo` writes), when fit.json itself was fitted on every size."""
    try:
        return json.loads((Path(runs_dir) / "fit_holdout.json").read_text()).get("holdout") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def _section_fit(report: Report) -> str:
    fit, law = report.inputs.fit, report.inputs.law
    e = html.escape
    parts = [f'<p class="note">{e(report.fit_note)}</p>']
    if fit is None or law is None:
        return "".join(parts)
    rows = []
    for k, v in (fit.get("params") or {}).items():
        rows.append([k, _fmt(v), *_ci(fit, k)])
    for s, p in (fit.get("strategies") or {}).items():
        for k, v in p.items():
            rows.append([f"{s}.{k}", _fmt(v), *_ci(fit, f"{s}.{k}")])
    parts.append(_table(["parameter", "value", "95% CI low", "95% CI high"], rows, {0}))
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
            f"{_fmt(noise['sd_log'])} between replicate seeds ({noise['n_runs']} runs in "
            f"{noise['n_groups']} cells): the floor under rmse_log"
            if (noise := fit.get("seed_noise"))
            else "no replicate seeds",
        ),
        (
            "held out",
            f"N ≥ {format_number(holdout['n_params'])}, rmse_log {_fmt(holdout.get('rmse_log'))}"
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
    parts.append(_table(["", ""], [[k, _fmt(v)] for k, v in facts], {0, 1}))
    # E, A and α trade off; E + A/N^α is what the fit pins down (docs/fit.md).
    floor = fit.get("model_floor") or {}
    if not floor.get("n_params"):
        rng = (fit.get("data_range") or {}).get("n_params") or []
        sizes = sorted({float(x) for x in rng})
        floor = {"n_params": sizes, "loss": [float(law.loss_model_floor(n)) for n in sizes]}
    if floor.get("n_params"):
        cis = floor.get("ci95") or [None] * len(floor["n_params"])
        rows = [
            [format_number(n), _fmt(v), *(_fmt(c) for c in (ci or [None, None]))]
            for n, v, ci in zip(floor["n_params"], floor["loss"], cis, strict=True)
        ]
        parts.append(
            '<p class="note">E, A and α trade off against each other; what the runs pin '
            "down is E + A/N^α, the model floor L_N at the fitted sizes (nats/token):</p>"
            + _table(["N", "E + A/N^α", "95% CI low", "95% CI high"], rows)
        )
    rstar = fit.get("rstar") or {}
    per = [(s, v) for s, v in rstar.items() if isinstance(v, dict) and "value" in v]
    if per:
        rows = [
            [s, _fmt(v["value"]), *(_fmt(c) for c in v.get("ci95") or [None, None])] for s, v in per
        ]
        parts.append(
            f'<p class="note">R* at the median cell (N = {format_number(rstar["n_params"])}, '
            f"D = {format_number(rstar['fresh_tokens'])}): passes over D that still pay off.</p>"
            + _table(["strategy", "R*", "95% CI low", "95% CI high"], rows, {0})
        )
    for w in fit.get("warnings") or []:
        parts.append(f'<p class="warn">warning: {e(str(w))}</p>')
    return "".join(parts)


def _section_regimes(report: Report) -> str:
    inputs = report.inputs
    if inputs.law is None or inputs.rows is None or not len(inputs.rows):
        return '<p class="note">Regimes need a fit.</p>'
    rows = inputs.rows.sort_values(["n_params", "fresh_tokens", "strategy", "derived_tokens"])
    if inputs.law.form != "chinchilla":  # a strategy the law has no parameters for: no regime
        rows = rows[rows["strategy"].isin(["none", *inputs.law.strategies])]
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
                _fmt(rec["loss"]),
                seen.regime[i],
                _fmt(pred.loss[i]),
                pred.regime[i],
                _fmt(seen.loss_one_epoch[i]),
                _fmt(seen.loss_data_floor[i]),
                _fmt(seen.loss_model_floor[i]),
                _fmt(seen.derived_gain_share[i]),
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
    return intro + f"<p>By observed loss: {counts}.</p>" + _table(head, body, {0, 1, 6, 8}, classes)


def _section_plan(report: Report) -> str:
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
                _fmt(a.get("epochs")),
                _fmt(a.get("paraphrase_passes")),
                _fmt(a["predicted_loss"]),
                _fmt(a.get("loss_gap", 0.0)) if name != "CD law" else "—",
            ]
        )
    ci = p.get("predicted_loss_ci95")
    lines = [
        f"predicted loss {_fmt(p['predicted_loss'])} nats/token"
        + (f" (95% band {_fmt(ci[0])} to {_fmt(ci[1])})" if ci else ""),
        f"regime <b>{e(str(p['regime']))}</b>: L_1ep {_fmt(p['loss_one_epoch'])}, "
        f"L_D {_fmt(p['loss_data_floor'])}, L_N {_fmt(p['loss_model_floor'])}; "
        f"saturation {p.get('saturation', SATURATION)}, tolerance {p.get('tolerance', TOLERANCE)} nats",
        f"marginal gain {_fmt(p.get('marginal_gain_per_flop'))} nats per FLOP "
        f"({_fmt(p.get('marginal_gain_per_doubling'))} nats per doubling of the budget)",
    ]
    warn = "".join(f'<p class="warn">warning: {e(str(w))}</p>' for w in p.get("warnings") or [])
    return (
        choice
        + _table(head, body, {0, 1})
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
}


def _section_figures(report: Report) -> str:
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


def render(report: Report) -> str:
    """The report as one HTML string."""
    from cdlaw import __version__

    e = html.escape
    runs = report.runs_dir
    name = runs.resolve().name
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = [
        ("settings", "Sweep settings", _section_settings(runs)),
        ("runs", "Runs", _section_runs(report.inputs)),
        ("fit", "Fit", _section_fit(report)),
        ("regimes", "Regime of every run", _section_regimes(report)),
        ("plan", "Plan for a default budget", _section_plan(report)),
        ("figures", "Figures", _section_figures(report)),
    ]
    toc = " · ".join(f'<a href="#{sid}">{e(title)}</a>' for sid, title, _ in sections)
    body = "".join(f'<h2 id="{sid}">{e(title)}</h2>{content}' for sid, title, content in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>cdlaw report: {e(name)}</title><style>{CSS}</style></head><body>"
        f"<h1>cdlaw report: {e(name)}</h1>"
        f'<p class="note">{e(str(runs))} · cdlaw {e(__version__)} · {stamp}</p>'
        f"<p>{toc}</p>{body}</body></html>\n"
    )


def write_report(
    runs_dir: str | Path,
    out: str | Path | None = None,
    budget_flops: float | None = None,
    unique_tokens: float | None = None,
) -> Path:
    """Build the report and write it atomically to out (default <runs>/report.html)."""
    from cdlaw.atomic import write_text_atomic

    path = Path(out) if out is not None else Path(runs_dir) / "report.html"
    if path.is_dir():
        raise BadInput(f"--out {path} is a folder; give a file name such as {path / 'report.html'}")
    report = gather(runs_dir, budget_flops, unique_tokens)
    return write_text_atomic(path, render(report))
