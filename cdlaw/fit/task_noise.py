"""How noisy a task's accuracy is, measured from the runs themselves, and whether the runs can
support a prediction of it (docs/downstream.md, "Noise").

    noise = task_noise(y, run, final, tokens, seed_groups)   # TaskNoise
    noise.sd, noise.items, noise.snr, noise.supported

- **Step-to-step noise** (the OLMo model ladder's screen: Bhagia et al. 2024, arXiv
  2412.04403, the standard deviation of a task's metric over the last checkpoints of a run):
  over the last LAST evaluations of each run, the standard deviation of one evaluation to
  the next, sd(y_i − y_{i−1})/√2 (each run's mean difference taken out), pooled over the
  runs. Differences leave out the rise of the metric along the run, which a plain
  standard deviation would count as noise. Only evaluations in the last END of a run's
  tokens count, and only runs with three of them or more: evaluations far apart differ by
  the curve of training, not noise.
- **Seed scatter**: where runs differ only in seed, the pooled standard deviation between
  them, what a rerun of the same configuration would score. Where both are measured the
  noise is the larger; where neither, it is unknown.
- **Resolution**: the metric is a share of some number of items; that number is read from
  the values (the least n for which every value is a whole count out of n, to the
  precision the values were stored at), and 1/n is the smallest step the metric can make.
  None for a mean over several item sets (an average over tasks, a macro-averaged suite).
- **Signal to noise** (after Heineman et al. 2025, arXiv 2508.13144, "Signal and Noise"):
  the rise of the metric over the final runs (largest minus smallest) over its noise.
  Below MIN_SNR the rise is a handful of noise steps: the link's slope, and any
  extrapolation of it, rests on noise, and the prediction is marked as not supported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

LAST = 10  # evaluations at the end of each run (the ladder's screen uses its last 10)
END = 0.2  # ... within the last fifth of the run's tokens
MIN_SNR = 10.0  # a rise over the runs of fewer noise steps than this cannot carry a prediction
MAX_ITEMS = 100_000  # the largest item count read from the values
_TOLERANCE = 2e-3  # |value·n − its nearest whole count|: float32 storage of n ≤ 10⁵ items


@dataclass(frozen=True)
class TaskNoise:
    """A task metric's noise. downstream.json "predictors"[].noise."""

    sd: float | None  # the noise: the larger of the two below where measured; None: unknown
    source: str  # "checkpoints" | "seeds" | "none": what sd was measured from
    evals: int  # the degrees of freedom (differences, or replicate groups) it rests on
    items: int | None  # the items the metric is a share of; None: not a share of one set
    signal: float  # the rise over the final runs: largest minus smallest value

    @property
    def resolution(self) -> float | None:
        """The smallest step the metric can make, 1/items."""
        return 1.0 / self.items if self.items else None

    @property
    def snr(self) -> float | None:
        return self.signal / self.sd if self.sd else None

    @property
    def supported(self) -> bool:
        """Whether the runs' rise stands out of the noise (True when the noise is unknown:
        nothing says otherwise)."""
        return self.snr is None or self.snr >= MIN_SNR

    def why_unsupported(self) -> str | None:
        """One sentence when the runs cannot support a prediction, else None."""
        if self.supported:
            return None
        return (
            f"the final runs rise by {self.signal:.3g}, only {self.snr:.3g}× its noise "
            f"{self.sd:.2g} (under {MIN_SNR:g}×): the link's slope rests on noise"
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "snr": self.snr, "supported": self.supported}

    @classmethod
    def from_dict(cls, d: dict) -> TaskNoise:
        sd = d.get("sd")
        return cls(
            None if sd is None else float(sd),
            str(d.get("source") or "none"),
            int(d.get("evals") or 0),
            None if d.get("items") is None else int(d["items"]),
            float(d.get("signal") or 0.0),
        )


def task_noise(
    y: np.ndarray,
    run: np.ndarray,
    final: np.ndarray,
    tokens: np.ndarray,
    seed_sd: tuple[float, int] | None = None,
) -> TaskNoise:
    """The noise of one metric: `y` per row (NaN where not scored), the run of each row,
    which rows are final, each row's tokens trained (NaN where unknown), and the seed
    scatter (sd, groups) of replicate runs when there are any."""
    ok = np.isfinite(y)
    fin = ok & final
    signal = float(np.ptp(y[fin])) if fin.any() else 0.0
    items = items_of(y[ok])
    measured = []
    sd, n = step_noise(y, run, final, tokens)
    if sd is not None:
        measured.append((sd, "checkpoints", n))
    if seed_sd is not None and seed_sd[1] > 0:
        measured.append((float(seed_sd[0]), "seeds", seed_sd[1]))
    if not measured:
        return TaskNoise(None, "none", 0, items, signal)
    sd, source, n = max(measured)
    return TaskNoise(sd, source, n, items, signal)


def step_noise(y, run, final, tokens) -> tuple[float | None, int]:
    """(sd of one evaluation to the next at the end of runs, degrees of freedom it rests on);
    (None, 0) where no run has three evaluations in the last END of its tokens."""
    ok = np.isfinite(y) & np.isfinite(tokens)
    sq, count = 0.0, 0
    for r in np.unique(run[ok & final]):
        m = np.flatnonzero(ok & (run == r))
        m = m[np.argsort(tokens[m], kind="stable")]
        end = tokens[m[-1]]
        m = m[tokens[m] >= (1 - END) * end][-LAST:]
        if len(m) < 3:  # one difference is a trend as much as noise
            continue
        d = np.diff(y[m])
        d -= d.mean()  # a steady rise along the run is a trend, not noise
        sq += float(np.sum(d * d))
        count += len(d) - 1
    if not count:
        return None, 0
    return math.sqrt(sq / count / 2.0), count


def items_of(values: np.ndarray) -> int | None:
    """The least number of items n ≤ MAX_ITEMS of which every value is a whole count, or
    None (fewer than 8 distinct values, too few to tell a count from chance; or none fits)."""
    v = np.unique(np.asarray(values, float))
    v = v[np.isfinite(v) & (v > 0) & (v < 1)]
    if len(v) < 8:
        return None
    n = np.arange(2, MAX_ITEMS + 1, dtype=float)
    for x in v:
        k = x * n
        n = n[np.abs(k - np.round(k)) < _TOLERANCE]
        if not len(n):
            return None
    return int(n[0])
