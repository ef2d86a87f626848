"""Where a plan's law comes from: a preset name or a fit.json, with its bootstrap laws.

This module's one job is to turn what `--law` names (a preset such as `qin2026`, or the path
of a fit.json written by `cdlaw fit`) into the PlanningLaw that cdlaw.plan.planner plans with: the
law itself, the data range it was fitted on (so a plan can say when it extrapolates), and
the fit's bootstrap samples read back as laws (the plan's 95% band), with a note when they
cannot be used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from cdlaw.errors import BadInput
from cdlaw.law import PRESETS, SHARED_PARAMS, STRATEGY_PARAMS, Law

# The range each published law was fitted on, where the paper states it, so a plan can
# say when it extrapolates (the same check a fit.json's "data_range" gives).
PRESET_DATA_RANGE = {
    # Hoffmann et al. 2022, §3: "over 400 language models ranging from 70 million to over
    # 16 billion parameters"; Besiroglu et al. 2024 refit the same runs.
    "chinchilla-hoffmann": {"n_params": [70e6, 16e9]},
    "chinchilla-besiroglu": {"n_params": [70e6, 16e9]},
    # The CD paper's named sizes, 14M to 600M (SPEC §3).
    "qin2026": {"n_params": [14e6, 600e6]},
}


# ---------------------------------------------------------------------------------------
# Where a law comes from: a preset or a fit.json (with its data range and bootstrap).
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanningLaw:
    """A law plus what its fit knows beyond the point estimate."""

    name: str  # preset name or fit.json path
    law: Law
    data_range: dict | None = None
    bootstrap: tuple[Law, ...] = ()  # one law per bootstrap sample: the 95% band
    notes: tuple[str, ...] = ()  # why there is no band, if the fit has samples we cannot use


def load_law(spec: str) -> PlanningLaw:
    """A preset name (`qin2026`, ...) or the path of a fit.json written by `cdlaw fit`."""
    if spec in PRESETS:
        return PlanningLaw(spec, PRESETS[spec], PRESET_DATA_RANGE.get(spec))
    path = Path(spec)
    if not path.is_file():
        valid = ", ".join(PRESETS)
        if path.suffix == ".json" or "/" in spec or path.exists():
            raise BadInput(
                f"--law {spec}: no such fit file; pass the fit.json that `cdlaw fit` wrote "
                f"or a preset ({valid})."
            )
        raise BadInput(f"--law {spec!r} is not a preset ({valid}) nor an existing fit.json path.")
    try:
        fit = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInput(f"{path}: not a readable JSON fit file ({e}).") from None
    if not isinstance(fit, dict) or not isinstance(fit.get("params"), dict):
        raise BadInput(
            f'{path}: not a fit (no "params" object with E, A, B, alpha, beta); '
            "make one with `cdlaw fit RUNS_DIR`."
        )
    missing = [k for k in SHARED_PARAMS if k not in fit["params"]]
    if missing:
        raise BadInput(
            f'{path}: "params" lacks {", ".join(missing)}; a fit has E, A, B, alpha and beta.'
        )
    try:
        law = Law.from_dict({**fit, "source": fit.get("source") or str(path)})
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"{path}: not a usable fit: {str(e).strip(chr(39))}.") from None
    bad = [k for k in SHARED_PARAMS if not math.isfinite(getattr(law, k))]
    if bad:
        raise BadInput(f"{path}: parameter {bad[0]} is not a finite number.")
    samples, notes = bootstrap_laws(fit, law)
    return PlanningLaw(str(path), law, fit.get("data_range"), tuple(samples), tuple(notes))


def bootstrap_laws(fit: dict, law: Law) -> tuple[list[Law], list[str]]:
    """The fit's bootstrap parameter vectors as laws, named by fit["bootstrap_params"].

    Names are those of fit.json (cdlaw.law.fit_vector_names): E, A, B, alpha, beta,
    "<strategy>.<param>" (K, rho, sigma; rstar_d) and un-prefixed parameters every strategy
    shares (muennighoff's rstar_n); log-space names (e, a, b, "<strategy>.k", log_E, log_K) are read as logs, as
    the fit works in log space (SPEC §2). A parameter a vector does not carry keeps its
    point estimate. Returns ([], [why]) when the vectors cannot be read.
    """
    vectors = fit.get("bootstrap") or []
    if not vectors:
        return [], []
    names = fit.get("bootstrap_params")
    if not names:
        return [], ["the fit's bootstrap samples carry no bootstrap_params names: no 95% band"]
    out = []
    for vector in vectors:
        if len(vector) != len(names):
            return [], [
                f"bootstrap vectors have {len(vector)} values for {len(names)} names: no 95% band"
            ]
        shared = {k: getattr(law, k) for k in SHARED_PARAMS}
        strategies = {s: dict(p) for s, p in law.strategies.items()}
        for name, value in zip(names, vector, strict=True):
            if not _assign(shared, strategies, law.form, str(name), value):
                return [], [f"bootstrap parameter {name!r} is not one cdlaw knows: no 95% band"]
        try:
            sample = Law(law.form, **shared, strategies=strategies, source="bootstrap")
        except (TypeError, ValueError):
            continue
        if all(math.isfinite(v) for v in shared.values()):
            out.append(sample)
    return out, []


def _assign(shared: dict, strategies: dict, form: str, name: str, value) -> bool:
    value = float("nan") if value is None else float(value)
    log_names = {"e": "E", "a": "A", "b": "B", "log_E": "E", "log_A": "A", "log_B": "B"}
    if name in SHARED_PARAMS:
        shared[name] = value
        return True
    if name in log_names:
        shared[log_names[name]] = math.exp(value)
        return True
    if name in STRATEGY_PARAMS[form]:  # shared by every strategy (muennighoff's rstar_n)
        for p in strategies.values():
            p[name] = value
        return bool(strategies)
    strategy, _, param = name.partition(".")
    if strategy not in strategies:
        return False
    if param in STRATEGY_PARAMS[form]:
        strategies[strategy][param] = value
        return True
    if param in ("k", "log_K", "logK") and "K" in STRATEGY_PARAMS[form]:
        strategies[strategy]["K"] = math.exp(value)
        return True
    return False


def _as_planning_law(law: Law) -> PlanningLaw:
    """A bare Law: a preset keeps its name and published range; any other is just itself."""
    preset = next((name for name, p in PRESETS.items() if p == law), None)
    return load_law(preset) if preset else PlanningLaw(law.source or law.form, law)
