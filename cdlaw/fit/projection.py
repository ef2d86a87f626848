"""Variable projection: the fit's search with the linear coefficients solved, not searched.

    projection = Projection.of(problem)            # None for a form without linear terms
    fun = projection.objective()                    # a BatchObjective over the other z
    Z = projection.complete(x)                      # full points, coefficients solved

A law such as L = E·1 + A·N^−α + B·D_eff^−β is a non-negative combination of terms
(LawForm.linear, LawForm.linear_terms): for given nonlinear parameters θ (α, β, each
strategy's K, ρ, σ) the coefficients c = (E, A, B) that fit the rows best are a
non-negative least-squares problem of three unknowns with a closed-form solution. The
search can then run over θ alone (Golub & Pereyra 1973), on the reduced objective

    F(θ) = ½ Σ_i ω_i (L_i − Φ_i(θ)·c*(θ))²,   ω_i = 1/L_i²,   c*(θ) = argmin_{c ≥ 0} of it,

least squares on relative residuals: ½ Σ r_i² to first order in the log residual r_i, the
fit's Huber objective wherever |r_i| ≤ δ. Its minima are where the fit's own objective is
then minimised from, in every parameter (cdlaw.fit.search), so the fit's optimum is the
Huber objective's own; F only decides where to look. By the envelope theorem
∂F/∂θ = ∂/∂θ of the same sum at fixed c*: the free coefficients make ∂F/∂c zero and the
others are zero, so the gradient costs one pass through the terms' VJP.

Every coordinate of the problem's z that is not a linear coefficient is searched; the
centring of cdlaw.fit.problem (a′ = a − α·mean log N) moves only the coefficients'
coordinates, so the nonlinear block of z maps to θ by itself.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from cdlaw.fit.optim import BatchObjective
from cdlaw.fit.problem import Problem, in_chunks

TINY = 1e-300  # a coefficient solved as 0 is stored at its lower bound


def solve_coefficients(G: np.ndarray, h: np.ndarray) -> np.ndarray:
    """argmin_{c ≥ 0} ½ c·G·c − h·c for S small problems at once: c (S, k).

    G (S, k, k) is the Gram matrix Σ ω Φ_j Φ_l, h (S, k) = Σ ω L Φ_j. Every active set is
    tried (2^k − 1 of them, each for all S at once): the solution is the feasible one with
    the lowest value. Columns are scaled to unit diagonal first, and a singular subset
    (two terms equal, as N^−α → 1 beside E's 1) is never feasible.
    """
    S, k = h.shape
    d = np.sqrt(np.maximum(np.einsum("sjj->sj", G), TINY))
    Gs = G / (d[:, :, None] * d[:, None, :])
    hs = h / d
    best_c = np.zeros((S, k))
    best_v = np.zeros(S)  # c = 0: value 0
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            idx = np.array(subset)
            c, ok = _solve_small(Gs[:, idx][:, :, idx], hs[:, idx])
            with np.errstate(all="ignore"):
                value = -0.5 * np.einsum("sj,sj->s", hs[:, idx], c)  # at the solution
            ok &= np.all(c >= 0, axis=1) & np.isfinite(value) & (value < best_v)
            if ok.any():
                best_v = np.where(ok, value, best_v)
                best_c[ok] = 0.0
                best_c[np.ix_(ok, idx)] = c[ok]
    return best_c / d


SINGULAR = 1e-12  # a unit-diagonal Gram matrix with a smaller determinant is singular


def _solve_small(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x with A·x = b for S unit-diagonal symmetric systems (S, m, m), and where A is not
    singular: by cofactors for m ≤ 3 (elementwise over S, no LAPACK call per system)."""
    m = b.shape[1]
    with np.errstate(all="ignore"):
        if m == 1:
            return b.copy(), np.ones(len(b), bool)
        if m == 2:
            g = A[:, 0, 1]
            det = 1.0 - g * g
            x = np.stack([b[:, 0] - g * b[:, 1], b[:, 1] - g * b[:, 0]], axis=1) / det[:, None]
            return x, np.abs(det) > SINGULAR
        if m == 3:
            adj = np.empty_like(A)
            for i in range(3):
                for j in range(3):
                    r = [x for x in range(3) if x != j]
                    c = [x for x in range(3) if x != i]
                    minor = (
                        A[:, r[0], c[0]] * A[:, r[1], c[1]] - A[:, r[0], c[1]] * A[:, r[1], c[0]]
                    )
                    adj[:, i, j] = minor if (i + j) % 2 == 0 else -minor
            det = np.einsum("sj,sj->s", A[:, 0, :], adj[:, :, 0])
            x = np.einsum("sij,sj->si", adj, b) / det[:, None]
            return x, np.abs(det) > SINGULAR
        ok = np.abs(np.linalg.det(A)) > SINGULAR
        safe = np.where(ok[:, None, None], A, np.eye(m))
        return np.linalg.solve(safe, b[:, :, None])[:, :, 0], ok


@dataclass(frozen=True)
class Projection:
    """A problem whose linear coefficients are solved: which z they are, which are searched.

    linear: the fit-vector (theta) indices of the coefficients' logs, in the order of the
    form's terms; free: the z indices searched (every other one).
    """

    problem: Problem
    linear: np.ndarray
    free: np.ndarray

    @classmethod
    def of(cls, problem: Problem) -> Projection | None:
        """The projection of a problem whose form declares linear terms; None otherwise, or
        where a coefficient is held fixed (LawForm.fixed)."""
        form = problem.form
        if form.linear_terms is None or not form.linear:
            return None
        names = form.fit_vector_names(problem.strategies)
        linear = np.array([names.index(n) for n in form.linear])
        if np.any(problem.lower[linear] == problem.upper[linear]):
            return None
        free = np.setdiff1d(np.arange(problem.n_params), linear)
        # theta's nonlinear entries must not read the coefficients' coordinates
        if np.any(problem.M[np.ix_(free, linear)] != 0):
            return None
        return cls(problem, linear, free)

    def _theta(self, x: np.ndarray) -> np.ndarray:
        """Fit vectors with the nonlinear entries of x (S, free) (coefficients left 0)."""
        z = np.zeros((len(x), self.problem.n_params))
        z[:, self.free] = x
        return self.problem.theta(z)

    def _solve(self, theta: np.ndarray):
        """The terms, and the coefficients fitted to them: (Phi (k, S, n), vjp, c (S, k))."""
        p = self.problem
        assert p.form.linear_terms is not None  # Projection.of checked
        Phi, vjp = p.form.linear_terms(theta, p.rows)
        L, w = p.losses, p.relative_weights
        wPhi = Phi * w
        G = np.einsum("jsn,lsn->sjl", wPhi, Phi)
        h = np.einsum("jsn,n->sj", wPhi, L)
        return Phi, vjp, solve_coefficients(G, h)

    def objective(self) -> BatchObjective:
        """F and its gradient over the free coordinates, for minimize_batched."""
        p = self.problem
        L, w = p.losses, p.relative_weights
        Mf = p.M[:, self.free]

        def work(x, f, g, sl):
            theta = self._theta(x[sl])
            Phi, vjp, c = self._solve(theta)
            res = L - np.einsum("jsn,sj->sn", Phi, c)
            wres = res * w
            f[sl] = 0.5 * np.einsum("sn,sn->s", wres, res)
            gtheta = vjp(-wres[None] * c.T[:, :, None])
            g[sl] = gtheta @ Mf

        def fun(x, idx):
            f = np.empty(len(x))
            g = np.empty_like(x)
            in_chunks(len(x), len(L), lambda sl: work(x, f, g, sl))
            return f, g

        return fun

    def complete(self, x: np.ndarray) -> np.ndarray:
        """Full points z (S, P) at the free coordinates x (S, free), their coefficients
        solved, inside the problem's bounds."""
        p = self.problem
        theta = self._theta(x)
        out = np.empty((len(x), p.n_params))

        def work(sl):
            _, _, c = self._solve(theta[sl])
            t = theta[sl].copy()
            t[:, self.linear] = np.log(np.maximum(c, TINY))
            out[sl] = p.z(t)

        in_chunks(len(x), len(p.y), work)
        return np.clip(out, p.lower, p.upper)
