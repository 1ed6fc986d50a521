"""Credible intervals on each language's loss at any budget and mixture.

Two quantities per language, from the posterior draws of a fit:

* the **expected loss** ``L_i(D, r)`` -- the law itself (no observation noise): its spread is
  the parameter uncertainty only;
* the **posterior predictive** loss of one new run: ``exp(log L_i(D, r) + sigma_i e)`` with
  ``e`` drawn from the fit's likelihood on log-loss (Student-t with ``df`` degrees of freedom,
  or Normal) and ``sigma`` the posterior draws of the noise scale.

Summaries are the mean, the median and central intervals (the ``(1 - level) / 2`` and
``(1 + level) / 2`` quantiles) over the draws. For the Student-t likelihood the exact mean of the
predictive loss does not exist (``E[exp(sigma e)]`` diverges for a t variable); the reported
mean is the Monte-Carlo mean, which is stable in practice (``sigma`` ~ 1e-2) but should be read
with the median.

A language with share ``r_i = 0`` has an unbounded predicted loss under CLIMB (its effective
data is zero): it is reported as ``inf`` (and flagged), never as the large finite value the
law's numerical floor would give.

Units
-----
Budgets in tokens; losses in nats/token; ``sigma`` on the log-loss scale.

References
----------
.. [1] Guo et al. (2025), "CLIMB", Eq. (6).
.. [2] Gelman et al. (2013), "Bayesian Data Analysis", 3rd ed., Section 6.3 (posterior
   predictive distributions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from climb_bayes.errors import ClimbError
from climb_bayes.laws.base import likelihood_df
from climb_bayes.model.law import LawParams, log_loss

__all__ = [
    "LIKELIHOODS",
    "MIN_PREDICTIVE_SAMPLES",
    "NoiseModel",
    "noise_model",
    "law_log_loss",
    "predictive_log_loss",
    "interval_bounds",
    "summarize",
    "coverage",
    "predict_table",
    "ensemble_table",
    "ensemble_grid",
]

LIKELIHOODS = ("student_t", "normal")

MIN_PREDICTIVE_SAMPLES = 4000
"""Noise draws are repeated per posterior draw until there are at least this many samples."""


@dataclass(frozen=True)
class NoiseModel:
    """Observation noise on log-loss: ``sigma`` draws ``(S, m)`` and the distribution.

    Attributes
    ----------
    sigma : ndarray (S, m)
        Noise scale per draw and language (log-loss units).
    likelihood : str
        ``"student_t"`` or ``"normal"``.
    df : float or ndarray (S, m)
        Degrees of freedom of the Student-t (per draw and language where learned; unused by
        the Normal).
    """

    sigma: np.ndarray
    likelihood: str = "student_t"
    df: float | np.ndarray = 4.0

    def __post_init__(self) -> None:
        if self.likelihood not in LIKELIHOODS:
            raise ClimbError(f"likelihood must be one of {', '.join(LIKELIHOODS)}.")
        if np.ndim(self.df) and np.shape(self.df) != np.shape(self.sigma):
            raise ClimbError(
                f"df draws have shape {np.shape(self.df)}, sigma draws {np.shape(self.sigma)}: "
                "take both from the same draws (NoiseModel.take)."
            )

    def df_draws(self) -> np.ndarray:
        """``(S, m)`` degrees of freedom of every draw and language."""
        return np.broadcast_to(np.asarray(self.df, dtype=float), self.sigma.shape)

    def take(self, idx: np.ndarray) -> NoiseModel:
        """The noise of the draws ``idx``."""
        df = self.df if np.ndim(self.df) == 0 else np.asarray(self.df)[idx]
        return NoiseModel(self.sigma[idx], self.likelihood, df)


def noise_model(fit: object) -> NoiseModel:
    """The noise of one new run's evaluation point under a
    :class:`~climb_bayes.inference.fitresult.Fit`: its likelihood, and
    ``sqrt(sigma^2 + sigma_run^2)`` per draw (the marginal scale of a point of a run the fit has
    not seen, :mod:`climb_bayes.model.observation`)."""
    priors = fit.priors
    sigma = np.asarray(fit.sigma_draws(), dtype=float)
    if "sigma_run" in fit.tree["posterior"]:
        sigma = np.hypot(sigma, np.asarray(fit.draws("sigma_run"), dtype=float))
    df = likelihood_df(priors, {"df": fit.draws("df")} if priors.learned_df else {})
    return NoiseModel(sigma, priors.likelihood, df)


def law_log_loss(params: LawParams, r: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Law prediction ``log L`` per draw at points ``(r, tokens)``: ``(S, P, m)``.

    Parameters
    ----------
    params : LawParams
        Draws, leading axis ``S``, tokens units.
    r : ndarray (P, m)
        Mixtures.
    tokens : ndarray (P,)
        Budgets (tokens, > 0).

    Returns
    -------
    ndarray (S, P, m)
        ``log L`` (log nats/token); ``+inf`` where ``r_i = 0``.
    """
    r = np.atleast_2d(np.asarray(r, dtype=float))
    tokens = np.atleast_1d(np.asarray(tokens, dtype=float))
    if np.any(~np.isfinite(tokens)) or np.any(tokens <= 0):
        raise ClimbError(f"budgets must be positive numbers of tokens, got {tokens.tolist()}.")
    p = [np.asarray(x, dtype=float)[:, None] for x in params]  # add the point axis
    out = np.asarray(log_loss(r[None], tokens[None, :], *p))
    return np.where(r[None] > 0, out, np.inf)


