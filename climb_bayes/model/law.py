"""The CLIMB law as pure ``jax.numpy`` functions.

Nothing here knows about NumPyro, files or priors: every function maps arrays to arrays,
broadcasts over leading batch axes (runs, posterior draws, ...) and is safe to ``jit``,
``vmap`` and differentiate. Languages (or domains) live on the last axis; transfer matrices
have shape ``(..., m, m)`` indexed ``[source j, target i]``.

Units
-----
``D`` (tokens) and ``k`` must share one unit, and ``log_B`` must be expressed in that unit:
``B / D**beta`` is unit-free only when ``B`` carries ``tokens**beta``. The fitter works with
``D`` divided by a reference budget ``d_ref`` (see :func:`to_reference_units`) so that the
sampled parameters are O(1); the paper's units are recovered with
:func:`from_reference_units`. Losses are in nats per token.

References
----------
.. [1] Guo et al. (2025), "CLIMB: Cross-Lingual Interaction-aware Multilingual Balancing",
   Eq. (4)-(6) (interaction-aware ratio and the full law) and Appendix A (alpha(D)).
.. [2] Hoffmann et al. (2022), "Training Compute-Optimal Large Language Models" (the
   ``B / D**beta + E`` data term).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "RT_FLOOR_SCALE",
    "LawParams",
    "transfer_strength",
    "effective_ratio",
    "saturating_ratio",
    "log_loss",
    "log_loss_at_ratio",
    "loss",
    "optimal_direction",
    "paper_direction",
    "to_reference_units",
    "from_reference_units",
]

RT_FLOOR_SCALE = 1e-5
"""Scale of the smooth floor applied to the effective ratio (unit-free share).

