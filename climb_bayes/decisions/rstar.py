"""Posterior draws of the optimal mixture ``r*`` for pictures, reports and robustness studies.

Thin helpers over the exact batched solver (:func:`climb_bayes.decisions.solvers.direct_batch`):
thin a fit's draws, pick the usual extrapolation target, and minimise the weighted loss per draw.
The decision itself (Bayes/CVaR mixture, baselines, P(better)) is
:mod:`climb_bayes.decisions.optimization`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from climb_bayes.decisions.optimization import check_budget, thin_draws
from climb_bayes.decisions.solvers import direct_batch
from climb_bayes.model.law import LawParams

__all__ = [
    "MAX_DRAWS",
    "RSTAR_SOURCE",
    "subsample_law",
    "default_target_budget",
    "law_rstar",
    "rstar_draws",
    "predictive_rstar_draws",
]

MAX_DRAWS = 200
"""Draws used by pictures and studies (evenly thinned)."""

RSTAR_SOURCE = "direct minimiser of the weighted loss per draw (climb_bayes.decisions.solvers)"
"""How :func:`rstar_draws` computes ``r*`` (shown under figures and in the report)."""


def subsample_law(fit: object, max_draws: int = MAX_DRAWS) -> LawParams:
    """Law draws (tokens units) of ``fit`` thinned evenly to at most ``max_draws``."""
    return thin_draws(fit.law_draws(), max_draws)


def default_target_budget(fit: object) -> float:
    """Ten times the largest fitted budget (the usual extrapolation target), tokens."""
    return 10.0 * float(np.max(fit.runs.run_budgets))


def law_rstar(law: LawParams, budget: float, weights: Sequence[float] | None = None) -> np.ndarray:
    """Per-draw minimiser ``(S, m)`` of the weighted loss over the simplex at ``budget``."""
    m = law.beta.shape[-1]
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=float)
    return direct_batch(law, check_budget(budget), w / w.sum(), np.zeros(m), np.ones(m)).x


def rstar_draws(
    fit: object, budget: float, weights: Sequence[float] | None = None, max_draws: int = MAX_DRAWS
) -> np.ndarray:
    """Posterior draws of ``r*`` at ``budget``: ``(S, m)``, ``S <= max_draws``."""
    return law_rstar(subsample_law(fit, max_draws), budget, weights)


def predictive_rstar_draws(
    fit: object,
    budget: float,
    weights: Sequence[float] | None = None,
    max_draws: int = MAX_DRAWS,
    seed: int = 0,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """Draws of ``r*`` under the fit's default predictive: ``(S, m)``, ``S <= max_draws``.

    The stacked laws' posterior draws with their extrapolation discrepancy
    (:meth:`Fit.ensemble`, :func:`climb_bayes.decisions.ensemble_decision.decision_draws`),
    each minimised over the simplex as ``climb-bayes optimize`` does for its ``r* (default)``
    column. The solver starts at ``start`` ``(m,)``, by default the median of CLIMB's own
    :func:`rstar_draws` (pass it when you have those draws already).
    """
    from climb_bayes.decisions import ensemble_decision as ed

    m = len(fit.languages)
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=float)
    draws = ed.decision_draws(fit.ensemble(), check_budget(budget), max_draws, seed=seed)
    if start is None:
        start = np.median(rstar_draws(fit, budget, weights, max_draws), axis=0)
    return ed.optimum_draws(draws, w / w.sum(), np.zeros(m), np.ones(m), start=start)
