"""The top of the `cdlaw report` page: the answer a reader opened it for.

fit_headline: which law, how well it fits against the seed-to-seed noise no law can fit,
and how well it predicted a model size it never saw. plan_answer: what to train for the
budget and unique tokens asked (or the defaults, named in its first line;
cdlaw.report.gather), against the naive Chinchilla and four-epoch plans, with the
planner's warnings. Both fit in the first screen of the page; the details follow further
down (cdlaw.report.sections).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from cdlaw.fit.cells import replicates_text
from cdlaw.fit.findings import seed_noise_between
from cdlaw.regimes import SATURATION, TOLERANCE
from cdlaw.report.gather import Report
from cdlaw.report.tables import cell, format_cell, html_table
from cdlaw.strategies import NONE, REPETITION
from cdlaw.units import counted, format_number


def holdout_beside(path: Path) -> dict:
    """The held-out check of a separate `cdlaw fit --holdout-largest --out fit_holdout.json`
    in a runs folder (what `make demo` writes), when fit.json itself was fitted on every size."""
    try:
        return json.loads((Path(path) / "fit_holdout.json").read_text()).get("holdout") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def _noise(fit: dict, rmse) -> str:
    """The log-RMSE against the seed noise; replicates that agree exactly (a simulated
    sweep without --seed-noise) have no noise to compare with, but they are replicates."""
    noise = fit.get("seed_noise")
    if not noise or noise.get("sd_log") is None:
        return "no runs that differ only in seed to compare it with"
    sd = float(noise["sd_log"])
    runs = f"{counted(noise['n_runs'], 'run')} in {counted(noise['n_groups'], 'cell')}"
    if sd == 0:
        return (
            f"no seed noise to compare it with: the replicate seeds ({runs}) have identical losses"
        )
    ratio = f"{float(rmse) / sd:.2g}× " if rmse is not None else ""
    return f"{ratio}the seed noise ({format_cell(sd)} {seed_noise_between(noise)}, {runs})"


def fit_headline(report: Report) -> str:
    """One paragraph: the law, its log-RMSE against the seed noise, its held-out error."""
    e = html.escape
    fit, law = report.inputs.fit, report.inputs.law
    if fit is None or law is None:
        return f'<p id="fit-headline"><b>No fit.</b> {e(report.fit_note)}</p>'
    rmse = fit.get("rmse_log")
    holdout = fit.get("holdout") or holdout_beside(report.path)
    if holdout.get("n_params") and holdout.get("rmse_log") is not None:
        held = (
            f"held out, the sizes N ≥ {format_number(holdout['n_params'])} are predicted with "
            f"log-RMSE <b>{format_cell(holdout['rmse_log'])}</b>"
        )
    else:
        held = (
            "no held-out check (<code>cdlaw fit RUNS --holdout-largest --out "
            "fit_holdout.json</code> makes one)"
        )
    used = fit.get("n_used", fit.get("n_rows"))
    rows = f"{used} of {fit['n_rows']} rows" if fit.get("n_rows") is not None else "the runs"
    if fit.get("n_rows") is not None and isinstance(fit.get("n_runs"), int):
        said = replicates_text(fit["n_runs"], fit["n_rows"], str(fit.get("select")))
        rows = f"{used} rows used of {said}"
    source = f" ({e(law.form_decl.source)})" if law.form_decl.source else ""
    opt = fit.get("optimizer") or {}
    unconverged = (
        ' <span class="warn">The optimizer did not converge.</span>'
        if opt and not opt.get("success")
        else ""
    )
    made = "" if report.inputs.fit_path is not None else f" {e(report.fit_note)}"
    return (
        f'<p id="fit-headline"><b>Fit</b>: the {e(str(fit.get("law", law.form)))} law{source} '
        f"on {rows}: log-RMSE <b>{format_cell(rmse)}</b>, {_noise(fit, rmse)}; {held}."
        f"{unconverged}{made}</p>"
    )


def _how_trained(p: dict) -> str:
    strategy = str(p.get("strategy", NONE))
    if not p.get("derived_tokens"):
        return "no derived tokens"
    passes = (
        counted(float(p["epochs"]), "epoch", digits=4)
        if strategy == REPETITION
        else counted(float(p["derived_ratio"]), f"{strategy} pass", digits=4)
    )
    return (
        f"<b>D′ = {format_number(p['derived_tokens'])}</b> derived tokens by {strategy} ({passes})"
    )


def _gap(a: dict) -> str:
    # A contrast plan the optimiser could not beat has a gap of ±1e-12: show it as 0.
    return format_cell(round(float(a.get("loss_gap") or 0.0), 6) + 0.0)


def plan_answer(report: Report) -> str:
    """The plan for the budget asked (or the default one): one sentence that names who
    asked for C and U, the contrast plans, why this budget, and the planner's warnings."""
    e = html.escape
    budget = _asked(report) if report.budget_flops and report.unique_tokens else "no budget"
    why = (
        f'<p class="note">{e(report.budget_note or "No budget")}. Another budget: '
        "<code>cdlaw report RUNS --budget-flops C --unique-tokens U</code> (or a "
        "<code>[plan]</code> in the sweep file), or <code>cdlaw plan</code>.</p>"
    )
    p = report.plan
    if p is None:
        return f'<div id="plan"><p><b>Plan</b>: {e(report.plan_note)}</p>{why}</div>'
    ci = p.get("predicted_loss_ci95")
    band = f" (95% band {format_cell(ci[0])} to {format_cell(ci[1])})" if ci else ""
    if not ci and str(p.get("no_band_reason") or "").startswith("not determined"):
        band = f" (95% band {e(p['no_band_reason'])})"
    lead = (
        f"<p><b>Plan</b> for {e(budget)}: train <b>N = {format_number(p['n_params'])}</b> "
        f"parameters on <b>D = {format_number(p['fresh_tokens'])}</b> fresh tokens and "
        f"{_how_trained(p)}; predicted loss <b>{format_cell(p['predicted_loss'])}</b> "
        f"nats/token{band}, <b>{e(str(p['regime']))}</b>.</p>"
    )
    lead += _decision_note(p) + _valley_and_law_notes(p)
    head = ["plan", "strategy", "N", "D", "D′", "uses", "predicted loss",
            "loss above the plan"]  # fmt: skip
    # the plan, the best plan of each other strategy (closest first), and the two baselines
    others = sorted(
        ((a.get("loss_gap") or 0.0, s, a) for s, a in (p.get("candidates") or {}).items()
         if s != p["strategy"] and (a.get("loss_gap") or 0.0) > 0),
        key=lambda t: t[0],
    )  # fmt: skip
    mine = f"plan ({p.get('law_form', 'cd')} law)"  # the law that planned it, whichever
    rows = [(mine, p), *((f"best {s}", a) for _, s, a in others),
            ("naive Chinchilla", p["naive"]), ("four-epoch rule", p["four_epoch"])]  # fmt: skip
    body = []
    for name, a in rows:
        strategy = a.get("strategy", "—")
        body.append(
            [
                name,
                strategy,
                cell(a["n_params"], "n_params"),
                cell(a["fresh_tokens"], "fresh_tokens"),
                cell(a["derived_tokens"], "derived_tokens"),
                _uses(a),
                cell(a["predicted_loss"]),
                _gap(a) if name != mine else "—",
            ]
        )
    details = (
        f'<p class="note">L_1ep {format_cell(p["loss_one_epoch"])}, L_D '
        f"{format_cell(p['loss_data_floor'])}, L_N {format_cell(p['loss_model_floor'])} "
        f"(saturation {p.get('saturation', SATURATION)}, tolerance "
        f"{p.get('tolerance', TOLERANCE)} nats); marginal gain "
        f"{format_cell(p.get('marginal_gain_per_doubling'))} nats per doubling of the budget "
        f"({format_cell(p.get('marginal_gain_per_flop'))} per FLOP).</p>"
    )
    warn = "".join(f'<p class="warn">warning: {e(str(w))}</p>' for w in p.get("warnings") or [])
    return f'<div id="plan">{lead}{html_table(head, body, {0, 1})}{why}{details}{warn}</div>'


