"""The governor's figure (`cdlaw govern --figure`): the run's curve, its predicted
continuation with the 95% band, and where G_t meets λ.

Left: loss against the tokens t at which the run would start its cooldown. The observed
curve (its calibration points marked), the stable phase ahead as the calibrated law
predicts it, and the loss the run would end at if it started its cooldown at t, with its
band. Right: G_t against t with λ(C) as a level line; the crossing is marked on both.
Reads Decision.to_dict() (cdlaw.govern.governor), so it needs nothing but the dict.
"""

from __future__ import annotations

import numpy as np

from cdlaw.figures import style


def govern_figure(decision: dict):
    """The two panels for one decision (the dict of `cdlaw govern --json`)."""
    c = {k: np.asarray(v, dtype=float) for k, v in decision["curve"].items()}
    if "planned_loss" in c:
        return _curve_law_figure(decision, c)
    fig, axes = style.new_figure(1, 2, panel=(4.2, 3.0))
    ax, gx = axes[0, 0], axes[0, 1]
    now = decision["tokens_now"]
    f = decision["decay_frac"]
    ahead = c["stable_tokens"] >= now
    ax.plot(c["observed_tokens"], c["observed_loss"], color=style.BLACK, linewidth=0.8,
            label="observed loss", gid="observed")  # fmt: skip
    ax.plot(c["calibration_tokens"],
            np.interp(c["calibration_tokens"], c["observed_tokens"], c["observed_loss"]),
            linestyle="", marker="o", markersize=3, color=style.BLACK,
            label="calibration points", gid="calibration")  # fmt: skip
    ax.plot(c["stable_tokens"][ahead], c["stable_loss"][ahead], color=style.BLUE,
            linestyle="--", linewidth=1.0, label="stable phase ahead (predicted)",
            gid="stable")  # fmt: skip
    ax.plot(c["stable_tokens"], c["cooled_loss"], color=style.VERMILLION, linewidth=1.2,
            label="final loss if it cools down from t", gid="cooled")  # fmt: skip
    ax.fill_between(c["stable_tokens"], c["cooled_lo"], c["cooled_hi"], color=style.VERMILLION,
                    alpha=0.18, linewidth=0, label="95% band", gid="band")  # fmt: skip
    cross = decision.get("cross_tokens")
    for a in (ax, gx):
        a.axvline(now, color="0.5", linewidth=0.8, linestyle=":", gid="now")
        if cross is not None:
            a.axvline(cross, color=style.GREEN, linewidth=1.0, gid="cross")
    gx.plot(c["stable_tokens"], c["gain"], color=style.BLUE, linewidth=1.2,
            label="G_t (cooling at t)", gid="gain")  # fmt: skip
    gx.axhline(decision["threshold"], color=style.ORANGE, linewidth=1.0,
               label="λ(C), the frontier's −dL*/dC", gid="threshold")  # fmt: skip
    gx.set_yscale("log")
    for a in (ax, gx):
        a.set_xscale("log")
        style.log_axis(a, "x")
        a.set_xlabel("tokens t: where the cooldown starts (tokens)", fontsize=8)
        a.tick_params(labelsize=7)
    ax.set_ylabel("loss (nats/token)", fontsize=8)
    gx.set_ylabel("nats per FLOP", fontsize=8)
    lo = np.nanmin(c["cooled_lo"])
    hi = np.nanpercentile(c["observed_loss"], 90)
    if np.isfinite(lo) and np.isfinite(hi) and hi > lo:
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = gx.get_legend_handles_labels()
    handles += [*h2, Line2D([], [], color="0.5", linestyle=":"),
                Line2D([], [], color=style.GREEN)]  # fmt: skip
    labels += [*l2, "now (last stable point)", "G_t meets λ"]
    action = decision["action"] + (
        f" → {decision['switch_to']}" if decision.get("switch_to") else ""
    )
    caption = (
        f"{decision['source']}: N {style.size(decision['n_params'])}, {decision['strategy']}, "
        f"cooldown the last {f:.0%}; law {decision['law']} + offset "
        f"{decision['offset']:+.3f} nats; budget {decision['budget_flops']:.3g} FLOPs"
    )
    return style.finish(fig, f"Governor: {action}", caption, handles, labels)


