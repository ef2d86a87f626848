"""The link from validation loss L to a task metric: its two forms and their least-squares fit.

    form = LINK_FORMS["sigmoid"]
    fit = fit_link(form, loss, metric)              # LinkFit: params, residual sum of squares
    form.predict(fit.theta, loss)                   # the metric the link gives at each loss
    fit = fit_link(form, loss, metric, groups)      # one curve, each group shifted in loss

- `power` (bits per byte of a task): BPB = E + K·L^κ. Validation loss and a task's loss
  are two losses of one model, which Brandfonbrener et al. (2024, arXiv 2411.12925,
  "Loss-to-loss prediction") find related by a shifted power law, L_task = K·(L − E_L)^κ +
  E_task; this is their form with the validation loss's own floor E_L taken as 0, which
  a few dozen runs cannot pin beside E_task.
- `sigmoid` (an accuracy): acc = a / (1 + e^(−k·(L − L0))) + b, the OLMo model ladder's
  second step (Bhagia et al. 2024, arXiv 2412.04403), with L the validation loss instead
  of the task's own loss. k ≤ 0; b is the accuracy at a very high loss (chance, for a
  multiple-choice task) and a + b at a very low one, both kept in [0, 1] (the fit's own
  parameters are b and a + b), so the link stays an accuracy however far it is
  extrapolated.

A shifted fit (the collapse test in cdlaw.tasks.links) gives each group g but the
first its own offset δ_g in loss: metric = f(L − δ_g). δ_g > 0 means the group's runs
score as the first group's runs score at δ_g nats lower loss: a higher accuracy, or a
lower BPB, at the same validation loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from cdlaw.system.errors import BadInput


@dataclass(frozen=True)
class LinkForm:
    """A link's form: its parameters (in the order of theta) and how to evaluate it."""

    name: str
    params: tuple[str, ...]
    formula: str

    def to_public(self) -> np.ndarray:
        """T with public θ = T·(the fit's own parameters): sigmoid fits a + b, not a."""
        T = np.eye(len(self.params))
        if self.name == "sigmoid":
            T[0, 3] = -1.0  # a = (a + b) − b
        return T

    def predict(self, theta, loss) -> np.ndarray:
        """The metric the link gives at each loss (nats/token)."""
        L = np.asarray(loss, dtype=float)
        t = np.asarray(theta, dtype=float)
        if self.name == "power":
            E, K, kappa = t[:3]
            with np.errstate(invalid="ignore", over="ignore"):
                return E + K * np.power(np.maximum(L, 0.0), kappa)
        a, L0, k, b = t[:4]
        z = np.clip(-k * (L - L0), -700.0, 700.0)
        return a / (1.0 + np.exp(z)) + b

    def gradient(self, theta, loss) -> tuple[np.ndarray, np.ndarray]:
        """(∂f/∂θ, (n, P); ∂f/∂L, (n,)) at each loss: the fit's Jacobian."""
        L = np.asarray(loss, dtype=float)
        t = np.asarray(theta, dtype=float)
        if self.name == "power":
            K, kappa = t[1:3]
            x = np.maximum(L, 1e-6)
            xk = np.power(x, kappa)
            return np.stack([np.ones_like(x), xk, K * xk * np.log(x)], axis=1), K * kappa * xk / x
        a, L0, k = t[:3]
        z = np.clip(-k * (L - L0), -700.0, 700.0)
        sig = 1.0 / (1.0 + np.exp(z))
        slope = a * sig * (1.0 - sig)
        grads = np.stack([sig, -k * slope, (L - L0) * slope, np.ones_like(L)], axis=1)
        return grads, k * slope


LINK_FORMS = {
    "power": LinkForm("power", ("E", "K", "kappa"), "E + K·L^kappa"),
    "sigmoid": LinkForm("sigmoid", ("a", "L0", "k", "b"), "a / (1 + exp(−k·(L − L0))) + b"),
}
FORM_OF_METRIC = {"bpb": "power", "acc": "sigmoid", "acc_norm": "sigmoid"}


@dataclass(frozen=True)
class LinkFit:
    """A least-squares fit of a link: theta (the form's parameters, then one shift per
    group after the first), the residual sum of squares, the residuals, and the standard
    error of each entry of theta (from the Jacobian, σ̂²(JᵀJ)⁻¹; NaN where singular)."""

    theta: np.ndarray
    rss: float
    residuals: np.ndarray
    se: np.ndarray
    n: int

    @property
    def n_free(self) -> int:
        return len(self.theta)


