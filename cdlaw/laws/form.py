"""What one law form declares, and the little machinery that reads a declaration.

A LawForm is a scaling law as data: its parameters and how the fit encodes them, its
loss, and what it lacks (R* and η, for a law that ignores derived tokens). cdlaw.law.Law
(a form with its constants), the fit, the planner and the figures read these fields and
never branch on a law's name. A law is one module in cdlaw/laws that builds a LawForm,
plus one line in cdlaw.laws.LAWS (docs/law.md, "Adding a law").

The fit works on log-space fit vectors: the shared parameters, then the tied ones (a
per-strategy parameter that the fit keeps equal across strategies), then each derived
strategy's own parameters, strategy after strategy; a parameter named in log_params is
stored as the log of its public value. Per-strategy entries are named "<strategy>.<name>".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

DEFAULT_BOUND = (-12.0, 12.0)  # any coordinate a form does not bound itself
NUMERICAL_STEP = 1e-5  # relative central-difference step: error ~ step² + 1e-16/step
TABLE_COLUMNS = ("n_params", "fresh_tokens", "derived_tokens", "strategy", "loss")


class LogLosses(NamedTuple):
    """What bounds and start ranges scale with: the table's log losses."""

    low: float  # log of the lowest loss
    mid: float  # median log loss
    top: float  # highest log loss

    @classmethod
    def of(cls, y) -> LogLosses:
        y = np.asarray(y, dtype=float)
        return cls(np.log(np.exp(y).min()), np.median(y), y.max())


# A parameter's bounds or start range: fixed, or a function of the table's log losses.
Span = tuple[float, float] | Callable[[LogLosses], tuple[float, float]]


class Centring(NamedTuple):
    """An intercept the fit takes at the middle of the table instead of at zero.

    A log-space term intercept + sign·slope·feature (a − α·log N: sign −1) is fitted as
    intercept' = intercept + sign·slope·mean(feature), so that the slope can move without
    dragging its intercept across the table. For per-strategy parameters the mean is over
    that strategy's rows (their slope may be shared or per strategy). This changes coordinates, not the objective (docs/fit.md).
    """

    intercept: str
    slope: str
    sign: int
    feature: str  # a key of FEATURES


FEATURES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "log_n_params": lambda logN, logD: logN,
    "log_fresh_tokens": lambda logN, logD: logD,
    "log_tokens_per_param": lambda logN, logD: logD - logN,
}


@dataclass(frozen=True)
class Rows:
    """The rows a fit sees, as a batched log loss reads them."""

    logN: np.ndarray  # (n,)
    logD: np.ndarray  # (n,)
    ratio: np.ndarray  # D′/D, 0 where D′ = 0
    # Each derived strategy's D′ > 0 rows, in the fit vector's strategy order; rows outside
    # every slice have D′ = 0.
    slices: tuple[slice, ...]

    @functools.cached_property
    def sizes(self) -> PerSize:
        """The rows' model sizes, found once for every evaluation on these rows."""
        return PerSize(self.logN)

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """make(), computed once per Rows and key: what a form derives from the rows alone
        (cd's features of log R*), kept for the thousands of evaluations of one fit."""
        memo = self.__dict__.setdefault("_once", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]


class PerSize:
    """A model term takes one value per model size: its rows' sizes, and the sum of a
    per-row weight over each size's rows, in time and memory linear in the rows."""

    SMALL = 64  # up to this many sizes, an (n, sizes) indicator matrix is the fastest sum

    def __init__(self, logN: np.ndarray):
        self.lNu, self.at_size = np.unique(logN, return_inverse=True)
        u = len(self.lNu)
        if u <= self.SMALL:
            self.indicator = (self.at_size[:, None] == np.arange(u)).astype(float)
        else:  # every row a size of its own, say: sum runs of rows sorted by size
            self.order = np.argsort(self.at_size, kind="stable")
            self.first = np.searchsorted(self.at_size[self.order], np.arange(u))

    def spread(self, per_size: np.ndarray) -> np.ndarray:
        """(S, sizes) values → (S, n), each row its size's."""
        return per_size[:, self.at_size]

    def sum(self, w: np.ndarray) -> np.ndarray:
        """(S, n) row weights → (S, sizes): Σ of each size's rows."""
        if len(self.lNu) <= self.SMALL:
            return w @ self.indicator
        return np.add.reduceat(w[:, self.order], self.first, axis=1)


