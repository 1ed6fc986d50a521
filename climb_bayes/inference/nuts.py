"""NUTS inference for the CLIMB model (NumPyro), chains in parallel over CPU cores.

Initialisation (measured, see ``docs/model.md``): by default (``init="laplace"``) every chain
takes its own jittered start near the prior centre (prior locations with transfer switched off,
jittered by a quarter of the prior spread; ``init="prior-centre"`` stops here), climbs to a
posterior mode by L-BFGS and starts from a Laplace draw there, inside the Gaussian's typical
band (:func:`climb_bayes.inference.laplace.mode_starts`); the inverse Hessian at the best mode
is NUTS's initial mass matrix. The modes reached are logged, so a multi-modal posterior is
reported rather than left to the seed, and the chains take the searches' starts in
proportion to their modes' Laplace evidence (:func:`climb_bayes.inference.laplace.evidence_picks`):
with one mode every chain keeps its own; a mode 18 nats less probable (5Mix-160M) gets none.
``init_to_median`` of the prior starts in regions of strong random transfer where warm-up can
stall, and starting every chain at the point fit
(``init="map"``) puts all chains in one (possibly wrong) mode and collapses hierarchical scales
(``tau_b`` -> 0), which stalls the sampler in a funnel.

References
----------
.. [1] Hoffman & Gelman (2014), "The No-U-Turn Sampler".
.. [2] Phan, Pradhan & Jankowiak (2019), "Composable Effects for Flexible and Accelerated
   Probabilistic Programming in NumPyro".
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import (
    MCMC,
    NUTS,
    init_to_median,
    init_to_sample,
    init_to_uniform,
    init_to_value,
)

from climb_bayes.errors import ClimbError
from climb_bayes.inference.laplace import evidence_picks, mode_starts
from climb_bayes.inference.point_fit import PointFit
from climb_bayes.model.climb_model import ModelData, climb_model, sampler_coordinates, with_mask
from climb_bayes.model.observation import DF_MIN, LEARNED_DF_START
from climb_bayes.model.priors import Priors

__all__ = [
    "INITS",
    "BLOCKS",
    "EXTRA_FIELDS",
    "NutsConfig",
    "run_nuts",
    "nuts_mcmc",
    "chain_init_values",
    "site_normals",
    "resolve_chain_method",
    "prior_centre",
    "chain_inits",
    "LOWER_BOUNDED_SITES",
    "lower_bounds",
    "from_unconstrained",
    "FIT_SAMPLER",
]

INITS = ("laplace", "prior-centre", "median", "prior", "map")
BLOCKS = ("auto", "joint", "language")
EXTRA_FIELDS = ("diverging", "num_steps", "energy", "accept_prob")
"""Per-draw sampler statistics recorded with every fit."""


class NutsConfig(NamedTuple):
    """NUTS settings. ``samples`` is the total number of kept draws over all chains."""

    chains: int = 4
    warmup: int = 1000
    samples: int = 2000
    target_accept: float = 0.95
    max_tree_depth: int = 10
    init: str = "laplace"
    dense_mass: bool = True
    chain_method: str = "auto"
    progress_bar: bool | None = None
    blocks: str = "auto"

    @property
    def draws_per_chain(self) -> int:
        """Kept draws per chain (``ceil(samples / chains)``)."""
        return -(-self.samples // self.chains)

    def check(self) -> None:
        """Raise :class:`ClimbError` on settings NUTS cannot use."""
        if self.chains < 1:
            raise ClimbError(f"--chains must be >= 1, got {self.chains}.")
        if self.samples < self.chains:
            raise ClimbError(f"--samples ({self.samples}) must be >= --chains ({self.chains}).")
        if self.warmup < 1:
            raise ClimbError(f"--warmup must be >= 1, got {self.warmup}.")
        if not 0 < self.target_accept < 1:
            raise ClimbError(f"--target-accept must lie in (0, 1), got {self.target_accept}.")
        if not 1 <= self.max_tree_depth <= 15:
            raise ClimbError(f"--max-tree-depth must lie in 1..15, got {self.max_tree_depth}.")
        if self.init not in INITS:
            raise ClimbError(f"--init must be one of {', '.join(INITS)}, got {self.init!r}.")
        if self.blocks not in BLOCKS:
            raise ClimbError(f"--blocks must be one of {', '.join(BLOCKS)}, got {self.blocks!r}.")


FIT_SAMPLER = NutsConfig(chains=4, warmup=500, samples=4000, target_accept=0.98)
"""The sampler of ``climb-bayes fit`` (and of ``evaluate --shipped`` / ``--lfo``): 4 x (500
warm-up + 1000 draws) at target acceptance 0.98, which passed the convergence gate on the default
data for 4 of 4 seeds where :class:`NutsConfig`'s own defaults passed 0 (docs/model.md, "Default
sampler of `fit`")."""


