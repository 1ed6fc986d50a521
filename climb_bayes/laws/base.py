"""The interface every mixture law implements, and generic MAP / NUTS fitting of any law.

A *law* predicts the validation loss of each group (language or domain) ``i`` from the mixture
``r`` (shares of the training budget, on the simplex) and the budget ``D``. To add one, write a
module with a frozen dataclass subclassing :class:`Law` that defines (its fields hashable --
tuples, not lists or arrays: a law keys its compiled programs, :func:`predict_draws`)

* ``name`` (class attribute) and ``zero_share_ok`` (can it predict the loss of a group that got
  no training data, ``r_i = 0``?);
* :meth:`Law.param_specs` -- parameter names, shapes and constraints for ``m`` groups;
* :meth:`Law.log_loss` -- a pure ``jax.numpy`` function of the parameters, ``r`` and ``d``
  (budget in reference units) returning ``log L`` for every group;
* :meth:`Law.init` -- a starting point derived from the data;
* :meth:`Law.priors` -- NumPyro distributions of the parameters (used by NUTS);

and register it in :mod:`climb_bayes.laws.registry`. :func:`fit_map` (multi-start L-BFGS on the
Huber loss of log-loss) and :func:`fit_nuts` then work unchanged; a law may override
:meth:`Law.fit` (CLIMB does, to reuse :func:`climb_bayes.inference.fitting.fit_runs`). See
``docs/laws.md``.

Units
-----
Losses in nats/token; ``d = tokens / d_ref`` where ``d_ref`` is a power of ten near the
geometric mean of the fitted budgets (:func:`climb_bayes.model.climb_model.reference_budget`), so
budget parameters are O(1). Noise ``sigma`` is on log-loss.

References
----------
.. [1] Hoffmann et al. (2022), Appendix D.2 (Huber fit of log-loss with L-BFGS).
.. [2] Besiroglu et al. (2024), "Chinchilla Scaling: A replication attempt" (delta = 1e-3).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from climb_bayes.data.observations import Observations, budget_range
from climb_bayes.data.padding import PaddedShape, pad_rows, padding_mask
from climb_bayes.errors import ClimbError
from climb_bayes.inference.diagnostics import Diagnostics, compute_diagnostics
from climb_bayes.inference.laplace import ModeStarts, evidence_picks, mode_starts
from climb_bayes.inference.nuts import (
    FIT_SAMPLER,
    NutsConfig,
    chain_init_values,
    nuts_mcmc,
    site_normals,
)
from climb_bayes.inference.point_fit import (
    HUBER_DELTA,
    far_summary,
    huber,
    mad_sigma,
    multistart_lbfgs,
    run_noise_split,
)
from climb_bayes.model.climb_model import reference_budget
from climb_bayes.model.discrepancy import Discrepancy
from climb_bayes.model.observation import (
    LEARNED_DF_START,
    GroupedNoise,
    KeyedStudentT,
    df_prior,
    group_count,
    identifiable_noise,
)
from climb_bayes.model.power_coordinates import power_coordinates, sample_power_law
from climb_bayes.model.priors import Priors
from climb_bayes.runtime import release_compiled_programs

__all__ = [
    "ParamSpec",
    "Law",
    "LawFit",
    "FitOptions",
    "fit_map",
    "fit_nuts",
    "fit_laplace",
    "predict_draws",
    "likelihood_df",
    "check_groups",
]

Params = Mapping[str, jax.Array]

_GTOL = 1e-5
"""L-BFGS-B projected-gradient tolerance of :func:`fit_map` (scipy's default; the CLIMB point
fit uses a tighter one, at many more iterations)."""
LAW_MAX_TREE_DEPTH = 10
"""Tree-depth limit of :func:`fit_nuts` (NumPyro's default; diagnostics count draws at it)."""


# --------------------------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParamSpec:
    """Shape and constraint of one parameter.

    Attributes
    ----------
    shape : tuple of int
        Array shape for the given number of groups.
    positive : bool
        Constrained to ``> 0`` (optimised on its log).
    spread : float
        Scale of the random perturbation of the unconstrained value for extra L-BFGS starts.
    """

    shape: tuple[int, ...]
    positive: bool = False
    spread: float = 0.5


@dataclass(frozen=True)
class FitOptions:
    """Settings shared by every law's fit.

    Attributes
    ----------
    seed : int
        Seed of the random starts and of NUTS.
    n_starts : int
        L-BFGS starts of MAP fits.
    max_iter : int
        L-BFGS iterations per start and stage (least-squares pre-fit, then Huber) of generic
        MAP fits; CLIMB's point fit uses its own settings.
    delta : float
        Huber threshold on log-loss residuals.
    chains, warmup, samples : int
        NUTS settings (``samples`` is the total kept over all chains).
    target_accept : float or None
        NUTS target acceptance of every law (0.9 left 27 divergent transitions in CLIMB's RegMix
        fit, 0.95 two, docs/model.md 'One budget'); ``None``: each law's own
        (:attr:`Law.nuts_target_accept`, what ``climb-bayes fit`` uses).
    priors : Priors
        CLIMB priors; other laws take their likelihood, Student-t df and noise scale from it.
    pad_to : PaddedShape or None
        Laplace fits pad their data to this shape, the padding masked out
        (:mod:`climb_bayes.data.padding`), so that fits of subsets of one table (the
        leave-future-out folds) and its full fit share one set of compiled programs;
        ``None``: no padding.
    """

    seed: int = 0
    n_starts: int = 8
    max_iter: int = 1000
    delta: float = HUBER_DELTA
    chains: int = 2
    warmup: int = 500
    samples: int = 1000
    target_accept: float | None = 0.95
    priors: Priors = field(default_factory=Priors)
    pad_to: PaddedShape | None = None

    def __post_init__(self) -> None:
        self.nuts_config(max(self.chains, 1)).check()

    def target_accept_for(self, law: Law) -> float:
        """The NUTS target acceptance of ``law``'s fit: :attr:`target_accept` where given, else
        the law's own (:attr:`Law.nuts_target_accept`)."""
        return law.nuts_target_accept if self.target_accept is None else self.target_accept

    def nuts_config(self, chains: int, target_accept: float | None = None) -> NutsConfig:
        """These settings as the NUTS configuration of a generic law's fit (:func:`fit_nuts`):
        NumPyro's default tree depth and diagonal mass matrix, no progress bar
        (``target_accept``: that law's, :meth:`target_accept_for`; by default
        :attr:`target_accept`, or the base law's where that is ``None``)."""
        target = self.target_accept if target_accept is None else target_accept
        target = Law.nuts_target_accept if target is None else target
        return NutsConfig(
            chains=chains,
            warmup=self.warmup,
            samples=max(self.samples, chains),
            target_accept=target,
            max_tree_depth=LAW_MAX_TREE_DEPTH,
            dense_mass=False,
            progress_bar=False,
        )


@dataclass(frozen=True)
class Law:
    """Base class of a mixture law (see the module docstring for what to implement)."""

    name: ClassVar[str] = "law"
    description: ClassVar[str] = ""
    zero_share_ok: ClassVar[bool] = False
    """Whether the law predicts a finite loss for a group with share ``r_i = 0``."""
    nuts_target_accept: ClassVar[float] = FIT_SAMPLER.target_accept
    """NUTS target acceptance of the law's fit where :attr:`FitOptions.target_accept` is
    ``None`` (as in ``climb-bayes fit`` without ``--target-accept``): the step size NUTS adapts
    to is the largest that keeps this mean acceptance, so a posterior with a funnel needs a high
    one to avoid divergent transitions, an easy one only pays for it in leapfrog steps."""

    def param_specs(self, m: int) -> dict[str, ParamSpec]:
        """Parameters for ``m`` groups, in packing order."""
        raise NotImplementedError

    def log_loss(self, params: Params, r: jax.Array, d: jax.Array) -> jax.Array:
        """``log L`` for every group: ``r`` (..., m), ``d`` (...) reference units -> (..., m)."""
        raise NotImplementedError

    def init(self, obs: Observations) -> dict[str, np.ndarray]:
        """A starting point (constrained values) from the data, reference units."""
        raise NotImplementedError

    def priors(self, obs: Observations, priors: Priors) -> dict[str, Any]:
        """NumPyro distribution of each parameter (batch shape = parameter shape)."""
        raise NotImplementedError

    def prepare(self, obs: Observations) -> Law:
        """Resolve data-dependent options (e.g. a budget term only with several budgets)."""
        return self

    def power_law(self) -> tuple[str, str, str] | None:
        """Names of the parameters ``(log A, beta, log E)`` of a data term ``A d^(-beta) + E``.

        NUTS and the Laplace fit sample them in the coordinates of
        :mod:`climb_bayes.model.power_coordinates` (priors unchanged; the exponent's prior must
        be LogNormal). ``None``: every parameter is sampled as it is.
        """
        return None

    def n_params(self, m: int) -> int:
        """Number of scalar parameters for ``m`` groups (noise excluded)."""
        return int(sum(math.prod(s.shape) for s in self.param_specs(m).values()))

    def fit(
        self,
        obs: Observations,
        method: str = "map",
        options: FitOptions | None = None,
        log: Callable[[str], None] | None = None,
    ) -> LawFit:
        """Fit to ``obs`` (``method`` "map" or "nuts"); observations it cannot explain (zero
        share, unless ``zero_share_ok``) are left out first."""
        options = options or FitOptions()
        law = self.prepare(obs)
        if method == "map":
            return fit_map(law, obs, options, log=log)
        if method == "nuts":
            return fit_nuts(law, obs, options, log=log)
        if method == "laplace":
            return fit_laplace(law, obs, options, log=log)
        raise ClimbError(f"--method must be 'map', 'nuts' or 'laplace', got {method!r}.")

    # -- packing ----------------------------------------------------------------------------
    def pack(self, values: Mapping[str, np.ndarray], m: int) -> np.ndarray:
        """Flatten constrained values into one unconstrained vector."""
        parts = []
        for name, spec in self.param_specs(m).items():
            v = np.broadcast_to(np.asarray(values[name], dtype=float), spec.shape)
            parts.append((np.log(v) if spec.positive else v).ravel())
        return np.concatenate(parts) if parts else np.zeros(0)

    def unpack(self, theta: jax.Array, m: int) -> dict[str, jax.Array]:
        """Inverse of :meth:`pack` (JAX-traceable)."""
        out, i = {}, 0
        for name, spec in self.param_specs(m).items():
            size = math.prod(spec.shape)
            v = theta[i : i + size].reshape(spec.shape)
            out[name] = jnp.exp(v) if spec.positive else v
            i += size
        return out

    def spreads(self, m: int) -> np.ndarray:
        """Per-coordinate start perturbation scales (unconstrained)."""
        return np.concatenate(
            [np.full(math.prod(s.shape), s.spread) for s in self.param_specs(m).values()]
        )

    def usable(self, obs: Observations) -> Observations:
        """The observations this law can explain (drops zero-share ones unless allowed)."""
        return obs if self.zero_share_ok else obs.positive_share()


# --------------------------------------------------------------------------------------------
# Fitted law
# --------------------------------------------------------------------------------------------


@dataclass
class LawFit:
    """A fitted law: parameter draws (one for MAP), noise, and what is needed to predict.

    Attributes
    ----------
    law : Law
        The (prepared) law.
    groups : tuple of str
        Group names.
    d_ref : float
        Reference budget (tokens) of ``d`` in :meth:`Law.log_loss`.
    method : str
        ``"map"`` or ``"nuts"``.
    draws : dict of str to numpy.ndarray
        Parameter draws, each ``(S, *shape)`` (``S = 1`` for MAP), reference units.
    sigma : numpy.ndarray
        ``(S, m)`` noise sd on log-loss (robust MAD of residuals for MAP).
    likelihood : str
        ``"normal"`` or ``"student_t"``: the predictive noise distribution.
    student_df : float or numpy.ndarray
        Degrees of freedom when ``likelihood == "student_t"``: a number, or ``(S, m)`` draws
        where the fit learned them (``Priors.student_df = "learned"``).
    info : dict
        Fit details (objective, starts, time, diagnostics, number of observations); plain
        JSON-able values.
    native : object
        The underlying fit object where there is one (CLIMB:
        :class:`climb_bayes.inference.fitresult.Fit`).
    sigma_run : numpy.ndarray or None
        ``(S, m)`` sd of the run-level deviation shared by the points of one run
        (:class:`climb_bayes.model.observation.GroupedNoise`); ``None`` when points are independent.
    fit_obs : Observations or None
        The observations fitted (for the run effects of runs that continue, and the fitted
        budget range).
    discrepancy : Discrepancy or None
        Extrapolation discrepancy draws (:mod:`climb_bayes.model.discrepancy`), paired with the
        parameter draws.
    """

    law: Law
    groups: tuple[str, ...]
    d_ref: float
    method: str
    draws: dict[str, np.ndarray]
    sigma: np.ndarray
    likelihood: str = "normal"
    student_df: float | np.ndarray = 4.0
    info: dict[str, Any] = field(default_factory=dict)
    native: Any = None
    sigma_run: np.ndarray | None = None
    fit_obs: Observations | None = None
    discrepancy: Discrepancy | None = None

    @property
    def n_draws(self) -> int:
        """Number of parameter draws."""
        return int(self.sigma.shape[0])

    def df_draws(self) -> np.ndarray:
        """``(S, m)`` degrees of freedom of every draw and group (``inf`` for the Normal)."""
        shape = self.sigma.shape
        if self.likelihood == "normal":
            return np.full(shape, np.inf)
        return np.broadcast_to(np.asarray(self.student_df, dtype=float), shape).copy()

    def predict_log_loss(self, r: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Law prediction of ``log L`` per draw: ``r`` (..., m), ``tokens`` (...) -> (S, ..., m)."""
        return predict_draws(
            self.law, self.draws, np.asarray(r, float), np.asarray(tokens, float) / self.d_ref
        )

    def predict_obs(self, obs: Observations) -> np.ndarray:
        """``(S, N)`` predicted ``log L`` at each observation."""
        point_r, point_tokens, obs_point = obs.points()
        full = self.predict_log_loss(point_r, point_tokens)
        return full[:, obs_point, obs.group]

    def point_log(self, obs: Observations) -> np.ndarray:
        """``(N,)`` point prediction of ``log L``: mean over draws of the law's prediction."""
        return self.predict_obs(obs).mean(axis=0)

    def fit_range(self) -> tuple[np.ndarray, np.ndarray]:
        """``(m,)`` smallest and largest fitted budget (tokens) per group.

        From the fitted observations (``fit_obs``) where known, else from the discrepancy's
        stored range; a group never fitted gets the range of all groups.
        """
        if self.discrepancy is not None:
            return self.discrepancy.lo, self.discrepancy.hi
        if self.fit_obs is None or self.fit_obs.n == 0:
            raise ClimbError("this fit does not know its fitted budget range.")
        return budget_range(self.fit_obs)

    def thin(self, idx: np.ndarray) -> LawFit:
        """The draws ``idx`` of every per-draw array (discrepancy draws included)."""
        return replace(
            self,
            draws={k: v[idx] for k, v in self.draws.items()},
            sigma=self.sigma[idx],
            sigma_run=None if self.sigma_run is None else self.sigma_run[idx],
            student_df=self.student_df if np.ndim(self.student_df) == 0 else self.student_df[idx],
            discrepancy=None if self.discrepancy is None else self.discrepancy.take(idx),
        )


def likelihood_df(priors: Priors, samples: Mapping[str, Any]) -> float | np.ndarray:
    """What :attr:`LawFit.student_df` holds under ``priors``: the ``(S, m)`` draws of a learned
    ``df`` (site ``"df"`` of ``samples``), else the fixed number (``inf`` for the Normal)."""
    if priors.learned_df:
        return np.asarray(samples["df"], dtype=float)
    return np.inf if priors.fixed_df is None else priors.fixed_df


def predict_draws(
    law: Law, draws: Mapping[str, np.ndarray], r: np.ndarray, d: np.ndarray
) -> np.ndarray:
    """Evaluate ``law.log_loss`` for every draw: ``(S, ..., m)``.

    Parameters
    ----------
    law : Law
        The law.
    draws : mapping of str to array (S, ...)
        Parameter draws.
    r : array (..., m)
        Mixtures.
    d : array (...)
        Budgets in reference units.
    """
    names = tuple(draws)
    arrays = [jnp.asarray(draws[k]) for k in names]
    return np.asarray(_draws_evaluator(law, names)(jnp.asarray(r), jnp.asarray(d), *arrays))


@functools.lru_cache(maxsize=32)
def _draws_evaluator(law: Law, names: tuple[str, ...]) -> Callable[..., jax.Array]:
    """``(r, d, *draws) -> law.log_loss`` per draw, compiled once per law and parameter names
    (the mixtures and budgets are arguments, so every call with the same shapes reuses it:
    a default ``climb-bayes fit`` had traced and compiled it ~70 times, ~1.3 s)."""

    def one(r: jax.Array, d: jax.Array, *vals: jax.Array) -> jax.Array:
        return law.log_loss(dict(zip(names, vals, strict=True)), r, d)

    return jax.jit(jax.vmap(one, in_axes=(None, None) + (0,) * len(names)))


# --------------------------------------------------------------------------------------------
# Generic fits
# --------------------------------------------------------------------------------------------


def fit_map(
    law: Law,
    obs: Observations,
    options: FitOptions | None = None,
    *,
    d_ref: float | None = None,
    log: Callable[[str], None] | None = None,
) -> LawFit:
    """Multi-start L-BFGS fit of any law on the summed Huber loss of log-loss residuals.

    Every start is first refined on the least-squares objective, then on the Huber loss.

    Parameters
    ----------
    law : Law
        A prepared law.
    obs : Observations
        Data (reduced to :meth:`Law.usable`).
    options : FitOptions, optional
        ``n_starts``, ``seed``, ``delta``.
    d_ref : float, optional
        Reference budget (from the data by default).
    log : callable, optional
        Progress lines.

    Returns
    -------
    LawFit
        One draw; ``sigma`` is the per-group MAD of the residuals; predictive noise Normal.

    References
    ----------
    .. [1] Hoffmann et al. (2022), Appendix D.2.
    .. [2] Besiroglu et al. (2024).
    """
    release_compiled_programs()  # many fits in one process: runtime.release_compiled_programs
    options = options or FitOptions()
    log = log or (lambda _msg: None)
    obs = law.usable(obs)
    if obs.n == 0:
        raise ClimbError(f"law {law.name!r}: no observations it can fit.")
    options = _identifiable(options, obs, log)
    m = obs.m
    d_ref = reference_budget(obs.tokens) if d_ref is None else float(d_ref)
    law_data = _law_data(obs, options, d_ref)
    mask = np.ones(law_data.y.shape, bool) if law_data.mask is None else law_data.mask
    data = (law_data.r, law_data.d, law_data.point, law_data.group, law_data.y, mask)
    least_squares, objective = _map_objectives(law, m, options.delta, data)

    x0 = law.pack(law.init(obs), m)
    rng = np.random.default_rng(options.seed)
    noise = rng.standard_normal((max(options.n_starts - 1, 0), x0.size))
    starts = np.vstack([x0[None], x0 + law.spreads(m) * noise])
    t0 = time.perf_counter()
    res = multistart_lbfgs(
        objective, starts, max_iter=options.max_iter, gtol=_GTOL, prefit=least_squares
    )
    seconds = time.perf_counter() - t0
    log(
        f"{law.name}: MAP objective {res.fun:.4g} ({res.n_converged}/{res.n_starts} starts "
        f"converged, {seconds:.1f} s)"
    )
    values = {k: np.asarray(v)[None] for k, v in law.unpack(jnp.asarray(res.x), m).items()}
    fit = LawFit(law, obs.groups, d_ref, "map", values, np.ones((1, m)), "normal", fit_obs=obs)
    resid = fit.predict_obs(obs)[0] - obs.log_loss
    if options.priors.run_effect:
        within, between = run_noise_split(resid, obs.group, obs.obs_group, m)
        fit.sigma, fit.sigma_run = within[None], between[None]
    else:
        fit.sigma = mad_sigma(resid, obs.group, m)[None]
    fit.info = {
        "objective": float(res.fun),
        "starts": f"{res.n_converged}/{res.n_starts} converged",
        "far_from_prior": _far_from_prior(law, obs, options.priors, values),
        "seconds": seconds,
        "n_fit": obs.n,
        "n_params": law.n_params(m),
    }
    return fit


def _map_objectives(law: Law, m: int, delta: float, data: tuple) -> tuple[Callable, Callable]:
    """The least-squares and Huber losses of :func:`fit_map` (``theta -> scalar``) on ``data``
    (``(r, d, point, group, y, mask)``, the padding masked out), their compiled programs shared
    by every fit of one law and data shapes (a table's padded folds: each compiled its own
    while the data were constants of the programs); closures over ``data`` where the law is
    not hashable."""
    from climb_bayes.inference.argument_potential import BoundObjective

    try:
        programs = _map_programs(law, m, delta)
    except TypeError:  # an unhashable law: the closures, compiled per fit
        return (
            functools.partial(_map_loss, law, m, None, data=data),
            functools.partial(_map_loss, law, m, delta, data=data),
        )
    return tuple(BoundObjective(vg, hess, data) for vg, hess in programs)


def _map_loss(law: Law, m: int, delta: float | None, theta: jax.Array, data: tuple) -> jax.Array:
    """Half the sum of squared log-loss residuals (``delta`` ``None``) or their summed Huber
    loss, the padded observations (``mask`` ``False``) contributing 0."""
    r, d, point, group, y, mask = data
    residual = (law.log_loss(law.unpack(theta, m), r, d)[point, group] - y) * mask
    if delta is None:
        return 0.5 * jnp.sum(residual**2)
    return jnp.sum(huber(residual, delta))


@functools.lru_cache(maxsize=16)
def _map_programs(law: Law, m: int, delta: float) -> tuple[tuple[Callable, Callable], ...]:
    out = []
    for how in (None, delta):
        value_and_grad = jax.jit(jax.value_and_grad(functools.partial(_map_loss, law, m, how)))
        hessian = jax.jit(jax.jacfwd(lambda x, data, vg=value_and_grad: vg(x, data)[1]))
        out.append((value_and_grad, hessian))
    return tuple(out)


def _far_from_prior(
    law: Law, obs: Observations, priors: Priors, values: Mapping[str, np.ndarray]
) -> str:
    """The point fit's coordinates more than ``FAR_FROM_PRIOR`` prior sds from the law's prior
    centre (:func:`climb_bayes.inference.point_fit.far_summary`; ``""`` when none): Normal
    priors on the value, LogNormal on its log, HalfNormal from 0; other priors are not read.
    Measured (2026-12-01): Isolated's Huber fit of the shipped default table ends with
    ``log E`` 44 prior sds out (``E -> 0``, as CLIMB's), MSL and the DML within 1.3 there and
    within 3.6 on the 5Mix-70M and RedPajama-70M fit splits; in docs/benchmarks.md's per-law
    table Isolated is flagged on RegMix and 5Mix-305M/410M and MSL on 5Mix-410M
    (``gamma[prose]`` 105 sds out)."""
    import numpyro.distributions as dist

    z, labels = [], []
    for name, prior in law.priors(obs, priors).items():
        if name not in values:
            continue
        x = np.asarray(values[name], dtype=float)[0]
        if isinstance(prior, dist.LogNormal):
            d = (np.log(x) - np.asarray(prior.loc)) / np.asarray(prior.scale)
        elif isinstance(prior, dist.Normal):
            d = (x - np.asarray(prior.loc)) / np.asarray(prior.scale)
        elif isinstance(prior, dist.HalfNormal):
            d = x / np.asarray(prior.scale)
        else:
            continue
        d = np.broadcast_to(d, x.shape).ravel()
        z.append(d)
        if x.ndim == 0:
            labels.append(name)
        else:
            names = obs.groups if x.shape == (obs.m,) else [str(i) for i in range(d.size)]
            labels += [f"{name}[{g}]" for g in names]
    return far_summary(np.concatenate(z), labels) if z else ""


def _identifiable(options: FitOptions, obs: Observations, log: Callable[[str], None]) -> FitOptions:
    """``options`` with the run effect off where no (run, group) holds two observations
    (:func:`climb_bayes.model.observation.identifiable_noise`)."""
    priors = identifiable_noise(options.priors, obs.obs_group, log)
    return options if priors is options.priors else replace(options, priors=priors)


def _sampler_start(law: Law, point: LawFit, priors: Priors) -> dict[str, np.ndarray]:
    """Values of every sampled site at a point fit: the start of NUTS and of the Laplace fit."""
    start = {k: np.asarray(v[0], dtype=float) for k, v in point.draws.items()}
    power = law.power_law()
    if power is not None:
        amp, expo, irr = power
        start |= power_coordinates(start.pop(amp), start.pop(irr), start.pop(expo))
    start["sigma"] = np.maximum(point.sigma[0], 1e-3)
    if priors.run_effect:
        start["sigma_run"] = np.maximum(point.sigma_run[0], 1e-3)
    if priors.learned_df:
        start["df"] = np.full(point.sigma.shape[-1], LEARNED_DF_START)
    return start


def _numpyro_model(
    law: Law,
    prior_dists: dict[str, Any],
    point: np.ndarray,
    group: np.ndarray,
    run_group: np.ndarray,
    m: int,
    priors: Priors,
    r: jax.Array,
    d: jax.Array,
    y: jax.Array | None,
    mask: jax.Array | None = None,
    n_groups: int | None = None,
) -> None:
    """Any law under the CLIMB model's noise model (:mod:`climb_bayes.model.observation`);
    ``mask`` (``(N,)`` bool) leaves padded observations out of the likelihood; ``n_groups``
    (static) bounds the run-group ids, so that traced ids are summed over that many segments
    instead of one per observation (:class:`~climb_bayes.model.observation.GroupedNoise`)."""
    import numpyro
    import numpyro.distributions as dist

    params = {}
    power = law.power_law()
    for name, dst in prior_dists.items():
        if power is None or name not in power:
            params[name] = numpyro.sample(name, dst.to_event(len(dst.batch_shape)))
    if power is not None:
        amp, expo, irr = power
        exponent = prior_dists[expo]
        if not isinstance(exponent, dist.LogNormal):
            raise ClimbError(f"{law.name}: the prior of {expo} must be LogNormal.")
        term = sample_power_law(
            prior_dists[amp],
            prior_dists[irr],
            dist.Normal(exponent.loc, exponent.scale),
            names=(amp, irr, expo),
            event_dims=len(exponent.batch_shape),
        )
        params[amp], params[irr], params[expo] = term
    sigma = numpyro.sample("sigma", dist.HalfNormal(priors.noise_scale).expand([m]).to_event(1))
    pred = law.log_loss(params, r, d)[point, group]
    scale = sigma[group]
    df = priors.fixed_df
    if priors.learned_df:
        df_group = numpyro.sample("df", df_prior(priors.student_df_min).expand([m]).to_event(1))
        df = df_group[group]
    if priors.run_effect:
        run_scale = numpyro.sample(
            "sigma_run", dist.HalfNormal(priors.run_effect_scale).expand([m]).to_event(1)
        )
        noise = GroupedNoise(
            pred, scale, run_scale[group], run_group, df, mask, n_groups, df_key=group
        )
        numpyro.sample("y", noise, obs=y)
        return
    if df is None:
        noise = dist.Normal(pred, scale)
    elif priors.learned_df:  # the normaliser once per group
        noise = KeyedStudentT(df_group, group, pred, scale)
    else:
        noise = dist.StudentT(df, pred, scale)
    if mask is not None:
        noise = noise.mask(mask)
    numpyro.sample("y", noise.to_event(1), obs=y)


class _LawData(NamedTuple):
    """A law's data as its fits' compiled programs take them: evaluation points ``r``
    ``(P, m)`` and ``d`` ``(P,)`` (budget / ``d_ref``), per observation its ``point``,
    ``group``, run-effect group ``run_group`` and log-loss ``y``, ``mask`` (``False`` on
    padding; ``None`` where nothing is padded) and ``n_groups``, a bound on the run-group ids
    (the padded shape's where padded)."""

    r: jax.Array
    d: jax.Array
    point: np.ndarray
    group: np.ndarray
    run_group: np.ndarray
    y: jax.Array
    mask: np.ndarray | None
    n_groups: int


def _law_data(obs: Observations, options: FitOptions, d_ref: float) -> _LawData:
    """``obs`` as :class:`_LawData`, padded to ``options.pad_to`` where that is given (and holds
    ``obs``) with the padding masked out, so that every fit of one table's subsets shares its
    compiled programs (:mod:`climb_bayes.inference.argument_potential`)."""
    point_r, point_tokens, obs_point = obs.points()
    by_obs = [obs_point, np.asarray(obs.group), np.asarray(obs.obs_group), obs.log_loss]
    mask = None
    pad = options.pad_to
    n_groups = group_count(by_obs[2]) or 0
    if pad is not None and pad.holds(obs.n, point_tokens.size, n_groups):
        n_groups = pad.n_groups
        point_r = pad_rows(point_r, pad.n_points)
        point_tokens = pad_rows(point_tokens, pad.n_points)
        by_obs = [pad_rows(a, pad.n_obs) for a in by_obs]
        mask = padding_mask(obs.n, pad.n_obs)
    point, group, run_group, y = by_obs
    return _LawData(
        jnp.asarray(point_r), jnp.asarray(point_tokens / d_ref), point, group, run_group,
        jnp.asarray(y), mask, n_groups,
    )  # fmt: skip


def _model_arguments(law: Law, obs: Observations, options: FitOptions, d_ref: float) -> tuple:
    """The arguments of :func:`_numpyro_model` for ``obs`` (:func:`_law_data`: padded to
    ``options.pad_to`` where that is given)."""
    data = _law_data(obs, options, d_ref)
    return (
        law,
        law.priors(obs, options.priors),
        data.point,
        data.group,
        data.run_group,
        obs.m,
        options.priors,
        data.r,
        data.d,
        data.y,
        data.mask,
        data.n_groups,
    )


def fit_nuts(
    law: Law,
    obs: Observations,
    options: FitOptions | None = None,
    *,
    d_ref: float | None = None,
    log: Callable[[str], None] | None = None,
) -> LawFit:
    """Posterior of any law with NUTS (for small models), its chains started at the modes L-BFGS
    reaches from the MAP fit and from jittered copies of it (the log and ``info["modes"]`` say
    how many distinct modes they found).

    The likelihood on log-loss (Normal or Student-t), its degrees of freedom and the
    HalfNormal scale of the per-group noise come from ``options.priors`` (the CLIMB model's
    settings), so laws are compared under the same noise model.

    Parameters
    ----------
    law : Law
        A prepared law.
    obs : Observations
        Data (reduced to :meth:`Law.usable`).
    options : FitOptions, optional
        Chains, warm-up, samples, seed.
    d_ref : float, optional
        Reference budget.
    log : callable, optional
        Progress lines.

    Returns
    -------
    LawFit
        ``S = samples`` draws; ``info`` has divergences, max R-hat and min bulk ESS.

    References
    ----------
    .. [1] Hoffman & Gelman (2014), "The No-U-Turn Sampler".
    """
    from numpyro.infer import init_to_value

    options = options or FitOptions()
    log = log or (lambda _msg: None)
    obs = law.usable(obs)
    options = _identifiable(options, obs, log)
    # The start only needs to be near the bulk: one short L-BFGS run, not the full multi-start
    # point fit (which took 16-29 s of the 40-60 s of a 5Mix fit; measured).
    init_opts = replace(options, n_starts=1, max_iter=min(options.max_iter, 300))
    point = fit_map(law, obs, init_opts, d_ref=d_ref, log=log)
    d_ref = point.d_ref
    m = obs.m
    start = {k: jnp.asarray(v) for k, v in _sampler_start(law, point, options.priors).items()}
    # NUTS samples the table as it is (the data bound, the first seven arguments); its chain
    # starts' searches below run on the padded arguments
    unpadded = _model_arguments(law, obs, replace(options, pad_to=None), d_ref)
    model = functools.partial(_numpyro_model, *unpadded[:7])
    chains = max(options.chains, 1)
    args = unpadded[7:10]  # r, d, y
    key_start, key_run = jax.random.split(jax.random.PRNGKey(options.seed))
    # the searches on the model with every argument passed (padded as the ensemble's Laplace
    # fits are): they share those fits' compiled programs
    init_params, starts = _mode_starts(
        _numpyro_model, _model_arguments(law, obs, options, d_ref), start, chains, key_start
    )
    log(
        f"{law.name}: chain starts: L-BFGS from the point fit and {MODE_SEARCHES - 1} jittered "
        f"starts reached {starts.modes} mode(s) (lowest potential "
        f"{np.min(starts.potentials):.1f}); chains start at Laplace draws weighted by evidence"
    )
    target = options.target_accept_for(law)
    mcmc = nuts_mcmc(
        model, options.nuts_config(chains, target), init_strategy=init_to_value(values=start)
    )
    t0 = time.perf_counter()
    mcmc.run(
        key_run,
        *args,
        init_params=chain_init_values(init_params, chains),
        extra_fields=("diverging", "energy", "num_steps"),
    )
    grouped = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))  # dispatch is async
    seconds = time.perf_counter() - t0
    diag = _nuts_diagnostics(
        grouped, mcmc.get_extra_fields(group_by_chain=True), obs.groups, target
    )
    rhat, ess, div = diag.max_rhat, diag.min_ess_bulk, diag.divergences
    log(
        f"{law.name}: NUTS {chains} chains at target accept {target:g}, {seconds:.1f} s, "
        f"{div} divergences, "
        f"max R-hat {rhat:.3f}, min ESS {ess:.0f}"
    )
    flat = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
    sigma = flat.pop("sigma")
    sigma_run = flat.pop("sigma_run", None)
    flat_df = {"df": flat.pop("df")} if "df" in flat else {}
    flat = {k: flat[k] for k in law.param_specs(m)}  # the sampled coordinates stay out
    return LawFit(
        law,
        obs.groups,
        d_ref,
        "nuts",
        flat,
        sigma,
        options.priors.likelihood,
        likelihood_df(options.priors, flat_df),
        sigma_run=sigma_run,
        fit_obs=obs,
        info={
            "seconds": seconds,
            "divergences": div,
            "max_rhat": rhat,
            "min_ess": ess,
            "modes": starts.modes,
            "target_accept": target,
            "diagnostics": diag.to_json(),
            "n_fit": obs.n,
            "n_params": law.n_params(m),
        },
    )


