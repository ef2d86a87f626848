"""The stable-to-cooled relation: what a WSD run's loss drops to if it cools down now.

A run in the stable phase of WSD sits above the loss it would end at after its cooldown
(the law describes the cooled-down loss: every run of a sweep is measured at its end).
cdlaw's own sweeps measure the relation at every branch point: a trunk's stable-phase loss
S at the fork and the branch's loss K after its cooldown (the last decay_frac of its
tokens, the lr falling linearly to final_lr_frac of the peak). The relation kept
(docs/govern.md, measured in docs/results.md) is a ratio,

    K = ρ · S,

ρ fitted over every (trunk, branch) pair of a sweep (`fit_cooldown`), and again over the
pairs of each peak lr the sweep trained with (a run at one of them uses that lr's ρ:
held out, that predicts K better, docs/results.md); `sd` is the spread of K − ρ·S, which
widens every band the governor gives. DEMO is fitted on the demo sweep (sweeps/demo.toml);
another setup (lr, batch, decay) should fit its own from its own sweep (`cdlaw govern
--cooldown-from RUNS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cdlaw.units import format_number

NEAR_N = 2.0  # a run within this factor of the pairs' sizes is one the ratio was measured near


@dataclass(frozen=True)
class Cooldown:
    """K = ratio · S: the cooled-down loss from the stable-phase loss at the same fork."""

    ratio: float
    sd: float  # nats: the spread of K − ρ·S over the pairs
    source: str  # the sweep it was fitted on
    pairs: int = 0  # (trunk, branch) pairs it was fitted on
    # (peak lr, ρ, sd, pairs) for each lr of the sweep with at least 3 pairs
    by_lr: tuple[tuple[float, float, float, int], ...] = ()
    lr: float | None = None  # the peak lr this relation is for (None: every lr)
    # the smallest and largest N of the runs it was fitted on (None: not recorded)
    n_params: tuple[float, float] | None = None

    def for_lr(self, lr: float | None) -> Cooldown:
        """The relation at a run's peak lr: that lr's ρ when the sweep trained at it (within
        1%), else the whole sweep's."""
        if lr is None:
            return self
        for at, ratio, sd, n in self.by_lr:
            if abs(at - lr) <= 0.01 * at:
                return Cooldown(ratio, sd, self.source, n, self.by_lr, at, self.n_params)
        return self

    def unlike(self, n_params: float, lr: float | None) -> list[str]:
        """Warnings for a run unlike the runs the relation was measured on: N more than
        NEAR_N× beyond their sizes, or a peak lr none of them trained at (the sweep's ρ
        then stands in). ρ is a setup's (lr, batch, decay): it says nothing of another."""
        said = []
        lo, hi = self.n_params or (0.0, math.inf)  # sizes not recorded: nothing to compare
        if not lo / NEAR_N <= n_params <= hi * NEAR_N:
            said.append(
                f"the stable-to-cooled ratio {self.ratio:.4g} was measured on runs of "
                f"{format_number(lo)}–{format_number(hi)} parameters ({self.source}) and this "
                f"run has {format_number(n_params)}: "
                "its cooldown may drop the loss by another share; --cooldown-from a WSD "
                "sweep of your own setup measures it"
            )
        known = [at for at, *_ in self.by_lr]
        if lr is not None and known and self.lr is None:
            said.append(
                f"the run's peak lr {lr:.3g} is none of those the ratio was measured at "
                f"({', '.join(f'{at:g}' for at in known)}): the whole sweep's ρ is used"
            )
        return said

    def cooled(self, stable_loss):
        """K for a stable-phase loss S (broadcasts)."""
        return self.ratio * np.asarray(stable_loss, dtype=float)

    def stable(self, cooled_loss):
        """S for a cooled-down loss K: the inverse, to draw the stable phase ahead."""
        return np.asarray(cooled_loss, dtype=float) / self.ratio

    def to_dict(self) -> dict:
        return {
            "ratio": self.ratio,
            "sd": self.sd,
            "source": self.source,
            "pairs": self.pairs,
            "lr": self.lr,
            "n_params": None if self.n_params is None else list(self.n_params),
        }


def fit_ratio(stable_loss, cooled_loss) -> tuple[float, float]:
    """(ρ, sd): the log-space mean of K/S and the sd of K − ρ·S over the pairs."""
    s = np.asarray(stable_loss, dtype=float)
    k = np.asarray(cooled_loss, dtype=float)
    ratio = float(np.exp(np.mean(np.log(k / s))))
    resid = k - ratio * s
    sd = float(np.std(resid, ddof=1)) if len(resid) > 1 else float("nan")
    return ratio, sd


# Fitted on the demo sweep's WSD trunks and branches (54 pairs; docs/results.md, "The
# compute governor"): `fit_cooldown` on its runs folder.
DEMO = Cooldown(
    ratio=0.8242,
    sd=0.0705,
    source="sweeps/demo.toml",
    pairs=54,
    by_lr=((0.01, 0.8172, 0.0397, 18), (0.02, 0.8079, 0.0296, 18), (0.03, 0.8482, 0.0789, 18)),
    n_params=(26328.0, 200400.0),
)


def fit_cooldown(runs_dir) -> Cooldown:
    """The ratio fitted on a WSD sweep's (trunk, branch) pairs (cdlaw.govern.pairs);
    BadInput when the folder has fewer than 3."""
    from pathlib import Path

    from cdlaw.govern.pairs import cooldown_pairs
    from cdlaw.system.errors import BadInput

    pairs = cooldown_pairs(Path(runs_dir))
    if len(pairs) < 3:
        raise BadInput(
            f"{runs_dir} has {len(pairs)} run(s) whose stable-phase loss at the decay start "
            "can be read off a trunk; fitting the cooldown ratio needs 3: give the runs "
            "folder of a WSD sweep with share = true"
        )
    ratio, sd = fit_ratio(pairs["stable"], pairs["cooled"])
    by_lr = []
    for lr in sorted(set(pairs["lr"].to_numpy(float))):
        group = pairs[pairs["lr"] == lr]
        if len(group) >= 3:
            r, s = fit_ratio(group["stable"], group["cooled"])
            by_lr.append((float(lr), r, s, len(group)))
    sizes = pairs["n_params"].to_numpy(float)
    size_range = (float(sizes.min()), float(sizes.max()))
    return Cooldown(ratio, sd, str(runs_dir), len(pairs), tuple(by_lr), None, size_range)
