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

from dataclasses import dataclass

import numpy as np


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

    def for_lr(self, lr: float | None) -> Cooldown:
        """The relation at a run's peak lr: that lr's ρ when the sweep trained at it (within
        1%), else the whole sweep's."""
        if lr is None:
            return self
        for at, ratio, sd, n in self.by_lr:
            if abs(at - lr) <= 0.01 * at:
                return Cooldown(ratio, sd, self.source, n, self.by_lr, at)
        return self

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
)


def fit_cooldown(runs_dir) -> Cooldown:
    """The ratio fitted on a WSD sweep's (trunk, branch) pairs (cdlaw.govern.pairs);
    BadInput when the folder has fewer than 3."""
    from pathlib import Path

    from cdlaw.errors import BadInput
    from cdlaw.govern.pairs import cooldown_pairs

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
    return Cooldown(ratio, sd, str(runs_dir), len(pairs), tuple(by_lr))
