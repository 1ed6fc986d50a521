"""NumPyro model of the CLIMB law with priors and a robust likelihood on log-loss.

The model is written in reference units (budgets divided by ``d_ref``), see
:mod:`climb_bayes.model.priors`. Deterministic sites give the parameters back in tokens
(``log_B``, ``k``) and as matrices (``b``, ``k`` indexed ``[source, target]``).

Sites
-----
latent : ``log_L0``, ``logit_f``, ``log_slope``, ``eta``, ``sigma``, ``sigma_run``, ``df``
    (language; ``df``, the Student-t degrees of freedom, where ``student_df = "learned"``),
    ``b_saturated`` and ``kappa_saturated`` (pair); with hierarchical transfer
    ``mu_b``, ``tau_b`` and ``b_z`` (pair) replace ``b_saturated``.
deterministic : ``log_A``, ``log_E``, ``beta``, ``log_B``, ``B``, ``E`` (language),
    ``b_offdiag``, ``kappa_offdiag`` (pair), ``b``, ``k`` (source_language, language).
observed : ``log_loss`` (obs): one :class:`~climb_bayes.model.observation.GroupedNoise` vector
    (the points of one run and language share a marginalised run effect ``sigma_run``), or
    independent Student-t/Normal points with ``run_effect = false``.

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

Two more changes of coordinates follow the same rule (priors unchanged, Jacobians exact):

* ``log_slope = log(beta f)``: ``beta f`` is minus the local slope ``d log L / d log D`` at
  ``d_ref``, which two budgets pin down; ``beta = slope / f`` then moves with ``f`` along the
  ridge instead of across it. ``(log_slope, logit_f) -> (log beta, logit_f)`` is triangular
  with unit diagonal.
* ``b_saturated = b (1 - exp(-eta_i c))`` and ``kappa_saturated = kappa (1 - exp(-eta_i c))``
  for target language ``i``, where ``c`` is the reference share (``ModelData.reference_share``,
  ``Priors.reference_share``: by default the data's median share strictly between 0 and 1):
  where ``eta_i r_i`` is small the data only see the product of transfer and saturation, a
  curved ridge in ``(eta, b)``; the saturated coordinates are what the data measure. Jacobian:
  ``-log(1 - exp(-eta_i c))`` per pair and parameter. With the default ``"saturated"`` transfer
  prior ``c`` is part of the prior (the ``Normal(0, 0.5)`` is on the transfer at share ``c``),
  and with the full-share factor below the prior bounds each transfer at ``c`` and at 1, whose
  ratio ``(1 - exp(-eta)) / (1 - exp(-eta c))`` runs from 1 to ``1 / c`` as ``eta`` falls: a
  funnel between ``eta`` and the transfers, the deeper the smaller ``c``. On sparse mixtures
  the median share is small (RegMix: 0.040; 1/m = 0.077): RegMix's ubuntu_irc block took 1,137
  leapfrog steps per kept draw at 0.040, 184 at 1/13 and 1,812 at its own median share 0.019
  (4 x (500 + 1000), target 0.98). ``reference_share = "uniform"`` (1/m) is therefore offered,
  but it is not the default: on 5Mix-70M (1/m = 0.2 against a median of 0.125) the shipped
  predictive extrapolated worse with it (CRPS 0.0178 against 0.0145, MRE 2.63% against 2.21%;
  docs/model.md, 'Reference share').
* On one budget ``b_saturated`` is ``(b + kappa / d*) (1 - exp(-eta_i c))``, the saturated
  transfer at that budget ``d*`` (``ModelData.transfer_budget``; the observations span less
  than a factor 2): there the data see ``b + kappa / D`` and nothing else, so ``(b, kappa)``
  would lie on a ridge only the prior bounds. Otherwise ``d* = inf`` and it is ``b`` saturated,
  as above. Unit Jacobian; with the default prior ``kappa_saturated`` given ``b_saturated`` is
  the Gaussian conditional, a plain sample site. Measured on RegMix (13 language blocks, one
  budget): 4,092 leapfrog steps per kept draw before, 30-270 after
  (docs/model.md, 'One budget').

The full-share prior (``Priors.full_share_scale = s > 0``; ``s = 2`` by default since
2026-11-26, 0 switches it off) multiplies the prior by ``Normal(0, s)`` densities of ``b_ji (1 -
exp(-eta_i))`` and ``kappa_ji (1 - exp(-eta_i))``, the transfer at ``r_i = 1``, the most a token
of ``j`` is worth to ``i``. On one budget (``d*`` finite) it is one density per pair, of
``(b_ji + kappa_ji / d*) (1 - exp(-eta_i))``, the full-share transfer at the budget the data
measure: bounding ``b`` and ``kappa`` apart there puts an ``eta``-dependent scale on the
direction the data leave to the prior (``b`` up, ``kappa`` down at fixed ``b + kappa / d*``), a
funnel. Measured on RegMix (CLIMB alone, 13 one-budget blocks, 2 chains x (500 + 500), learned
``df``): the two densities gave R-hat 1.397, 21 divergences and 502 draws at tree depth 10 in
the benchmark run (docs/benchmarks.md); with the one density, see docs/model.md, 'One budget'. The
saturated prior alone says nothing about it: as ``eta_i -> 0`` the law becomes linear in ``r_i``
and a transfer of 0.5 at the share ``c`` is one of ``0.5 / c`` at full share. On the 16-language
benchmark (Algorithm-1 runs, run effect on) that region held about as much posterior mass as
the one around the truth (importance-sampling log evidence 675.6 vs 673.4; fit 59 nats worse,
volume of the free transfers 84 nats larger; full-share transfer ~6) and chains split between
the two (R-hat up to 5). It is a factor, not a change of coordinates, so it also lowers the
prior of small ``eta_i`` (with 5 languages and ``s = 2`` the prior median of ``eta`` moves from
5 to ~9); :func:`draw_prior` samples that exact prior (docs/model.md).

Measured on the shipped default data and a 5-language simulation (4 chains x (1000 + 500)):
leapfrog steps per draw 40-46 -> 16-17 and 110 -> 47-51, minimum bulk ESS 505-552 ->
1177-1252 and 317-378 -> 601-697 (docs/model.md).

References
----------
.. [1] Guo et al. (2025), Eq. (6) (the law).
.. [2] Besiroglu et al. (2024), "Chinchilla Scaling: A replication attempt" (fitting on
   log-loss with a robust loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from climb_bayes.data.padding import PaddedShape, pad_rows, padding_mask
from climb_bayes.data.runs import RunsData
from climb_bayes.model.law import log_loss_at_ratio, saturating_ratio
from climb_bayes.model.observation import (
    GroupedNoise,
    KeyedStudentT,
    SegmentLayout,
    df_prior,
    draw_df_prior,
)
from climb_bayes.model.power_coordinates import (
    POWER_SITES,
    power_coordinates,
    sample_power_law,
)
from climb_bayes.model.priors import Priors

__all__ = [
    "ModelData",
    "model_data",
    "pad_model_data",
    "with_mask",
    "reference_share",
    "sampler_coordinates",
    "draw_prior",
    "reference_budget",
    "transfer_budget",
    "ONE_BUDGET_SPREAD",
    "pair_indices",
    "pair_labels",
    "climb_model",
    "LATENT_SITES",
    "NATURAL_SITES",
    "latent_sites",
    "model_trace",
    "weighted_log_likelihood",
    "prior_locations",
]

LATENT_SITES = (
    *POWER_SITES,
    "b_saturated",
    "kappa_saturated",
    "eta",
    "sigma",
)
"""Sites NUTS samples (without hierarchical transfer; see :func:`latent_sites`)."""

NATURAL_SITES = ("log_A", "log_E", "beta", "b_offdiag", "kappa_offdiag", "eta", "sigma")
"""The law's own parameters (reference units), from which :func:`sampler_coordinates` maps."""


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
    reference_share: float = 0.5  # share c of the saturated transfer coordinates
    obs_mask: np.ndarray | None = None  # (N,) bool; False = padding, not observed
    obs_group: np.ndarray | None = None  # (N,) int < N; (run, language) group of each obs
    transfer_budget: float = float("inf")  # budget d* (reference units) of the sampled transfer
    group_language: np.ndarray | None = None  # (G,) int; language of each group (ids < G)
    segment_layout: SegmentLayout | None = None  # of obs_group/obs_mask, for traced data

    @property
    def n_groups(self) -> int | None:
        """Number of (run, language) groups: the length of ``group_language``, a static shape
        even when the data are traced (the language blocks), so the grouped likelihood sums
        over ``G`` segments instead of one per observation (``None``: not known)."""
        return None if self.group_language is None else int(np.shape(self.group_language)[-1])

    @property
    def n_targets(self) -> int:
        """Number of target languages modelled: the first ``n_targets`` columns of ``point_r``.

        All languages for a full fit; one for a per-language block
        (:mod:`climb_bayes.inference.nuts_blocks`), whose target is column 0.
        """
        return int(np.shape(self.reducible_loc)[-1])

    @property
    def n_pairs(self) -> int:
        """Number of transfer pairs modelled: every source into each target language."""
        return self.n_targets * (np.shape(self.point_r)[-1] - 1)


