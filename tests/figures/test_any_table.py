"""Every figure of every table cdlaw is shown is one a paper could print: axes bounded to the
law and the bulk of the runs (outliers at the edge, counted in the legend), legends of at
most eight entries, grids without gaps whose panels show curves of runs.

Tables: the shipped examples (the demo with its own fit, Chinchilla with Besiroglu et al.'s
law), a table of Muennighoff et al.'s shape built from their law (tests/helpers/shapedtables.py)
and, where ../shared/data/published is present, the CD paper's own runs with its fit. Each
is read back from the matplotlib Figure objects.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import shapedtables

from cdlaw.figures.inputs import load_inputs
from cdlaw.figures.plot import available_kinds, make_figure
from cdlaw.fit.procedure import fit_law
from cdlaw.fit.table import load_runs
from cdlaw.law import PRESETS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MAX_LEGEND = 8
# The y-axis may span at most this many times the values between the 5th and 95th
# percentile of what a panel draws (in decades on a log axis).
MAX_STRETCH = 6.0


def _demo(folder: Path, name: str) -> Path:
    csv = folder / f"{name}.csv"
    csv.write_bytes((EXAMPLES / f"{name}.csv").read_bytes())
    fit = fit_law(load_runs(csv), law="cd", n_starts=64).to_dict()
    (folder / f"{name}.fit.json").write_text(json.dumps(fit))
    return csv


def _table(name: str, folder: Path) -> Path:
    if name in ("demo-runs", "demo-runs-cosine"):
        return _demo(folder, name)
    if name == "chinchilla":
        table = load_runs(EXAMPLES / "chinchilla-besiroglu.csv")
        return shapedtables.write_with_fit(folder, name, table, PRESETS["chinchilla-besiroglu"])
    if name == "muennighoff-shaped":
        table = shapedtables.muennighoff_table()
        return shapedtables.write_with_fit(folder, name, table, shapedtables.MUENNIGHOFF)
    table = shapedtables.cd_paper_table()
    if table is None:
        pytest.skip("../shared/data/published (the CD paper's table) is absent")
    return shapedtables.write_with_fit(folder, name, table, PRESETS["qin2026"])


TABLES = ["demo-runs", "demo-runs-cosine", "chinchilla", "muennighoff-shaped", "cd-paper"]


@pytest.fixture(scope="module", params=TABLES)
def drawn(request, tmp_path_factory):
    """One table's inputs and every figure it allows, drawn once."""
    csv = _table(request.param, tmp_path_factory.mktemp(request.param))
    inputs = load_inputs(csv)
    kinds = available_kinds(inputs)
    return request.param, inputs, {k: make_figure(k, inputs) for k in kinds}


def panels(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def legend_labels(fig) -> list[list[str]]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [[t.get_text() for t in leg.get_texts()] for leg in legends]


def runs_drawn(ax):
    """(x, y) of every point drawn as a run, and of the triangles marking runs off the axis."""
    from matplotlib.collections import PathCollection

    points, marks = [], []
    for c in ax.collections:
        if not isinstance(c, PathCollection) or not len(c.get_offsets()):
            continue
        gid = str(c.get_gid())
        if gid.startswith("heldout:"):
            continue  # rings around runs drawn already
        (marks if gid.startswith("outside:") else points).append(np.asarray(c.get_offsets()))
    empty = np.empty((0, 2))
    return np.concatenate(points or [empty]), np.concatenate(marks or [empty])


def stretch(ax) -> float:
    """How many times the middle 90 % of what the panel draws its y-axis spans."""
    x_lo, x_hi = sorted(ax.get_xlim())
    values = [runs_drawn(ax)[0][:, 1]]
    for line in ax.lines:
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        if line.get_transform() == ax.transData:  # not axhline's axes-wide x
            y = y[(x >= x_lo) & (x <= x_hi)]
        values.append(y)
    v = np.concatenate(values)
    log = ax.get_yscale() == "log"
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    to = np.log10 if log else (lambda a: a)
    lo, hi = np.percentile(to(v), [5, 95])
    y_lo, y_hi = to(np.asarray(ax.get_ylim()))
    if hi - lo < 1e-6:  # one value (a constant R*): any axis holding it is bounded
        return 1.0 if y_lo <= lo <= y_hi else np.inf
    return float((y_hi - y_lo) / (hi - lo))


def test_legends_hold_at_most_eight_entries(drawn):
    name, _, figures = drawn
    for kind, fig in figures.items():
        for labels in legend_labels(fig):
            assert len(labels) <= MAX_LEGEND, (name, kind, labels)


def test_axes_are_bounded_to_the_law_and_the_bulk_of_the_runs(drawn):
    name, _, figures = drawn
    for kind, fig in figures.items():
        for ax in panels(fig):
            if not ax.axison or not (ax.lines or runs_drawn(ax)[0].size):
                continue
            assert stretch(ax) <= MAX_STRETCH, (name, kind, ax.get_title(), ax.get_ylim())


def test_runs_off_the_axis_are_marked_at_its_edge_and_counted(drawn):
    name, _, figures = drawn
    for kind, fig in figures.items():
        marked = 0
        for ax in panels(fig):
            points, marks = runs_drawn(ax)
            lo, hi = sorted(ax.get_ylim())
            off = (points[:, 1] < lo) | (points[:, 1] > hi)
            # each run out of view has a triangle at its x, inside the axis
            np.testing.assert_allclose(np.sort(marks[:, 0]), np.sort(points[off, 0]))
            assert np.all((marks[:, 1] > lo) & (marks[:, 1] < hi)), (name, kind)
            marked += len(marks)
        counted = [lab for labels in legend_labels(fig) for lab in labels if "off the axis" in lab]
        if marked:
            assert len(counted) == 1 and counted[0].startswith(f"{marked} run"), (name, kind)
        else:
            assert not counted, (name, kind)


def test_grids_have_no_gaps_and_every_loss_panel_a_curve_of_runs(drawn):
    name, inputs, figures = drawn
    for kind, fig in figures.items():
        assert all(ax.axison for ax in panels(fig)), (name, kind, "an empty panel")
    loss = figures["loss"]
    rows = inputs.rows
    cells = rows[rows["derived_tokens"] > 0].groupby(["n_params", "fresh_tokens"]).size()
    if len(panels(loss)) > 1 and (cells > 1).sum() >= 4:
        for ax in panels(loss):
            assert len(runs_drawn(ax)[0]) >= 2, (name, ax.get_title())


def test_a_muennighoff_shaped_table_shows_the_cells_with_most_runs(tmp_path):
    csv = _table("muennighoff-shaped", tmp_path)
    inputs = load_inputs(csv)
    rows = inputs.rows
    counts = rows.groupby(["n_params", "fresh_tokens"]).size()
    fig = make_figure("loss", inputs)
    shown = panels(fig)
    assert len(shown) == 20  # a full 5 × 4 grid
    runs = sorted((len(runs_drawn(ax)[0]) for ax in shown), reverse=True)
    # no cell left out holds more runs than the fewest shown
    assert runs == sorted(counts.to_numpy(), reverse=True)[:20]
    # the η figure: the fitted curves in view, the three planted outliers at the top edge
    eta = make_figure("eta", inputs)
    (ax,) = panels(eta)
    lo, hi = ax.get_ylim()
    assert -0.2 < lo < 0 and 1 < hi < 2.5
    (top,) = [c for c in ax.collections if c.get_gid() == "outside:above"]
    assert len(top.get_offsets()) == len(shapedtables.OUTLIER_ETA)
    (labels,) = legend_labels(eta)
    assert any(lab.startswith("3 runs off the axis") for lab in labels)
