"""The fit's encoding of a law: log-space parameter vectors, and log L for a batch of them.

The fit works on vectors of log-space parameters (E = e^e, A = e^a, B = e^b, K = e^k, as in
the CD paper's and Chinchilla's fits), not on Law objects; this module converts between the
two. What a vector holds, in which order, and how log L and its gradient are computed for
thousands of vectors at once, each law form declares (cdlaw.laws; docs/law.md lists the
vectors). `form` is a law's name or its LawForm.
"""

from __future__ import annotations

import numpy as np

from cdlaw.law import Law
from cdlaw.laws import as_law_form
from cdlaw.laws.form import Rows


def fit_vector_names(form, strategies) -> list[str]:
    """Public names of a fit vector's entries, as fit.json's ci95 / bootstrap_params use."""
    return as_law_form(form).fit_vector_names(strategies)


def fit_vector_to_public(form, strategies, theta) -> np.ndarray:
    """Log-space fit vector(s) → public values (E, A, B, K, R* exponentiated)."""
    decl = as_law_form(form)
    theta = np.array(theta, dtype=float)
    for j, name in enumerate(decl.fit_vector_names(strategies)):
        if decl.is_log(name):
            theta[..., j] = np.exp(theta[..., j])
    return theta


def fit_vector_from_public(form, strategies, values) -> np.ndarray:
    """The inverse of fit_vector_to_public."""
    decl = as_law_form(form)
    values = np.array(values, dtype=float)
    for j, name in enumerate(decl.fit_vector_names(strategies)):
        if decl.is_log(name):
            values[..., j] = np.log(values[..., j])
    return values


def law_from_public_vector(form, strategies, values, source: str = "") -> Law:
    """A Law from one public-valued vector in fit_vector_names order (e.g. a bootstrap row)."""
    decl = as_law_form(form)
    names = decl.fit_vector_names(strategies)
    p = dict(zip(names, (float(v) for v in values), strict=True))
    # a tied parameter (one value for every strategy) is stored under each strategy
    per = {
        s: {k: p[k] if k in decl.tied else p[f"{s}.{k}"] for k in decl.strategy_params}
        for s in strategies
    }
    return Law(decl, {k: p[k] for k in decl.shared}, per, source)


def law_to_public_vector(law: Law, strategies) -> list[float]:
    """A Law's public values in fit_vector_names order (strategies in the given order)."""
    decl = law.form_decl
    vals = [law.params[k] for k in decl.shared]
    vals += [law.strategy_params(strategies[0])[k] for k in decl.tied]
    vals += [law.strategy_params(s)[k] for s in strategies for k in decl.untied]
    return [float(v) for v in vals]


def law_to_fit_vector(law: Law, strategies) -> np.ndarray:
    """The log-space fit vector of a Law (strategies in the given order)."""
    return fit_vector_from_public(law.form_decl, strategies, law_to_public_vector(law, strategies))


def batched_log_loss(form, theta, logN, logD, ratio, strategy_slices):
    """log L for S fit vectors at n rows at once, and its vector–Jacobian product.

    theta: (S, P) log-space fit vectors. logN, logD, ratio = D′/D: (n,).
    strategy_slices: one slice of rows per strategy, in the fit vector's strategy order;
    rows outside every slice have D′ = 0 (sorting rows by strategy makes these views).
    Returns (logL (S, n), vjp) with vjp(w (S, n)) = Σ_i w_si ∂logL_si/∂theta_s (S, P):
    the form's analytic one, or numerical differences of its loss if it declares none.
    """
    rows = Rows(np.asarray(logN), np.asarray(logD), np.asarray(ratio), tuple(strategy_slices))
    return as_law_form(form).batched_log_loss(theta, rows)
