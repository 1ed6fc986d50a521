"""The default predictive: every law's posterior, its extrapolation discrepancy, and stacking.

No single law wins everywhere (CLIMB was best on RegMix and most of 5Mix, MSL on a 7-domain
benchmark; docs/benchmarks.md). :func:`fit_ensemble` therefore

1. runs leave-future-out folds *inside* the data (:mod:`climb_bayes.inference.lfo`; fits on budgets
   ``<= D_k``, predicts the larger ones) when there are at least three budget levels;
2. learns each law's extrapolation discrepancy from those residuals, starting from a prior
   calibrated on published benchmarks (:mod:`climb_bayes.model.discrepancy`);
3. stacks the laws' predictive distributions with weights that maximise the leave-future-out
   log score (Yao et al. 2018), averaged over a Bayesian bootstrap of the folds' (fold,
   language) blocks, whose points share a law's error (:mod:`climb_bayes.inference.stacking`)
   -- or the PSIS-LOO log score when the data have a single budget and cannot say how a law
   extrapolates;
   its intervals average the laws' *quantiles* with those weights (:func:`quantile_average`),
   the decisions mix the laws' draws (below);
4. fits every law to all the data (NUTS by default; with folds, after the weights, so a law the
   folds give no weight can get a cheaper fit, :attr:`EnsembleOptions.nuts_min_weight`; with a
   single budget, before them, as the LOO weights need the full fits).

Everything downstream (predict, optimize, suggest, report, evaluate) reads the resulting
:class:`LawEnsemble`.

How the laws are combined
-------------------------
Each law's predictive already carries its own extrapolation discrepancy, i.e. its own error
against reality. *Mixing* the laws' distributions (``sum_k w_k p_k``, the textbook stack) adds
the laws' disagreement on top: two laws 1% apart, each with a calibrated 1% spread, give a
mixture about 1.5x as wide. Averaging *quantiles* (Vincentization: ``Q(u) = sum_k w_k Q_k(u)``)
keeps the weighted average of the laws' centres and of their spreads; when each component is
calibrated, probability averaging is under-confident and quantile averaging is not (Lichtendahl,
Grushka-Cockayne & Winkler 2013). Measured on the 8 real extrapolation sets of
``benchmarks/real_data.py --only-pipeline`` with the same fits and weights (docs/benchmarks.md):
CRPS lower on the 7 sets where two laws share the weight (equal on the eighth), 50% coverage
0.71-0.84 -> 0.56-0.86 (lower on 5 of the 7, target 0.40-0.60), MRE of the median lower on 6.
So ``combine="quantile"`` (the default) gives intervals and ``combine="mixture"`` the
distribution of the textbook stack.

Averaging quantiles joins the laws at equal ranks: it assumes their errors move together. When
each law is calibrated and their errors ``y - mu_k`` have (uncentred) correlation ``rho_jk``,
the weighted centre's error has variance ``sum_jk w_j w_k rho_jk s_j s_k``, below the squared
average spread wherever ``rho < 1`` (on RedPajama MSL and the DML err in opposite directions).
With inner folds the ensemble measures ``rho`` on the laws' fold residuals
(:func:`error_correlation`, stored in ``lfo[law]["error_correlation"]``) and joins the laws'
quantiles through a Gaussian copula with that correlation (:func:`copula_average`; all ``rho =
1`` is the quantile average exactly; ``EnsembleOptions(correlate=False)`` keeps it). Measured
in docs/model.md ('Joining the laws by their error correlation').

The quantile average is defined per quantity (its draws are comonotone across quantities), so
the *decisions* -- ``r*``, ``P(better)`` -- keep the mixture over laws and draws
(:mod:`climb_bayes.decisions.ensemble_decision`), where which law is right is part of the risk
taken.

The weights and the discrepancy are estimated on the same leave-future-out predictions that
measure them, an in-sample optimism of a few parameters (docs/model.md); honest numbers come
from evaluating the whole procedure on data it has not seen (``climb-bayes evaluate``, which
refits the ensemble, inner folds included, on the fit side only).

References
----------
.. [1] Yao, Vehtari, Simpson & Gelman (2018), "Using Stacking to Average Bayesian Predictive
   Distributions", Bayesian Analysis 13(3).
.. [2] Bürkner, Gabry & Vehtari (2020), "Approximate leave-future-out cross-validation for
   Bayesian time series models".
.. [3] Kennedy & O'Hagan (2001), "Bayesian calibration of computer models".
.. [4] Lichtendahl, Grushka-Cockayne & Winkler (2013), "Is It Better to Average Probabilities
   or Quantiles?", Management Science 59(7).
.. [5] Nelsen (2006), "An Introduction to Copulas", 2nd ed., Springer.
.. [6] Vehtari, Simpson, Gelman, Yao & Gabry (2024), "Pareto Smoothed Importance Sampling",
   JMLR 25(72) (the Pareto k diagnostic of the one-budget LOO weights).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from climb_bayes.data.observations import Observations, budget_range
from climb_bayes.data.padding import PaddedShape
from climb_bayes.errors import ClimbError
from climb_bayes.inference.lfo import LfoFold, lfo_folds
from climb_bayes.inference.predictive import (
    PredictiveParts,
    law_and_predictive_draws,
    log_predictive_density,
    predictive_parts,
    predictive_samples,
)
from climb_bayes.inference.stacking import (
    STACKING_BOOTSTRAP,
    bootstrap_stacking_weights,
    stacking_weights,
)
from climb_bayes.laws.base import FitOptions, Law, LawFit
from climb_bayes.model.discrepancy import (
    Discrepancy,
    LfoResiduals,
    calibrate,
    centre_factor,
    discrepancy_distance,
    discrepancy_prior,
)

__all__ = [
    "LawEnsemble",
    "EnsembleOptions",
    "shipped_options",
    "fit_ensemble",
    "stacking_weights",
    "WEIGHT_METHODS",
    "LFO_METHODS",
    "FOLD_NUTS_CHAINS",
    "FOLD_NUTS_WARMUP",
    "FOLD_NUTS_SAMPLES",
    "COMBINE_METHODS",
    "quantile_average",
    "copula_average",
    "error_correlation",
    "in_sample_lpd",
]

MIN_LOO_DRAWS = 100
"""Fewer posterior draws than this (a point fit, a very short run): PSIS-LOO is not reliable
(Pareto smoothing needs a tail of at least 5 draws), the in-sample log density stands in."""

WEIGHT_METHODS = ("lfo-bootstrap-stacking", "lfo-stacking", "loo-stacking", "single")
"""How the weights were found: the inner folds' log score averaged over a Bayesian bootstrap
of their (fold, language) blocks (default, :mod:`climb_bayes.inference.stacking`), the same
score as if every point were independent (``EnsembleOptions(stacking_bootstrap=0)``; fits
stored before 2026-11-27, evening), PSIS-LOO (no leave-future-out folds: fewer than three
budget levels, or ``lfo="none"``), or a single law."""
LFO_METHODS = ("laplace", "nuts", "map", "none")
FOLD_NUTS_CHAINS, FOLD_NUTS_WARMUP, FOLD_NUTS_SAMPLES = 2, 150, 200
"""Chains, warm-up steps per chain and total draws of a NUTS fold refit (``lfo="nuts"``; at
most the full fit's). A fold refit only has to place the fold's predictive mean and variance:
on RedPajama-70M 2 x (150 + 100) gave the same stacking weights and held-out row as 2 x (400 +
200) in 269 s instead of 393 s, and on the default data CLIMB's folds by 2 x (75 + 100) the same
fold MRE (6.11%) and coverage as 4 x (400 + 100) (docs/benchmarks.md, docs/model.md)."""
COMBINE_METHODS = ("quantile", "mixture")
"""How the laws' predictives are combined: join their quantiles (default; at the correlation of
the laws' inner-fold errors where it was measured, else at equal ranks) or mix them."""


def quantile_average(draws: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Weighted average of the laws' quantile functions (Vincentization), from draws.

    Parameters
    ----------
    draws : sequence of ndarray (n, ...)
        Equally many draws per law (the first axis); any trailing shape, the same for all.
    weights : sequence of float
        One weight per law, >= 0, not all 0 (normalised here).

    Returns
    -------
    ndarray (n, ...)
        ``sum_k w_k sort(draws_k)`` along the first axis: ``n`` draws whose empirical quantile
        function is the weighted average of the laws'. Each column is sorted (the draws are
        comonotone across columns): use them per quantity (intervals, CRPS), not jointly.

    References
    ----------
    .. [1] Lichtendahl, Grushka-Cockayne & Winkler (2013), Management Science 59(7).
    """
    w, parts = _sorted_draws(draws, weights, "quantile_average")
    return sum(wk * part for wk, part in zip(w, parts, strict=True))


def _sorted_draws(
    draws: Sequence[np.ndarray], weights: Sequence[float], caller: str
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Normalised weights and each law's draws sorted along the first axis (arguments checked)."""
    w = np.asarray(weights, dtype=float)
    if w.size != len(draws) or w.size == 0 or np.any(w < 0) or w.sum() <= 0:
        raise ClimbError(f"{caller} needs one weight >= 0 per law, got {w.tolist()}.")
    shapes = {np.shape(d) for d in draws}
    if len(shapes) != 1:
        raise ClimbError(f"{caller} needs draws of one shape, got {sorted(shapes)}.")
    return w / w.sum(), [np.sort(np.asarray(d, dtype=float), axis=0) for d in draws]


def copula_average(
    draws: Sequence[np.ndarray],
    weights: Sequence[float],
    correlation: np.ndarray,
    seed: int = 0,
) -> np.ndarray:
    """Weighted sum of the laws' quantiles at ranks joined by a Gaussian copula.

    Draw ``j`` is ``sum_k w_k Q_k(u_jk)`` with ``u_j`` the ranks of a correlated normal vector
    (correlation ``correlation``), stratified so that every law's draws are used once each.
    When each law's predictive is calibrated and the laws' errors ``y - mu_k`` have (uncentred)
    correlation ``rho``, the error of the weighted centre has variance ``sum_jk w_j w_k rho_jk
    s_j s_k``: this is the distribution whose spread that implies. All correlations 1 give
    :func:`quantile_average` exactly (comonotone ranks); lower correlations give a narrower
    stack, as two laws that err in opposite directions do.

    Parameters
    ----------
    draws : sequence of ndarray (n, ...)
        Equally many draws per law (the first axis); any trailing shape, the same for all.
    weights : sequence of float
        One weight per law, >= 0, not all 0 (normalised here).
    correlation : ndarray (K, K)
        Correlation of the laws' errors; a matrix that is not positive semi-definite is
        projected onto the nearest one (eigenvalues clipped at 0).
    seed : int
        Seed of the copula's normal draws.

    Returns
    -------
    ndarray (n, ...)
        Draws whose columns share each law's ranks (per quantity, as :func:`quantile_average`).

    References
    ----------
    .. [1] Lichtendahl, Grushka-Cockayne & Winkler (2013), Management Science 59(7).
    .. [2] Nelsen (2006), "An Introduction to Copulas", 2nd ed., Springer (Gaussian copula).
    """
    w, parts = _sorted_draws(draws, weights, "copula_average")
    corr = np.asarray(correlation, dtype=float)
    k = len(draws)
    if corr.shape != (k, k):
        raise ClimbError(f"copula_average needs a {k} x {k} correlation, got {corr.shape}.")
    if np.allclose(corr, 1.0):  # comonotone: the quantile average
        return sum(wk * part for wk, part in zip(w, parts, strict=True))
    vals, vecs = np.linalg.eigh((corr + corr.T) / 2)
    root = vecs * np.sqrt(np.clip(vals, 0.0, None))  # root @ root.T = the projected matrix
    n = np.shape(draws[0])[0]
    z = np.random.default_rng(seed).standard_normal((n, k)) @ root.T
    ranks = np.argsort(np.argsort(z, axis=0, kind="stable"), axis=0)  # (n, K) in 0..n-1
    return sum(w[j] * np.take(part, ranks[:, j], axis=0) for j, part in enumerate(parts))


def error_correlation(residuals: Sequence[np.ndarray]) -> np.ndarray:
    """Uncentred correlation of the laws' errors: ``sum z_j z_k / sqrt(sum z_j^2 sum z_k^2)``.

    Uncentred because a law's bias is part of its error: the variance of the weighted centre's
    error is ``sum_jk w_j w_k E[e_j e_k]``, so the combination needs ``E[e_j e_k]``, not the
    covariance about each law's mean error.

    Parameters
    ----------
    residuals : sequence of ndarray (n,)
        Each law's errors ``log y - E[log y]`` on the same points (the inner leave-future-out
        predictions).

    Returns
    -------
    ndarray (K, K)
        1 on the diagonal; 1 everywhere when there are no residuals.
    """
    z = np.stack([np.asarray(r, dtype=float) for r in residuals])
    norm = np.sqrt(np.sum(z**2, axis=1))
    if z.shape[1] == 0 or np.any(norm == 0):
        return np.ones((len(residuals), len(residuals)))
    corr = (z @ z.T) / np.outer(norm, norm)
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)


