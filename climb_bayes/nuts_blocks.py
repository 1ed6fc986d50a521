"""NUTS one target language at a time: the posterior factorises over target languages.

Without hierarchical transfer every prior of the CLIMB model is independent across target
languages, and the loss of language ``i`` depends only on ``B_i, beta_i, E_i, eta_i, sigma_i``
and the transfer *into* ``i`` (``b_ji, k_ji`` for all sources ``j``). The joint posterior is
therefore the product of ``m`` independent posteriors of ``5 + 2 (m - 1)`` parameters each,
and sampling them one by one is exact, not an approximation. It pays because each block gets
its own step size and its own dense mass matrix (35 x 35 at 16 languages, well estimated in a
short warm-up), whereas one joint NUTS run must adapt a 544 x 544 matrix and move every block
with the step size and trajectory length of the hardest one (measured in
``docs/performance.md``).

The draws of the blocks are put side by side per chain and draw, which is a valid joint chain
because the blocks are independent. Per-draw sampler statistics are combined as: divergent if
any block diverged, ``num_steps`` of the deepest block (so tree-depth checks stay meaningful)
with the total over blocks in ``n_steps_total``, the sum of the blocks' energies (the energy
of the product system) and the mean acceptance probability.

References
----------
.. [1] Hoffman & Gelman (2014), "The No-U-Turn Sampler".
.. [2] Guo et al. (2025), Eq. (4)-(6): the loss of language ``i`` involves only its own
   parameters and the transfer into it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.infer import NUTS, Predictive
from numpyro.infer.hmc import hmc
from numpyro.infer.util import initialize_model

from climb_bayes.errors import ClimbError
from climb_bayes.model import ModelData, climb_model, latent_sites, pair_indices
from climb_bayes.nuts import (
    EXTRA_FIELDS,
    NutsConfig,
    chain_inits,
    from_unconstrained,
    resolve_chain_method,
)
from climb_bayes.priors import Priors

__all__ = [
    "BLOCK_MIN_LANGUAGES",
    "use_language_blocks",
    "language_blocks",
    "BlockedPosterior",
    "EXPLORE_TREE_DEPTH",
    "warmup_stages",
    "run_blocked_nuts",
]

BLOCK_MIN_LANGUAGES = 8
"""``blocks="auto"`` samples per language from this many languages up (measured crossover,
``docs/performance.md``)."""

_PAIR_SITES = ("b_saturated", "kappa_saturated")


def use_language_blocks(config: NutsConfig, priors: Priors, n_languages: int) -> bool:
    """Whether ``config.blocks`` asks for per-language blocks under these priors.

    ``"auto"`` picks blocks when the posterior factorises (no hierarchical transfer), the
    chains do not start at a point fit and there are at least :data:`BLOCK_MIN_LANGUAGES`.

    Raises
    ------
    ClimbError
        ``blocks="language"`` with hierarchical transfer or ``init="map"``.
    """
    if config.blocks == "joint":
        return False
    possible = not priors.hierarchical_transfer and config.init == "prior-centre"
    if config.blocks == "language":
        if not possible:
            raise ClimbError(
                "--blocks language needs independent languages and the prior-centre start: "
                "drop hierarchical_transfer from the priors, use --init prior-centre, or "
                "--blocks joint."
            )
        return True
    return possible and n_languages >= BLOCK_MIN_LANGUAGES


def language_blocks(data: ModelData) -> list[ModelData]:
    """One :class:`ModelData` per target language, its target moved to column 0.

    A block keeps only the evaluation points its target language is observed at (the law is
    evaluated at no other point). Points and observations are padded to common lengths
    (``obs_mask`` marks the real observations; padded points have no share and budget 1) so
    that every block has the same shapes and NUTS compiles once.
    """
    m = data.point_r.shape[-1]
    counts = np.bincount(data.obs_language, minlength=m)
    n_max = int(counts.max())
    observed = [np.unique(data.obs_point[data.obs_language == i]) for i in range(m)]
    p_max = max(p.size for p in observed)
    blocks = []
    for i in range(m):
        order = [i] + [j for j in range(m) if j != i]
        points = observed[i]
        sel = np.flatnonzero(data.obs_language == i)
        pad, pad_points = n_max - sel.size, p_max - points.size
        blocks.append(
            data._replace(
                point_r=np.concatenate(
                    [data.point_r[np.ix_(points, order)], np.zeros((pad_points, m))]
                ),
                point_d=np.concatenate([data.point_d[points], np.ones(pad_points)]),
                obs_point=np.concatenate(
                    [np.searchsorted(points, data.obs_point[sel]), np.zeros(pad, np.int64)]
                ).astype(np.int32),
                obs_language=np.zeros(n_max, np.int32),
                obs_log_loss=np.concatenate([data.obs_log_loss[sel], np.zeros(pad)]),
                obs_mask=np.arange(n_max) < sel.size,
                reducible_loc=np.asarray(data.reducible_loc, float)[[i]],
                irreducible_loc=np.asarray(data.irreducible_loc, float)[[i]],
            )
        )
    return blocks


class BlockedPosterior:
    """Joint draws assembled from per-language blocks, with the interface of NumPyro's ``MCMC``
    that :func:`arviz_base.from_numpyro` reads (``get_samples``, ``get_extra_fields``,
    ``sampler.model``, ``num_chains``, ``num_samples``, ``thinning``, ``_args``, ``_kwargs``).
    """

    def __init__(
        self,
        samples: dict[str, np.ndarray],
        extra: dict[str, np.ndarray],
        data: ModelData,
        priors: Priors,
        max_tree_depth: int = 10,
    ) -> None:
        self._samples = samples  # site -> (chains, draws, ...): latent and deterministic
        self._extra = extra
        self.num_chains, self.num_samples = next(iter(extra.values())).shape[:2]
        self.thinning = 1
        self._args = (data, priors)
        self._kwargs: dict[str, Any] = {}
        self.sampler = NUTS(climb_model, max_tree_depth=max_tree_depth)

    @staticmethod
    def _flatten(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: v.reshape((-1,) + v.shape[2:]) for k, v in d.items()}

    def get_samples(self, group_by_chain: bool = False) -> dict[str, np.ndarray]:
        """Draws of every site, ``(chains, draws, ...)`` or flattened over chains."""
        return dict(self._samples) if group_by_chain else self._flatten(self._samples)

    def get_extra_fields(self, group_by_chain: bool = False) -> dict[str, np.ndarray]:
        """Combined per-draw sampler statistics (see the module docstring)."""
        return dict(self._extra) if group_by_chain else self._flatten(self._extra)

    def for_arviz(self) -> Any:
        """The object to hand to :func:`arviz_base.from_numpyro`.

        arviz-base 1.x takes non-``MCMC`` results through adapter objects; its
        ``MCMCAdapter`` reads exactly the ``MCMC`` interface this class provides. Older
        arviz-base (0.x, the Python 3.11 line) reads that interface directly.
        """
        from arviz_base import io_numpyro

        adapter = getattr(io_numpyro, "MCMCAdapter", None)
        return self if adapter is None else adapter(self)


EXPLORE_TREE_DEPTH = 6
"""Tree-depth cap of the first warm-up stage (before any metric is known)."""


def warmup_stages(warmup: int) -> tuple[int, int, int]:
    """Iterations of the three warm-up stages of a block (explore, metric, step size).

    Thirds of ``warmup`` (at least one iteration each); the last two are equal so that they
    share one compiled kernel.
    """
    later = max((warmup - warmup // 3) // 2, 1)
    return max(warmup - 2 * later, 1), later, later


def _pooled_metric(draws: dict[str, jax.Array], dense: bool) -> np.ndarray:
    """Inverse mass matrix from the later two thirds of a stage's draws, pooled over chains.

    Regularised towards ``1e-3 I`` as Stan does (weight 5 / (n + 5)).
    """
    flat = jax.vmap(jax.vmap(lambda z: ravel_pytree(z)[0]))(draws)  # (chains, draws, d)
    x = np.asarray(flat)[:, flat.shape[1] // 3 :].reshape(-1, flat.shape[-1])
    n = x.shape[0]
    cov = np.atleast_2d(np.cov(x, rowvar=False))
    cov = n / (n + 5.0) * cov + 1e-3 * 5.0 / (n + 5.0) * np.eye(cov.shape[0])
    return cov if dense else np.diag(cov).copy()


def _stage(potential_gen: Callable, iterations: int, depth: int, config: NutsConfig, adapt: bool):
    """One NUTS stage over all chains of a block, compiled once for every block.

    With ``adapt`` the step size is tuned by dual averaging for ``iterations`` (metric fixed);
    without, the kernel is frozen and the draws are the posterior sample.
    """
    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_gen, algo="NUTS")

    def chain(key, z, block, inverse_mass, step_size):
        state = init_kernel(
            z,
            num_warmup=iterations if adapt else 0,
            step_size=step_size,
            inverse_mass_matrix=inverse_mass,
            adapt_step_size=adapt,
            adapt_mass_matrix=False,
            dense_mass=inverse_mass.ndim == 2,
            target_accept_prob=config.target_accept,
            max_tree_depth=depth,
            find_heuristic_step_size=adapt,
            model_args=(block,),
            rng_key=key,
        )

        def step(state, _):
            state = sample_kernel(state, model_args=(block,))
            stats = (state.diverging, state.num_steps, state.energy, state.accept_prob)
            return state, (state.z, stats)

        state, (draws, stats) = jax.lax.scan(step, state, None, length=iterations)
        return state.z, state.adapt_state.step_size, draws, stats

    in_axes = (0, 0, None, None, 0)
    if resolve_chain_method(config.chains, config.chain_method) == "parallel":
        return jax.pmap(chain, in_axes=in_axes)
    return jax.jit(jax.vmap(chain, in_axes=in_axes))


def run_blocked_nuts(
    key: jax.Array,
    data: ModelData,
    priors: Priors,
    config: NutsConfig,
    log: Callable[[str], None] | None = None,
) -> BlockedPosterior:
    """Run NUTS separately on each target language's block and assemble the joint posterior.

    Every block is sampled by the same compiled kernels (padded shapes), chains in parallel
    over host devices. Warm-up runs in three stages per block (thirds of ``config.warmup``,
    :func:`warmup_stages`):

    1. *explore*: from the prior-centre starts, unit metric, tree depth capped at
       :data:`EXPLORE_TREE_DEPTH`, step size tuned: the chains reach the typical set without
       the 1000-step trajectories a unit metric costs there;
    2. *metric*: step size tuned under the metric estimated from stage 1; the
       covariance of its later draws, pooled over the chains, becomes the final metric;
    3. *step size*: step size tuned under the final metric.

    Then ``draws_per_chain`` draws with the kernel frozen. Compared with Stan's windowed
    adaptation (NumPyro's default) this spends no iterations on a 35-dimensional dense metric
    estimated from 25 draws, and pooling the chains quadruples the draws behind the metric;
    measured in ``docs/performance.md``.

    Parameters
    ----------
    key : jax.Array
        PRNG key; block ``i`` uses ``fold_in(key, i)``.
    data : ModelData
        Observations of the full problem (reference units).
    priors : Priors
        Prior settings; hierarchical transfer couples the blocks and is refused.
    config : NutsConfig
        Sampler settings, applied to every block (``init="map"`` is not supported here).
    log : callable, optional
        Receives one progress line per block.

    Returns
    -------
    BlockedPosterior
    """
    if priors.hierarchical_transfer:
        raise ClimbError("hierarchical transfer couples the languages: use --blocks joint.")
    m = data.point_r.shape[-1]
    blocks = language_blocks(data)
    model = functools.partial(climb_model, priors=priors)
    info = initialize_model(
        jax.random.PRNGKey(0), model, model_args=(blocks[0],), dynamic_args=True
    )
    explore, metric, _ = warmup_stages(config.warmup)  # the last two are equal
    depth = config.max_tree_depth
    adapt = _stage(info.potential_fn, metric, depth, config, True)  # stages 2 and 3
    warmup = (
        _stage(info.potential_fn, explore, min(EXPLORE_TREE_DEPTH, depth), config, True),
        adapt,
        adapt,
    )
    sample = _stage(info.potential_fn, config.draws_per_chain, depth, config, False)
    d = ravel_pytree(info.param_info.z)[0].size
    names = latent_sites(priors)
    latent = {n: [] for n in names}
    extra = {n: [] for n in EXTRA_FIELDS}
    for i, block in enumerate(blocks):
        block_key = jax.random.fold_in(key, i)
        init_key, run_key = jax.random.split(block_key)
        z = chain_inits(init_key, block, priors, config.chains)  # prior-centre start
        keys = jax.random.split(run_key, 4 * config.chains).reshape(4, config.chains, -1)
        inverse_mass = np.eye(d) if config.dense_mass else np.ones(d)
        step_size = jnp.ones(config.chains)
        for k, stage in enumerate(warmup):
            z, step_size, draws, _ = stage(keys[k], z, block, inverse_mass, step_size)
            if k < len(warmup) - 1:  # the metric of the next stage
                inverse_mass = _pooled_metric(draws, config.dense_mass)
        _, _, draws, stats = sample(keys[3], z, block, inverse_mass, step_size)
        values = from_unconstrained(jax.device_get(draws))
        for n in names:
            latent[n].append(np.asarray(values[n]))
        fields = dict(zip(EXTRA_FIELDS, jax.device_get(stats), strict=True))
        for n in EXTRA_FIELDS:
            extra[n].append(np.asarray(fields[n]))
        if log is not None:
            steps = float(np.mean(fields["num_steps"]))
            div = int(np.sum(fields["diverging"]))
            log(f"  block {i + 1}/{m}: {steps:.0f} leapfrog steps per draw, {div} divergent")

    _, target = pair_indices(m)
    joint = {}
    for n in names:
        parts = latent[n]
        if n not in _PAIR_SITES:  # per-language site: one column per block
            joint[n] = np.concatenate(parts, axis=-1)
        else:  # pair site: the pairs into language i, in the joint pair order
            out = np.empty(parts[0].shape[:-1] + (target.size,))
            for i, part in enumerate(parts):
                out[..., target == i] = part
            joint[n] = out
    steps = np.stack(extra["num_steps"])
    combined = {
        "diverging": np.any(np.stack(extra["diverging"]), axis=0),
        "num_steps": steps.max(axis=0),
        "n_steps_total": steps.sum(axis=0),
        "energy": np.sum(np.stack(extra["energy"]), axis=0),
        "accept_prob": np.mean(np.stack(extra["accept_prob"]), axis=0),
    }
    chains, draws = combined["diverging"].shape
    flat = {k: jnp.asarray(v.reshape((chains * draws,) + v.shape[2:])) for k, v in joint.items()}
    one = handlers.substitute(climb_model, data={k: v[0] for k, v in flat.items()})
    trace = handlers.trace(handlers.seed(one, 0)).get_trace(data, priors)
    deterministic = [k for k, site in trace.items() if site["type"] == "deterministic"]
    sites = Predictive(climb_model, posterior_samples=flat, return_sites=deterministic)(
        jax.random.PRNGKey(0), data, priors
    )
    samples = {k: np.asarray(v).reshape((chains, draws) + v.shape[1:]) for k, v in sites.items()}
    samples |= joint
    return BlockedPosterior(samples, combined, data, priors, config.max_tree_depth)
