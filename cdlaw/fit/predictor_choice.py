"""Which predictor of a task forecasts (docs/downstream.md, "Choosing a predictor"): each one
fitted again on the smaller sizes and checked on the larger ones held out, more than one
way where the sizes allow, and the bounded default kept unless another is better beyond
the noise.

    checks = held_out_checks(N, ratio, final)          # list[Check]: what each holds out
    chosen, why = choose(missed, usable, noise_sd, checks, sizes)

- **The checks.** The largest size held out and predicted from the rest; with four sizes or
  more, the two largest held out and predicted from the smaller ones alone, a longer
  extrapolation; and, with three ratios of tokens per parameter or more, the runs of the
  highest ratio held out at every size, predicted from the shorter runs (the models a
  ladder is built to predict are trained longer per parameter than any of its runs). Each
  leaves runs of at least MIN_FIT_SIZES sizes and two ratios to fit. One check on one size
  picks a predictor on a few runs at one N; a choice that must hold over several is less
  often a coin toss that fails a decade further.
- **The bounded default** (DEFAULTS): the OLMo model ladder's two steps through the task's
  own loss where the table has its bits per byte (Bhagia et al. 2024, arXiv 2412.04403),
  else through the validation loss, else the direct fit. Another predictor replaces it only
  when its held-out error, paired run by run over every check, is lower by more than
  TIE_SE standard errors of the difference and by more than the task's noise (its
  step-to-step scatter, cdlaw.fit.task_noise): a gain inside the noise is not a gain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cdlaw.fit.predictor_fits import DEFAULTS, RATIO_TOL

MIN_FIT_SIZES = 2  # a check refits every predictor on at least this many sizes
TIE_SE = 2.0  # a gain within this many standard errors of the paired difference is a tie


@dataclass(frozen=True)
class Check:
    """One held-out check: the runs it holds out, and which rows it fits."""

    label: str  # what it holds out, in words
    key: float  # the smallest N (by size) or the lowest ratio (by ratio) held out
    by: str  # "size" | "ratio"

    def held_out(self, N: np.ndarray, ratio: np.ndarray) -> np.ndarray:
        """Bool per row: the rows (checkpoints with their runs) this check holds out."""
        if self.by == "size":
            return N >= self.key
        return ratio >= self.key / (1 + RATIO_TOL)


def held_out_checks(N, ratio, final) -> list[Check]:
    """The checks the runs allow (module doc): by size, the largest and then the two largest
    sizes; by ratio, the highest ratio of tokens per parameter."""
    N, ratio, final = (np.asarray(v) for v in (N, ratio, final))
    sizes = np.unique(N[final])
    out = [
        Check(
            ("N = " if k == 1 else "N ≥ ") + f"{sizes[-k]:.3g} held out", float(sizes[-k]), "size"
        )
        for k in (1, 2)
        if len(sizes) - k >= MIN_FIT_SIZES
    ]
    groups = _ratio_levels(ratio[final])
    if len(groups) >= 3:
        top = groups[-1]
        kept = final & (ratio < top / (1 + RATIO_TOL))
        if len(np.unique(N[kept])) >= MIN_FIT_SIZES:
            out.append(Check(f"{top:.3g} tokens per parameter held out", top, "ratio"))
    return out


def _ratio_levels(ratio: np.ndarray) -> list[float]:
    """The lowest ratio of each group of ratios within RATIO_TOL of their neighbours."""
    levels: list[float] = []
    for r in np.sort(ratio):
        if not levels or r > levels[-1] * (1 + RATIO_TOL):
            levels.append(float(r))
    return levels


def checks_text(checks: list[Check]) -> str:
    """The checks in words: "N = 1.3e+09 held out; N ≥ 7.6e+08 held out"."""
    return "; ".join(c.label for c in checks)


def choose(
    missed: dict[str, np.ndarray],
    usable: list[str],
    noise: float | None,
    checks: list[Check],
    sizes: int,
) -> tuple[str | None, str]:
    """The predictor to forecast with and why. `missed`: per checked predictor, |predicted −
    observed| of every run held out by every check, aligned (NaN where it could not
    predict); `usable`: the predictors fitted to every run; `noise`: the task's noise
    (None: unknown); `sizes`: how many sizes the runs have."""
    default = next((p for p in DEFAULTS if p in usable), None)
    if default is None:
        return (usable[0], "the only predictor that fits") if usable else (None, "")
    if not checks:
        return default, (
            f"the bounded default: {sizes} size{'s' if sizes != 1 else ''} of runs and too few "
            f"ratios of tokens per parameter to hold any out (a check needs {MIN_FIT_SIZES + 1} "
            "sizes, or 3 ratios)"
        )
    where = checks_text(checks)
    if default not in missed:  # it fits every run but could not be checked
        # Nothing measures the default here, so nothing shows another better beyond the
        # noise: a predictor checked with a large error is no safer than one not checked.
        # The default stays; the others' points still widen its band (credible), and their
        # held-out errors are in the table beside it.
        return default, (
            f"the bounded default: it cannot be fitted without the largest sizes, so no check "
            f"({where}) can show another better"
        )
    best, gain_best, said = default, 0.0, ""
    for p, m in missed.items():
        if p == default:
            continue
        d = missed[default] - m
        d = d[np.isfinite(d)]
        if not len(d):
            continue
        gain = float(d.mean())
        se = float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else math.inf
        floor = max(TIE_SE * se if math.isfinite(se) else 0.0, noise or 0.0)
        if len(d) == 1 and noise is None:
            continue  # one run and no measure of noise: nothing says a gain is real
        if gain > floor and gain > gain_best:
            best, gain_best = p, gain
            said = (
                f"a held-out error lower than {default}'s by {gain:.3g} over {len(d)} "
                f"run{'s' if len(d) > 1 else ''} held out ({where}), beyond the noise "
                f"({_noise_words(se, noise)})"
            )
    if best != default:
        return best, said
    return default, (
        f"the bounded default: no other predictor's held-out error is lower beyond the "
        f"noise ({where})"
    )


def credible(fits: dict, chosen: str, noise: float | None) -> list[str]:
    """The predictors other than `chosen` that a band takes in and the spread counts:
    fitted, and, where both were checked, with a held-out error at most twice the chosen
    one's plus twice the noise (a predictor the checks found far worse widens nothing)."""
    ref = fits[chosen].heldout_error if chosen in fits else None
    out = []
    for p, f in fits.items():
        if p == chosen or not f.ok:
            continue
        if ref is not None and f.heldout_error is not None:
            if f.heldout_error > 2 * ref + 2 * (noise or 0.0):
                continue
        out.append(p)
    return out


def _noise_words(se: float, noise: float | None) -> str:
    parts = []
    if math.isfinite(se):
        parts.append(f"{TIE_SE:g} standard errors of the paired difference, {TIE_SE * se:.2g}")
    if noise is not None:
        parts.append(f"the task's noise, {noise:.2g}")
    return "; ".join(parts)
