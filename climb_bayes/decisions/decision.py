"""Decisions under posterior uncertainty: one mixture to recommend, and how it compares.

With posterior draws ``theta_s`` of the law and the weighted loss
``f_s(r) = sum_i w_i L_i(D, r; theta_s)``:

* the **Bayes decision** minimises the posterior expected weighted loss
  ``(1/S) sum_s f_s(r)`` -- the mixture with the best loss on average over what the data allow;
* the **risk-averse decision** (``--risk alpha``) minimises the conditional value at risk
  ``CVaR_alpha(r) = min_t t + E[(f_s(r) - t)_+] / (1 - alpha)``, the mean of the worst
  ``1 - alpha`` fraction of the draws; the plus function is smoothed
  (``s log(1 + exp(x / s))`` with ``s`` = 1% of the spread of the draws' losses) so that the
  Newton solver applies, and the exact (sorted) CVaR is reported;
* a mixture ``r_b`` is compared with the recommendation ``r_*`` through the draws of
  ``f_s(r_b)`` (mean and central intervals) and ``P(f_s(r_*) < f_s(r_b))``.

Both decisions are solved by the batched interior-point Newton method of
:mod:`climb_bayes.decisions.solvers` (as one problem whose objective averages over the draws).

Units
-----
Budgets in tokens; losses in nats/token; shares unit-free.

References
----------
.. [1] Berger (1985), "Statistical Decision Theory and Bayesian Analysis", Ch. 4 (Bayes
   decision: minimise posterior expected loss).
.. [2] Rockafellar & Uryasev (2000), "Optimization of conditional value-at-risk", J. Risk 2(3)
   (the ``min_t`` formula).
.. [3] Guo et al. (2025), "CLIMB", the weighted-loss problem and Eq. (6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from climb_bayes.decisions.solvers import (
    WEIGHTED_LOSS,
    composite_derivatives,
    composite_value,
    interior_start,
    per_draw_theta,
    solve_batch,
    weighted_loss,
)
from climb_bayes.errors import ClimbError
from climb_bayes.model.law import LawParams

__all__ = [
    "Comparison",
    "draw_losses",
    "cvar",
    "bayes_decision",
    "cvar_decision",
    "compare",
    "central_interval",
]


def draw_losses(params: LawParams, budget: float, r: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted loss of mixture ``r`` ((m,) or (S, m)) under every draw: ``(S,)`` nats/token.

    ``inf`` where a language with positive weight gets no data (the law's loss is unbounded).
    """
    params = LawParams(*(np.asarray(x, dtype=float) for x in params))
    return np.asarray(weighted_loss(np.asarray(r, dtype=float), float(budget), params, weights))


def cvar(values: np.ndarray, alpha: float) -> float:
    """Exact CVaR of equally weighted samples: ``VaR + E[(X - VaR)_+] / (1 - alpha)``.

    ``VaR`` is the ``alpha`` lower quantile; for ``alpha = 0`` this is the mean.

    References
    ----------
    .. [1] Rockafellar & Uryasev (2000), Theorem 1 (discrete distributions).
    """
    x = np.sort(np.asarray(values, dtype=float))
    if not 0.0 <= alpha < 1.0:
        raise ClimbError(f"--risk must be in [0, 1), got {alpha}.")
    n = x.size
    var = x[min(int(math.ceil(alpha * n)) - 1, n - 1)] if alpha > 0 else x[0]
    return float(var + np.mean(np.maximum(x - var, 0.0)) / (1.0 - alpha))


def central_interval(values: np.ndarray, level: float, axis: int = 0) -> tuple:
    """Central ``level`` interval: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles."""
    q = (1.0 - level) / 2.0
    return np.quantile(values, q, axis=axis), np.quantile(values, 1.0 - q, axis=axis)


# -- Bayes decision ----------------------------------------------------------------------------


def _mean_value(x: jax.Array, theta: dict, shared: None) -> jax.Array:
    return jnp.mean(jax.vmap(lambda th: composite_value(WEIGHTED_LOSS, x, th))(theta))


def _mean_derivs(x: jax.Array, theta: dict, shared: None) -> tuple:
    v, g, h = jax.vmap(lambda th: composite_derivatives(WEIGHTED_LOSS, x, th))(theta)
    return jnp.mean(v), jnp.mean(g, axis=0), jnp.mean(h, axis=0)


def _as_one_problem(theta: dict) -> dict:
    return {k: np.asarray(v)[None] for k, v in theta.items()}


