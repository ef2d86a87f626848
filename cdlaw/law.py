"""The compute–data (CD) scaling law and the forms it generalises. Pure numpy.

This is the only module that speaks in math symbols; everywhere else uses the names of
docs/names.md (n_params, fresh_tokens, derived_tokens, ...). Every function broadcasts over
numpy arrays, so one call evaluates a whole table of runs, or a grid of parameter sets
(parameters shaped (S, 1) against data shaped (n,)).

    L(N, D, D′) = E + A/N^α + B/(D + η·D′)^β                           CD paper, eq. 1
    η = (R*/r)(1 − e^(−r/R*)),   r = D′/D                              CD paper, eq. 2
    R* = K·(D/N)^ρ·N^σ          (one K, ρ, σ per strategy)             CD paper, eq. 3

CD paper: Qin, Hamidieh, Alvarez-Melis, "Compute-data scaling laws", arXiv 2607.25271.
Chinchilla: Hoffmann et al. 2022, arXiv 2203.15556, eq. 2.
Muennighoff: "Scaling Data-Constrained Language Models", Muennighoff et al. 2023,
arXiv 2305.16264, eqs. 5–7 (R*_D, R*_N, U_N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

FORMS = ("cd", "muennighoff", "chinchilla")
# What a run trains on beyond one pass of its fresh tokens: nothing ("none", D′ = 0), or
# derived tokens by one of the strategies the CD paper fits its own R* for.
DerivedStrategy = Literal["repetition", "paraphrase"]
Strategy = Literal["none", "repetition", "paraphrase"]
DERIVED_STRATEGIES: tuple[str, ...] = get_args(DerivedStrategy)
STRATEGIES: tuple[str, ...] = get_args(Strategy)
# The per-strategy parameters of each form, in the order fit vectors use.
STRATEGY_PARAMS = {
    "cd": ("K", "rho", "sigma"),
    "muennighoff": ("rstar_d", "rstar_n"),
    "chinchilla": (),
}
SHARED_PARAMS = ("E", "A", "B", "alpha", "beta")


# ---------------------------------------------------------------------------------------
# The pieces, as plain functions of arrays.
# ---------------------------------------------------------------------------------------


def rstar(N, D, K, rho, sigma):
    """R*(D, N) = K·(D/N)^ρ·N^σ: how many epochs' worth of derived tokens D can absorb."""
    N = np.asarray(N, dtype=float)
    D = np.asarray(D, dtype=float)
    return K * (D / N) ** rho * N**sigma