@dataclass(frozen=True)
class EnsembleOptions:
    """How :func:`fit_ensemble` fits and calibrates.

    Attributes
    ----------
    method : str
        Inference of the full fits (``"nuts"`` or ``"map"``).
    lfo : str
        Inner leave-future-out refits: ``"laplace"`` (default: the posterior mode and a Gaussian
        around it, :mod:`climb_bayes.inference.laplace`; seconds per refit), ``"nuts"`` (short
        chains; minutes), ``"map"`` (point fits without priors: their residuals also carry the
        parameter uncertainty they leave out, so the discrepancy comes out larger) or ``"none"``
        (the discrepancy keeps its prior).
    lfo_folds : int
        Most inner folds (the last cuts, nearest the full fit).
    lfo_cuts : tuple of float, optional
        The inner folds' cuts (tokens; budget levels of the data below the largest) instead of
        the last ``lfo_folds``: e.g. folds that end as far from the full fit's end as a target
        lies beyond it (``benchmarks/trend_extrapolation.py``).
    lfo_options : FitOptions, optional
        Settings of the fold fits (default: the full fits' with at most 400 warm-up steps and
        400 draws; for NUTS folds :data:`FOLD_NUTS_CHAINS` x (:data:`FOLD_NUTS_WARMUP` +
        :data:`FOLD_NUTS_SAMPLES` / chains)).
    discrepancy : bool
        Learn and use the extrapolation discrepancy.
    trend : bool
        Let the discrepancy's ``tau`` change with where a fit ends (each law's calibrated trend
        prior, :func:`~climb_bayes.model.discrepancy.calibrate`); False: one ``tau`` for every
        fold and the full fit (the model before 2026-12-03).
    n_draws : int
        Discrepancy draws (paired with the parameter draws).
    nuts_min_weight : float
        With ``method="nuts"`` and inner folds, a law whose stacking weight (known before the
        full fits: it comes from the folds alone) is below this gets a Laplace full fit instead
        of NUTS. Such a law hardly shapes the default predictive, so its sampling time buys
        nothing there (``climb-bayes fit`` uses 0.01, the convergence gate's threshold, and saves
        ~22 s of its ~90 s on the default data); its own posterior, read with ``--law NAME``, is
        then the Laplace approximation and says so (``LawFit.method``). 0 samples every law.
    correlate : bool
        Measure the correlation of the laws' inner-fold errors (:func:`error_correlation`) and
        join the laws' quantiles by it (:func:`copula_average`); False: comonotone quantiles
        (:func:`quantile_average`), which assumes the laws err together.
    stacking_bootstrap : int
        Bayesian-bootstrap replicates over the inner folds' (fold, language) blocks whose
        stacking optima are averaged into the weights
        (:func:`~climb_bayes.inference.stacking.bootstrap_stacking_weights`); 0: one optimum
        over the points as if they were independent (the weights of fits stored before
        2026-11-27, evening).
    """

    method: str = "nuts"
    lfo: str = "laplace"
    lfo_folds: int = 2
    lfo_cuts: tuple[float, ...] | None = None
    lfo_options: FitOptions | None = None
    discrepancy: bool = True
    trend: bool = True
    n_draws: int = 1000
    nuts_min_weight: float = 0.0
    correlate: bool = True
    stacking_bootstrap: int = STACKING_BOOTSTRAP

    def __post_init__(self) -> None:
        if self.lfo_cuts is not None and self.lfo == "none":
            raise ClimbError(
                "LFO cuts need leave-future-out refits, which lfo='none' (fit --lfo none, "
                "evaluate --inner-lfo none) turns off: drop one or the other."
            )


