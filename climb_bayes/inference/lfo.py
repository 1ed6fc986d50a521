"""Leave-future-out (LFO) folds: fit on the smaller budgets, score the larger ones.

A scaling law is used to extrapolate in the budget ``D``; leave-one-out and random splits
score interpolation. LFO orders the distinct budgets ``D_1 < ... < D_K`` of a table and, for
each cut ``k``, fits on the runs with budget ``<= D_k`` and scores every run with a larger
budget, keeping the *extrapolation ratio* ``D_target / D_k`` of each scored point. Nothing of a
budget above the cut enters the fit (:func:`check_no_leakage`).

The budget of an observation is its run's budget (:attr:`Observations.run_budget`): the tail
points of a run belong to one budget level; checkpoints stored as runs (published curves)
are levels of their own.

References
----------
.. [1] Bürkner, Gabry & Vehtari (2020), "Approximate leave-future-out cross-validation for
   Bayesian time series models", J. Stat. Comput. Simul. 90(14) (LFO; refit at each cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from climb_bayes.data.observations import Observations
from climb_bayes.errors import ClimbError
from climb_bayes.model.discrepancy import extrapolation_distance  # noqa: F401  (re-exported)

__all__ = [
    "LfoFold",
    "budget_levels",
    "lfo_folds",
    "check_no_leakage",
    "RATIO_BINS",
    "ratio_bin",
    "MIN_FIT_LEVELS",
]

MIN_FIT_LEVELS = 2
"""Budget levels a fold must fit: with one budget a law's exponent ``beta`` is not identified
and its extrapolations are the prior's, not the law's."""

LEVEL_REL_TOL = 1e-6
"""Budgets within this relative distance are one level."""

RATIO_BINS: tuple[tuple[float, float], ...] = (
    (1.0, 1.5),
    (1.5, 2.0),
    (2.0, 4.0),
    (4.0, 8.0),
    (8.0, np.inf),
)
"""Extrapolation-ratio bins ``(lo, hi]`` (``D_target / D_max_fit``) in LFO summaries."""


class LfoFold(NamedTuple):
    """One leave-future-out split.

    Attributes
    ----------
    cut : float
        Largest budget fitted (tokens); every scored run has a larger budget.
    n_levels : int
        Budget levels fitted.
    fit : numpy.ndarray
        ``(N,)`` bool, observations fitted.
    test : numpy.ndarray
        ``(N,)`` bool, observations scored.
    """

    cut: float
    n_levels: int
    fit: np.ndarray
    test: np.ndarray

    def ratio(self, obs: Observations) -> np.ndarray:
        """``(N_test,)`` extrapolation ratio ``run budget / cut`` of the scored observations."""
        return obs.run_budget[obs.run[self.test]] / self.cut


def budget_levels(obs: Observations | np.ndarray) -> np.ndarray:
    """Distinct run budgets (tokens, ascending; near-equal ones merged).

    Of the observations' runs, or of an array of run budgets (a runs table's ``run_budgets``).
    """
    if isinstance(obs, Observations):
        b = obs.run_budget[obs.run] if obs.n else np.zeros(0)
    else:
        b = np.asarray(obs, dtype=float)
    b = np.sort(np.unique(b))
    if b.size == 0:
        return b
    keep = np.concatenate([[True], np.diff(b) > LEVEL_REL_TOL * b[1:]])
    return b[keep]


def lfo_folds(
    obs: Observations,
    *,
    min_fit_levels: int = MIN_FIT_LEVELS,
    max_folds: int | None = None,
    min_test: int = 1,
    keep: str = "spread",
    cuts: Sequence[float] | None = None,
) -> list[LfoFold]:
    """Leave-future-out splits of ``obs``, one per cut with enough levels before and after.

    Parameters
    ----------
    obs : Observations
        Data with at least ``min_fit_levels + 1`` budget levels for any fold.
    min_fit_levels : int
        Budget levels every fit must contain.
    max_folds : int, optional
        Keep at most this many cuts (all by default), chosen by ``keep``.
    min_test : int
        Least number of scored observations for a fold to count.
    keep : {"spread", "latest"}
        Which cuts ``max_folds`` keeps: ``"spread"`` evenly from the earliest (fewest budgets
        fitted, the longest extrapolations) to the latest, to score every extrapolation ratio
        (``evaluate --lfo``); ``"latest"`` the last ones, whose fitted span is nearest the full
        fit's (what the discrepancy is learned from: on 5Mix the earliest folds, fitting a span
        5x shorter, gave a ``tau`` 1.6-5.7x the one the full fit's extrapolation needed).
    cuts : sequence of float, optional
        The folds' cuts (tokens), each a budget level of ``obs`` below the largest; replaces
        ``max_folds`` and ``keep``. A cut that is not such a level, or too early for a fold,
        raises :class:`ClimbError` naming the levels or the valid cuts.

    Returns
    -------
    list of LfoFold
        In order of increasing cut; empty when the data have too few levels.
    """
    if min_fit_levels < 1:
        raise ClimbError(f"min_fit_levels must be >= 1, got {min_fit_levels}.")
    if keep not in ("spread", "latest"):
        raise ClimbError(f"keep must be 'spread' or 'latest', got {keep!r}.")
    levels = budget_levels(obs)
    budget = obs.run_budget[obs.run]
    folds = []
    for k in range(min_fit_levels - 1, levels.size - 1):
        cut = float(levels[k])
        fit = budget <= cut * (1.0 + LEVEL_REL_TOL)
        test = ~fit
        if test.sum() >= min_test and fit.any():
            folds.append(LfoFold(cut, k + 1, fit, test))
    if cuts is not None:
        return [_fold_at(folds, levels, float(c), min_fit_levels, min_test) for c in sorted(cuts)]
    if max_folds is not None and len(folds) > max_folds:
        if max_folds <= 0:
            return []
        if keep == "latest":
            return folds[-max_folds:]
        idx = np.unique(np.round(np.linspace(0, len(folds) - 1, max_folds)).astype(int))
        folds = [folds[i] for i in idx]
    return folds


def _fold_at(
    folds: list[LfoFold], levels: np.ndarray, cut: float, min_fit_levels: int, min_test: int
) -> LfoFold:
    """The one of ``folds`` (every valid cut) cut at budget level ``cut``; an error naming the
    levels or the valid cuts when there is none."""
    near = np.abs(levels - cut) <= LEVEL_REL_TOL * max(abs(cut), 1.0)
    if not near.any() or near[-1]:
        known = ", ".join(f"{v:.4g}" for v in levels[:-1])
        raise ClimbError(
            f"LFO cut {cut:.4g} tokens is not a budget level below the largest; use one of "
            f"{known or '(none: the data have one budget level)'}."
        )
    k = int(np.flatnonzero(near)[0])
    for fold in folds:
        if fold.n_levels == k + 1:
            return fold
    valid = ", ".join(f"{f.cut:.4g}" for f in folds) or "none: too few budget levels"
    raise ClimbError(
        f"LFO cut {cut:.4g} tokens fits {k + 1} budget level(s); a fold needs {min_fit_levels} "
        f"level(s) and {min_test} scored observation(s): use a later cut ({valid})."
    )


def check_no_leakage(obs: Observations, fold: LfoFold) -> None:
    """Raise if an observation of a budget above the cut is in the fold's fit (a bug guard)."""
    budget = obs.run_budget[obs.run]
    if np.any(budget[fold.fit] > fold.cut * (1.0 + LEVEL_REL_TOL)):
        raise ClimbError("LFO fold fits a budget above its cut (future data leaked into a fit).")
    if np.any(fold.fit & fold.test):
        raise ClimbError("LFO fold scores an observation it also fits.")


def ratio_bin(ratio: np.ndarray) -> np.ndarray:
    """Index into :data:`RATIO_BINS` of each extrapolation ratio (``-1`` for ``<= 1``)."""
    ratio = np.asarray(ratio, dtype=float)
    out = np.full(ratio.shape, -1, dtype=np.int64)
    for j, (lo, hi) in enumerate(RATIO_BINS):
        out[(ratio > lo) & (ratio <= hi)] = j
    return out
