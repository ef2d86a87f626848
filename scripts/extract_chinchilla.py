"""Rebuild examples/chinchilla-besiroglu.csv from the markers of Chinchilla's Figure 4 (left).

Hoffmann et al. 2022 (arXiv 2203.15556) plot every training run of their approach 3 in
Figure 4 (left): x = training FLOPs, y = model size, both log scales, and the final loss
only as the marker's colour, read off a colour bar. Besiroglu et al. 2024, "Chinchilla
scaling: a replication attempt" (arXiv 2404.10102, github.com/epoch-research/analyzing-
chinchilla, data_extraction.ipynb) extracted the 245 markers from an SVG of that figure.
This script repeats their reading from two files copied out of that SVG:

  chinchilla_fig4/markers.csv   each marker's centre (SVG user units, y pointing down)
                                and fill colour, in the SVG's order
  chinchilla_fig4/colorbar.png  the colour bar, the SVG's embedded 17 × 342 image

and writes the table cdlaw fits: n_params, fresh_tokens = FLOPs / (6 N), derived_tokens 0,
strategy "none", loss, flops. Run it from the repository root:

  python scripts/extract_chinchilla.py                 # writes examples/chinchilla-besiroglu.csv
  python scripts/extract_chinchilla.py --corrected-y-axis --out /tmp/corrected.csv

Needs only pandas and Pillow (matplotlib's dependency), both in cdlaw's base install.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

HERE = Path(__file__).resolve().parent / "chinchilla_fig4"
OUT = Path(__file__).resolve().parent.parent / "examples" / "chinchilla-besiroglu.csv"

# Axis calibration, in the SVG's user units: two ticks per log axis, as Besiroglu et al.
# read them. x: 10^18 and 10^21 FLOPs. y: 100B and 100M parameters.
X_TICKS = ((83.856, 1e18), (294.452, 1e21))
Y_TICKS = ((26.872, 100e9), (319.125, 100e6))
# The 100M tick as re-read later from the PDF (shape-of-code.com, 28 April 2024) and
# adopted in their notebook: N grows by 2 % (largest models) to 9 % (smallest). Their
# published fit (eq. 4, cdlaw's preset chinchilla-besiroglu) matches the first reading.
Y_TICKS_CORRECTED = ((26.872, 100e9), (322.703, 100e6))
# The colour bar: loss 5 at y = 26.872 and 2 at y = 332.671 (its tick marks), log scale;
# the image's top edge sits at y = 26 (its group's translate).
LOSS_TICKS = ((26.872, 5.0), (332.671, 2.0))
COLORBAR_TOP = 26.0


def log_axis(svg: np.ndarray, ticks) -> np.ndarray:
    """Data values of SVG coordinates on a log axis through two (coordinate, value) ticks."""
    (s0, v0), (s1, v1) = ticks
    return v0 * (v1 / v0) ** ((np.asarray(svg, float) - s0) / (s1 - s0))


def colour_to_loss(colorbar: Path) -> dict[str, float]:
    """The loss each colour of the bar stands for: the median loss of the pixel rows that
    show it, row r read at its top edge (COLORBAR_TOP + r), down the bar's middle column."""
    image = Image.open(colorbar).convert("RGB")
    column = image.width // 2
    rows = pd.DataFrame(
        {
            "colour": [
                "#{:02x}{:02x}{:02x}".format(*image.getpixel((column, r)))
                for r in range(image.height)
            ],
            "loss": log_axis(COLORBAR_TOP + np.arange(image.height), LOSS_TICKS),
        }
    )
    return rows.groupby("colour")["loss"].median().to_dict()


def extract(corrected_y_axis: bool = False, source: Path = HERE) -> pd.DataFrame:
    """The table of runs, one row per marker, in the SVG's order."""
    markers = pd.read_csv(source / "markers.csv")
    losses = colour_to_loss(source / "colorbar.png")
    unknown = sorted(set(markers["fill"]) - set(losses))
    if unknown:
        raise SystemExit(f"marker colours not on the colour bar: {', '.join(unknown)}")
    n_params = log_axis(markers["svg_y"], Y_TICKS_CORRECTED if corrected_y_axis else Y_TICKS)
    flops = log_axis(markers["svg_x"], X_TICKS)
    return pd.DataFrame(
        {
            "n_params": n_params,
            "fresh_tokens": flops / (6 * n_params),
            "derived_tokens": 0,
            "strategy": "none",
            "loss": markers["fill"].map(losses),
            "flops": flops,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"CSV to write (default {OUT})")
    parser.add_argument(
        "--corrected-y-axis",
        action="store_true",
        help="read N with the later, corrected 100M tick (not what the published fit used)",
    )
    args = parser.parse_args()
    table = extract(args.corrected_y_axis)
    table.to_csv(args.out, index=False, float_format="%.10g")
    print(f"wrote {len(table)} runs to {args.out}")


if __name__ == "__main__":
    main()
