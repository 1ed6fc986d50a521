"""Posterior predictive of a fitted law at observations: law + run effect + noise + discrepancy.

For each posterior draw ``s`` and observation ``n`` (language ``i``, budget ``D``, mixture
``r``, in run ``g``):

    log y = law_s(D, r)_i + [shift of run g] + delta_s + eps + noise

* the **run effect and noise** (:mod:`climb_bayes.model.observation`): a run the fit has seen (a
  later checkpoint of a fitted trajectory) gets the conditional law given that run's fitted
  residuals; a new run gets the marginal one, scale ``sqrt(sigma^2 + sigma_run^2)``;
* the **discrepancy** ``delta`` (:mod:`climb_bayes.model.discrepancy`), 0 inside the fitted budgets,
  bounded so that the expected loss does not rise with more tokens of the same mixture
  (:func:`monotone_bounds`);
* the **mixture discrepancy** ``eps`` (:mod:`climb_bayes.model.mixture_discrepancy`), 0 where
  every language's share lies in the range the fitted runs cover; it moves a mixture's whole
  curve, so it is added after the monotone bound. Both come with the fit's discrepancy.

:func:`predictive_parts` returns these pieces per draw; :func:`predictive_samples` draws from
the predictive and :func:`log_predictive_density` scores observations under it (the density of
the law + noise part is exact per draw; the discrepancy is integrated by Monte Carlo, one draw
of it per posterior draw).

Units
-----
Everything on log(loss) (nats/token before the log).

References
----------
.. [1] Gelman et al. (2013), "Bayesian Data Analysis", 3rd ed., Section 6.3 (posterior
   predictive distributions).
.. [2] Kennedy & O'Hagan (2001), "Bayesian calibration of computer models".
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from climb_bayes.data.observations import Observations
from climb_bayes.laws.base import LawFit
from climb_bayes.model.mixture_discrepancy import (
    mixture_draws,
    mixture_scale,
    mixture_sd,
    share_range,
)
from climb_bayes.model.observation import conditional_moments, group_count, group_stats

__all__ = [
    "PredictiveParts",
    "predictive_parts",
    "monotone_bounds",
    "predictive_samples",
    "log_predictive_density",
    "draw_index",
    "pointwise_log_likelihood",
    "query_observations",
    "law_and_predictive_draws",
]


class PredictiveParts(NamedTuple):
    """The predictive of ``log y`` at ``N`` observations, per posterior draw.

    Attributes
    ----------
    law : numpy.ndarray
        ``(S, N)`` the law's prediction (expected log-loss: parameter uncertainty only).
    shift : numpy.ndarray
        ``(S, N)`` conditional run-effect shift (0 for new runs).
    scale : numpy.ndarray
        ``(S, N)`` scale of the run effect plus point noise.
    df : numpy.ndarray
        ``(S, N)`` degrees of freedom (``inf``: Normal).
    delta_sd : numpy.ndarray
        ``(S, N)`` sd of the discrepancy (0 inside the fitted budgets or without one).
    delta_low, delta_high : numpy.ndarray or None
        ``(S, N)`` least and greatest discrepancy a draw may take (:func:`monotone_bounds`;
        ``None``: unbounded).
    mix_sd : numpy.ndarray or None
        ``(N,)`` sd of the mixture discrepancy (:mod:`climb_bayes.model.mixture_discrepancy`;
        ``None``: none).
    """

    law: np.ndarray
    shift: np.ndarray
    scale: np.ndarray
    df: np.ndarray
    delta_sd: np.ndarray
    delta_low: np.ndarray | None = None
    delta_high: np.ndarray | None = None
    mix_sd: np.ndarray | None = None

    @property
    def centre(self) -> np.ndarray:
        """``(S, N)`` location of the noise around the law: ``law + shift``."""
        return self.law + self.shift

    def variance(self, with_discrepancy: bool = True) -> np.ndarray:
        """``(N,)`` predictive variance of ``log y`` (mixture over draws; t noise variance
        ``scale^2 df / (df - 2)``, capped at ``df = 3`` for heavier tails)."""
        df = np.maximum(self.df, 3.0)
        finite = np.isfinite(df)
        inflation = np.ones_like(df)
        inflation[finite] = df[finite] / (df[finite] - 2.0)
        noise = self.scale**2 * inflation
        total = noise + (self.delta_sd**2 if with_discrepancy else 0.0)
        mix = self.mix_sd**2 if with_discrepancy and self.mix_sd is not None else 0.0
        return np.var(self.centre, axis=0) + np.mean(total, axis=0) + mix


def draw_index(n_draws: int, n_samples: int, seed: int = 0) -> np.ndarray:
    """Which posterior draw each of ``n_samples`` predictive samples uses (cycled if fewer)."""
    if n_draws >= n_samples:
        rng = np.random.default_rng(seed)
        return np.sort(rng.choice(n_draws, n_samples, replace=False))
    return np.arange(n_samples) % n_draws


def _series_keys(obs: Observations) -> np.ndarray:
    """``(N, 2 + m)`` key of each observation's (trajectory, group): series label, group and
    the run's mixture (1e-9 units).

    Series labels are integer codes local to a table (``arange`` when a table has none); two
    tables built separately (a published train/test pair) reuse them for different runs. A
    trajectory's mixture is fixed, so requiring it to match too keeps such runs apart (a held-out
    run is then a new run, not the continuation of an unrelated fitted one).
    """
    mix = np.rint(np.asarray(obs.run_r)[obs.run] * 1e9).astype(np.int64)
    return np.column_stack([obs.obs_series, obs.group, mix])


def _run_stats(fit: LawFit, obs: Observations) -> tuple:
    """Per draw, the fitted residual sums of the run group of every scored observation."""
    fo = fit.fit_obs
    fit_keys = _series_keys(fo)
    keys, fit_gid = np.unique(fit_keys, axis=0, return_inverse=True)
    fit_gid = np.asarray(fit_gid).ravel()
    resid = fo.log_loss[None, :] - fit.predict_obs(fo)  # (S, N_fit)
    gid = jnp.asarray(fit_gid)
    n_seg = group_count(fit_gid)
    st = jax.vmap(lambda e: group_stats(e, gid, n_segments=n_seg))(jnp.asarray(resid))
    test_keys = _series_keys(obs)
    lookup = {tuple(k): i for i, k in enumerate(keys)}
    idx = np.array([lookup.get(tuple(k), -1) for k in test_keys])
    return st, idx


def predictive_parts(
    fit: LawFit,
    obs: Observations,
    *,
    known_runs: bool = True,
    discrepancy: bool = True,
    mixture: bool = True,
) -> PredictiveParts:
    """The pieces of the predictive at ``obs`` for every draw of ``fit``.

    Parameters
    ----------
    fit : LawFit
        A fitted law (its ``sigma_run`` and ``fit_obs`` enable run effects).
    obs : Observations
        Where to predict (same groups as the fit).
    known_runs : bool
        Condition on the fitted residuals of runs the fit has seen (a continued trajectory);
        ``False`` treats every observation as a new run.
    discrepancy : bool
        Include the fit's discrepancy (when it has one).
    mixture : bool
        With the discrepancy, include the mixture discrepancy too (``False``: the budget
        discrepancy only, as the calibration of the mixture term needs).
    """
    law = fit.predict_obs(obs)
    s_draws = law.shape[0]
    sigma = fit.sigma[:, obs.group]
    df = fit.df_draws()[:, obs.group]  # (S, N); inf for the Normal
    shift = np.zeros_like(law)
    if fit.sigma_run is None:
        scale = sigma
    else:
        t = fit.sigma_run[:, obs.group]
        scale = np.sqrt(sigma**2 + t**2)
        if known_runs and fit.fit_obs is not None and fit.fit_obs.n:
            st, idx = _run_stats(fit, obs)
            known = idx >= 0
            if known.any():
                sel = idx[known]
                sub = type(st)(*(np.asarray(a)[:, sel] for a in st))
                sh, sc, dd = conditional_moments(
                    sub,
                    jnp.asarray(sigma[:, known]),
                    jnp.asarray(t[:, known]),
                    None if fit.likelihood == "normal" else jnp.asarray(df[:, known]),
                )
                shift[:, known] = np.asarray(sh)
                scale[:, known] = np.asarray(sc)
                df[:, known] = np.asarray(dd)
    delta_sd = np.zeros_like(law)
    low = high = mix = None
    if discrepancy and fit.discrepancy is not None:
        mix = _mixture_sd(fit, obs) if mixture else None
        d = fit.discrepancy
        if d.tau.shape[0] != s_draws:
            d = d.take(np.arange(s_draws) % d.tau.shape[0])
        delta_sd = d.sd(obs.run_budget[obs.run], obs.group)
        if np.any(delta_sd > 0):
            low, high = monotone_bounds(fit, obs, law)
    return PredictiveParts(law, shift, scale, df, delta_sd, low, high, mix)


def _mixture_sd(fit: LawFit, obs: Observations) -> np.ndarray | None:
    """``(N,)`` sd of the mixture discrepancy at ``obs`` against the fitted runs' share ranges
    (``None`` when the fit does not know its runs, or where every share is inside)."""
    fo = fit.fit_obs
    if fo is None or fo.n == 0:
        return None
    sd = mixture_sd(obs.r, share_range(fo.run_r, fo.run), mixture_scale(fit.law.name))
    return sd if np.any(sd > 0) else None


def monotone_bounds(
    fit: LawFit, obs: Observations, law: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(S, N)`` least and greatest discrepancy per draw: more tokens of a mixture never raise
    the expected loss.

    At a budget ``D`` above language ``i``'s fitted range ``[lo_i, hi_i]`` (the discrepancy's
    range; ``D`` the run's budget, as for its sd) the draw's curve may not exceed its value at
    ``hi_i`` for that mixture; below the range it may not fall under its value at ``lo_i``. The
    curve is the law plus the discrepancy, and the discrepancy's bend already moves the curve at
    the edge by a share ``q`` of its value at ``D`` (the chord's edge error,
    :func:`~climb_bayes.model.discrepancy.edge_fraction`): ``law(D) + delta <= law(hi) + q delta``,
    i.e. ``delta <= (law(hi) - law(D)) / (1 - q)``. Inside the range, where the discrepancy is
    0, the bounds are 0. The law itself is never moved (a bound is at least 0 above the range,
    at most 0 below it). Run effects and noise are added after the bound: an observed point may
    still lie above a smaller budget's.

    Why: the discrepancy's sd grows as ``x (x + W)`` with the distance ``x`` in ``log D``
    (:mod:`climb_bayes.model.discrepancy`), a bend that a fitted window cannot see. Far outside
    the window that is a factor of several in either direction: on the shipped default data
    (fitted 2.5e5-3e6 tokens) at 1e12 tokens the 90% predictive of one language's loss reached
    38 nats per token, above the 8.3 of a uniform guess over the vocabulary, and the expected
    loss that ``optimize`` minimises was ~1.5e4 nats. A loss curve of one mixture that rises
    with more training is outside every law here, so its upper tail is cut at the draw's own
    curve at the largest fitted budget. Measured in docs/model.md ("More tokens do
    not raise the loss").

    Parameters
    ----------
    fit : LawFit
        A fitted law with a discrepancy.
    obs : Observations
        Where to predict.
    law : numpy.ndarray
        ``(S, N)`` the law at ``obs`` (:meth:`LawFit.predict_obs`).

    Returns
    -------
    (low, high) : tuple of numpy.ndarray
        ``(S, N)`` each; ``-inf`` / ``+inf`` where no bound applies.
    """
    d = fit.discrepancy
    budget = obs.run_budget[obs.run]
    stretch = 1.0 / (1.0 - d.edge_fraction(budget, obs.group))  # (N,)
    low = np.full_like(law, -np.inf)
    high = np.full_like(law, np.inf)
    for edge, beyond, out, clip in (
        (d.hi, budget > d.hi[obs.group], high, np.maximum),
        (d.lo, budget < d.lo[obs.group], low, np.minimum),
    ):
        if beyond.any():
            part = obs.select(beyond)
            at_edge = fit.predict_obs(replace(part, tokens=edge[part.group].astype(float)))
            out[:, beyond] = clip(at_edge - law[:, beyond], 0.0) * stretch[beyond]
    return low, high