@dataclass(frozen=True, eq=False)
class LawForm:
    """One law form, declared. Fields with a default may be left out.

    loss(p, N, D, D′) is the public loss: p maps parameter names to values (floats, or
    (S, 1) columns when the fit evaluates S vectors at once) and holds the shared
    parameters plus one derived strategy's; for strategy "none" (D′ = 0) it holds the
    shared and tied ones only. log_loss_vjp(theta (S, P), rows) -> (log L (S, n), vjp) with
    vjp(w (S, n)) = Σ_i w_si ∂log L_si/∂theta_s (S, P) is the fit's fast path; without it
    the fit differentiates log loss numerically (slower, fine for a few parameters).
    """

    name: str  # as --law and fit.json's "law" spell it
    source: str  # the paper and equations the form comes from
    shared: tuple[str, ...]  # fit.json "params", in fit-vector order
    loss: Callable[..., Any]
    model_floor: Callable[..., Any]  # L_N(p, N): the loss with unlimited fresh data
    strategy_params: tuple[str, ...] = ()  # fit.json "strategies" entries of each strategy
    tied: tuple[str, ...] = ()  # strategy parameters fitted as one value for every strategy
    log_params: frozenset[str] = frozenset()  # fitted as the log of the public value
    positive: frozenset[str] = frozenset()  # must be > 0 in a fit a plan can use
    nonnegative: frozenset[str] = frozenset()  # must be ≥ 0
    huber_delta: float = 1e-3  # the default δ on log residuals
    columns: tuple[str, ...] = TABLE_COLUMNS  # the table columns the loss reads
    bounds: Mapping[str, Span] = field(default_factory=dict)  # of fit coordinates, by name
    centring: tuple[Centring, ...] = ()
    start_axes: tuple[tuple[str, Span], ...] = ()  # start grid, in the order levels are added
    log_loss_vjp: Callable[..., Any] | None = None
    # Where the loss is a sum of non-negative terms times coefficients the form stores as
    # logs (E·1 + A·N^−α + B·D_eff^−β): those coefficients' names, and
    # linear_terms(theta (S, P), rows) -> (Phi (k, S, n), vjp) with the terms each multiplies
    # (read from theta's other entries only) and vjp(W (k, S, n)) = Σ_j,i W_jsi ∂Phi_jsi/∂θ_s
    # (S, P). A fit then solves the coefficients instead of searching them
    # (cdlaw.fit.projection). () and None: it searches every parameter.
    linear: tuple[str, ...] = ()
    linear_terms: Callable[..., Any] | None = None
    rstar: Callable[..., Any] | None = None  # R*(p, N, D); None: no R* and no η
    # identify(strategy, n_params, tokens_per_param) of a strategy's D′ > 0 rows: why they
    # cannot pin its parameters down, or None when they can.
    identify: Callable[..., Any] | None = None
    called: str = ""  # how messages name the form; default "the <name> law"
    can_overfit: bool = False  # whether more derived tokens can raise the loss
    # Parameters whose term is simply absent at their lower bound (cd-overfit's λ: no
    # overfitting found): a fit that ends there says so instead of flagging a bound.
    vanishing: frozenset[str] = frozenset()
    # derived_optimum(p, N, D): the D′ ≥ 0 that minimises the loss at (N, D) for the
    # strategy whose parameters p holds (shared and that strategy's); inf where more D′
    # never hurts. None: the loss never rises with D′ (Law.best_derived_tokens is inf).
    derived_optimum: Callable[..., Any] | None = None
    # Parameters taken from the table instead of fitted: name -> fn(table) -> its public
    # value (fn may raise BadInput). The fit holds that coordinate at the value (its bounds
    # lo = hi) and fit.json stores it with the fitted ones. Not a centred intercept.
    fixed: Mapping[str, Callable[[Any], float]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.called or f"the {self.name} law"

    @property
    def uses_derived(self) -> bool:
        """Whether derived tokens enter the loss (otherwise only D′ = 0 rows are fitted)."""
        return "derived_tokens" in self.columns

    @property
    def untied(self) -> tuple[str, ...]:
        """The per-strategy parameters each strategy fits for itself."""
        return tuple(p for p in self.strategy_params if p not in self.tied)

    @property
    def n_shared_fit(self) -> int:
        """Fit-vector entries shared by every strategy (shared, then tied)."""
        return len(self.shared) + len(self.tied)

    def fit_vector_names(self, strategies) -> list[str]:
        """Public names of a fit vector's entries, as fit.json's ci95 / bootstrap_params use."""
        return [
            *self.shared,
            *self.tied,
            *(f"{s}.{p}" for s in strategies for p in self.untied),
        ]

    def is_log(self, name: str) -> bool:
        return name.rsplit(".", 1)[-1] in self.log_params

    def span(self, name: str, losses: LogLosses) -> tuple[float, float]:
        """The bounds of the fit coordinate `name` (a per-strategy name by its base name)."""
        return resolve(self.bounds.get(name.rsplit(".", 1)[-1], DEFAULT_BOUND), losses)

    def batched_log_loss(self, theta, rows: Rows):
        """log L (S, n) and its VJP: the declared analytic one, or numerical differences."""
        if self.log_loss_vjp is not None:
            return self.log_loss_vjp(theta, rows)
        return numerical_log_loss(self, theta, rows)


def resolve(span: Span, losses: LogLosses) -> tuple[float, float]:
    return span(losses) if callable(span) else span


# ---------------------------------------------------------------------------------------
# The fallback for a form without an analytic VJP: its public loss, differentiated
# numerically. 2P + 1 loss evaluations per gradient, so keep it to small laws.
# ---------------------------------------------------------------------------------------


def public_log_loss(form: LawForm, theta, rows: Rows) -> np.ndarray:
    """log L (S, n) for S log-space fit vectors, through the form's public loss."""
    theta = np.asarray(theta, dtype=float)
    names = form.fit_vector_names([str(j) for j in range(len(rows.slices))])
    cols = {
        name: np.exp(theta[:, i : i + 1]) if form.is_log(name) else theta[:, i : i + 1]
        for i, name in enumerate(names)
    }
    common = {k: cols[k] for k in (*form.shared, *form.tied)}
    N, D = np.exp(rows.logN), np.exp(rows.logD)
    Dp = rows.ratio * D
    out = np.empty((theta.shape[0], len(D)))
    derived = np.zeros(len(D), bool)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j, sl in enumerate(rows.slices):
            derived[sl] = True
            p = {**common, **{k: cols[f"{j}.{k}"] for k in form.untied}}
            out[:, sl] = form.loss(p, N[sl], D[sl], Dp[sl])
        out[:, ~derived] = form.loss(common, N[~derived], D[~derived], 0.0 * Dp[~derived])
        return np.log(out)


def numerical_log_loss(form: LawForm, theta, rows: Rows):
    """public_log_loss and a central-difference VJP, in the log_loss_vjp contract."""
    theta = np.asarray(theta, dtype=float)
    logL = public_log_loss(form, theta, rows)

    def vjp(w):
        g = np.empty_like(theta)
        for j in range(theta.shape[1]):
            up, down = theta.copy(), theta.copy()
            h = NUMERICAL_STEP * (1.0 + np.abs(theta[:, j]))
            up[:, j] += h
            down[:, j] -= h
            diff = public_log_loss(form, up, rows) - public_log_loss(form, down, rows)
            # divide by the step actually taken (theta ± h rounds)
            g[:, j] = np.einsum("sn,sn->s", w, diff) / (up[:, j] - down[:, j])
        return g

    return logL, vjp
