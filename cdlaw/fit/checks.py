"""Checks before fitting: are the fit's options valid, and can the table identify the law.

One job: refuse (BadInput) a fit that cannot work before any optimising starts, saying
what is wrong or lacking — an unknown law or method, a non-positive Huber delta, too
few model sizes, token counts or derived-token runs to pin the parameters down — and
return warnings where the rows pin them only just. cdlaw.fit.procedure calls these; they know
nothing of the search.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cdlaw import law as lawlib
from cdlaw.errors import BadInput
from cdlaw.fit.table import describe_range
from cdlaw.units import plain

METHODS = ("joint", "staged")


def check_options(law, method, huber_delta, n_starts, drop_outliers, bootstrap, naive):
    if law not in lawlib.FORMS:
        raise BadInput(f"--law must be one of {', '.join(lawlib.FORMS)}, not {law!r}")
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
    if naive and law != "chinchilla":
        raise BadInput("--naive counts derived tokens as fresh, which only --law chinchilla does")


def check_identifiable(
    rows: pd.DataFrame, form: str, method: str, strategies, n_params: int
) -> list[str]:
    """Refuse (BadInput) when the rows cannot pin the parameters down, saying what is
    lacking; return warnings where they pin them only just."""
    what = {"cd": "the cd law", "muennighoff": "the muennighoff law", "chinchilla": "Chinchilla"}[
        form
    ]
    warnings = []
    base, which = rows, "rows"
    if form != "chinchilla" and method == "staged":  # stage 1 sees only D′ = 0 rows
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
    plain = form == "chinchilla" or method == "staged"
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
        d = rows[(rows["strategy"] == s) & (rows["derived_tokens"] > 0)]
        if form == "muennighoff":
            if len(d) < 2:
                raise BadInput(
                    f"strategy {s} has {len(d)} run(s) with derived tokens; its R*_D needs at least 2"
                )
            continue
        X = np.column_stack([np.ones(len(d)), np.log(d["tokens_per_param"]), np.log(d["n_params"])])
        if len(d) < 3 or np.linalg.matrix_rank(X, tol=1e-6) < 3:
            n_sizes = d["n_params"].nunique()
            lack = (
                f"only {n_sizes} model size(s)"
                if n_sizes < 2
                else f"only {d['tokens_per_param'].nunique()} tokens-per-param value(s) per size"
            )
            raise BadInput(
                f"strategy {s}'s runs with derived tokens cover {lack} ({len(d)} rows), so its K, "
                "rho and sigma cannot be told apart; add runs at ≥ 2 sizes and ≥ 2 tokens-per-param "
                "ratios, or fit --law muennighoff (one R* per strategy)"
            )
    if len(rows) < n_params + 2:
        raise BadInput(
            f"the table has {len(rows)} usable rows but {what} with these strategies has "
            f"{n_params} parameters; a fit needs at least {n_params + 2} rows"
        )
    return warnings
