"""Checks before fitting: are the fit's options valid, and can the table identify the law.

One job: refuse (BadInput) a fit that cannot work before any optimising starts, saying
what is wrong or lacking — an unknown law or method, a non-positive Huber delta, too
few model sizes, token counts or derived-token runs to pin the parameters down — and
return warnings where the rows pin them only just. cdlaw.fit.procedure calls these; they know
nothing of the search.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from cdlaw.fit.table import describe_range
from cdlaw.laws import LAWS, as_law_form
from cdlaw.laws.form import LawForm
from cdlaw.system.errors import BadInput
from cdlaw.units import plain

METHODS = ("joint", "staged")
# Fewer parameters or fresh tokens than this in any run means the table gives N or D in
# other units (millions, billions): no model or run is that small. A power law fits such
# numbers as well, but its A, B and every plan read from it are off by the unit's power.
SMALLEST_PLAUSIBLE = 1000.0
# No tokenizer has a million tokens, so no run's loss exceeds a uniform guess over them;
# a table above it holds something else (perplexity, exp of the loss).
LARGEST_LOSS = math.log(1e6)
# Memory a fit takes per row of its table, beyond the table as read: its copies through
# --select, the problem's arrays, the rows table (measured: 1.78 GB peak for 2,000,000
# rows, of which 0.47 GB the table; docs/results.md), and one byte per row and bootstrap
# refit (the resample counts).
BYTES_PER_ROW = 1000
BYTES_PER_ROW_AND_REFIT = 1


def check_options(law, method, huber_delta, n_starts, drop_outliers, bootstrap, naive):
    """law: a law's name (or a LawForm, for a law declared outside cdlaw.laws.LAWS)."""
    if not isinstance(law, LawForm) and law not in LAWS:
        raise BadInput(f"--law must be one of {', '.join(LAWS)}, not {law!r}")
    if method not in METHODS:
        raise BadInput(f"--method must be one of {', '.join(METHODS)}, not {method!r}")
    if huber_delta is not None and not (np.isfinite(huber_delta) and huber_delta > 0):
        raise BadInput(f"--huber-delta must be a positive number, not {plain(huber_delta)}")
    if int(n_starts) < 1:
        raise BadInput(f"--starts must be at least 1, not {plain(n_starts)}")
    if int(drop_outliers) < 0:
        raise BadInput(f"--drop-outliers must be 0 or more, not {plain(drop_outliers)}")
    if int(bootstrap) < 0:
        raise BadInput(f"--bootstrap must be 0 or more, not {plain(bootstrap)}")
    if naive and as_law_form(law).uses_derived:
        which = " or ".join(f"--law {f.name}" for f in LAWS.values() if not f.uses_derived)
        raise BadInput(f"--naive counts derived tokens as fresh, which only {which} does")


def check_memory(n_rows: int, bootstrap: int, name: str) -> None:
    """Refuse (BadInput), before any work, a table too large to fit in the memory free here:
    the rows, the memory they would need and what is free, in one sentence."""
    free = available_memory()
    need = n_rows * (BYTES_PER_ROW + BYTES_PER_ROW_AND_REFIT * int(bootstrap))
    if free is None or need <= free:
        return
    refits = f" with {int(bootstrap)} bootstrap refits" if bootstrap else ""
    fewer = ", or fewer refits (--bootstrap)" if bootstrap else ""
    raise BadInput(
        f"{name} has {n_rows:,} rows, and fitting them{refits} needs about "
        f"{need / 1e9:.1f} GB of memory where {free / 1e9:.1f} GB is free; fit a random "
        f"sample of the rows{fewer}"
    )


def available_memory() -> int | None:
    """Bytes of memory free for this process: the system's available memory, or the
    container's limit less its use where that is lower (Linux); None where unknown."""
    free = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit.isdigit() and free is not None:
            free = min(free, int(limit) - used)
    except (OSError, ValueError):
        pass
    return free


def check_columns(table: pd.DataFrame, form: str | LawForm, name: str) -> None:
    """Refuse (BadInput) a table that lacks a column the law form reads (LawForm.columns)."""
    form = as_law_form(form)
    missing = [c for c in form.columns if c not in table.columns]
    if missing:
        raise BadInput(
            f"{name} has no {', '.join(missing)} column{'s' if len(missing) > 1 else ''}, "
            f"which {form.label} needs"
        )


