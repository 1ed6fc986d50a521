"""Laplace approximation of a NumPyro model's posterior: the mode and a Gaussian around it.

Used for the leave-future-out refits inside :func:`climb_bayes.inference.ensemble.fit_ensemble`: a
NUTS refit per fold and law cost minutes on 2 cores (a 5Mix CLIMB fold on two close budgets: ~8 min,
tree depth saturated), the Laplace refit seconds, and unlike a point fit it keeps the priors and
gives the parameter uncertainty, so the discrepancy learned from the fold residuals is not inflated
by it.

The mode is found with L-BFGS (:func:`climb_bayes.inference.point_fit.multistart_lbfgs`, JAX
gradients) on NumPyro's potential energy in the unconstrained space
(:func:`numpyro.infer.util.get_potential_fn`, the public API NUTS builds on; :func:`flat_model`),
finished by an
exact-Hessian trust-region Newton polish (:func:`~climb_bayes.inference.point_fit.newton_polish`;
L-BFGS only has to reach the mode's basin: :data:`SEARCH_ITERATIONS` says what that saves);
the covariance is the inverse Hessian there, with eigenvalues floored so that it is positive
definite. The polish matters: on the CLIMB posteriors of the Data Mixing Laws RedPajama folds
(7 domains, 147 parameters, Hessian eigenvalues ~2 to 2e7) L-BFGS's 3,000 iterations stopped
with gradient 35-165 and one or two negative eigenvalues; the floor turned those into sd ~2.5
on a transfer and predictive sds up to 200% of the loss at the fold's test points. The polish
reaches the mode (gradient < 1e-6, every eigenvalue positive) in 9-17 Hessian evaluations,
under 1 s. Draws are mapped back through the model's transforms with the deterministic sites
(``ModelInfo.postprocess_fn``).
Where the searches from the law's start and from jittered copies of it
(:data:`LAPLACE_SEARCHES`) reach different modes, the draws are shared among the modes' Gaussians
in proportion to their Laplace evidence (:func:`laplace_posterior` says why and what it
measured).
NumPyro's own ``AutoLaplaceApproximation`` with ``optim.Minimize`` (JAX's BFGS) stopped at a far
worse point on the CLIMB model (potential -618 vs -1253 here, measured on the 2024 default table)
and its ``sample_posterior`` took 64 s.

References
----------
.. [1] Tierney & Kadane (1986), "Accurate Approximations for Posterior Moments and Marginal
   Densities", JASA 81(393).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import scipy.linalg
from jax.flatten_util import ravel_pytree

from climb_bayes.inference.argument_potential import (
    ClosurePotential,
    argument_potential,
)
from climb_bayes.inference.point_fit import jitted_derivatives, multistart_lbfgs, newton_polish

__all__ = [
    "SEARCH_ITERATIONS",
    "flat_model",
    "LAPLACE_SEARCHES",
    "LaplaceResult",
    "laplace_modes",
    "laplace_posterior",
    "approximation_pareto_k",
    "pareto_k_threshold",
    "START_CANDIDATES",
    "MODE_GAP",
    "ModeStarts",
    "mode_starts",
    "evidence_picks",
]

EIGEN_FLOOR = 1e-8
"""Smallest Hessian eigenvalue kept, relative to the largest (flat directions get a wide but
finite variance)."""


class LaplaceResult(NamedTuple):
    """Draws of every sample and deterministic site, and how the mode searches went.

    Attributes
    ----------
    samples : dict of str to numpy.ndarray
        Draws of every latent and deterministic site, constrained values.
    potential : float
        Potential energy (negative log joint, nats) at the mode of largest Laplace evidence.
    converged : bool
        That mode search ended at a mode: positive-definite Hessian and a Newton decrement below
        :data:`climb_bayes.inference.point_fit.NEWTON_DECREMENT_TOL`.
    min_eigenvalue : float
        Smallest eigenvalue of the Hessian there, before the floor.
    mode_potentials : numpy.ndarray
        ``(modes,)`` potential energy at each distinct mode the searches reached, by decreasing
        weight.
    mode_weights : numpy.ndarray
        ``(modes,)`` share of the draws each mode's Gaussian got (normalised Laplace evidence).
    pareto_k : float
        How well the Gaussians approximate the posterior at the draws: Pareto k-hat of the
        importance ratios posterior / approximation (:func:`approximation_pareto_k`; above
        :func:`pareto_k_threshold` the approximation is unreliable). ``nan`` when not computed.
    pareto_k_max : float
        That threshold for the number of draws (:func:`pareto_k_threshold`).
    """

    samples: dict[str, np.ndarray]
    potential: float
    converged: bool
    min_eigenvalue: float
    mode_potentials: np.ndarray
    mode_weights: np.ndarray
    pareto_k: float = float("nan")
    pareto_k_max: float = 0.7


SEARCH_ITERATIONS = 150
"""L-BFGS iterations of a mode search (:func:`laplace_posterior`, :func:`mode_starts`) before
the exact-Hessian Newton polish finishes it (:func:`_mode_searches`).