def reference_share(point_r: np.ndarray, setting: float | str = "median") -> float:
    """The share ``c`` at which the sampler's transfer coordinates are measured.

    Parameters
    ----------
    point_r : array (..., m)
        Shares of the runs (or evaluation points); only the number of languages ``m`` and,
        for ``"median"``, the values are used.
    setting : {"median", "uniform"} or float
        ``Priors.reference_share``: ``"median"`` (default) gives the median share strictly
        between 0 and 1 (0.5 when there are none); ``"uniform"`` gives ``1 / m``, every
        language's share in the uniform mixture; a number is used as is.

    Returns
    -------
    float
        ``c`` in (0, 1].

    Notes
    -----
    With ``transfer_prior = "natural"`` a reparameterisation only (the posterior does not
    depend on it); with the default ``"saturated"`` prior the ``Normal(0, scale)`` sits on the
    transfer at this share, so it is part of the prior (:func:`_saturated_site`): see the
    module docstring for what each rule does to the sampler and to extrapolation.
    """
    r = np.asarray(point_r, dtype=float)
    if not isinstance(setting, str):
        return float(setting)
    if setting == "uniform":
        return 1.0 / max(int(np.shape(r)[-1]), 1)
    inner = r[(r > 0.0) & (r < 1.0)]
    return float(np.median(inner)) if inner.size else 0.5