def eta(r, R):
    """η(r) = (R*/r)(1 − e^(−r/R*)), the worth of a derived token relative to a fresh one.

    η → 1 as r → 0 (the first derived tokens are as good as fresh) and η → R*/r as r → ∞.
    Computed with expm1 so that small r keeps full precision.
    """
    r = np.asarray(r, dtype=float)
    R = np.asarray(R, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -R * np.expm1(-r / R) / r
    return np.where(r == 0, 1.0, out)


def effective_data(D, Dp, R):
    """D_eff = D + η·D′ = D + D·R*·(1 − e^(−(D′/D)/R*)); saturates at D·(1 + R*).

    D′ = 0 gives exactly D, and D′ = ∞ gives exactly D·(1 + R*).
    """
    D = np.asarray(D, dtype=float)
    Dp = np.asarray(Dp, dtype=float)
    R = np.asarray(R, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gain = D * R * -np.expm1(-(Dp / D) / R)
    # R* = 0 means derived tokens are worthless (0·∞ guards); R* = ∞ means they are fresh.
    gain = np.where(R == 0, 0.0, gain)
    gain = np.where(np.isinf(R), Dp, gain)
    return D + gain


def chinchilla_loss(N, D, E, A, B, alpha, beta):
    """L(N, D) = E + A/N^α + B/D^β (Hoffmann et al. 2022, eq. 2)."""
    N = np.asarray(N, dtype=float)
    D = np.asarray(D, dtype=float)
    return E + A / N**alpha + B / D**beta


def cd_loss(N, D, Dp, E, A, B, alpha, beta, K, rho, sigma):
    """The CD law, L(N, D, D′) = E + A/N^α + B/(D + η·D′)^β with R* = K·(D/N)^ρ·N^σ."""
    D_eff = effective_data(D, Dp, rstar(N, D, K, rho, sigma))
    return chinchilla_loss(N, D_eff, E, A, B, alpha, beta)


def cd_log_loss(logN, logD, logDp, e, a, b, alpha, beta, k, rho, sigma):
    """log L = logsumexp(e, a − α·log N, b − β·log D_eff), the form the fit minimises in.

    E = e^e, A = e^a, B = e^b, K = e^k (docs/law.md, as in the CD paper's and Chinchilla's fits).
    logDp may be −inf (D′ = 0). Returns log L; stable for any parameter values.
    """
    log_r = logDp - logD
    log_R = k + rho * (logD - logN) + sigma * logN
    # log D_eff = log D + log(1 + R*·(1 − e^(−r/R*)))
    x = np.exp(log_r - log_R)  # r / R*
    gain = np.exp(log_R) * -np.expm1(-x)
    log_Deff = logD + np.log1p(gain)
    return np.logaddexp(np.logaddexp(e, a - alpha * logN), b - beta * log_Deff)


def chinchilla_optimal_n_for_data(D, A, B, alpha, beta):
    """The compute-optimal N whose optimal data is D, under the Chinchilla law.

    With G = (αA/(βB))^(1/(α+β)), the optimum at budget C is N* = G·(C/6)^(β/(α+β)) and
    D* = (C/6)^(α/(α+β))/G (Hoffmann et al. 2022, eq. 4), so N*(D) = G·(G·D)^(β/α).
    Muennighoff et al. 2023 use this as U_N, the "unique parameters" worth of U_D tokens.
    """
    G = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
    return G * (G * np.asarray(D, dtype=float)) ** (beta / alpha)


def muennighoff_loss(N, D, Dp, E, A, B, alpha, beta, rstar_d, rstar_n):
    """The data-constrained law of Muennighoff et al. 2023 (eqs. 5–7), both decay terms.

    U_D = D unique tokens repeated R_D = D′/D extra times; U_N = min(N, N*(U_D)) and
    R_N = N/U_N − 1 extra "repeated" parameters; each decays with its own R*:
        D' = U_D + U_D·R*_D·(1 − e^(−R_D/R*_D)),  N' = U_N + U_N·R*_N·(1 − e^(−R_N/R*_N)).
    """
    N = np.asarray(N, dtype=float)
    D_eff = effective_data(D, Dp, rstar_d)
    U_N = np.minimum(N, chinchilla_optimal_n_for_data(D, A, B, alpha, beta))
    N_eff = effective_data(U_N, N - U_N, rstar_n)
    return chinchilla_loss(N_eff, D_eff, E, A, B, alpha, beta)


# ---------------------------------------------------------------------------------------
# A fitted or published law, as one value that fit writes and plan / plot read.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Law:
    """One law form with its constants.

    `strategies` maps a strategy name to its parameters: {"K", "rho", "sigma"} for `cd`,
    {"rstar_d", "rstar_n"} for `muennighoff`, nothing for `chinchilla`. K is linear here
    (fit.json stores K; the log-space fit uses log K internally).
    """

    form: str
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    strategies: dict[str, dict[str, float]] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"unknown law form {self.form!r}; valid: {', '.join(FORMS)}")
        for name, p in self.strategies.items():
            need = set(STRATEGY_PARAMS[self.form])
            if set(p) != need:
                raise ValueError(
                    f"strategy {name!r} of a {self.form} law needs {sorted(need)}, got {sorted(p)}"
                )

    # -- the law and its frontiers (docs/law.md, docs/regimes.md) --------------------------------------

    def strategy_params(self, strategy: str) -> dict[str, float]:
        if self.form == "chinchilla":
            return {}
        if strategy not in self.strategies:
            have = ", ".join(sorted(self.strategies)) or "none"
            raise KeyError(
                f"this {self.form} law has no parameters for strategy {strategy!r} (has: {have})"
            )
        return self.strategies[strategy]

    def rstar(self, n_params, fresh_tokens, strategy: str):
        """R* for a strategy: how many passes' worth of derived tokens still pay off."""
        p = self.strategy_params(strategy)
        if self.form == "cd":
            return rstar(n_params, fresh_tokens, p["K"], p["rho"], p["sigma"])
        if self.form == "muennighoff":
            return np.broadcast_to(float(p["rstar_d"]), np.broadcast(n_params, fresh_tokens).shape)
        return np.zeros(np.broadcast(n_params, fresh_tokens).shape)

    def effective_data(self, n_params, fresh_tokens, derived_tokens, strategy: str):
        """D_eff = D + η·D′ (for `chinchilla`, derived tokens are worth nothing)."""
        R = self.rstar(n_params, fresh_tokens, strategy)
        return effective_data(fresh_tokens, derived_tokens, R)

    def eta(self, n_params, fresh_tokens, derived_ratio, strategy: str):
        """η(r, D/N, N): the value of a derived token relative to a fresh one."""
        return eta(derived_ratio, self.rstar(n_params, fresh_tokens, strategy))

    def loss(self, n_params, fresh_tokens, derived_tokens=0.0, strategy: str = "none"):
        """Predicted loss L(N, D, D′). strategy "none" (or D′ = 0) gives the Chinchilla law."""
        N, D, Dp = (np.asarray(x, dtype=float) for x in (n_params, fresh_tokens, derived_tokens))
        shared = (self.E, self.A, self.B, self.alpha, self.beta)
        if self.form == "muennighoff":
            # R*_N (excess parameters) acts at D′ = 0 too; it is the same for every strategy.
            p = dict(
                self.strategy_params(
                    strategy if strategy != "none" else next(iter(self.strategies))
                )
            )
            if strategy == "none":
                Dp = 0 * Dp
            return muennighoff_loss(N, D, Dp, *shared, **p)
        if strategy == "none" or self.form == "chinchilla":
            return chinchilla_loss(N, D, *shared) + 0 * Dp
        return cd_loss(N, D, Dp, *shared, **self.strategy_params(strategy))

    def loss_one_epoch(self, n_params, fresh_tokens):
        """L_1ep = L(N, D, 0): one pass over the fresh tokens, nothing derived."""
        return self.loss(n_params, fresh_tokens, 0.0, "none")

    def loss_data_floor(self, n_params, fresh_tokens, strategy: str):
        """L_D = lim_{D′→∞} L = E + A/N^α + B/(D(1 + R*))^β: derived tokens saturated."""
        if self.form == "chinchilla" or strategy == "none":
            return self.loss_one_epoch(n_params, fresh_tokens)
        return self.loss(n_params, fresh_tokens, np.inf, strategy)

    def loss_model_floor(self, n_params):
        """L_N = E + A/N^α: the loss with unlimited fresh data."""
        return self.E + self.A / np.asarray(n_params, dtype=float) ** self.alpha

    def reducible_model_loss(self, n_params):
        """E + A/N^α is what a fit pins down even when E, A and α trade off (docs/fit.md)."""
        return self.loss_model_floor(n_params)

    # -- (de)serialisation in the names of fit.json (docs/files.md) -------------------------

    def to_dict(self) -> dict:
        return {
            "law": self.form,
            "params": {k: float(getattr(self, k)) for k in SHARED_PARAMS},
            "strategies": {
                s: {k: float(v) for k, v in p.items()} for s, p in self.strategies.items()
            },
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Law:
        """Read the law from a fit.json (or any dict with "law", "params", "strategies")."""
        form = d.get("law", "cd")
        params = d["params"]
        strategies = {s: dict(p) for s, p in (d.get("strategies") or {}).items()}
        E, A, B, alpha, beta = (float(params[k]) for k in SHARED_PARAMS)
        return cls(form, E, A, B, alpha, beta, strategies, d.get("source", ""))


# ---------------------------------------------------------------------------------------
# Published constants (docs/plan.md). N and D are counted as each paper counts them.
# ---------------------------------------------------------------------------------------

PRESETS: dict[str, Law] = {
    # Hoffmann et al. 2022 (arXiv 2203.15556), approach 3, eq. 10.
    "chinchilla-hoffmann": Law(
        "chinchilla",
        1.69,
        406.4,
        410.7,
        0.34,
        0.28,
        source="Hoffmann et al. 2022, arXiv 2203.15556, eq. 10",
    ),
    # Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt" (arXiv 2404.10102), eq. 4.
    "chinchilla-besiroglu": Law(
        "chinchilla",
        1.8172,
        482.01,
        2085.43,
        0.3478,
        0.3658,
        source="Besiroglu et al. 2024, arXiv 2404.10102, eq. 4",
    ),
    # Muennighoff et al. 2023 (arXiv 2305.16264), fitted constants of eqs. 5–7 (appendix A);
    # alpha = beta as in their fit. Repetition only: the paper studies repeated epochs.
    "muennighoff2023": Law(
        "muennighoff",
        1.8691,
        520.82,
        1487.7,
        0.3526596,
        0.3526596,
        {"repetition": {"rstar_d": 15.387756, "rstar_n": 5.309743}},
        source="Muennighoff et al. 2023, arXiv 2305.16264, eqs. 5-7",
    ),
    # The CD paper (Qin, Hamidieh, Alvarez-Melis, arXiv 2607.25271), joint fit; K = e^(log K).
    "qin2026": Law(
        "cd",
        1.3958,
        225.30,
        17737.7,
        0.289137,
        0.437825,
        {
            "repetition": {"K": math.exp(10.740510), "rho": -0.416064, "sigma": -0.403500},
            "paraphrase": {"K": math.exp(26.868495), "rho": -1.303025, "sigma": -1.149994},
        },
        source="Qin, Hamidieh, Alvarez-Melis 2026, arXiv 2607.25271",
    ),
}


def empirical_eta(law: Law, n_params, fresh_tokens, derived_tokens, observed_loss):
    """η recovered from an observed loss (docs/files.md): how much fresh data it was worth.

    ΔL = L_1ep(N, D) − L_obs, D_eff = (D^−β − ΔL/B)^(−1/β), η = (D_eff − D)/D′.
    NaN where undefined: D′ = 0, or the observed gain exceeds what any data could give.
    """
    N, D, Dp, L = (
        np.asarray(x, dtype=float) for x in (n_params, fresh_tokens, derived_tokens, observed_loss)
    )
    dL = law.loss_one_epoch(N, D) - L
    inner = D**-law.beta - dL / law.B
    with np.errstate(divide="ignore", invalid="ignore"):
        D_eff = np.where(inner > 0, inner, np.nan) ** (-1.0 / law.beta)
        out = (D_eff - D) / Dp
    return np.where(Dp > 0, out, np.nan)