def predictive_log_loss(
    log_l: np.ndarray, noise: NoiseModel, *, seed: int = 0, n_rep: int | None = None
) -> np.ndarray:
    """Posterior predictive ``log L`` (law + noise): ``(S * n_rep, P, m)``.

    Each posterior draw is used ``n_rep`` times (by default enough for
    :data:`MIN_PREDICTIVE_SAMPLES` samples) with independent noise.
    """
    s = log_l.shape[0]
    if noise.sigma.shape != (s, log_l.shape[-1]):
        raise ClimbError(
            f"sigma draws have shape {noise.sigma.shape}, expected {(s, log_l.shape[-1])}."
        )
    n_rep = n_rep or max(1, math.ceil(MIN_PREDICTIVE_SAMPLES / s))
    rng = np.random.default_rng(seed)
    shape = (n_rep,) + log_l.shape
    if noise.likelihood == "student_t":
        df = np.asarray(noise.df, dtype=float)
        e = rng.standard_t(df[None, :, None, :] if df.ndim else df, size=shape)
    else:
        e = rng.standard_normal(size=shape)
    out = log_l[None] + noise.sigma[None, :, None, :] * e
    return out.reshape((-1,) + log_l.shape[1:])


def interval_bounds(samples: np.ndarray, level: float, axis: int = 0) -> tuple:
    """Central interval of ``samples`` along ``axis``: ``(q_lo, q_hi)``."""
    if not 0.0 < level < 1.0:
        raise ClimbError(f"interval levels must be in (0, 1), got {level}.")
    q = (1.0 - level) / 2.0
    return np.quantile(samples, q, axis=axis), np.quantile(samples, 1.0 - q, axis=axis)


def summarize(loss_samples: np.ndarray, levels: Sequence[float]) -> dict[str, np.ndarray]:
    """Mean, median and central intervals over axis 0 of loss samples (nats/token).

    ``inf`` samples (zero shares) give ``inf`` summaries.
    """
    unbounded = np.all(np.isinf(loss_samples), axis=0)
    with np.errstate(invalid="ignore"):
        out = {
            "mean": np.mean(loss_samples, axis=0),
            "median": np.median(loss_samples, axis=0),
        }
        for lv in levels:
            lo, hi = interval_bounds(loss_samples, lv)
            out[f"{_pct(lv)}_lo"] = lo
            out[f"{_pct(lv)}_hi"] = hi
    return {k: np.where(unbounded, np.inf, v) for k, v in out.items()}


