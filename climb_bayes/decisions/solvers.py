"""Mixture solvers: minimise a smooth objective of the mixture ``r`` on a capped simplex.

The feasible set is ``{r : sum_i r_i = 1, lo_i <= r_i <= hi_i}`` (the probability simplex with
per-language share bounds, see :mod:`climb_bayes.decisions.constraints`). Two kinds of objective are
provided, both functions of the interaction-aware ratios ``rt(r)`` of the CLIMB law:

* the **direct** objective, the weighted loss ``sum_i w_i L_i(D, r)`` (:func:`weighted_loss`);
* the paper's **two-step** procedure: the direction ``p`` (Eq. 7), then the magnitude problem
  ``min_r -sum_i rt_i(r) + rho sum_i (rt_i / sum_j rt_j - p_i)^2`` (Eq. 8, read with the
  un-normalised total in the first term, see :func:`magnitude_objective`).

Two solvers:

* :func:`solve_batch` -- the fast path: a log-barrier interior-point method with projected
  (reduced-space) Newton steps, vectorised with JAX over any number of independent problems
  (posterior draws) at once, with analytic Hessians of the composite ``G(rt(r))``;
* :func:`solve_trust_constr` -- the reference: scipy's ``trust-constr`` (the trust-region
  interior-point method the paper uses), one problem at a time.

Units
-----
``D`` in tokens (with law parameters in tokens units, :meth:`Fit.law_draws`); shares and
weights unit-free; losses in nats/token.

References
----------
.. [1] Guo et al. (2025), "CLIMB", Eq. (4), (6), (7), (8) and Appendices B-C.
.. [2] Nocedal & Wright (2006), "Numerical Optimization", 2nd ed., Ch. 16 (reduced-space
   Newton for equality constraints) and Ch. 19 (barrier methods).
.. [3] Byrd, Hribar & Nocedal (1999), "An interior point algorithm for large-scale nonlinear
   programming" (scipy's ``trust-constr``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from climb_bayes.model.law import LawParams, log_loss, optimal_direction, paper_direction

__all__ = [
    "Objective",
    "WEIGHTED_LOSS",
    "MAGNITUDE",
    "DEFAULT_SCHEDULE",
    "BatchSolution",
    "ratio_and_jacobian",
    "weighted_loss",
    "magnitude_objective",
    "composite_derivatives",
    "composite_value",
    "per_draw_theta",
    "project_capped_simplex",
    "interior_start",
    "solve_batch",
    "solve_trust_constr",
    "direction_draws",
    "direct_batch",
    "two_step_batch",
    "direct_trust_constr",
    "two_step_trust_constr",
]

DEFAULT_SCHEDULE: tuple[tuple[float, int], ...] = (
    (1e-3, 6),
    (1e-4, 4),
    (1e-5, 4),
    (1e-6, 4),
    (1e-7, 4),
    (1e-8, 4),
    (1e-9, 4),
    (1e-10, 4),
    (1e-11, 6),
)
"""Barrier weights ``mu`` and the Newton steps taken at each (fast path).