def bayes_decision(
    params: LawParams,
    budget: float,
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Mixture minimising the posterior expected weighted loss ``mean_s f_s(r)``.

    Parameters
    ----------
    params : LawParams
        Posterior draws (leading axis ``S``; tokens units).
    budget : float
        ``D`` in tokens.
    weights : ndarray (m,)
        Normalised importance weights.
    lo, hi : ndarray (m,)
        Feasible share bounds.
    start : ndarray (m,), optional
        Starting mixture (e.g. the median of the per-draw optima).

    Returns
    -------
    (ndarray (m,), float)
        The mixture and its posterior expected weighted loss (nats/token).

    References
    ----------
    .. [1] Berger (1985), Section 4.4.
    """
    theta = _as_one_problem(per_draw_theta(params, budget, {"w": weights}))
    x0 = interior_start(None if start is None else np.asarray(start)[None], lo, hi)
    x0 = np.atleast_2d(x0)
    sol = solve_batch(_mean_value, _mean_derivs, theta, lo, hi, x0)
    return sol.x[0], float(sol.fun[0])


# -- risk-averse (CVaR) decision ----------------------------------------------------------------


def _cvar_parts(x: jax.Array, theta: dict) -> tuple:
    m = theta["w"].shape[-1]
    r, t = x[:m], x[m]
    v, g, h = jax.vmap(lambda th: composite_derivatives(WEIGHTED_LOSS, r, th))(theta)
    s = theta["smooth"][0]
    c = 1.0 / (1.0 - theta["alpha"][0])
    u = (v - t) / s
    return r, t, v, g, h, s, c, u


def _cvar_value(x: jax.Array, theta: dict, shared: None) -> jax.Array:
    m = theta["w"].shape[-1]
    r, t = x[:m], x[m]
    v = jax.vmap(lambda th: composite_value(WEIGHTED_LOSS, r, th))(theta)
    s = theta["smooth"][0]
    return t + jnp.mean(s * jax.nn.softplus((v - t) / s)) / (1.0 - theta["alpha"][0])


def _cvar_derivs(x: jax.Array, theta: dict, shared: None) -> tuple:
    _, t, v, g, h, s, c, u = _cvar_parts(x, theta)
    sig = jax.nn.sigmoid(u)
    dsig = sig * (1.0 - sig) / s
    value = t + c * jnp.mean(s * jax.nn.softplus(u))
    grad_r = c * jnp.mean(sig[:, None] * g, axis=0)
    grad_t = 1.0 - c * jnp.mean(sig)
    h_rr = c * jnp.mean(
        dsig[:, None, None] * g[:, :, None] * g[:, None, :] + sig[:, None, None] * h, 0
    )
    h_rt = -c * jnp.mean(dsig[:, None] * g, axis=0)
    h_tt = c * jnp.mean(dsig)
    hess = jnp.block([[h_rr, h_rt[:, None]], [h_rt[None, :], h_tt[None, None]]])
    return value, jnp.concatenate([grad_r, grad_t[None]]), hess


def cvar_decision(
    params: LawParams,
    budget: float,
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    alpha: float,
    *,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Mixture minimising ``CVaR_alpha`` of the weighted loss over the posterior draws.

    Parameters
    ----------
    params, budget, weights, lo, hi
        As in :func:`bayes_decision`.
    alpha : float
        Risk level in (0, 1): 0.9 minimises the mean of the worst 10% of the draws.
    start : ndarray (m,), optional
        Starting mixture (e.g. the Bayes decision).

    Returns
    -------
    (ndarray (m,), float)
        The mixture and its exact CVaR (nats/token).

    References
    ----------
    .. [1] Rockafellar & Uryasev (2000), Theorem 2 (joint minimisation over ``r`` and ``t``).
    """
    if not math.isfinite(alpha) or not 0.0 < alpha < 1.0:
        raise ClimbError(f"--risk must be in (0, 1), e.g. 0.9; got {alpha}.")
    r0 = interior_start(None if start is None else np.asarray(start)[None], lo, hi)
    r0 = np.atleast_2d(r0)
    f0 = draw_losses(params, budget, r0[0], weights)
    spread = float(np.std(f0)) if f0.size > 1 else 0.0
    smooth = max(0.01 * spread, 1e-9 * float(np.mean(f0)), 1e-12)
    t0 = float(np.quantile(f0, alpha))
    base = per_draw_theta(params, budget, {"w": weights})
    n = base["D"].shape[0]
    base["smooth"] = np.full(n, smooth)
    base["alpha"] = np.full(n, float(alpha))
    theta = _as_one_problem(base)
    x0 = np.concatenate([r0, [[t0]]], axis=1)
    sol = solve_batch(_cvar_value, _cvar_derivs, theta, lo, hi, x0)
    r = sol.x[0, : lo.size]
    return r, cvar(draw_losses(params, budget, r, weights), alpha)


# -- comparisons ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """A mixture's weighted loss over the posterior, against the recommendation.

    Attributes
    ----------
    name : str
        Label.
    shares : ndarray (m,)
        The mixture.
    losses : ndarray (S,)
        Weighted loss per draw (nats/token).
    mean : float
        Posterior expected weighted loss.
    intervals : dict
        ``level -> (low, high)`` central intervals of the weighted loss.
    p_beaten : float
        ``P(f_s(recommended) < f_s(this))``: the probability that the recommendation is better.
    excess : float
        ``mean - mean of the recommendation`` (nats/token; > 0 means worse on average).
    note : str
        Caveats (e.g. a zero share with positive weight).
    """

    name: str
    shares: np.ndarray
    losses: np.ndarray
    mean: float
    intervals: dict
    p_beaten: float
    excess: float
    note: str = ""


def compare(
    name: str,
    shares: np.ndarray,
    losses: np.ndarray,
    recommended_losses: np.ndarray,
    levels: Sequence[float],
    note: str = "",
) -> Comparison:
    """Summarise ``losses`` (per draw) of a mixture against ``recommended_losses``."""
    losses = np.asarray(losses, dtype=float)
    rec = np.asarray(recommended_losses, dtype=float)
    intervals = {float(lv): tuple(float(x) for x in central_interval(losses, lv)) for lv in levels}
    if not np.all(np.isfinite(losses)):
        note = (note + "; " if note else "") + "a weighted language gets no data: unbounded loss"
    return Comparison(
        name,
        np.asarray(shares, dtype=float),
        losses,
        float(np.mean(losses)),
        intervals,
        float(np.mean(rec < losses)),
        float(np.mean(losses) - np.mean(rec)),
        note,
    )