def shipped_options(
    method: str = "nuts",
    lfo: str = "laplace",
    *,
    nuts_all_laws: bool = False,
    lfo_cuts: Sequence[float] | None = None,
) -> EnsembleOptions:
    """The ensemble settings of ``climb-bayes fit`` (and so of ``evaluate --shipped`` and
    ``--lfo``): a law whose stacking weight is below
    :data:`~climb_bayes.inference.convergence.MIN_STACK_WEIGHT` gets a Laplace full fit instead
    of NUTS, unless ``nuts_all_laws``.

    Parameters
    ----------
    method : str
        Inference of the full fits.
    lfo : str
        Inner leave-future-out refits (:class:`EnsembleOptions`).
    nuts_all_laws : bool
        Sample every law (``fit --nuts-all-laws``).
    lfo_cuts : sequence of float, optional
        The inner folds' cuts (tokens; ``fit --lfo-cuts``) instead of the
        :attr:`EnsembleOptions.lfo_folds` cuts nearest the full fit's end.

    Returns
    -------
    EnsembleOptions
    """
    from climb_bayes.inference.convergence import MIN_STACK_WEIGHT

    return EnsembleOptions(
        method=method,
        lfo=lfo,
        lfo_cuts=None if lfo_cuts is None else tuple(float(c) for c in lfo_cuts),
        nuts_min_weight=0.0 if nuts_all_laws else MIN_STACK_WEIGHT,
    )


