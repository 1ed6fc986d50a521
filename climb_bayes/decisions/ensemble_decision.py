"""Decisions under the default predictive: stacked laws, their posteriors and the discrepancy.

:mod:`climb_bayes.decisions.decision` decides under CLIMB's posterior alone. Under the stacked
predictive (:class:`~climb_bayes.inference.ensemble.LawEnsemble`) a "draw" is one law (chosen in
proportion to its stacking weight), one posterior draw of it, and one realisation of its
extrapolation discrepancy at the target budget:

    f_s(r) = sum_i w_i exp(log L_i(D, r; law_s, theta_s) + delta_s,i(r))

where ``delta_s,i(r) = x_i tau_s,i (sqrt(rho_s) a_s,i + sqrt(1 - rho_s) c_s,i(r))``
(:mod:`climb_bayes.model.discrepancy`), bounded as in
:func:`climb_bayes.inference.predictive.monotone_bounds` (beyond the fitted budgets the loss may
not exceed the same draw's curve at the largest fitted budget: its law there plus the chord's
edge share of the same bend; a smooth clip of width
:data:`BOUND_SMOOTH`, so the solver keeps its derivatives), with the mixture-specific part ``c``
drawn as a smooth random function of ``r`` by random Fourier features (``N_FEATURES`` cosines
with frequencies ``N(0, I / l^2)``, the spectral density of the squared-exponential kernel), so
that each draw's objective is a smooth function the Newton solver of
:mod:`climb_bayes.decisions.solvers` can minimise. The distribution over ``r*`` is then a
mixture over laws, draws and discrepancies; the Bayes decision minimises ``mean_s f_s(r)``, the
risk-averse one ``CVaR_alpha``; and ``P(better)`` of two mixtures counts the draws --
discrepancy included -- in which one beats the other.

A predicted gain that is smaller than the spread the discrepancy puts on the difference of two
mixtures' losses shows up as ``P(better)`` near 0.5, not 1.0.

References
----------
.. [1] Rahimi & Recht (2007), "Random Features for Large-Scale Kernel Machines", NIPS (random
   Fourier features).
.. [2] Yao et al. (2018), "Using Stacking to Average Bayesian Predictive Distributions".
.. [3] Berger (1985), Ch. 4; Rockafellar & Uryasev (2000).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from climb_bayes.decisions.decision import cvar
from climb_bayes.decisions.solvers import interior_start, solve_batch
from climb_bayes.laws.base import Law, LawFit
from climb_bayes.model.discrepancy import edge_fraction
from climb_bayes.model.mixture_discrepancy import (
    ShareRange,
    mixture_distance,
    mixture_scale,
    share_range,
)

__all__ = [
    "N_FEATURES",
    "BOUND_SMOOTH",
    "LawDraws",
    "decision_draws",
    "draw_log_losses",
    "draw_losses",
    "optimum_draws",
    "bayes_decision",
    "cvar_decision",
]

N_FEATURES = 64
"""Random Fourier features per draw and language for the mixture-specific discrepancy."""

BOUND_SMOOTH = 0.005
"""Width (log-loss) of the smooth clip at the monotone bound: a draw exactly at the bound is
``BOUND_SMOOTH * log 2`` (0.35%) below it, one 3 widths inside is moved by 0.025%."""


class LawDraws(NamedTuple):
    """One law's share of the decision draws at one budget.

    Attributes
    ----------
    law : Law
        The law.
    bounds : tuple
        ``(d_edge, above, below, stretch)`` per distinct edge budget (static numpy arrays:
        ``(m,)`` bool masks and ``(m,)`` factors ``1 / (1 - q)``): the languages whose loss at
        the target budget is bounded by the curve at ``d_edge`` (reference units) from above
        (target beyond their largest fitted budget) or from below (target under their smallest);
        see :func:`climb_bayes.inference.predictive.monotone_bounds`.
    theta : dict
        Per-draw arrays (leading axis ``S_k``): ``params`` (dict), ``d`` (budget in the law's
        reference units), ``shift`` ``(S_k, m)`` (``x tau sqrt(rho) a``), ``amp`` ``(S_k, F, m)``
        (``x tau sqrt(1 - rho) sqrt(2 / F) A``), ``omega`` ``(S_k, F, m)``, ``phase``
        ``(S_k, F)``, and the mixture discrepancy's ``mix``, ``mix_lo``, ``mix_hi``
        ``(S_k, m)`` (:func:`_mixture_theta`).
    index : numpy.ndarray or None
        ``(S_k,)`` the law's posterior draws these are (indices into its
        :class:`~climb_bayes.laws.base.LawFit` draws: its noise ``sigma[index]`` belongs to them).
    """

    law: Law
    theta: dict[str, Any]
    bounds: tuple = ()
    index: np.ndarray | None = None

    @property
    def n(self) -> int:
        """Number of draws."""
        return int(np.shape(self.theta["d"])[0])


def _law_draws(
    fit: LawFit, budget: float, count: int, rng: np.random.Generator, n_features: int
) -> LawDraws:
    s = fit.n_draws
    idx = rng.choice(s, count, replace=count > s) if count != s else np.arange(s)
    m = len(fit.groups)
    params = {k: np.asarray(v)[idx] for k, v in fit.draws.items()}
    shift = np.zeros((count, m))
    amp = np.zeros((count, n_features, m))
    omega = rng.standard_normal((count, n_features, m))
    phase = rng.uniform(0.0, 2.0 * np.pi, (count, n_features))
    d = fit.discrepancy
    bounds = ()
    if d is not None:
        stretch = 1.0 / (1.0 - edge_fraction(budget, d.lo, d.hi, d.growth))
        bounds = _edge_bounds(d.lo, d.hi, budget, fit.d_ref, stretch)
        x = d.distance_at(budget)  # (m,)
        j = idx % d.tau.shape[0]
        tau, rho = d.tau[j], d.rho[j]
        shift = x * tau * np.sqrt(rho)[:, None] * rng.standard_normal((count, m))
        a = rng.standard_normal((count, n_features, m))
        scale = x * tau * np.sqrt(1.0 - rho)[:, None] * np.sqrt(2.0 / n_features)
        amp = scale[:, None, :] * a
        omega = omega / d.length_scale
    theta = {
        "params": params,
        "d": np.full(count, float(budget) / fit.d_ref),
        "shift": shift,
        "amp": amp,
        "omega": omega,
        "phase": phase,
        **_mixture_theta(fit, count, rng),
    }
    return LawDraws(fit.law, theta, bounds, idx)


def _mixture_theta(fit: LawFit, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The mixture discrepancy's part of ``theta``: ``mix`` ``(S_k, m)`` (``kappa z``, one
    standard normal per draw and language), ``mix_lo`` / ``mix_hi`` ``(S_k, m)`` (the fitted
    share range). Without a discrepancy or fitted runs: ``mix`` 0 over
    the range [0, 1], so the term is 0 everywhere. Its normals come from a generator spawned from
    ``rng``, which leaves ``rng``'s own stream (the draws above) as it was."""
    m = len(fit.groups)
    mix = np.zeros((count, m))
    lo, hi = np.zeros(m), np.ones(m)
    fo = fit.fit_obs
    if fit.discrepancy is not None and fo is not None and fo.n:
        lo, hi = share_range(fo.run_r, fo.run)
        kappa = mixture_scale(fit.law.name).kappa
        mix = kappa * rng.spawn(1)[0].standard_normal((count, m))
    return {
        "mix": mix,
        "mix_lo": np.broadcast_to(lo, (count, m)).copy(),
        "mix_hi": np.broadcast_to(hi, (count, m)).copy(),
    }