ONE_BUDGET_SPREAD = 2.0
"""Observations whose budgets span less than this factor count as one budget for
:func:`transfer_budget`."""


def transfer_budget(obs_d: np.ndarray) -> float:
    """Budget ``d*`` (reference units) at which the sampler measures transfer: the harmonic
    mean of the observations' budgets when they span less than :data:`ONE_BUDGET_SPREAD`,
    otherwise ``inf`` (the sampled transfer is then ``b`` itself).

    The data see a pair's transfer as ``b + kappa / D``. On one budget that sum is all they fix,
    and ``(b, kappa)`` lie on a ridge only the prior bounds: NUTS ran at 4,092 leapfrog steps
    per kept draw on RegMix (docs/model.md, 'One budget'). Sampling ``b + kappa / d*`` and
    ``kappa`` (:func:`_transfer_sites`) turns the ridge into an axis; the harmonic mean matches
    ``sum_obs 1 / D``. Where the budgets differ the data tell ``b`` from ``kappa`` and the
    sampler keeps ``b``: on the shipped default data (1e5 and 3e5 tokens) the transfer at their
    harmonic mean mixed worse (R-hat 1.017, bulk ESS 348 vs converged). A reparameterisation
    only: the posterior is unchanged.
    """
    d = np.asarray(obs_d, dtype=float)
    if d.size == 0 or d.max() >= ONE_BUDGET_SPREAD * d.min():
        return float("inf")
    return float(1.0 / np.mean(1.0 / d))


def reference_budget(tokens: np.ndarray) -> float:
    """Power of ten nearest the geometric mean of ``tokens`` (the model's budget unit)."""
    tokens = np.asarray(tokens, dtype=float)
    return float(10.0 ** np.round(np.mean(np.log10(tokens))))