L-BFGS gets into a mode's basin in tens to hundreds of iterations and then crawls along the
posterior's thin valleys (Hessian eigenvalues spanning ~1e6 and more) for thousands; the
trust-region polish converges quadratically there. Measured (2026-11-29, 2-core machine beside
a test run; ``law.fit(obs, "laplace")`` on the smaller 60% of the fit budgets of 5Mix-70M,
RedPajama-70M and -410M and on the default data's budgets <= 5e5, all four laws): 150
iterations instead of 3,000 reach the same modes with the same evidence weights in every one of
the 16 fits (50 iterations too), and take 2.8-21 s instead of 11-91 s (CLIMB on 5Mix-70M:
91 -> 3.6 s; the polish from the earlier stop takes 8-18 Hessian evaluations instead of 1-3)."""

LAPLACE_SEARCHES = 4
"""Mode searches of a Laplace fit (:func:`laplace_posterior`): the law's own start and jittered
copies of it."""

NEIGHBOUR_POLISHES = 4
"""Newton polishes of a Laplace fit from draws of the Gaussians at the minima its searches
reached (:func:`laplace_posterior`): they find the further minima inside those typical sets.

Measured on the default data's second leave-future-out fold (Isolated, 495 losses): the four
searches' 150 L-BFGS iterations stop 10-100 nats short of the mode at points that follow
rounding, and the polishes from them reached a minimum at potential -1408.7 with one build and
also one at -1410.3 (inside the first's typical set) with another; of 8 polishes from draws of
the Gaussian at -1408.7, 3 reached -1410.3."""

SAME_MINIMUM = 1e-3
"""Potential difference (nats) and squared Mahalanobis distance within which two polished end
points are one minimum of a Laplace fit's mixture (:func:`laplace_posterior`)."""


def laplace_modes(res: LaplaceResult) -> str:
    """One-line account of a Laplace fit's modes for a progress log."""
    if res.mode_weights.size == 1:
        return f"potential {res.potential:.4g}"
    return f"{res.mode_weights.size} modes: " + ", ".join(
        f"potential {p:.4g} weight {w:.2f}"
        for p, w in zip(res.mode_potentials, res.mode_weights, strict=True)
    )


def flat_model(
    model: Callable[..., None], model_args: tuple, init_values: dict[str, Any], key: jax.Array
) -> tuple[Any, jax.Array, Callable, Callable[[jax.Array], jax.Array]]:
    """NumPyro's set-up of ``model`` started at ``init_values``: its potential and
    post-processing functions, its unconstrained start as a flat vector, the unravel map and
    the potential energy of a flat vector.

    The sites' transforms come from one *abstract* trace of the model
    (:func:`jax.eval_shape` over :class:`numpyro.handlers.trace`), the potential and
    post-processing from :func:`numpyro.infer.util.get_potential_fn` -- the pieces
    :func:`numpyro.infer.util.initialize_model` assembles, without its three eager runs of the
    model (one to collect the sites, one at the start, one for the start's potential). Run
    eagerly, every operation of the model is compiled for the data's shapes on first use:
    measured on a leave-future-out fold of the default data (2-core AMD EPYC, fresh process,
    warm compilation cache) ``initialize_model`` took 1.10-1.15 s for CLIMB and 0.49 s for MSL,
    this set-up 0.06 s and 0.02 s; a default ``climb-bayes fit`` makes ~12 such set-ups for new
    shapes. A model whose start cannot be set up this way (a latent site without a value in
    ``init_values``, a support that depends on other sites, a discrete or ``param`` site) goes
    through ``initialize_model`` as before.

    Parameters
    ----------
    model : callable
        NumPyro model.
    model_args : tuple
        Its positional arguments.
    init_values : dict
        Constrained values of the latent sites, the start.
    key : jax.Array
        PRNG key of the set-up.

    Returns
    -------
    tuple
        ``(info, z0, unravel, potential)``: a :class:`numpyro.infer.util.ModelInfo` (its
        ``param_info.z`` the start, unconstrained; ``potential_fn``, ``postprocess_fn``; no
        ``model_trace`` on the abstract path), the start as a flat unconstrained vector, the map
        from such a vector to the sites' dict, and the potential energy (negative log density,
        unconstrained) of a flat vector: on the abstract path an
        :class:`~climb_bayes.inference.argument_potential.ArgumentPotential`, whose compiled
        programs take the model's data as arguments and are shared by every set-up of the same
        model and shapes (where the model allows it), else a
        :class:`~climb_bayes.inference.argument_potential.ClosurePotential` (the same
        interface: call, ``batch``, ``postprocess_batch``).
    """
    from numpyro.infer.util import ModelInfo, ParamInfo, get_potential_fn, transform_fn

    seeded = numpyro.handlers.seed(model, key)
    found = _abstract_transforms(seeded, model_args, init_values)
    if found is None:
        info = _initialize_model(model, model_args, init_values, key)
    else:
        transforms, replay = found
        potential_fn, postprocess_fn = get_potential_fn(
            seeded, transforms, replay_model=replay, model_args=model_args
        )
        z = transform_fn(transforms, {k: init_values[k] for k in transforms}, invert=True)
        info = ModelInfo(ParamInfo(z, None, None), potential_fn, postprocess_fn, None)
    z0, unravel = ravel_pytree(info.param_info.z)
    if found is not None:  # one compiled set for every fit of these shapes
        shared = argument_potential(model, model_args, info.param_info.z, key, deterministic=replay)
        if shared is not None:
            return info, z0, unravel, shared

    return info, z0, unravel, ClosurePotential(info.potential_fn, info.postprocess_fn, unravel)


def _abstract_transforms(
    model: Callable[..., None], model_args: tuple, init_values: dict[str, Any]
) -> tuple[dict[str, Any], bool] | None:
    """The latent sites' bijections to their supports and whether the post-processing must
    replay the model (it has deterministic sites), from an abstract trace of ``model`` with
    ``init_values`` substituted; ``None`` when :func:`flat_model` must fall back to
    ``initialize_model`` (see there)."""
    from numpyro.distributions import biject_to

    found: dict[str, Any] = {}

    def collect(values: dict[str, jax.Array]) -> None:
        sites = numpyro.handlers.trace(numpyro.handlers.substitute(model, data=values)).get_trace(
            *model_args
        )
        transforms, replay = {}, False
        for name, site in sites.items():
            if site["type"] == "deterministic":
                replay = True
            elif site["type"] == "param":
                return
            elif site["type"] == "sample" and not site["is_observed"]:
                support = site["fn"].support
                dynamic = any(isinstance(v, jax.core.Tracer) for v in vars(support).values())
                if name not in init_values or support.is_discrete or dynamic:
                    return
                transforms[name] = biject_to(support)
        found["result"] = (transforms, replay)

    # the values enter as arguments, so a support computed from another site's value holds a
    # tracer here and is recognised as dynamic
    jax.eval_shape(collect, {k: jnp.asarray(v) for k, v in init_values.items()})
    return found.get("result")


def _initialize_model(
    model: Callable[..., None], model_args: tuple, init_values: dict[str, Any], key: jax.Array
) -> Any:
    """:func:`numpyro.infer.util.initialize_model` started at ``init_values``."""
    from numpyro.infer import init_to_value
    from numpyro.infer.util import initialize_model

    # validate_grad=False: NumPyro checks the start's gradient op by op (not jitted), 5.4 s on
    # the first call in a process and 0.4 s after for CLIMB on the default data, against 0.11 s
    # without; the L-BFGS that follows evaluates the (jitted) gradient anyway and treats a
    # non-finite value as a failed step.
    return initialize_model(
        key,
        model,
        model_args=model_args,
        init_strategy=init_to_value(values={k: jnp.asarray(v) for k, v in init_values.items()}),
        validate_grad=False,
    )


def _ravel_starts(starts: dict[str, Any], size: int) -> np.ndarray:
    """``(n, size)`` flat vectors of unconstrained starts given per site with a leading axis
    ``n``, in the (sorted-key) order of :func:`jax.flatten_util.ravel_pytree`."""
    n = next(iter(starts.values())).shape[0]
    x = np.stack(
        [
            np.asarray(ravel_pytree({k: jnp.asarray(v[c]) for k, v in starts.items()})[0])
            for c in range(n)
        ]
    )
    if x.shape[1] != size:
        raise ValueError("starts do not name the model's latent sites.")
    return x


def laplace_posterior(
    model: Callable[..., None],
    model_args: tuple,
    init_values: dict[str, Any],
    *,
    key: jax.Array,
    n_draws: int = 400,
    max_iter: int = SEARCH_ITERATIONS,
    starts: dict[str, Any] | None = None,
) -> LaplaceResult:
    """Modes and Gaussian approximations of ``model``'s posterior; ``n_draws`` draws from their
    evidence-weighted mixture.

    L-BFGS climbs from ``init_values`` and from each of ``starts``; every end point is polished
    to a mode (:func:`~climb_bayes.inference.point_fit.newton_polish`); then
    :data:`NEIGHBOUR_POLISHES` more polishes start from draws of the Gaussians at the modes
    found, to find the further minima inside their typical sets. Each distinct minimum (end
    points within :data:`SAME_MINIMUM` are one) gets a share of the draws in proportion to its
    Laplace evidence ``exp(-U) det(H)^(-1/2)`` (the posterior mass the Gaussian there
    approximates; systematic resampling of the shares), drawn through the Cholesky factor of
    its floored Hessian (:func:`_precision_cholesky`). With one minimum, the plain Laplace
    approximation.

    Why several searches: from one start, which mode the search reaches can turn on rounding.
    Measured on the 5Mix-70M CLIMB leave-future-out folds (``benchmarks/real_data.py
    --pipeline laplace``): from the prior centre and 4 jittered starts, fold 1 has modes at
    potential -1170.9 and -1156.2 (log evidence 948.8 and 937.5), fold 2 at -1541.7 and -1542.7
    (1318.2 and 1314.9: the deeper mode is narrower, 3% of the mass); a code change that moved
    the prior-centre search to the other mode moved the stacked predictive's cov50 0.31 -> 0.23
    and MRE 1.88% -> 2.08%.

    Parameters
    ----------
    model : callable
        NumPyro model.
    model_args : tuple
        Its positional arguments.
    init_values : dict
        First start of the mode search (constrained values of the latent sites); it also sets
        the model up.
    key : jax.Array
        PRNG key.
    n_draws : int
        Draws to return.
    max_iter : int
        L-BFGS iterations per search before its Newton polish.
    starts : dict, optional
        Further starts, ``(n, ...)`` unconstrained values per latent site (e.g. jittered copies
        of ``init_values``).

    Returns
    -------
    LaplaceResult

    References
    ----------
    .. [1] Tierney & Kadane (1986), "Accurate Approximations for Posterior Moments and Marginal
       Densities", JASA 81(393).
    .. [2] Zhang, Carpenter, Gelman & Vehtari (2022), "Pathfinder: Parallel quasi-Newton
       variational inference", JMLR 23 (several quasi-Newton searches, their Gaussian
       approximations weighted by importance).
    """
    k_init, k_draw, k_pick = jax.random.split(key, 3)
    _, z0, _, potential = flat_model(model, model_args, init_values, k_init)
    x0 = np.asarray(z0)[None]
    if starts is not None:
        x0 = np.concatenate([x0, _ravel_starts(starts, z0.size)])
    res, polished = _mode_searches(potential, x0, max_iter)
    ok = [p for p in polished if p is not None]
    if not ok:  # every search failed: the single search's end point, as before
        ok = [newton_polish(potential, res.x)]
    # more minima of the basins found: polish from draws of their Gaussians (NEIGHBOUR_POLISHES)
    k_near = jax.random.fold_in(k_init, 1)
    found = _laplace_modes(ok, gap=MODE_GAP, radius2=None)  # as the chains' starts merge them
    ok += _neighbour_polishes(potential, found, k_near)
    modes = _laplace_modes(ok, gap=SAME_MINIMUM, radius2=SAME_MINIMUM)
    log_ev = np.array([m.log_evidence for m in modes])
    mass = np.exp(log_ev - log_ev.max())
    pick = _systematic_resample(mass, n_draws, k_pick)
    eps = np.asarray(jax.random.normal(k_draw, (n_draws, z0.size)))
    z = _gaussian_draws(modes, pick, eps)
    post, log_p = potential.postprocess_batch(z), -np.asarray(potential.batch(z))
    samples = {k: np.asarray(val) for k, val in post.items()}
    weights = mass / mass.sum()
    log_q = _mixture_log_density(z, modes, weights)
    top = modes[0]
    return LaplaceResult(
        samples,
        float(top.search.fun),
        bool(top.search.success),
        float(top.w.min()),
        np.array([float(m.search.fun) for m in modes]),
        weights,
        approximation_pareto_k(log_p - log_q),
        pareto_k_threshold(n_draws),
    )


def _mixture_log_density(z: np.ndarray, modes: list[_Mode], weights: np.ndarray) -> np.ndarray:
    """``(n,)`` log density of the draws ``z`` under the weighted mixture of the modes'
    Gaussians (mean at the mode, precision ``chol chol^T``)."""
    per_mode = []
    for mode, weight in zip(modes, weights, strict=True):
        u = (z - np.asarray(mode.search.x)[None, :]) @ mode.chol
        log_det = 2.0 * np.sum(np.log(np.diag(mode.chol)))  # log det of the precision
        per_mode.append(
            np.log(weight) - 0.5 * np.sum(u**2, axis=1) + 0.5 * log_det
            - 0.5 * z.shape[1] * np.log(2.0 * np.pi)
        )  # fmt: skip
    return np.asarray(jax.scipy.special.logsumexp(np.stack(per_mode), axis=0))


def pareto_k_threshold(n_draws: int) -> float:
    """Pareto k-hat above which importance sampling with ``n_draws`` draws is unreliable:
    ``min(1 - 1 / log10(n), 0.7)`` (Vehtari et al. 2024; 0.7 from 2,200 draws up)."""
    return float(min(1.0 - 1.0 / np.log10(max(n_draws, 11)), 0.7))


def approximation_pareto_k(log_ratio: np.ndarray) -> float:
    """Pareto k-hat of importance log-ratios ``log p(z) - log q(z)`` at draws from ``q``.

    The diagnostic of Yao, Vehtari, Simpson & Gelman (2018) for an approximate posterior ``q``:
    the tail shape of the ratios that Pareto-smoothed importance sampling would use to correct
    it. Below about 0.7 ``q`` is close enough for its draws to be reweighted; above, the
    posterior has mass (a heavier tail, a ridge, another mode) the approximation misses, and
    its intervals should not be trusted. Computed by arviz-stats' PSIS (the ``azstats``
    accessor's ``psislw``, which takes log-likelihoods of leave-one-out ratios ``1 / lik``, so
    it is given ``-log_ratio``). A small value does not prove the approximation good: ratios
    are only seen where ``q`` draws, so mass far from every mode it found stays unseen.

    References
    ----------
    .. [1] Yao, Vehtari, Simpson & Gelman (2018), "Yes, but Did It Work?: Evaluating
       Variational Inference", ICML.
    .. [2] Vehtari, Simpson, Gelman, Yao & Gabry (2024), "Pareto Smoothed Importance
       Sampling", JMLR 25(72).
    """
    import arviz_stats  # noqa: F401 - registers the azstats accessor
    import xarray as xr

    r = np.asarray(log_ratio, dtype=float)
    if r.size < 10 or not np.all(np.isfinite(r)):
        return float("inf") if r.size >= 10 else float("nan")
    if np.ptp(r) <= 1e-12 * max(1.0, float(np.abs(r).max())):
        return 0.0  # q is p up to a constant: the ratios have no tail (PSIS refuses to fit one)
    _, khat = xr.DataArray(r.max() - r, dims=["draw"]).azstats.psislw(dim="draw")
    return float(khat)


def _mode_searches(
    potential: Callable[[jax.Array], jax.Array],
    x0: np.ndarray,
    max_iter: int,
    polish: bool = True,
) -> tuple[Any, list[Any]]:
    """L-BFGS from each row of ``x0`` (``max_iter`` iterations, :data:`SEARCH_ITERATIONS` by
    default): the L-BFGS result and, per search, its end point (``x``, ``fun``, ``hess``, the
    Hessian symmetrised) or ``None`` where the search failed (non-finite potential). With
    ``polish`` each end point is first polished to a mode by
    :func:`~climb_bayes.inference.point_fit.newton_polish` (which adds ``success``)."""
    res = multistart_lbfgs(potential, x0, max_iter=max_iter)
    hessian = jitted_derivatives(potential)[1]
    out: list[Any] = []
    for x, f in zip(res.all_x, res.all_fun, strict=True):
        if not f < 1e30:
            out.append(None)
        elif polish:
            found = newton_polish(potential, x)
            out.append(found if np.isfinite(found.fun) else None)
        else:
            h = np.asarray(hessian(jnp.asarray(x)))
            out.append(SimpleNamespace(x=np.asarray(x), fun=float(f), hess=0.5 * (h + h.T)))
    return res, out


class _Mode(NamedTuple):
    """A mode of :func:`laplace_posterior`: its Laplace evidence, the polished search that
    reached it (``x``, ``fun``, ``success``, ``hess``), its Hessian's eigenvalues ``w`` and the
    lower Cholesky factor of the floored Hessian (:func:`_precision_cholesky`)."""

    log_evidence: float
    search: Any
    w: np.ndarray
    chol: np.ndarray


def _laplace_modes(ends: list[Any], *, gap: float, radius2: float | None) -> list[_Mode]:
    """The distinct modes among polished end points ``ends`` (labelled by :func:`_mode_labels`
    with ``gap`` and ``radius2``), each at its deepest end point with its Laplace evidence and
    Cholesky factor, sorted by evidence; only those at a mode (``success``) where any is."""
    fun = np.array([float(p.fun) for p in ends])
    # newton_polish returns the symmetrised Hessian
    labels = _mode_labels(
        np.stack([p.x for p in ends]), fun, [p.hess for p in ends], gap=gap, radius2=radius2
    )
    modes = []
    for j in range(labels.max() + 1):
        best = ends[min(np.flatnonzero(labels == j), key=lambda i: fun[i])]
        w, v, w_kept = _floored_eigh(best.hess)
        chol = _precision_cholesky(best.hess, w, v, w_kept)
        modes.append(_Mode(_log_evidence(best.fun, w_kept), best, w, chol))
    # a search that did not end at a mode (saddle, flat floor) has no trustworthy evidence
    if any(m.search.success for m in modes):
        modes = [m for m in modes if m.search.success]
    modes.sort(key=lambda m: -m.log_evidence)
    return modes


def _gaussian_draws(modes: list[_Mode], pick: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """``(n, d)`` draws ``x_j + L_j^-T eps`` of the modes' Gaussians, mode ``pick[i]`` for row
    ``i`` (``x + L^-T eps`` has covariance ``(L L^T)^-1``, the floored precision's inverse)."""
    z = np.empty(eps.shape)
    for j, mode in enumerate(modes):
        sel = pick == j
        step = scipy.linalg.solve_triangular(mode.chol, eps[sel].T, lower=True, trans="T")
        z[sel] = np.asarray(mode.search.x)[None, :] + step.T
    return z


def _neighbour_polishes(
    potential: Callable[[jax.Array], jax.Array], modes: list[_Mode], key: jax.Array
) -> list[Any]:
    """:data:`NEIGHBOUR_POLISHES` Newton polishes from draws of the modes' evidence-weighted
    Gaussian mixture: the minima that lie in the typical sets of the ones found (finite ends)."""
    k_pick, k_eps = jax.random.split(key)
    log_ev = np.array([m.log_evidence for m in modes])
    pick = _systematic_resample(np.exp(log_ev - log_ev.max()), NEIGHBOUR_POLISHES, k_pick)
    eps = np.asarray(jax.random.normal(k_eps, (NEIGHBOUR_POLISHES, modes[0].chol.shape[0])))
    ends = [newton_polish(potential, z) for z in _gaussian_draws(modes, pick, eps)]
    return [p for p in ends if np.isfinite(p.fun)]


def _log_evidence(potential: float, w_kept: np.ndarray) -> float:
    """Laplace estimate of the log posterior mass around a mode, ``-U - log det(H) / 2`` up to
    a constant shared by every mode of one model (``w_kept``: the floored Hessian eigenvalues)."""
    return float(-potential - 0.5 * np.sum(np.log(w_kept)))


def _systematic_resample(weights: np.ndarray, n: int, key: jax.Array) -> np.ndarray:
    """``(n,)`` indices into ``weights`` (non-negative, not necessarily normalised) by systematic
    resampling: index ``i`` is taken ``n w_i / sum(w)`` times, rounded up or down."""
    cdf = np.cumsum(weights / weights.sum())
    u = (float(jax.random.uniform(key)) + np.arange(n)) / n
    return np.minimum(np.searchsorted(cdf, u, side="right"), weights.size - 1)


START_CANDIDATES = 16
"""Laplace draws tried per chain in :func:`mode_starts` (the first in the typical band wins)."""

MODE_GAP = 2.0
"""Potential-energy difference (nats) above which two L-BFGS end points count as different
modes in :func:`mode_starts`."""


class ModeStarts(NamedTuple):
    """Chain starts drawn around the posterior modes L-BFGS reaches from each chain's start.

    Attributes
    ----------
    init_params : dict of str to numpy.ndarray
        ``(chains, ...)`` starts in NUTS's unconstrained coordinates.
    potentials : numpy.ndarray
        ``(chains,)`` potential energy (negative log density, nats) at the mode each chain's
        search reached.
    inverse_mass : numpy.ndarray
        Inverse Hessian of the potential at the best mode, ``(d, d)`` (or its ``(d,)``
        diagonal): NUTS's initial inverse mass matrix.
    modes : int
        Distinct modes the chains' searches reached (potentials more than :data:`MODE_GAP`
        apart, or far apart under the Hessian).
    log_evidence : numpy.ndarray
        ``(chains,)`` Laplace estimate of the log posterior mass around each search's mode,
        ``-U - log det(H) / 2`` up to a shared constant (``-inf`` where the search failed).
    mode_labels : numpy.ndarray
        ``(chains,)`` mode each search reached, numbered from 0 by potential (``-1``: failed).
    """

    init_params: dict[str, np.ndarray]
    potentials: np.ndarray
    inverse_mass: np.ndarray
    modes: int
    log_evidence: np.ndarray | None = None
    mode_labels: np.ndarray | None = None


def _mode_labels(
    x: np.ndarray,
    potentials: np.ndarray,
    precisions: list[np.ndarray | None],
    *,
    gap: float = MODE_GAP,
    radius2: float | None = None,
) -> np.ndarray:
    """Mode of each L-BFGS end point ``x`` ``(n, d)``, numbered from 0 by potential (``-1``
    where the search failed): two are one mode when their potentials are within ``gap``
    (:data:`MODE_GAP`) and their squared Mahalanobis distance under the Hessian at the first
    is at most ``radius2`` (default: inside its typical set, ``d + 3 sqrt(2 d)``)."""
    d = x.shape[1]
    radius2 = d + 3 * np.sqrt(2 * d) if radius2 is None else radius2
    reps: list[int] = []
    labels = np.full(x.shape[0], -1)
    for c in np.argsort(potentials):
        if not potentials[c] < 1e30:
            continue
        for j, r in enumerate(reps):
            if abs(potentials[c] - potentials[r]) <= gap and (
                precisions[r] is None or (x[c] - x[r]) @ precisions[r] @ (x[c] - x[r]) <= radius2
            ):
                labels[c] = j
                break
        else:
            labels[c] = len(reps)
            reps.append(int(c))
    return labels


def mode_starts(
    model: Callable[..., None],
    model_args: tuple,
    init_values: dict[str, Any],
    starts: dict[str, Any],
    *,
    key: jax.Array,
    dense: bool = True,
    max_iter: int = SEARCH_ITERATIONS,
    polish: bool = True,
) -> ModeStarts:
    """Start every NUTS chain from a draw of the Laplace approximation at its own mode.

    From each chain's start (``starts``, unconstrained, leading axis = chains) L-BFGS climbs to a
    mode of the posterior, finished by a Newton polish (:func:`_mode_searches`); the chain
    then starts from a draw of the Gaussian with the inverse Hessian there: the first of
    :data:`START_CANDIDATES` draws whose potential is within the Gaussian's typical band
    (``d/2 + 3 sqrt(d/2)`` nats above the mode, ``d`` parameters; else the mode itself). Chains
    thus begin in the typical set instead of crossing to it during warm-up, and chains that
    reach different modes keep them, so R-hat reports the modes instead of the seed deciding
    which one the fit sees.

    Why each part (measured on the shipped default data, ``climb-bayes fit``'s CLIMB NUTS,
    4 chains x (1000 + 500)): from jittered prior-centre starts one key in seven left a chain
    stuck for good (1023 leapfrog steps per draw, step size 0.001, R-hat 1.30); from plain
    Laplace draws one seed in six did the same, because where the posterior is far from
    Gaussian (a flat Hessian direction) a draw can start 220 nats above the mode; with the
    band, none of 12 seeds did, and sampling took ~30 s instead of ~37 s.

    Parameters
    ----------
    model : callable
        NumPyro model.
    model_args : tuple
        Its positional arguments.
    init_values : dict
        A valid point (constrained values of the latent sites) to set the model up.
    starts : dict
        ``(chains, ...)`` starting values per latent site, unconstrained.
    key : jax.Array
        PRNG key of the draws.
    dense : bool
        Return the full inverse Hessian as the mass matrix (else its diagonal).
    max_iter : int
        L-BFGS iterations per chain before its Newton polish.
    polish : bool
        Polish each search's end point (:func:`_mode_searches`). ``False``: the L-BFGS end
        points and the Hessians there, as before 2026-11-29 (give ``max_iter`` = 3000 then).
        The generic laws' NUTS starts use that. Measured on the DML at 5Mix-410M (2 chains
        x (500 + 500), ``benchmarks/real_data.py``'s settings), seeds 0-9: R-hat above 1.1
        (chains in different places, bulk ESS 2-4) on 6 of 10 seeds with polished starts and
        on 2 of 10 without (1.51, 1.57). Both reach the same mode (potential -1058.68; the
        chains' starts agree to ~1e-3 in every coordinate), so the difference may be chance
        (Fisher's exact test p = 0.17): that posterior keeps chains apart whichever start
        they get, and the convergence gate flags it. CLIMB's NUTS was as good or better with
        polished starts (default data).

    Returns
    -------
    ModeStarts

    References
    ----------
    .. [1] Tierney & Kadane (1986), "Accurate Approximations for Posterior Moments and Marginal
       Densities", JASA 81(393).
    .. [2] Zhang, Carpenter, Gelman & Vehtari (2022), "Pathfinder: Parallel quasi-Newton
       variational inference", JMLR 23 (quasi-Newton paths to the typical set as MCMC starts).
    """
    chains = next(iter(starts.values())).shape[0]
    k_init, k_draw = jax.random.split(key)
    _, z0, unravel, potential = flat_model(model, model_args, init_values, k_init)
    x0 = _ravel_starts(starts, z0.size)  # already unconstrained

    _, polished = _mode_searches(potential, x0, max_iter, polish)
    fun = np.array([p.fun if p is not None else 1e30 for p in polished], dtype=float)
    modes_x = np.stack([p.x if p is not None else x for p, x in zip(polished, x0, strict=True)])
    potentials = potential.batch
    d = x0.shape[1]
    band = 0.5 * d + 3.0 * np.sqrt(0.5 * d)  # 3 sd above the mean excess of a Gaussian
    keys = jax.random.split(k_draw, chains)
    out, covs, precisions = x0.copy(), [], []
    log_evidence = np.full(chains, -np.inf)  # -U - log det(H) / 2 at each search's mode
    for c, search in enumerate(polished):
        if search is None:  # the search failed: keep the chain's own start
            covs.append(None)
            precisions.append(None)
            continue
        precisions.append(search.hess)  # symmetrised by newton_polish
        _, v, w_kept = _floored_eigh(search.hess)
        log_evidence[c] = _log_evidence(fun[c], w_kept)
        cov = (v / w_kept[None, :]) @ v.T
        cov = 0.5 * (cov + cov.T)
        covs.append(cov)
        eps = np.asarray(jax.random.normal(keys[c], (START_CANDIDATES, d)))
        cand = modes_x[c][None, :] + eps @ np.linalg.cholesky(cov).T
        excess = np.asarray(potentials(jnp.asarray(cand))) - fun[c]
        excess = np.where(np.isfinite(excess), excess, np.inf)
        inside = np.flatnonzero(excess <= band)
        out[c] = cand[inside[0]] if inside.size else modes_x[c]
    labels = _mode_labels(modes_x, fun, precisions)
    best = int(np.argmin(fun))
    inverse_mass = covs[best] if covs[best] is not None else np.eye(z0.size)
    init = jax.vmap(unravel)(jnp.asarray(out))
    return ModeStarts(
        {k: np.asarray(v) for k, v in init.items()},
        fun,
        inverse_mass if dense else np.diag(inverse_mass).copy(),
        int(labels.max()) + 1,
        log_evidence,
        labels,
    )


def evidence_picks(found: ModeStarts, chains: int, key: jax.Array) -> np.ndarray:
    """Which search's start each of ``chains`` chains takes: modes in proportion to their
    Laplace evidence, systematic resampling.

    A mode's weight is ``exp(log_evidence)`` of its best search, shared equally among the
    searches that reached it, so a mode found by many searches gains nothing and searches of
    one mode are taken in turn (with one mode and as many searches as chains, every chain keeps
    its own search). Where one mode holds nearly all the mass (18 nats apart: a factor 6e7) no
    chain starts in the other, where it would sit in a region of negligible mass; modes of
    similar evidence each get chains, so R-hat still sees them.

    Parameters
    ----------
    found : ModeStarts
        The searches (:func:`mode_starts`).
    chains : int
        Chains to start.
    key : jax.Array
        PRNG key of the resampling offset.

    Returns
    -------
    numpy.ndarray
        ``(chains,)`` search indices.

    References
    ----------
    .. [1] Zhang, Carpenter, Gelman & Vehtari (2022), "Pathfinder: Parallel quasi-Newton
       variational inference", JMLR 23 (importance resampling of several paths' approximations).
    """
    labels = np.asarray(found.mode_labels)
    log_ev = np.asarray(found.log_evidence, dtype=float)
    ok = labels >= 0
    if not ok.any():
        return np.arange(chains) % labels.size
    best = np.full(labels.max() + 1, -np.inf)
    np.maximum.at(best, labels[ok], log_ev[ok])
    count = np.bincount(labels[ok], minlength=best.size)
    mode_of = np.maximum(labels, 0)
    weight = np.where(ok, np.exp(best[mode_of] - best.max()) / count[mode_of], 0.0)
    return _systematic_resample(weight, chains, key)


def _floored_eigh(hess: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-decomposition ``(w, v, w_kept)`` of a symmetrised Hessian, ``w_kept`` with the
    eigenvalues floored at :data:`EIGEN_FLOOR` times the largest (at least 1), so that
    ``v diag(1 / w_kept) v^T`` is a positive-definite covariance."""
    hess = 0.5 * (hess + hess.T)
    w, v = np.linalg.eigh(hess)
    return w, v, np.maximum(w, EIGEN_FLOOR * max(float(np.abs(w).max()), 1.0))


def _precision_cholesky(
    hess: np.ndarray, w: np.ndarray, v: np.ndarray, w_kept: np.ndarray
) -> np.ndarray:
    """Lower Cholesky factor of the floored precision ``v diag(w_kept) v^T``, built as the
    symmetrised Hessian plus ``(w_kept - w) v v^T`` over the floored directions only.

    Draws ``x + L^-T eps`` through it are a continuous function of the Hessian. Draws through
    the eigenvectors (``x + v diag(w_kept)^-1/2 eps``, used until 2026-12-08) were not: an
    eigenvector's sign, and the basis of a (near-)repeated eigenvalue, follow rounding. Measured
    on the default data's two leave-future-out folds (Isolated and MSL, 400 draws each) across
    a code change that moved the potential by ~1e-12: through the eigenvectors single draws
    moved by up to 12 sd (means by 0.14 sd), through this factor by at most 3e-6 sd, except
    where the mode search itself ended elsewhere (docs/model.md, "Laplace draws through a
    Cholesky factor").
    """
    hess = 0.5 * (hess + hess.T)
    lift = w_kept - w
    floored = lift > 0
    precision = hess + (v[:, floored] * lift[floored][None, :]) @ v[:, floored].T
    return np.linalg.cholesky(0.5 * (precision + precision.T))
