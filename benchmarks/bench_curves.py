"""The curve laws measured on Luo et al. 2025's 27 published loss curves (docs/results.md).

    python benchmarks/bench_curves.py half     DIR   # final loss from the first half
    python benchmarks/bench_curves.py prior    DIR   # the gain prior: per-curve full fits
    python benchmarks/bench_curves.py protocol DIR   # the authors' protocol (joint fit)
    python benchmarks/bench_curves.py export   DIR --curve 400M_cosine_72000 --out log.csv
                                                      # its first half as a W&B export
    python benchmarks/bench_curves.py ladder   FILE  # OLMo ladder runs, governed from half

DIR holds `<size>_<schedule>.csv` (step, lr, loss: training loss every 128 steps after a
2,160-step linear warmup to 3e-4; github.com/thu-yao-01-luo/MultiPowerLaw,
loss_curve_repo/).

half: each curve cut at half its steps, its planned schedule (its own lr column, the
warmup before it) known; cdlaw's continuation (cdlaw.govern.continuation) predicts the
final loss: the mean of the losses logged in the last 1% of the steps, predicted at the
same steps. Leave one size out: the gain prior of each curve, and Tissue et al.'s memory
per decay step (MEMORY_PER_DECAY), are fitted on the other two sizes' curves (`prior`),
never its own; `--shipped` uses the shipped constant instead. Reports the relative error
and whether the 95% band holds the final loss.
prior: each curve fitted whole by each law without a prior; the gain's mean and sd; and
for each curve whose decay is 10× longer than Tissue et al.'s 1,000-step memory, the
memory that fits it best, as a share of its decay steps (their median over the two larger
sizes: the shipped constant, as the memory grows with size).
export: one curve's first half written as a W&B history export would hold it
(train/global_step, throughput/total_tokens at an assumed 2^20 tokens per step,
train/loss, optim/learning_rate_group0, W&B's own _step and _runtime), for `cdlaw govern`
as a user would run it (docs/govern.md's figure).
ladder: FILE is a model ladder's evaluations (Bhagia et al. 2024, arXiv 2412.04403:
columns label, n_params, fresh_tokens, tokens_trained, loss; github.com/allenai/OLMo-ladder):
each run's validation loss read to half its tokens, governed by `cdlaw govern --json` as a
user would (--schedule cosine --final-lr-ratio 0.1, --warmup over N tokens, --planned-tokens
its final tokens, --batch-tokens 2^20: assumptions, not read from the runs); the planned
end's error and whether its band holds the final loss.
protocol: the seven multi-power parameters fitted jointly on cosine_24000,
constant_24000 and wsdcon_9 (relative least squares, α, C, β, γ searched, L0, A, B
solved), the other six schedules predicted; mean and worst |relative error| over their
points, as the authors report.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cdlaw.govern import continuation as cont  # noqa: E402
from cdlaw.govern.lr_plan import file_plan  # noqa: E402
from cdlaw.govern.schedule_laws import (  # noqa: E402
    LAWS,
    MEMORY_PER_DECAY,
    TISSUE,
    TISSUE_MOMENTUM,
    GainPrior,
    annealing,
    decay_steps,
    fit_law,
    multipower_sum,
    tissue_area,
    tissue_momentum,
)

SIZES = ("25M", "100M", "400M")
TRAIN = ("cosine_24000", "constant_24000", "wsdcon_9")
CUT = 0.5  # the share of its steps each curve is read to
TAIL = 0.01  # the final loss: the mean over the last 1% of the steps
SPREAD_FLOOR = 1 / 3  # the prior's sd: at least this share of its mean


def read(folder: Path) -> dict[tuple[str, str], pd.DataFrame]:
    out = {}
    for f in sorted(folder.glob("*_*.csv")):
        size, sched = f.stem.split("_", 1)
        out[(size, sched)] = pd.read_csv(f)
    if not out:
        raise SystemExit(f"no <size>_<schedule>.csv in {folder}")
    return out


def schedule(df: pd.DataFrame, tmp: Path):
    """The curve's planned schedule as a user would give it: a file of step and lr, its
    warmup (from lr 0 at step 0) included."""
    rows = pd.concat([pd.DataFrame({"step": [0], "lr": [0.0]}), df[["step", "lr"]]])
    path = tmp / "schedule.csv"
    rows.to_csv(path, index=False)
    return file_plan(path, None, None)


def full_gains(curves, tmp: Path, per_decay: float = MEMORY_PER_DECAY) -> pd.DataFrame:
    """Every curve that anneals fitted whole by each law, no prior: its gain."""
    rows = []
    for (size, sched), df in curves.items():
        plan = schedule(df, tmp)
        steps = df.step.to_numpy(int)
        if not (np.diff(plan.lr[steps[0] :]) < 0).any():
            continue  # a constant lr: the gain is not in the curve
        s1 = np.cumsum(plan.lr)[steps - 1]
        momentum = tissue_momentum(plan.lr, per_decay)
        for law in LAWS:
            x = annealing(law, plan.lr, steps, momentum)
            fit = fit_law(law, s1, x, df.loss.to_numpy(float), plan.peak, momentum=momentum)
            rows.append({"size": size, "schedule": sched, "law": law, "gain": fit.gain})
    return pd.DataFrame(rows)


MEMORIES = np.geomspace(100, 30_000, 31)  # steps: the grid the best memory is read off


def memories(curves, tmp: Path) -> pd.DataFrame:
    """Each curve whose decay is 10× longer than the paper's memory, fitted whole by
    Tissue et al.'s law at each memory of MEMORIES: the best one, per decay step."""
    rows = []
    for (size, sched), df in curves.items():
        plan = schedule(df, tmp)
        decay = decay_steps(plan.lr)
        if decay < 10 / (1 - TISSUE_MOMENTUM):
            continue
        steps, loss = df.step.to_numpy(int), df.loss.to_numpy(float)
        s1 = np.cumsum(plan.lr)[steps - 1]
        rms = []
        for memory in MEMORIES:
            x = tissue_area(plan.lr, 1 - 1 / memory)[steps - 1]
            fit = fit_law(TISSUE, s1, x, loss, plan.peak, momentum=1 - 1 / memory)
            rms.append(float(np.sqrt(np.mean((fit.loss(s1, x) / loss - 1) ** 2))))
        best = float(MEMORIES[int(np.argmin(rms))])
        rows.append({"size": size, "schedule": sched, "decay": decay, "memory": best,
                     "per_decay": best / decay})  # fmt: skip
    return pd.DataFrame(rows)


