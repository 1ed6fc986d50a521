"""How much does the answer depend on the priors, single runs, the likelihood and the budgets?

Studies (each returns a JSON-able dict with a one-line ``verdict`` and a ``flagged`` bool):

``prior``
    Power-scaling prior sensitivity (:func:`arviz_stats.psense_summary`) on the top-level
    priors (NUTS fits; the ``log_prior`` group is built here since ``from_numpyro`` does not),
    and refits under alternative prior sets.
``likelihood``
    Refit with the other likelihood (Student-t <-> Normal) and with a fixed Student-t df (4
    against a learned df; 10 against a fixed 4).
``budget``
    Leave the largest fitted budget out.
``influence``
    PSIS-LOO per run (pointwise log-likelihood summed per run via ``constant_data/obs_run``;
    Pareto k > 0.7 flagged) for NUTS fits, exact leave-one-run-out for point fits; refits
    without the most influential runs.
``bootstrap``
    Resample runs with replacement and refit each resample.

Refits are posterior-mode fits of the fit's own model (L-BFGS on NumPyro's potential energy
in unconstrained space, starting from the fit's posterior median and, after a group's first
refit, also from that refit's mode, keeping the deeper end) with per-observation
weights: dropping or resampling runs changes the weights, not the compiled function, so a
whole study compiles once. For each refit the study reports how the optimal mixture ``r*``
and the extrapolated loss (uniform mixture at the target budget) move relative to the same
kind of refit on all the data, and whether they leave the original fit's 90% intervals.

References
----------
.. [1] Kallioinen, Paananen, Bürkner & Vehtari (2024), "Detecting and diagnosing prior and
   likelihood sensitivity with power-scaling", Statistics and Computing 34, 57.
.. [2] Vehtari, Gelman & Gabry (2017), "Practical Bayesian model evaluation using
   leave-one-out cross-validation and WAIC"; Vehtari et al. (2024), "Pareto smoothed
   importance sampling".
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from climb_bayes.errors import ClimbError
from climb_bayes.inference.fitresult import Fit
from climb_bayes.inference.nuts import NutsConfig
from climb_bayes.model.climb_model import (
    NATURAL_SITES,
    climb_model,
    model_data,
    model_trace,
    sampler_coordinates,
    weighted_log_likelihood,
)
from climb_bayes.model.law import LawParams, log_loss
from climb_bayes.model.priors import Priors
from climb_bayes.runtime import release_compiled_programs

__all__ = [
    "STUDIES",
    "RSTAR_TOL",
    "LOSS_TOL",
    "PARETO_K_MAX",
    "ALTERNATIVE_PRIORS",
    "log_prior_tree",
    "prior_sensitivity",
    "run_loglik",
    "run_pareto_k",
    "mode_refit",
    "REFITS",
    "REFIT_NUTS",
    "nuts_refit",
    "run_robustness",
    "attach_sbc",
    "save_results",
    "load_results",
]

STUDIES = ("prior", "likelihood", "budget", "influence", "bootstrap")
REFITS = ("mode", "nuts")
REFIT_LABELS = {"mode": "posterior mode + Laplace", "nuts": "NUTS (bootstrap: mode)"}
INTERVAL_LABELS = {"mode": "Laplace at each mode", "nuts": "NUTS posteriors"}
REFIT_NUTS = NutsConfig(chains=4, warmup=500, samples=1000, progress_bar=False)
"""Sampler settings of ``--refit nuts`` (shorter than a main fit: one refit per variant)."""
RSTAR_TOL = 0.05
"""Largest acceptable move of any language's optimal share (absolute)."""
LOSS_TOL = 0.02
"""Largest acceptable relative move of an extrapolated loss (2%)."""
PARETO_K_MAX = 0.7
"""PSIS Pareto-k above which a run's leave-out estimate is unreliable (influential run)."""


def _scaled(p: Priors, factor: float) -> Priors:
    names = (
        "reducible_scale",
        "irreducible_scale",
        "beta_log_sd",
        "transfer_scale",
        "decay_scale",
        "eta_log_sd",
        "noise_scale",
    )
    return p.replace(**{n: getattr(p, n) * factor for n in names})


ALTERNATIVE_PRIORS: dict[str, Callable[[Priors], Priors]] = {
    "wide (all scales x3)": lambda p: _scaled(p, 3.0),
    "narrow (all scales x0.5)": lambda p: _scaled(p, 0.5),
    "beta median / 2": lambda p: p.replace(beta_median=p.beta_median / 2),
    "beta median x 2": lambda p: p.replace(beta_median=p.beta_median * 2),
    "tight transfer (scale 0.1)": lambda p: p.replace(transfer_scale=0.1, decay_scale=0.1),
}
"""Alternative prior sets of the prior study (name -> function of the fit's priors)."""


# -- summaries of a law --------------------------------------------------------------------------
def _rstar(law: LawParams, budget: float) -> np.ndarray:
    from climb_bayes.decisions.rstar import law_rstar

    return law_rstar(law, budget)


def _extrap_loss(law: LawParams, budget: float) -> np.ndarray:
    m = law.beta.shape[-1]
    r = jnp.full((m,), 1.0 / m)
    return np.exp(np.asarray(log_loss(r, jnp.asarray(budget), *(jnp.asarray(x) for x in law))))