def _discrepancy_draws(
    fit: LawFit, obs: Observations, parts: PredictiveParts, idx: np.ndarray, rng
) -> np.ndarray:
    """``(len(idx), N)`` discrepancy draws paired with posterior draws ``idx``, within the
    bounds of :func:`monotone_bounds`."""
    d = fit.discrepancy
    delta = d.take(idx % d.tau.shape[0]).sample(rng, obs.run_budget[obs.run], obs.group, obs.r)
    if parts.delta_high is None:
        return delta
    return np.clip(delta, parts.delta_low[idx], parts.delta_high[idx])


def _noise_draws(rng: np.random.Generator, df: np.ndarray) -> np.ndarray:
    normal = rng.standard_normal(df.shape)
    finite = np.isfinite(df)
    if not finite.any():
        return normal
    w = rng.chisquare(np.where(finite, df, 1.0)) / np.where(finite, df, 1.0)
    return np.where(finite, normal / np.sqrt(w), normal)


def predictive_samples(
    fit: LawFit,
    obs: Observations,
    n_samples: int = 1000,
    *,
    seed: int = 0,
    known_runs: bool = True,
    discrepancy: bool = True,
    mixture: bool = True,
    parts: PredictiveParts | None = None,
) -> np.ndarray:
    """``(n_samples, N)`` draws of ``log y`` from the predictive at ``obs``.

    Each sample uses one posterior draw (:func:`draw_index`), the discrepancy draw paired with
    it (shared by all observations of that sample, so the joint structure over languages and
    mixtures is kept), and independent noise per observation.
    """
    parts = parts or predictive_parts(
        fit, obs, known_runs=known_runs, discrepancy=discrepancy, mixture=mixture
    )
    idx = draw_index(parts.law.shape[0], n_samples, seed)
    rng = np.random.default_rng(seed)
    out = parts.centre[idx] + parts.scale[idx] * _noise_draws(rng, parts.df[idx])
    if discrepancy and fit.discrepancy is not None and np.any(parts.delta_sd > 0):
        out = out + _discrepancy_draws(fit, obs, parts, idx, rng)
    if discrepancy and mixture and parts.mix_sd is not None:
        out = out + mixture_draws(rng, parts.mix_sd, obs.r, obs.group, n_samples)
    return out