def _asked(report: Report) -> str:
    """The plan's C and U and who asked for each: "C = 2e+12 FLOPs and U = 96K unique
    tokens, both from the sweep file's [plan]"."""
    assert report.budget_flops is not None and report.unique_tokens is not None
    c = f"C = {report.budget_flops:.3g} FLOPs"
    u = f"U = {format_number(report.unique_tokens)} unique tokens"
    if report.budget_from == report.unique_from:
        return f"{c} and {u}, both {report.budget_from}"
    return f"{c} ({report.budget_from}) and {u} ({report.unique_from})"


def _valley_and_law_notes(p: dict) -> str:
    """The plan's valley (the N within its band) and the law it rests on, where it has them."""
    notes = []
    v = p.get("valley")
    if v:
        lo, hi = v["n_params"]
        notes.append(
            f"N from {format_number(lo)} to {format_number(hi)} ({html.escape(v['uses'][0])} to "
            f"{html.escape(v['uses'][1])}) predicts a loss within the 95% band: the runs cannot "
            "tell these allocations from the plan"
        )
    if p.get("laws"):
        notes.append(html.escape(p["laws"]["text"]))
    return "".join(f'<p class="note">{n[0].upper()}{n[1:]}.</p>' for n in notes)


def _decision_note(p: dict) -> str:
    """How often the bootstrap refits' own plans agree with the plan: strategy and N."""
    share, n_band = p.get("strategy_share"), p.get("n_params_ci95")
    parts = []
    if share:
        mine = share.get(p["strategy"], 0.0)
        parts.append(f"{html.escape(p['strategy'])} in {mine:.0%} of them")
    if n_band:
        parts.append(f"N from {format_number(n_band[0])} to {format_number(n_band[1])} (95%)")
    elif p.get("n_params_no_band_reason"):
        parts.append(f"their N {html.escape(p['n_params_no_band_reason'])}")
    o = p.get("optimism")
    if o is not None:
        parts.append(
            f"their own predictions {format_cell(abs(o))} nats "
            + (
                "below the fit's there (a plan's predicted loss is biased low; the band is "
                "widened by it)"
                if o < 0
                else "above the fit's there (no sign of the optimizer's curse; the band is "
                "widened by it)"
            )
        )
    elif p.get("optimism_note"):
        parts.append(f"their optimism {html.escape(p['optimism_note'])}")
    if not parts:
        return ""
    return f'<p class="note">Each bootstrap refit planning for itself: {"; ".join(parts)}.</p>'


def _uses(a: dict) -> str:
    """How an allocation makes its D′, as `cdlaw plan` says it: "4.82 epochs" of
    repetition, "2.54 passes" (D′/D) of any other strategy, "1 epoch" without D′."""
    strategy, ratio = a.get("strategy"), a.get("derived_ratio")
    if strategy == NONE or not ratio:
        return "1 epoch"
    if strategy == REPETITION:
        return counted(float(a["epochs"]), "epoch", digits=4)
    return counted(float(ratio), "pass", digits=4)
