"""NumPyro model of the CLIMB law with priors and a robust likelihood on log-loss.

The model is written in reference units (budgets divided by ``d_ref``), see
:mod:`climb_bayes.priors`. Deterministic sites give the parameters back in tokens
(``log_B``, ``k``) and as matrices (``b``, ``k`` indexed ``[source, target]``).

Sites
-----
latent : ``log_L0`` (language), ``logit_f`` (language), ``beta`` (language),
    ``b_offdiag`` (pair), ``kappa_offdiag`` (pair), ``eta`` (language), ``sigma`` (language);
    with hierarchical transfer also ``mu_b``, ``tau_b`` and ``b_z`` (pair).
deterministic : ``log_A``, ``log_E``, ``log_B``, ``B``, ``E`` (language), ``b``, ``k``
    (source_language, language), ``b_offdiag`` (pair, hierarchical case).
observed : ``log_loss`` (obs).

Parameterisation
----------------
The priors are on ``log A_i`` (reducible loss at ``d_ref``), ``log E_i`` and ``beta_i``, but
NUTS does not move in ``(log A, log E)``: on two budgets the data pin down the total loss at
the reference budget and its local slope, leaving ``(log A, beta, log E)`` on a curved ridge
(posterior correlations of 0.9-0.99 measured, tree depth saturated at 10). The sampler works
on ``log L0 = log(A + E)`` and ``logit f = log A - log E`` (``f = A / (A + E)``, the reducible
share of the loss at ``d_ref``). The map ``(log L0, logit f) -> (log A, log E)`` has unit
Jacobian determinant, so the priors on ``log A`` and ``log E`` are added unchanged with
``numpyro.factor`` and the posterior is exactly the one the priors define.

References
----------
.. [1] Guo et al. (2025), Eq. (6) (the law).
.. [2] Besiroglu et al. (2024), "Chinchilla Scaling: A replication attempt" (fitting on
   log-loss with a robust loss).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from climb_bayes.law import log_loss
from climb_bayes.priors import Priors
from climb_bayes.runs import RunsData

__all__ = [
    "ModelData",
    "model_data",
    "reference_budget",
    "pair_indices",
    "pair_labels",
    "climb_model",
    "LATENT_SITES",
    "prior_locations",
]

LATENT_SITES = ("log_L0", "logit_f", "beta", "b_offdiag", "kappa_offdiag", "eta", "sigma")


class ModelData(NamedTuple):
    """Arrays the model conditions on (all NumPy; JAX converts them when traced)."""

    point_r: np.ndarray  # (P, m) proportions of each evaluation point
    point_d: np.ndarray  # (P,) tokens seen / d_ref
    obs_point: np.ndarray  # (N,) int
    obs_language: np.ndarray  # (N,) int
    obs_log_loss: np.ndarray  # (N,) log of observed loss
    reducible_loc: np.ndarray  # (m,) prior location of log_A
    irreducible_loc: np.ndarray  # (m,) prior location of log_E
    d_ref: float


def reference_budget(tokens: np.ndarray) -> float:
    """Power of ten nearest the geometric mean of ``tokens`` (the model's budget unit)."""
    tokens = np.asarray(tokens, dtype=float)
    return float(10.0 ** np.round(np.mean(np.log10(tokens))))


def pair_indices(m: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) indices of the ``m (m - 1)`` off-diagonal transfer pairs, row-major."""
    src, tgt = np.nonzero(~np.eye(m, dtype=bool))
    return src, tgt


def pair_labels(languages: tuple[str, ...] | list[str]) -> list[str]:
    """Labels ``"src->tgt"`` of the off-diagonal pairs, in :func:`pair_indices` order."""
    src, tgt = pair_indices(len(languages))
    return [f"{languages[s]}->{languages[t]}" for s, t in zip(src, tgt, strict=True)]


def prior_locations(runs: RunsData, priors: Priors) -> tuple[np.ndarray, np.ndarray]:
    """Per-language prior locations of ``log_A`` and ``log_E`` (resolving ``"auto"``)."""
    m = runs.n_languages
    med = np.array(
        [np.median(runs.obs_loss[runs.obs_language == i]) for i in range(m)], dtype=float
    )
    auto = np.log(med / 2.0)

    def resolve(setting: Any) -> np.ndarray:
        if isinstance(setting, str):
            return auto
        if isinstance(setting, dict):
            return np.array(
                [float(setting.get(lang, a)) for lang, a in zip(runs.languages, auto, strict=True)]
            )
        return np.full(m, float(setting))

    return resolve(priors.reducible_loc), resolve(priors.irreducible_loc)


def model_data(runs: RunsData, priors: Priors, d_ref: float | None = None) -> ModelData:
    """Assemble :class:`ModelData` from a validated runs table."""
    d_ref = reference_budget(runs.point_tokens) if d_ref is None else float(d_ref)
    red, irr = prior_locations(runs, priors)
    return ModelData(
        point_r=np.asarray(runs.run_proportions[runs.point_run], dtype=float),
        point_d=np.asarray(runs.point_tokens, dtype=float) / d_ref,
        obs_point=np.asarray(runs.obs_point, dtype=np.int32),
        obs_language=np.asarray(runs.obs_language, dtype=np.int32),
        obs_log_loss=np.log(np.asarray(runs.obs_loss, dtype=float)),
        reducible_loc=red,
        irreducible_loc=irr,
        d_ref=d_ref,
    )


def _scatter_pairs(values: jnp.ndarray, m: int) -> jnp.ndarray:
    src, tgt = pair_indices(m)
    return jnp.zeros(values.shape[:-1] + (m, m), values.dtype).at[..., src, tgt].set(values)


def climb_model(data: ModelData, priors: Priors, observed: bool = True) -> None:
    """NumPyro model of per-language log validation loss under the CLIMB law.

    Parameters
    ----------
    data : ModelData
        Design and observations (see :func:`model_data`).
    priors : Priors
        Prior hyper-parameters.
    observed : bool
        If False, ``log_loss`` is sampled (prior/posterior predictive) instead of conditioned.

    References
    ----------
    .. [1] Guo et al. (2025), Eq. (6).
    """
    m = data.point_r.shape[-1]
    n_pairs = m * (m - 1)
    with numpyro.plate("language", m, dim=-1):
        # Sampled coordinates; their own densities are masked out: the prior is the factor below.
        centre_L0 = np.logaddexp(data.reducible_loc, data.irreducible_loc)
        centre_f = np.asarray(data.reducible_loc) - np.asarray(data.irreducible_loc)
        log_L0 = numpyro.sample("log_L0", dist.Normal(centre_L0, 1.0).mask(False))
        logit_f = numpyro.sample("logit_f", dist.Normal(centre_f, 1.0).mask(False))
        log_A = numpyro.deterministic("log_A", log_L0 - jax.nn.softplus(-logit_f))
        log_E = numpyro.deterministic("log_E", log_L0 - jax.nn.softplus(logit_f))
        numpyro.factor(
            "prior_log_A_log_E",
            dist.Normal(data.reducible_loc, priors.reducible_scale).log_prob(log_A)
            + dist.Normal(data.irreducible_loc, priors.irreducible_scale).log_prob(log_E),
        )
        beta = numpyro.sample(
            "beta", dist.LogNormal(np.log(priors.beta_median), priors.beta_log_sd)
        )
        eta = numpyro.sample("eta", dist.LogNormal(np.log(priors.eta_median), priors.eta_log_sd))
        sigma = numpyro.sample("sigma", dist.HalfNormal(priors.noise_scale))

    if priors.hierarchical_transfer:
        mu_b = numpyro.sample("mu_b", dist.Normal(0.0, priors.transfer_scale))
        tau_b = numpyro.sample("tau_b", dist.HalfNormal(priors.transfer_scale))
    with numpyro.plate("pair", n_pairs, dim=-1):
        if priors.hierarchical_transfer:
            b_z = numpyro.sample("b_z", dist.Normal(0.0, 1.0))
            b_off = numpyro.deterministic("b_offdiag", mu_b + tau_b * b_z)
        else:
            b_off = numpyro.sample("b_offdiag", dist.Normal(0.0, priors.transfer_scale))
        kappa_off = numpyro.sample("kappa_offdiag", dist.Normal(0.0, priors.decay_scale))

    b = numpyro.deterministic("b", _scatter_pairs(b_off, m))
    kappa = _scatter_pairs(kappa_off, m)
    numpyro.deterministic("k", kappa * data.d_ref)
    log_B = numpyro.deterministic("log_B", log_A + beta * jnp.log(data.d_ref))
    numpyro.deterministic("B", jnp.exp(log_B))
    numpyro.deterministic("E", jnp.exp(log_E))

    pred = log_loss(data.point_r, data.point_d, log_A, beta, log_E, b, kappa, eta)
    loc = pred[data.obs_point, data.obs_language]
    scale = sigma[data.obs_language]
    if priors.likelihood == "normal":
        noise = dist.Normal(loc, scale)
    else:
        noise = dist.StudentT(priors.student_df, loc, scale)
    with numpyro.plate("obs", data.obs_log_loss.shape[0], dim=-1):
        numpyro.sample("log_loss", noise, obs=data.obs_log_loss if observed else None)
