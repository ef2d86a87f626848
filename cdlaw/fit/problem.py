"""The fit as an optimisation problem: its rows, centred coordinates, bounds and objective.

build_problem sorts a table's rows (D′ = 0 first, then each strategy's D′ > 0 rows as a
slice) and sets up the coordinates z the optimiser works in and their bounds; Problem
evaluates log L, the summed Huber loss of log residuals and its gradient for a batch of
starts (the BatchObjective that cdlaw.fit.optim minimises), and a diagonal preconditioner.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cdlaw.fit.optim import BatchObjective
from cdlaw.fit.threads import objective_pool, objective_threads


def huber(residual, delta):
    """Huber's loss: r²/2 inside ±δ, δ(|r| − δ/2) outside (scipy.special.huber)."""
    a = np.abs(residual)
    return np.where(a <= delta, 0.5 * residual**2, delta * (a - 0.5 * delta))


@dataclass(frozen=True)
class Problem:
    """The rows one fit sees, sorted so that each strategy's D′ > 0 rows are a slice.

    The optimiser works in centred coordinates z, with theta = M·z (theta is the
    log-space fit vector of cdlaw.law): the intercepts a, b, k are taken at the middle
    of the table (a' = a − α·mean log N, ...) so that a slope can move without dragging
    its intercept across the table. The objective is unchanged; L-BFGS converges in far
    fewer steps because the coordinates are no longer nearly collinear.
    """

    form: str
    strategies: tuple[str, ...]
    logN: np.ndarray
    logD: np.ndarray
    ratio: np.ndarray  # D′/D (0 on D′ = 0 rows)
    y: np.ndarray  # log observed loss
    row_ids: np.ndarray
    slices: tuple[slice, ...]
    M: np.ndarray  # theta = M @ z
    lower: np.ndarray  # bounds on z
    upper: np.ndarray

    @property
    def n_params(self) -> int:
        return self.M.shape[0]

    def theta(self, z) -> np.ndarray:
        return np.asarray(z) @ self.M.T

    def z(self, theta) -> np.ndarray:
        return np.linalg.solve(self.M, np.asarray(theta, dtype=float).T).T

    def log_loss(self, z) -> np.ndarray:
        from cdlaw.fit.vector import batched_log_loss

        z = np.atleast_2d(z)
        logL, _ = batched_log_loss(
            self.form, self.theta(z), self.logN, self.logD, self.ratio, self.slices
        )
        return logL

    def curvature_scale(self, z, free=None) -> np.ndarray:
        """sqrt(Σ_i (∂log L_i/∂z_j)²) per coordinate, geometric mean over sample points z.

        The Gauss–Newton diagonal: used as a diagonal preconditioner it evens out the
        coordinates' curvature and cuts L-BFGS iterations by about a third.
        """
        z = np.atleast_2d(np.asarray(z, dtype=float))[:64]
        free = np.arange(self.n_params) if free is None else np.asarray(free)
        base = self.log_loss(z)
        out = np.empty(len(free))
        for c, j in enumerate(free):
            step = z.copy()
            step[:, j] += 1e-6
            J = (self.log_loss(step) - base) / 1e-6
            out[c] = np.exp(np.mean(np.log(np.sum(J**2, axis=1) + 1e-12)))
        return np.sqrt(out)

    def subset(self, keep) -> Problem:
        """The same coordinates and bounds on fewer rows (keep: bool mask over rows)."""
        keep = np.asarray(keep, bool)
        slices, start = [], int(np.sum(keep[: self.slices[0].start])) if self.slices else 0
        for sl in self.slices:
            n = int(np.sum(keep[sl]))
            slices.append(slice(start, start + n))
            start += n
        return Problem(
            self.form,
            self.strategies,
            self.logN[keep],
            self.logD[keep],
            self.ratio[keep],
            self.y[keep],
            self.row_ids[keep],
            tuple(slices),
            self.M,
            self.lower,
            self.upper,
        )

    def objective(self, delta: float, weights=None, free=None, base=None) -> BatchObjective:
        """The summed Huber loss of log residuals and its gradient, for minimize_batched.

        weights: (n,) row weights, or (S, n) per start (bootstrap counts). free: indices
        of z being fitted, the others taken from base ((P,) or (S, P) per start).
        """
        from cdlaw.fit.vector import batched_log_loss

        W = None if weights is None else np.asarray(weights, dtype=float)

        def chunk(z, idx, f, g, sl):
            logL, vjp = batched_log_loss(
                self.form, self.theta(z[sl]), self.logN, self.logD, self.ratio, self.slices
            )
            res = np.subtract(self.y, logL, out=logL)
            c = np.clip(res, -delta, delta)  # ∂huber/∂res; huber(res) = c·(res − c/2)
            wc = c if W is None else c * (W[idx[sl]] if W.ndim == 2 else W)
            f[sl] = np.einsum("sn,sn->s", wc, res) - 0.5 * np.einsum("sn,sn->s", wc, c)
            g[sl] = -(vjp(wc) @ self.M)  # ∂res/∂theta = −∂logL/∂theta

        def fun(zf, idx):
            if free is None:
                z = zf
            else:
                z = np.array(
                    np.broadcast_to(base, (len(idx), self.n_params))
                    if np.ndim(base) == 1
                    else base[idx]
                )
                z[:, free] = zf
            f = np.empty(len(z))
            g = np.empty_like(z)
            # Chunks of starts keep the (starts × rows) arrays in cache; numpy releases
            # the GIL inside its loops, so threads run chunks side by side.
            step = max(1, CHUNK_ELEMENTS // max(1, len(self.y)))
            parts = [slice(c, c + step) for c in range(0, len(z), step)]
            workers = objective_threads()
            if len(parts) > 1 and workers > 1:
                list(objective_pool(workers).map(lambda sl: chunk(z, idx, f, g, sl), parts))
            else:
                for sl in parts:
                    chunk(z, idx, f, g, sl)
            return f, (g if free is None else g[:, free])

        return fun


CHUNK_ELEMENTS = 1 << 17  # starts × rows per chunk (1 MiB per float64 array)


def build_problem(
    form, strategies, n_params, fresh_tokens, derived_tokens, strategy, loss, row_ids
):
    """Sort the rows (D′ = 0 first, then each strategy's) and set up coordinates and bounds."""
    from cdlaw.fit.vector import fit_vector_names

    strategy = np.asarray(strategy, dtype=object)
    derived = np.asarray(derived_tokens, dtype=float) > 0
    group = np.full(len(strategy), -1)
    for j, s in enumerate(strategies):
        group[derived & (strategy == s)] = j
    order = np.argsort(group, kind="stable")
    group = group[order]
    N, D, Dp, L = (
        np.asarray(v, dtype=float)[order] for v in (n_params, fresh_tokens, derived_tokens, loss)
    )
    logN, logD = np.log(N), np.log(D)
    slices = tuple(
        slice(int(np.searchsorted(group, j)), int(np.searchsorted(group, j, side="right")))
        for j in range(len(strategies))
    )
    names = fit_vector_names(form, strategies)
    P = len(names)
    M = np.eye(P)
    M[1, 3] = logN.mean()  # a = a' + α·mean log N
    M[2, 4] = logD.mean()  # b = b' + β·mean log D
    lower = np.full(P, -12.0)
    upper = np.full(P, 12.0)
    top = np.log(L.max())
    lower[:3], upper[0], upper[1:3] = -15.0, top + 1.0, top + 3.0
    lower[3:5], upper[3:5] = 0.005, 3.0
    if form == "cd":
        for j, sl in enumerate(slices):
            c = 5 + 3 * j
            M[c, c + 1] = -np.mean(logD[sl] - logN[sl])  # k = k' − ρ·mean log(D/N) − σ·mean log N
            M[c, c + 2] = -np.mean(logN[sl])
            lower[c + 1 : c + 3], upper[c + 1 : c + 3] = -5.0, 5.0
    return Problem(
        form,
        tuple(strategies),
        logN,
        logD,
        Dp / D,
        np.log(L),
        np.asarray(row_ids)[order],
        slices,
        M,
        lower,
        upper,
    )
