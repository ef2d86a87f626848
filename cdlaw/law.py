"""Law: one law form with its constants, which fit writes and plan / plot read; PRESETS.

A form's equations live in its cdlaw/laws module (the CD law's η, R*, loss and effective
data in cdlaw/laws/cd.py); Law evaluates them for one set of constants, and adds the
frontiers L_1ep, L_D, L_N (docs/law.md, docs/regimes.md). Every method broadcasts over
numpy arrays, so one call evaluates a whole table of runs. Parameters go by the names of
fit.json (docs/files.md); everywhere outside cdlaw/laws and this module uses the names of
docs/names.md (n_params, fresh_tokens, derived_tokens, ...).

    law = PRESETS["qin2026"]                       # or Law.from_dict(fit_json)
    law.loss(100e6, 2e9, 6e9, "repetition")
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from cdlaw.laws import LAWS
from cdlaw.laws.cd import effective_data, eta
from cdlaw.laws.form import LawForm
from cdlaw.strategies import NONE, PARAPHRASE, REPETITION


def _declaration(form: str | LawForm) -> LawForm:
    if isinstance(form, LawForm):
        return form
    if form not in LAWS:
        raise ValueError(f"unknown law form {form!r}; valid: {', '.join(LAWS)}")
    return LAWS[form]


# ---------------------------------------------------------------------------------------
# A fitted or published law, as one value that fit writes and plan / plot read.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, init=False)
class Law:
    """One law form with its constants; what it computes, its form declares (cdlaw/laws).

        Law(form, params, strategies=None, source="")
        Law("cd", {"E": 1.4, "A": 225.3, "B": 17737.7, "alpha": 0.29, "beta": 0.44},
            {"repetition": {"K": 4.6e4, "rho": -0.42, "sigma": -0.40}})

    form: a name in cdlaw.laws.LAWS, or a LawForm (a test may declare its own).
    params: the shared parameters, exactly the form's (law.params["alpha"]).
    strategies: a strategy name to its parameters, exactly the form's per-strategy ones:
        {"K", "rho", "sigma"} for `cd` (K linear; the log-space fit uses log K),
        {"rstar_d", "rstar_n"} for `muennighoff`, nothing for `chinchilla`.
    source: where the constants come from (a paper, or the table that was fitted).
    Law.from_dict reads fit.json's names; PRESETS holds the published constants.
    """

    form: str  # the form's name, as fit.json's "law"
    params: dict[str, float]
    strategies: dict[str, dict[str, float]]
    source: str
    form_decl: LawForm = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        form: str | LawForm,
        params: Mapping[str, float],
        strategies: Mapping[str, Mapping[str, float]] | None = None,
        source: str = "",
    ) -> None:
        decl = _declaration(form)
        unknown = sorted(set(params) - set(decl.shared))
        missing = [k for k in decl.shared if k not in params]
        if unknown or missing:
            raise TypeError(
                f"a {decl.name} law has parameters {', '.join(decl.shared)}"
                + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                + (f"; missing: {', '.join(missing)}" if missing else "")
            )
        per = {str(s): dict(p) for s, p in (strategies or {}).items()}
        need = set(decl.strategy_params)
        for name, p in per.items():
            if set(p) != need:
                raise ValueError(
                    f"strategy {name!r} of a {decl.name} law needs {sorted(need)}, got {sorted(p)}"
                )
        object.__setattr__(self, "form", decl.name)
        object.__setattr__(self, "params", {k: params[k] for k in decl.shared})
        object.__setattr__(self, "strategies", per)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "form_decl", decl)

    # -- the law and its frontiers (docs/law.md, docs/regimes.md) --------------------------------------

    def strategy_params(self, strategy: str) -> dict[str, float]:
        if not self.form_decl.strategy_params:
            return {}
        if strategy not in self.strategies:
            have = ", ".join(sorted(self.strategies)) or "none"
            raise KeyError(
                f"this {self.form} law has no parameters for strategy {strategy!r} (has: {have})"
            )
        return self.strategies[strategy]

    def knows_strategy(self, strategy: str) -> bool:
        """Whether loss() can score runs of `strategy` ("none" it always can)."""
        return strategy == NONE or not self.form_decl.strategy_params or strategy in self.strategies

    def values(self, strategy: str) -> dict[str, float]:
        """What the form's functions read: the shared parameters and the strategy's. For
        "none", the per-strategy ones every strategy shares (muennighoff's rstar_n)."""
        if strategy != NONE:
            return {**self.params, **self.strategy_params(strategy)}
        first = next(iter(self.strategies.values()), {})
        return {**self.params, **{k: first[k] for k in self.form_decl.tied if k in first}}

    def rstar(self, n_params, fresh_tokens, strategy: str):
        """R* for a strategy: how many passes' worth of derived tokens still pay off."""
        decl = self.form_decl
        if decl.rstar is None:
            # derived tokens are worth nothing to a law that ignores them (R* = 0); a law
            # that reads them without an R* has none to give
            shape = np.broadcast(n_params, fresh_tokens).shape
            return np.full(shape, np.nan) if decl.uses_derived else np.zeros(shape)
        return decl.rstar({**self.params, **self.strategy_params(strategy)}, n_params, fresh_tokens)

    def effective_data(self, n_params, fresh_tokens, derived_tokens, strategy: str):
        """D_eff = D + η·D′ (for `chinchilla`, derived tokens are worth nothing)."""
        R = self.rstar(n_params, fresh_tokens, strategy)
        return effective_data(fresh_tokens, derived_tokens, R)

    def eta(self, n_params, fresh_tokens, derived_ratio, strategy: str):
        """η(r, D/N, N): the value of a derived token relative to a fresh one."""
        return eta(derived_ratio, self.rstar(n_params, fresh_tokens, strategy))

    def loss(self, n_params, fresh_tokens, derived_tokens=0.0, strategy: str = NONE):
        """Predicted loss L(N, D, D′). strategy "none" (or D′ = 0) gives the Chinchilla law."""
        N, D, Dp = (np.asarray(x, dtype=float) for x in (n_params, fresh_tokens, derived_tokens))
        if strategy == NONE:  # no derived strategy: D′ counts for nothing
            Dp = 0 * Dp
        return self.form_decl.loss(self.values(strategy), N, D, Dp)

    def loss_one_epoch(self, n_params, fresh_tokens):
        """L_1ep = L(N, D, 0): one pass over the fresh tokens, nothing derived."""
        return self.loss(n_params, fresh_tokens, 0.0, NONE)

    def best_derived_tokens(self, n_params, fresh_tokens, strategy: str) -> np.ndarray:
        """D′* ≥ 0, the derived tokens that minimise the loss at (N, D) (broadcasting).

        inf for strategy "none", for a form whose loss never rises with D′ (no
        derived_optimum), and wherever more derived tokens never hurt.
        """
        N, D = np.broadcast_arrays(
            np.asarray(n_params, dtype=float), np.asarray(fresh_tokens, dtype=float)
        )
        optimum = self.form_decl.derived_optimum
        if strategy == NONE or optimum is None:
            return np.full(N.shape, np.inf)
        out = optimum(self.values(strategy), N, D)
        return np.broadcast_to(np.asarray(out, dtype=float), N.shape).copy()

    def loss_data_floor(self, n_params, fresh_tokens, strategy: str):
        """L_D = min over D′ of L: the best loss derived tokens can reach at (N, D).

        For a law whose loss never rises with D′ that is the limit D′ → ∞,
        E + A/N^α + B/(D(1 + R*))^β for the CD law; for a form that can overfit
        (can_overfit) it is the loss at best_derived_tokens.
        """
        if not self.form_decl.uses_derived or strategy == NONE:
            return self.loss_one_epoch(n_params, fresh_tokens)
        if self.form_decl.can_overfit:
            best = self.best_derived_tokens(n_params, fresh_tokens, strategy)
            return self.loss(n_params, fresh_tokens, best, strategy)
        return self.loss(n_params, fresh_tokens, np.inf, strategy)

    def loss_model_floor(self, n_params):
        """L_N = E + A/N^α: the loss with unlimited fresh data."""
        return self.form_decl.model_floor(self.params, n_params)

    def reducible_model_loss(self, n_params):
        """E + A/N^α is what a fit pins down even when E, A and α trade off (docs/fit.md)."""
        return self.loss_model_floor(n_params)

    # -- (de)serialisation in the names of fit.json (docs/files.md) -------------------------

    def to_dict(self) -> dict:
        return {
            "law": self.form,
            "params": {k: float(v) for k, v in self.params.items()},
            "strategies": {
                s: {k: float(v) for k, v in p.items()} for s, p in self.strategies.items()
            },
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Law:
        """Read the law from a fit.json (or any dict with "law", "params", "strategies")."""
        decl = _declaration(d.get("law", "cd"))
        params = {k: float(d["params"][k]) for k in decl.shared}
        strategies = {s: dict(p) for s, p in (d.get("strategies") or {}).items()}
        return cls(decl, params, strategies, d.get("source", ""))


# ---------------------------------------------------------------------------------------
# Published constants (docs/plan.md). N and D are counted as each paper counts them.
# ---------------------------------------------------------------------------------------

PRESETS: dict[str, Law] = {
    # Hoffmann et al. 2022 (arXiv 2203.15556), approach 3, eq. 10.
    "chinchilla-hoffmann": Law(
        "chinchilla",
        {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28},
        source="Hoffmann et al. 2022, arXiv 2203.15556, eq. 10",
    ),
    # Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt" (arXiv 2404.10102), eq. 4.
    "chinchilla-besiroglu": Law(
        "chinchilla",
        {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658},
        source="Besiroglu et al. 2024, arXiv 2404.10102, eq. 4",
    ),
    # Muennighoff et al. 2023 (arXiv 2305.16264), fitted constants of eqs. 5–7 (appendix A);
    # alpha = beta as in their fit. Repetition only: the paper studies repeated epochs.
    "muennighoff2023": Law(
        "muennighoff",
        {"E": 1.8691, "A": 520.82, "B": 1487.7, "alpha": 0.3526596, "beta": 0.3526596},
        {REPETITION: {"rstar_d": 15.387756, "rstar_n": 5.309743}},
        source="Muennighoff et al. 2023, arXiv 2305.16264, eqs. 5-7",
    ),
    # The CD paper (Qin, Hamidieh, Alvarez-Melis, arXiv 2607.25271), joint fit; K = e^(log K).
    "qin2026": Law(
        "cd",
        {"E": 1.3958, "A": 225.30, "B": 17737.7, "alpha": 0.289137, "beta": 0.437825},
        {
            REPETITION: {"K": math.exp(10.740510), "rho": -0.416064, "sigma": -0.403500},
            PARAPHRASE: {"K": math.exp(26.868495), "rho": -1.303025, "sigma": -1.149994},
        },
        source="Qin, Hamidieh, Alvarez-Melis 2026, arXiv 2607.25271",
    ),
}


def empirical_eta(law: Law, n_params, fresh_tokens, derived_tokens, observed_loss):
    """η recovered from an observed loss (docs/files.md): how much fresh data it was worth.

    ΔL = L_1ep(N, D) − L_obs, D_eff = (D^−β − ΔL/B)^(−1/β), η = (D_eff − D)/D′.
    NaN where undefined: D′ = 0, the observed gain exceeds what any data could give, or
    the law has no data term B/D^β (the practical form).
    """
    if not {"B", "beta"} <= law.params.keys():
        return np.full(np.broadcast(n_params, fresh_tokens, derived_tokens).shape, np.nan)
    N, D, Dp, L = (
        np.asarray(x, dtype=float) for x in (n_params, fresh_tokens, derived_tokens, observed_loss)
    )
    B, beta = law.params["B"], law.params["beta"]
    dL = law.loss_one_epoch(N, D) - L
    inner = D**-beta - dL / B
    with np.errstate(divide="ignore", invalid="ignore"):
        D_eff = np.where(inner > 0, inner, np.nan) ** (-1.0 / beta)
        out = (D_eff - D) / Dp
    return np.where(Dp > 0, out, np.nan)