def pair_indices(m: int, n_targets: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) indices of the off-diagonal transfer pairs, row-major.

    ``m (m - 1)`` pairs; with ``n_targets`` only the pairs whose target is one of the first
    ``n_targets`` languages (``n_targets (m - 1)`` pairs, same relative order).
    """
    n_targets = m if n_targets is None else n_targets
    src, tgt = np.nonzero(~np.eye(m, dtype=bool)[:, :n_targets])
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
    group = np.asarray(runs.obs_group, dtype=np.int32)
    group_language = np.zeros(int(group.max()) + 1 if group.size else 0, dtype=np.int32)
    group_language[group] = runs.obs_language
    return ModelData(
        point_r=np.asarray(runs.run_proportions[runs.point_run], dtype=float),
        point_d=np.asarray(runs.point_tokens, dtype=float) / d_ref,
        obs_point=np.asarray(runs.obs_point, dtype=np.int32),
        obs_language=np.asarray(runs.obs_language, dtype=np.int32),
        obs_log_loss=np.log(np.asarray(runs.obs_loss, dtype=float)),
        reducible_loc=red,
        irreducible_loc=irr,
        d_ref=d_ref,
        reference_share=reference_share(runs.run_proportions, priors.reference_share),
        obs_group=group,
        transfer_budget=transfer_budget(runs.point_tokens[runs.obs_point] / d_ref),
        group_language=group_language,
    )


def with_mask(data: ModelData) -> ModelData:
    """``data`` with an explicit all-``True`` ``obs_mask`` where it has none: the same density,
    and the same program structure as a fold padded to this table's shape
    (:func:`pad_model_data`), so the full fit's mode searches and the folds' Laplace fits share
    their compiled programs (:mod:`climb_bayes.inference.argument_potential`)."""
    if data.obs_mask is not None:
        return data
    return data._replace(obs_mask=np.ones(np.shape(data.obs_log_loss), dtype=bool))


def pad_model_data(data: ModelData, shape: PaddedShape) -> ModelData:
    """``data`` padded to ``shape`` (:mod:`climb_bayes.data.padding`): observations, evaluation
    points and run groups repeated from the first, the padded observations masked out (the
    density is ``data``'s). ``data`` unchanged but for an all-``True`` mask when it is larger
    than ``shape`` in any size.

    Fits of subsets of one table padded to its shape share compiled programs
    (:mod:`climb_bayes.inference.argument_potential`)."""
    n, p, g = data.obs_log_loss.shape[0], data.point_d.shape[0], data.n_groups or 0
    if not shape.holds(n, p, g):
        return with_mask(data)
    pad_obs = {
        k: pad_rows(getattr(data, k), shape.n_obs)
        for k in ("obs_point", "obs_language", "obs_log_loss", "obs_group")
        if getattr(data, k) is not None
    }
    return data._replace(
        point_r=pad_rows(data.point_r, shape.n_points),
        point_d=pad_rows(data.point_d, shape.n_points),
        obs_mask=padding_mask(n, shape.n_obs),
        segment_layout=None,  # of the unpadded observations: stale
        group_language=(
            None if data.group_language is None else pad_rows(data.group_language, shape.n_groups)
        ),
        **pad_obs,
    )


def _scatter_pairs(values: jnp.ndarray, m: int, n_targets: int) -> jnp.ndarray:
    """Pair values as a ``(..., m, n_targets)`` [source, target] matrix, zero diagonal."""
    src, tgt = pair_indices(m, n_targets)
    shape = values.shape[:-1] + (m, n_targets)
    return jnp.zeros(shape, values.dtype).at[..., src, tgt].set(values)


def _saturated_site(
    name: str, sampled: str, scale: float, log_saturation: jax.Array, on_saturated: bool
) -> jax.Array:
    """Transfer parameter ``name`` sampled as ``name * saturation`` (the coordinate the data
    measure, see the module docstring).

    ``on_saturated=True`` (default priors): the prior ``Normal(0, scale)`` is on the sampled,
    saturated value itself, a plain sample site. ``False`` (``transfer_prior = "natural"``):
    the prior is on ``name``, added as a factor with the Jacobian ``-log saturation`` of the
    change of coordinates.
    """
    if on_saturated:
        value_sat = numpyro.sample(sampled, dist.Normal(0.0, scale))
        return numpyro.deterministic(name, value_sat * jnp.exp(-log_saturation))
    value_sat = numpyro.sample(sampled, dist.Normal(0.0, scale).mask(False))
    value = numpyro.deterministic(name, value_sat * jnp.exp(-log_saturation))
    numpyro.factor(f"prior_{name}", dist.Normal(0.0, scale).log_prob(value))
    numpyro.factor(f"jacobian_{name}", -log_saturation)
    return value


def _transfer_conditional(d_star, s_b: float, s_k: float, sqrt=math.sqrt) -> tuple:
    """``(s_t, slope, sd)`` of the base prior on one budget ``d_star``: ``t = b s + kappa s /
    d_star ~ Normal(0, s_t)`` and ``kappa s | t ~ Normal(slope t, sd)`` (:func:`_transfer_sites`;
    ``sqrt`` is ``jnp.sqrt`` for a traced ``d_star``)."""
    s_t = sqrt(s_b**2 + (s_k / d_star) ** 2)
    return s_t, s_k**2 / (d_star * s_t**2), s_k * s_b / s_t


def _transfer_sites(
    priors: Priors, d_star: float, log_saturation: jax.Array, on_saturated: bool
) -> tuple[jax.Array, jax.Array]:
    """``b_offdiag`` and ``kappa_offdiag`` sampled as the transfer at the budget ``d_star``
    and the decay (both saturated, see the module docstring).

    The sampled pair is ``t = (b + kappa / d_star) s`` (``b_saturated``; ``b s`` when
    ``d_star = inf``) and
    ``kappa s`` (``kappa_saturated``), ``s`` the saturation at the reference share, a linear
    map of unit determinant from ``(b s, kappa s)``. With the default priors ``b s ~
    Normal(0, s_b)`` and ``kappa s ~ Normal(0, s_k)`` independent, so ``t ~ Normal(0, s_t)``,
    ``s_t^2 = s_b^2 + s_k^2 / d_star^2``, and ``kappa s | t ~ Normal(t s_k^2 / (d_star
    s_t^2), s_k s_b / s_t)``: plain sample sites, the same joint prior. With the natural
    prior the sites carry no density and the priors on ``b`` and ``kappa`` are factors with
    the Jacobian ``-log s`` each.
    """
    s_b, s_k = priors.transfer_scale, priors.decay_scale
    # d* = inf as a number (several budgets, joint fit): b saturated alone, no inf arithmetic.
    several = isinstance(d_star, float) and math.isinf(d_star)
    if several:
        s_t, k_slope, k_sd = s_b, 0.0, s_k
    else:
        s_t, k_slope, k_sd = _transfer_conditional(d_star, s_b, s_k, jnp.sqrt)
    if on_saturated:
        t_sat = numpyro.sample("b_saturated", dist.Normal(0.0, s_t))
        k_sat = numpyro.sample("kappa_saturated", dist.Normal(t_sat * k_slope, k_sd))
    else:
        t_sat = numpyro.sample("b_saturated", dist.Normal(0.0, s_t).mask(False))
        k_sat = numpyro.sample("kappa_saturated", dist.Normal(0.0, s_k).mask(False))
    inv_saturation = jnp.exp(-log_saturation)
    b_sat = t_sat if several else t_sat - k_sat / d_star
    b = numpyro.deterministic("b_offdiag", b_sat * inv_saturation)
    kappa = numpyro.deterministic("kappa_offdiag", k_sat * inv_saturation)
    if not on_saturated:
        for name, value, scale in (("b_offdiag", b, s_b), ("kappa_offdiag", kappa, s_k)):
            numpyro.factor(f"prior_{name}", dist.Normal(0.0, scale).log_prob(value))
            numpyro.factor(f"jacobian_{name}", -log_saturation)
    return b, kappa


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
    n_targets = data.n_targets
    _, target = pair_indices(m, n_targets)
    with numpyro.plate("language", n_targets, dim=-1):
        # The data term in the coordinates NUTS can move in; priors as factors (exact).
        log_A, log_E, beta = sample_power_law(
            dist.Normal(data.reducible_loc, priors.reducible_scale),
            dist.Normal(data.irreducible_loc, priors.irreducible_scale),
            dist.Normal(np.log(priors.beta_median), priors.beta_log_sd),
        )
        eta = numpyro.sample("eta", dist.LogNormal(np.log(priors.eta_median), priors.eta_log_sd))
        sigma = numpyro.sample("sigma", dist.HalfNormal(priors.noise_scale))
        if priors.run_effect:
            sigma_run = numpyro.sample("sigma_run", dist.HalfNormal(priors.run_effect_scale))
        if priors.learned_df:
            df_language = numpyro.sample("df", df_prior(priors.student_df_min))

    log_saturation = jnp.log(-jnp.expm1(-eta * data.reference_share))[target]  # (pair,)
    on_saturated = priors.transfer_prior == "saturated"
    if priors.hierarchical_transfer:
        mu_b = numpyro.sample("mu_b", dist.Normal(0.0, priors.transfer_scale))
        tau_b = numpyro.sample("tau_b", dist.HalfNormal(priors.transfer_scale))
    with numpyro.plate("pair", target.size, dim=-1):
        if priors.hierarchical_transfer:
            b_z = numpyro.sample("b_z", dist.Normal(0.0, 1.0))
            b_off = numpyro.deterministic("b_offdiag", mu_b + tau_b * b_z)
            kappa_off = _saturated_site(
                "kappa_offdiag", "kappa_saturated", priors.decay_scale, log_saturation, on_saturated
            )
        else:
            b_off, kappa_off = _transfer_sites(
                priors, data.transfer_budget, log_saturation, on_saturated
            )
    if priors.full_share_scale > 0:  # the transfer at r_i = 1 (module docstring)
        full = -jnp.expm1(-eta)[target]
        full_share = dist.Normal(0.0, priors.full_share_scale)
        if priors.hierarchical_transfer:
            log_full = full_share.log_prob(kappa_off * full).sum()
        else:  # one budget: the transfer at d* only (b + kappa / inf = b otherwise)
            one_budget = jnp.isfinite(data.transfer_budget)
            log_full = full_share.log_prob((b_off + kappa_off / data.transfer_budget) * full)
            log_full += jnp.where(one_budget, 0.0, full_share.log_prob(kappa_off * full))
            log_full = log_full.sum()
        numpyro.factor("prior_full_share", log_full)

    b = numpyro.deterministic("b", _scatter_pairs(b_off, m, n_targets))
    kappa = _scatter_pairs(kappa_off, m, n_targets)
    numpyro.deterministic("k", kappa * data.d_ref)
    log_B = numpyro.deterministic("log_B", log_A + beta * jnp.log(data.d_ref))
    numpyro.deterministic("B", jnp.exp(log_B))
    numpyro.deterministic("E", jnp.exp(log_E))

    # The law (Eq. 6) for the target columns: inflow sum_j (b_ji + kappa_ji / D) r_j.
    r = jnp.asarray(data.point_r)
    inflow = r @ b + (r @ kappa) / data.point_d[:, None]
    rt = saturating_ratio(r[:, :n_targets], inflow, eta)
    pred = log_loss_at_ratio(rt, data.point_d, log_A, beta, log_E)
    loc = pred[data.obs_point, data.obs_language]
    scale = sigma[data.obs_language]
    y = data.obs_log_loss if observed else None
    df = df_language[data.obs_language] if priors.learned_df else priors.fixed_df
    if priors.run_effect:
        n = data.obs_log_loss.shape[0]
        group = np.arange(n) if data.obs_group is None else data.obs_group
        run_scale = sigma_run[data.obs_language]
        noise = GroupedNoise(
            loc,
            scale,
            run_scale,
            group,
            df,
            data.obs_mask,
            data.n_groups,
            df_key=data.obs_language,
            layout=data.segment_layout,
        )
        numpyro.sample("log_loss", noise, obs=y)
        return
    if priors.likelihood == "normal":
        noise = dist.Normal(loc, scale)
    elif priors.learned_df:  # the normaliser once per language
        noise = KeyedStudentT(df_language, data.obs_language, loc, scale)
    else:
        noise = dist.StudentT(df, loc, scale)
    if data.obs_mask is not None:
        noise = noise.mask(data.obs_mask)
    with numpyro.plate("obs", data.obs_log_loss.shape[0], dim=-1):
        numpyro.sample("log_loss", noise, obs=y)


def latent_sites(priors: Priors) -> list[str]:
    """Names of the sites NUTS samples under ``priors``."""
    names = list(LATENT_SITES) + (["sigma_run"] if priors.run_effect else [])
    names += ["df"] if priors.learned_df else []
    if priors.hierarchical_transfer:
        names = [n for n in names if n != "b_saturated"] + ["mu_b", "tau_b", "b_z"]
    return names


def model_trace(values: dict[str, Any], data: ModelData, priors: Priors) -> dict[str, Any]:
    """Trace of :func:`climb_model` with its latent sites set to ``values``.

    ``log_loss`` is observed, so nothing is sampled and no PRNG key is needed; ``jit`` and
    ``vmap`` over draws apply. Read ``site["value"]`` for deterministic sites and
    ``site["fn"]`` for the likelihood or the priors.
    """
    model = numpyro.handlers.substitute(climb_model, data=values)
    return numpyro.handlers.trace(model).get_trace(data, priors)


def weighted_log_likelihood(
    values: dict[str, Any], data: ModelData, priors: Priors, weight: jax.Array
) -> jax.Array:
    """Log-likelihood of the observations with non-negative integer-valued ``weight`` (N,).

    Independent points: ``sum_i w_i log p(y_i)``. Grouped noise
    (:class:`~climb_bayes.model.observation.GroupedNoise`): the points with ``w = 0`` are left out
    of their group (the exact likelihood of the rest) and each group's log density is counted
    ``max_i w_i`` times (a run drawn twice by a bootstrap is two independent copies).
    """
    fn = model_trace(values, data, priors)["log_loss"]["fn"]
    y = jnp.asarray(data.obs_log_loss)
    w = jnp.asarray(weight, dtype=y.dtype)
    if isinstance(fn, GroupedNoise):
        keep = w > 0
        mask = keep if fn.weight is None else keep & fn.weight
        kept = GroupedNoise(fn.loc, fn.scale, fn.run_scale, fn.group, fn.df, mask, fn.n_groups)
        group_w = jax.ops.segment_max(w, fn.group, num_segments=fn.n_groups)
        return jnp.sum(jnp.maximum(group_w, 0.0) * kept.group_log_prob(y))
    return jnp.sum(w * fn.log_prob(y))


def sampler_coordinates(
    values: dict[str, Any], data: ModelData, priors: Priors
) -> dict[str, np.ndarray]:
    """Map the law's parameters to the sampled coordinates of :func:`climb_model`.

    Parameters
    ----------
    values : dict
        ``log_A, log_E, beta, eta, sigma, b_offdiag, kappa_offdiag`` (reference units; any
        leading batch shape, e.g. chains), plus ``sigma_run`` and ``df`` where ``priors``
        sample them. With hierarchical transfer, ``mu_b``, ``tau_b`` and
        ``b_z`` may be given instead of ``b_offdiag`` (otherwise they are derived from it).
    data : ModelData
        Supplies the reference share of the transfer coordinates.
    priors : Priors
        Whether transfer is hierarchical.

    Returns
    -------
    dict
        Values of the sites in :func:`latent_sites` (constrained space).
    """
    v = {k: np.asarray(x, dtype=float) for k, x in values.items()}
    out = power_coordinates(v.pop("log_A"), v.pop("log_E"), v.pop("beta"))
    out |= {"eta": v["eta"], "sigma": v["sigma"]}
    if priors.run_effect:
        out["sigma_run"] = v["sigma_run"]
    if priors.learned_df:
        out["df"] = v["df"]
    _, target = pair_indices(data.point_r.shape[-1], out["eta"].shape[-1])
    saturation = -np.expm1(-v["eta"] * data.reference_share)[..., target]
    out["kappa_saturated"] = v["kappa_offdiag"] * saturation
    if priors.hierarchical_transfer:
        if "b_z" in v:
            out |= {k: v[k] for k in ("mu_b", "tau_b", "b_z")}
        else:
            b = v["b_offdiag"]
            mu = np.mean(b, axis=-1, keepdims=True)
            tau = np.maximum(np.std(b, axis=-1, keepdims=True), 1e-3)
            out |= {"mu_b": mu[..., 0], "tau_b": tau[..., 0], "b_z": (b - mu) / tau}
    else:
        d_star = float(data.transfer_budget)
        out["b_saturated"] = (v["b_offdiag"] + v["kappa_offdiag"] / d_star) * saturation
    return out


ETA_GRID = 4001
"""Grid points of :func:`_draw_eta` on ``log eta`` (prior mean +- 8 prior sd)."""


def _draw_eta(
    key: jax.Array, data: ModelData, priors: Priors
) -> tuple[np.ndarray, Callable[[float], np.ndarray]]:
    """``eta`` from its exact prior and the conditional sd of each pair's prior-carrying transfer.

    The full-share factor (``Priors.full_share_scale = s``) multiplies the ``Normal(0, s0)``
    prior of a pair's transfer ``x`` (the saturated value, or ``b`` itself with the natural
    prior) by ``Normal(0, s)`` at ``a x`` (``a`` = full-share over saturated value, or the
    full-share saturation). Given ``eta_i``, ``x`` is then ``Normal(0, (1/s0^2 + a^2/s^2)^-1/2)``
    and ``eta_i``'s prior is its LogNormal times ``(s^2 + a^2 s0^2)^-1/2`` per bounded pair:
    drawn by inverse CDF on a grid of :data:`ETA_GRID` points in ``log eta``. Without the
    factor this is the LogNormal and ``s0``. On one budget the one bounded transfer of a pair
    is ``b + kappa / d*`` (prior sd ``s_t``, :func:`_transfer_sites`; :func:`draw_prior` draws
    ``kappa`` from the base prior's conditional given it).

    Returns
    -------
    eta : array (n_targets,)
    cond_sd : callable
        ``s0 ->`` conditional sd (``(n_pairs,)``, or ``s0`` itself without the factor) for a
        transfer prior of sd ``s0``.
    """
    m, s = data.n_targets, priors.full_share_scale
    _, target = pair_indices(data.point_r.shape[-1], m)
    if s <= 0:  # the LogNormal, from ``key`` itself (the draws of earlier versions)
        z = np.asarray(jax.random.normal(key, (m,)))
        return priors.eta_median * np.exp(priors.eta_log_sd * z), lambda s0: s0
    mu, sd = np.log(priors.eta_median), priors.eta_log_sd

    def ratio(eta: np.ndarray) -> np.ndarray:  # a = full-share transfer / prior-carrying value
        full = -np.expm1(-eta)
        if priors.transfer_prior == "natural":
            return full
        return full / -np.expm1(-eta * data.reference_share)

    bounded = _full_share_bounded_sds(data, priors)
    u = np.linspace(mu - 8 * sd, mu + 8 * sd, ETA_GRID)
    a = ratio(np.exp(u))
    per_pair = -0.5 * sum(np.log(s**2 + a**2 * s0**2) for s0 in bounded)  # (grid,)
    n_in = np.bincount(target, minlength=m)  # pairs into each target language
    log_w = -0.5 * ((u - mu) / sd) ** 2 + n_in[:, None] * per_pair[None, :]
    cdf = np.cumsum(np.exp(log_w - log_w.max(axis=1, keepdims=True)), axis=1)
    cdf /= cdf[:, -1:]
    p, jitter = np.asarray(jax.random.uniform(key, (2, m)))
    cell = np.sum(cdf < p[:, None], axis=1)  # searchsorted per language
    eta = np.exp(u[cell] + (jitter - 0.5) * (u[1] - u[0]))
    a_pair = ratio(eta)[target]
    return eta, lambda s0: 1.0 / np.sqrt(1.0 / s0**2 + a_pair**2 / s**2)


def _one_budget_transfer(data: ModelData, priors: Priors) -> tuple[float, float] | None:
    """``(d*, s_t)`` where the full-share factor bounds the transfer at ``d*`` (one budget,
    non-hierarchical transfer; ``s_t`` its prior sd, :func:`_transfer_sites`), else None."""
    d_star = float(data.transfer_budget)
    if priors.hierarchical_transfer or math.isinf(d_star):
        return None
    return d_star, _transfer_conditional(d_star, priors.transfer_scale, priors.decay_scale)[0]


def _full_share_bounded_sds(data: ModelData, priors: Priors) -> list[float]:
    """Prior sds of the transfers of one pair that the full-share factor bounds."""
    one = _one_budget_transfer(data, priors)
    if one is not None:
        return [one[1]]  # b + kappa / d*
    if priors.hierarchical_transfer:
        return [priors.decay_scale]
    return [priors.decay_scale, priors.transfer_scale]


def draw_prior(key: jax.Array, data: ModelData, priors: Priors) -> dict[str, np.ndarray]:
    """One exact draw from the prior: every sample and deterministic site, ``log_loss`` included.

    Some of the model's sampled coordinates carry masked placeholder densities (their priors
    are ``numpyro.factor`` terms on the law's parameters), so ``Predictive(climb_model)``
    without posterior samples would *not* draw from the prior. This draws the law's parameters
    from their priors, maps them with :func:`sampler_coordinates` and lets the model add the
    deterministic sites and simulated observations.
    """
    m, n_pairs = data.n_targets, data.n_pairs
    keys = jax.random.split(key, 8)
    normal = lambda k, shape: np.asarray(jax.random.normal(k, shape))  # noqa: E731
    _, target = pair_indices(data.point_r.shape[-1], m)
    eta, cond_sd = _draw_eta(keys[3], data, priors)
    values: dict[str, Any] = {
        "log_A": data.reducible_loc + priors.reducible_scale * normal(keys[0], (m,)),
        "log_E": data.irreducible_loc + priors.irreducible_scale * normal(keys[1], (m,)),
        "beta": priors.beta_median * np.exp(priors.beta_log_sd * normal(keys[2], (m,))),
        "eta": eta,
        "sigma": priors.noise_scale * np.abs(normal(keys[4], (m,))),
        "kappa_offdiag": cond_sd(priors.decay_scale) * normal(keys[5], (n_pairs,)),
    }
    if priors.run_effect:
        k_run = jax.random.fold_in(key, 7)
        values["sigma_run"] = priors.run_effect_scale * np.abs(normal(k_run, (m,)))
    if priors.learned_df:
        values["df"] = draw_df_prior(jax.random.fold_in(key, 8), (m,), priors.student_df_min)
    if priors.hierarchical_transfer:
        values |= {
            "mu_b": priors.transfer_scale * normal(keys[6], ()),
            "tau_b": priors.transfer_scale * np.abs(normal(jax.random.fold_in(keys[6], 1), ())),
            "b_z": normal(keys[7], (n_pairs,)),
        }
    elif (one := _one_budget_transfer(data, priors)) is not None:
        # the factor bounds t = b + kappa / d*; kappa | t is the base prior's conditional
        d_star, s_t = one
        _, k_slope, k_sd = _transfer_conditional(d_star, priors.transfer_scale, priors.decay_scale)
        t = cond_sd(s_t) * normal(keys[7], (n_pairs,))
        values["kappa_offdiag"] = t * k_slope + k_sd * normal(keys[5], (n_pairs,))
        values["b_offdiag"] = t - values["kappa_offdiag"] / d_star
    else:
        values["b_offdiag"] = cond_sd(priors.transfer_scale) * normal(keys[7], (n_pairs,))
    if priors.transfer_prior == "saturated":  # the draws above are the saturated values
        saturation = -np.expm1(-values["eta"] * data.reference_share)[target]
        values["kappa_offdiag"] = values["kappa_offdiag"] / saturation
        if not priors.hierarchical_transfer:
            values["b_offdiag"] = values["b_offdiag"] / saturation
    fixed = sampler_coordinates(values, data, priors)
    model = numpyro.handlers.seed(
        numpyro.handlers.substitute(
            climb_model, data={k: jnp.asarray(x) for k, x in fixed.items()}
        ),
        jax.random.fold_in(key, 99),
    )
    trace = numpyro.handlers.trace(model).get_trace(data, priors, observed=False)
    return {
        name: np.asarray(site["value"])
        for name, site in trace.items()
        if site["type"] in ("sample", "deterministic")
        and not name.startswith(("prior_", "jacobian_"))
    }
