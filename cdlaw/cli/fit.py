"""`cdlaw fit`: fit the law to a runs folder or a table of runs (docs/files.md, docs/fit.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from cdlaw.cli import NUMBER, app, count, err, out, print_json, say
from cdlaw.units import counted


@app.command()
def fit(
    path: str = typer.Argument(
        ..., metavar="PATH", help="A runs folder (its summary.parquet) or a .csv/.parquet table."
    ),
    law: str = typer.Option(
        "cd", "--law", help="cd | cd-overfit | practical | muennighoff | chinchilla | all."
    ),
    method: str = typer.Option(
        "joint", "--method", help="joint (all parameters at once) | staged (D′ = 0 rows first)."
    ),
    huber_delta: float = typer.Option(
        None, "--huber-delta", help="Huber δ on log residuals (default 0.1 cd, 1e-3 otherwise)."
    ),
    drop_outliers: int = typer.Option(
        0, "--drop-outliers", help="Drop the worst |log residual| row and refit, K times."
    ),
    bootstrap: int = typer.Option(
        None, "--bootstrap", help="Refits on resampled rows: 95% intervals (default 200; 0 none)."
    ),
    holdout_largest: bool = typer.Option(
        False, "--holdout-largest", help="Fit without the largest N; report its log-RMSE."
    ),
    select: str = typer.Option(
        "auto", "--select", help="A cell's runs: auto (seeds averaged, best lr)|min|mean|none."
    ),
    starts: str = typer.Option(
        None,
        "--starts",
        metavar=NUMBER,
        help="Starting points of the search's grid (default 256; 512 per law with --law all).",
    ),
    naive: bool = typer.Option(
        False, "--naive", help="With --law chinchilla: count derived tokens as fresh (D + D′)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the start-grid sample and the bootstrap."),
    out_path: str = typer.Option(
        None, "--out", help="FILE.json to write; the rows go to FILE_rows.parquet beside it."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print only fit.json on stdout."),
) -> None:
    """Fit the CD law (or Chinchilla / Muennighoff) to runs, with intervals and regimes.

    Minimises the summed Huber loss of log residuals with L-BFGS from a grid of starts,
    polishing the best. Writes fit.json and fit_rows.parquet (per row: prediction, log
    residual, empirical η, regime): into a runs folder, or beside a table file t.csv as
    t.fit.json and t.fit_rows.parquet, or to --out FILE.json (+ FILE_rows.parquet).

    Example: cdlaw fit runs/demo --holdout-largest
    """
    if law == "all":  # every law on the same rows, ranked by held-out error
        from cdlaw.cli.compare import run_comparison

        run_comparison(
            path,
            law="all",
            huber_delta=0.1 if huber_delta is None else huber_delta,
            select=select,
            starts=starts or "512",
            seed=seed,
            out_path=out_path,
            json_out=json_out,
        )
        return
    from cdlaw.fit.procedure import DEFAULT_BOOTSTRAP, DEFAULT_STARTS

    options = dict(
        law=law,
        method=method,
        huber_delta=huber_delta,
        n_starts=count(starts or str(DEFAULT_STARTS), "--starts"),
        drop_outliers=drop_outliers,
        bootstrap=DEFAULT_BOOTSTRAP if bootstrap is None else bootstrap,
        holdout_largest=holdout_largest,
        seed=seed,
        naive=naive,
        select=select,
    )
    _fit_and_write(path, out_path, json_out, options)


def _fit_and_write(path: str, out_path: str | None, json_out: bool, options: dict) -> None:
    """fit_path with a progress bar; the summary (or fit.json) is shown before any file is
    written, then where the files went, on stderr."""
    from cdlaw.cli.progress_bar import StageProgress
    from cdlaw.cli.runs_now import readable_runs
    from cdlaw.fit.procedure import fit_path
    from cdlaw.sweep.summary import folder_warnings

    readable_runs(path)
    notes = tuple(folder_warnings(Path(path)))
    progress = StageProgress()

    def show(result) -> None:
        """The summary (or the JSON), before any file is written: if it fails, none is."""
        progress.close()
        if json_out:
            print_json(result.to_dict())
        else:
            _render(result)

    try:
        _, json_path, rows_path = fit_path(
            path, out=out_path, before_write=show, notes=notes, progress=progress, **options
        )
    finally:
        progress.close()
    err.print(f"wrote {json_path} and {rows_path}", highlight=False)


def _render(result) -> None:
    """Parameters with intervals, R*, E + A/N^α, fit quality, optimizer and regimes."""
    d = result.to_dict()
    out.print(_parameter_table(result, d))
    if d["rstar"]:
        out.print(_rstar_table(d["rstar"]))
    out.print(_model_floor_table(d["model_floor"]))
    _print_quality(d)
    _print_regimes(result.rows, d["regime_counts"])
    for w in d["warnings"]:
        say("warning", w)


def _parameter_table(result, d: dict):
    """Each fitted value under the fit vector's names (bootstrap_params), with its interval."""
    from rich import box
    from rich.table import Table

    from cdlaw.fit.vector import fit_vector_names, law_to_public_vector

    # a muennighoff fit's shared rstar_n has no strategy prefix
    strategies = list(result.law.strategies)
    values = dict(
        zip(
            fit_vector_names(result.law.form_decl, strategies),
            law_to_public_vector(result.law, strategies),
            strict=True,
        )
    )
    t = Table(title=f"{d['law']} fit ({d['method']}, Huber δ {d['huber_delta']:g})", box=box.SIMPLE)
    t.add_column("parameter")
    t.add_column("value", justify="right")
    t.add_column("95% CI" if d["ci95"] else "95% CI (use --bootstrap)", justify="right")
    for name in d["bootstrap_params"]:
        ci = d["ci95"].get(name)
        value = f"{values[name]:.6g}" if name in values else ""
        t.add_row(name, value, f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "")
    return t