@dataclass
class LawEnsemble:
    """Fitted laws with their discrepancies and stacking weights.

    Attributes
    ----------
    fits : dict of str to LawFit
        One per law (with ``discrepancy`` attached when learned).
    weights : dict of str to float
        Stacking weights (sum to 1).
    weight_method : str
        One of :data:`WEIGHT_METHODS`.
    lfo : dict
        Inner leave-future-out summary per law (folds, residual count, MRE, coverage of the
        law's predictive before and after the discrepancy).
    """

    fits: dict[str, LawFit]
    weights: dict[str, float]
    weight_method: str = "single"
    lfo: dict[str, Any] = field(default_factory=dict)

    @property
    def groups(self) -> tuple[str, ...]:
        """Group names (shared by every law)."""
        return next(iter(self.fits.values())).groups

    def only(self, name: str) -> LawEnsemble:
        """The ensemble reduced to one law (weight 1)."""
        if name not in self.fits:
            raise ClimbError(f"law {name!r} is not in this fit; it has {', '.join(self.fits)}.")
        return LawEnsemble({name: self.fits[name]}, {name: 1.0}, "single", self.lfo)

    def allocation(self, n: int, seed: int = 0) -> dict[str, int]:
        """How many of ``n`` samples each law contributes (largest-remainder rounding)."""
        names = list(self._positive())
        w = np.array([self.weights[k] for k in names])
        raw = w / w.sum() * n
        out = np.floor(raw).astype(int)
        rest = n - out.sum()
        out[np.argsort(raw - out)[::-1][:rest]] += 1
        return {k: int(c) for k, c in zip(names, out, strict=True) if c > 0}

    def error_correlation(self, names: Sequence[str]) -> np.ndarray:
        """``(K, K)`` correlation of the named laws' inner-fold errors (``lfo[name]
        ["error_correlation"]``); 1 where it was not measured (no folds, or an ensemble made
        before it was)."""
        corr = np.ones((len(names), len(names)))
        for a, j in enumerate(names):
            row = self.lfo.get(j, {}).get("error_correlation", {})
            for b, k in enumerate(names):
                if a != b and k in row:
                    corr[a, b] = float(row[k])
        return corr

    def _positive(self) -> dict[str, float]:
        return {k: w for k, w in self.weights.items() if w > 0}

    def predictive_samples(
        self,
        obs: Observations,
        n_samples: int = 1000,
        *,
        seed: int = 0,
        combine: str = "quantile",
        **kw: Any,
    ) -> np.ndarray:
        """``(n_samples, N)`` draws of ``log y`` from the stacked predictive.

        ``combine="quantile"``: :func:`quantile_average` of ``n_samples`` draws per law (each
        column sorted; for intervals and scores per observation); ``"mixture"``: each law
        contributes draws in proportion to its weight (joint draws of the textbook stack).
        """
        (out,) = self._combined(
            lambda fit, n, s: (predictive_samples(fit, obs, n, seed=s, **kw),),
            n_samples,
            seed,
            combine,
        )
        return out

    def log_predictive_density(self, obs: Observations, *, seed: int = 0, **kw: Any) -> np.ndarray:
        """``(N,)`` ``log sum_k w_k p_k(y)`` of each observation: the density of the mixture
        (the stacking objective; the quantile average has no closed-form density)."""
        from scipy.special import logsumexp

        names = list(self._positive())
        dens = np.stack([log_predictive_density(self.fits[k], obs, seed=seed, **kw) for k in names])
        logw = np.log([self.weights[k] for k in names])[:, None]
        return logsumexp(dens + logw, axis=0)

    def law_and_predictive_draws(
        self,
        r: np.ndarray,
        tokens: np.ndarray,
        n_samples: int = 4000,
        *,
        seed: int = 0,
        combine: str = "quantile",
        series: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(n, B, m)`` stacked draws of the laws' ``log L`` (parameters only) and of a new
        run's ``log y`` (full predictive) at mixtures ``r`` ``(B, m)`` and budgets ``(B,)``,
        combined as in :meth:`predictive_samples`; with ``series`` the continuation of those
        fitted training runs instead of a new run
        (:func:`~climb_bayes.inference.predictive.law_and_predictive_draws`)."""
        law, pred = self._combined(
            lambda fit, n, s: law_and_predictive_draws(fit, r, tokens, n, seed=s, series=series),
            n_samples,
            seed,
            combine,
        )
        return law, pred

    def _combined(
        self,
        draw: Callable[[LawFit, int, int], tuple[np.ndarray, ...]],
        n_samples: int,
        seed: int,
        combine: str,
    ) -> tuple[np.ndarray, ...]:
        """Each law's ``draw(fit, n, seed)`` (a tuple of ``(n, ...)`` arrays; law ``k`` of the
        positive weights gets ``seed + k``), combined per array: :func:`quantile_average` of
        ``n_samples`` draws per law, or ``n_samples`` draws shared out by weight (mixture)."""
        _check_combine(combine)
        if combine == "quantile":
            names = list(self._positive())
            parts = [draw(self.fits[name], n_samples, seed + k) for k, name in enumerate(names)]
            w = [self.weights[k] for k in names]
            corr = self.error_correlation(names)
            return tuple(
                copula_average(list(arrays), w, corr, seed) for arrays in zip(*parts, strict=True)
            )
        parts = [
            draw(self.fits[name], count, seed + k)
            for k, (name, count) in enumerate(self.allocation(n_samples).items())
        ]
        return tuple(np.concatenate(arrays, axis=0) for arrays in zip(*parts, strict=True))

    def point(self, obs: Observations, **kw: Any) -> np.ndarray:
        """``(N,)`` point prediction of ``log y``: weighted mean of the laws' median centres."""
        out = np.zeros(obs.n)
        for name, w in self.weights.items():
            if w > 0:
                parts = predictive_parts(self.fits[name], obs, discrepancy=False, **kw)
                out += w * np.median(parts.centre, axis=0)
        return out