def priors_from(gains: pd.DataFrame) -> dict[str, GainPrior]:
    """Per law: the mean gain and its sd over the curves, the sd at least SPREAD_FLOOR of
    the mean."""
    out = {}
    for law, g in gains.groupby("law").gain:
        mean = float(g.mean())
        out[law] = GainPrior(mean, max(float(g.std(ddof=1)), SPREAD_FLOOR * mean))
    return out


def half(curves, tmp: Path, refits: int, shipped: bool = False) -> pd.DataFrame:
    mem = memories(curves, tmp)
    per_decay = {
        size: MEMORY_PER_DECAY if shipped else float(mem[mem["size"] != size].per_decay.median())
        for size in SIZES
    }
    gains = {size: full_gains(curves, tmp, per_decay[size]) for size in SIZES}
    rows = []
    for (size, sched), df in curves.items():
        t0 = time.time()
        plan = schedule(df, tmp)
        steps, loss = df.step.to_numpy(int), df.loss.to_numpy(float)
        last = int(steps[-1])
        seen = steps <= CUT * last
        tail = steps >= (1 - TAIL) * last
        target = float(loss[tail].mean())
        g = gains[size]
        priors = priors_from(g[g["size"] != size])
        c = cont.fit_continuation(steps[seen], loss[seen], plan.lr, plan.peak, priors=priors,
                                  refits=refits, per_decay=per_decay[size])  # fmt: skip
        point, lo, hi = c.predict_at(plan.lr, steps[tail])
        by_law = {
            law: float(np.mean(f.loss(np.cumsum(plan.lr)[steps[tail] - 1],
                                      annealing(law, plan.lr, steps[tail], c.momentum))))
            for law, f in c.fits.items()
        }  # fmt: skip
        rows.append(
            {
                "size": size,
                "schedule": sched,
                "final": target,
                "predicted": float(point.mean()),
                "lo": float(lo[-1]),
                "hi": float(hi[-1]),
                **{f"err_{law}": v / target - 1 for law, v in by_law.items()},
                "annealed": c.annealed,
                "per_decay": per_decay[size],
            }
        )
        print(f"  {size} {sched}: {time.time() - t0:.1f}s", file=sys.stderr)
    out = pd.DataFrame(rows)
    out["error"] = out.predicted / out.final - 1
    out["covered"] = (out.lo <= out.final) & (out.final <= out.hi)
    return out