def _edge_bounds(
    lo: np.ndarray, hi: np.ndarray, budget: float, d_ref: float, stretch: np.ndarray
) -> tuple:
    """:attr:`LawDraws.bounds` at ``budget`` for fitted ranges ``[lo, hi]`` (tokens)."""
    out = []
    for edges, beyond, above in ((hi, budget > hi, True), (lo, budget < lo, False)):
        for value in np.unique(edges[beyond]):
            mask = beyond & (edges == value)
            none = np.zeros_like(mask)
            masks = (mask, none) if above else (none, mask)
            out.append((float(value) / d_ref, *masks, np.asarray(stretch, float)))
    return tuple(out)


def decision_draws(
    ens: Any, budget: float, n_draws: int = 1000, *, seed: int = 0, n_features: int = N_FEATURES
) -> list[LawDraws]:
    """``n_draws`` objective draws of the stacked predictive at ``budget``, per law.

    Parameters
    ----------
    ens : LawEnsemble
        Laws with weights and discrepancies.
    budget : float
        Target budget (tokens).
    n_draws : int
        Total draws (each law gets its weight's share).
    seed : int
        Seed of the draw choice and of the discrepancy realisations.
    n_features : int
        Random Fourier features.

    Notes
    -----
    The random numbers drawn do not depend on ``budget``: called with the same ensemble,
    ``n_draws`` and ``seed`` at two budgets, draw ``s`` is the same law, the same posterior draw
    and the same discrepancy realisation (``a``, the random features) evaluated at each budget
    -- one joint draw of the loss curves, which :mod:`climb_bayes.decisions.suggest` uses to ask
    what a run at one budget says about the answer at another.
    """
    rng = np.random.default_rng(seed)
    return [
        _law_draws(ens.fits[name], budget, count, rng, n_features)
        for name, count in ens.allocation(n_draws).items()
    ]