START_JITTER = 1.0
"""Sd of the Gaussian jitter (unconstrained coordinates) of every mode search's start but the
first, which is the point fit: :func:`_mode_starts`."""

MODE_SEARCHES = 8
"""L-BFGS mode searches of a law's NUTS start (:func:`_mode_starts`), at least one per chain."""


def _mode_starts(
    model: Callable[..., None],
    args: tuple,
    start: dict[str, jax.Array],
    chains: int,
    key: jax.Array,
) -> tuple[dict[str, np.ndarray], ModeStarts]:
    """Chain starts drawn from the Laplace approximations at the modes L-BFGS reaches from the
    point fit and from jittered copies of it, each chain's search picked with probability
    proportional to its mode's Laplace evidence
    (:func:`climb_bayes.inference.laplace.evidence_picks`).

    Why: the point fit minimises a Huber loss, not the posterior, and a chain started in a
    poor local mode may stay there. Measured on 5Mix-410M, Isolated, 2 x (500 + 500): from
    the point fit (both chains, even after an L-BFGS search each) seed 0 gave R-hat 1.04 and
    seed 1 R-hat 1.83 with bulk ESS 3 -- one chain of the 'internet' group found a mode with
    noise sd 0.0031 (beta 0.16, log E -0.24), the other stayed at sd 0.0111 (beta 0.11,
    log E 0.52). Searches from several jittered starts reach both; weighting by evidence puts
    the chains where the posterior mass is, and the log reports every mode found.

    Returns
    -------
    init_params : dict
        ``(chains, ...)`` unconstrained starts.
    ModeStarts
        Of all :data:`MODE_SEARCHES` searches (their potentials, modes and evidence).
    """
    k_jitter, k_search, k_pick = jax.random.split(key, 3)
    jitter = _search_starts(model, args, start, max(MODE_SEARCHES, chains), k_jitter)
    # unpolished 3,000-iteration searches: the DML's chains on 5Mix-410M stuck apart on 2 of
    # 10 seeds with them, 6 of 10 with polished ones (mode_starts' ``polish``)
    found = mode_starts(
        model, args, start, jitter, key=k_search, dense=False, max_iter=3000, polish=False
    )
    pick = evidence_picks(found, chains, k_pick)
    return {k: v[pick] for k, v in found.init_params.items()}, found