# -- log prior group and prior sensitivity ---------------------------------------------------------
def _latent_draws(fit: Fit) -> dict[str, np.ndarray]:
    """Draws of the sites the current model samples, mapped from the law's parameters.

    Not read back from the stored sites: on one budget the model now samples the transfer at
    that budget as ``b_saturated`` (docs/model.md, 'One budget'), while a fit written before
    stored plain ``b`` saturated under that name.
    """
    post = fit.tree["posterior"]
    natural = [*NATURAL_SITES, "sigma_run", "df", "mu_b", "tau_b", "b_z"]
    values = {n: fit.draws(n) for n in natural if n in post}
    data = model_data(fit.runs, fit.priors, d_ref=fit.d_ref)
    return sampler_coordinates(values, data, fit.priors)


def _prior_terms(fit: Fit) -> dict[str, np.ndarray]:
    """Per-draw log density of each top-level prior, ``{name: (n_draws,)}``."""
    priors = fit.priors
    data = model_data(fit.runs, priors, d_ref=fit.d_ref)
    latents = _latent_draws(fit)

    def one(values: dict[str, jax.Array]) -> dict[str, jax.Array]:
        tr = model_trace(values, data, priors)
        out = {}
        for name, site in tr.items():
            if site["type"] != "sample" or name == "log_loss" or name.startswith("jacobian_"):
                continue
            # Sampled coordinates with masked placeholder densities carry no prior of their
            # own: the priors are the ``prior_*`` factors on the law's parameters.
            if getattr(site["fn"], "_mask", True) is False:
                continue
            out[name] = jnp.sum(site["fn"].log_prob(site["value"]))
        return out

    res = jax.jit(jax.vmap(one))({k: jnp.asarray(v) for k, v in latents.items()})
    return {k.removeprefix("prior_"): np.asarray(v) for k, v in res.items()}


def log_prior_tree(fit: Fit) -> xr.DataTree:
    """Copy of the fit's tree with a ``log_prior`` group (one variable per top-level prior,
    dims ``chain, draw``), as :func:`arviz_stats.psense` needs."""
    post = fit.tree["posterior"]
    shape = (post.sizes["chain"], post.sizes["draw"])
    terms = _prior_terms(fit)
    ds = xr.Dataset(
        {k: (("chain", "draw"), v.reshape(shape)) for k, v in terms.items()},
        coords={"chain": post["chain"].values, "draw": post["draw"].values},
    )
    tree = fit.tree.copy()
    tree["log_prior"] = xr.DataTree(ds)
    if "log_likelihood" not in tree.children:
        ll = _run_loglik_draws(fit, fit.runs)
        tree["log_likelihood"] = xr.DataTree(
            xr.Dataset({"log_loss": (("chain", "draw", "run"), ll)}, coords=ds.coords)
        )
    return tree


def _run_loglik_draws(fit: Fit, runs: Any) -> np.ndarray:
    """Log-likelihood of each run given the others, ``(chain, draw, n_runs)``.

    ``log p(y) - log p(y without run r)``: with independent points the sum of the run's pointwise
    terms; with grouped noise the conditional density of the run's points given the rest of their
    group (exact for runs that share a mixture trajectory).
    """
    post = fit.tree["posterior"]
    shape = (post.sizes["chain"], post.sizes["draw"])
    priors = fit.priors
    data = model_data(runs, priors, d_ref=fit.d_ref)
    samples = {k: jnp.asarray(v) for k, v in _latent_draws(fit).items()}
    obs_run = jnp.asarray(runs.obs_run)
    ones = jnp.ones(runs.n_obs)

    def per_draw(sample: dict, w: jax.Array) -> jax.Array:
        return weighted_log_likelihood(sample, data, priors, w)

    batch = jax.jit(jax.vmap(per_draw, in_axes=(0, None)))
    full = batch(samples, ones)
    out = [full - batch(samples, (obs_run != r).astype(float)) for r in range(runs.n_runs)]
    return np.stack([np.asarray(x) for x in out], axis=-1).reshape(shape + (runs.n_runs,))


def prior_sensitivity(fit: Fit, threshold: float = 0.05) -> dict[str, Any]:
    """Power-scaling sensitivity of the law's parameters to the priors and the likelihood.

    Returns a dict with ``table`` (rows: variable, prior, likelihood, diagnosis) and the
    variables diagnosed ``prior-data conflict`` or ``strong prior / weak likelihood``.
    """
    import arviz_stats as azs

    if fit.n_draws < 20:
        return {"available": False, "note": "point fit: power-scaling needs posterior draws"}
    tree = log_prior_tree(fit)
    names = [
        n
        for n in ("log_B", "beta", "log_E", "eta", "b_offdiag", "kappa_offdiag")
        if n in tree["posterior"]
    ]
    df = azs.psense_summary(tree, var_names=names, threshold=threshold)
    rows = [
        {
            "variable": str(idx),
            "prior": float(r["prior"]),
            "likelihood": float(r["likelihood"]),
            "diagnosis": str(r["diagnosis"]),
        }
        for idx, r in df.iterrows()
    ]
    conflict = [r["variable"] for r in rows if r["diagnosis"] == "prior-data conflict"]
    strong = [r["variable"] for r in rows if r["diagnosis"].startswith("strong prior")]
    return {"available": True, "table": rows, "conflict": conflict, "strong_prior": strong}


