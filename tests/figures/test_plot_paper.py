"""`cdlaw plot` for papers: TrueType fonts, provenance in the file, --no-title, --caption,
--dpi, --style, --json, mathtext labels and the figures' own words.

Every check reads back what was written (PDF bytes, PNG text chunks, SVG text) or the
matplotlib objects drawn, on the synthetic runs of tests/helpers/plotdata.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import plotdata
import pytest
from matplotlib.mathtext import MathTextParser

from cdlaw.figures.inputs import load_inputs
from cdlaw.figures.output import FigureOptions
from cdlaw.figures.plot import make_figure, plot
from cdlaw.system.errors import BadInput


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return plotdata.write_runs(tmp_path_factory.mktemp("paper"))


@pytest.fixture(scope="module")
def inputs(runs):
    return load_inputs(runs)


def png_text(path) -> dict:
    from PIL import Image

    with Image.open(path) as im:
        return dict(im.text)


def test_pdf_embeds_truetype_fonts_never_type3(runs, tmp_path):
    # rstar has plain text and mathtext (R*, ρ, σ, log₁₀): both kinds of glyph
    paths = plot(runs, ["rstar"], tmp_path, "pdf")
    for path in paths:
        pdf = path.read_bytes()
        fonts = re.findall(rb"/Subtype\s*/(\w+)", pdf)
        assert b"Type3" not in fonts, path.name
        assert b"CIDFontType2" in fonts or b"TrueType" in fonts, (path.name, set(fonts))
        # and the provenance in the document info
        assert b"/Subject" in pdf and b"/Creator (cdlaw " in pdf


def test_png_metadata_holds_the_provenance_even_without_title_or_footer(runs, tmp_path):
    options = FigureOptions(title=False, caption="")
    (path,) = plot(runs, ["residuals"], tmp_path, "png", options=options)
    meta = png_text(path)
    assert meta["Title"] == "Residuals: the fit against every run"
    assert meta["Description"].startswith("fit: cd law · n_rows 72 (53 used) · rmse_log")
    assert f"source {runs}" in meta["Description"]
    assert meta["Software"].startswith("cdlaw ")


def test_no_title_and_caption_change_the_drawn_text_only(runs, tmp_path):
    title = "Residuals: the fit against every run"
    (plain,) = plot(runs, ["residuals"], tmp_path / "a", "svg")
    options = FigureOptions(title=False, caption="Figure 3. Residuals of the CD fit.")
    (paper,) = plot(runs, ["residuals"], tmp_path / "b", "svg", options=options)
    a, b = plain.read_text(), paper.read_text()
    # matplotlib writes each drawn text as an SVG comment before its glyphs
    assert f"<!-- {title} -->" in a and f"<!-- {title} -->" not in b
    assert "<!-- fit: cd law" in a and "<!-- fit: cd law" not in b
    assert "<!-- Figure 3. Residuals of the CD fit. -->" in b
    # the metadata keeps both
    for text in (a, b):
        assert f"<dc:title>{title}</dc:title>" in text
        assert "<dc:description>fit: cd law" in text


def test_a_hidden_title_leaves_no_gap(inputs):
    from cdlaw.figures.output import dress

    tops = []
    for options in (FigureOptions(), FigureOptions(title=False)):
        fig = make_figure("residuals", inputs)
        provenance = dress(fig, options)
        fig.canvas.draw()
        tops.append(max(ax.get_position().y1 for ax in fig.axes))
        assert provenance["title"] == "Residuals: the fit against every run"
    # constrained layout gives the hidden title no room: the panels move up into it
    assert tops[1] > tops[0] + 0.02


def test_dpi_sets_the_png_resolution(runs, tmp_path):
    from PIL import Image

    (low,) = plot(runs, ["rstar"], tmp_path / "lo", "png", options=FigureOptions(dpi=75))
    (high,) = plot(runs, ["rstar"], tmp_path / "hi", "png", options=FigureOptions(dpi=300))
    with Image.open(low) as a, Image.open(high) as b:
        assert b.size[0] == pytest.approx(4 * a.size[0], rel=0.01)
    for bad in (0.0, -3.0, float("nan"), 1e6):
        with pytest.raises(BadInput, match="--dpi must be a number from 10 to 2400"):
            plot(runs, ["rstar"], tmp_path / "bad", "png", options=FigureOptions(dpi=bad))
    assert not (tmp_path / "bad").exists()


def test_style_by_name_or_file(runs, tmp_path):
    from PIL import Image

    (dark,) = plot(
        runs, ["eta"], tmp_path / "d", "png", options=FigureOptions(style="dark_background")
    )
    with Image.open(dark) as im:
        assert max(im.convert("RGB").getpixel((2, 2))) < 30  # the style's black figure
    style = tmp_path / "paper.mplstyle"
    style.write_text("figure.facecolor: 0.5\n")
    (grey,) = plot(runs, ["eta"], tmp_path / "g", "png", options=FigureOptions(style=str(style)))
    with Image.open(grey) as im:
        assert im.convert("RGB").getpixel((2, 2)) == (128, 128, 128)
    # the style is undone afterwards: the next figure is white again
    (white,) = plot(runs, ["eta"], tmp_path / "w", "png")
    with Image.open(white) as im:
        assert im.convert("RGB").getpixel((2, 2)) == (255, 255, 255)


def test_cli_paper_options_json_and_bad_style(runs, tmp_path):
    def run(*args):
        cmd = [sys.executable, "-m", "cdlaw", "plot", str(runs), *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        return done.returncode, done.stdout, " ".join(done.stderr.split())

    out = tmp_path / "figs"
    code, stdout, stderr = run(
        "--kind", "residuals", "--format", "pdf", "--out", str(out), "--no-title",
        "--caption", "", "--dpi", "200", "--style", "grayscale", "--json",
    )  # fmt: skip
    assert code == 0, stderr
    got = json.loads(stdout)  # nothing but JSON on stdout
    assert got == {"written": [str(out / "residuals.pdf")], "format": "pdf"}
    pdf = (out / "residuals.pdf").read_bytes()
    assert pdf[:5] == b"%PDF-" and b"/Type3" not in pdf

    bad = tmp_path / "bad"
    code, stdout, stderr = run("--style", "seaborn-papr", "--out", str(bad))
    assert code == 2 and stdout == "" and "Traceback" not in stderr
    assert "--style 'seaborn-papr' is neither a matplotlib style name" in stderr
    assert stderr.count(".") <= 3  # one sentence (plus "v0_8" style names)
    assert not bad.exists()
    code, _, stderr = run("--dpi", "lots", "--out", str(bad))
    assert code == 2 and "--dpi" in stderr and not bad.exists()


# ---------------------------------------------------------------------------------------
# the figures' own words
# ---------------------------------------------------------------------------------------


def test_rstar_formula_and_labels_are_mathtext(inputs):
    fig = make_figure("rstar", inputs)
    title = fig.get_suptitle()
    assert title.startswith(r"$R^* = K\,(D/N)^{\rho}\,N^{\sigma}$")
    parser = MathTextParser("path")
    parser.parse(title.split(":")[0])  # raises on bad mathtext
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
    assert labels[0].startswith("$R^*$")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    lead = [t for t in legend if r"\log_{10}" in t and r"R^*_{\mathrm{best}}" in t]
    assert lead  # the right panel's shading: the leader's margin over the runner-up
    parser.parse(lead[0][lead[0].index("$") : lead[0].rindex("$") + 1])
    fig.canvas.draw()  # mathtext renders


def test_frontier_budget_ticks_are_powers_of_ten(inputs):
    fig = make_figure("frontier", inputs)
    fig.canvas.draw()
    ax_l = [ax for ax in fig.axes if ax.axison][3]
    ticks = [t.get_text() for t in ax_l.get_xticklabels() if t.get_text()]
    assert len(ticks) >= 3
    for t in ticks:
        assert re.fullmatch(r"\$\\mathdefault\{(\d(\.\d+)?\\times)?10\^\{\d+\}\}\$", t), t
    assert not [t for t in ticks if "e1" in t or "e2" in t]


def test_curves_axis_names_both_losses(inputs):
    fig = make_figure("curves", inputs)
    axes = [ax for ax in fig.axes if ax.axison]
    for ax in axes:
        label = ax.get_ylabel()
        assert "val" in label and "train" in label and "(nats/token)" in label
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "training loss (faint)" in legend and "final validation loss" in legend
    assert "validation loss, repetition" in legend
    # the faint lines are the training loss, the marked ones validation
    run_id, m = next(iter(inputs.metrics.items()))
    (train,) = fig.findobj(lambda a: a.get_gid() == f"train:{run_id}")
    np.testing.assert_allclose(train.get_ydata(), m["train_loss"])
    assert train.get_alpha() < 0.5


def test_frontier_shades_model_sizes_outside_the_fitted_runs_both_ways(inputs):
    """A plan below the smallest fitted size extrapolates as one above the largest does."""
    from matplotlib.patches import Polygon, Rectangle

    fig = make_figure("frontier", inputs)
    ax_n = next(ax for ax in fig.axes if ax.axison)
    lo, hi = inputs.fit["data_range"]["n_params"]
    spans = [p.get_extents().transformed(ax_n.transData.inverted()) for p in ax_n.patches
             if isinstance(p, (Polygon, Rectangle))]  # fmt: skip
    shaded = [(b.y0, b.y1) for b in spans]
    n = np.concatenate([line.get_ydata() for line in ax_n.get_lines()])
    for value in n[(n < lo * 0.99) | (n > hi * 1.01)]:
        assert any(y0 <= value <= y1 for y0, y1 in shaded), (value, shaded)
    assert (n < lo).any() or (n > hi).any()  # the test draws some plan outside