def _search_starts(
    model: Callable[..., None], args: tuple, start: dict[str, Any], n: int, key: jax.Array
) -> dict[str, np.ndarray]:
    """``n`` mode-search starts, ``(n, ...)`` unconstrained per site: ``start`` itself, then
    copies jittered by :data:`START_JITTER`."""
    from numpyro.infer.util import unconstrain_fn

    base = unconstrain_fn(model, args, {}, start)
    out = {}
    for name, z in site_normals(key, base, n).items():
        z[0] = 0.0
        out[name] = np.asarray(base[name], dtype=float)[None] + START_JITTER * z
    return out


def _nuts_diagnostics(
    grouped: dict[str, Any], extra: dict[str, Any], groups: Sequence[str], target_accept: float
) -> Diagnostics:
    """R-hat, ESS, divergences, tree depth and E-BFMI of a law's NUTS run by the one path every
    fit uses (:func:`climb_bayes.inference.diagnostics.compute_diagnostics`, arviz-stats); an axis
    of length ``len(groups)`` is labelled with the group names (``log_B[ja]``)."""
    import xarray as xr

    def _da(name: str, v: Any) -> xr.DataArray:  # own dims per site: sizes differ (DML)
        a = np.asarray(v, dtype=float)
        dims = ["chain", "draw"] + [f"{name}_dim_{i}" for i in range(a.ndim - 2)]
        coords = {d: list(groups) for d, n in zip(dims, a.shape, strict=True)
                  if d.startswith(f"{name}_dim_") and n == len(groups)}  # fmt: skip
        return xr.DataArray(a, dims=dims, coords=coords)

    posterior = xr.Dataset({k: _da(k, v) for k, v in grouped.items()})
    stats = xr.Dataset(
        {
            "diverging": xr.DataArray(np.asarray(extra["diverging"]), dims=["chain", "draw"]),
            "energy": _da("energy", extra["energy"]),
            "n_steps": _da("n_steps", extra["num_steps"]),
        }
    )
    return compute_diagnostics(
        posterior, stats, LAW_MAX_TREE_DEPTH, list(grouped), target_accept=target_accept
    )