Strong negative transfer can push ``rt`` to or below zero, where the law is undefined.
``max(s * softplus(rt / s), 1e-3 s)`` equals ``rt`` to within ``s exp(-rt / s)`` (below double
precision for shares above 1e-3) and never falls below ``1e-3 s``, so it stays positive and
finite in log space (its gradient vanishes only far below zero): the
sampler never sees NaN or infinity, and such parameter values get a very large (finite)
predicted loss instead.
"""


class LawParams(NamedTuple):
    """Parameters of the CLIMB law for ``m`` languages (any leading batch shape).

    Attributes
    ----------
    log_B : array (..., m)
        Log of the scale ``B_i`` of the reducible loss, in units where ``D`` is measured.
    beta : array (..., m)
        Data-scaling exponent ``beta_i`` (unit-free, > 0).
    log_E : array (..., m)
        Log of the irreducible loss ``E_i`` (nats/token).
    b : array (..., m, m)
        Asymptotic transfer ``b_ji`` from source ``j`` (axis -2) to target ``i`` (axis -1).
        The diagonal is ignored.
    k : array (..., m, m)
        Budget-decay of transfer ``k_ji``, in the unit of ``D``. The diagonal is ignored.
    eta : array (..., m)
        Data-sufficiency rate ``eta_i`` (unit-free, > 0).
    """

    log_B: jax.Array
    beta: jax.Array
    log_E: jax.Array
    b: jax.Array
    k: jax.Array
    eta: jax.Array


def _off_diagonal(a: jax.Array) -> jax.Array:
    m = a.shape[-1]
    return a * (1.0 - jnp.eye(m, dtype=a.dtype))


def transfer_strength(D: jax.Array, b: jax.Array, k: jax.Array) -> jax.Array:
    """Transfer strength ``alpha_{j->i}(D) = b_ji + k_ji / D`` with a zero diagonal.

    Parameters
    ----------
    D : array (...)
        Token budget, in the unit of ``k``.
    b, k : array (..., m, m)
        Transfer parameters indexed ``[source, target]``.

    Returns
    -------
    array (..., m, m)
        Unit-free transfer strengths; the diagonal is 0.

    References
    ----------
    .. [1] Guo et al. (2025), Appendix A, Eq. for ``alpha_{j->i}(D)``.
    """
    D = jnp.asarray(D)
    return _off_diagonal(b + k / D[..., None, None])


def effective_ratio(
    r: jax.Array, D: jax.Array, b: jax.Array, k: jax.Array, eta: jax.Array
) -> jax.Array:
    """Interaction-aware ratio ``rt_i``: the monolingual share that reaches the same loss.

    ``rt_i = r_i + (sum_{j != i} (b_ji + k_ji / D) r_j) (1 - exp(-eta_i r_i))``.

    Parameters
    ----------
    r : array (..., m)
        Mixture proportions (shares of the budget; unit-free).
    D : array (...)
        Total token budget, in the unit of ``k``.
    b, k : array (..., m, m)
        Transfer parameters indexed ``[source j, target i]``; diagonals ignored.
    eta : array (..., m)
        Data-sufficiency rates.

    Returns
    -------
    array (..., m)
        Effective ratios (unit-free). Not floored: can be <= 0 under negative transfer.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (4).
    """
    # sum_j (b_ji + k_ji / D) r_j as two matrix products: never forms the (..., m, m)
    # per-budget matrix alpha(D) (see transfer_strength), which dominated the gradient cost.
    D = jnp.asarray(D)
    inflow = (
        jnp.einsum("...j,...ji->...i", r, _off_diagonal(b))
        + jnp.einsum("...j,...ji->...i", r, _off_diagonal(k)) / D[..., None]
    )
    return saturating_ratio(r, inflow, eta)


def saturating_ratio(r: jax.Array, inflow: jax.Array, eta: jax.Array) -> jax.Array:
    """``rt = r + inflow (1 - exp(-eta r))`` from a language's share and its transfer inflow.

    Parameters
    ----------
    r, inflow, eta : array (..., n)
        Shares of the target languages (unit-free), their inflow
        ``sum_{j != i} (b_ji + k_ji / D) r_j`` (unit-free) and data-sufficiency rates.

    Returns
    -------
    array (..., n)
        Effective ratios (unit-free), not floored.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (4).
    """
    return r + inflow * (-jnp.expm1(-eta * r))


def log_loss(
    r: jax.Array,
    D: jax.Array,
    log_B: jax.Array,
    beta: jax.Array,
    log_E: jax.Array,
    b: jax.Array,
    k: jax.Array,
    eta: jax.Array,
) -> jax.Array:
    """Log of the per-language validation loss predicted by the CLIMB law.

    ``log L_i = logaddexp(log B_i - beta_i log(D rt_i), log E_i)``, computed in log space so that
    budgets of 1e12 tokens and shares of 1e-3 lose no precision.

    Parameters
    ----------
    r : array (..., m)
        Mixture proportions.
    D : array (...)
        Token budget (in the unit that ``log_B`` and ``k`` use).
    log_B, beta, log_E, eta : array (..., m)
        Per-language parameters, see :class:`LawParams`.
    b, k : array (..., m, m)
        Transfer parameters indexed ``[source, target]``.

    Returns
    -------
    array (..., m)
        Log loss, log(nats/token). Where ``r_i = 0`` the law predicts an unbounded loss; the
        smooth floor (:data:`RT_FLOOR_SCALE`) returns a large finite value there, so callers
        must mask such entries.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (6).
    .. [2] Hoffmann et al. (2022), Eq. (2) (data term).
    """
    D = jnp.asarray(D)
    return log_loss_at_ratio(effective_ratio(r, D, b, k, eta), D, log_B, beta, log_E)


def log_loss_at_ratio(
    rt: jax.Array, D: jax.Array, log_B: jax.Array, beta: jax.Array, log_E: jax.Array
) -> jax.Array:
    """``log(B / (D rt)^beta + E)`` with the smooth floor :data:`RT_FLOOR_SCALE` on ``rt``.

    Parameters
    ----------
    rt : array (..., n)
        Effective ratios (unit-free; may be <= 0 under negative transfer).
    D : array (...)
        Token budget, in the unit ``log_B`` uses.
    log_B, beta, log_E : array (..., n)
        Per-language parameters, see :class:`LawParams`.

    Returns
    -------
    array (..., n)
        Log loss, log(nats/token).

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (6).
    """
    rt = jnp.maximum(RT_FLOOR_SCALE * jax.nn.softplus(rt / RT_FLOOR_SCALE), 1e-3 * RT_FLOOR_SCALE)
    log_effective_tokens = jnp.log(jnp.asarray(D))[..., None] + jnp.log(rt)
    return jnp.logaddexp(log_B - beta * log_effective_tokens, log_E)


def loss(r: jax.Array, D: jax.Array, params: LawParams) -> jax.Array:
    """Per-language validation loss ``L_i(D, r)`` (nats/token); see :func:`log_loss`.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (6).
    """
    return jnp.exp(log_loss(r, D, *params))


def paper_direction(
    D: jax.Array, log_B: jax.Array, beta: jax.Array, weights: jax.Array | None = None
) -> jax.Array:
    """The paper's closed-form direction ``p`` (Eq. 7 as printed), for reproduction.

    ``p_i ∝ (w_i B_i beta_i)^(1/(beta_i+1)) D^(-beta_i/(beta_i+1))``, normalised to sum to 1
    (a softmax in log space). Appendix B's derivation drops the Lagrange multiplier's factor
    ``lambda^(-1/(beta_i+1))``, which cancels only when every ``beta_i`` is equal: with unequal
    exponents this ``p`` is not the minimiser it is derived for, and it changes when the weights
    are rescaled (``w -> c w``). Use :func:`optimal_direction`.

    Parameters
    ----------
    D : array (...)
        Token budget (unit of ``log_B``).
    log_B, beta : array (..., m)
        Monolingual scaling parameters.
    weights : array (m,) or (..., m), optional
        Importance weights ``w_i > 0``; uniform when omitted.

    Returns
    -------
    array (..., m)
        Direction on the simplex (unit-free).

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (7) and Appendix B.
    """
    D = jnp.asarray(D)
    log_w = 0.0 if weights is None else jnp.log(jnp.asarray(weights))
    logits = (log_w + log_B + jnp.log(beta)) / (beta + 1.0) - beta / (beta + 1.0) * jnp.log(D)[
        ..., None
    ]
    return jax.nn.softmax(logits, axis=-1)


DIRECTION_NEWTON_STEPS = 60
"""Newton steps on ``log lambda`` in :func:`optimal_direction` (monotone from the left; the
residual is at machine precision after ~10-20 on the shipped worlds)."""


def optimal_direction(
    D: jax.Array, log_B: jax.Array, beta: jax.Array, weights: jax.Array | None = None
) -> jax.Array:
    """Optimal direction ``p``: the minimiser of ``sum_i w_i B_i (D p_i)^(-beta_i)`` on the simplex.

    Stationarity of the Lagrangian gives ``p_i(lambda) = (a_i / lambda)^(1/(beta_i+1))`` with
    ``a_i = w_i B_i beta_i D^(-beta_i)``; the multiplier solves ``sum_i p_i(lambda) = 1``. With
    ``l = log lambda``, ``f(l) = log sum_i exp((log a_i - l)/(beta_i+1))`` is convex and
    decreasing, so Newton's method started where ``f >= 0``
    (``l_0 = min_i(log a_i + (beta_i+1) log m)``) converges monotonically. With equal exponents
    this is the paper's Eq. 7 (:func:`paper_direction`); with unequal ones the multiplier's factor
    ``lambda^(-1/(beta_i+1))`` differs across languages and Eq. 7 is off. Rescaling the weights
    (``w -> c w``) moves ``lambda`` by ``c`` and leaves ``p`` unchanged.

    Parameters
    ----------
    D : array (...)
        Token budget (unit of ``log_B``).
    log_B, beta : array (..., m)
        Monolingual scaling parameters.
    weights : array (m,) or (..., m), optional
        Importance weights ``w_i >= 0`` (at least one positive; ``w_i = 0`` gives ``p_i = 0``);
        uniform when omitted.

    Returns
    -------
    array (..., m)
        Direction on the simplex (unit-free); pure ``jax.numpy`` (jit/vmap/grad).

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (7) and Appendix B (the Lagrangian this solves exactly).
    """
    D = jnp.asarray(D)
    log_B, beta = jnp.asarray(log_B), jnp.asarray(beta)
    log_w = 0.0 if weights is None else jnp.log(jnp.asarray(weights))
    log_a = log_w + log_B + jnp.log(beta) - beta * jnp.log(D)[..., None]
    inv = 1.0 / (beta + 1.0)
    m = log_a.shape[-1]
    # languages with w_i = 0 (log a_i = -inf) get p_i = 0 and do not bound the start
    l0 = jnp.min(jnp.where(jnp.isfinite(log_a), log_a + (beta + 1.0) * jnp.log(m), jnp.inf), -1)

    def newton(_i: int, lam: jax.Array) -> jax.Array:
        z = (log_a - lam[..., None]) * inv
        f = jax.nn.logsumexp(z, axis=-1)
        dfdl = -jnp.sum(jax.nn.softmax(z, axis=-1) * inv, axis=-1)
        return lam - f / dfdl

    lam = jax.lax.fori_loop(0, DIRECTION_NEWTON_STEPS, newton, l0)
    p = jnp.exp((log_a - lam[..., None]) * inv)
    return p / jnp.sum(p, axis=-1, keepdims=True)


def to_reference_units(params: LawParams, d_ref: float) -> LawParams:
    """Express parameters for budgets measured in units of ``d_ref`` tokens.

    ``log_B' = log_B - beta log(d_ref)`` and ``k' = k / d_ref``; everything else is unit-free.
    """
    return params._replace(log_B=params.log_B - params.beta * jnp.log(d_ref), k=params.k / d_ref)


def from_reference_units(params: LawParams, d_ref: float) -> LawParams:
    """Inverse of :func:`to_reference_units`: back to budgets in tokens."""
    return params._replace(log_B=params.log_B + params.beta * jnp.log(d_ref), k=params.k * d_ref)