def _check_combine(combine: str) -> None:
    if combine not in COMBINE_METHODS:
        raise ClimbError(f"combine must be one of {', '.join(COMBINE_METHODS)}, got {combine!r}.")


def _fold_residuals(
    fold_fit: LawFit, test: Observations, fold_id: int, m: int
) -> tuple[LfoResiduals, PredictiveParts]:
    parts = predictive_parts(fold_fit, test, discrepancy=False)
    lo, hi = budget_range(fold_fit.fit_obs)
    x = discrepancy_distance(test.run_budget[test.run], lo[test.group], hi[test.group])
    z = test.log_loss - parts.centre.mean(axis=0)
    block = fold_id * m + test.group
    factor = centre_factor(parts.centre)
    res = LfoResiduals(
        z, parts.variance(False), x, test.group, block, test.r, factor, hi[test.group]
    )
    return res, parts


def _summary(y: np.ndarray, samples: np.ndarray) -> dict[str, float]:
    lo90, hi90 = np.quantile(samples, [0.05, 0.95], axis=0)
    lo50, hi50 = np.quantile(samples, [0.25, 0.75], axis=0)
    med = np.median(samples, axis=0)
    return {
        "n": int(y.size),
        "mre": float(np.mean(np.abs(np.exp(med - y) - 1.0))),
        "cov50": float(np.mean((y >= lo50) & (y <= hi50))),
        "cov90": float(np.mean((y >= lo90) & (y <= hi90))),
    }