def fit_link(
    form: LinkForm,
    loss,
    metric,
    groups=None,
    start: np.ndarray | None = None,
) -> LinkFit:
    """Least squares of `form` to (loss, metric); with `groups` (an integer per point,
    0 the reference), one shift in loss per group above 0 too. `start` (public θ, with or
    without the shifts): one start (a bootstrap refit starts at the full fit); else a grid
    of starts, the best kept."""
    L, y = np.asarray(loss, dtype=float), np.asarray(metric, dtype=float)
    g = np.zeros(len(L), dtype=int) if groups is None else np.asarray(groups, dtype=int)
    p, n_shift = len(form.params), (int(g.max()) if len(g) else 0)
    T = np.eye(p + n_shift)
    T[:p, :p] = form.to_public()
    T_inv = np.linalg.inv(T)
    lo, hi = _bounds(form, L, y)
    span = float(np.ptp(L)) or 1.0
    # a shift moves a group by at most the runs' span of loss; the power law's by less than
    # the smallest loss, which must stay positive under it
    top = min(span, 0.9 * float(L.min())) if form.name == "power" else span
    lo = np.concatenate([lo, np.full(n_shift, -span)])
    hi = np.concatenate([hi, np.full(n_shift, top)])

    def residuals(internal):
        theta = T @ internal
        shifted = L - np.concatenate([[0.0], theta[p:]])[g]
        return form.predict(theta, shifted) - y

    def jacobian(internal):
        theta = T @ internal
        shifted = L - np.concatenate([[0.0], theta[p:]])[g]
        grads, d_loss = form.gradient(theta, shifted)
        J = np.zeros((len(L), p + n_shift))
        J[:, :p] = grads
        for j in range(n_shift):  # ∂/∂δ_j = −∂f/∂L on group j + 1
            J[:, p + j] = np.where(g == j + 1, -d_loss, 0.0)
        return J @ T

    starts = [start] if start is not None else _starts(form, L, y)
    best = None
    for s in starts:
        public = s if len(s) == p + n_shift else np.concatenate([s[:p], np.zeros(n_shift)])
        x0 = np.clip(T_inv @ public, lo, hi)
        r = least_squares(
            residuals, x0, jac=jacobian, bounds=(lo, hi), x_scale="jac", max_nfev=2000
        )
        if best is None or r.cost < best.cost:
            best = r
    assert best is not None
    rss = float(np.sum(best.fun**2))
    cov = _covariance(best.jac, rss, len(L))
    se = np.sqrt(np.clip(np.diag(T @ cov @ T.T), 0, None))
    return LinkFit(T @ best.x, rss, best.fun, se, len(L))


def _covariance(jac: np.ndarray, rss: float, n: int) -> np.ndarray:
    """σ̂²(JᵀJ)⁻¹ of the fit's own parameters; NaN where it cannot be had."""
    p = jac.shape[1]
    if n <= p:
        return np.full((p, p), np.nan)
    try:
        return np.linalg.inv(jac.T @ jac) * rss / (n - p)
    except np.linalg.LinAlgError:
        return np.full((p, p), np.nan)


STEEPEST = 50.0  # |k|·span of a sigmoid link at most: steeper is a step no run between shows
MIDPOINT_SPANS = 2.0  # a sigmoid's midpoint within this many spans of the runs' losses


def _sigmoid_box(lo: float, hi: float) -> tuple[float, float, float]:
    """A sigmoid link's bounds for runs whose losses span [lo, hi]: L0 within
    MIDPOINT_SPANS spans of them and ≥ 0 (the midpoint is a loss: a refit's 95% interval
    reached −0.2 nats on the demo), and the steepest k, −STEEPEST/span (steeper is a
    step, which no run between could show). (L0 low, L0 high, k low)."""
    span = (hi - lo) or 1.0
    return max(lo - MIDPOINT_SPANS * span, 0.0), hi + MIDPOINT_SPANS * span, -STEEPEST / span


def sigmoid_at_bound(params: dict[str, float], loss_range: tuple[float, float]) -> str:
    """What of a fitted sigmoid link sits at a bound of its fit (_sigmoid_box; "" if
    nothing): its steepness (a step, placed between runs the data cannot resolve), or its
    midpoint (0, or MIDPOINT_SPANS beyond the runs' losses)."""
    low, high, steepest = _sigmoid_box(*loss_range)
    tol = 1e-9 * (high - low)
    said = []
    if params["k"] <= steepest * (1 - 1e-6):
        said.append(
            "its steepness sits at its bound, a step: the runs pin the levels either side, "
            "not where or how it passes between them"
        )
    if not low + tol < params["L0"] < high - tol:
        at = 0.0 if abs(params["L0"]) < 1e-9 else params["L0"]
        said.append(
            f"its midpoint sits at its bound, L0 = {at:.4g}: the runs show one tail of it, "
            "so where it levels off is the bound's, not theirs"
        )
    return "; ".join(said)


