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
any block diverged (in any iteration, thinned-out ones included), ``num_steps`` of the deepest
block (so tree-depth checks stay meaningful) with the total over blocks and iterations in
``n_steps_total``, the sum of the blocks' energies (the energy
of the product system) and the mean acceptance probability. E-BFMI is not taken from that sum
(a well-behaved block would dilute a bad one) nor from the thinned draws: each block's is
computed on every iteration's energy (:func:`block_bfmi`) and the fit reports the smallest.

Why NumPyro's tree builder and dual averaging and not its ``MCMC`` class: one ``MCMC`` per
block (public API, Stan's windowed adaptation, the same block models) took 318 s on the
16-language benchmark with max R-hat 1.013; this sampler takes 70 s with max R-hat 1.007 and
min bulk ESS 1,196 (``benchmarks/fit_speed.py --languages 16``, ``docs/performance.md``). The
difference is what ``MCMC`` cannot be told: the metric's shrinkage towards the identity on the
correlation scale (Stan's ``1e-3 I`` on the covariance scale gave 35-200 divergences), a metric
pooled over chains, the tree-depth cap of the first window, per-block thinning decided before
the draws, and one compiled kernel for every window, block and the draws. The functions used
(``build_tree``, ``dual_averaging``, ``velocity_verlet``, ``find_reasonable_step_size``,
``momentum_generator``) are the building blocks of NumPyro's own NUTS but not its documented
API; ``tests/inference/test_nuts_blocks.py`` checks the result against the joint NUTS
posterior, so a change in them fails the suite (run on NumPyro 0.22 with Python 3.11 and
3.12). The DataTree is built from plain arrays with ``arviz_base.from_dict``, like the joint
fit's.

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
from numpyro.diagnostics import effective_sample_size
from numpyro.infer.hmc import momentum_generator
from numpyro.infer.hmc_util import (
    IntegratorState,
    build_tree,
    dual_averaging,
    euclidean_kinetic_energy,
    find_reasonable_step_size,
    velocity_verlet,
)
from numpyro.infer.util import potential_energy

from climb_bayes.errors import ClimbError
from climb_bayes.inference.nuts import (
    EXTRA_FIELDS,
    NutsConfig,
    chain_inits,
    from_unconstrained,
    resolve_chain_method,
)
from climb_bayes.model.climb_model import (
    ModelData,
    climb_model,
    latent_sites,
    model_trace,
    pair_indices,
)
from climb_bayes.model.observation import pad_segment_layout, segment_layout
from climb_bayes.model.priors import Priors

__all__ = [
    "BLOCK_MIN_LANGUAGES",
    "use_language_blocks",
    "language_blocks",
    "BlockedPosterior",
    "EXPLORE_TREE_DEPTH",
    "CHUNK",
    "WARMUP_WINDOWS",
    "METRIC_SHRINKAGE",
    "warmup_windows",
    "TARGET_ESS_PER_DRAW",
    "REFERENCE_DRAWS",
    "MAX_THIN",
    "block_thinning",
    "run_blocked_nuts",
]

BLOCK_MIN_LANGUAGES = 8
"""``blocks="auto"`` samples per language from this many languages up (measured crossover,
``docs/performance.md``)."""

_PAIR_SITES = ("b_saturated", "kappa_saturated")

METRIC_SHRINKAGE = 2.0
"""Scale of the identity the pooled correlation matrix is shrunk towards, with weight
``5 / (n + 5)`` (measured on 16 languages with 500 warm-up: 1e-3, Stan's scale for
covariances, gave 197 divergences, 1e-1 six, 1 none; with 1000 warm-up (twice the draws
per window, half the weight) 1 gave 7-10 divergences in 2 of 4 seeds, 2 none)."""


def use_language_blocks(config: NutsConfig, priors: Priors, n_languages: int) -> bool:
    """Whether ``config.blocks`` asks for per-language blocks under these priors.

    ``"auto"`` picks blocks when the posterior factorises (no hierarchical transfer), the
    chains do not start at a point fit and there are at least :data:`BLOCK_MIN_LANGUAGES`
    (blocks start from the prior centre whether ``init`` is ``"laplace"`` or
    ``"prior-centre"``: their explore stage is their start).

    Raises
    ------
    ClimbError
        ``blocks="language"`` with hierarchical transfer or ``init="map"``.
    """
    if config.blocks == "joint":
        return False
    possible = not priors.hierarchical_transfer and config.init in ("laplace", "prior-centre")
    if config.blocks == "language":
        if not possible:
            raise ClimbError(
                "--blocks language needs independent languages and its own start (each "
                "block explores from the prior centre): drop hierarchical_transfer from the "
                "priors, use --init laplace or prior-centre, or --blocks joint."
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
    g_max = max(_block_group_count(data, data.obs_language == i) for i in range(m))
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
                obs_group=_block_groups(data, sel, n_max),
                group_language=None if data.obs_group is None else np.zeros(g_max, np.int32),
                reducible_loc=np.asarray(data.reducible_loc, float)[[i]],
                irreducible_loc=np.asarray(data.irreducible_loc, float)[[i]],
            )
        )
    return _with_segment_layouts(blocks)


def _with_segment_layouts(blocks: list[ModelData]) -> list[ModelData]:
    """``blocks`` with the layout of their run groups (:class:`SegmentLayout`), padded to one
    shape: the kernel gets each block's data as arguments (traced), where the grouped
    likelihood would otherwise take segment means and a Student-t normaliser per run group
    (:class:`~climb_bayes.model.observation.GroupedNoise`, ``layout``)."""
    if blocks[0].obs_group is None:  # no run groups (and then no ``group_language``)
        return blocks
    layouts = [segment_layout(b.obs_group, b.obs_mask, b.n_groups, b.obs_language) for b in blocks]
    n_pairs = max(lay.pair_member.size for lay in layouts)
    return [
        b._replace(segment_layout=pad_segment_layout(lay, n_pairs))
        for b, lay in zip(blocks, layouts, strict=True)
    ]


def _block_group_count(data: ModelData, sel: np.ndarray) -> int:
    """Number of run groups among the observations ``sel`` (0 without groups)."""
    return 0 if data.obs_group is None else int(np.unique(data.obs_group[sel]).size)


def _block_groups(data: ModelData, sel: np.ndarray, n_max: int) -> np.ndarray | None:
    """Run groups of a block's observations, renumbered from 0 and padded (padding: 0)."""
    if data.obs_group is None:
        return None
    _, dense = np.unique(data.obs_group[sel], return_inverse=True)
    return np.concatenate([dense.ravel(), np.zeros(n_max - sel.size, np.int64)]).astype(np.int32)


class BlockedPosterior:
    """Joint draws assembled from per-language blocks.

    It answers the two questions :func:`climb_bayes.inference.fitting.fit_runs` asks of NumPyro's
    ``MCMC`` (``get_samples``, ``get_extra_fields``), so both samplers feed one DataTree builder
    (``arviz_base.from_dict``), plus what only blocks have: the thinning, E-BFMI and divergent
    kept draws per block.
    """

    def __init__(self, samples: dict[str, np.ndarray], extra: dict[str, np.ndarray]) -> None:
        self._samples = samples  # site -> (chains, draws, ...): latent and deterministic
        self._extra = extra
        self.block_thinning: list[int] = []  # iterations per kept draw, per block
        self.block_bfmi: np.ndarray | None = None  # E-BFMI (blocks, chains), unthinned
        self.block_divergences: list[int] = []  # divergent kept draws, per block

    @staticmethod
    def _flatten(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: v.reshape((-1,) + v.shape[2:]) for k, v in d.items()}

    def get_samples(self, group_by_chain: bool = False) -> dict[str, np.ndarray]:
        """Draws of every site, ``(chains, draws, ...)`` or flattened over chains."""
        return dict(self._samples) if group_by_chain else self._flatten(self._samples)

    def get_extra_fields(self, group_by_chain: bool = False) -> dict[str, np.ndarray]:
        """Combined per-draw sampler statistics (see the module docstring)."""
        return dict(self._extra) if group_by_chain else self._flatten(self._extra)


EXPLORE_TREE_DEPTH = 6
"""Tree-depth cap of the first warm-up window (before any metric is known)."""

CHUNK = 50
"""NUTS iterations per call of the compiled kernel; warm-up and draws are whole chunks."""

WARMUP_WINDOWS = 5
"""Warm-up windows per block: explore, three metric windows, step size (see
:func:`warmup_windows`)."""


def warmup_windows(warmup: int) -> list[int]:
    """Chunks of :data:`CHUNK` iterations in each warm-up window of a block.

    ``ceil(warmup / CHUNK)`` chunks (at least one) split as evenly as possible into up to
    :data:`WARMUP_WINDOWS` windows, earlier windows taking the remainder. Warm-up is thereby
    rounded up to a multiple of :data:`CHUNK` iterations.
    """
    n = max(-(-warmup // CHUNK), 1)
    k = min(WARMUP_WINDOWS, n)
    return [n // k + (j < n % k) for j in range(k)]


def _pooled_metric(draws: dict[str, jax.Array], dense: bool) -> np.ndarray:
    """Inverse mass matrix from the later half of a window's draws, pooled over chains.

    The *correlation* matrix is shrunk towards the identity with Stan's weight ``5 / (n + 5)``
    (scale :data:`METRIC_SHRINKAGE`); the variances are kept. Stan shrinks the covariance
    towards ``1e-3 I``, which for transfer parameters of posterior sd ~0.003 (16-language
    blocks) inflates their thin directions up to 40-fold and forces a small step size.
    """
    leaves = [np.asarray(v) for v in jax.tree.leaves(draws)]  # ravel_pytree's order
    chains, n_draws = leaves[0].shape[:2]
    flat = np.concatenate([v.reshape(chains, n_draws, -1) for v in leaves], axis=-1)
    x = flat[:, n_draws // 2 :].reshape(-1, flat.shape[-1])
    n = x.shape[0]
    cov = np.atleast_2d(np.cov(x, rowvar=False))
    sd = np.sqrt(np.maximum(np.diag(cov), 1e-300))
    corr = cov / np.outer(sd, sd)
    corr = n / (n + 5.0) * corr + METRIC_SHRINKAGE * 5.0 / (n + 5.0) * np.eye(corr.shape[0])
    cov = corr * np.outer(sd, sd)
    return cov if dense else np.diag(cov).copy()


def _single_precision() -> Any:
    """Context in which JAX computes in float32 although the package enables float64.

    The block kernel runs in single precision, NumPyro's default: 1.6x faster than double
    on 16-language blocks (docs/performance.md). Shares, budgets in reference units and
    log-losses are O(1) there and the noise sd (~0.01) is far above float32 resolution;
    summaries after sampling are computed in double.
    """
    state = getattr(jax, "enable_x64", None)
    if state is not None:
        return state(False)
    from jax.experimental import disable_x64  # JAX < 0.7

    return disable_x64()


def _as_double(x: np.ndarray) -> np.ndarray:
    """Float arrays from the single-precision kernel as float64 (others unchanged)."""
    return x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x


def _block_potential(priors: Priors, block: ModelData) -> Callable:
    """Potential energy of a block in NumPyro's unconstrained coordinates (no compilation
    here, unlike :func:`numpyro.infer.util.initialize_model`)."""
    model = functools.partial(climb_model, priors=priors)
    return functools.partial(potential_energy, model, (block,), {})


def _mass_sqrt(inverse_mass: np.ndarray) -> np.ndarray:
    """Square root ``L`` of the mass matrix (``L L^T = M``), as NumPyro's momentum needs."""
    if inverse_mass.ndim == 1:
        return 1.0 / np.sqrt(inverse_mass)
    mass = np.linalg.inv(inverse_mass)
    return np.linalg.cholesky((mass + mass.T) / 2.0)


def _chunk_kernel(potential_gen: Callable, config: NutsConfig) -> Callable:
    """:data:`CHUNK` NUTS iterations for every chain of a block, compiled once for all blocks.

    Arguments ``(keys, z, step_size, averaging, inverse_mass, mass_sqrt, restart, adapt,
    depth, block)``: with ``restart`` the step size is first re-tuned by NumPyro's heuristic
    and dual averaging starts afresh; with ``adapt`` dual averaging updates the step size
    after every iteration; ``depth`` caps the tree depth (at most ``config.max_tree_depth``).
    Returns the last position, step size and averaging state, the draws and the per-draw
    statistics (:data:`~climb_bayes.inference.nuts.EXTRA_FIELDS`).
    """
    da_init, da_update = dual_averaging()
    kinetic = euclidean_kinetic_energy
    target = config.target_accept

    def chain(key, z, step_size, averaging, inverse_mass, mass_sqrt, restart, adapt, depth, block):
        potential = potential_gen(block)
        _, verlet = velocity_verlet(potential, kinetic)
        energy, grad = jax.value_and_grad(potential)(z)
        key, key_heuristic = jax.random.split(key)
        momentum = lambda z, _, k: momentum_generator(z, mass_sqrt, k)  # noqa: E731
        step_size = jax.lax.cond(  # restart and adapt are unbatched: a real branch
            restart,
            lambda s: find_reasonable_step_size(
                potential, kinetic, momentum, s, inverse_mass, (z, None, energy, grad),
                key_heuristic,
            ),
            lambda s: s,
            step_size,
        )  # fmt: skip
        fresh = da_init(jnp.log(10.0 * step_size))
        averaging = jax.tree.map(lambda a, b: jnp.where(restart, a, b), fresh, averaging)

        def step(carry, key):
            z, energy, grad, step_size, averaging = carry
            key_momentum, key_tree = jax.random.split(key)
            r = momentum_generator(z, mass_sqrt, key_momentum)
            tree = build_tree(
                verlet, kinetic, IntegratorState(z, r, energy, grad), inverse_mass, step_size,
                key_tree, max_tree_depth=(depth, config.max_tree_depth),
            )  # fmt: skip
            accept = tree.sum_accept_probs / tree.num_proposals
            updated = da_update(target - accept, averaging)
            averaging = jax.tree.map(lambda a, b: jnp.where(adapt, a, b), updated, averaging)
            step_size = jnp.where(adapt, jnp.exp(averaging[0]), step_size)
            z = tree.z_proposal
            carry = (z, tree.z_proposal_pe, tree.z_proposal_grad, step_size, averaging)
            stats = (tree.diverging, tree.num_proposals, tree.z_proposal_energy, accept)
            return carry, (z, stats)

        init = (z, energy, grad, step_size, averaging)
        carry, (draws, stats) = jax.lax.scan(step, init, jax.random.split(key, CHUNK))
        return carry[0], carry[3], carry[4], draws, stats

    in_axes = (0, 0, 0, 0) + (None,) * 6
    if resolve_chain_method(config.chains, config.chain_method) == "parallel":
        return jax.pmap(chain, in_axes=in_axes)
    return jax.jit(jax.vmap(chain, in_axes=in_axes))


TARGET_ESS_PER_DRAW = 1.0
"""Bulk ESS per kept draw a block aims for at :data:`REFERENCE_DRAWS` kept draws (see
:func:`block_thinning`)."""

REFERENCE_DRAWS = 2000
"""Kept draws (all chains) from which a block aims for a total bulk ESS of
``TARGET_ESS_PER_DRAW * REFERENCE_DRAWS`` rather than an ESS per draw (:func:`block_thinning`)."""

MAX_THIN = 4
"""Most iterations per kept draw in a block."""


def _warm_up(run_chunk: Callable, z: Any, config: NutsConfig) -> tuple:
    """The warm-up windows of one block (see :func:`run_blocked_nuts`).

    Returns the last position, step size, dual-averaging state and inverse metric, and the
    draws of the last window (the pilot for :func:`block_thinning`).
    """
    d = sum(np.size(v) // config.chains for v in jax.tree.leaves(z))
    inverse_mass = np.eye(d) if config.dense_mass else np.ones(d)
    step_size = jnp.ones(config.chains)
    # NumPyro's dual-averaging state (x, x_avg, g_avg, t, prox_center), one per chain; every
    # window starts it afresh (``restart``).
    averaging = (*(jnp.zeros(config.chains),) * 3, jnp.zeros(config.chains, int))
    averaging += (jnp.zeros(config.chains),)
    windows = warmup_windows(config.warmup)
    for w, n_chunks in enumerate(windows):
        depth = config.max_tree_depth if w else min(EXPLORE_TREE_DEPTH, config.max_tree_depth)
        window = []
        for c in range(n_chunks):
            z, step_size, averaging, draws, _ = run_chunk(
                z, step_size, averaging, inverse_mass, c == 0, True, depth
            )
            window.append(jax.device_get(draws))
        step_size = jnp.exp(averaging[1])  # the averaged iterate ends each window
        window_draws = jax.tree.map(lambda *x: np.concatenate(x, axis=1), *window)
        if w < len(windows) - 1:  # the metric of the next window
            inverse_mass = _pooled_metric(window_draws, config.dense_mass)
    return z, step_size, averaging, inverse_mass, window_draws


def block_thinning(pilot: dict[str, np.ndarray], draws: int = REFERENCE_DRAWS) -> int:
    """Iterations per kept draw for a block, from the draws of its last warm-up window.

    ``ceil(a / e)`` clipped to ``1..MAX_THIN``, where ``e`` is the smallest bulk ESS per draw
    over the block's coordinates in the pilot and ``a = TARGET_ESS_PER_DRAW * min(1,
    REFERENCE_DRAWS / draws)`` with ``draws`` the kept draws over all chains: from 2,000 draws
    up a block aims for the same total bulk ESS (2,000 per quantity), so 4,000 draws are
    thinned half as much (R-hat's noise follows the total ESS, not the draw count); fewer
    draws keep the per-draw aim. Decided before the draws
    are taken, so the kept chain is an ordinary (thinned) Markov chain. Rationale: a fit's
    max R-hat is taken over ~70 quantities per block (~1,100 at 16 languages), and with
    2000 draws it stays <= 1.01 only when every one has an ESS per draw near 1 (independent
    AR(1) chains: ESS per draw 0.54 already gives a max R-hat of 1.009-1.012 over 544
    quantities; 16-language fits with targets 0.5 / 0.75 / 1.0 had max R-hat above 1.01 in
    3 / 1 / 0 of 3 seeds, docs/performance.md). The blocks whose ``eta`` the data barely
    identify reach it only thinned.
    """
    ess = min(
        float(np.min(effective_sample_size(np.asarray(v).reshape(v.shape[:2] + (-1,)))))
        for v in pilot.values()
    )
    per_draw = ess / np.prod(next(iter(pilot.values())).shape[:2])
    aim = TARGET_ESS_PER_DRAW * min(1.0, REFERENCE_DRAWS / draws)
    return int(np.clip(np.ceil(aim / max(per_draw, 1e-12)), 1, MAX_THIN))


def _thinned_stats(stats: dict[str, np.ndarray], thin: int) -> dict[str, np.ndarray]:
    """Per-kept-draw statistics over each group of ``thin`` iterations.

    Divergent if any iteration of the group diverged (none is hidden by thinning), the most
    leapfrog steps of one iteration (``num_steps``, for the tree-depth check) and their sum
    (``steps_total``), energy of the kept iteration, mean acceptance.
    """
    group = {k: v.reshape(v.shape[0], -1, thin) for k, v in stats.items()}
    return {
        "diverging": group["diverging"].any(axis=-1),
        "num_steps": group["num_steps"].max(axis=-1),
        "steps_total": group["num_steps"].sum(axis=-1),
        "energy": group["energy"][..., -1],
        "accept_prob": group["accept_prob"].mean(axis=-1),
    }


def _sample_block(
    kernel: Callable, block: ModelData, key: jax.Array, priors: Priors, config: NutsConfig
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], int, np.ndarray]:
    """Warm up and sample one block: latent draws, per-draw statistics, the thinning and the
    block's E-BFMI per chain (:func:`block_bfmi`, on every iteration)."""
    init_key, run_key = jax.random.split(key)
    z = chain_inits(init_key, block, priors, config.chains)  # prior-centre start
    counter = iter(range(1 << 30))

    def run_chunk(z, step_size, averaging, inverse_mass, restart, adapt, depth):
        keys = jax.random.split(jax.random.fold_in(run_key, next(counter)), config.chains)
        sqrt = _mass_sqrt(inverse_mass)
        args = (z, step_size, averaging, inverse_mass, sqrt, restart, adapt, depth, block)
        with _single_precision():  # traced, compiled and run in float32
            return kernel(np.asarray(keys), *jax.tree.map(np.asarray, args))

    z, step_size, averaging, inverse_mass, pilot = _warm_up(run_chunk, z, config)
    thin = block_thinning(pilot, config.draws_per_chain * config.chains)
    n_iter = config.draws_per_chain * thin
    parts = []
    for _ in range(-(-n_iter // CHUNK)):
        z, _, _, draws, stats = run_chunk(
            z, step_size, averaging, inverse_mass, False, False, config.max_tree_depth
        )
        parts.append(jax.device_get((draws, stats)))
    draws, stats = jax.tree.map(
        lambda *x: _as_double(np.concatenate(x, axis=1)[:, :n_iter]), *parts
    )
    values = from_unconstrained(jax.tree.map(lambda x: x[:, thin - 1 :: thin], draws), priors)
    stats = dict(zip(EXTRA_FIELDS, stats, strict=True))
    return values, _thinned_stats(stats, thin), thin, block_bfmi(stats["energy"])


def block_bfmi(energy: np.ndarray) -> np.ndarray:
    """E-BFMI per chain of one block, on *every* iteration's energy (``(chains, iterations)``).

    Thinning first would inflate it (consecutive kept energies are further apart), and summing
    the blocks' energies would let a well-behaved block hide a bad one; the fit reports the
    smallest value over blocks and chains (arviz-stats' ``bfmi``).
    """
    import arviz_stats as azs

    return np.asarray(azs.bfmi(np.asarray(energy, dtype=float)))


def run_blocked_nuts(
    key: jax.Array,
    data: ModelData,
    priors: Priors,
    config: NutsConfig,
    log: Callable[[str], None] | None = None,
) -> BlockedPosterior:
    """Run NUTS separately on each target language's block and assemble the joint posterior.

    One compiled kernel (:data:`CHUNK` iterations, padded block shapes) serves every block,
    window and the draws; chains run in parallel over host devices. Warm-up runs in the
    windows of :func:`warmup_windows` (fifths of ``config.warmup``):

    1. *explore*: from the prior-centre starts, unit metric, tree depth capped at
       :data:`EXPLORE_TREE_DEPTH`, step size tuned: the chains reach the typical set without
       the 1000-step trajectories a unit metric costs there;
    2. three *metric* windows: each tunes the step size under the metric estimated from the
       later half of the previous window, pooled over the chains (:func:`_pooled_metric`);
    3. *step size*: tuned under the final metric.

    Then ``draws_per_chain`` draws with the kernel frozen, every ``thin``-th iteration kept
    (:func:`block_thinning`, from the last window). The kernel runs in float32
    (:func:`_single_precision`). Compared with Stan's windowed adaptation (NumPyro's default)
    this spends no iterations on a 35-dimensional dense metric estimated from 25 draws, and
    pooling the chains quadruples the draws behind the metric; measured in
    ``docs/performance.md``.

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
    kernel = _chunk_kernel(functools.partial(_block_potential, priors), config)
    names = latent_sites(priors)
    latent = {n: [] for n in names}
    extra = {n: [] for n in (*EXTRA_FIELDS, "steps_total")}
    thinning, bfmi = [], []
    for i, block in enumerate(blocks):
        block_key = jax.random.fold_in(key, i)
        values, stats, thin, block_ebfmi = _sample_block(kernel, block, block_key, priors, config)
        for n in names:
            latent[n].append(values[n])
        bfmi.append(block_ebfmi)
        for n, value in stats.items():
            extra[n].append(value)
        thinning.append(thin)
        if log is not None:
            steps = float(np.mean(stats["steps_total"]))
            div = int(np.sum(stats["diverging"]))
            log(
                f"  block {i + 1}/{m}: {steps:.0f} leapfrog steps per draw, {div} divergent"
                + (f", thinned by {thin}" if thin > 1 else "")
            )

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
    combined = {
        "diverging": np.any(np.stack(extra["diverging"]), axis=0),
        "num_steps": np.stack(extra["num_steps"]).max(axis=0),
        "n_steps_total": np.stack(extra["steps_total"]).sum(axis=0),
        "energy": np.sum(np.stack(extra["energy"]), axis=0),
        "accept_prob": np.mean(np.stack(extra["accept_prob"]), axis=0),
    }
    chains, draws = combined["diverging"].shape
    flat = {k: jnp.asarray(v.reshape((chains * draws,) + v.shape[2:])) for k, v in joint.items()}

    def deterministic(sample: dict[str, jax.Array]) -> dict[str, jax.Array]:
        trace = model_trace(sample, data, priors)
        return {k: site["value"] for k, site in trace.items() if site["type"] == "deterministic"}

    sites = jax.jit(jax.vmap(deterministic))(flat)  # one vectorised pass over the draws
    samples = {k: np.asarray(v).reshape((chains, draws) + v.shape[1:]) for k, v in sites.items()}
    samples |= joint
    posterior = BlockedPosterior(samples, combined)
    posterior.block_thinning = thinning
    posterior.block_bfmi = np.stack(bfmi)  # (blocks, chains)
    posterior.block_divergences = [int(np.sum(d)) for d in extra["diverging"]]
    return posterior
