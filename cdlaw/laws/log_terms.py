"""log L = log(E + T_N + T_D) of the Chinchilla family and its gradient, for S fit vectors
at once: the pieces every form built on Chinchilla's terms shares (chinchilla, cd,
muennighoff). Each form brings its own model term T_N and its own log D_eff; these do the
rest.

    T3 = data_term(lDeff, b, beta)                     # T_D = e^(b − β·log D_eff)
    total, logL = log_sum(E, T2, T3)
    ...
    wt = floor_grad(w, total, E, g)                    # e column of g
    ...                                                # the model term's, from wt
    wp3 = data_grads(wt, T3, lDeff, g)                 # b, β columns (over wt)
    for j, sl, wR in through_rstar(wp3, dlogR, beta, rows.slices): ...   # ∂/∂log R*

Columns of a fit vector: 0 e, 1 a, 2 b, 3 α, 4 β (chinchilla.SHARED), then the form's own.
Everything broadcasts as (S, n) arrays: S fit vectors, n rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def data_term(lDeff: np.ndarray, b: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """T_D = exp(b − β·log D_eff) (S, n); b, beta (S, 1). Written in place of one array."""
    T3 = np.multiply(lDeff, -beta)
    T3 += b
    np.exp(T3, out=T3)
    return T3


def log_sum(E: np.ndarray, T2: np.ndarray, T3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E + T_N + T_D, its log), both (S, n); E (S, 1)."""
    total = T2 + T3
    total += E
    return total, np.log(total)


def floor_grad(w, total, E, g) -> np.ndarray:
    """Fill g's e column of Σ_i w_si ∂logL_si/∂θ_s; return wt = w/total, the weight every
    term's share takes (the model term's chain starts from it)."""
    wt = np.divide(w, total)
    g[:, 0] = wt.sum(axis=1) * E[:, 0]
    return wt


def data_grads(wt, T3, lDeff, g) -> np.ndarray:
    """Fill g's b and β columns; return wp3 = wt·T_D, the weight on log T_D that a form's
    own data parameters chain through. Written over wt: call it after wt's last other use."""
    wp3 = np.multiply(wt, T3, out=wt)
    g[:, 2] = wp3.sum(axis=1)
    g[:, 4] = -np.einsum("sn,sn->s", wp3, lDeff)
    return wp3


def through_rstar(wp3, dlogR, beta, slices) -> Iterator[tuple[int, slice, np.ndarray]]:
    """Per strategy j (its rows sl): the weight on log R* of each row, through
    −β·log D_eff, given ∂log D_eff/∂log R* (dlogR[j], from batched_log_effective_data)."""
    for j, sl in enumerate(slices):
        wR = np.multiply(wp3[:, sl], dlogR[j])
        wR *= -beta
        yield j, sl, wR