# -- per-run log-likelihood and PSIS-LOO ----------------------------------------------------------
def run_loglik(fit: Fit, runs: Any = None) -> np.ndarray:
    """Log-likelihood of every run (given the other runs) under every posterior draw,
    ``(chain, draw, n_runs)``.

    With ``runs`` (a :class:`~climb_bayes.data.runs.RunsData` with the fit's runs and languages),
    the observations are taken from it instead of the fit: a way to ask how a changed run
    would look to this posterior.
    """
    return _run_loglik_draws(fit, fit.runs if runs is None else runs)


def run_pareto_k(fit: Fit, loglik: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """PSIS-LOO per run: Pareto k of every run and the elpd, from :func:`arviz_stats.loo`."""
    import arviz_stats as azs

    loglik = run_loglik(fit) if loglik is None else loglik
    post = fit.tree["posterior"]
    run_ids = [str(x) for x in fit.tree["constant_data"]["run"].values]
    coords = {"chain": post["chain"].values, "draw": post["draw"].values, "run": run_ids}
    tree = xr.DataTree.from_dict(
        {
            "posterior": fit.tree["posterior"].to_dataset()[["beta"]],
            "log_likelihood": xr.Dataset(
                {"log_loss": (("chain", "draw", "run"), loglik)}, coords=coords
            ),
        }
    )
    elpd = azs.loo(tree, pointwise=True, var_name="log_loss")
    return np.asarray(elpd.pareto_k).reshape(-1), float(elpd.elpd)


# -- posterior-mode refits with observation weights -----------------------------------------------
def _refit_worker(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Runs in a worker process: compile once for (runs, priors), refit every weight vector."""
    from climb_bayes.runtime import setup_jax

    setup_jax()
    from climb_bayes.inference.fitresult import load_fit

    fit = load_fit(task["fit_path"])
    return _refit_group(
        fit, task["priors"], task["weights"], task["budget"], task.get("drop_budget_above")
    )


def _refit_group(
    fit: Fit,
    priors: Priors,
    weight_sets: Sequence[np.ndarray],
    budget: float,
    drop_budget_above: float | None = None,
) -> list[dict[str, Any]]:
    import scipy.optimize
    from numpyro.infer.util import constrain_fn

    from climb_bayes.inference.laplace import flat_model
    from climb_bayes.inference.point_fit import gradient_difference_hessian

    release_compiled_programs()  # a group compiles its own programs: runtime's guard
    runs = fit.runs
    data = model_data(runs, priors, d_ref=fit.d_ref)
    init = {k: jnp.asarray(np.median(v, axis=0)) for k, v in _latent_draws(fit).items()}
    if priors.hierarchical_transfer != fit.priors.hierarchical_transfer:
        raise ClimbError("robustness refits keep the fit's hierarchical_transfer setting.")
    # the set-up without NumPyro's op-by-op check of the start's gradient (flat_model says
    # what that costs); L-BFGS evaluates the compiled gradient at once anyway
    info, flat0, unravel, _ = flat_model(climb_model, (data, priors), init, jax.random.PRNGKey(0))
    potential = info.potential_fn

    ones = jnp.ones(runs.n_obs)

    def loglik(u: dict, w: jax.Array) -> jax.Array:
        c = constrain_fn(climb_model, (data, priors), {}, u)
        return weighted_log_likelihood(c, data, priors, w)

    def objective(x: jax.Array, w: jax.Array) -> jax.Array:
        u = unravel(x)
        return potential(u) + loglik(u, ones) - loglik(u, w)

    vg = jax.jit(jax.value_and_grad(objective))

    @jax.jit
    def _constrained_batch(xs: jax.Array) -> tuple[jax.Array, ...]:
        def one(x: jax.Array) -> tuple[jax.Array, ...]:
            c = constrain_fn(climb_model, (data, priors), {}, unravel(x), return_deterministic=True)
            return tuple(c[n] for n in ("log_B", "beta", "log_E", "b", "k", "eta"))

        return jax.vmap(one)(xs)

    def to_laws(xs: np.ndarray) -> LawParams:
        return LawParams(*(np.asarray(a) for a in _constrained_batch(jnp.asarray(xs))))

    def search(start: np.ndarray, w: jax.Array) -> scipy.optimize.OptimizeResult:
        return scipy.optimize.minimize(
            lambda x: tuple(np.asarray(v, dtype=float) for v in jax.device_get(vg(x, w))),
            start,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 3000},
        )

    results = []
    starts = [np.asarray(flat0)]
    for w in weight_sets:
        w = jnp.asarray(w, dtype=float)
        # every refit after the group's first also starts at that first refit's mode and keeps
        # the deeper end: the posteriors have several modes, and which one a search from the fit's
        # median reaches is not the variant's doing (default data, without ja-c0.975-250K: from
        # the median a mode at -1831.718 with r*[ja] 0.251, from the all-data mode one at
        # -1831.738 with 0.241, against 0.226 with all data)
        res = min((search(x, w) for x in starts), key=lambda r: r.fun)
        if not results:
            starts.append(np.asarray(res.x))
        hess = gradient_difference_hessian(lambda x, w=w: vg(x, w)[1], res.x)
        # the mode and its Laplace draws in one batch: one compiled r* solve per shape
        xs = np.concatenate([np.asarray(res.x)[None], _laplace_draws(res.x, hess)])
        laws = to_laws(xs)
        r, loss = _rstar(laws, budget), _extrap_loss(laws, budget)
        results.append(
            {
                "rstar": r[0].tolist(),
                "loss": loss[0].tolist(),
                "converged": bool(res.success),
                "objective": float(res.fun),
                **_intervals_90(r[1:], loss[1:]),
            }
        )
    return results


LAPLACE_DRAWS = 200
"""Draws from the Laplace approximation at each refit's mode (for the 90% intervals)."""


def _laplace_draws(x: np.ndarray, hessian: np.ndarray) -> np.ndarray:
    """:data:`LAPLACE_DRAWS` draws of the Laplace approximation ``N(x, H^-1)`` at a refit's
    posterior mode (unconstrained coordinates; fixed seed).

    Eigenvalues of ``H`` are floored at ``1e-8`` of the largest, so a direction the data and
    priors barely pin down gives a wide (not an infinite) interval. The draws are ``x + L^-T z``
    with ``L L^T`` the floored Hessian: unlike scaling ``z`` along eigenvectors (which rotate
    freely between near-equal eigenvalues) they are continuous in ``H``, so the intervals do not
    jump with a Hessian's last digits.

    References
    ----------
    .. [1] Gelman et al. (2013), *Bayesian Data Analysis*, 3rd ed., Sec. 4.1 (normal
       approximation at the posterior mode).
    """
    import scipy.linalg

    h = np.asarray(hessian, dtype=float)
    evals, evecs = np.linalg.eigh(0.5 * (h + h.T))
    evals = np.maximum(evals, max(float(evals.max()), 1e-12) * 1e-8)
    chol = np.linalg.cholesky((evecs * evals) @ evecs.T)
    z = np.random.default_rng(0).standard_normal((LAPLACE_DRAWS, x.size))
    return np.asarray(x)[None] + scipy.linalg.solve_triangular(chol, z.T, trans="T", lower=True).T


def _intervals_90(r: np.ndarray, loss: np.ndarray) -> dict[str, list[list[float]]]:
    """90% intervals of r* and of the extrapolated loss over the finite Laplace draws (none
    when fewer than half of them are finite)."""
    ok = np.isfinite(r).all(axis=1) & np.isfinite(loss).all(axis=1)
    if ok.sum() < LAPLACE_DRAWS // 2:
        return {}
    q = (0.05, 0.95)
    return {
        "rstar_90": np.quantile(r[ok], q, axis=0).tolist(),
        "loss_90": np.quantile(loss[ok], q, axis=0).tolist(),
    }


def mode_refit(
    fit: Fit,
    priors: Priors | None = None,
    weights: np.ndarray | None = None,
    budget: float | None = None,
) -> dict[str, Any]:
    """One posterior-mode refit; returns ``rstar`` and ``loss`` (uniform mixture) at
    ``budget`` (default 10x the largest fitted budget)."""
    from climb_bayes.decisions.rstar import default_target_budget

    budget = default_target_budget(fit) if budget is None else budget
    w = np.ones(fit.runs.n_obs) if weights is None else weights
    return _refit_group(fit, priors or fit.priors, [w], budget)[0]


# -- studies ---------------------------------------------------------------------------------------
def _obs_weights(fit: Fit, run_weights: np.ndarray) -> np.ndarray:
    return np.asarray(run_weights, dtype=float)[np.asarray(fit.runs.obs_run)]


def nuts_refit(
    fit: Fit,
    priors: Priors,
    keep_runs: np.ndarray,
    budget: float,
    config: NutsConfig = REFIT_NUTS,
    seed: int = 0,
) -> dict[str, Any]:
    """A full NUTS refit on the kept runs under ``priors``.

    Returns the median of the per-draw optimal mixtures (``rstar``) and of the extrapolated
    loss of the uniform mixture at ``budget`` (``loss``), their 90% intervals (``rstar_90``,
    ``loss_90``) and whether the refit passed its convergence checks (``converged``).
    """
    from climb_bayes.inference.fitting import fit_runs

    runs = fit.runs.subset_runs(np.flatnonzero(np.asarray(keep_runs, bool)))
    refitted = fit_runs(runs, priors, method="nuts", config=config, seed=seed)
    summary = _reference(refitted, budget)
    if not summary:
        raise ClimbError(f"a NUTS refit needs >= 20 draws, got {refitted.n_draws}.")
    return {
        "rstar": summary["rstar_median"],
        "loss": summary["loss_median"],
        "rstar_90": [summary["rstar_lo"].tolist(), summary["rstar_hi"].tolist()],
        "loss_90": [summary["loss_lo"].tolist(), summary["loss_hi"].tolist()],
        "converged": bool(refitted.diagnostics.ok),
    }


def _nuts_group(
    fit: Fit,
    priors: Priors,
    variants: list[tuple[str, np.ndarray]],
    budget: float,
    config: NutsConfig,
    seed: int,
) -> list[dict[str, Any]]:
    """NUTS refits of one group (variants carry run weights); bootstrap resamples (integer run
    counts) stay mode refits."""
    boot = [i for i, v in enumerate(variants) if v.study == "bootstrap"]
    weights = [_obs_weights(fit, variants[i].weights) for i in boot]
    mode = _refit_group(fit, priors, weights, budget) if boot else []
    out: list[dict[str, Any]] = []
    for i, v in enumerate(variants):
        if i in boot:
            out.append(mode[boot.index(i)])
        else:
            out.append(nuts_refit(fit, priors, v.weights > 0, budget, config, seed))
    return out


def _compare(name: str, res: dict, base: dict, ref: dict) -> dict[str, Any]:
    dr = np.abs(np.asarray(res["rstar"]) - np.asarray(base["rstar"]))
    dl = np.abs(np.asarray(res["loss"]) / np.asarray(base["loss"]) - 1.0)
    out = {
        "variant": name,
        "rstar": res["rstar"],
        "loss": res["loss"],
        "rstar_shift": float(dr.max()),
        "loss_shift": float(dl.max()),
        "converged": res["converged"],
    }
    if res.get("rstar_90") and base.get("rstar_90"):
        out["rstar_90"], out["loss_90"] = res["rstar_90"], res["loss_90"]
        out["rstar_90_shift"] = float(np.abs(np.subtract(res["rstar_90"], base["rstar_90"])).max())
        out["loss_90_shift"] = float(np.abs(np.divide(res["loss_90"], base["loss_90"]) - 1.0).max())
    if ref.get("rstar_lo") is not None:
        r = np.asarray(res["rstar"])
        out["rstar_outside_90"] = bool(np.any((r < ref["rstar_lo"]) | (r > ref["rstar_hi"])))
        lo = np.asarray(res["loss"])
        out["loss_outside_90"] = bool(np.any((lo < ref["loss_lo"]) | (lo > ref["loss_hi"])))
    return out


def _verdict(
    study: str, variants: list[dict], rtol: float, ltol: float, refit: str = "mode"
) -> tuple[str, bool]:
    if not variants:
        return "no refits", False
    worst_r = max(variants, key=lambda v: v["rstar_shift"])
    worst_l = max(variants, key=lambda v: v["loss_shift"])
    flagged = worst_r["rstar_shift"] > rtol or worst_l["loss_shift"] > ltol
    text = (
        f"max |r* shift| {worst_r['rstar_shift']:.3f} ({worst_r['variant']}), max extrapolated "
        f"loss shift {worst_l['loss_shift']:.1%} ({worst_l['variant']})"
    )
    with_iv = [v for v in variants if "rstar_90_shift" in v]
    if with_iv:
        iv_r = max(v["rstar_90_shift"] for v in with_iv)
        iv_l = max(v["loss_90_shift"] for v in with_iv)
        text += (
            f"; 90% intervals ({INTERVAL_LABELS[refit]}) move up to {iv_r:.3f} in r* and "
            f"{iv_l:.1%} in loss"
        )
        # An interval endpoint moving as far as a point estimate may is a sensitivity too.
        flagged = flagged or iv_r > rtol or iv_l > ltol
    return ("SENSITIVE: " if flagged else "robust: ") + text, flagged


def _reference(fit: Fit, budget: float) -> dict[str, Any]:
    """Median and 90% interval of the per-draw r* and extrapolated loss of a NUTS fit (empty
    for fits with fewer than 20 draws): the original fit's reference, and NUTS refits."""
    from climb_bayes.decisions.rstar import rstar_draws, subsample_law

    if fit.n_draws < 20:
        return {}
    rs = rstar_draws(fit, budget, max_draws=100)
    loss = _extrap_loss(subsample_law(fit, 100), budget)
    return {
        "rstar_median": np.median(rs, 0).tolist(),
        "rstar_lo": np.quantile(rs, 0.05, 0),
        "rstar_hi": np.quantile(rs, 0.95, 0),
        "loss_median": np.median(loss, 0).tolist(),
        "loss_lo": np.quantile(loss, 0.05, 0),
        "loss_hi": np.quantile(loss, 0.95, 0),
    }


class Variant(NamedTuple):
    """One refit: a name for the tables, the study it belongs to, per-run weights."""

    name: str
    study: str
    weights: np.ndarray


class RefitGroup(NamedTuple):
    """Refits sharing one set of priors (``"base"``: the fit's own)."""

    name: str
    priors: Priors
    variants: list[Variant]


def _refit_groups(
    fit: Fit,
    studies: Sequence[str],
    *,
    n_boot: int,
    n_influential: int,
    seed: int,
    prior_sets: dict[str, Callable[[Priors], Priors]] | None,
    log: Callable[[str], None],
) -> tuple[list[RefitGroup], dict[str, dict]]:
    """The refits the studies need.

    Returns the groups (``"base"`` first: the fit's priors with the all-data, budget,
    influence and bootstrap variants; then one group per alternative prior or likelihood)
    and per-study extras (Pareto k, psense, notes). Every variant carries its study, so no
    name is ever parsed (names come from run ids and can look like anything: a run
    ``"bootstrap 3"``).
    """
    runs = fit.runs
    n_runs = runs.n_runs
    ones = np.ones(n_runs)
    base_priors = fit.priors
    extra: dict[str, dict[str, Any]] = {s: {} for s in studies}
    base_variants = [Variant("all data", "all", ones)]
    if "budget" in studies:
        keep = runs.run_budgets < np.max(runs.run_budgets)
        if keep.sum() == 0:
            extra["budget"]["note"] = "only one budget: nothing to leave out"
        else:
            base_variants.append(Variant("without the largest budget", "budget", keep * 1.0))
    if "influence" in studies:
        if fit.n_draws >= 20:
            k, elpd = run_pareto_k(fit)
            extra["influence"] |= {
                "pareto_k": dict(zip(runs.run_ids, k.tolist(), strict=True)),
                "elpd_loo": elpd,
                "method": "PSIS-LOO per run",
            }
            dropped = np.argsort(-k)[:n_influential]
        else:
            extra["influence"]["method"] = "exact leave-one-run-out (point fit)"
            dropped = np.arange(n_runs)
        for i in dropped:
            w = ones.copy()
            w[i] = 0
            base_variants.append(Variant(f"without {runs.run_ids[i]}", "influence", w))
    if "bootstrap" in studies:
        rng = np.random.default_rng(seed)
        for b in range(n_boot):
            counts = np.bincount(rng.integers(0, n_runs, n_runs), minlength=n_runs)
            base_variants.append(Variant(f"bootstrap {b}", "bootstrap", counts.astype(float)))
    groups = [RefitGroup("base", base_priors, base_variants)]
    if "prior" in studies:
        for name, make in (prior_sets or ALTERNATIVE_PRIORS).items():
            groups.append(
                RefitGroup(f"prior: {name}", make(base_priors), [Variant(name, "prior", ones)])
            )
        if fit.n_draws >= 20:
            log("prior: power-scaling sensitivity (psense)")
            extra["prior"]["psense"] = prior_sensitivity(fit)
    if "likelihood" in studies:
        other = "normal" if base_priors.likelihood == "student_t" else "student_t"
        alternatives = [(other, base_priors.replace(likelihood=other))]
        if base_priors.likelihood == "student_t":  # a fixed df against the fit's own
            fixed = 4.0 if base_priors.learned_df or base_priors.fixed_df != 4.0 else 10.0
            alternatives.append((f"student_t df {fixed:g}", base_priors.replace(student_df=fixed)))
        for name, priors in alternatives:
            groups.append(
                RefitGroup(f"likelihood: {name}", priors, [Variant(name, "likelihood", ones)])
            )
    return groups, extra


def _worker_chunks(sizes: Sequence[int], workers: int) -> list[list[list[int]]]:
    """Per group, the variant indices of each worker task: a group of more than
    ``ceil(total / workers)`` refits is split into tasks of about that many, and every task after
    a group's first repeats its variant 0 (the all-data refit), whose mode
    :func:`_refit_group` uses as a second start of the group's other refits, so a split group
    gives the refits of an unsplit one. Measured on the default fit (`climb-bayes robustness
    --workers 2`, all studies): the base group of 24 refits held one worker for ~75 s while the
    other finished the remaining groups in ~10 s."""
    target = max(1, -(-sum(sizes) // workers))
    plan = []
    for n in sizes:
        k = max(1, -(-n // target))
        bounds = np.linspace(0, n, k + 1).round().astype(int)
        chunks = [list(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        plan.append([chunks[0]] + [[0, *c] for c in chunks[1:]])
    return plan


def _join_chunks(parts: list[list[Any]]) -> list[Any]:
    """A group's refit results in variant order from its tasks' (:func:`_worker_chunks`),
    dropping the repeated variant 0 of every task after the first."""
    out = list(parts[0])
    for part in parts[1:]:
        out.extend(part[1:])
    return out


def _run_refits(
    fit: Fit,
    groups: list[RefitGroup],
    budget: float,
    *,
    refit: str,
    refit_config: NutsConfig,
    workers: int,
    fit_path: str | os.PathLike[str] | None,
    seed: int,
    log: Callable[[str], None],
) -> dict[str, list[dict]]:
    """Refit every group (NUTS, or modes in parallel worker processes), with progress lines.

    Returns the refit results of each group (by group name), in the order of its variants.
    """
    t0 = time.perf_counter()
    n_total = sum(len(g.variants) for g in groups)
    log(f"{n_total} refits ({REFIT_LABELS[refit]}) in {len(groups)} groups")

    def weights(g: RefitGroup) -> list[np.ndarray]:
        return [_obs_weights(fit, v.weights) for v in g.variants]

    def done_line(done: int, g: RefitGroup) -> str:
        return (
            f"[{done}/{len(groups)}] {g.name}: {len(g.variants)} refit(s) "
            f"({time.perf_counter() - t0:.0f} s)"
        )

    results: dict[str, list[dict]] = {}
    if refit == "nuts":
        for done, g in enumerate(groups, 1):
            results[g.name] = _nuts_group(fit, g.priors, g.variants, budget, refit_config, seed)
            log(done_line(done, g))
    elif workers > 1:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        plan = _worker_chunks([len(g.variants) for g in groups], workers)
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futs = []
            for g, chunks in zip(groups, plan, strict=True):
                w = weights(g)  # once per group, not once per variant of each task
                futs.append(
                    [
                        pool.submit(
                            _refit_worker,
                            {
                                "fit_path": str(fit_path),
                                "priors": g.priors,
                                "weights": [w[i] for i in chunk],
                                "budget": budget,
                            },
                        )
                        for chunk in chunks
                    ]
                )
            for done, (g, fs) in enumerate(zip(groups, futs, strict=True), 1):
                parts = [f.result() for f in fs]
                results[g.name] = _join_chunks(parts)
                log(done_line(done, g))
    else:
        for done, g in enumerate(groups, 1):
            results[g.name] = _refit_group(fit, g.priors, weights(g), budget)
            log(done_line(done, g))
    return results


def _study_entry(
    study: str,
    variants: list[dict],
    entry: dict[str, Any],
    rstar_tol: float,
    loss_tol: float,
    refit: str,
) -> dict[str, Any]:
    """One study's result: its compared variants, verdict line and whether it is flagged."""
    if study == "bootstrap" and variants:
        rs = np.array([v["rstar"] for v in variants])
        ls = np.array([v["loss"] for v in variants])
        entry["rstar_90"] = [np.quantile(rs, 0.05, 0).tolist(), np.quantile(rs, 0.95, 0).tolist()]
        entry["loss_90"] = [np.quantile(ls, 0.05, 0).tolist(), np.quantile(ls, 0.95, 0).tolist()]
        width = float((np.quantile(rs, 0.95, 0) - np.quantile(rs, 0.05, 0)).max())
        flagged = width > 2 * rstar_tol
        text = (
            f"{'SENSITIVE' if flagged else 'robust'}: bootstrap 90% range of r* up to "
            f"{width:.3f} wide over {len(variants)} resamples"
        )
    else:
        text, flagged = _verdict(study, variants, rstar_tol, loss_tol, refit)
    if study == "prior":
        ps = entry.get("psense", {})
        if ps.get("conflict"):
            flagged = True
            text += "; prior-data conflict (psense): " + ", ".join(ps["conflict"])
    if study == "influence" and "pareto_k" in entry:
        high = [r for r, k in entry["pareto_k"].items() if k > PARETO_K_MAX]
        entry["high_pareto_k"] = high
        if high:
            text += f"; Pareto k > {PARETO_K_MAX} for run(s) {', '.join(high)}"
    return entry | {
        "variants": variants,
        "verdict": text,
        "flagged": bool(flagged),
        "max_rstar_shift": max((v["rstar_shift"] for v in variants), default=0.0),
        "max_loss_shift": max((v["loss_shift"] for v in variants), default=0.0),
    }


def run_robustness(
    fit: Fit,
    studies: Sequence[str] = STUDIES,
    *,
    fit_path: str | os.PathLike[str] | None = None,
    budget: float | None = None,
    n_boot: int = 20,
    n_influential: int = 2,
    workers: int = 1,
    seed: int = 0,
    rstar_tol: float = RSTAR_TOL,
    loss_tol: float = LOSS_TOL,
    prior_sets: dict[str, Callable[[Priors], Priors]] | None = None,
    refit: str = "mode",
    refit_config: NutsConfig = REFIT_NUTS,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the robustness studies and return one JSON-able results dict.

    Parameters
    ----------
    fit : Fit
        The fit under study.
    studies : sequence of str
        Any of :data:`STUDIES`.
    fit_path : path, optional
        File of ``fit`` (needed for ``workers > 1``: worker processes load it).
    budget : float, optional
        Target budget (tokens); default 10x the largest fitted budget.
    n_boot : int
        Bootstrap resamples.
    n_influential : int
        Runs dropped (one at a time and together) in the influence study.
    workers : int
        Worker processes for the refits (one per refit group).
    seed : int
        Seed of the bootstrap.
    rstar_tol, loss_tol : float
        Thresholds of the verdicts: absolute r* shift and relative extrapolated-loss shift.
    prior_sets : dict, optional
        Alternative priors of the prior study (name -> function of the fit's priors);
        :data:`ALTERNATIVE_PRIORS` by default.
    refit : {"mode", "nuts"}
        ``"mode"``: posterior mode plus a Laplace approximation per variant (fast, parallel
        over ``workers``). ``"nuts"``: a full NUTS refit per variant (:data:`REFIT_NUTS`,
        runs removed from the table rather than down-weighted); bootstrap resamples stay
        point/mode refits, as in the Chinchilla replication.
    refit_config : NutsConfig
        Sampler settings of the NUTS refits.
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    dict
        ``studies`` (per study: ``variants``, ``verdict``, ``flagged``, extra diagnostics),
        ``verdict`` (``robust``, ``flagged``, one-screen ``text``), ``reference`` (the fit's own
        90% intervals of r* and extrapolated loss), ``base_refit`` and settings.
    """
    from climb_bayes.decisions.rstar import default_target_budget

    unknown = sorted(set(studies) - set(STUDIES))
    if unknown:
        raise ClimbError(f"--studies: unknown {', '.join(unknown)}; known: {', '.join(STUDIES)}.")
    if refit not in REFITS:
        raise ClimbError(f"--refit must be one of {', '.join(REFITS)}, got {refit!r}.")
    if workers > 1 and fit_path is None:
        raise ClimbError("workers > 1 needs the fit's file path (worker processes load it).")
    log = log or (lambda _m: None)
    budget = default_target_budget(fit) if budget is None else float(budget)
    t0 = time.perf_counter()
    ref = _reference(fit, budget)
    out: dict[str, Any] = {
        "fit_method": fit.method,
        "refit": refit,
        "languages": list(fit.languages),
        "target_budget": budget,
        "thresholds": {"rstar": rstar_tol, "loss": loss_tol, "pareto_k": PARETO_K_MAX},
        "reference": {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in ref.items()},
        "studies": {},
    }

    groups, extra = _refit_groups(
        fit,
        studies,
        n_boot=n_boot,
        n_influential=n_influential,
        seed=seed,
        prior_sets=prior_sets,
        log=log,
    )

    results = _run_refits(
        fit,
        groups,
        budget,
        refit=refit,
        refit_config=refit_config,
        workers=workers,
        fit_path=fit_path,
        seed=seed,
        log=log,
    )

    base = results["base"][0]  # "all data"
    out["base_refit"] = base
    for study in studies:  # the refits of each study, from whichever group holds them
        variants = [
            _compare(v.name, r, base, ref)
            for g in groups
            for v, r in zip(g.variants, results[g.name], strict=True)
            if v.study == study
        ]
        out["studies"][study] = _study_entry(
            study, variants, dict(extra[study]), rstar_tol, loss_tol, refit
        )

    flagged = [s for s, e in out["studies"].items() if e["flagged"]]
    lines = [
        f"target budget {budget:.3g} tokens; refits: {REFIT_LABELS[refit]}; thresholds |r*| "
        f"{rstar_tol}, loss {loss_tol:.0%}"
    ]
    lines += [f"{s:<11} {e['verdict']}" for s, e in out["studies"].items()]
    lines.append(
        "VERDICT: "
        + (
            "NOT ROBUST - r* or extrapolated loss depend on " + ", ".join(flagged)
            if flagged
            else "robust - no study moved r* or the extrapolated loss beyond the thresholds"
        )
    )
    out["verdict"] = {"robust": not flagged, "flagged": flagged, "text": "\n".join(lines)}
    out["seconds"] = time.perf_counter() - t0
    return out


def attach_sbc(results: dict[str, Any] | None, sbc: dict[str, Any]) -> dict[str, Any]:
    """Add a simulation-based-calibration entry to a results dict (or start one without
    studies).

    Parameters
    ----------
    results : dict or None
        From :func:`run_robustness`, or None when only SBC was run.
    sbc : dict
        :meth:`climb_bayes.evaluation.sbc.SbcResult.to_dict` (plus, optionally, ``plot`` paths).

    Returns
    -------
    dict
        ``results`` with ``sbc`` set and the SBC verdict appended to ``verdict.text``;
        ``verdict.sbc_passed`` records the SBC outcome (``verdict.robust`` stays about the
        studies, and is absent when there were none).
    """
    out = dict(results) if results is not None else {"studies": {}}
    out["sbc"] = sbc
    verdict = dict(out.get("verdict", {}))
    text = verdict.get("text", "")
    verdict["text"] = f"{text}\n{sbc['verdict']}" if text else sbc["verdict"]
    verdict["sbc_passed"] = bool(sbc["passed"])
    verdict.setdefault("flagged", [])
    out["verdict"] = verdict
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def save_results(results: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the results dict as JSON (the file ``climb-bayes report --robustness`` reads),
    atomically: an interrupted write leaves any earlier results in place."""
    from climb_bayes.atomic import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(_jsonable(results), indent=1))
    return path


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a results file :func:`save_results` wrote (``climb-bayes report --robustness``).

    Raises
    ------
    ClimbError
        Missing or unreadable file, not JSON, or JSON that is not a robustness results file;
        the message names the file and the fix.
    """
    path = Path(path)
    fix = "Fix: pass the JSON file that `climb-bayes robustness FIT.nc -o FILE` wrote."
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClimbError(f"{path}: not found. {fix}") from None
    except json.JSONDecodeError as exc:
        raise ClimbError(
            f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}). {fix}"
        ) from None
    except UnicodeDecodeError:
        raise ClimbError(f"{path}: not a text (JSON) file. {fix}") from None
    except OSError as exc:
        raise ClimbError(f"{path}: cannot be read ({exc}). {fix}") from None
    if not isinstance(data, dict) or not {"verdict", "studies", "sbc"} & set(data):
        raise ClimbError(
            f"{path}: not a robustness results file (no 'verdict', 'studies' or 'sbc'). {fix}"
        )
    return data