def coverage(
    params: LawParams,
    noise: NoiseModel,
    runs: object,
    levels: Sequence[float] = (0.5, 0.9),
    *,
    seed: int = 0,
) -> dict[float, float]:
    """Fraction of the observations of ``runs`` inside the central predictive intervals.

    Parameters
    ----------
    params, noise
        Posterior draws and noise model of a fit.
    runs : RunsData
        Held-out runs (:func:`climb_bayes.data.runs.read_runs`); languages in the fit's order.
    levels : sequence of float
        Interval levels.
    seed : int
        Seed of the noise draws.

    Returns
    -------
    dict
        ``level -> coverage``. A calibrated model gives about ``level``; an over-confident one
        (too little noise or parameter uncertainty) much less.
    """
    point_r = np.asarray(runs.run_proportions)[np.asarray(runs.point_run)]
    log_l = law_log_loss(params, point_r, np.asarray(runs.point_tokens))
    pred = predictive_log_loss(log_l, noise, seed=seed)
    pred = pred[:, np.asarray(runs.obs_point), np.asarray(runs.obs_language)]
    y = np.log(np.asarray(runs.obs_loss))
    out = {}
    for lv in levels:
        lo, hi = interval_bounds(pred, lv)
        out[float(lv)] = float(np.mean((y >= lo) & (y <= hi)))
    return out


def _pct(level: float) -> str:
    return f"{100 * level:g}%"