def _log_losses(law: Law, bounds: tuple, theta: dict, r: jax.Array) -> jax.Array:
    """``(m,)`` log-loss of one draw at mixture ``r``: the law plus its discrepancy, smoothly
    clipped to the monotone bounds (``bounds``, :attr:`LawDraws.bounds`)."""
    base = law.log_loss(theta["params"], r, theta["d"])
    features = jnp.cos(theta["omega"] @ r + theta["phase"])  # (F,)
    out = base + theta["shift"] + features @ theta["amp"]
    s = BOUND_SMOOTH
    for d_edge, above, below, stretch in bounds:
        edge = law.log_loss(theta["params"], r, d_edge)
        cap = base + jnp.maximum(edge - base, 0.0) * stretch  # never below the law itself
        floor = base + jnp.minimum(edge - base, 0.0) * stretch
        out = jnp.where(above, cap - s * jax.nn.softplus((cap - out) / s), out)
        out = jnp.where(below, floor + s * jax.nn.softplus((out - floor) / s), out)
    # the mixture discrepancy moves the whole curve: added after the bounds
    u = mixture_distance(r, ShareRange(theta["mix_lo"], theta["mix_hi"]), jnp)
    return out + theta["mix"] * u


def _value(law: Law, bounds: tuple, x: jax.Array, theta: dict, shared: Any) -> jax.Array:
    m = theta["shift"].shape[-1]
    w = shared
    return jnp.sum(w * jnp.exp(_log_losses(law, bounds, theta, x[:m])))


def _shared(draws: Sequence[LawDraws], weights: np.ndarray) -> tuple:
    """The solver's ``shared`` argument: every law's draws, their counts and the weights."""
    return (
        tuple(ld.theta for ld in draws),
        tuple(ld.n for ld in draws),
        jnp.asarray(np.asarray(weights, dtype=float)),
    )


def draw_log_losses(draws: Sequence[LawDraws], r: np.ndarray) -> np.ndarray:
    """``(S, m)`` log-loss of every language at mixture ``r`` under every decision draw (the
    law, its discrepancy and the monotone bounds; log nats/token)."""
    r = jnp.asarray(np.asarray(r, dtype=float))
    out = [
        np.asarray(jax.vmap(lambda th, ld=ld: _log_losses(ld.law, ld.bounds, th, r))(ld.theta))
        for ld in draws
    ]
    return np.concatenate(out)


