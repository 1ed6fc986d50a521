"""Sampler coordinates of a power-law data term ``L = A d^(-beta) + E``.

Every law in the package has, per group, a reducible loss ``A`` at the reference budget, an
exponent ``beta`` and an irreducible loss ``E`` (CLIMB, Isolated and MSL: ``B, beta, E``; the
Data Mixing Law with a budget term: ``k, alpha, c``). Over one or two decades of budget the data
pin down the total loss at the reference budget and its local slope, and leave
``(log A, beta, log E)`` on a curved ridge: NUTS in those coordinates needs long trajectories
(tree depth saturated on CLIMB; 146-245 leapfrog steps per draw for Isolated, DML and MSL on the
shipped default data).

NUTS therefore moves in

* ``log_L0 = log(A + E)``: the log loss at the reference budget (share 1);
* ``logit_f = log A - log E``: ``f = A / (A + E)`` is the reducible share of that loss;
* ``log_slope = log(beta f)``: ``beta f`` is minus the local slope ``d log L / d log d`` at
  the reference budget;

which is what the data measure. The map ``(log_L0, logit_f) -> (log A, log E)`` has Jacobian
determinant -1 and ``(log_slope, logit_f) -> (log beta, logit_f)`` is triangular with unit
diagonal, so the priors on ``log A``, ``log E`` and ``log beta`` are added unchanged as
``numpyro.factor`` terms and the posterior is exactly the one they define (a genuine change of
variables, like CLIMB's saturated transfer coordinates, the other place a prior is a factor).

References
----------
.. [1] Hoffmann et al. (2022), "Training Compute-Optimal Large Language Models", Eq. (2) (the
   data term ``E + B / D^beta``).
.. [2] Betancourt & Girolami (2015), "Hamiltonian Monte Carlo for Hierarchical Models"
   (reparameterising a posterior whose geometry NUTS cannot adapt to).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["POWER_SITES", "PowerLaw", "sample_power_law", "power_coordinates"]

POWER_SITES = ("log_L0", "logit_f", "log_slope")
"""Names of the sampled coordinates."""


class PowerLaw(NamedTuple):
    """The data term in the law's coordinates (arrays of the prior's batch shape)."""

    log_A: jax.Array
    log_E: jax.Array
    beta: jax.Array


def sample_power_law(
    log_A_prior: dist.Distribution,
    log_E_prior: dist.Distribution,
    log_beta_prior: dist.Distribution,
    *,
    names: tuple[str, str, str] = ("log_A", "log_E", "beta"),
    event_dims: int = 0,
) -> PowerLaw:
    """Sample ``(log A, log E, beta)`` through the coordinates of :data:`POWER_SITES`.

    Call inside the model (and inside a plate when the sites are batched by one; otherwise pass
    ``event_dims``). The sampled sites carry masked placeholder densities centred on the priors;
    the priors themselves enter as two factors.

    Parameters
    ----------
    log_A_prior, log_E_prior : Distribution
        Priors of the log reducible loss at the reference budget and the log irreducible loss
        (nats/token before the log).
    log_beta_prior : Distribution
        Prior of the log exponent (a LogNormal prior on ``beta`` is a Normal one here).
    names : tuple of str
        Deterministic site names of ``log A``, ``log E`` and ``beta``.
    event_dims : int
        Trailing dimensions of the sites that are event dimensions (1 for a vector outside a
        plate).

    Returns
    -------
    PowerLaw
        ``log A``, ``log E``, ``beta``.
    """
    centre_f = log_A_prior.mean - log_E_prior.mean
    centre_L0 = jnp.logaddexp(log_A_prior.mean, log_E_prior.mean)
    centre_slope = log_beta_prior.mean - jnp.logaddexp(0.0, -centre_f)

    def placeholder(name: str, centre: jax.Array) -> jax.Array:
        return numpyro.sample(name, dist.Normal(centre, 1.0).mask(False).to_event(event_dims))

    log_L0 = placeholder("log_L0", centre_L0)
    logit_f = placeholder("logit_f", centre_f)
    log_slope = placeholder("log_slope", centre_slope)
    log_A = numpyro.deterministic(names[0], log_L0 - jax.nn.softplus(-logit_f))
    log_E = numpyro.deterministic(names[1], log_L0 - jax.nn.softplus(logit_f))
    log_beta = log_slope + jax.nn.softplus(-logit_f)
    beta = numpyro.deterministic(names[2], jnp.exp(log_beta))
    numpyro.factor(
        f"prior_{names[0]}_{names[1]}",
        log_A_prior.log_prob(log_A) + log_E_prior.log_prob(log_E),
    )
    numpyro.factor(f"prior_{names[2]}", log_beta_prior.log_prob(log_beta))
    return PowerLaw(log_A, log_E, beta)


def power_coordinates(log_A: np.ndarray, log_E: np.ndarray, beta: np.ndarray) -> dict:
    """The sampled coordinates (:data:`POWER_SITES`) of given ``log A``, ``log E``, ``beta``.

    Inverse of the map in :func:`sample_power_law` (NumPy; any shape).
    """
    log_A, log_E = np.asarray(log_A, dtype=float), np.asarray(log_E, dtype=float)
    logit_f = log_A - log_E
    return {
        "log_L0": np.logaddexp(log_A, log_E),
        "logit_f": logit_f,
        "log_slope": np.log(np.asarray(beta, dtype=float)) - np.logaddexp(0.0, -logit_f),
    }
