"""Fit the CLIMB law to a runs table: NUTS (``method="nuts"``), a Laplace approximation
(``"laplace"``) or the paper's point fit (``"map"``).

This module wires the layers together (runs table -> model data -> inference -> DataTree) and
is what ``climb-bayes fit`` calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.infer

from climb_bayes import __version__
from climb_bayes.data.runs import RunsData
from climb_bayes.errors import ClimbError
from climb_bayes.inference.diagnostics import compute_diagnostics
from climb_bayes.inference.fitresult import FORMAT_VERSION, PARAM_DIMS, Fit
from climb_bayes.inference.laplace import (
    LAPLACE_SEARCHES,
    LaplaceResult,
    laplace_modes,
    laplace_posterior,
)
from climb_bayes.inference.nuts import NutsConfig, chain_inits, prior_centre, run_nuts
from climb_bayes.inference.nuts_blocks import run_blocked_nuts, use_language_blocks
from climb_bayes.inference.point_fit import PointFit, far_from_prior, point_fit
from climb_bayes.model.climb_model import (
    ModelData,
    climb_model,
    latent_sites,
    model_data,
    model_trace,
    pair_labels,
    sampler_coordinates,
    with_mask,
)
from climb_bayes.model.observation import draw_noise, identifiable_noise
from climb_bayes.model.priors import Priors, priors_to_toml
from climb_bayes.runtime import release_compiled_programs

__all__ = ["fit_runs", "climb_laplace", "METHODS"]

METHODS = ("nuts", "laplace", "map")


def _coords(runs: RunsData) -> dict[str, list]:
    return {
        "language": list(runs.languages),
        "source_language": list(runs.languages),
        "pair": pair_labels(runs.languages),
        "run": list(runs.run_ids),
        "point": list(range(runs.n_points)),
        "obs": list(range(runs.n_obs)),
        "group": group_labels(runs),
    }


def group_labels(runs: RunsData) -> list[str]:
    """``"<run>/<language>"`` of each (run, language) group of :attr:`RunsData.obs_group`
    (the first run of a trajectory names it)."""
    group = runs.obs_group
    labels = [""] * (int(group.max()) + 1 if group.size else 0)
    for g, run, lang in zip(group, runs.obs_run, runs.obs_language, strict=True):
        if not labels[g]:
            labels[g] = f"{runs.run_ids[run]}/{runs.languages[lang]}"
    return labels


def _constant_data(runs: RunsData) -> dict[str, np.ndarray]:
    labels = {}
    if runs.series_labels is not None:  # the table's run_series labels, for --continue-run
        labels["run_series_label"] = np.asarray(runs.series_labels, dtype=str)
    return labels | {
        "run_proportions": np.asarray(runs.run_proportions),
        "run_budgets": np.asarray(runs.run_budgets),
        "point_run": np.asarray(runs.point_run),
        "point_tokens": np.asarray(runs.point_tokens),
        "point_loss": np.asarray(runs.point_loss),
        "obs_point": np.asarray(runs.obs_point),
        "obs_language": np.asarray(runs.obs_language),
        "obs_run": np.asarray(runs.obs_run),
        "obs_group": np.asarray(runs.obs_group),
        "run_series": np.asarray(runs.series),
    }


_CONST_DIMS = {
    "run_proportions": ["run", "language"],
    "run_budgets": ["run"],
    "point_run": ["point"],
    "point_tokens": ["point"],
    "point_loss": ["point", "language"],
    "obs_point": ["obs"],
    "obs_language": ["obs"],
    "obs_run": ["obs"],
    "obs_group": ["obs"],
    "run_series": ["run"],
    "run_series_label": ["run"],
}


class _Likelihood(NamedTuple):
    """Per-draw pieces of the observation model (see :func:`_likelihood`)."""

    loc: np.ndarray
    scale: np.ndarray
    run_scale: np.ndarray | None
    df: np.ndarray | None
    loglik: np.ndarray


def _likelihood(samples: dict[str, np.ndarray], data: ModelData, priors: Priors) -> _Likelihood:
    """Location, scales, degrees of freedom and pointwise log-likelihood of every draw, in one
    vectorised pass.

    ``loc``, ``scale``, ``run_scale`` (``None`` without the run effect) and ``df`` (``None``
    unless learned: the fixed value is in ``priors``) are ``(S, N)``; ``loglik`` is ``(S, G)``
    per (run, language) group with the run effect (the unit the observations are exchangeable
    in; PSIS-LOO then leaves one run's tail out) and ``(S, N)`` per point without.
    """
    grouped = priors.run_effect
    n_groups = int(np.max(data.obs_group)) + 1 if grouped else 0

    def one(sample: dict[str, jax.Array]) -> tuple:
        fn = model_trace(sample, data, priors)["log_loss"]["fn"]
        y = jnp.asarray(data.obs_log_loss)
        if grouped:
            ll, run_scale = fn.group_log_prob(y)[:n_groups], fn.run_scale
        else:
            ll = fn.log_prob(y)
            while hasattr(fn, "base_dist"):  # masked / expanded wrappers
                fn = fn.base_dist
            run_scale = fn.scale
        df = jnp.broadcast_to(fn.df, y.shape) if priors.learned_df else jnp.zeros(())
        return fn.loc, fn.scale, run_scale, df, ll

    loc, scale, run_scale, df, ll = (np.asarray(x) for x in jax.jit(jax.vmap(one))(samples))
    return _Likelihood(
        loc, scale, run_scale if grouped else None, df if priors.learned_df else None, ll
    )


def _posterior_predictive(
    key: jax.Array, data: ModelData, priors: Priors, parts: _Likelihood
) -> np.ndarray:
    """Replicated ``log_loss`` for every posterior draw, ``(draws, obs)``, from
    :func:`_likelihood`'s location, scales and degrees of freedom; the noise is drawn by NumPy
    (:func:`climb_bayes.model.observation.draw_noise`), seeded from ``key``."""
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)))
    df = parts.df if priors.learned_df else priors.fixed_df
    group = data.obs_group if data.obs_group is not None else np.arange(parts.loc.shape[-1])
    return parts.loc + draw_noise(rng, parts.scale, parts.run_scale, group, df)


def _map_tree(
    key: jax.Array, data: ModelData, priors: Priors, point: PointFit, runs: RunsData
) -> object:
    latent = sampler_coordinates(point.values, data, priors)
    one = {k: np.asarray(v)[None] for k, v in latent.items()}
    sites = numpyro.infer.Predictive(climb_model, posterior_samples=one, return_sites=None)
    everything = sites(key, data, priors)
    posterior = {k: np.asarray(v)[None] for k, v in everything.items() if k != "log_loss"}
    posterior |= {k: np.asarray(v)[None] for k, v in one.items()}
    parts = _likelihood(one, data, priors)
    pp = _posterior_predictive(key, data, priors, parts)
    return _fit_tree(posterior, None, pp[None], parts.loglik[None], data, runs, priors)


def climb_laplace(data: ModelData, priors: Priors, seed: int, n_draws: int) -> LaplaceResult:
    """CLIMB's posterior (:func:`~climb_bayes.model.climb_model.climb_model`, priors and
    likelihood as NUTS samples them) by Laplace approximation: mode searches from the prior
    centre (transfer off) and from jittered copies of it, as NUTS's chains start
    (:func:`~climb_bayes.inference.nuts.chain_inits`), then ``n_draws`` draws from the
    evidence-weighted Gaussians at the modes
    (:func:`~climb_bayes.inference.laplace.laplace_posterior`)."""
    start = sampler_coordinates(prior_centre(data, priors), data, priors)
    key_start, key = jax.random.split(jax.random.PRNGKey(seed))
    return laplace_posterior(
        climb_model,
        (with_mask(data), priors),  # the programs of the folds' padded fits (with_mask)
        start,
        key=key,
        n_draws=n_draws,
        starts=chain_inits(key_start, data, priors, LAPLACE_SEARCHES - 1, start),
    )


def _laplace_tree(
    key: jax.Array, data: ModelData, priors: Priors, res: LaplaceResult, runs: RunsData
) -> object:
    """The DataTree of a Laplace fit: its draws as one chain (no sampler statistics)."""
    samples = {k: jnp.asarray(v) for k, v in res.samples.items()}
    parts = _likelihood(samples, data, priors)
    pp = _posterior_predictive(key, data, priors, parts)
    posterior = {k: np.asarray(v)[None] for k, v in res.samples.items()}
    return _fit_tree(posterior, None, pp[None], parts.loglik[None], data, runs, priors)


STAT_NAMES = {"num_steps": "n_steps", "accept_prob": "acceptance_rate"}
"""NumPyro's names of per-draw sampler statistics -> ArviZ's (as ``from_numpyro`` renames)."""


def _fit_tree(
    posterior: dict[str, np.ndarray],
    stats: dict[str, np.ndarray] | None,
    pp: np.ndarray,
    ll: np.ndarray,
    data: ModelData,
    runs: RunsData,
    priors: Priors,
) -> object:
    """The fit's DataTree from arrays ``(chains, draws, ...)``, built with
    :func:`arviz_base.from_dict` for every method (MAP, joint NUTS, language blocks).

    ``stats`` are NumPyro's per-draw sampler statistics (renamed by :data:`STAT_NAMES`;
    ``tree_depth`` derived from the leapfrog steps as ArviZ does); ``pp`` the replicated
    ``log_loss``, ``ll`` the pointwise log-likelihood.
    """
    import arviz_base

    groups = {
        "posterior": {k: np.asarray(v) for k, v in posterior.items()},
        "posterior_predictive": {"log_loss": pp},
        "observed_data": {"log_loss": np.asarray(data.obs_log_loss)},
        "constant_data": _constant_data(runs),
    }
    if stats is not None:
        sample_stats = {STAT_NAMES.get(k, k): np.asarray(v) for k, v in stats.items()}
        sample_stats["tree_depth"] = np.log2(sample_stats["n_steps"]).astype(int) + 1
        groups["sample_stats"] = sample_stats
    tree = arviz_base.from_dict(groups, coords=_coords(runs), dims=PARAM_DIMS | _CONST_DIMS)
    return _add_log_likelihood(tree, ll, runs, priors)


def _add_log_likelihood(tree: object, ll: np.ndarray, runs: RunsData, priors: Priors) -> object:
    """Attach the pointwise log-likelihood ``(chains, draws, G or N)`` as its own group."""
    import arviz_base

    dims = {"log_loss": ["group"] if priors.run_effect else ["obs"]}
    tree["log_likelihood"] = arviz_base.from_dict(
        {"log_likelihood": {"log_loss": ll}}, coords=_coords(runs), dims=dims
    )["log_likelihood"]
    return tree


def fit_runs(
    runs: RunsData,
    priors: Priors | None = None,
    *,
    method: str = "nuts",
    config: NutsConfig | None = None,
    seed: int = 0,
    n_starts: int = 8,
    max_iter: int = 2000,
    prefit: bool = True,
    data_label: str = "",
    log: Callable[[str], None] | None = None,
) -> Fit:
    """Fit the CLIMB law to a validated runs table.

    Parameters
    ----------
    runs : RunsData
        From :func:`climb_bayes.data.runs.read_runs`.
    priors : Priors, optional
        Defaults when omitted.
    method : {"nuts", "laplace", "map"}
        Full posterior with NUTS; the same posterior by Laplace approximation at its modes
        (``config.samples`` draws as one chain; seconds instead of a minute, no sampler
        diagnostics: the gate checks that the mode search converged); or the multi-start
        Huber point fit stored as a one-draw posterior.
    config : NutsConfig
        Sampler settings (NUTS; ``samples`` also for Laplace).
    seed : int
        Seed of everything random (same seed and inputs give identical draws).
    n_starts : int
        Starts of the point fit.
    max_iter : int
        L-BFGS iterations per start and stage of the point fit.
    prefit : bool
        Refine each start on least squares of log-loss before the Huber loss (slower, same or
        better objective; see :func:`climb_bayes.inference.point_fit.point_fit`).
    data_label : str
        Free text stored with the fit (e.g. "synthetic default dataset").
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    Fit
    """
    if method not in METHODS:
        raise ClimbError(f"--method must be one of {', '.join(METHODS)}, got {method!r}.")
    release_compiled_programs()  # many fits in one process: runtime.release_compiled_programs
    priors = priors or Priors()
    config = config or NutsConfig()
    log = log or (lambda _msg: None)
    priors = identifiable_noise(priors, runs.obs_group, log)
    data = model_data(runs, priors)
    key = jax.random.PRNGKey(seed)
    k_point, k_nuts, k_pp = jax.random.split(key, 3)
    t0 = time.perf_counter()
    point = None
    if method == "map" or config.init == "map":
        log(f"point fit: {n_starts} L-BFGS starts on the Huber loss of log-loss")
        point = point_fit(
            data, priors, key=k_point, n_starts=n_starts, max_iter=max_iter, prefit=prefit
        )
        log(f"point fit done in {time.perf_counter() - t0:.1f} s (objective {point.objective:.4g})")

    attrs = {
        "climb_bayes_format": FORMAT_VERSION,
        "climb_bayes_version": __version__,
        "languages": json.dumps(list(runs.languages)),
        "d_ref": float(data.d_ref),
        "method": method,
        "seed": int(seed),
        "priors_toml": priors_to_toml(priors, comments=False),
        "likelihood": priors.likelihood,
        "data_source": runs.source,
        "data_sha256": runs.sha256,
        "data_label": data_label,
        "tail_start": float(runs.tail_start),
        "n_excluded_zero_share": int(runs.n_excluded_zero_share),
        "n_points_dropped_head": int(runs.n_points_dropped_head),
        "latent_sites": json.dumps(latent_sites(priors)),
    }
    if method == "laplace":
        log(f"Laplace approximation: {LAPLACE_SEARCHES} mode searches, {config.samples} draws")
        res = climb_laplace(data, priors, seed, config.samples)
        elapsed = time.perf_counter() - t0
        log(f"Laplace fit done in {elapsed:.1f} s ({laplace_modes(res)})")
        tree = _laplace_tree(k_pp, data, priors, res, runs)
        attrs["laplace_converged"] = int(res.converged)
        attrs["laplace_modes"] = laplace_modes(res)
        attrs["laplace_pareto_k"] = float(res.pareto_k)
        attrs["laplace_pareto_k_max"] = float(res.pareto_k_max)
        attrs["sampling_seconds"] = float(elapsed)
    elif method == "map":
        tree = _map_tree(k_pp, data, priors, point, runs)
        attrs["point_objective"] = float(point.objective)
        attrs["point_starts"] = f"{point.n_converged}/{point.n_starts} converged"
        attrs["point_far_from_prior"] = far_from_prior(point.prior_z, runs.languages)
    else:
        blocked = use_language_blocks(config, priors, runs.n_languages)
        log(
            f"NUTS: {config.chains} chains x ({config.warmup} warm-up + "
            f"{config.draws_per_chain} draws), target accept {config.target_accept}"
            + (f", one block per language ({runs.n_languages})" if blocked else "")
        )
        if blocked:
            mcmc = run_blocked_nuts(k_nuts, data, priors, config, log=log)
        else:
            mcmc = run_nuts(k_nuts, data, priors, config, point=point, log=log)
        samples = mcmc.get_samples()
        jax.block_until_ready(samples)
        elapsed = time.perf_counter() - t0
        log(f"NUTS done in {elapsed:.1f} s")
        parts = _likelihood(samples, data, priors)
        pp = _posterior_predictive(k_pp, data, priors, parts)
        pp = pp.reshape((config.chains, -1) + pp.shape[1:])
        ll = parts.loglik.reshape((config.chains, -1) + parts.loglik.shape[1:])
        by_chain = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
        stats = mcmc.get_extra_fields(group_by_chain=True)
        tree = _fit_tree(by_chain, stats, pp, ll, data, runs, priors)
        diag = compute_diagnostics(
            tree["posterior"].to_dataset(),
            tree["sample_stats"].to_dataset(),
            config.max_tree_depth,
            _diagnosed_names(priors),
            bfmi=mcmc.block_bfmi if blocked else None,
            target_accept=config.target_accept,
            block_divergences=dict(zip(runs.languages, mcmc.block_divergences, strict=True))
            if blocked
            else None,
        )
        attrs["diagnostics"] = diag.to_json()
        attrs["sampling_seconds"] = float(elapsed)
        attrs["nuts_config"] = json.dumps(config._asdict() | {"blocks_used": blocked})
        if blocked:  # iterations per kept draw of each language's block
            attrs["block_thinning"] = json.dumps(
                dict(zip(runs.languages, mcmc.block_thinning, strict=True))
            )
    tree.attrs.update(attrs)
    return Fit(tree)


def _diagnosed_names(priors: Priors) -> list[str]:
    """Sampled sites plus the law parameters they map to (R-hat/ESS are checked on both)."""
    return latent_sites(priors) + ["beta", "b_offdiag", "kappa_offdiag"]