def half_table(df: pd.DataFrame) -> str:
    lines = [
        "| size | schedule | final | predicted | 95% band | error | " + " | ".join(LAWS) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(LAWS),
    ]
    for r in df.itertuples():
        laws = " | ".join(f"{getattr(r, 'err_' + law) * 100:+.2f}%" for law in LAWS)
        lines.append(
            f"| {r.size} | {r.schedule} | {r.final:.4f} | {r.predicted:.4f} | "
            f"[{r.lo:.4f}, {r.hi:.4f}]{'' if r.covered else ' ✗'} | {r.error * 100:+.2f}% | {laws} |"
        )
    laws = " | ".join(f"{df['err_' + law].abs().mean() * 100:.2f}%" for law in LAWS)
    lines.append(
        f"| **all** | 27 | | | **{df.covered.mean():.0%} hold** | "
        f"**{df.error.abs().mean() * 100:.2f}%** | {laws} |"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# protocol: the seven parameters fitted jointly on three curves
# ---------------------------------------------------------------------------------------


def _design(curves, nl, plans):
    alpha, logC, beta, gamma = nl
    X, Y = [], []
    for df, plan in zip(curves, plans, strict=True):
        steps = df.step.to_numpy(int)
        s1 = np.cumsum(plan.lr)[steps - 1]
        x = multipower_sum(plan.lr, steps, (math.exp(logC), beta, gamma))
        X.append(np.column_stack([np.ones_like(s1), s1 ** (-alpha), -x]))
        Y.append(df.loss.to_numpy(float))
    return np.vstack(X), np.concatenate(Y)


def _linear(curves, nl, plans):
    from scipy.optimize import lsq_linear

    X, Y = _design(curves, nl, plans)
    p = lsq_linear(X / Y[:, None], np.ones_like(Y), bounds=(0.0, np.inf)).x
    return p, X @ p / Y - 1


def protocol(curves, tmp: Path) -> pd.DataFrame:
    from scipy.optimize import least_squares

    rows = []
    for size in SIZES:
        train = [curves[(size, s)] for s in TRAIN]
        plans = [schedule(df, tmp) for df in train]
        best = None
        for start in ([0.3, 0.0, 0.5, 0.3], [0.6, 2.0, 0.5, 0.6], [0.5, -1.0, 1.0, 0.5]):
            r = least_squares(lambda nl, t=train, p=plans: _linear(t, nl, p)[1], start,
                              bounds=([0.01, -8, 0.05, -0.5], [3, 8, 3, 1.5]), max_nfev=200)  # fmt: skip
            if best is None or r.cost < best.cost:
                best = r
        assert best is not None
        lin, _ = _linear(train, best.x, plans)
        for (s, sched), df in curves.items():
            if s != size or sched in TRAIN:
                continue
            plan = schedule(df, tmp)
            X, Y = _design([df], best.x, [plan])
            err = np.abs(X @ lin / Y - 1)
            rows.append({"size": size, "schedule": sched, "mean": err.mean(), "worst": err.max(),
                         "final": (X @ lin)[-1] / Y[-1] - 1})  # fmt: skip
        print(f"  {size}: α {best.x[0]:.3f}, C {math.exp(best.x[1]):.3g}, β {best.x[2]:.3f}, "
              f"γ {best.x[3]:.3f}; L0 {lin[0]:.3f}, A {lin[1]:.3f}, B {lin[2]:.4g}", file=sys.stderr)  # fmt: skip
    return pd.DataFrame(rows)


LADDER_BATCH = 2**20  # tokens per step assumed for the ladder's runs


def ladder(file: Path, tmp: Path) -> pd.DataFrame:
    import json
    import subprocess

    evals = pd.read_csv(file)
    rows = []
    for (label, fresh), run in evals.groupby(["label", "fresh_tokens"]):
        run = run.sort_values("tokens_trained")
        end = float(run.tokens_trained.iloc[-1])
        half = run[run.tokens_trained <= CUT * end]
        log = tmp / f"{label}_{int(fresh)}.csv"
        pd.DataFrame({"tokens": half.tokens_trained, "val_loss": half.loss}).to_csv(
            log, index=False
        )
        warmup = round(float(run.n_params.iloc[0]) / LADDER_BATCH)
        args = ["govern", str(log), "--json", "--schedule", "cosine", "--warmup", str(warmup),
                "--final-lr-ratio", "0.1", "--planned-tokens", str(end),
                "--batch-tokens", str(LADDER_BATCH)]  # fmt: skip
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['cdlaw', *sys.argv[1:]]; "
        )
        out = subprocess.run([sys.executable, "-c", code + "from cdlaw.cli import main; main()",
                              *args], capture_output=True, text=True, check=True)  # fmt: skip
        planned = next(o for o in json.loads(out.stdout)["options"] if o["name"] == "planned end")
        final = float(run.loss.iloc[-1])
        lo, hi = planned["loss_ci95"]
        rows.append({"run": label, "tokens": end, "final": final, "predicted": planned["loss"],
                     "error": planned["loss"] / final - 1, "covered": lo <= final <= hi})  # fmt: skip
    return pd.DataFrame(rows)