def check_groups(names: Sequence[str]) -> None:
    """Raise :class:`ClimbError` when group names repeat."""
    if len(set(names)) != len(names):
        raise ClimbError(f"group names must be distinct, got {', '.join(names)}")


def fit_laplace(
    law: Law,
    obs: Observations,
    options: FitOptions | None = None,
    *,
    d_ref: float | None = None,
    log: Callable[[str], None] | None = None,
) -> LawFit:
    """Laplace approximation of any law's posterior (same model as :func:`fit_nuts`).

    The modes of the posterior (priors included) that searches from a short point fit's start
    and from :data:`~climb_bayes.inference.laplace.LAPLACE_SEARCHES` - 1 copies of it jittered by
    :data:`START_JITTER` reach, and ``options.samples`` draws of the Gaussians around them,
    shared by Laplace evidence (:func:`climb_bayes.inference.laplace.laplace_posterior`):
    seconds where NUTS takes minutes; used for the leave-future-out refits of the ensemble.
    """
    from climb_bayes.inference.laplace import LAPLACE_SEARCHES, laplace_modes, laplace_posterior

    options = options or FitOptions()
    log = log or (lambda _msg: None)
    obs = law.usable(obs)
    options = _identifiable(options, obs, log)
    init_opts = replace(options, n_starts=1, max_iter=min(options.max_iter, 300))
    point = fit_map(law, obs, init_opts, d_ref=d_ref)
    d_ref = point.d_ref
    m = obs.m
    start = _sampler_start(law, point, options.priors)
    args = _model_arguments(law, obs, options, d_ref)
    t0 = time.perf_counter()
    key_start, key = jax.random.split(jax.random.PRNGKey(options.seed))
    # the first of the searches' starts is ``start`` itself, which laplace_posterior adds
    starts = _search_starts(_numpyro_model, args, start, LAPLACE_SEARCHES, key_start)
    res = laplace_posterior(
        _numpyro_model,
        args,
        start,
        key=key,
        n_draws=options.samples,
        starts={k: v[1:] for k, v in starts.items()},
    )
    seconds = time.perf_counter() - t0
    log(f"{law.name}: Laplace fit in {seconds:.1f} s ({laplace_modes(res)})")
    draws = {k: res.samples[k] for k in law.param_specs(m)}
    return LawFit(
        law,
        obs.groups,
        d_ref,
        "laplace",
        draws,
        res.samples["sigma"],
        options.priors.likelihood,
        likelihood_df(options.priors, res.samples),
        sigma_run=res.samples.get("sigma_run"),
        fit_obs=obs,
        info={
            "seconds": seconds,
            "converged": res.converged,
            "pareto_k": res.pareto_k,
            "pareto_k_max": res.pareto_k_max,
            "n_fit": obs.n,
        },
    )