def predict_table(
    params: LawParams,
    noise: NoiseModel,
    languages: Sequence[str],
    mixtures: np.ndarray,
    budgets: Sequence[float],
    *,
    levels: Sequence[float] = (0.5, 0.9),
    seed: int = 0,
    mixture_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-language predictions at each budget: expected and predictive loss summaries.

    Parameters
    ----------
    params : LawParams
        Posterior draws (tokens units).
    noise : NoiseModel
        Observation noise (:func:`noise_model`).
    languages : sequence of str
        Names of the ``m`` languages.
    mixtures : ndarray (m,) or (B, m)
        One mixture, or one per budget.
    budgets : sequence of float
        Budgets in tokens.
    levels : sequence of float
        Central interval levels.
    seed : int
        Seed of the noise draws.
    mixture_names : sequence of str, optional
        Label per budget for the ``mixture`` column.

    Returns
    -------
    pandas.DataFrame
        Long table, one row per (budget, language, quantity) with ``quantity`` in
        ``{"expected", "predictive"}`` and columns ``budget, mixture, language, share,
        quantity, mean, median, <level>_lo, <level>_hi`` (losses in nats/token; ``inf`` where
        the share is 0).
    """
    budgets = np.asarray([float(b) for b in budgets])
    m = len(languages)
    r = np.asarray(mixtures, dtype=float)
    r = np.broadcast_to(r, (budgets.size, m)) if r.ndim == 1 else r
    if r.shape != (budgets.size, m):
        raise ClimbError(f"mixtures must be ({m},) or ({budgets.size}, {m}), got {r.shape}.")
    levels = tuple(float(x) for x in levels)
    log_l = law_log_loss(params, r, budgets)  # (S, B, m)
    pred = predictive_log_loss(log_l, noise, seed=seed)
    summaries = {
        "expected": summarize(np.exp(log_l), levels),
        "predictive": summarize(np.exp(pred), levels),
    }
    names = list(mixture_names) if mixture_names is not None else [""] * budgets.size
    return _summary_frame(summaries, budgets, names, languages, r)


def ensemble_table(
    ens: object,
    mixtures: np.ndarray,
    budgets: Sequence[float],
    *,
    levels: Sequence[float] = (0.5, 0.9),
    seed: int = 0,
    mixture_names: Sequence[str] | None = None,
    n_samples: int = MIN_PREDICTIVE_SAMPLES,
    combine: str = "quantile",
    series: int | np.ndarray | None = None,
) -> pd.DataFrame:
    """Per-language predictions of a :class:`~climb_bayes.inference.ensemble.LawEnsemble` (the
    default predictive) at each (mixture, budget) pair.

    Parameters
    ----------
    ens : LawEnsemble
        Laws, weights and discrepancies (:meth:`Fit.ensemble`).
    mixtures : ndarray (B, m) or (m,)
        One mixture per row (broadcast to every budget when one is given).
    budgets : sequence of float
        One budget (tokens) per row of ``mixtures`` (or a single budget for all rows).
    levels, seed, mixture_names
        Interval levels, seed of the predictive draws, label per row.
    n_samples : int
        Predictive samples (per law with ``combine="quantile"``, in all otherwise).
    combine : {"quantile", "mixture"}
        Average the laws' quantiles with the stacking weights (default) or mix their
        distributions (:meth:`~climb_bayes.inference.ensemble.LawEnsemble.predictive_samples`).
    series : int or ndarray (B,), optional
        ``run_series`` code of a fitted training run (:mod:`climb_bayes.decisions.continuation`),
        one for all rows or one per row: the ``"predictive"`` rows are then that run continued
        (its fitted deviation from the law carried forward) instead of a new run; each row's
        mixture must be its run's.

    Returns
    -------
    pandas.DataFrame
        Long table like :func:`predict_table`; ``quantity`` is ``"expected"`` (the laws'
        prediction: parameter and law uncertainty only) or ``"predictive"`` (one new run, or
        the continued one: also the extrapolation discrepancy, the run effect and noise).
    """
    r = np.atleast_2d(np.asarray(mixtures, dtype=float))
    budgets = np.asarray([float(b) for b in np.atleast_1d(budgets)])
    if r.shape[0] == 1 and budgets.size > 1:
        r = np.repeat(r, budgets.size, axis=0)
    if budgets.size == 1 and r.shape[0] > 1:
        budgets = np.repeat(budgets, r.shape[0])
    if budgets.size != r.shape[0]:
        raise ClimbError(f"give one budget per mixture: {r.shape[0]} mixtures, {budgets.size}.")
    if np.any(~np.isfinite(budgets)) or np.any(budgets <= 0):
        raise ClimbError(f"budgets must be positive numbers of tokens, got {budgets.tolist()}.")
    levels = tuple(float(x) for x in levels)
    codes = (
        None
        if series is None
        else np.broadcast_to(np.asarray(series, dtype=np.int64), budgets.shape)
    )
    law, pred = ens.law_and_predictive_draws(
        r, budgets, n_samples, seed=seed, combine=combine, series=codes
    )
    summaries = {
        "expected": summarize(np.exp(law), levels),
        "predictive": summarize(np.exp(pred), levels),
    }
    names = list(mixture_names) if mixture_names is not None else [""] * budgets.size
    languages = ens.groups
    return _summary_frame(summaries, budgets, names, languages, r)


def ensemble_grid(
    ens: object,
    shares: np.ndarray,
    names: Sequence[str],
    budgets: Sequence[float],
    *,
    series: np.ndarray | None = None,
    **kwargs: Any,
) -> pd.DataFrame:
    """:func:`ensemble_table` at every (row, budget) pair, rows outer: row ``k`` of ``shares``
    ``(K, m)``, named ``names[k]`` (and continuing the fitted training run ``series[k]`` when
    ``series`` is given), at each of ``budgets``; ``kwargs`` as :func:`ensemble_table`'s."""
    shares = np.atleast_2d(np.asarray(shares, dtype=float))
    b = np.atleast_1d(np.asarray(budgets, dtype=float))
    return ensemble_table(
        ens,
        np.repeat(shares, b.size, axis=0),
        np.tile(b, shares.shape[0]),
        mixture_names=[n for n in names for _ in b],
        series=None if series is None else np.repeat(series, b.size),
        **kwargs,
    )


def _summary_frame(
    summaries: dict[str, dict[str, np.ndarray]],
    budgets: np.ndarray,
    names: Sequence[str],
    languages: Sequence[str],
    r: np.ndarray,
) -> pd.DataFrame:
    """Long table: one row per budget, language and quantity (``expected``/``predictive``)."""
    rows = []
    for b, budget in enumerate(budgets):
        for i, lang in enumerate(languages):
            for quantity, summ in summaries.items():
                row = {
                    "budget": float(budget),
                    "mixture": names[b],
                    "language": lang,
                    "share": float(r[b, i]),
                    "quantity": quantity,
                }
                row |= {key: float(val[b, i]) for key, val in summ.items()}
                rows.append(row)
    return pd.DataFrame(rows)