def _curve_law_figure(decision: dict, c: dict):
    """A decision under the run's curve law. Left: the observed loss, the points the laws
    were fitted to, the predicted continuation along the planned schedule with its band,
    the planned end (its band as a bar), and the loss the run would end at if it cooled
    down from t (with its band). Right: G_t against λ(C) (with a budget)."""
    steps = decision.get("tokens_now") is None
    unit = "steps" if steps else "tokens"
    fig, axes = style.new_figure(1, 2, panel=(4.2, 3.0))
    ax, gx = axes[0, 0], axes[0, 1]
    ax.plot(c["observed_tokens"], c["observed_loss"], color="0.55", linewidth=0.6,
            label="observed loss", gid="observed")  # fmt: skip
    ax.plot(c["calibration_tokens"], c["calibration_loss"], color=style.BLACK, linewidth=1.0,
            label="fitted points (binned)", gid="calibration")  # fmt: skip
    ax.plot(c["planned_tokens"], c["planned_loss"], color=style.BLUE, linestyle="--",
            linewidth=1.2, label="predicted, planned schedule", gid="planned")  # fmt: skip
    ax.fill_between(c["planned_tokens"], c["planned_lo"], c["planned_hi"], color=style.BLUE,
                    alpha=0.15, linewidth=0, label="its 95% band", gid="planned_band")  # fmt: skip
    ax.plot(c["stable_tokens"], c["cooled_loss"], color=style.VERMILLION, linewidth=1.2,
            label="final loss if the run ends at E", gid="cooled")  # fmt: skip
    ax.fill_between(c["stable_tokens"], c["cooled_lo"], c["cooled_hi"], color=style.VERMILLION,
                    alpha=0.15, linewidth=0, gid="band")  # fmt: skip
    planned = next((o for o in decision["options"] if o["name"] == "planned end"), None)
    if planned is not None:
        x = planned["end_step"] if steps else planned["end_tokens"]
        lo, hi = planned["loss_ci95"]
        ax.errorbar([x], [planned["loss"]], yerr=[[planned["loss"] - lo], [hi - planned["loss"]]],
                    fmt="o", color=style.BLUE, markersize=4, capsize=3, label="planned end",
                    gid="planned_end")  # fmt: skip
    now = decision["steps_now"] if steps else decision["tokens_now"]
    cross = decision.get("cross_tokens")
    for a in (ax, gx):
        a.axvline(now, color="0.5", linewidth=0.8, linestyle=":", gid="now")
        if cross is not None and not steps:
            a.axvline(cross, color=style.GREEN, linewidth=1.0, gid="cross")
    if decision.get("threshold") is not None and np.isfinite(c["gain"]).any():
        gx.plot(c["stable_tokens"], c["gain"], color=style.BLUE, linewidth=1.2,
                label="G (ending at E)", gid="gain")  # fmt: skip
        gx.axhline(decision["threshold"], color=style.ORANGE, linewidth=1.0,
                   label="λ(C), the frontier's −dL*/dC", gid="threshold")  # fmt: skip
        if np.nanmin(c["gain"]) > 0:
            gx.set_yscale("log")
        gx.set_ylabel("nats per FLOP", fontsize=8)
    else:
        gx.text(0.5, 0.5, "no budget: G_t is not weighed", ha="center", va="center",
                transform=gx.transAxes, fontsize=8)  # fmt: skip
    for a in (ax, gx):
        a.set_xlabel(f"{unit} (seen, or where the run ends)", fontsize=8)
        a.tick_params(labelsize=7)
    ax.set_ylabel("loss (nats/token)", fontsize=8)
    lo = np.nanmin(np.concatenate([c["planned_lo"], c["cooled_lo"]]))
    hi = np.nanpercentile(c["observed_loss"], 75)
    if np.isfinite(lo) and np.isfinite(hi) and hi > lo:
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.1 * (hi - lo))
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = gx.get_legend_handles_labels()
    handles += [*h2, Line2D([], [], color="0.5", linestyle=":"), Line2D([], [], color=style.GREEN)]
    labels += [*l2, "now (last point)", "G meets λ"]
    caption = f"{decision['source']}: {decision['schedule']}; {decision['model_reason']}"
    if decision.get("budget_flops") is not None:
        caption += f"; budget {decision['budget_flops']:.3g} FLOPs, law {decision['law']}"
    return style.finish(fig, f"Governor: {decision['action']}", caption, handles, labels)