def log_predictive_density(
    fit: LawFit,
    obs: Observations,
    *,
    seed: int = 0,
    known_runs: bool = True,
    discrepancy: bool = True,
    mixture: bool = True,
    parts: PredictiveParts | None = None,
) -> np.ndarray:
    """``(N,)`` log predictive density of each observed ``log y``.

    ``log (1/S) sum_s p(log y | draw s, delta_s)``: exact Student-t/Normal density of the noise
    per draw, the discrepancy integrated by one Monte-Carlo draw per posterior draw (the same
    draws as :func:`predictive_samples` with ``n_samples = S``); the mixture discrepancy, where
    there is one, by one draw per posterior draw from its own generator (seed ``seed + 1``).
    """
    parts = parts or predictive_parts(
        fit, obs, known_runs=known_runs, discrepancy=discrepancy, mixture=mixture
    )
    s = parts.law.shape[0]
    delta = np.zeros_like(parts.law)
    if discrepancy and fit.discrepancy is not None and np.any(parts.delta_sd > 0):
        rng = np.random.default_rng(seed)
        delta = _discrepancy_draws(fit, obs, parts, np.arange(s), rng)
    if discrepancy and mixture and parts.mix_sd is not None:
        rng = np.random.default_rng(seed + 1)
        delta = delta + mixture_draws(rng, parts.mix_sd, obs.r, obs.group, s)
    z = (obs.log_loss[None, :] - parts.centre - delta) / parts.scale
    finite = np.isfinite(parts.df)
    dens = np.where(
        finite,
        stats.t.logpdf(z, np.where(finite, parts.df, 1.0)),
        stats.norm.logpdf(z),
    ) - np.log(parts.scale)
    from scipy.special import logsumexp

    return logsumexp(dens, axis=0) - np.log(s)