The barrier adds at most ``2 m mu`` to the objective at its minimiser, so the last stage
(1e-11) is far below the 1e-5 agreement asked of the fast path; a start far from the optimum is
handled by the damped steps of the first, large-``mu`` stage.
"""

_STEPS = (1.0, 0.5, 0.25, 0.1, 0.03, 0.005)  # fractions of the longest feasible step, tried at once


# --------------------------------------------------------------------------------------------
# Composite objectives G(rt(r)) and their exact derivatives
# --------------------------------------------------------------------------------------------


def ratio_and_jacobian(
    r: jax.Array, D: jax.Array, b: jax.Array, k: jax.Array, eta: jax.Array
) -> tuple[jax.Array, jax.Array, Callable[[jax.Array], jax.Array]]:
    """Interaction-aware ratios ``rt(r)``, their Jacobian and second-derivative contraction.

    For one problem (no batch axis): ``r`` (m,), ``D`` scalar, ``b, k`` (m, m) ``[source j,
    target i]``, ``eta`` (m,).

    Returns
    -------
    rt : array (m,)
        ``rt_i = r_i + s_i (1 - exp(-eta_i r_i))`` with ``s_i = sum_j alpha_ji r_j``.
    jac : array (m, m)
        ``jac[i, j] = d rt_i / d r_j``.
    curvature : callable
        ``c -> sum_i c_i * Hessian(rt_i)`` (an (m, m) matrix), used for the second-order term
        of a composite objective.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (4) and Appendix A.
    """
    m = r.shape[-1]
    alpha = (b + k / D) * (1.0 - jnp.eye(m, dtype=r.dtype))  # [j, i]
    s = r @ alpha  # inflow s_i
    e = jnp.exp(-eta * r)
    u = -jnp.expm1(-eta * r)
    rt = r + s * u
    jac = jnp.diag(1.0 + s * eta * e) + alpha.T * u[:, None]

    def curvature(c: jax.Array) -> jax.Array:
        a = alpha * (c * eta * e)[None, :]
        return jnp.diag(-c * s * eta**2 * e) + a + a.T

    return rt, jac, curvature


def _weighted_loss_of_rt(rt: jax.Array, theta: dict[str, jax.Array]) -> jax.Array:
    # The law itself applied to given ratios: with zero transfer, effective_ratio(rt) == rt, so
    # log_loss applies exactly the law's smooth floor of rt (whatever climb_bayes.model.law uses).
    zero = jnp.zeros(rt.shape + rt.shape[-1:], rt.dtype)
    log_l = log_loss(
        rt, theta["D"], theta["log_B"], theta["beta"], theta["log_E"], zero, zero, theta["eta"]
    )
    return jnp.sum(theta["w"] * jnp.exp(log_l))


def _magnitude_of_rt(rt: jax.Array, theta: dict[str, jax.Array]) -> jax.Array:
    total = jnp.sum(rt)
    return -total + theta["rho"] * jnp.sum((rt / total - theta["p"]) ** 2)


class Objective(NamedTuple):
    """A composite objective ``G(rt(r), theta)``; ``g`` is written for one problem.

    ``theta`` is a dict with at least ``D, b, k, eta`` (law) plus what ``g`` reads. ``separable``
    tells that ``g`` is a sum of per-language terms (its Hessian in ``rt`` is diagonal).
    """

    g: Callable[[jax.Array, dict[str, jax.Array]], jax.Array]
    separable: bool


WEIGHTED_LOSS = Objective(_weighted_loss_of_rt, True)
"""``sum_i w_i L_i(D, r)``: needs ``log_B, beta, log_E, w`` in ``theta``."""

MAGNITUDE = Objective(_magnitude_of_rt, False)
"""The two-step magnitude objective: needs ``p, rho`` in ``theta``."""


def weighted_loss(r: jax.Array, D: jax.Array, params: LawParams, weights: jax.Array) -> jax.Array:
    """Weighted loss ``sum_i w_i L_i(D, r)`` (nats/token), broadcasting over leading axes.

    Parameters
    ----------
    r : array (..., m)
        Mixtures.
    D : array (...)
        Budget in tokens.
    params : LawParams
        Law parameters in tokens units (leading axes broadcast with ``r``).
    weights : array (m,) or (..., m)
        Importance weights (this function does not normalise them).

    Returns
    -------
    array (...)
        The weighted loss; ``inf`` where a language with positive weight has ``r_i = 0``.

    References
    ----------
    .. [1] Guo et al. (2025), problem statement (weighted sum of validation losses) and Eq. (6).
    """
    r = jnp.asarray(r)
    losses = jnp.exp(log_loss(r, D, *params))
    w = jnp.asarray(weights)
    losses = jnp.where((r <= 0) & (w > 0), jnp.inf, losses)
    return jnp.sum(jnp.where(w > 0, w * losses, 0.0), axis=-1)


def magnitude_objective(
    r: jax.Array, D: jax.Array, params: LawParams, p: jax.Array, rho: float
) -> jax.Array:
    """The paper's magnitude objective ``-sum_i rt_i + rho sum_i (rt_i / sum_j rt_j - p_i)^2``.

    Eq. (8) of the paper writes the first term with the normalised ratios, ``-sum_i hat r_i``,
    which is the constant ``-1``; Appendix C and the text ("maximises the total cross-lingual
    interaction-aware language ratio") make clear that the total ``sum_i rt_i`` is meant, which is
    what is implemented.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (8) and Appendix C.
    """
    rt = jnp.vectorize(
        lambda rr, dd, bb, kk, ee: ratio_and_jacobian(rr, dd, bb, kk, ee)[0],
        signature="(m),(),(m,m),(m,m),(m)->(m)",
    )(jnp.asarray(r), jnp.asarray(D, dtype=float), params.b, params.k, params.eta)
    total = jnp.sum(rt, axis=-1)
    return -total + rho * jnp.sum((rt / total[..., None] - p) ** 2, axis=-1)


def composite_derivatives(
    objective: Objective, r: jax.Array, theta: dict[str, jax.Array]
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Value, gradient and Hessian in ``r`` of ``G(rt(r))`` for one problem (chain rule).

    ``grad = J^T dG`` and ``Hess = J^T d2G J + sum_i dG_i Hess(rt_i)``: exact, and ``O(m^3)``
    instead of differentiating through the law twice.
    """
    rt, jac, curvature = ratio_and_jacobian(r, theta["D"], theta["b"], theta["k"], theta["eta"])

    def g(x: jax.Array) -> jax.Array:
        return objective.g(x, theta)

    value, dg = jax.value_and_grad(g)(rt)
    if objective.separable:
        d2 = jax.jvp(jax.grad(g), (rt,), (jnp.ones_like(rt),))[1]
        outer = (jac.T * d2[None, :]) @ jac
    else:
        outer = jac.T @ jax.hessian(g)(rt) @ jac
    return value, jac.T @ dg, outer + curvature(dg)


def composite_value(objective: Objective, r: jax.Array, theta: dict[str, jax.Array]) -> jax.Array:
    """Value of ``G(rt(r))`` for one problem (what the line search evaluates)."""
    rt, _, _ = ratio_and_jacobian(r, theta["D"], theta["b"], theta["k"], theta["eta"])
    return objective.g(rt, theta)


# --------------------------------------------------------------------------------------------
# Feasible set helpers
# --------------------------------------------------------------------------------------------


def project_capped_simplex(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Euclidean projection onto ``{r : sum r = 1, lo <= r <= hi}`` (rows of ``v``).

    ``r = clip(v - tau, lo, hi)`` with ``tau`` found by bisection (``sum`` is monotone in
    ``tau``). Assumes ``sum(lo) <= 1 <= sum(hi)``.
    """
    v = np.asarray(v, dtype=float)
    lo = np.broadcast_to(np.asarray(lo, dtype=float), v.shape)
    hi = np.broadcast_to(np.asarray(hi, dtype=float), v.shape)
    a = np.min(v - hi, axis=-1, keepdims=True) - 1.0
    b = np.max(v - lo, axis=-1, keepdims=True) + 1.0
    for _ in range(200):
        mid = 0.5 * (a + b)
        over = np.clip(v - mid, lo, hi).sum(axis=-1, keepdims=True) > 1.0
        a = np.where(over, mid, a)
        b = np.where(over, b, mid)
    r = np.clip(v - 0.5 * (a + b), lo, hi)
    # Remove the last rounding residue on a free coordinate (keeps the bounds).
    resid = 1.0 - r.sum(axis=-1, keepdims=True)
    room = np.where(resid > 0, hi - r, r - lo)
    j = np.argmax(room, axis=-1)[..., None]
    np.put_along_axis(r, j, np.take_along_axis(r, j, -1) + resid, -1)
    return r


def interior_start(
    guess: np.ndarray | None, lo: np.ndarray, hi: np.ndarray, share: float = 0.9
) -> np.ndarray:
    """A strictly interior feasible point near ``guess`` (rows): ``share`` of its projection plus
    ``1 - share`` of the centre ``lo + t (hi - lo)`` (which is interior where ``lo < hi``)."""
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    span = hi - lo
    t = (1.0 - lo.sum()) / max(span.sum(), 1e-300)
    centre = lo + t * span
    if guess is None:
        return centre
    proj = project_capped_simplex(np.asarray(guess, dtype=float), lo, hi)
    return share * proj + (1.0 - share) * centre


class _Box(NamedTuple):
    """The feasible set of the fast path (a JAX pytree): bounds, which coordinates are free,
    which upper bounds can bind, and the reduced basis ``z`` of ``sum r = 1``."""

    lo: Any
    hi: Any
    free: Any
    has_hi: Any
    z: Any


def _structure(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free coordinates, coordinates whose upper bound can bind, and the reduced basis."""
    m = lo.size
    free = hi - lo > 1e-12
    slack = 1.0 - (lo.sum() - lo)  # largest r_i allowed by the others' lower bounds
    has_hi = free & (hi < slack - 1e-12)
    live = np.flatnonzero(free)
    z = np.zeros((m, m))
    if live.size >= 2:
        pivot = live[-1]
        for i in live[:-1]:
            z[i, i] = 1.0
            z[pivot, i] = -1.0
    return free, has_hi, z


# --------------------------------------------------------------------------------------------
# Fast path: batched barrier + reduced Newton
# --------------------------------------------------------------------------------------------


class BatchSolution(NamedTuple):
    """Solutions of a batch of problems.

    Attributes
    ----------
    x : ndarray (n, m + n_extra)
        Minimisers (mixture first, then the extra unconstrained variables).
    fun : ndarray (n,)
        Objective values at ``x`` (without barrier).
    decrement : ndarray (n,)
        Newton decrement of the last step (``-g.d``): ~0 at convergence.
    """

    x: np.ndarray
    fun: np.ndarray
    decrement: np.ndarray


def _barrier(x: jax.Array, box: _Box, m: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    lo, hi, free, has_hi, _ = box
    r = x[:m]
    dlo = jnp.where(free, r - lo, 1.0)
    dhi = jnp.where(has_hi, hi - r, 1.0)
    val = -jnp.sum(jnp.where(free, jnp.log(dlo), 0.0)) - jnp.sum(
        jnp.where(has_hi, jnp.log(dhi), 0.0)
    )
    grad = jnp.where(free, -1.0 / dlo, 0.0) + jnp.where(has_hi, 1.0 / dhi, 0.0)
    hess = jnp.where(free, 1.0 / dlo**2, 0.0) + jnp.where(has_hi, 1.0 / dhi**2, 0.0)
    pad = x.shape[0] - m
    return val, jnp.pad(grad, (0, pad)), jnp.pad(hess, (0, pad))


def _solve_one(
    value_fn: Callable,
    derivs_fn: Callable,
    theta: Any,
    shared: Any,
    x0: jax.Array,
    box: _Box,
    mus: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    lo, hi, free, has_hi, z = box
    m = lo.shape[0]
    n = x0.shape[0]
    eye = jnp.eye(n, dtype=x0.dtype)

    def phi(x: jax.Array, mu: jax.Array) -> jax.Array:
        val = value_fn(x, theta, shared)
        bar = _barrier(x, box, m)[0]
        out = val + mu * bar
        return jnp.where(jnp.isfinite(out), out, jnp.inf)

    def step(x: jax.Array, mu: jax.Array) -> tuple[jax.Array, jax.Array]:
        _, g, h = derivs_fn(x, theta, shared)
        _, gb, hb = _barrier(x, box, m)
        g = g + mu * gb
        h = h + jnp.diag(mu * hb)
        rg = z.T @ g
        rh = z.T @ h @ z
        dead = jnp.diag(z.T @ z) == 0.0
        rh = jnp.where(dead[:, None] | dead[None, :], eye, rh)
        rg = jnp.where(dead, 0.0, rg)
        # Newton on the reduced Hessian if it is positive definite, else shifted by the
        # Gershgorin bound (always positive definite): a descent step in non-convex regions.
        chol = jnp.linalg.cholesky(rh)
        radius = jnp.sum(jnp.abs(rh), axis=1) - jnp.abs(jnp.diag(rh)) - jnp.diag(rh)
        shift = jnp.maximum(jnp.max(radius), 0.0) + 1e-8 * jnp.max(jnp.abs(jnp.diag(rh)))
        shifted = jnp.linalg.cholesky(rh + shift * eye)
        chol = jnp.where(jnp.all(jnp.isfinite(chol)), chol, shifted)
        y = jax.scipy.linalg.cho_solve((chol, True), -rg)
        d = z @ y
        dec = -(g @ d)
        d = jnp.where(dec > 0, d, z @ (-rg))  # never an ascent direction
        dr = d[:m]
        t_lo = jnp.where(free & (dr < 0), (x[:m] - lo) / jnp.where(dr < 0, -dr, 1.0), jnp.inf)
        t_hi = jnp.where(has_hi & (dr > 0), (hi - x[:m]) / jnp.where(dr > 0, dr, 1.0), jnp.inf)
        t_max = jnp.minimum(1.0, 0.995 * jnp.minimum(jnp.min(t_lo), jnp.min(t_hi)))
        ts = t_max * jnp.asarray(_STEPS, dtype=x.dtype)
        cands = x[None, :] + ts[:, None] * d[None, :]
        vals = jax.vmap(lambda c: phi(c, mu))(cands)
        best = jnp.argmin(vals)
        accept = vals[best] < phi(x, mu)
        return jnp.where(accept, cands[best], x), jnp.abs(dec)

    x, decs = jax.lax.scan(step, x0, mus)
    fun = value_fn(x, theta, shared)
    return x, fun, decs[-1]


@partial(jax.jit, static_argnames=("value_fn", "derivs_fn"))
def _solve_batch_jit(
    value_fn: Callable,
    derivs_fn: Callable,
    theta: Any,
    shared: Any,
    x0: jax.Array,
    box: _Box,
    mus: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    one = partial(_solve_one, value_fn, derivs_fn)
    return jax.vmap(one, in_axes=(0, None, 0, None, None))(theta, shared, x0, box, mus)


def solve_batch(
    value_fn: Callable[[jax.Array, Any, Any], jax.Array],
    derivs_fn: Callable[[jax.Array, Any, Any], tuple[jax.Array, jax.Array, jax.Array]],
    theta: Any,
    lo: np.ndarray,
    hi: np.ndarray,
    x0: np.ndarray,
    *,
    shared: Any = None,
    schedule: tuple[tuple[float, int], ...] = DEFAULT_SCHEDULE,
    tol: float = 1e-10,
    max_polish: int = 3,
) -> BatchSolution:
    """Minimise many smooth problems on the same capped simplex at once (the fast path).

    Each problem ``k`` minimises ``value_fn(x, theta[k], shared)`` over ``x = (r, e)`` with
    ``r`` in ``{sum r = 1, lo <= r <= hi}`` and ``e`` (``x0.shape[1] - m`` extra variables)
    unconstrained. The barrier ``-mu sum log(r - lo) - mu sum log(hi - r)`` is driven to zero
    along ``schedule``; each step is a Newton step in the null space of ``sum r = 1`` (the
    Hessian shifted just enough to be positive definite, so non-convex regions get a descent
    step), kept strictly feasible (fraction to the boundary 0.995) with a backtracking line
    search over 6 step lengths evaluated at once.

    Parameters
    ----------
    value_fn, derivs_fn : callable
        ``(x, theta_k, shared) -> value`` and ``-> (value, grad, hess)`` for one problem; pass
        module-level functions (they key the JIT cache).
    theta : pytree
        Per-problem data, leading axis ``n``.
    lo, hi : ndarray (m,)
        Share bounds (checked feasible by the caller, see :mod:`climb_bayes.decisions.constraints`).
    x0 : ndarray (n, m + n_extra)
        Starts with ``r`` strictly inside the bounds (:func:`interior_start`).
    shared : pytree, optional
        Data common to every problem.
    schedule : tuple of (mu, steps)
        Barrier weights and Newton steps per weight.
    tol : float
        Newton decrement above which a problem counts as not converged; the batch is then
        passed again (up to ``max_polish`` times) with every step at the last barrier weight.
    max_polish : int
        Most extra passes.

    Returns
    -------
    BatchSolution
        The mixture part is projected once more onto the feasible set (removing rounding
        residue, ~1e-16), so every ``r`` sums to 1 and respects its bounds exactly.

    References
    ----------
    .. [1] Nocedal & Wright (2006), Sections 16.2 (null-space method) and 19.6 (barrier).
    """
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    m = lo.size
    if hi.sum() <= 1.0 + 1e-12:  # the caps add up to 1: r = hi is the only feasible point
        lo = hi.copy()
    elif lo.sum() >= 1.0 - 1e-12:  # the minimums add up to 1: r = lo is
        hi = lo.copy()
    free, has_hi, z_r = _structure(lo, hi)
    x0 = np.asarray(x0, dtype=float)
    n_var = x0.shape[1]
    z = np.zeros((n_var, n_var))
    z[:m, :m] = z_r
    z[m:, m:] = np.eye(n_var - m)
    mus = np.concatenate([np.full(steps, mu) for mu, steps in schedule])
    x0 = x0.copy()
    x0[:, :m] = np.where(free, x0[:, :m], lo)
    box = _Box(*(jnp.asarray(a) for a in (lo, hi, free, has_hi, z)))
    x, fun, dec = _solve_batch_jit(
        value_fn, derivs_fn, theta, shared, jnp.asarray(x0), box, jnp.asarray(mus)
    )
    # Problems that have not converged (rare: tight boxes, strongly non-convex draws) get more
    # Newton steps at the final barrier weight; the whole batch is passed again so that the
    # compiled function is reused (same shapes), converged problems do not move.
    for _ in range(max_polish):
        if not np.any(np.asarray(dec) > tol):
            break
        x, fun, dec = _solve_batch_jit(
            value_fn, derivs_fn, theta, shared, x, box, jnp.full(mus.shape, mus[-1])
        )
    x = np.array(x)
    x[:, :m] = project_capped_simplex(x[:, :m], lo, hi)
    return BatchSolution(x, np.asarray(fun), np.asarray(dec))


# --------------------------------------------------------------------------------------------
# Per-draw objectives for the fast path
# --------------------------------------------------------------------------------------------


def per_draw_theta(params: LawParams, D: float, extra: dict[str, np.ndarray]) -> dict:
    """Problem data for :func:`solve_batch` (one problem per draw): the law in tokens units,
    ``D`` and ``extra`` entries (scalars and (m,) arrays are repeated for every draw)."""
    n = np.asarray(params.beta).shape[0]
    theta = {
        "D": np.full(n, float(D)),
        "log_B": np.asarray(params.log_B, dtype=float),
        "beta": np.asarray(params.beta, dtype=float),
        "log_E": np.asarray(params.log_E, dtype=float),
        "b": np.asarray(params.b, dtype=float),
        "k": np.asarray(params.k, dtype=float),
        "eta": np.asarray(params.eta, dtype=float),
    }
    for key, value in extra.items():
        value = np.asarray(value, dtype=float)
        if value.ndim == 0:
            value = np.full(n, float(value))
        elif value.ndim == 1:
            value = np.broadcast_to(value, (n, value.size))
        theta[key] = value
    return theta


def _direct_value(x: jax.Array, theta: dict, shared: Any) -> jax.Array:
    return composite_value(WEIGHTED_LOSS, x, theta)


def _direct_derivs(x: jax.Array, theta: dict, shared: Any) -> tuple:
    return composite_derivatives(WEIGHTED_LOSS, x, theta)


def _magnitude_value(x: jax.Array, theta: dict, shared: Any) -> jax.Array:
    return composite_value(MAGNITUDE, x, theta)


def _magnitude_derivs(x: jax.Array, theta: dict, shared: Any) -> tuple:
    return composite_derivatives(MAGNITUDE, x, theta)


def direction_draws(
    params: LawParams, D: float, weights: np.ndarray, *, paper: bool = False
) -> np.ndarray:
    """The direction ``p`` of the two-step method per draw, ``(n, m)``.

    :func:`~climb_bayes.model.law.optimal_direction` (the exact minimiser the paper derives ``p``
    as; invariant to the scale of ``weights``), or with ``paper=True`` the paper's Eq. 7 as printed
    (:func:`~climb_bayes.model.law.paper_direction`). Languages with zero weight get ``p_i = 0``.
    """
    w = np.asarray(weights, dtype=float)
    D = jnp.asarray(D, dtype=float)
    if not paper:
        return np.asarray(optimal_direction(D, params.log_B, params.beta, w))
    safe = np.where(w > 0, w, 1.0)
    p = np.asarray(paper_direction(D, params.log_B, params.beta, safe))
    p = np.where(w > 0, p, 0.0)
    return p / p.sum(axis=-1, keepdims=True)


def direct_batch(
    params: LawParams,
    D: float,
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    start: np.ndarray | None = None,
) -> BatchSolution:
    """Direct minimiser of ``sum_i w_i L_i(D, r)`` for every draw of ``params`` (fast path).

    Parameters
    ----------
    params : LawParams
        Draws, each field with a leading axis ``n`` (tokens units).
    D : float
        Budget (tokens).
    weights : ndarray (m,)
        Importance weights, ``>= 0``, normalised to sum to 1 by the caller.
    lo, hi : ndarray (m,)
        Share bounds.
    start : ndarray (n, m), optional
        Starting mixtures; by default the paper's direction ``p`` of each draw (Eq. 7), which is
        exact without transfer and equal ``beta``.

    Returns
    -------
    BatchSolution
        ``fun`` is the weighted loss (nats/token) at each draw's optimum.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (6) and the weighted-loss problem of Section 2.1.
    """
    theta = per_draw_theta(params, D, {"w": weights})
    guess = direction_draws(params, D, weights) if start is None else start
    x0 = interior_start(guess, lo, hi)
    return solve_batch(_direct_value, _direct_derivs, theta, lo, hi, x0)


def two_step_batch(
    params: LawParams,
    D: float,
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    rho: float,
) -> tuple[BatchSolution, np.ndarray]:
    """The paper's two-step solution for every draw (fast path).

    Step 1: the direction ``p`` (:func:`direction_draws`: the exact minimiser the paper derives
    Eq. 7 as; ``p_i ∝ (w_i B_i beta_i)^(1/(beta_i+1)) D^(-beta_i/(beta_i+1))`` when all
    ``beta_i`` are equal).
    Step 2: ``min_r -sum_i rt_i(r) + rho sum_i (hat r_i(r) - p_i)^2`` on the feasible set.

    Returns
    -------
    (BatchSolution, ndarray (n, m))
        The magnitude-problem solutions (``fun`` is *its* objective, not the loss) and ``p``.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (7)-(8), Algorithm 1 Part II, Appendices B-C.
    """
    p = direction_draws(params, D, weights)
    theta = per_draw_theta(params, D, {"p": p, "rho": np.asarray(float(rho))})
    x0 = interior_start(p, lo, hi)
    return solve_batch(_magnitude_value, _magnitude_derivs, theta, lo, hi, x0), p


# --------------------------------------------------------------------------------------------
# Reference: scipy trust-constr, one problem at a time
# --------------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("objective",))
def _single_derivs(objective: Objective, r: jax.Array, theta: dict) -> tuple:
    return composite_derivatives(objective, r, theta)


def solve_trust_constr(
    objective: Objective,
    theta: dict[str, np.ndarray],
    lo: np.ndarray,
    hi: np.ndarray,
    x0: np.ndarray,
    *,
    tol: float = 1e-12,
    maxiter: int = 3000,
) -> scipy.optimize.OptimizeResult:
    """Minimise one composite objective with scipy's ``trust-constr`` (the reference solver).

    Exact gradient and Hessian (:func:`composite_derivatives`), the equality ``sum r = 1`` as a
    linear constraint and the share bounds as bounds (handled by its interior-point barrier).

    References
    ----------
    .. [1] Guo et al. (2025), Section 2.3 ("Trust-Region Interior-Point Method").
    .. [2] Byrd, Hribar & Nocedal (1999).
    """
    theta_j = {k_: jnp.asarray(v) for k_, v in theta.items()}
    cache: dict[bytes, tuple] = {}

    def derivs(r: np.ndarray) -> tuple:
        key = np.asarray(r, dtype=float).tobytes()
        if key not in cache:
            cache.clear()
            v, g, h = _single_derivs(objective, jnp.asarray(r, dtype=float), theta_j)
            cache[key] = (float(v), np.asarray(g), np.asarray(h))
        return cache[key]

    m = np.asarray(lo).size
    bounds = scipy.optimize.Bounds(np.asarray(lo, float), np.asarray(hi, float), keep_feasible=True)
    eq = scipy.optimize.LinearConstraint(np.ones((1, m)), 1.0, 1.0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scipy.optimize.minimize(
            lambda r: derivs(r)[0],
            np.asarray(x0, dtype=float),
            jac=lambda r: derivs(r)[1],
            hess=lambda r: derivs(r)[2],
            method="trust-constr",
            constraints=[eq],
            bounds=bounds,
            options={"gtol": tol, "xtol": tol, "barrier_tol": tol, "maxiter": maxiter},
        )
    return res


def _trust_constr_draws(
    objective: Objective,
    theta: dict[str, np.ndarray],
    starts: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    draws: np.ndarray | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Solve the problem of each draw in ``draws`` (all by default) from ``starts[i]``
    (projected inside the bounds); the solution is projected onto the feasible set and the
    objective evaluated there."""
    idx = np.arange(starts.shape[0]) if draws is None else np.asarray(draws)
    xs, fs = [], []
    for n_done, i in enumerate(idx):
        row = {k_: np.asarray(v)[i] for k_, v in theta.items()}
        res = solve_trust_constr(objective, row, lo, hi, interior_start(starts[i], lo, hi))
        x = project_capped_simplex(res.x, lo, hi)
        xs.append(x)
        fs.append(float(composite_value(objective, jnp.asarray(x), row)))
        if progress is not None:
            progress(n_done + 1, idx.size)
    return np.array(xs), np.array(fs)


def direct_trust_constr(
    params: LawParams,
    D: float,
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    draws: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Direct minimiser per draw with ``trust-constr`` (reference; slow: one problem a time).

    Returns
    -------
    (ndarray (k, m), ndarray (k,))
        Mixtures and weighted losses for the draws ``draws`` (all by default).
    """
    theta = per_draw_theta(params, D, {"w": weights})
    p = direction_draws(params, D, weights)
    return _trust_constr_draws(WEIGHTED_LOSS, theta, p, lo, hi, draws, progress)


def two_step_trust_constr(
    params: LawParams,
    D: float,
    weights: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    rho: float,
    *,
    draws: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The two-step solution per draw with ``trust-constr`` (the paper's reference method).

    Returns
    -------
    (ndarray (k, m), ndarray (k,))
        Mixtures and magnitude-objective values for the draws ``draws`` (all by default).
    """
    p = direction_draws(params, D, weights)
    theta = per_draw_theta(params, D, {"p": p, "rho": np.asarray(float(rho))})
    return _trust_constr_draws(MAGNITUDE, theta, p, lo, hi, draws, progress)
