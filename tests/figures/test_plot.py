"""`cdlaw plot`: what each figure contains, checked through matplotlib's objects.

Inputs are synthetic runs of a known CD law (tests/helpers/plotdata.py), so bands, curves and
points are compared with numbers computed here from the law's constants.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import plotdata
import pytest

from cdlaw.figures.inputs import load_inputs
from cdlaw.figures.plot import KINDS, available_kinds, make_figure, plot
from cdlaw.system.errors import BadInput

LAW = plotdata.TRUE_LAW


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return plotdata.write_runs(tmp_path_factory.mktemp("plot"))


@pytest.fixture(scope="module")
def inputs(runs):
    return load_inputs(runs)


@pytest.fixture(scope="module")
def figures(inputs):
    """Every kind drawn once from the runs folder (drawing is the slow part)."""
    return {k: make_figure(k, inputs) for k in KINDS}


def by_gid(fig_or_ax, gid: str):
    return [a for a in fig_or_ax.findobj(lambda a: a.get_gid() == gid)]


def caption(fig) -> str:
    texts = by_gid(fig, "caption")
    assert len(texts) == 1
    return texts[0].get_text()


def data_axes(fig):
    """The panels (not colorbars, not switched-off spare panels)."""
    return [ax for ax in fig.axes if ax.axison and ax.get_label() != "<colorbar>"]


# ---------------------------------------------------------------------------------------
# loss: the CD paper's figure
# ---------------------------------------------------------------------------------------


def test_loss_panels_bands_curves_and_points(figures, inputs):
    fig = figures["loss"]
    axes = data_axes(fig)
    # 4 sizes × 2 fresh-token budgets, one panel each.
    assert len(axes) == len(plotdata.SIZES) * len(plotdata.TOKENS_PER_PARAM)
    rows = inputs.rows
    for ax in axes:
        assert ax.get_xscale() == "log"
        assert "(tokens)" in ax.get_xlabel() and "(nats/token)" in ax.get_ylabel()
        # which (N, D) is this panel? the one-epoch run sits at x = D.
        (d, _), *more = np.concatenate(
            [c.get_offsets() for c in by_gid(ax, "runs:none") + by_gid(ax, "unused:none")]
        )
        assert not more
        n = float(rows.loc[(rows["fresh_tokens"] == d), "n_params"].iloc[0])
        l1 = (
            LAW.params["E"]
            + LAW.params["A"] / n ** LAW.params["alpha"]
            + LAW.params["B"] / d ** LAW.params["beta"]
        )
        ln = LAW.params["E"] + LAW.params["A"] / n ** LAW.params["alpha"]
        floors = {}
        for s in plotdata.STRATEGIES:
            p = LAW.strategies[s]
            rstar = p["K"] * (d / n) ** p["rho"] * n ** p["sigma"]
            floors[s] = ln + LAW.params["B"] / (d * (1 + rstar)) ** LAW.params["beta"]
        ld = min(floors.values())

        def band(name, ax=ax):
            (poly,) = by_gid(ax, f"band:{name}")
            assert poly.get_label() == name
            y = poly.get_paths()[0].vertices[:, 1]
            return y.min(), y.max()

        np.testing.assert_allclose(band("compute-bound"), (ld, l1), rtol=1e-12)
        np.testing.assert_allclose(band("data-bound"), (ln, ld), rtol=1e-12)
        lo, hi = band("model-bound")
        assert hi == pytest.approx(ln) and lo <= ax.get_ylim()[0]
        # the floors as lines, each strategy's own
        for s, f in floors.items():
            (line,) = by_gid(ax, f"L_D:{s}")
            assert line.get_ydata()[0] == pytest.approx(f, rel=1e-12)
        assert by_gid(ax, "L_1ep")[0].get_ydata()[0] == pytest.approx(l1, rel=1e-12)

        cell = rows[(rows["n_params"] == n) & (rows["fresh_tokens"] == d)]
        for s in plotdata.STRATEGIES:
            # points: every run of the cell, the used ones filled, the rest hollow
            pts = np.concatenate(
                [c.get_offsets() for c in by_gid(ax, f"runs:{s}") + by_gid(ax, f"unused:{s}")]
            )
            want = cell[cell["strategy"] == s].sort_values("derived_tokens")
            assert len(pts) == len(plotdata.RATIOS) == len(want)
            pts = pts[np.argsort(pts[:, 0])]
            np.testing.assert_allclose(pts[:, 0], d * (1 + np.array(plotdata.RATIOS)))
            np.testing.assert_allclose(pts[:, 1], want["loss"])
            # the fitted curve is the law along D′ = x − D
            (curve,) = by_gid(ax, f"fit:{s}")
            x, y = curve.get_xdata(), curve.get_ydata()
            assert x[0] == pytest.approx(d) and y[0] == pytest.approx(l1)
            np.testing.assert_allclose(y, LAW.loss(n, d, x - d, s), rtol=1e-12)
        held = cell["heldout"].any()
        n_hollow = sum(
            len(c.get_offsets())
            for s in ("none", *plotdata.STRATEGIES)
            for c in by_gid(ax, f"unused:{s}")
        )
        assert n_hollow == (~cell["used"]).sum() and (not held or n_hollow == len(cell))
    text = caption(fig)
    assert "cd law" in text and "n_rows 72" in text and "rmse_log" in text
    assert str(inputs.runs_dir) in text


def test_loss_legend_names_the_bands_and_floors(figures):
    (legend,) = figures["loss"].legends
    labels = [t.get_text() for t in legend.get_texts()]
    for want in (
        "compute-bound",
        "data-bound",
        r"model-bound, below $L_N$ (model floor)",
        r"$L_D$: data floor, in each strategy's colour",
        r"$L_{\mathrm{1ep}}$ and runs of one epoch (D′ = 0)",
        "paraphrase: runs and fit",
        "repetition: runs and fit",
    ):
        assert want in labels
    assert len(labels) <= 8  # each strategy's runs and fit share an entry


# ---------------------------------------------------------------------------------------
# eta, rstar
# ---------------------------------------------------------------------------------------


def _sizes_figure_parts(fig):
    """The one axis of a loss figure drawn per model size: its fitted lines by the N in
    their gid, and every point drawn (x, y)."""
    (ax,) = data_axes(fig)
    lines = {float(ln.get_gid()[4:]): ln for ln in ax.lines if ln.get_gid().startswith("fit:")}
    points = np.concatenate(
        [
            c.get_offsets()
            for c in ax.collections
            if len(c.get_offsets()) and not str(c.get_gid()).startswith("outside:")
        ],
        axis=0,
    )
    return ax, lines, points


def test_loss_of_a_chinchilla_table_shows_every_run_one_colour_per_size(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from cdlaw.law import PRESETS

    # 245 runs of 142 model sizes, none with derived tokens, most (N, D) cells one run
    csv = tmp_path / "chinchilla.csv"
    shutil.copy(Path(__file__).parents[2] / "examples" / "chinchilla-besiroglu.csv", csv)
    law = PRESETS["chinchilla-besiroglu"]
    fit = tmp_path / "chinchilla.fit.json"
    fit.write_text(json.dumps({**law.to_dict(), "n_rows": 245, "rmse_log": 0.01}))
    inputs = load_inputs(csv)
    fig = make_figure("loss", inputs)
    ax, lines, points = _sizes_figure_parts(fig)
    rows = inputs.rows
    assert len(rows) == 245
    # every run, once, at (D, loss), all in view: the highest would not squash the rest
    lo, hi = ax.get_ylim()
    assert lo < rows["loss"].min() and rows["loss"].max() < hi
    assert not by_gid(ax, "outside:above")
    want = rows[["fresh_tokens", "loss"]].to_numpy()
    np.testing.assert_allclose(
        points[np.lexsort(points.T[::-1])], want[np.lexsort(want.T[::-1])], rtol=1e-12
    )
    assert "not shown" not in caption(fig) and "142 model sizes in 7 colours" in caption(fig)
    # the colours the legend's room allows (8 entries), small to large N, each line the
    # fitted law at its N
    assert len(lines) == 7
    colours = [tuple(lines[n].get_color()) for n in sorted(lines)]
    assert len(set(colours)) == 7
    assert rows["n_params"].min() < min(lines) and max(lines) < rows["n_params"].max()
    for n, line in lines.items():
        x = line.get_xdata()
        np.testing.assert_allclose(
            line.get_ydata(),
            law.params["E"]
            + law.params["A"] / n ** law.params["alpha"]
            + law.params["B"] / x ** law.params["beta"],
        )
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "fresh tokens, D (tokens)"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0].startswith("N = 57.3M–") and "sizes, fit at" in labels[0]
    assert "fitted law" in labels and len(labels) == 8


def test_loss_of_a_table_with_one_run_per_cell_draws_one_line_per_size(tmp_path):
    import json

    import pandas as pd

    csv, fit_path = plotdata.write_external(tmp_path)
    table = pd.read_csv(csv)
    table = table[table["strategy"] == "none"]  # 4 sizes × 2 D, D′ = 0
    table.to_csv(csv, index=False)
    fit = plotdata.fit_json(plotdata.fit_rows(table, LAW, None), LAW, None, str(csv))
    fit_path.write_text(json.dumps(fit))  # the fit of the table as it is now
    fig = make_figure("loss", load_inputs(csv))
    _, lines, points = _sizes_figure_parts(fig)
    assert sorted(lines) == list(plotdata.SIZES)
    for n, line in lines.items():
        x = line.get_xdata()
        np.testing.assert_allclose(
            line.get_ydata(),
            LAW.params["E"]
            + LAW.params["A"] / n ** LAW.params["alpha"]
            + LAW.params["B"] / x ** LAW.params["beta"],
        )
    assert len(points) == len(plotdata.SIZES) * len(plotdata.TOKENS_PER_PARAM)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [lab for lab in labels if lab.startswith("N = ")] == ["N = 14M", "N = 30M",
                                                               "N = 60M", "N = 100M"]  # fmt: skip


def test_eta_points_and_fitted_curves(figures, inputs):
    fig = figures["eta"]
    axes = data_axes(fig)
    assert [ax.get_title() for ax in axes] == list(plotdata.STRATEGIES)
    rows = inputs.rows
    for ax, s in zip(axes, plotdata.STRATEGIES, strict=True):
        assert ax.get_xscale() == "log" and "r = D′/D" in ax.get_xlabel()
        want = rows[(rows["strategy"] == s) & (rows["derived_tokens"] > 0)]
        for n in plotdata.SIZES:
            got = np.concatenate(
                [c.get_offsets() for c in by_gid(ax, f"runs:{n:g}") + by_gid(ax, f"unused:{n:g}")]
            )
            w = want[want["n_params"] == n]
            assert len(got) == len(w) == len(plotdata.RATIOS) * len(plotdata.TOKENS_PER_PARAM)
            # empirical η from the observed loss: ΔL = L_1ep − L, D_eff = (D^−β − ΔL/B)^(−1/β)
            d, dp, loss = w["fresh_tokens"], w["derived_tokens"], w["loss"]
            l1 = (
                LAW.params["E"]
                + LAW.params["A"] / n ** LAW.params["alpha"]
                + LAW.params["B"] / d ** LAW.params["beta"]
            )
            deff = (d ** -LAW.params["beta"] - (l1 - loss) / LAW.params["B"]) ** (
                -1 / LAW.params["beta"]
            )
            eta = ((deff - d) / dp).to_numpy()
            order = np.lexsort((got[:, 1], got[:, 0]))
            worder = np.lexsort((eta, w["derived_ratio"].to_numpy()))
            np.testing.assert_allclose(got[order, 1], eta[worder], rtol=1e-9)
            for tpp in plotdata.TOKENS_PER_PARAM:
                (line,) = by_gid(ax, f"eta:{n:g}:{n * tpp:g}")
                r = line.get_xdata()
                p = LAW.strategies[s]
                rstar = p["K"] * tpp ** p["rho"] * n ** p["sigma"]
                np.testing.assert_allclose(line.get_ydata(), rstar / r * (1 - np.exp(-r / rstar)))
    cbar = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(cbar) == 1 and "D/N" in cbar[0].get_ylabel()
    assert "rmse_log" in caption(fig)


def test_eta_axes_hold_every_point_however_far_out(tmp_path):
    import pandas as pd

    csv, _ = plotdata.write_external(tmp_path)
    table = pd.read_csv(csv)
    # two runs far off the law: one whose derived tokens were worth 1.6 fresh ones, one
    # that lost more than the derived tokens' worth (η < 0: loss above one epoch)
    planted = {}
    ratio = table["derived_tokens"] / table["fresh_tokens"]
    for r, eta in ((3.0, 1.6), (1.0, -0.4)):  # D + ηD′ stays positive
        i = table.index[np.isclose(ratio, r)][1]
        n, d, dp = table.loc[i, ["n_params", "fresh_tokens", "derived_tokens"]]
        table.loc[i, "loss"] = (
            LAW.params["E"]
            + LAW.params["A"] / n ** LAW.params["alpha"]
            + LAW.params["B"] / (d + eta * dp) ** LAW.params["beta"]
        )
        planted[i] = eta
    table.to_csv(csv, index=False)
    inputs = load_inputs(csv)
    for i, eta in planted.items():
        assert inputs.rows.loc[i, "empirical_eta"] == pytest.approx(eta, rel=1e-6)
    fig = make_figure("eta", inputs)
    shown = 0
    for ax in data_axes(fig):
        lo, hi = ax.get_ylim()
        assert lo < 0.0 and 1.0 < hi  # η = 0 and the η = 1 reference stay in view
        for coll in ax.collections:
            y = np.asarray(coll.get_offsets())[:, 1] if len(coll.get_offsets()) else []
            shown += len(y)
            # inside, with a margin: no marker is cut by an edge
            assert np.all(y > lo + 0.02 * (hi - lo)) and np.all(y < hi - 0.02 * (hi - lo))
    assert shown == (inputs.rows["derived_tokens"] > 0).sum()


def test_rstar_marks_where_paraphrase_beats_repetition(figures):
    from cdlaw.figures.rstar import best_strategy

    def rstar(s, n, tpp):
        log_k, rho, sigma = {
            "repetition": (10.740510, -0.416064, -0.403500),
            "paraphrase": (26.868495, -1.303025, -1.149994),
        }[s]
        return math.exp(log_k) * tpp**rho * n**sigma

    # the qin2026 constants: paraphrase keeps its worth longer at small N only.
    both = ["repetition", "paraphrase"]
    for n, tpp in ((14e6, 20), (100e6, 20), (30e6, 5), (600e6, 5), (1e9, 100)):
        best, lead = best_strategy(LAW, both, n, tpp)
        para, rep = rstar("paraphrase", n, tpp), rstar("repetition", n, tpp)
        assert both[int(best)] == ("paraphrase" if para > rep else "repetition")
        assert float(lead) == pytest.approx(abs(math.log10(para / rep)), rel=1e-9)
    assert best_strategy(LAW, both, 14e6, 20)[0] == 1
    assert best_strategy(LAW, both, 100e6, 20)[0] == 0

    fig = figures["rstar"]
    axes = data_axes(fig)
    assert len(axes) == 3
    for ax in axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert "(" in ax.get_xlabel() and "(" in ax.get_ylabel()
    # left panel: 2 strategies × 3 model sizes, R* exactly
    left = axes[0]
    assert len(left.lines) == 6
    x, y = left.lines[0].get_xdata(), left.lines[0].get_ydata()
    np.testing.assert_allclose(y, rstar("repetition", min(plotdata.SIZES), x), rtol=1e-9)
    # right panel: each strategy's region (paraphrase's hatched) and the equal-R* line
    right = axes[2]
    (hatched,) = by_gid(right, "wins:paraphrase")
    assert hatched.hatches == ["///"] and list(hatched.levels) == [0.5, 1.5]
    assert not by_gid(right, "wins:repetition")  # the first strategy's region is plain
    (equal,) = by_gid(right, "equal-rstar:repetition:paraphrase")
    assert list(equal.levels) == [0.0]  # log10 R*_repetition / R*_paraphrase = 0
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "paraphrase (right: has the largest $R^*$)" in legend
    assert "repetition (right: has the largest $R^*$)" in legend
    assert len(legend) <= 8
    (cells,) = by_gid(right, "runs")
    assert len(cells.get_offsets()) == 8  # the 8 (N, D/N) cells of the runs


def test_rstar_shows_where_each_of_three_strategies_wins():
    from cdlaw.figures.rstar import best_strategy, rstar_figure
    from cdlaw.law import Law

    # three strategies with constant R* in different places: each wins somewhere
    third = {"K": 2e3, "rho": 0.0, "sigma": -0.3}  # R* = 2e3·N^-0.3: large at small N
    law = Law("cd", LAW.params, {**LAW.strategies, "distill": third})
    strategies = ["repetition", "paraphrase", "distill"]
    n, tpp = np.geomspace(1e6, 1e10, 60), np.geomspace(0.1, 1000, 60)
    NN, TT = np.meshgrid(n, tpp)
    best, lead = best_strategy(law, strategies, NN, TT)
    logs = np.log10([law.rstar(NN, NN * TT, s) for s in strategies])
    np.testing.assert_array_equal(best, np.argmax(logs, axis=0))
    np.testing.assert_allclose(lead, np.sort(logs, axis=0)[-1] - np.sort(logs, axis=0)[-2])
    fig = rstar_figure(
        law, fit={"data_range": {"n_params": [1e6, 1e10], "fresh_tokens": [1e6, 1e12]}}
    )
    right = data_axes(fig)[2]
    hatched = {a.get_gid() for a in right.findobj(lambda a: str(a.get_gid()).startswith("wins:"))}
    assert hatched == {"wins:paraphrase", "wins:distill"}  # repetition's region is plain
    ties = {a.get_gid() for a in right.findobj(lambda a: str(a.get_gid()).startswith("equal-"))}
    assert "equal-rstar:repetition:distill" in ties
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "distill (right: has the largest $R^*$)" in legend and len(legend) <= 8
    # a strategy that leads nowhere in the plane says so, rather than claim a colour
    weak = Law("cd", LAW.params, {**LAW.strategies, "distill": {**third, "K": 1e-3}})
    legend = [t.get_text() for t in rstar_figure(weak).legends[0].get_texts()]
    assert "distill (right: leads nowhere in view)" in legend


def test_every_strategy_gets_a_style_of_its_own():
    from cdlaw.figures import style

    names = ["none", "repetition", "paraphrase", *(f"synthetic-{i:02d}" for i in range(60))]
    looks = style.strategy_styles(names)
    assert looks["repetition"] == style.STRATEGY_STYLE["repetition"]  # built-ins never move
    assert looks["paraphrase"] == style.STRATEGY_STYLE["paraphrase"]
    pairs = {(v["color"], v["marker"]) for v in looks.values()}
    assert len(pairs) == len(names)  # no two strategies of one figure look alike
    # a name alone (no figure) always gets the same style
    assert style.strategy_style("self-distill") == style.strategy_style("self-distill")
    assert style.strategy_style("qa", ["qa", "distill"]) != style.strategy_style(
        "distill", ["qa", "distill"]
    )


# ---------------------------------------------------------------------------------------
# frontier, residuals, curves
# ---------------------------------------------------------------------------------------


def test_frontier_from_a_frontier_json(tmp_path):
    import json

    budgets = [1e17, 1e18, 1e19, 1e20]
    fr = plotdata.brute_force_frontier(LAW, budgets, 2e9)
    path = tmp_path / "frontier.json"
    path.write_text(json.dumps(fr))
    inputs = load_inputs(path)
    assert available_kinds(inputs) == ["rstar", "frontier"]
    fig = make_figure("frontier", inputs)
    ax_n, ax_d, ax_e, ax_l = data_axes(fig)
    for ax in (ax_n, ax_d, ax_e, ax_l):
        assert ax.get_xscale() == "log"
    assert "(parameters)" in ax_n.get_ylabel() and "(FLOPs)" in ax_l.get_xlabel()
    plan_lines = [ln for ln in ax_n.lines if len(ln.get_xdata()) == len(budgets)]
    assert len(plan_lines) == 3  # CD plan, naive Chinchilla, four-epoch
    cd, naive, _ = plan_lines
    np.testing.assert_allclose(cd.get_ydata(), [r["n_params"] for r in fr["rows"]])
    np.testing.assert_allclose(naive.get_ydata(), [r["naive"]["n_params"] for r in fr["rows"]])
    loss_lines = [ln for ln in ax_l.lines if len(ln.get_xdata()) == len(budgets)]
    np.testing.assert_allclose(
        loss_lines[2].get_ydata(), [r["four_epoch"]["predicted_loss"] for r in fr["rows"]]
    )
    # the CD plan never loses to its contrasts under the law it optimised
    # (the brute-force grid is 0.4% apart in N, so allow 1e-5 nats)
    assert np.all(loss_lines[0].get_ydata() <= loss_lines[1].get_ydata() + 1e-5)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"plan with the cd law", "naive Chinchilla plan", "four-epoch rule"} <= set(labels)
    assert "cd law" in caption(fig) and "qin2026" in caption(fig)
    # the CD plan repeats once the unique tokens run out: its D′ is drawn
    (derived,) = by_gid(ax_d, "plan:derived_tokens")
    np.testing.assert_allclose(derived.get_ydata(), [r["derived_tokens"] for r in fr["rows"]])


def test_frontier_of_a_chinchilla_law_names_it_and_plans_no_derived_tokens(tmp_path):
    import json

    from cdlaw.figures.plot import compute_frontier
    from cdlaw.law import PRESETS

    # U = 300B runs out past ~1e23 FLOPs: the contrasts repeat, the plan grows N instead
    # (its rows keep a few thousand derived tokens of rounding where D reaches U)
    fr = compute_frontier(PRESETS["chinchilla-besiroglu"], 3e11, np.geomspace(1e20, 1e25, 8))
    path = tmp_path / "chinchilla-frontier.json"
    path.write_text(json.dumps(fr))
    fig = make_figure("frontier", load_inputs(path))
    ax_n, ax_d, _, ax_l = data_axes(fig)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "plan with the chinchilla law (no derived tokens)" in labels
    assert not [lab for lab in labels if "CD" in lab or "uses repetition" in lab]
    assert not by_gid(ax_d, "plan:derived_tokens")  # the plan's D′ is not drawn ...
    assert by_gid(ax_d, "naive:derived_tokens")  # ... the naive plan's repeats are
    assert not ax_d.collections  # no strategy markers
    (n_star,) = by_gid(ax_n, "plan:n_params")
    np.testing.assert_allclose(n_star.get_ydata(), [r["n_params"] for r in fr["rows"]])
    assert by_gid(ax_l, "plan:predicted_loss")
    assert "fit: chinchilla law" in caption(fig)


def test_frontier_from_runs_uses_the_planner(figures, inputs):
    from cdlaw.plan import planner as plan

    fr = inputs.frontier  # computed by make_figure through cdlaw.plan.planner.frontier
    first = fr["rows"][0]
    want = plan.plan(LAW, first["budget_flops"], fr["unique_tokens"])
    assert first["n_params"] == pytest.approx(want.n_params, rel=1e-9)
    assert fr["unique_tokens"] == max(plotdata.SIZES) * max(plotdata.TOKENS_PER_PARAM)
    ax_n = data_axes(figures["frontier"])[0]
    assert ax_n.lines[0].get_ydata()[0] == pytest.approx(want.n_params, rel=1e-9)


def test_residuals_highlight_heldout_and_dropped(figures, inputs):
    fig = figures["residuals"]
    ax_pv, ax_res = data_axes(fig)
    rows = inputs.rows
    held = rows[rows["heldout"]]
    assert len(held) == 18 and (held["n_params"] == max(plotdata.SIZES)).all()
    rings = np.concatenate(
        [
            c.get_offsets()
            for s in ("none", *plotdata.STRATEGIES)
            for c in by_gid(ax_pv, f"heldout:{s}")
        ]
    )
    assert len(rings) == len(held)
    np.testing.assert_allclose(np.sort(rings[:, 0]), np.sort(held["loss"]))
    np.testing.assert_allclose(np.sort(rings[:, 1]), np.sort(held["predicted_loss"]))
    crosses = np.concatenate(
        [c.get_offsets() for s in plotdata.STRATEGIES for c in by_gid(ax_pv, f"dropped:{s}")]
    )
    assert len(crosses) == 1
    assert crosses[0][0] == pytest.approx(rows.loc[plotdata.DROPPED_ROW, "loss"])
    # residuals are log(observed/predicted)
    res = np.concatenate([c.get_offsets() for c in by_gid(ax_res, "runs:repetition")])
    want = rows[(rows["strategy"] == "repetition") & (rows["row_id"] != plotdata.DROPPED_ROW)]
    np.testing.assert_allclose(
        np.sort(res[:, 1]), np.sort(np.log(want["loss"] / want["predicted_loss"]))
    )
    assert ax_res.get_xscale() == "log" and "(parameters)" in ax_res.get_xlabel()
    assert "(nats/token)" in ax_pv.get_xlabel() and "(nats/token)" in ax_pv.get_ylabel()
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "held out (N = 100M)" in labels and "dropped as an outlier" in labels
    assert "held-out rmse_log" in caption(fig)


def test_curves_one_line_per_run(figures, inputs):
    fig = figures["curves"]
    lines = [ln for ln in fig.findobj(lambda a: str(a.get_gid()).startswith("run:"))]
    assert len(lines) == len(inputs.metrics) == 72
    run_id, m = next(iter(inputs.metrics.items()))
    (line,) = by_gid(fig, f"run:{run_id}")
    ok = np.isfinite(m["val_loss"])
    np.testing.assert_allclose(line.get_xdata(), m["tokens_seen"][ok])
    np.testing.assert_allclose(line.get_ydata(), m["val_loss"][ok])
    (train,) = by_gid(fig, f"train:{run_id}")  # every logged step, behind the evaluations
    np.testing.assert_allclose(train.get_ydata(), m["train_loss"])
    for ax in data_axes(fig):
        assert ax.get_xscale() == "log" and "(tokens)" in ax.get_xlabel()
    assert len(data_axes(fig)) == len(plotdata.SIZES)


# ---------------------------------------------------------------------------------------
# every figure: legends outside the data, captions naming the fit
# ---------------------------------------------------------------------------------------


def test_legends_never_cover_data(figures):
    for kind, fig in figures.items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        assert fig.legends, kind
        for legend in fig.legends:
            assert len(legend.get_texts()) <= 8, kind  # past that, bins or a colourbar
            box = legend.get_window_extent(renderer)
            for ax in data_axes(fig):
                assert not box.overlaps(ax.get_window_extent(renderer)), (kind, ax.get_title())
                for coll in ax.collections:
                    offsets = coll.get_offsets()
                    if len(offsets):
                        pts = ax.transData.transform(offsets)
                        assert box.count_contains(pts) == 0, kind


def test_every_figure_names_its_fit(figures):
    for kind, fig in figures.items():
        text = caption(fig)
        if kind == "compare":  # many fits: it names the comparison and its rows instead
            assert "72 rows" in text and "Huber δ 0.1" in text and "source" in text
        elif kind == "downstream":  # no law: it names the links and the runs they fit
            assert "links fitted to" in text and "runs of" in text
        else:
            assert "fit: cd law" in text and "rmse_log 0.0" in text, kind
        assert fig.get_suptitle(), kind


# ---------------------------------------------------------------------------------------
# inputs, formats, files, command line
# ---------------------------------------------------------------------------------------


def test_svg_and_pdf_write(runs, tmp_path):
    (svg,) = plot(runs, ["residuals"], tmp_path, "svg")
    assert svg == tmp_path / "residuals.svg" and b"<svg" in svg.read_bytes()[:2000]
    (pdf,) = plot(runs, ["rstar"], tmp_path, "pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    # written atomically: no temporary files left behind
    assert sorted(x.name for x in tmp_path.iterdir()) == ["residuals.svg", "rstar.pdf"]


def test_external_table_with_a_fit(tmp_path):
    csv, fit = plotdata.write_external(tmp_path)
    inputs = load_inputs(csv)
    assert available_kinds(inputs) == ["loss", "eta", "rstar", "frontier", "residuals"]
    assert not inputs.rows["heldout"].any() and len(inputs.rows) == 72
    # predictions computed here from the fit agree with the law
    r = inputs.rows.iloc[10]
    assert r["predicted_loss"] == pytest.approx(
        float(LAW.loss(r["n_params"], r["fresh_tokens"], r["derived_tokens"], r["strategy"]))
    )
    for kind in available_kinds(inputs):
        fig = make_figure(kind, inputs)
        assert str(csv) in caption(fig), kind
    # the residuals of a table without a holdout ring nothing
    fig = make_figure("residuals", inputs)
    assert not any(
        len(c.get_offsets()) for c in fig.findobj(lambda a: str(a.get_gid()).startswith("heldout"))
    )
    # a fit.json alone: the law's own figures
    assert available_kinds(load_inputs(fit)) == ["rstar", "frontier"]


def test_two_tables_in_one_folder_keep_their_own_figures(tmp_path):
    import shutil

    csv, fit = plotdata.write_external(tmp_path)
    other = csv.with_name("other.csv")
    shutil.copy(csv, other)
    shutil.copy(fit, other.with_name("other.fit.json"))
    first = plot(csv, ["loss", "residuals"])
    second = plot(other, ["loss", "residuals"])
    # named per table, as `cdlaw fit` names t.fit.json
    assert [p.parent.name for p in first] == ["published.figures"] * 2
    assert [p.parent.name for p in second] == ["other.figures"] * 2
    assert not set(first) & set(second)
    assert all(p.is_file() for p in first + second)
    # the table's fit and comparison draw into the table's folder too
    assert load_inputs(fit).out_dir == csv.with_name("published.figures")
    assert load_inputs(csv).out_dir == csv.with_name("published.figures")


def test_a_table_under_the_names_papers_print_draws_the_same_rows(tmp_path):
    csv, fit = plotdata.write_external(tmp_path)
    table = pd.read_csv(csv)
    papers = tmp_path / "papers.csv"
    table.assign(tokens=table["fresh_tokens"] + table["derived_tokens"]).rename(
        columns={"n_params": "params", "fresh_tokens": "unique_tokens"}
    ).drop(columns="derived_tokens").to_csv(papers, index=False)
    cols = ["n_params", "fresh_tokens", "derived_tokens", "strategy", "loss", "predicted_loss"]
    got, want = load_inputs(papers, fit).rows, load_inputs(csv).rows
    pd.testing.assert_frame_equal(got[cols], want[cols])


def test_bad_input_is_refused_before_writing(runs, tmp_path):
    out = tmp_path / "none"
    with pytest.raises(BadInput, match=r"'los' is not a figure kind.*did you mean 'loss'"):
        plot(runs, ["los"], out)
    with pytest.raises(BadInput, match="--format 'gif'"):
        plot(runs, None, out, "gif")
    table = tmp_path / "t.csv"
    table.write_text("n_params,fresh_tokens,loss\n1e7,1e8,3.0\n")
    with pytest.raises(BadInput, match=r"lacks the column\(s\) derived_tokens;"):
        plot(table, None, out)
    ok = tmp_path / "ok.csv"
    ok.write_text("n_params,fresh_tokens,derived_tokens,strategy,loss\n1e7,1e8,0,none,3.0\n")
    with pytest.raises(BadInput, match=r"no fit\.json beside"):
        plot(ok, None, out)
    with pytest.raises(BadInput, match="does not exist"):
        plot(tmp_path / "missing", None, out)
    with pytest.raises(BadInput, match="is a file; give a folder"):
        plot(runs, ["rstar"], ok)
    assert not out.exists()


def test_cli_plot_and_exit_codes(runs, inputs):
    # every kind is drawn (rendered) in test_legends_never_cover_data; here, the CLI path.
    assert available_kinds(inputs) == list(KINDS)

    def run(*args):
        cmd = [sys.executable, "-m", "cdlaw", *args]
        return subprocess.run(cmd, capture_output=True, text=True)

    ok = run("plot", str(runs), "--kind", "residuals", "-k", "eta")
    assert ok.returncode == 0, ok.stderr
    out = runs / "figures"  # the default folder
    assert ok.stdout.split() == [str(out / "residuals.png"), str(out / "eta.png")]
    for k in ("residuals", "eta"):
        assert (out / f"{k}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = run("plot", str(runs), "--kind", "loss,etaa", "--out", str(runs / "bad"))
    assert (
        bad.returncode == 2 and "did you mean 'eta'" in bad.stderr and "Traceback" not in bad.stderr
    )
    assert not (runs / "bad").exists()


def test_other_law_forms(tmp_path):
    import json

    from cdlaw.law import PRESETS

    csv, _ = plotdata.write_external(tmp_path)
    forms = {
        # repetition only: paraphrase runs are drawn but not predicted
        "muennighoff2023": ["loss", "eta", "rstar", "frontier", "residuals"],
        # no derived-token term: no η, no R*
        "chinchilla-hoffmann": ["loss", "frontier", "residuals"],
    }
    for preset, kinds in forms.items():
        path = tmp_path / f"{preset}.json"
        path.write_text(json.dumps({**PRESETS[preset].to_dict(), "n_rows": 72, "rmse_log": 0.02}))
        inputs = load_inputs(csv, path)
        assert available_kinds(inputs) == kinds, preset
        rows = inputs.rows
        known = (
            rows["strategy"] != "paraphrase"
            if preset == "muennighoff2023"
            else rows["n_params"] > 0
        )
        assert np.isfinite(rows.loc[known, "predicted_loss"]).all()
        assert np.isnan(rows.loc[~known, "predicted_loss"]).all()
        figs = {k: make_figure(k, inputs) for k in kinds}
        assert f"fit: {PRESETS[preset].form} law" in caption(figs["loss"])
        ax = data_axes(figs["loss"])[0]
        (poly,) = by_gid(ax, "band:compute-bound")
        height = np.ptp(poly.get_paths()[0].vertices[:, 1])
        # a chinchilla law gives derived tokens no worth: the compute-bound band is empty
        assert (height == 0) == (preset == "chinchilla-hoffmann")
        if preset == "muennighoff2023":
            assert [a.get_title() for a in data_axes(figs["eta"])] == ["repetition"]
            assert not by_gid(ax, "fit:paraphrase") and by_gid(ax, "runs:paraphrase")
    # a naive Chinchilla fit counts D + D′ as fresh tokens, in predictions and curves
    path = tmp_path / "naive.fit.json"
    law = PRESETS["chinchilla-besiroglu"]
    path.write_text(json.dumps({**law.to_dict(), "naive": True, "n_rows": 72, "rmse_log": 0.02}))
    inputs = load_inputs(csv, path)
    r = inputs.rows.iloc[5]
    assert r["derived_tokens"] > 0
    assert r["predicted_loss"] == pytest.approx(
        law.params["E"]
        + law.params["A"] / r["n_params"] ** law.params["alpha"]
        + law.params["B"] / r["tokens_trained"] ** law.params["beta"]
    )
    ax = data_axes(make_figure("loss", inputs))[0]
    (curve,) = by_gid(ax, "fit:naive")
    x, n = curve.get_xdata(), min(plotdata.SIZES)  # the first panel is the smallest model
    np.testing.assert_allclose(
        curve.get_ydata(),
        law.params["E"]
        + law.params["A"] / n ** law.params["alpha"]
        + law.params["B"] / x ** law.params["beta"],
    )
    assert not by_gid(ax, "fit:repetition")


# ---------------------------------------------------------------------------------------
# downstream: task metric against loss
# ---------------------------------------------------------------------------------------


def test_downstream_draws_every_strategy_in_its_own_colour_with_the_pooled_link():
    from matplotlib.colors import to_rgb
    from plantedlinks import planted_runs

    from cdlaw.figures import style
    from cdlaw.figures.downstream import downstream_figure
    from cdlaw.fit.table import prepare_runs
    from cdlaw.tasks.links import fit_downstream

    three = ("repetition", "paraphrase", "self-distill")
    runs = prepare_runs(planted_runs({"self-distill": 0.12}, strategies=three))
    result = fit_downstream(runs, n_boot=5)
    fig = downstream_figure(result, runs)
    ax = data_axes(fig)[0]
    colours, looks = {}, style.strategy_styles(["none", *three])
    for s in ("none", *three):
        (points,) = by_gid(ax, f"runs:{s}")
        assert len(points.get_offsets()) == (runs.strategy == s).sum(), s
        colours[s] = tuple(points.get_facecolor()[0])
        assert colours[s][:3] == pytest.approx(to_rgb(looks[s]["color"]))
    assert len(set(colours.values())) == 4
    (pooled,) = by_gid(ax, "link:pooled")
    lk = result.links[0]
    np.testing.assert_allclose(pooled.get_ydata(), lk.predict(pooled.get_xdata()))
    assert by_gid(ax, "band") and "strategies differ" in ax.get_title()


def test_a_table_is_read_once_and_says_so_once(tmp_path, caplog):
    """A table under other column names, with its fit beside it: one line on how it was
    read, not one per reading (the figures and the check of the fit against it)."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    table = pd.read_csv(root / "examples" / "demo-runs.csv").rename(columns={"n_params": "params"})
    table.to_csv(tmp_path / "t.csv", index=False)
    shutil.copy(root / "tests" / "fit" / "golden" / "demo-runs.fit.json", tmp_path / "t.fit.json")
    caplog.set_level("INFO", logger="cdlaw.table")
    inputs = load_inputs(tmp_path / "t.csv")
    assert inputs.runs is not None and len(inputs.runs) == 72
    reads = [r for r in caplog.records if r.getMessage().startswith("read ")]
    assert len(reads) == 1 and "N ← params" in reads[0].getMessage()
