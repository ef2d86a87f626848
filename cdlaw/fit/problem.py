"""The fit as an optimisation problem: its rows, centred coordinates, bounds and objective.

build_problem sorts a table's rows (D′ = 0 first, then each strategy's D′ > 0 rows as a
slice) and sets up the coordinates z the optimiser works in and their bounds; Problem
evaluates log L, the summed Huber loss of log residuals and its gradient for a batch of
starts (the BatchObjective that cdlaw.fit.optim minimises), and a diagonal preconditioner.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from cdlaw.fit.optim import BatchObjective
from cdlaw.fit.threads import objective_pool, objective_threads
from cdlaw.laws import as_law_form
from cdlaw.laws.form import FEATURES, LawForm, LogLosses, Rows


def huber(residual, delta):
    """Huber's loss: r²/2 inside ±δ, δ(|r| − δ/2) outside (scipy.special.huber)."""
    a = np.abs(residual)
    return np.where(a <= delta, 0.5 * residual**2, delta * (a - 0.5 * delta))


@dataclass(frozen=True)
class Problem:
    """The rows one fit sees, sorted so that each strategy's D′ > 0 rows are a slice.

    The optimiser works in centred coordinates z, with theta = M·z (theta is the
    log-space fit vector of the law form): the intercepts the form names (a, b, k for the
    CD law) are taken at the middle of the table (a' = a − α·mean log N, ...) so that a
    slope can move without dragging its intercept across the table. The objective is
    unchanged; L-BFGS converges in far fewer steps because the coordinates are no longer
    nearly collinear.
    """

    form: LawForm
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

    @functools.cached_property
    def rows(self) -> Rows:
        return Rows(self.logN, self.logD, self.ratio, self.slices)

    @property
    def shared(self) -> np.ndarray:
        """Indices of z shared by every strategy (the rest are per strategy)."""
        return np.arange(self.form.n_shared_fit)

    def theta(self, z) -> np.ndarray:
        return np.asarray(z) @ self.M.T

    def z(self, theta) -> np.ndarray:
        return np.linalg.solve(self.M, np.asarray(theta, dtype=float).T).T

    def log_loss(self, z) -> np.ndarray:
        z = np.atleast_2d(z)
        logL, _ = self.form.batched_log_loss(self.theta(z), self.rows)
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

    def stages(self, z) -> tuple[np.ndarray, np.ndarray]:
        """The coordinates of --method staged's two stages: the shared ones that the D′ = 0
        rows move, then the rest (per strategy, and shared ones that only derived rows see,
        such as cd-overfit's μ)."""
        one_epoch = self.subset(self.ratio == 0)
        base = one_epoch.log_loss(z)
        inert = []
        for j in self.shared:
            step = np.array(z, dtype=float)
            step[j] += 1e-3
            if np.array_equal(one_epoch.log_loss(step), base):
                inert.append(j)
        first = np.setdiff1d(self.shared, inert)
        return first, np.setdiff1d(np.arange(self.n_params), first)

    def objective(self, delta: float, weights=None, free=None, base=None) -> BatchObjective:
        """The summed Huber loss of log residuals and its gradient, for minimize_batched.

        weights: (n,) row weights, (S, n) per start, or ByStart (bootstrap counts shared
        by several starts). free: indices of z being fitted, the others taken from base
        ((P,) or (S, P) per start).
        """
        W = weights
        if W is not None and not isinstance(W, ByStart):
            W = np.asarray(W, dtype=float)
        rows = self.rows

        def chunk(z, idx, f, g, sl):
            logL, vjp = self.form.batched_log_loss(self.theta(z[sl]), rows)
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
            in_chunks(len(z), len(self.y), lambda sl: chunk(z, idx, f, g, sl))
            return f, (g if free is None else g[:, free])

        return fun

    @functools.cached_property
    def losses(self) -> np.ndarray:
        """The observed losses L (n,)."""
        return np.exp(self.y)

    @functools.cached_property
    def relative_weights(self) -> np.ndarray:
        """1/L² (n,): least squares on (L − L_pred)/L, ½ Σ r² to first order in log r."""
        return 1.0 / self.losses**2


class ByStart:
    """Row weights of each start of a batch where M starts share each resample's weights:
    W[b] for starts b·M … b·M + M − 1, without repeating W M times (Problem.objective)."""

    ndim = 2

    def __init__(self, W: np.ndarray, M: int):
        self.W, self.M = W, M

    def __getitem__(self, idx) -> np.ndarray:
        return self.W[np.asarray(idx) // self.M].astype(float)

    def columns(self, keep) -> ByStart:
        """The same, on a subset of the rows (bool mask)."""
        return ByStart(self.W[:, keep], self.M)


CHUNK_ELEMENTS = 1 << 17  # starts × rows per chunk (1 MiB per float64 array)


def in_chunks(n_starts: int, n_rows: int, work) -> None:
    """work(sl) for slices of the starts that keep each (starts × rows) array near
    CHUNK_ELEMENTS: in cache, and (for a table of many rows) small. numpy releases the GIL
    inside its loops, so threads run chunks side by side."""
    step = max(1, CHUNK_ELEMENTS // max(1, n_rows))
    parts = [slice(c, c + step) for c in range(0, n_starts, step)]
    workers = objective_threads() if len(parts) > 1 else 1
    if workers > 1:
        list(objective_pool(workers).map(work, parts))
    else:
        for sl in parts:
            work(sl)


def build_problem(
    form, strategies, n_params, fresh_tokens, derived_tokens, strategy, loss, row_ids, fixed=None
):
    """Sort the rows (D′ = 0 first, then each strategy's) and set up coordinates and bounds.

    form: a law's name or its LawForm, whose declaration gives the bounds and centring.
    fixed: public values of the parameters the form takes from the table (LawForm.fixed),
    held there by bounds lo = hi.
    """
    form = as_law_form(form)
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
    y = np.log(L)
    names = form.fit_vector_names(strategies)
    index = {name: i for i, name in enumerate(names)}
    M = np.eye(len(names))
    for c in form.centring:
        feature = FEATURES[c.feature]
        if c.intercept in index:  # a shared intercept, centred on every row
            M[index[c.intercept], index[c.slope]] = -c.sign * np.mean(feature(logN, logD))
            continue
        for s, sl in zip(strategies, slices, strict=True):
            m = np.mean(feature(logN[sl], logD[sl]))
            # a per-strategy intercept may have a shared slope (cd-overfit's λ and μ)
            slope = index[c.slope] if c.slope in index else index[f"{s}.{c.slope}"]
            M[index[f"{s}.{c.intercept}"], slope] = -c.sign * m
    losses = LogLosses.of(y)
    spans = np.array([form.span(name, losses) for name in names], dtype=float)
    lower, upper = spans[:, 0].copy(), spans[:, 1].copy()
    for name, value in (fixed or {}).items():
        j = index[name]
        if np.count_nonzero(M[j]) != 1:
            raise ValueError(f"{form.name}: fixed parameter {name} is a centred intercept")
        lower[j] = upper[j] = np.log(value) if form.is_log(name) else float(value)
    return Problem(
        form,
        tuple(strategies),
        logN,
        logD,
        Dp / D,
        y,
        np.asarray(row_ids)[order],
        slices,
        M,
        lower,
        upper,
    )