def fixed_values(rows: pd.DataFrame, form: str | LawForm) -> dict[str, float]:
    """The parameters the form takes from the table (LawForm.fixed), by name."""
    return {k: float(fn(rows)) for k, fn in as_law_form(form).fixed.items()}


def check_identifiable(
    rows: pd.DataFrame, form: str | LawForm, method: str, strategies, n_params: int
) -> list[str]:
    """Refuse (BadInput) when the rows cannot pin the parameters down, saying what is
    lacking; return warnings where they pin them only just."""
    form = as_law_form(form)
    what = form.label
    warnings = []
    base, which = rows, "rows"
    if form.uses_derived and method == "staged":  # stage 1 sees only D′ = 0 rows
        base, which = rows[rows["derived_tokens"] == 0], "one-epoch (D′ = 0) rows"
    sizes = np.unique(base["n_params"])
    if len(sizes) < 2:
        raise BadInput(
            f"the table's {which} have {len(sizes)} model size(s) ({describe_range(sizes)}); "
            f"{what} needs at least 2 distinct n_params to fit alpha (3 to tell E, A and alpha "
            "apart)"
        )
    if len(sizes) == 2:
        warnings.append(
            f"only 2 model sizes ({describe_range(sizes)}): E, A and alpha are not separately "
            "identified; trust E + A/N^alpha at those sizes (model_floor), not extrapolations in N"
        )
    tokens = np.unique(base["effective_fresh" if "effective_fresh" in base else "fresh_tokens"])
    # Derived-token rows vary the effective data too, so a joint fit with them copes with 2.
    plain = not form.uses_derived or method == "staged"
    if len(tokens) < 2:
        raise BadInput(
            f"the table's {which} have {len(tokens)} distinct fresh_tokens value(s) "
            f"({describe_range(tokens)}); {what} needs at least 2 to fit beta"
            + (" (3 to tell B and beta apart)" if plain else "")
        )
    if len(tokens) == 2 and plain:
        warnings.append(
            f"only 2 fresh_tokens values ({describe_range(tokens)}) in the {which}: B and beta "
            "are not separately identified"
            + ("; --method joint also uses the derived-token rows" if method == "staged" else "")
        )
    for s in strategies:
        if form.identify is None:  # the form's per-strategy parameters need nothing special
            break
        d = rows[(rows["strategy"] == s) & (rows["derived_tokens"] > 0)]
        lacking = form.identify(
            s, d["n_params"].to_numpy(float), d["tokens_per_param"].to_numpy(float)
        )
        if lacking:
            raise BadInput(lacking)
    if len(rows) < n_params + 2:
        raise BadInput(
            f"the table has {len(rows)} usable rows but {what} with these strategies has "
            f"{n_params} parameters; a fit needs at least {n_params + 2} rows"
        )
    return warnings


def unit_warnings(rows: pd.DataFrame) -> list[str]:
    """Warnings when the smallest N or D is below SMALLEST_PLAUSIBLE, or a loss above
    LARGEST_LOSS: a table that gives N in millions or D in billions (57.3 for 57.3M), or
    perplexity for loss, fits without complaint, but its constants and plans are then in
    those units, not in parameters, tokens and nats."""
    warnings = []
    for col, what, unit in (("n_params", "N", "parameters"), ("fresh_tokens", "D", "tokens")):
        smallest = float(rows[col].min()) if len(rows) else np.inf
        if smallest < SMALLEST_PLAUSIBLE:
            warnings.append(
                f"{what} is as small as {smallest:g} {unit}, which no run is: if the table "
                f"gives {col} in millions or billions, write them as counts (or as 57M, "
                "1.4B), since the fitted A and B and every plan are in the table's units"
            )
    worst = float(rows["loss"].max()) if len(rows) else 0.0
    if worst > LARGEST_LOSS:
        warnings.append(
            f"a loss is as high as {worst:g} nats per token, above ln 10⁶ = {LARGEST_LOSS:.3g}, "
            "a uniform guess over a million tokens: if the column holds perplexity, give its "
            "natural log"
        )
    return warnings
