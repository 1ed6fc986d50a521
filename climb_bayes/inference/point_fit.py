"""Point fit: multi-start L-BFGS with JAX gradients on the Huber loss of log-loss.

This is the fitting practice of Hoffmann et al. (2022) and of the Chinchilla replication (the
CLIMB paper reports a Huber loss as an evaluation metric but gives neither its delta nor how it
fitted the law): minimise
``sum_n Huber_delta(log L_pred - log L_obs)`` over unconstrained parameters, from several
starts, keeping the best; each start is first refined on the least-squares loss of the same
residuals (a pre-fit). Under a flat prior and a Huber-density likelihood this is the MAP
estimate, hence ``--method map`` on the command line. :func:`multistart_lbfgs` is generic: the
other laws' :func:`climb_bayes.laws.base.fit_map` runs on it too.

References
----------
.. [1] Hoffmann et al. (2022), Appendix D.2 (Huber loss on log-loss, L-BFGS, grid of starts).
.. [2] Besiroglu et al. (2024), "Chinchilla Scaling: A replication attempt" (delta = 1e-3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from climb_bayes.model.climb_model import ModelData, pair_indices
from climb_bayes.model.law import log_loss
from climb_bayes.model.observation import LEARNED_DF_START
from climb_bayes.model.priors import Priors

__all__ = [
    "HUBER_DELTA",
    "huber",
    "OptimResult",
    "multistart_lbfgs",
    "NEWTON_DECREMENT_TOL",
    "newton_polish",
    "jitted_derivatives",
    "HESSIAN_STEP",
    "gradient_difference_hessian",
    "mad_sigma",
    "run_noise_split",
    "PointFit",
    "point_fit",
    "FAR_FROM_PRIOR",
    "coordinate_labels",
    "far_from_prior",
    "far_summary",
]

HUBER_DELTA = 1e-3


def huber(residual: jax.Array, delta: float = HUBER_DELTA) -> jax.Array:
    """Huber loss ``0.5 r^2`` for ``|r| <= delta``, ``delta (|r| - delta / 2)`` beyond.

    References
    ----------
    .. [1] Huber (1964), "Robust Estimation of a Location Parameter".
    """
    a = jnp.abs(residual)
    return jnp.where(a <= delta, 0.5 * residual**2, delta * (a - 0.5 * delta))


class OptimResult(NamedTuple):
    """Best of several L-BFGS runs (``x``, ``fun``) and where every run ended."""

    x: np.ndarray
    fun: float
    n_starts: int
    n_converged: int
    all_fun: np.ndarray
    all_x: np.ndarray


def jitted_derivatives(fn: Callable[[jax.Array], jax.Array]) -> tuple[Callable, Callable]:
    """``fn``'s jitted value-and-gradient and Hessian: its own ``fn.derivatives`` where it
    carries them (:class:`~climb_bayes.inference.argument_potential.ArgumentPotential`, whose
    programs take the data as arguments), else :func:`_closure_derivatives`."""
    own = getattr(fn, "derivatives", None)
    return own if own is not None else _closure_derivatives(fn)


@functools.lru_cache(maxsize=8)
def _closure_derivatives(fn: Callable[[jax.Array], jax.Array]) -> tuple[Callable, Callable]:
    """``fn``'s jitted value-and-gradient and Hessian, one pair per function object: the
    searches and polishes of one objective (a Laplace fit's, a multi-start fit's) compile them
    once instead of once per call (each new ``jax.jit`` wrapper traces and compiles again:
    ~1-2 s per CLIMB potential on 2 cores).

    The Hessian is forward-mode differentiation of the compiled gradient, ``jacfwd(grad)``,
    rather than ``jax.hessian(fn)``: the same matrix (``jax.hessian`` is ``jacfwd(jacrev)``;
    the two differ by 4e-17 of the largest entry on CLIMB's potential of the default data), but
    JAX differentiates the gradient's already-traced program instead of tracing the NumPyro
    model again through both transformations. Measured on a default ``climb-bayes fit`` (2-core
    AMD EPYC, warm compilation cache, ``jax.monitoring`` durations): tracing the Newton
    polishes' Hessians took 3.9 s of 10.4 s of tracing over 12 Laplace fits before, ~0 after.
    """
    value_and_grad = jax.jit(jax.value_and_grad(fn))
    return value_and_grad, jax.jit(jax.jacfwd(lambda x: value_and_grad(x)[1]))


def _scipy_fg(fn: Callable[[jax.Array], jax.Array]) -> Callable[[np.ndarray], tuple]:
    """Compiled ``x -> (value, gradient)`` for scipy (a non-finite value becomes 1e30 with a
    zero gradient, so the line search backs off)."""
    value_and_grad = jitted_derivatives(fn)[0]

    def fg(x: np.ndarray) -> tuple[float, np.ndarray]:
        # NumPy in, one device_get out: scipy calls this ~3e4 times per CLIMB point fit; the
        # jnp.asarray of x alone took 4.4 of its 20.4 s (cProfile, default data), 18.1 s now
        v, g = jax.device_get(value_and_grad(x))
        v = float(v)
        if not np.isfinite(v):
            return 1e30, np.zeros_like(x)
        return v, np.asarray(g, dtype=float)

    return fg


def multistart_lbfgs(
    objective: Callable[[jax.Array], jax.Array],
    starts: Sequence[np.ndarray] | np.ndarray,
    *,
    max_iter: int = 2000,
    tol: float = 1e-12,
    gtol: float = 1e-10,
    prefit: Callable[[jax.Array], jax.Array] | None = None,
) -> OptimResult:
    """Minimise a JAX scalar function from each start with scipy's L-BFGS-B; keep the best.

    Parameters
    ----------
    objective : callable
        ``x -> scalar``, differentiable with JAX (compiled once here).
    starts : array (n_starts, n_params)
        Starting points.
    max_iter, tol, gtol : int, float, float
        L-BFGS-B ``maxiter``, ``ftol`` and ``gtol`` of the run on ``objective``.
    prefit : callable, optional
        A smooth stand-in for ``objective`` (e.g. least squares on the residuals whose Huber
        loss is ``objective``), minimised first from each start; ``objective`` is then
        minimised from where it stopped. L-BFGS moves fast on a smooth objective, whereas a
        near-L1 Huber loss (``delta = 1e-3``) converges slowly from far away. Same settings.

    Returns
    -------
    OptimResult
        The best run; ``n_converged`` counts the runs on ``objective`` that met the tolerances.
        Deterministic for given starts.
    """
    fg = _scipy_fg(objective)
    pre_fg = None if prefit is None else _scipy_fg(prefit)
    options = {"maxiter": max_iter, "ftol": tol, "gtol": gtol}

    def lbfgs(f: Callable, x: np.ndarray) -> scipy.optimize.OptimizeResult:
        return scipy.optimize.minimize(f, x, jac=True, method="L-BFGS-B", options=options)

    best, funs, xs, converged = None, [], [], 0
    for x0 in np.atleast_2d(np.asarray(starts, dtype=float)):
        if pre_fg is not None:
            x0 = lbfgs(pre_fg, x0).x
        res = lbfgs(fg, x0)
        funs.append(float(res.fun))
        xs.append(np.asarray(res.x))
        converged += bool(res.success)
        if best is None or res.fun < best.fun:
            best = res
    return OptimResult(
        np.asarray(best.x), float(best.fun), len(funs), converged, np.array(funs), np.stack(xs)
    )


NEWTON_DECREMENT_TOL = 1e-6
"""A mode search counts as converged when a Newton step would lower the objective by less than
this (nats for a potential energy)."""


def newton_polish(
    objective: Callable[[jax.Array], jax.Array],
    x0: np.ndarray,
    *,
    max_iter: int = 200,
    gtol: float = 1e-6,
) -> scipy.optimize.OptimizeResult:
    """Finish a minimisation with an exact-Hessian trust-region Newton method from ``x0``.

    L-BFGS builds its curvature from a few recent gradients and crawls along valleys whose
    curvature spans many orders of magnitude; a trust region on the exact Hessian (scipy's
    ``trust-exact``, Moré & Sorensen's subproblem solver, which also escapes saddle points)
    converges quadratically once near a mode. Measured on a CLIMB posterior of the Data Mixing
    Laws RedPajama 70M runs (7 domains, 147 unconstrained parameters, Hessian eigenvalues from
    ~2 to 2e7): after L-BFGS's 3,000 iterations the gradient was still 165 and the Hessian had
    two negative eigenvalues (a Laplace approximation there puts sd 2.5 on a transfer); 20,000
    L-BFGS iterations reached the mode, this polish does it in tens of Hessian evaluations.

    Parameters
    ----------
    objective : callable
        ``x -> scalar``, twice differentiable with JAX (value, gradient and Hessian compiled
        here).
    x0 : numpy.ndarray
        ``(n,)`` start, e.g. where L-BFGS stopped.
    max_iter : int
        Trust-region iterations.
    gtol : float
        Gradient-norm tolerance.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x``, ``fun``, ``success``, ``hess``; never worse than ``x0`` (``x0`` is returned when
        the polish fails to improve on it). ``success`` means "at a mode": the Hessian is finite
        and positive definite and the Newton decrement is below :data:`NEWTON_DECREMENT_TOL`.
        ``hess`` is the (symmetrised) Hessian at ``x``.

    References
    ----------
    .. [1] Moré & Sorensen (1983), "Computing a Trust Region Step", SIAM J. Sci. Stat. Comput.
       4(3).
    .. [2] Nocedal & Wright (2006), "Numerical Optimization", 2nd ed., ch. 4.
    """
    fg = _scipy_fg(objective)
    hessian = jitted_derivatives(objective)[1]

    def hess(x: np.ndarray) -> np.ndarray:
        h = np.asarray(jax.device_get(hessian(x)), dtype=float)
        return 0.5 * (h + h.T) if np.all(np.isfinite(h)) else np.eye(x.size)

    x0 = np.asarray(x0, dtype=float)
    f0 = fg(x0)[0]
    res = scipy.optimize.minimize(
        fg, x0, jac=True, hess=hess, method="trust-exact",
        options={"maxiter": max_iter, "gtol": gtol},
    )  # fmt: skip
    if not res.fun <= f0:
        res.x, res.fun = x0, f0
    # at the mode when the Newton decrement g' H^-1 g / 2 (the potential a Newton step would
    # still gain, nats) is negligible and H is positive definite; trust-exact itself reports a
    # failure when it starts at the mode and cannot improve
    g = fg(res.x)[1]
    h = np.asarray(jax.device_get(hessian(res.x)), dtype=float)
    res.hess = 0.5 * (h + h.T)
    try:
        root = np.linalg.cholesky(res.hess)
        step = np.linalg.solve(root, g)
        res.success = bool(np.all(np.isfinite(h)) and 0.5 * step @ step <= NEWTON_DECREMENT_TOL)
    except np.linalg.LinAlgError:
        res.success = False
    return res


HESSIAN_STEP = 1e-6
"""Step (unconstrained units) of the central differences of the gradient that give a
robustness refit's Hessian (:func:`gradient_difference_hessian`)."""


def gradient_difference_hessian(
    grad: Callable[[np.ndarray], jax.Array], x: np.ndarray, step: float = HESSIAN_STEP
) -> np.ndarray:
    """Symmetric Hessian at ``x`` from central differences of a compiled gradient.

    ``H[:, j] = (g(x + h e_j) - g(x - h e_j)) / 2h``, symmetrised. Why not ``jax.hessian``: a
    robustness refit group's objective closes over its priors, so every group compiled its own
    Hessian program, 3.0-6.5 s each on a 2-core AMD EPYC machine against 0.5-3 s for its
    value-and-gradient (``JAX_LOG_COMPILES``, the prior study of
    tests/evaluation/test_robustness.py), to be evaluated once or a few times; the ``2 n`` calls
    of the gradient L-BFGS has already compiled cost milliseconds. On the 3-language simulated
    fit of the tests (33 parameters, eigenvalues 1.06 to 8.1e5) the largest difference from
    ``jax.hessian`` at the mode was 1.6e-3 (2e-9 of the largest eigenvalue) with ``h = 1e-6``;
    it falls as ``h^2`` down to there (1.6e-1 at 1e-5, 16 at 1e-4) and rounding takes over below
    (4.4e-4 at 1e-7).

    Parameters
    ----------
    grad : callable
        ``x -> gradient`` at a flat unconstrained point, shape ``(n,)``.
    x : numpy.ndarray
        ``(n,)`` point, e.g. a refit's mode.
    step : float
        Difference step ``h`` in the units of ``x``.

    Returns
    -------
    numpy.ndarray
        ``(n, n)`` symmetric Hessian.

    References
    ----------
    .. [1] Nocedal & Wright (2006), *Numerical Optimization*, 2nd ed., Sec. 8.1 (approximating
       the Hessian by differences of gradients).
    """
    x = np.asarray(x, dtype=float)
    n = x.size
    h = np.empty((n, n))
    for j in range(n):
        e = np.zeros(n)
        e[j] = step
        up, down = jax.device_get((grad(x + e), grad(x - e)))
        h[:, j] = (np.asarray(up, dtype=float) - np.asarray(down, dtype=float)) / (2 * step)
    return 0.5 * (h + h.T)


def mad_sigma(resid: np.ndarray, group: np.ndarray, m: int) -> np.ndarray:
    """``(m,)`` robust noise sd per group: 1.4826 x the median absolute deviation of the
    residuals of that group (at least 1e-4; 1e-4 for a group without residuals)."""
    sigma = np.empty(m)
    for g in range(m):
        rg = resid[group == g]
        mad = 1.4826 * np.median(np.abs(rg - np.median(rg))) if rg.size else 0.0
        sigma[g] = max(mad, 1e-4)
    return sigma


def run_noise_split(
    resid: np.ndarray, language: np.ndarray, run_group: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray]:
    """Robust within-run and between-run noise sds per language, ``((m,), (m,))``.

    ``resid`` are log-loss residuals, ``run_group`` the (run, language) group of each (see
    :class:`climb_bayes.model.observation.GroupedNoise`). Within: MAD of the residuals around their
    group means (times ``sqrt(n / (n - 1))`` for the mean taken out, ``n`` the median group
    size). Between: MAD of the group means with the within part of their variance taken out.
    Both at least 1e-4.
    """
    resid = np.asarray(resid, dtype=float)
    run_group = np.asarray(run_group, dtype=np.int64)
    counts = np.bincount(run_group)
    means = np.bincount(run_group, weights=resid) / np.maximum(counts, 1)
    within_resid = resid - means[run_group]
    group_language = np.zeros(counts.size, dtype=np.int64)
    group_language[run_group] = language
    within, between = np.full(m, 1e-4), np.full(m, 1e-4)
    for i in range(m):
        sel = language == i
        if not np.any(sel):
            continue
        n = float(np.median(counts[np.unique(run_group[sel])]))
        if n > 1:
            within[i] = max(mad_sigma(within_resid[sel], np.zeros(sel.sum()), 1)[0], 1e-4)
            within[i] *= np.sqrt(n / (n - 1.0))
        gm = means[(group_language == i) & (counts > 0)]
        var = mad_sigma(gm, np.zeros(gm.size), 1)[0] ** 2 - (within[i] ** 2 / n if n > 1 else 0)
        between[i] = max(np.sqrt(max(var, 0.0)), 1e-4)
    return within, between


class PointFit(NamedTuple):
    """Point estimate of the CLIMB law in reference units (budgets / ``d_ref``).

    ``values`` maps the model's latent site names (``log_A``, ``beta``, ``log_E``,
    ``b_offdiag``, ``kappa_offdiag``, ``eta``, ``sigma``) to arrays, so it can seed NUTS or be
    stored like a one-draw posterior. ``sigma`` and ``sigma_run`` are robust (MAD) estimates of
    each language's within-run and between-run residual spread on log-loss
    (:func:`run_noise_split`).
    """

    values: dict[str, np.ndarray]
    objective: float
    n_starts: int
    n_converged: int
    residuals: np.ndarray
    prior_z: np.ndarray | None = None
    """Each searched coordinate's distance from the prior centre in prior sds (the order of
    :func:`coordinate_labels`); :func:`far_from_prior` reads it."""


class _Coordinates(NamedTuple):
    """One block of the point fit's search vector: the model site it sets, the label of its
    coordinates, whether it has one coordinate per language or per ordered pair, whether it is
    searched on the log scale, and the :class:`Priors` field that gives its prior spread there."""

    site: str
    label: str
    per_pair: bool
    log_scale: bool
    spread: str


_LAYOUT = (
    _Coordinates("log_A", "log_A", False, False, "reducible_scale"),
    _Coordinates("beta", "log_beta", False, True, "beta_log_sd"),
    _Coordinates("log_E", "log_E", False, False, "irreducible_scale"),
    _Coordinates("b_offdiag", "b", True, False, "transfer_scale"),
    _Coordinates("kappa_offdiag", "kappa", True, False, "decay_scale"),
    _Coordinates("eta", "log_eta", False, True, "eta_log_sd"),
)
"""The search vector, block by block: :func:`_unpack`, :func:`_pack`, the starts' spread and
:func:`coordinate_labels` all read this one table."""


def _sizes(m: int) -> list[int]:
    return [m * (m - 1) if c.per_pair else m for c in _LAYOUT]


def _unpack(theta: jax.Array, m: int) -> dict[str, jax.Array]:
    s = np.cumsum([0, *_sizes(m)])
    return {
        c.site: jnp.exp(theta[a:b]) if c.log_scale else theta[a:b]
        for c, a, b in zip(_LAYOUT, s[:-1], s[1:], strict=True)
    }


def _pack(v: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.log(v[c.site]) if c.log_scale else v[c.site] for c in _LAYOUT])


def _prior_spread(priors: Priors, m: int) -> np.ndarray:
    """Each search coordinate's prior sd (the starts' spread and :attr:`PointFit.prior_z`)."""
    return np.concatenate(
        [np.full(n, getattr(priors, c.spread)) for c, n in zip(_LAYOUT, _sizes(m), strict=True)]
    )


def predicted_log_loss(data: ModelData, values: dict[str, jax.Array]) -> jax.Array:
    """Predicted log-loss of every observation for one parameter set (reference units)."""
    m = data.point_r.shape[-1]
    src, tgt = pair_indices(m)
    b = jnp.zeros((m, m)).at[src, tgt].set(values["b_offdiag"])
    kappa = jnp.zeros((m, m)).at[src, tgt].set(values["kappa_offdiag"])
    pred = log_loss(
        data.point_r,
        data.point_d,
        values["log_A"],
        values["beta"],
        values["log_E"],
        b,
        kappa,
        values["eta"],
    )
    return pred[data.obs_point, data.obs_language]


def point_fit(
    data: ModelData,
    priors: Priors | None = None,
    *,
    key: jax.Array | None = None,
    n_starts: int = 8,
    delta: float = HUBER_DELTA,
    ridge: float = 0.0,
    max_iter: int = 2000,
    prefit: bool = True,
) -> PointFit:
    """Multi-start L-BFGS fit of the CLIMB law on the Huber loss of log-loss.

    Parameters
    ----------
    data : ModelData
        Observations in reference units.
    priors : Priors, optional
        Only used to place the random starts (prior centres, half the prior spread).
    key : jax.Array, optional
        PRNG key for the random starts (``PRNGKey(0)`` by default).
    n_starts : int
        Number of starts; the first is the prior centre with no transfer.
    delta : float
        Huber threshold on log-loss residuals (1e-3, as in the Chinchilla replication).
    ridge : float
        Optional L2 penalty on the transfer parameters (0: the paper's plain Huber fit).
    max_iter : int
        L-BFGS iterations per start and stage (pre-fit, then Huber).
    prefit : bool
        Refine each start on the least-squares loss first (:func:`multistart_lbfgs`). Without
        a ridge the Huber objective often has no finite minimiser (a language's ``E`` can
        drift to 0 while its transfer terms grow, improving the objective ever more slowly),
        so starts tend to stop at ``max_iter``; the pre-fit ends lower within it.

    Returns
    -------
    PointFit

    References
    ----------
    .. [1] Hoffmann et al. (2022), Appendix D.2.
    .. [2] Besiroglu et al. (2024).
    """
    priors = priors or Priors()
    key = jax.random.PRNGKey(0) if key is None else key
    m = data.point_r.shape[-1]
    p = m * (m - 1)
    y = jnp.asarray(data.obs_log_loss)

    def residual_and_penalty(theta: jax.Array) -> tuple[jax.Array, jax.Array]:
        v = _unpack(theta, m)
        pen = ridge * (jnp.sum(v["b_offdiag"] ** 2) + jnp.sum(v["kappa_offdiag"] ** 2))
        return predicted_log_loss(data, v) - y, pen

    def objective(theta: jax.Array) -> jax.Array:
        r, pen = residual_and_penalty(theta)
        return jnp.sum(huber(r, delta)) + pen

    def least_squares(theta: jax.Array) -> jax.Array:
        r, pen = residual_and_penalty(theta)
        return 0.5 * jnp.sum(r**2) + pen

    centre = {
        "log_A": np.asarray(data.reducible_loc, float),
        "beta": np.full(m, priors.beta_median),
        "log_E": np.asarray(data.irreducible_loc, float),
        "b_offdiag": np.zeros(p),
        "kappa_offdiag": np.zeros(p),
        "eta": np.full(m, priors.eta_median),
    }
    x0 = _pack(centre)
    spread = _prior_spread(priors, m)
    noise = np.asarray(jax.random.normal(key, (max(n_starts - 1, 0), x0.size)))
    starts = np.vstack([x0[None], x0 + 0.5 * spread * noise])
    res = multistart_lbfgs(
        objective, starts, max_iter=max_iter, prefit=least_squares if prefit else None
    )
    values = {k: np.asarray(v) for k, v in _unpack(jnp.asarray(res.x), m).items()}
    resid = np.asarray(predicted_log_loss(data, values)) - np.asarray(y)
    if data.obs_group is None or not priors.run_effect:
        values["sigma"] = mad_sigma(resid, data.obs_language, m)
        values["sigma_run"] = np.full(m, 1e-4)
    else:
        values["sigma"], values["sigma_run"] = run_noise_split(
            resid, data.obs_language, data.obs_group, m
        )
    if priors.learned_df:  # not estimated by the point fit: the prior's mode (NUTS starts)
        values["df"] = np.full(m, LEARNED_DF_START)
    prior_z = (np.asarray(res.x) - x0) / spread
    return PointFit(values, res.fun, res.n_starts, res.n_converged, resid, prior_z)


FAR_FROM_PRIOR = 10.0
"""Prior sds from the prior centre beyond which :func:`far_from_prior` reports a point-fit
coordinate. Nothing a prior allows lies there (a Normal puts 1.5e-23 of its mass beyond 10 sd):
a coordinate so far out is where L-BFGS stopped on a ray along which the Huber loss keeps
falling, i.e. the objective has no finite minimiser. Measured on the shipped default data
(2026-12-01): the best of the 8 starts ended with every ``E_i`` at 1e-71..1e-119 (``log E``
160-270 prior sds out) and transfers ``b`` of -17..-96 tokens per token (35-190 sds); the starts'
objectives spanned 0.009-0.041 and their holdout MREs 3.9-12.2%, and which start won changed
with the machine (holdout MRE 3.45% on the machines of 2026-11-26 to 11-29, 4.48% on an AVX-512
one with a fresh install). On healthy fits the estimate stays within 2-9 prior sds (a simulated
5-language world, the 2024 default table, the RedPajama 70M/410M and 5Mix-410M fit splits);
the 5Mix-70M fit split is flagged (a transfer of +12.6 tokens per token, 25 sds)."""


def coordinate_labels(languages: Sequence[str]) -> list[str]:
    """Labels of the point fit's search coordinates (``log_A[en]``, ``b[en->de]``, ...), in
    the order of :class:`PointFit`'s ``prior_z``."""
    from climb_bayes.model.climb_model import pair_labels

    names = {False: list(languages), True: pair_labels(list(languages))}
    return [f"{c.label}[{name}]" for c in _LAYOUT for name in names[c.per_pair]]


def far_from_prior(
    prior_z: np.ndarray, languages: Sequence[str], limit: float = FAR_FROM_PRIOR
) -> str:
    """One line naming the point-fit coordinates more than ``limit`` prior sds from the prior
    centre (the worst three, with their distances); ``""`` when there are none.

    Examples
    --------
    >>> import numpy as np
    >>> z = np.zeros(12)  # two languages: 3 x 2 per language, 2 + 2 pairs, 2 eta
    >>> z[5] = -163.0
    >>> far_from_prior(z, ["en", "de"])
    '1 of 12 coordinates more than 10 prior sds from the prior centre (log_E[de] -163)'
    """
    return far_summary(prior_z, coordinate_labels(languages), limit)


def far_summary(prior_z: np.ndarray, labels: Sequence[str], limit: float = FAR_FROM_PRIOR) -> str:
    """:func:`far_from_prior` for any labelled coordinates (every law's point fit)."""
    z = np.asarray(prior_z, dtype=float)
    far = np.flatnonzero(~(np.abs(z) <= limit))
    if far.size == 0:
        return ""
    worst = far[np.argsort(-np.abs(np.nan_to_num(z[far], nan=np.inf)))][:3]
    shown = ", ".join(f"{labels[i]} {z[i]:+.0f}" for i in worst)
    return (
        f"{far.size} of {z.size} coordinates more than {limit:g} prior sds from the prior "
        f"centre ({shown})"
    )