def _rstar_table(rstar: dict):
    from rich import box
    from rich.table import Table

    from cdlaw.units import format_number as fmt

    r = Table(
        title=f"R* at the median cell (N {fmt(rstar['n_params'])}, D {fmt(rstar['fresh_tokens'])})",
        box=box.SIMPLE,
    )
    for c in ("strategy", "R*", "95% CI"):
        r.add_column(c, justify="left" if c == "strategy" else "right")
    for s, v in rstar.items():
        if isinstance(v, dict):
            ci = v.get("ci95")
            r.add_row(s, f"{v['value']:.4g}", f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "")
    return r


def _model_floor_table(mf: dict):
    from rich import box
    from rich.table import Table

    from cdlaw.units import format_number as fmt

    sizes = _shown_sizes(mf["n_params"])
    title = "E + A/N^alpha (stable even when E, A, alpha trade off)"
    if len(sizes) < len(mf["n_params"]):
        title += f": {len(sizes)} of the {len(mf['n_params'])} sizes (all in --json)"
    m = Table(title=title, box=box.SIMPLE)
    for c in ("n_params", "loss", "95% CI"):
        m.add_column(c, justify="right")
    for i in sizes:
        ci = mf.get("ci95", [None] * len(mf["n_params"]))[i]
        m.add_row(
            fmt(mf["n_params"][i]),
            f"{mf['loss'][i]:.4f}",
            f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "",
        )
    return m


def _print_quality(d: dict) -> None:
    """Rows used, log-RMSE and objective; the seed noise floor; the held-out size; the
    optimizer."""
    from cdlaw.fit.cells import replicates_text
    from cdlaw.units import format_number as fmt

    o = d["optimizer"]
    out.print(
        f"rows: {replicates_text(d['n_runs'], d['n_rows'], d['select'])}; {d['n_used']} used"
        + (f", dropped {d['dropped']}" if d["dropped"] else "")
        + f"   rmse_log {d['rmse_log']:.5f}   objective {d['objective']:.6g}",
        highlight=False,
    )
    if d["seed_noise"]:
        from cdlaw.fit.findings import seed_noise_between

        sn = d["seed_noise"]
        out.print(
            f"seed noise: log sd {sn['sd_log']:.5f} {seed_noise_between(sn)} "
            f"({counted(sn['n_runs'], 'run')} in {counted(sn['n_groups'], 'cell')}): no fit to "
            "single runs gets below it",
            highlight=False,
        )
    if d["holdout"]:
        h = d["holdout"]
        out.print(
            f"held out N = {fmt(h['n_params'])} ({counted(h['n_rows'], 'row')}): rmse_log "
            f"{h['rmse_log']:.5f}",
            highlight=False,
        )
    out.print(
        f"optimizer: {'converged' if o['success'] else 'NOT converged'} ({o['message']}); "
        f"{o['n_converged']}/{o['n_starts']} starts converged"
        + (f"; at bound / off grid: {', '.join(o['at_bound'])}" if o["at_bound"] else ""),
        highlight=False,
    )


def _print_regimes(rows, regime_counts: dict) -> None:
    """The regime counts of the used runs, and their median frontiers."""
    from cdlaw.regimes import SATURATION, TOLERANCE

    used = rows[rows["used"]]
    counts = ", ".join(f"{k} {v}" for k, v in regime_counts.items())
    out.print(
        f"regimes of the used runs (observed loss; saturation {SATURATION}, tolerance "
        f"{TOLERANCE} nats): {counts}",
        highlight=False,
    )
    if len(used):
        out.print(
            "  median L_1ep {:.4f}, L_D {:.4f}, L_N {:.4f}".format(
                used["loss_one_epoch"].median(),
                used["loss_data_floor"].median(),
                used["loss_model_floor"].median(),
            ),
            highlight=False,
        )


SHOWN_SIZES = 12  # a table of hundreds of sizes (a published table's runs) is a wall


def _shown_sizes(sizes: list[float]) -> list[int]:
    """Indices of the sizes the terminal shows: each distinct printed size once, and at
    most SHOWN_SIZES of them spread evenly over the sorted sizes (ends included)."""
    from cdlaw.units import format_number as fmt

    distinct = [i for i, n in enumerate(sizes) if i == 0 or fmt(n) != fmt(sizes[i - 1])]
    if len(distinct) <= SHOWN_SIZES:
        return distinct
    step = (len(distinct) - 1) / (SHOWN_SIZES - 1)
    return [distinct[round(j * step)] for j in range(SHOWN_SIZES)]