def pointwise_log_likelihood(fit: LawFit, obs: Observations) -> np.ndarray:
    """``(S, G)`` log-likelihood of each (run, group) of ``obs`` per draw (``(S, N)`` per point
    when the fit has no run effect): the units PSIS-LOO leaves out."""
    law = fit.predict_obs(obs)
    normal = fit.likelihood == "normal"
    df = fit.df_draws()[:, obs.group]  # (S, N)
    sigma = fit.sigma[:, obs.group]
    if fit.sigma_run is None:
        z = (obs.log_loss[None, :] - law) / sigma
        dens = stats.norm.logpdf(z) if normal else stats.t.logpdf(z, df)
        return dens - np.log(sigma)
    from climb_bayes.model.observation import GroupedNoise

    group = jnp.asarray(obs.obs_group)
    n_groups = int(obs.obs_group.max()) + 1
    y = jnp.asarray(obs.log_loss)

    fixed = None if normal else float(fit.student_df) if np.ndim(fit.student_df) == 0 else None

    def one(loc: jax.Array, s: jax.Array, t: jax.Array, nu: jax.Array) -> jax.Array:
        df_arg = None if normal else (fixed if fixed is not None else nu)
        return GroupedNoise(loc, s, t, group, df_arg).group_log_prob(y)[:n_groups]

    t = fit.sigma_run[:, obs.group]
    args = (law, sigma, t, np.where(np.isfinite(df), df, 1.0))
    return np.asarray(jax.jit(jax.vmap(one))(*(jnp.asarray(a) for a in args)))


