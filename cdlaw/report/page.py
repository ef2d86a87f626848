"""`cdlaw report`: one self-contained HTML page for a sweep or a table of runs, rendered and written.

The page leads with the answer (cdlaw.report.answer): the fit's headline and the plan for
a default budget, in the first screen, then the loss, η and R* figures. The rest follows:
the other figures, the fit's details, the regime of every run and the run table (both
sortable, in scrolling boxes), and the sweep's settings last where there is a sweep file. Figures are embedded as
base64 PNG; the only script is the few inline lines that sort tables. It loads nothing
from the network, so it opens anywhere, offline. What it is built from is gathered by
cdlaw.report.gather.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from pathlib import Path

from cdlaw.report.answer import fit_headline, plan_answer
from cdlaw.report.gather import Report, gather
from cdlaw.report.sections import (
    downstream_section,
    figures_section,
    fit_section,
    regimes_section,
    runs_section,
    settings_section,
)
from cdlaw.report.tables import SORT_SCRIPT

# The figures that answer the sweep's question, shown right under the plan.
KEY_FIGURES = ("loss", "eta", "rstar")
MORE_FIGURES = ("frontier", "residuals", "curves", "compare")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.2em auto;
max-width:1200px;padding:0 1em;color:#111}
h1{font-size:1.5em;margin:0 0 .1em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}
nav{margin:.3em 0 .8em;font-size:13px}#answer p{margin:.4em 0}
table{border-collapse:collapse;font-size:12px;margin:0}
th,td{border:1px solid #ddd;padding:2px 7px;text-align:right;white-space:nowrap}
th{background:#f2f2f2}td.l,th.l{text-align:left}
table.sortable thead th{position:sticky;top:0;cursor:pointer;z-index:1}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:12px}
.note{color:#444}.warn{color:#8a3b00}
.scroll{overflow:auto;max-height:70vh;margin:.5em 0;display:inline-block;max-width:100%}
figure{margin:1.4em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#444;font-size:12px}
.compute-bound{background:#e3f1fb}.data-bound{background:#fbf6c9}.model-bound{background:#e4e4e4}
"""


def render(report: Report) -> str:
    """The report as one HTML string."""
    from cdlaw import __version__

    e = html.escape
    runs = report.path
    name = runs.resolve().name
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = [
        ("figures", "Loss, η and R*", figures_section(report, KEY_FIGURES)),
        ("downstream", "Downstream tasks", downstream_section(report)),
        ("more-figures", "More figures", figures_section(report, MORE_FIGURES)),
        ("fit", "Fit details", fit_section(report)),
        ("regimes", "Regime of every run", regimes_section(report)),
        ("runs", "Runs", runs_section(report.inputs)),
    ]
    if (runs / "sweep.toml").is_file():  # a table of runs, or a folder without: no settings
        sections.append(
            ("settings", "Sweep settings (sweep.toml)", settings_section(runs / "sweep.toml"))
        )
    toc = " · ".join(f'<a href="#{sid}">{e(title)}</a>' for sid, title, _ in sections)
    body = "".join(
        f'<section id="{sid}"><h2>{e(title)}</h2>{content}</section>'
        for sid, title, content in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>cdlaw report: {e(name)}</title><style>{CSS}</style></head><body>"
        f"<h1>cdlaw report: {e(name)}</h1>"
        f'<p class="note">{e(str(runs))} · cdlaw {e(__version__)} · {stamp}</p>'
        f"<nav>{toc}</nav>"
        f'<section id="answer">{fit_headline(report)}{plan_answer(report)}</section>'
        f"{body}<script>{SORT_SCRIPT}</script></body></html>\n"
    )


def report_path(path: str | Path) -> Path:
    """Where the report of PATH goes by default: <runs>/report.html in a runs folder,
    t.report.html beside a table t.csv (as `cdlaw fit t.csv` writes t.fit.json)."""
    path = Path(path)
    return path / "report.html" if path.is_dir() else path.with_name(f"{path.stem}.report.html")


def write_report(
    path: str | Path,
    out: str | Path | None = None,
    budget_flops: float | None = None,
    unique_tokens: float | None = None,
    fit_path: str | Path | None = None,
    extrapolate: bool = False,
    runs_warnings: tuple[str, ...] = (),
) -> tuple[Path, Report]:
    """Build the report of a runs folder or table (gather; `runs_warnings` lead the plan's)
    and write it atomically to out (default report_path); return the path and what the
    page was built from."""
    from cdlaw.system.atomic import check_out_path, write_text_atomic

    if out is not None:
        check_out_path(out, "--out", example="report.html")
    target = Path(out) if out is not None else report_path(path)
    report = gather(path, budget_flops, unique_tokens, fit_path, extrapolate, runs_warnings)
    return write_text_atomic(target, render(report)), report