def fit_ensemble(
    obs: Observations,
    laws: Sequence[Law],
    options: FitOptions | None = None,
    ens: EnsembleOptions | None = None,
    *,
    prefit: dict[str, LawFit] | None = None,
    log: Callable[[str], None] | None = None,
) -> LawEnsemble:
    """Fit every law, calibrate its discrepancy by inner LFO, and stack (module docstring).

    Parameters
    ----------
    obs : Observations
        The data (each law uses the observations it can explain).
    laws : sequence of Law
        Laws to combine.
    options : FitOptions, optional
        Settings of the full fits (NUTS chains, draws, priors, seed).
    ens : EnsembleOptions, optional
        Inner-fold and discrepancy settings.
    prefit : dict of str to LawFit, optional
        Full fits already made (e.g. CLIMB's by ``climb-bayes fit``); the others are fitted.
    log : callable, optional
        Progress lines.

    Returns
    -------
    LawEnsemble
    """
    options = options or FitOptions()
    ens = ens or EnsembleOptions()
    log = log or (lambda _msg: None)
    if ens.lfo not in LFO_METHODS:
        raise ClimbError(f"--lfo must be one of {', '.join(LFO_METHODS)}, got {ens.lfo!r}.")
    laws = [law.prepare(obs) for law in laws]
    # every Laplace fit below (folds and full) padded to the table's shape: a law's fits share
    # their compiled programs (climb_bayes.inference.argument_potential)
    options = replace(options, pad_to=PaddedShape.of(obs))
    fits: dict[str, LawFit] = dict(prefit or {})
    # the points every law can predict: stacking compares laws on the same observations
    common = obs
    for law in laws:
        common = law.usable(common)
    folds: list[LfoFold] = (
        []
        if ens.lfo == "none"
        else lfo_folds(common, max_folds=ens.lfo_folds, keep="latest", cuts=ens.lfo_cuts)
    )
    if not folds:  # the PSIS-LOO weights below need every full fit
        _fit_full(laws, fits, obs, ens.method, options, log)
    if ens.lfo_options is not None:
        fold_opts = replace(ens.lfo_options, pad_to=options.pad_to)
    elif ens.lfo == "nuts":  # short chains (FOLD_NUTS_*)
        fold_opts = replace(
            options,
            chains=min(options.chains, FOLD_NUTS_CHAINS),
            warmup=min(options.warmup, FOLD_NUTS_WARMUP),
            samples=min(options.samples, FOLD_NUTS_SAMPLES),
        )
    else:  # Laplace draws (or a point fit)
        fold_opts = replace(
            options, warmup=min(options.warmup, 400), samples=min(options.samples, 400)
        )
    resid: dict[str, list[LfoResiduals]] = {law.name: [] for law in laws}
    fold_parts: dict[str, list[tuple[LawFit, Observations, PredictiveParts]]] = {
        law.name: [] for law in laws
    }
    fold_k: dict[str, list[tuple[float, float]]] = {law.name: [] for law in laws}
    for f, fold in enumerate(folds):
        train, test = common.select(fold.fit), common.select(fold.test)
        log(
            f"leave-future-out fold {f + 1}/{len(folds)}: fit budgets <= {fold.cut:.3g} "
            f"({train.n} observations), predict {test.n} at up to "
            f"{float(test.run_budget[test.run].max() / fold.cut):.3g}x"
        )
        for law in laws:
            t0 = time.perf_counter()
            fold_fit = law.prepare(train).fit(train, ens.lfo, fold_opts)
            r, parts = _fold_residuals(fold_fit, test, f, obs.m)
            resid[law.name].append(r)
            fold_parts[law.name].append((fold_fit, test, parts))
            k = fold_fit.info.get("pareto_k")
            if k is not None and not np.isnan(k):  # nan: too few draws to tell
                fold_k[law.name].append((float(k), float(fold_fit.info["pareto_k_max"])))
            how = "" if k is None else f" (Laplace, Pareto k {float(k):.2f})"
            log(f"  {law.name}: fold fit in {time.perf_counter() - t0:.1f} s{how}")
    lo, hi = budget_range(common)
    lfo_summary: dict[str, Any] = {}
    discs: dict[str, Discrepancy | None] = {}
    for law in laws:
        prior = discrepancy_prior(law.name)
        if not ens.trend:
            prior = prior._replace(trend_mean=0.0, trend_sd=0.0)
        discs[law.name] = None
        if ens.discrepancy:
            all_resid = LfoResiduals.concat(resid[law.name])
            disc = calibrate(all_resid, prior, lo, hi, n_draws=ens.n_draws, seed=options.seed)
            discs[law.name] = disc
            tau = np.median(disc.tau, axis=0)
            log(
                f"{law.name}: discrepancy from {disc.source} ({all_resid.z.size} LFO residuals); "
                f"median tau {', '.join(f'{t:.3f}' for t in tau)} per squared unit of log D"
                + (
                    ""
                    if disc.trend is None or (prior.trend_mean, prior.trend_sd) == (0.0, 0.0)
                    else f" at the full fit's end (folds' tau x (cut / end)^trend, trend median "
                    f"{np.median(disc.trend):.2f})"
                )
            )
        lfo_summary[law.name] = {
            "folds": len(folds),
            "cuts": [fold.cut for fold in folds],
            "prior_median": prior.median,
        }
        if fold_k[law.name]:  # the Laplace fold refits' worst Pareto k and its threshold
            worst = max(fold_k[law.name], key=lambda kk: kk[0] - kk[1])
            lfo_summary[law.name] |= {"fold_pareto_k": worst[0], "fold_pareto_k_max": worst[1]}
    if folds and ens.correlate and len(laws) > 1:
        corr = error_correlation([LfoResiduals.concat(resid[law.name]).z for law in laws])
        for a, law in enumerate(laws):
            lfo_summary[law.name]["error_correlation"] = {
                other.name: float(corr[a, b]) for b, other in enumerate(laws) if b != a
            }
        log(
            "correlation of the laws' inner-fold errors: "
            + ", ".join(
                f"{laws[a].name}~{laws[b].name} {corr[a, b]:.2f}"
                for a in range(len(laws))
                for b in range(a + 1, len(laws))
            )
        )
    weights: dict[str, float]
    if len(laws) == 1:
        weights, method = {laws[0].name: 1.0}, "single"
    elif folds:
        lpd = {}
        for law in laws:
            lpd[law.name], scores = _score_folds(
                fold_parts[law.name], discs[law.name], options.seed
            )
            lfo_summary[law.name] |= scores
        if ens.stacking_bootstrap > 0:
            # the points of one (fold, language) block share a law's extrapolation error; the
            # residuals carry that block id, in the order of the fold scores
            clusters = LfoResiduals.concat(resid[laws[0].name]).block
            weights = bootstrap_stacking_weights(
                lpd, clusters, n_bootstrap=ens.stacking_bootstrap, seed=options.seed
            )
            method = "lfo-bootstrap-stacking"
        else:
            weights, method = stacking_weights(lpd), "lfo-stacking"
    else:
        weights, method = _loo_weights(fits, common, log), "loo-stacking"
    log(
        f"stacking weights ({method}): "
        + ", ".join(f"{k} {w:.2f}" for k, w in sorted(weights.items(), key=lambda kv: -kv[1]))
    )
    if folds:  # the weights came from the folds alone: the full fits can follow them
        _fit_full(laws, fits, obs, ens.method, options, log, weights, ens.nuts_min_weight)
    for law in laws:
        if discs[law.name] is not None:
            fits[law.name] = replace(fits[law.name], discrepancy=discs[law.name])
    return LawEnsemble(fits, weights, method, lfo_summary)