def draw_losses(draws: Sequence[LawDraws], r: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(S,)`` weighted loss of mixture ``r`` under every decision draw (nats/token).

    ``inf`` where a language with positive weight gets no data under a law that cannot
    predict a zero share.
    """
    r = np.asarray(r, dtype=float)
    w = np.asarray(weights, dtype=float)
    out = []
    for ld in draws:
        vals = np.exp(draw_log_losses([ld], r)) @ w
        if not ld.law.zero_share_ok:
            vals = np.where(np.any((r <= 0) & (w > 0)), np.inf, vals)
        out.append(vals)
    return np.concatenate(out)


def optimum_draws(
    draws: Sequence[LawDraws],
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """``(S, m)`` minimiser of each draw's weighted loss on the capped simplex."""
    w = jnp.asarray(np.asarray(weights, dtype=float))
    out = []
    for ld in draws:
        x0 = np.tile(interior_start(start, lo, hi), (ld.n, 1))
        sol = solve_batch(
            partial(_value, ld.law, ld.bounds),
            partial(_derivs, partial(_value, ld.law, ld.bounds)),
            ld.theta,
            lo,
            hi,
            x0,
            shared=w,
        )
        out.append(sol.x[:, : lo.size])
    return np.concatenate(out)


def _mean_value(laws: tuple, x: jax.Array, theta: dict, shared: Any) -> jax.Array:
    thetas, counts, w = shared
    total = sum(counts)
    acc = 0.0
    for (law, bounds), th in zip(laws, thetas, strict=True):
        vals = jax.vmap(lambda t, law=law, b=bounds: _value(law, b, x, t, w))(th)
        acc = acc + jnp.sum(vals) / total
    return acc


def _derivs(value_fn: Callable, x: jax.Array, theta: dict, shared: Any) -> tuple:
    """Value, gradient and Hessian in ``x`` of ``value_fn(x, theta, shared)`` (autodiff)."""
    f = partial(value_fn, theta=theta, shared=shared)
    v, g = jax.value_and_grad(f)(x)
    return v, g, jax.hessian(f)(x)


def bayes_decision(
    draws: Sequence[LawDraws],
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """Mixture minimising ``mean_s f_s(r)`` over every decision draw (all laws at once)."""
    laws = tuple((ld.law, ld.bounds) for ld in draws)
    shared = _shared(draws, weights)
    x0 = np.atleast_2d(interior_start(start, lo, hi))
    one = {"_": np.zeros(1)}
    sol = solve_batch(
        partial(_mean_value, laws),
        partial(_derivs, partial(_mean_value, laws)),
        one,
        lo,
        hi,
        x0,
        shared=shared,
    )
    return sol.x[0, : lo.size]


def _cvar_value(laws: tuple, alpha: float, smooth: float, x: jax.Array, theta: dict, shared):
    thetas, counts, w = shared
    m = w.shape[0]
    r, t = x[:m], x[m]
    vals = jnp.concatenate(
        [
            jax.vmap(lambda th, law=law, b=bounds: _value(law, b, r, th, w))(th)
            for (law, bounds), th in zip(laws, thetas, strict=True)
        ]
    )
    return t + jnp.mean(smooth * jax.nn.softplus((vals - t) / smooth)) / (1.0 - alpha)


def cvar_decision(
    draws: Sequence[LawDraws],
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    alpha: float,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """Mixture minimising ``CVaR_alpha`` of the weighted loss over the decision draws
    (smoothed plus function, as :func:`climb_bayes.decisions.decision.cvar_decision`); returns it
    and its exact CVaR."""
    r0 = np.atleast_2d(interior_start(start, lo, hi))
    f0 = draw_losses(draws, r0[0], weights)
    spread = float(np.std(f0)) if f0.size > 1 else 0.0
    smooth = max(0.01 * spread, 1e-9 * float(np.mean(f0)), 1e-12)
    laws = tuple((ld.law, ld.bounds) for ld in draws)
    shared = _shared(draws, weights)
    x0 = np.concatenate([r0, [[float(np.quantile(f0, alpha))]]], axis=1)
    sol = solve_batch(
        partial(_cvar_value, laws, float(alpha), smooth),
        partial(_derivs, partial(_cvar_value, laws, float(alpha), smooth)),
        {"_": np.zeros(1)},
        lo,
        hi,
        x0,
        shared=shared,
    )
    r = sol.x[0, : lo.size]
    return r, cvar(draw_losses(draws, r, weights), alpha)
