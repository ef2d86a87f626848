"""`cdlaw report`: one self-contained HTML page for a sweep, rendered and written.

The page (cdlaw.report.sections) holds the sweep's settings, the run table, the fit, the
regime of every run, the plan for a default budget and every figure `cdlaw plot` can draw,
embedded as base64 PNG. It has no script and loads nothing from the network, so it opens
anywhere, offline. What it is built from is gathered by cdlaw.report.gather.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from pathlib import Path

from cdlaw.errors import BadInput
from cdlaw.report.gather import Report, gather
from cdlaw.report.sections import (
    figures_section,
    fit_section,
    plan_section,
    regimes_section,
    runs_section,
    settings_section,
)

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


def render(report: Report) -> str:
    """The report as one HTML string."""
    from cdlaw import __version__

    e = html.escape
    runs = report.runs_dir
    name = runs.resolve().name
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = [
        ("settings", "Sweep settings", settings_section(runs)),
        ("runs", "Runs", runs_section(report.inputs)),
        ("fit", "Fit", fit_section(report)),
        ("regimes", "Regime of every run", regimes_section(report)),
        ("plan", "Plan for a default budget", plan_section(report)),
        ("figures", "Figures", figures_section(report)),
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