def _bounds(form: LinkForm, L: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if form.name == "power":
        if not (y > 0).all():
            raise BadInput("bits per byte must be positive to fit its power-law link")
        # E below every observed value; K > 0 and κ in (0, 20]: BPB rises with the loss
        return np.array([0.0, 1e-12, 1e-3]), np.array([float(y.min()) * (1 - 1e-9), np.inf, 20.0])
    # the fit's own parameters: a + b, L0, k, b (_sigmoid_box for L0 and k)
    low, high, steepest = _sigmoid_box(float(L.min()), float(L.max()))
    return np.array([0.0, low, steepest, 0.0]), np.array([1.0, high, 0.0, 1.0])


def _starts(form: LinkForm, L: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """A small grid of starting points, public θ (the fit keeps the best)."""
    if form.name == "power":
        out = []
        for frac in (0.0, 0.5, 0.9):
            E = frac * float(y.min())
            slope, icpt = np.polyfit(np.log(L), np.log(np.maximum(y - E, 1e-12)), 1)
            out.append(np.array([E, float(np.exp(icpt)), float(np.clip(slope, 1e-3, 20.0))]))
        return out
    span = float(np.ptp(L)) or 1.0
    lo, hi = float(y.min()), float(y.max())
    out = []
    for L0 in np.quantile(L, [0.1, 0.5, 0.9]):
        for k in (-2.0 / span, -10.0 / span):
            out.append(np.array([hi - lo, float(L0), k, lo]))
    return out


def _internal_curve(form: LinkForm):
    """The form in the fit's own parameters (sigmoid: a + b, L0, k, b) as a batched curve
    (cdlaw.fit.curves.Curve): f and its Jacobian for B parameter rows at once."""
    from cdlaw.fit.curves import SIGMOID, Curve

    if form.name == "power":

        def f(th, L):
            E, K, kappa = (th[:, i : i + 1] for i in range(3))
            with np.errstate(invalid="ignore", over="ignore"):
                return E + K * np.power(np.maximum(L[None, :], 0.0), kappa)

        def jac(th, L):
            K, kappa = th[:, 1:2], th[:, 2:3]
            x = np.maximum(L[None, :], 1e-6)
            with np.errstate(invalid="ignore", over="ignore"):
                xk = np.power(x, kappa)
            return np.stack([np.ones_like(xk), xk, K * xk * np.log(x)], axis=2)

    else:  # cdlaw.fit.curves' sigmoid, whose height a is top − b

        def height(th):
            return np.concatenate([th[:, :1] - th[:, 3:4], th[:, 1:]], axis=1)

        def f(th, L):
            return SIGMOID.f(height(th), L)

        def jac(th, L):
            J = SIGMOID.jac(height(th), L)
            J[:, :, 3] -= J[:, :, 0]  # b moves the floor and, through a = top − b, the height
            return J

    return Curve(form.name, form.params, form.formula, f, jac)


def refit_link(form: LinkForm, loss, metric, weights: np.ndarray, start) -> np.ndarray:
    """The link refitted to each row of `weights` (B, n: a bootstrap's count of each point),
    every row from `start` (public θ, the full fit) within the bounds fit_link sets for its
    resample, in one batched Levenberg–Marquardt run (cdlaw.fit.curves.fit_curve): (B, P)
    public θ. Where the resample's fit is well determined it is fit_link's from the same
    start; where it is not, either optimiser may stop in another valley
    (docs/results.md, "The links' bootstrap, batched")."""
    from cdlaw.fit.curves import fit_curve

    L, y = np.asarray(loss, dtype=float), np.asarray(metric, dtype=float)
    T = form.to_public()
    w = np.asarray(weights, float)
    bounds = [_bounds(form, L[row > 0], y[row > 0]) for row in w]
    lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    x0 = np.linalg.inv(T) @ np.asarray(start, float)[: len(form.params)]
    th, _ = fit_curve(
        _internal_curve(form), L, y, w, np.repeat(x0[None, :], len(w), 0), lo, hi,
        iters=500, tol=1e-12, bound_aware=True,
    )  # fmt: skip
    return th @ T.T
