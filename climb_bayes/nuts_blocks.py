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
from numpyro import handlers
from numpyro.infer import NUTS, Predictive

from climb_bayes.errors import ClimbError
from climb_bayes.model import ModelData, climb_model, latent_sites, pair_indices
from climb_bayes.nuts import EXTRA_FIELDS, NutsConfig, chain_inits, nuts_mcmc
from climb_bayes.priors import Priors

__all__ = [
    "BLOCK_MIN_LANGUAGES",
    "use_language_blocks",
    "language_blocks",
    "BlockedPosterior",
    "run_blocked_nuts",
]

BLOCK_MIN_LANGUAGES = 12
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

    Observations are padded to a common length (``obs_mask`` marks the real ones) so that every
    block has the same shapes and NUTS compiles once.
    """
    m = data.point_r.shape[-1]
    counts = np.bincount(data.obs_language, minlength=m)
    n_max = int(counts.max())
    blocks = []
    for i in range(m):
        order = [i] + [j for j in range(m) if j != i]
        sel = np.flatnonzero(data.obs_language == i)
        pad = n_max - sel.size
        blocks.append(
            data._replace(
                point_r=np.ascontiguousarray(data.point_r[:, order]),
                obs_point=np.concatenate([data.obs_point[sel], np.zeros(pad, np.int32)]),
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


def run_blocked_nuts(
    key: jax.Array,
    data: ModelData,
    priors: Priors,
    config: NutsConfig,
    log: Callable[[str], None] | None = None,
) -> BlockedPosterior:
    """Run NUTS separately on each target language's block and assemble the joint posterior.

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
    # Same shapes in every block (padded observations): compiled once.
    model = functools.partial(climb_model, priors=priors)
    mcmc = nuts_mcmc(model, config, jit_model_args=True)
    names = latent_sites(priors)
    latent = {n: [] for n in names}
    extra = {n: [] for n in EXTRA_FIELDS}
    for i, block in enumerate(blocks):
        block_key = jax.random.fold_in(key, i)
        init_key, run_key = jax.random.split(block_key)
        inits = chain_inits(init_key, block, priors, config.chains)  # prior-centre start
        mcmc.run(run_key, block, init_params=inits, extra_fields=EXTRA_FIELDS)
        draws = jax.device_get(mcmc.get_samples(group_by_chain=True))
        for n in names:
            latent[n].append(np.asarray(draws[n]))
        fields = jax.device_get(mcmc.get_extra_fields(group_by_chain=True))
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