def prior_centre(data: ModelData, priors: Priors) -> dict[str, np.ndarray]:
    """Centre of the prior in the latent space, with transfer switched off."""
    m, p = data.n_targets, data.n_pairs
    centre = {
        "log_A": np.asarray(data.reducible_loc, float),
        "log_E": np.asarray(data.irreducible_loc, float),
        "beta": np.full(m, priors.beta_median),
        "eta": np.full(m, priors.eta_median),
        "sigma": np.full(m, priors.noise_scale / 2),
        "kappa_offdiag": np.zeros(p),
    }
    if priors.run_effect:
        centre["sigma_run"] = np.full(m, priors.run_effect_scale / 2)
    if priors.learned_df:
        centre["df"] = np.full(m, LEARNED_DF_START)
    if priors.hierarchical_transfer:
        centre |= {
            "mu_b": np.zeros(()),
            "tau_b": np.asarray(priors.transfer_scale / 2),
            "b_z": np.zeros(p),
        }
    else:
        centre["b_offdiag"] = np.zeros(p)
    return centre


def _jittered_inits(
    key: jax.Array, data: ModelData, priors: Priors, chains: int, base: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Per-chain initial values: ``base`` jittered by a quarter of the prior spread."""
    spread = {
        "log_L0": 0.5 * priors.irreducible_scale,
        "logit_f": priors.reducible_scale,
        "log_slope": priors.beta_log_sd,
        "b_saturated": 0.5 * priors.transfer_scale,
        "kappa_saturated": 0.5 * priors.decay_scale,
        "b_z": 1.0,
        "mu_b": priors.transfer_scale,
    }
    log_spread = {"eta": priors.eta_log_sd, "sigma": 0.5, "sigma_run": 0.5, "tau_b": 0.5, "df": 0.5}
    bound = lower_bounds(priors)  # jittered on log(value - bound), as NUTS moves them
    out = {}
    for name, z in site_normals(key, base, chains).items():
        value = np.asarray(base[name], float)
        if name in log_spread:
            low = bound[name]  # every log-spread site is lower-bounded
            out[name] = low + (value - low) * np.exp(0.25 * log_spread[name] * z)
        else:
            out[name] = value + 0.25 * spread.get(name, 0.1) * z
    return out


def site_normals(key: jax.Array, values: dict[str, Any], n: int) -> dict[str, np.ndarray]:
    """``n`` standard-normal draws of the shape of every site of ``values``, ``(n, *shape)``;
    site ``i`` in sorted-name order from ``fold_in(key, i)`` (the jitter of chain starts)."""
    return {
        name: np.array(jax.random.normal(jax.random.fold_in(key, i), (n,) + np.shape(value)))
        for i, (name, value) in enumerate(sorted(values.items()))
    }


def chain_inits(
    key: jax.Array,
    data: ModelData,
    priors: Priors,
    chains: int,
    base: dict[str, np.ndarray] | None = None,
) -> dict[str, jnp.ndarray]:
    """Per-chain starting values in NUTS's unconstrained coordinates.

    ``base`` (sampled coordinates, see :func:`climb_bayes.model.climb_model.sampler_coordinates`;
    the prior centre with transfer off when omitted) jittered by a quarter of the prior spread: the
    ``prior-centre`` start of :func:`run_nuts`, also used by SBC.
    """
    if base is None:
        base = sampler_coordinates(prior_centre(data, priors), data, priors)
    return _to_unconstrained(_jittered_inits(key, data, priors, chains, base), priors)


def run_nuts(
    key: jax.Array,
    data: ModelData,
    priors: Priors,
    config: NutsConfig | None = None,
    point: PointFit | None = None,
    log: Callable[[str], None] | None = None,
) -> MCMC:
    """Run NUTS on the CLIMB model and return the NumPyro ``MCMC`` object.

    Parameters
    ----------
    key : jax.Array
        PRNG key (same key and settings give identical draws).
    data : ModelData
        Observations in reference units.
    priors : Priors
        Prior settings.
    config : NutsConfig
        Sampler settings.
    point : PointFit, optional
        Needed for ``init="map"`` (chains start jittered around the point fit).
    log : callable, optional
        Progress lines (the modes the ``"laplace"`` starts found).
    """
    config = config or NutsConfig()
    config.check()
    log = log or (lambda _msg: None)
    init_key, run_key = jax.random.split(key)
    inverse_mass = None
    if config.init == "median":
        strategy, init_params = init_to_median(num_samples=15), None
    elif config.init == "prior":
        strategy, init_params = init_to_sample(), None
    else:
        if config.init == "map":
            if point is None:
                raise ClimbError("init='map' needs a point fit.")
            base = dict(point.values)
        else:
            base = prior_centre(data, priors)
        base = sampler_coordinates(base, data, priors)
        strategy = init_to_value(values={k: jnp.asarray(v) for k, v in base.items()})
        init_params = chain_inits(init_key, data, priors, config.chains, base)
        if config.init == "laplace":
            # with_mask: these searches share the programs of the leave-future-out folds'
            # Laplace fits, whose data are padded to this table's shape and masked
            starts = mode_starts(
                climb_model,
                (with_mask(data), priors),
                base,
                init_params,
                key=init_key,
                dense=config.dense_mass,
            )
            pick = evidence_picks(starts, config.chains, jax.random.fold_in(init_key, 1))
            init_params = {k: v[pick] for k, v in starts.init_params.items()}
            inverse_mass = starts.inverse_mass
            log(
                f"chain starts: L-BFGS from {config.chains} prior-centre starts reached "
                f"{starts.modes} mode(s) (potential "
                + ", ".join(f"{p:.1f}" for p in starts.potentials)
                + "); each chain starts from a Laplace draw at a mode picked by its Laplace "
                f"evidence (searches {', '.join(str(int(i) + 1) for i in pick)})"
            )
        init_params = chain_init_values(init_params, config.chains)

    mcmc = nuts_mcmc(climb_model, config, init_strategy=strategy, inverse_mass=inverse_mass)
    mcmc.run(
        run_key,
        data,
        priors,
        init_params=init_params,
        extra_fields=EXTRA_FIELDS,
    )
    return mcmc


def resolve_chain_method(chains: int, requested: str = "auto") -> str:
    """NumPyro's ``chain_method``: ``"auto"`` is parallel when there is a host device per chain
    (see :mod:`climb_bayes`), else vectorised; any other value is returned as given."""
    if requested != "auto":
        return requested
    return "parallel" if jax.local_device_count() >= chains else "vectorized"


def chain_init_values(values: dict[str, Any], chains: int) -> dict[str, Any]:
    """Per-chain start values ``(chains, ...)`` in the form ``MCMC.run(init_params=...)`` takes:
    NumPyro wants one chain's values without the chain axis."""
    return {k: v[0] for k, v in values.items()} if chains == 1 else values


def nuts_mcmc(
    model: Callable[..., None],
    config: NutsConfig,
    init_strategy: Callable[..., Any] = init_to_uniform,
    inverse_mass: np.ndarray | None = None,
) -> MCMC:
    """NumPyro ``MCMC`` with a NUTS kernel on ``model``, configured by ``config``.

    Chains run in parallel over host devices when there are enough of them (see
    :mod:`climb_bayes`), else vectorised; the progress bar shows only on a terminal unless
    ``config.progress_bar`` says otherwise.
    """
    chain_method = resolve_chain_method(config.chains, config.chain_method)
    progress = sys.stderr.isatty() if config.progress_bar is None else config.progress_bar
    kernel = NUTS(
        model,
        target_accept_prob=config.target_accept,
        max_tree_depth=config.max_tree_depth,
        init_strategy=init_strategy,
        dense_mass=config.dense_mass,
        inverse_mass_matrix=None if inverse_mass is None else jnp.asarray(inverse_mass),
    )
    return MCMC(
        kernel,
        num_warmup=config.warmup,
        num_samples=config.draws_per_chain,
        num_chains=config.chains,
        chain_method=chain_method,
        progress_bar=progress,
    )


LOWER_BOUNDED_SITES = {"eta": 0.0, "sigma": 0.0, "sigma_run": 0.0, "tau_b": 0.0, "df": DF_MIN}
"""Latent sites NUTS moves as ``log(value - bound)`` (NumPyro's default transform of a
``greater_than(bound)`` support); the rest are real. ``df``'s bound is the priors'
``student_df_min`` (:func:`lower_bounds`)."""


def lower_bounds(priors: Priors) -> dict[str, float]:
    """:data:`LOWER_BOUNDED_SITES` with ``df``'s bound from ``priors``."""
    return LOWER_BOUNDED_SITES | {"df": float(priors.student_df_min)}


def _to_unconstrained(values: dict[str, np.ndarray], priors: Priors) -> dict[str, jnp.ndarray]:
    """Map bounded sites to the log scale NUTS works on (NumPyro's default transforms)."""
    bound = lower_bounds(priors)
    return {k: jnp.log(v - bound[k]) if k in bound else jnp.asarray(v) for k, v in values.items()}


def from_unconstrained(values: dict[str, np.ndarray], priors: Priors) -> dict[str, np.ndarray]:
    """Inverse of the sampler's transforms: latent values from NUTS's coordinates."""
    bound = lower_bounds(priors)
    return {k: np.exp(v) + bound[k] if k in bound else np.asarray(v) for k, v in values.items()}