def query_observations(
    groups: tuple[str, ...],
    r: np.ndarray,
    tokens: np.ndarray,
    series: np.ndarray | None = None,
) -> Observations:
    """Observations at new points: every group of each mixture ``r`` (``(B, m)``) at its
    budget ``tokens`` (``(B,)``) (placeholder losses of 1; for prediction only).

    ``series`` (``(B,)`` int, optional) gives each point the ``run_series`` code of a fitted
    training run it continues (its mixture must be that run's); by default every point is a new
    run."""
    r = np.atleast_2d(np.asarray(r, dtype=float))
    tokens = np.atleast_1d(np.asarray(tokens, dtype=float))
    n_pts, m = r.shape
    new_runs = -1 - np.arange(n_pts)  # labels no fitted run has
    codes = new_runs if series is None else np.broadcast_to(np.asarray(series), (n_pts,))
    return Observations(
        groups=groups,
        run_ids=tuple(f"query-{i}" for i in range(n_pts)),
        run_r=r,
        run_budget=tokens,
        run=np.repeat(np.arange(n_pts), m),
        tokens=np.repeat(tokens, m),
        group=np.tile(np.arange(m), n_pts),
        loss=np.ones(n_pts * m),
        run_series=codes,
    )


def law_and_predictive_draws(
    fit: LawFit,
    r: np.ndarray,
    tokens: np.ndarray,
    n_samples: int,
    *,
    seed: int = 0,
    series: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(n, B, m)`` draws of the law's ``log L`` (parameters only) and of one run's ``log y``
    (parameters, discrepancy, run effect and noise) at mixtures ``r`` and budgets ``tokens``;
    ``+inf`` where a group has share 0 and the law cannot predict it.

    The run is a new one, or with ``series`` (``(B,)`` ``run_series`` codes of the fit's runs,
    :func:`query_observations`) the continuation of a fitted training run: its run effect is
    then conditioned on that run's fitted residuals (:func:`predictive_parts` with
    ``known_runs``)."""
    obs = query_observations(fit.groups, r, tokens, series)
    known = series is not None
    parts = predictive_parts(fit, obs, known_runs=known)
    idx = draw_index(parts.law.shape[0], n_samples, seed)
    law = parts.law[idx]
    pred = predictive_samples(fit, obs, n_samples, seed=seed, known_runs=known, parts=parts)
    shape = (n_samples,) + np.atleast_2d(r).shape
    law, pred = law.reshape(shape), pred.reshape(shape)
    if not fit.law.zero_share_ok:
        zero = np.atleast_2d(r)[None] <= 0
        law = np.where(zero, np.inf, law)
        pred = np.where(zero, np.inf, pred)
    return law, pred