def export(df: pd.DataFrame, out: Path) -> None:
    half = df[df.step <= CUT * df.step.max()]
    pd.DataFrame(
        {
            "_step": np.arange(len(half)),
            "_runtime": half.step * 0.4,
            "train/global_step": half.step,
            "throughput/total_tokens": half.step * 2**20,
            "train/loss": half.loss,
            "optim/learning_rate_group0": half.lr,
        }
    ).to_csv(out, index=False)


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("half", "prior", "protocol", "export", "ladder"))
    ap.add_argument("--curve", default="400M_cosine_72000", help="export: <size>_<schedule>")
    ap.add_argument("folder", type=Path, help="the curves' folder (ladder: the ladder's CSV)")
    ap.add_argument("--refits", type=int, default=cont.REFITS)
    ap.add_argument("--shipped", action="store_true",
                    help="half: the shipped MEMORY_PER_DECAY, not the other sizes' median")  # fmt: skip
    ap.add_argument("--out", type=Path, help="write the rows as JSON here (export: the log)")
    a = ap.parse_args()
    t0 = time.time()
    if a.what == "ladder":
        with tempfile.TemporaryDirectory() as tmp:
            df = ladder(a.folder, Path(tmp))
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"mean |error| {df.error.abs().mean():.2%}, mean {df.error.mean():+.2%}, "
              f"band holds {df.covered.sum()} of {len(df)}")  # fmt: skip
        return
    curves = read(a.folder)
    if a.what == "export":
        size, sched = a.curve.split("_", 1)
        export(curves[(size, sched)], a.out or Path("log.csv"))
        return
    with tempfile.TemporaryDirectory() as tmp:
        if a.what == "prior":
            g = full_gains(curves, Path(tmp))
            print(g.pivot_table(index=["size", "schedule"], columns="law", values="gain"))
            for law, p in priors_from(g).items():
                print(f"{law}: GainPrior({p.mean:.3f}, {p.sd:.3f})")
            m = memories(curves, Path(tmp))
            print(m.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
            big = m[m["size"] != SIZES[0]]
            print(f"memory per decay step: median {m.per_decay.median():.3f}, "
                  f"over {' and '.join(SIZES[1:])} {big.per_decay.median():.3f}")  # fmt: skip
            df = g
        elif a.what == "half":
            df = half(curves, Path(tmp), a.refits, a.shipped)
            print(half_table(df))
        else:
            df = protocol(curves, Path(tmp))
            print(df.to_string(float_format=lambda v: f"{v * 100:.3f}%"))
            by = df.groupby("size").agg({"mean": "mean", "worst": "max"})
            print(by.to_string(float_format=lambda v: f"{v * 100:.3f}%"))
    if a.out:
        df.to_json(a.out, orient="records", indent=1)
    print(f"({time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