def _fit_full(
    laws: Sequence[Law],
    fits: dict[str, LawFit],
    obs: Observations,
    method: str,
    options: FitOptions,
    log: Callable[[str], None],
    weights: dict[str, float] | None = None,
    nuts_min_weight: float = 0.0,
) -> None:
    """Fit every law not in ``fits`` to all of ``obs`` (in place). With ``method == "nuts"``, a
    law whose stacking weight is below ``nuts_min_weight`` gets a Laplace fit instead
    (:attr:`EnsembleOptions.nuts_min_weight`)."""
    for law in laws:
        if law.name in fits:
            continue
        how = method
        w = None if weights is None else weights.get(law.name, 0.0)
        if method == "nuts" and w is not None and w < nuts_min_weight:
            how = "laplace"
            log(
                f"{law.name}: stacking weight {w:.3f} < {nuts_min_weight:g}: Laplace fit instead "
                "of NUTS (it does not shape the default predictive; --nuts-all-laws samples it)"
            )
        t0 = time.perf_counter()
        fits[law.name] = law.fit(obs, how, options, log=log)
        log(f"{law.name}: {how} fit in {time.perf_counter() - t0:.1f} s")


def _score_folds(
    folds: list[tuple[LawFit, Observations, PredictiveParts]],
    disc: Discrepancy | None,
    seed: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Pointwise LFO log densities with the learned discrepancy (measured from each fold's own
    budget range, its ``tau`` at the fold's end: :meth:`Discrepancy.for_range`), and coverage /
    MRE of the fold predictives without and with it."""
    chunks, before, after = [], [], []
    for fold_fit, test, parts in folds:
        with_d = fold_fit
        if disc is not None:
            flo, fhi = budget_range(fold_fit.fit_obs)
            with_d = replace(fold_fit, discrepancy=disc.for_range(flo, fhi))
        chunks.append(log_predictive_density(with_d, test, seed=seed))
        plain = predictive_samples(fold_fit, test, 1000, discrepancy=False, parts=parts)
        before.append(_summary(test.log_loss, plain))
        after.append(_summary(test.log_loss, predictive_samples(with_d, test, 1000, seed=seed)))
    lpd = np.concatenate(chunks)
    scores = {
        "n": int(lpd.size),
        "lpd": float(lpd.mean()),
        "without_discrepancy": _pool(before),
        "with_discrepancy": _pool(after),
    }
    return lpd, scores


def _pool(rows: list[dict[str, float]]) -> dict[str, float]:
    n = sum(r["n"] for r in rows)
    out = {"n": n}
    for key in ("mre", "cov50", "cov90"):
        out[key] = float(sum(r[key] * r["n"] for r in rows) / max(n, 1))
    return out


def _loo_weights(
    fits: dict[str, LawFit], obs: Observations, log: Callable[[str], None] | None = None
) -> dict[str, float]:
    """Stacking on PSIS-LOO of each law's per-run-group log-likelihood (one budget only); a law
    whose Pareto k exceeds arviz-stats' threshold at some groups gets one log line saying so."""
    from climb_bayes.inference.predictive import pointwise_log_likelihood

    lpd = {}
    for name, fit in fits.items():
        ll = pointwise_log_likelihood(fit, obs)
        if ll.shape[0] < MIN_LOO_DRAWS:  # a point fit or a short run: in-sample density
            lpd[name] = in_sample_lpd(ll)
            continue
        lpd[name], khat, good_k = _psis_loo_pointwise(ll)
        failed = ~np.isfinite(lpd[name])
        if failed.any():
            lpd[name][failed] = in_sample_lpd(ll[:, failed])
            if log is not None:
                log(
                    f"{name}: PSIS-LOO failed (not finite) at {int(failed.sum())} of "
                    f"{failed.size} run groups; their in-sample density stands in there "
                    "(optimistic for this law)"
                )
        bad = khat > good_k
        if bad.any() and log is not None:
            log(
                f"{name}: PSIS-LOO Pareto k > {good_k:.2f} at {int(bad.sum())} of {bad.size} run "
                f"groups (max {np.max(khat):.2f}): its leave-one-out density there, and so its "
                "stacking weight, is approximate (Vehtari et al. 2024)"
            )
    return stacking_weights(lpd)


def in_sample_lpd(ll: np.ndarray) -> np.ndarray:
    """``(G,)`` in-sample log predictive density ``log mean_s exp(ll[s, g])`` of ``(S, G)``
    pointwise log-likelihoods.

    Where PSIS-LOO fails (a non-finite ``elpd_i``: the Pareto fit of extreme importance ratios,
    seen with the Normal likelihood on tiny-2024's final points for CLIMB and the DML, 2026-12-07)
    it stands in: a NaN would make :func:`arviz_stats.compare`'s stacking return equal weights
    for every law without a word.
    """
    top = ll.max(axis=0)
    return np.log(np.mean(np.exp(ll - top), axis=0)) + top


def _psis_loo_pointwise(ll: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``(G,)`` PSIS-LOO log predictive densities from ``(S, G)`` log-likelihoods
    (:func:`arviz_stats.loo` on a one-chain tree), with the ``(G,)`` Pareto k values and the
    threshold above which arviz-stats calls an estimate unreliable (its warning is replaced by
    the caller's log line)."""
    import warnings

    import arviz_base
    from arviz_stats import loo

    tree = arviz_base.from_dict(
        {
            "posterior": {"_": np.zeros((1, ll.shape[0]))},
            "log_likelihood": {"y": ll[None]},
        }
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
        res = loo(tree, pointwise=True, var_name="y")
    good_k = float(getattr(res, "good_k", None) or 0.7)
    return np.asarray(res.elpd_i).ravel(), np.asarray(res.pareto_k).ravel(), good_k
