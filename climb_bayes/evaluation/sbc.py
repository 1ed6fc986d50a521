"""Simulation-based calibration (SBC) of the NUTS fit on a reduced CLIMB model.

SBC checks the whole inference pipeline (priors, likelihood, sampler settings) at once: draw
a world from the prior, simulate data from the model's own likelihood, fit it, and record the
rank of the true value of each parameter among ``L`` posterior draws. If the posterior is
computed correctly, every rank is uniform on ``0..L`` over replications [1]_. A sampler that is
biased shifts the ranks to one side; one that is too narrow (or stops early) piles them at
both ends; one that is too wide piles them in the middle.

The check runs on a *reduced* version of the fit's model, small enough to refit many times:
the first ``n_languages`` languages of the fit (2 by default), the paper's Algorithm-1 design
at the smallest and largest of the fit's budgets, with a few curve points in the fitted tail,
the fit's reference budget, likelihood and prior settings. Data-located (``"auto"``) prior
locations are frozen to the values the fit used, since SBC needs a prior that does not
depend on the simulated data. Parameters are drawn exactly from that prior, the loss
observations from the model's own likelihood (:func:`climb_bayes.model.climb_model.draw_prior`).
Each replication is fitted with short NUTS runs from the prior centre (as ``climb-bayes fit``
starts), thinned to ``L`` draws; the ranks are taken on the law's own parameters (``log_A``,
``beta``, ``b``...), whatever coordinates the sampler moves in.

Uniformity is tested per parameter twice: a chi-square test on binned ranks [1]_ and the
graphical ECDF test with simultaneous bands [2]_ (which also sees a pile-up of ranks at
``0`` or ``L`` that binning dilutes; :func:`climb_bayes.viz.sbc_plots.plot_sbc_ecdf` draws it).
A parameter fails when either p-value is below ``alpha / (2 k)`` (Bonferroni over both tests
and ``k`` parameters: a family-wise level ``alpha``).

Why the ECDF test is written here rather than taken from arviz-stats: arviz-stats exposes
``ecdf`` and ``loo_pit`` publicly; its PIT-ECDF band (``ecdf_pit``, checked in 0.8 and 1.3) sits
in the private-by-convention ``ecdf_utils`` module, takes continuous PIT values (evaluated at
``1/n .. (n-1)/n`` for ``n`` replications, not at the ``L`` rank levels), and returns a band
but no p-value. The verdict needs a p-value per parameter on discrete ranks (for the
Bonferroni rule above), so :func:`ecdf_uniformity_test` computes the statistic of [2]_ exactly on
ranks (~60 lines with the band); :func:`climb_bayes.viz.sbc_plots.plot_sbc_ecdf` draws the same
band.

References
----------
.. [1] Talts, Betancourt, Simpson, Vehtari & Gelman (2018), "Validating Bayesian inference
   algorithms with simulation-based calibration", arXiv:1804.06788.
.. [2] Säilynoja, Bürkner & Vehtari (2022), "Graphical test for discrete uniformity and its
   applications in goodness-of-fit evaluation and multiple sample comparison", Statistics and
   Computing 32, 32.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from climb_bayes.errors import ClimbError
from climb_bayes.model.climb_model import (
    ModelData,
    climb_model,
    draw_prior,
    model_data,
    pair_labels,
    prior_locations,
)
from climb_bayes.model.priors import Priors

if TYPE_CHECKING:
    from climb_bayes.inference.fitresult import Fit

__all__ = [
    "SBC_SITES",
    "SbcConfig",
    "SbcProblem",
    "SbcResult",
    "sbc_problem",
    "problem_from_fit",
    "prior_draw",
    "rank_statistic",
    "default_bins",
    "uniformity_test",
    "ecdf_difference",
    "ecdf_difference_bands",
    "ecdf_uniformity_test",
    "Replication",
    "sbc_replication",
    "run_sbc",
]

SBC_SITES = ("log_A", "log_E", "beta", "eta", "sigma", "b_offdiag", "kappa_offdiag")
"""Model sites whose entries are ranked (plus ``mu_b``, ``tau_b`` with hierarchical
transfer)."""


class SbcConfig(NamedTuple):
    """Settings of an SBC study (reduced model and short NUTS runs).

    ``L = chains * (draws_per_chain // thin)`` posterior draws are kept per replication, so
    ranks take the values ``0..L``; ``alpha`` is the family-wise level of the uniformity
    tests (Bonferroni over parameters and the two tests).
    """

    n_replications: int = 100
    n_languages: int = 2
    n_curve_points: int = 3
    chains: int = 2
    warmup: int = 200
    draws_per_chain: int = 100
    thin: int = 4
    target_accept: float = 0.9
    max_tree_depth: int = 8
    alpha: float = 0.05

    @property
    def n_draws(self) -> int:
        """``L``, the number of thinned posterior draws each rank is computed against."""
        return self.chains * (self.draws_per_chain // self.thin)

    def check(self) -> None:
        """Raise :class:`~climb_bayes.errors.ClimbError` on settings SBC cannot use."""
        if not isinstance(self.n_replications, int | np.integer) or self.n_replications < 1:
            raise ClimbError(
                f"--sbc needs a positive number of replications, got {self.n_replications}."
            )
        if self.n_languages < 2:
            raise ClimbError(f"SBC needs at least 2 languages, got {self.n_languages}.")
        sizes = (self.chains, self.warmup, self.draws_per_chain, self.thin, self.n_curve_points)
        if min(sizes) < 1:
            raise ClimbError("SBC: chains, warmup, draws_per_chain, thin, n_curve_points >= 1.")
        if self.n_draws < 1:
            raise ClimbError("SBC: thin is larger than draws_per_chain (no draws kept).")
        if not 0 < self.alpha < 1:
            raise ClimbError(f"SBC: alpha must lie in (0, 1), got {self.alpha}.")


@dataclass(frozen=True)
class SbcProblem:
    """The reduced model SBC refits: design, frozen priors and the ranked parameters.

    Attributes
    ----------
    languages : tuple of str
        Languages of the reduced model.
    budgets : tuple of float
        Budgets (tokens) of its Algorithm-1 design.
    data : ModelData
        Design in reference units; ``obs_log_loss`` is a placeholder replaced by every
        replication's simulated losses.
    priors : Priors
        The fit's priors with ``"auto"`` locations frozen.
    labels : tuple of str
        Names of the ranked scalars, e.g. ``beta[en]``, ``b_offdiag[en->de]``.
    """

    languages: tuple[str, ...]
    budgets: tuple[float, ...]
    data: ModelData
    priors: Priors
    labels: tuple[str, ...]


class SbcResult(NamedTuple):
    """Ranks and uniformity tests of an SBC study (see :func:`run_sbc`)."""

    labels: tuple[str, ...]
    ranks: np.ndarray  # (n_replications, k) ints in 0..n_draws
    n_draws: int
    bins: int
    chi2: np.ndarray  # (k,)
    pvalues: np.ndarray  # (k,) chi-square test
    ecdf_pvalues: np.ndarray  # (k,) graphical ECDF test
    threshold: float  # Bonferroni threshold of every test: alpha / (2 k)
    failed: tuple[str, ...]
    divergences: np.ndarray  # (n_replications,)
    leapfrog_steps: np.ndarray  # (n_replications,) mean tree size
    languages: tuple[str, ...]
    budgets: tuple[float, ...]
    config: SbcConfig
    seconds: float

    @property
    def passed(self) -> bool:
        """True when no parameter's ranks fail the uniformity test."""
        return not self.failed

    def verdict(self) -> str:
        """One-screen summary, e.g. ``SBC: ranks uniform for all 14 parameters (min p = ...)``."""
        n, k = self.ranks.shape
        where = (
            f"{n} replications, L = {self.n_draws}, {self.bins} bins, "
            f"{'/'.join(self.languages)} at {len(self.budgets)} budget(s)"
        )
        min_p = (
            f"min p = {self.pvalues.min():.3g} (chi-square), {self.ecdf_pvalues.min():.3g} (ECDF)"
        )
        if self.passed:
            head = (
                f"SBC: ranks uniform for all {k} parameters ({min_p}; threshold "
                f"{self.threshold:.2g})"
            )
        else:
            worst = ", ".join(
                f"{lab} (p = {p:.2g} / {q:.2g})"
                for lab, p, q in zip(self.labels, self.pvalues, self.ecdf_pvalues, strict=True)
                if lab in self.failed
            )
            head = (
                f"SBC: ranks NOT uniform for {len(self.failed)} of {k} parameters: {worst} "
                f"(p chi-square / ECDF, threshold {self.threshold:.2g}): posterior intervals of "
                "this model are miscalibrated"
            )
        extreme = float(np.mean((self.ranks == 0) | (self.ranks == self.n_draws)))
        lines = [
            head,
            f"     {where}",
            f"     ranks at 0 or L: {extreme:.1%} (uniform: {2 / (self.n_draws + 1):.1%}; "
            "more means posteriors too narrow or chains that missed the truth)",
        ]
        n_div = int(np.sum(self.divergences > 0))
        if n_div:
            lines.append(f"     {n_div} replication(s) had divergent transitions")
        if n < 5 * self.bins:
            lines.append(
                f"     few replications: the test has little power below ~{5 * self.bins * 10}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (stored under ``sbc`` in the robustness results file)."""
        return {
            "verdict": self.verdict(),
            "passed": self.passed,
            "failed": list(self.failed),
            "n_replications": int(self.ranks.shape[0]),
            "n_draws": int(self.n_draws),
            "bins": int(self.bins),
            "threshold": float(self.threshold),
            "alpha": float(self.config.alpha),
            "parameters": {
                lab: {
                    "chi2": float(c),
                    "pvalue": float(p),
                    "ecdf_pvalue": float(q),
                    "ranks": self.ranks[:, j].tolist(),
                }
                for j, (lab, c, p, q) in enumerate(
                    zip(self.labels, self.chi2, self.pvalues, self.ecdf_pvalues, strict=True)
                )
            },
            "divergences": self.divergences.tolist(),
            "mean_tree_size": self.leapfrog_steps.tolist(),
            "languages": list(self.languages),
            "budgets": list(self.budgets),
            "config": self.config._asdict(),
            "seconds": float(self.seconds),
        }


# -- the reduced problem ---------------------------------------------------------------------------
def _sites(priors: Priors) -> tuple[str, ...]:
    return SBC_SITES + (("mu_b", "tau_b") if priors.hierarchical_transfer else ())


def _labels(languages: Sequence[str], priors: Priors) -> tuple[str, ...]:
    pairs = pair_labels(list(languages))
    out = []
    for site in _sites(priors):
        if site in ("b_offdiag", "kappa_offdiag"):
            out += [f"{site}[{p}]" for p in pairs]
        elif site in ("mu_b", "tau_b"):
            out.append(site)
        else:
            out += [f"{site}[{lang}]" for lang in languages]
    return tuple(out)


def sbc_problem(
    languages: Sequence[str],
    budgets: Sequence[float],
    priors: Priors,
    d_ref: float,
    reducible_loc: Sequence[float],
    irreducible_loc: Sequence[float],
    *,
    tail_start: float = 0.85,
    n_curve_points: int = 3,
) -> SbcProblem:
    """Build the reduced model: Algorithm-1 design, frozen priors, ranked parameters.

    Parameters
    ----------
    languages : sequence of str
        Languages of the reduced model (at least 2).
    budgets : sequence of float
        Budgets (tokens) of the design.
    priors : Priors
        Prior settings; ``"auto"`` locations are replaced by ``reducible_loc`` and
        ``irreducible_loc``.
    d_ref : float
        Reference budget (tokens) of the model.
    reducible_loc, irreducible_loc : sequence of float
        Prior locations of ``log_A`` and ``log_E`` per language.
    tail_start : float
        Fitted tail of each curve; curve points are spread evenly over ``[tail_start, 1]``.
    n_curve_points : int
        Evaluation points per run.

    Returns
    -------
    SbcProblem
    """
    from climb_bayes.data.design import algorithm1_design
    from climb_bayes.data.runs import runs_from_frame
    from climb_bayes.model.simulate import example_params, simulate_runs

    languages = tuple(languages)
    budgets = tuple(float(b) for b in budgets)
    frozen = priors.replace(
        reducible_loc={lang: float(v) for lang, v in zip(languages, reducible_loc, strict=True)},
        irreducible_loc={
            lang: float(v) for lang, v in zip(languages, irreducible_loc, strict=True)
        },
    )
    design = algorithm1_design(languages, budgets, seed=0, pool="central")
    fractions = np.linspace(tail_start, 1.0, n_curve_points) if tail_start < 1 else [1.0]
    # Any world gives the design's structure; the observations are replaced per replication.
    frame = simulate_runs(example_params(languages), design, curve_fractions=fractions, noise=False)
    runs = runs_from_frame(frame, source="<sbc design>", tail_start=tail_start)
    data = model_data(runs, frozen, d_ref=d_ref)
    return SbcProblem(languages, budgets, data, frozen, _labels(languages, frozen))


def problem_from_fit(fit: Fit, n_languages: int = 2, n_curve_points: int = 3) -> SbcProblem:
    """:func:`sbc_problem` for the first ``n_languages`` languages of a fit, at the smallest
    and largest of its budgets, with its priors, reference budget and prior locations."""
    runs = fit.runs
    langs = list(fit.languages)[:n_languages]
    if len(langs) < 2:
        raise ClimbError(f"SBC needs a fit with at least 2 languages, got {len(langs)}.")
    red, irr = prior_locations(runs, fit.priors)
    budgets = np.unique(np.asarray(runs.run_budgets, dtype=float))
    budgets = [budgets[0], budgets[-1]] if budgets.size > 1 else [budgets[0]]
    return sbc_problem(
        langs,
        budgets,
        fit.priors,
        fit.d_ref,
        red[: len(langs)],
        irr[: len(langs)],
        tail_start=runs.tail_start,
        n_curve_points=n_curve_points,
    )


# -- prior draws and ranks -------------------------------------------------------------------------
def prior_draw(key: jax.Array, problem: SbcProblem) -> dict[str, np.ndarray]:
    """One world and its observations drawn exactly from the reduced model's prior.

    The law's parameters are drawn from their stated priors and the losses from the model's
    likelihood (:func:`climb_bayes.model.climb_model.draw_prior`; ancestral sampling of the
    sampler's coordinates would not follow the prior).

    Returns
    -------
    dict
        Every sample and deterministic site of the model, ``log_loss`` included.
    """
    return draw_prior(key, problem.data, problem.priors)


def _flatten(values: dict[str, np.ndarray], sites: Sequence[str], lead: int) -> np.ndarray:
    """Ranked scalars of ``values`` as ``(*lead_shape, k)`` in :func:`_labels` order."""
    parts = []
    for site in sites:
        v = np.asarray(values[site], dtype=float)
        parts.append(v.reshape(v.shape[:lead] + (-1,)))
    return np.concatenate(parts, axis=-1)


def rank_statistic(key: jax.Array, draws: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Rank of each true value among posterior draws: ``#{draws < truth}``, ties split at random.

    Parameters
    ----------
    key : jax.Array
        PRNG key for breaking ties.
    draws : array (L, k)
        Posterior draws of ``k`` scalar parameters.
    truth : array (k,)
        True (prior-drawn) values.

    Returns
    -------
    numpy.ndarray of int, shape (k,)
        Ranks in ``0..L``.
    """
    draws = np.asarray(draws, dtype=float)
    truth = np.asarray(truth, dtype=float)
    below = np.sum(draws < truth, axis=0)
    ties = np.sum(draws == truth, axis=0)
    extra = np.asarray(jax.random.randint(key, below.shape, 0, ties + 1))
    return (below + extra).astype(int)


def default_bins(n_replications: int, n_draws: int) -> int:
    """Bins of the chi-square test: about 5 expected ranks per bin, 2 to 20 bins."""
    return int(max(2, min(20, n_replications // 5, n_draws + 1)))


def uniformity_test(
    ranks: np.ndarray, n_draws: int, bins: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Chi-square test that ranks are uniform on ``0..n_draws``, one test per column.

    Ranks are grouped into ``bins`` bins of (nearly) equal width; the expected count of each bin
    is exact under the discrete uniform distribution, so ``n_draws + 1`` need not divide evenly.

    Parameters
    ----------
    ranks : array (n, k)
        Ranks of ``k`` parameters over ``n`` replications.
    n_draws : int
        ``L``: ranks take the values ``0..L``.
    bins : int, optional
        Number of bins (:func:`default_bins` when omitted).

    Returns
    -------
    chi2, pvalue : numpy.ndarray, shape (k,)
    bins : int

    References
    ----------
    .. [1] Talts et al. (2018), Section 4 (binned rank histograms).
    """
    ranks = np.atleast_2d(np.asarray(ranks))
    if ranks.ndim != 2:
        raise ClimbError(f"ranks must be an (n, k) array, got shape {ranks.shape}.")
    if ranks.size and (ranks.min() < 0 or ranks.max() > n_draws):
        raise ClimbError(f"ranks must lie in 0..{n_draws}.")
    n = ranks.shape[0]
    bins = default_bins(n, n_draws) if bins is None else int(bins)
    if not 2 <= bins <= n_draws + 1:
        raise ClimbError(f"bins must lie in 2..{n_draws + 1}, got {bins}.")
    values = np.arange(n_draws + 1)
    which = values * bins // (n_draws + 1)  # bin of every possible rank
    expected = np.bincount(which, minlength=bins) / (n_draws + 1) * n
    chi2 = np.empty(ranks.shape[1])
    pval = np.empty(ranks.shape[1])
    for j in range(ranks.shape[1]):
        observed = np.bincount(which[ranks[:, j]], minlength=bins)
        res = scipy.stats.chisquare(observed, expected)
        chi2[j], pval[j] = float(res.statistic), float(res.pvalue)
    return chi2, pval, bins


def _below_counts(ranks: np.ndarray, n_draws: int) -> np.ndarray:
    """``#{ranks < j}`` for ``j = 1..L`` along the first axis: ``(L,) + ranks.shape[1:]``."""
    ranks = np.asarray(ranks)
    hist = np.apply_along_axis(np.bincount, 0, ranks, minlength=n_draws + 1)  # (L + 1, ...)
    return np.cumsum(hist, axis=0)[:-1]


def _min_tail_probability(counts: np.ndarray, n: int, n_draws: int) -> np.ndarray:
    """Smallest two-sided binomial tail probability of ECDF counts over ``z_j`` (axis 0)."""
    z = (np.arange(1, n_draws + 1) / (n_draws + 1)).reshape((-1,) + (1,) * (counts.ndim - 1))
    cdf = scipy.stats.binom.cdf(counts, n, z)
    sf = scipy.stats.binom.sf(counts - 1, n, z)  # P(X >= count)
    return np.min(np.minimum(1.0, 2 * np.minimum(cdf, sf)), axis=0)


def _null_min_tail(key: jax.Array, n: int, n_draws: int, n_sim: int) -> np.ndarray:
    """:func:`_min_tail_probability` of ``n_sim`` samples of ``n`` uniform ranks."""
    sims = np.asarray(jax.random.randint(key, (n, n_sim), 0, n_draws + 1))
    return _min_tail_probability(_below_counts(sims, n_draws), n, n_draws)


def ecdf_difference_bands(
    key: jax.Array, n: int, n_draws: int, alpha: float = 0.05, n_sim: int = 5000
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simultaneous ``1 - alpha`` bands of the rank ECDF minus the uniform CDF.

    The ECDF of ``n`` ranks on ``0..L`` is evaluated at ``z_j = j / (L + 1)``, ``j = 1..L``,
    where ``n F(z_j)`` is Binomial(``n``, ``z_j``) under uniformity. Pointwise binomial bands at
    level ``gamma`` are widened until a fraction ``1 - alpha`` of ``n_sim`` simulated uniform
    rank samples stays inside at every ``z_j`` (the simulation method of [1]_).

    Parameters
    ----------
    key : jax.Array
        PRNG key of the simulation.
    n : int
        Number of ranks (SBC replications).
    n_draws : int
        ``L``: ranks take the values ``0..L``.
    alpha : float
        One minus the simultaneous coverage.
    n_sim : int
        Simulated uniform samples.

    Returns
    -------
    z, lower, upper : numpy.ndarray, shape (L,)
        Evaluation points and the band of ``F(z) - z``.

    References
    ----------
    .. [1] Säilynoja, Bürkner & Vehtari (2022), Section 2.2.
    """
    L = int(n_draws)
    z = np.arange(1, L + 1) / (L + 1)
    gamma = float(np.quantile(_null_min_tail(key, n, L, n_sim), alpha))
    lower = scipy.stats.binom.ppf(gamma / 2, n, z) / n - z
    upper = scipy.stats.binom.ppf(1 - gamma / 2, n, z) / n - z
    return z, lower, upper


def ecdf_uniformity_test(
    key: jax.Array, ranks: np.ndarray, n_draws: int, n_sim: int = 5000
) -> np.ndarray:
    """P-values of the graphical ECDF test of uniformity, one per column of ``ranks``.

    The statistic is the smallest two-sided binomial tail probability of the rank ECDF over
    ``z_j = j / (L + 1)``; its null distribution is simulated (``n_sim`` uniform samples). A
    p-value below ``alpha`` is the same as leaving the ``1 - alpha`` band of
    :func:`ecdf_difference_bands` (same key). Unlike binned chi-square tests, it sees a pile-up
    of ranks at ``0`` or ``L`` (chains that never reached the truth) at any number of bins.

    Parameters
    ----------
    key : jax.Array
        PRNG key of the simulation.
    ranks : array (n, k)
        Ranks in ``0..n_draws``.
    n_draws : int
        ``L``.
    n_sim : int
        Simulated uniform samples (the smallest attainable p-value is ``1 / (n_sim + 1)``).

    Returns
    -------
    numpy.ndarray, shape (k,)

    References
    ----------
    .. [1] Säilynoja, Bürkner & Vehtari (2022), Sections 2.2 and 4.
    """
    ranks = np.atleast_2d(np.asarray(ranks))
    n = ranks.shape[0]
    null = np.sort(_null_min_tail(key, n, int(n_draws), n_sim))
    observed = _min_tail_probability(_below_counts(ranks, int(n_draws)), n, int(n_draws))
    below = np.searchsorted(null, observed * (1 + 1e-12), side="right")
    return (1.0 + below) / (n_sim + 1.0)


def ecdf_difference(ranks: np.ndarray, n_draws: int) -> np.ndarray:
    """``F(z_j) - z_j`` of each column of ``ranks`` at ``z_j = j / (L + 1)``: shape ``(L, k)``."""
    ranks = np.atleast_2d(np.asarray(ranks))
    L = int(n_draws)
    z = np.arange(1, L + 1) / (L + 1)
    return _below_counts(ranks, L) / ranks.shape[0] - z[:, None]


# -- one replication -------------------------------------------------------------------------------
def _sbc_model(obs_log_loss: jax.Array, *, data: ModelData, priors: Priors) -> None:
    climb_model(data._replace(obs_log_loss=obs_log_loss), priors)


def _compiled_sampler(problem: SbcProblem, config: SbcConfig) -> Callable[..., Any]:
    """Jitted NUTS for one replication: ``(chain_keys, inits, obs) -> (draws, divergences,
    leapfrog steps)``, with a leading chain axis on the keys, inits and every result.

    Each chain runs NumPyro's NUTS kernel (dense mass, windowed warm-up) on the observations
    ``obs``; chains run one after another inside the compiled call (``lax.map``: under
    ``vmap`` every branch of the tree building becomes a select, measured 1.4x slower to
    trace, compile and run here). The observations are a traced argument, so the function
    compiles once per process and serves every replication (NumPyro's ``MCMC`` recompiles for
    each new data set).
    """
    from numpyro.infer.hmc import hmc
    from numpyro.infer.util import initialize_model

    model = functools.partial(_sbc_model, data=problem.data, priors=problem.priors)
    obs0 = jnp.asarray(problem.data.obs_log_loss)
    info, potential_gen, postprocess_gen, _ = initialize_model(
        jax.random.PRNGKey(0), model, model_args=(obs0,), dynamic_args=True
    )
    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_gen, algo="NUTS")
    dense = [tuple(sorted(info.z))]
    n_iter = config.warmup + config.draws_per_chain
    keep = config.n_draws // config.chains

    def chain(key: jax.Array, z0: dict[str, jax.Array], obs: jax.Array) -> tuple[Any, ...]:
        state = init_kernel(
            z0,
            config.warmup,
            dense_mass=dense,
            target_accept_prob=config.target_accept,
            max_tree_depth=config.max_tree_depth,
            model_args=(obs,),
            rng_key=key,
        )

        def step(state: Any, _: None) -> tuple[Any, tuple[Any, ...]]:
            state = sample_kernel(state, model_args=(obs,))
            return state, (state.z, state.diverging, state.num_steps)

        _, (zs, div, steps) = jax.lax.scan(step, state, None, length=n_iter)
        zs = jax.tree.map(lambda x: x[config.warmup :: config.thin][:keep], zs)
        return jax.vmap(postprocess_gen(obs))(zs), jnp.sum(div[config.warmup :]), jnp.sum(steps)

    @jax.jit
    def run(keys: jax.Array, inits: dict[str, jax.Array], obs: jax.Array) -> tuple[Any, ...]:
        return jax.lax.map(lambda a: chain(a[0], a[1], obs), (keys, inits))

    return run


def _initial_values(key: jax.Array, problem: SbcProblem, chains: int) -> dict[str, jax.Array]:
    """Per-chain starts in unconstrained coordinates: the ``prior-centre`` start of
    ``climb-bayes fit`` (prior centre with transfer off, jittered by a quarter of the prior
    spread), so that SBC checks the sampler as the fits run it."""
    from climb_bayes.inference.nuts import chain_inits

    return chain_inits(key, problem.data, problem.priors, chains)


class Replication(NamedTuple):
    """Outcome of one SBC replication."""

    ranks: np.ndarray  # (k,) ints in 0..L
    divergences: int  # divergent transitions after warm-up, all chains
    tree_size: float  # mean leapfrog steps per iteration and chain


_SAMPLERS: dict[str, Callable[..., Any]] = {}
"""Per-process cache of compiled samplers (token of the study -> jitted function)."""


def sbc_replication(
    key: jax.Array,
    problem: SbcProblem,
    config: SbcConfig,
    sampler: Callable[..., Any] | None = None,
) -> Replication:
    """One replication of Talts et al.'s Algorithm 1: draw a world from the prior, simulate its
    losses, fit them with NUTS and rank the true values among the thinned draws.

    Parameters
    ----------
    key : jax.Array
        PRNG key of this replication (the only source of randomness).
    problem : SbcProblem
        The reduced model.
    config : SbcConfig
        Sampler settings.
    sampler : callable, optional
        The compiled sampler of an earlier replication with the same problem and config
        (skips compilation).

    Returns
    -------
    Replication
        Ranks in ``0..config.n_draws`` (in ``problem.labels`` order), divergences, tree size.

    References
    ----------
    .. [1] Talts et al. (2018), Algorithm 1.
    """
    k_prior, k_init, k_nuts, k_rank = jax.random.split(key, 4)
    truth = prior_draw(k_prior, problem)
    sampler = sampler or _compiled_sampler(problem, config)
    draws, div, steps = sampler(
        jax.random.split(k_nuts, config.chains),
        _initial_values(k_init, problem, config.chains),
        jnp.asarray(truth["log_loss"]),
    )
    sites = _sites(problem.priors)
    flat = _flatten({s: np.asarray(draws[s]) for s in sites}, sites, lead=2)
    ranks = rank_statistic(k_rank, flat.reshape(-1, flat.shape[-1]), _flatten(truth, sites, 0))
    n_iter = config.warmup + config.draws_per_chain
    return Replication(ranks, int(np.sum(div)), float(np.mean(steps)) / n_iter)


def _replication_task(task: dict[str, Any]) -> tuple[int, Replication, float]:
    """Runs in a worker process (or in-process): one replication, reusing the compiled
    sampler of the study."""
    from climb_bayes.runtime import setup_jax

    setup_jax()

    if task.get("cache_dir"):
        jax.config.update("jax_compilation_cache_dir", task["cache_dir"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    t0 = time.perf_counter()
    problem, config = task["problem"], task["config"]
    sampler = _SAMPLERS.get(task["token"])
    if sampler is None:
        _SAMPLERS.clear()
        sampler = _SAMPLERS[task["token"]] = _compiled_sampler(problem, config)
    key = jnp.asarray(task["key"], dtype=jnp.uint32)
    out = sbc_replication(key, problem, config, sampler)
    return task["index"], out, time.perf_counter() - t0


def run_sbc(
    key: jax.Array,
    problem: SbcProblem,
    config: SbcConfig | None = None,
    *,
    workers: int = 1,
    bins: int | None = None,
    log: Callable[[str], None] | None = None,
) -> SbcResult:
    """Simulation-based calibration: ``config.n_replications`` independent replications.

    Parameters
    ----------
    key : jax.Array
        PRNG key; replication ``i`` uses ``fold_in(split(key)[0], i)``, the ECDF test
        ``split(key)[1]`` (results do not depend on ``workers``).
    problem : SbcProblem
        The reduced model (:func:`sbc_problem`, :func:`problem_from_fit`).
    config : SbcConfig, optional
        Replications and sampler settings (:class:`SbcConfig` defaults when omitted).
    workers : int
        Worker processes; each compiles the sampler once and runs its share of replications.
    bins : int, optional
        Bins of the chi-square test (:func:`default_bins` by default).
    log : callable, optional
        Receives progress lines.

    Returns
    -------
    SbcResult

    References
    ----------
    .. [1] Talts et al. (2018), Algorithm 1.
    """
    config = config or SbcConfig()
    config.check()
    if workers < 1:
        raise ClimbError(f"workers must be >= 1, got {workers}.")
    log = log or (lambda _m: None)
    n = int(config.n_replications)
    token = uuid.uuid4().hex
    k_reps, k_test = jax.random.split(key)
    tasks = [
        {
            "index": i,
            "key": np.asarray(jax.random.fold_in(k_reps, i)),
            "problem": problem,
            "config": config,
            "token": token,
            "cache_dir": jax.config.jax_compilation_cache_dir,  # workers share the disk cache
        }
        for i in range(n)
    ]
    workers = min(workers, n)
    log(
        f"SBC: {n} replications on {len(problem.languages)} languages "
        f"({', '.join(problem.languages)}), {len(problem.labels)} parameters; NUTS "
        f"{config.chains} chains x ({config.warmup} warm-up + {config.draws_per_chain}) thinned "
        f"to L = {config.n_draws}; {workers} worker(s), each compiles once"
    )
    t0 = time.perf_counter()
    k = len(problem.labels)
    ranks = np.zeros((n, k), dtype=int)
    divergences = np.zeros(n, dtype=int)
    steps = np.zeros(n)

    def record(done: int, out: tuple[int, Replication, float]) -> None:
        i, rep, secs = out
        ranks[i], divergences[i], steps[i] = rep
        extra = f", {rep.divergences} divergences" if rep.divergences else ""
        log(
            f"SBC [{done}/{n}] replication {i}: {secs:.1f} s, mean tree size "
            f"{rep.tree_size:.0f}{extra} ({time.perf_counter() - t0:.0f} s)"
        )

    if workers > 1:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(_replication_task, t) for t in tasks]
            for done, fut in enumerate(as_completed(futures), 1):
                record(done, fut.result())
    else:
        try:
            for done, task in enumerate(tasks, 1):
                record(done, _replication_task(task))
        finally:
            _SAMPLERS.pop(token, None)
    chi2, pvalues, bins = uniformity_test(ranks, config.n_draws, bins)
    ecdf_p = ecdf_uniformity_test(k_test, ranks, config.n_draws)
    threshold = config.alpha / (2 * k)
    failed = tuple(
        lab
        for lab, p, q in zip(problem.labels, pvalues, ecdf_p, strict=True)
        if min(p, q) < threshold
    )
    return SbcResult(
        labels=problem.labels,
        ranks=ranks,
        n_draws=config.n_draws,
        bins=bins,
        chi2=chi2,
        pvalues=pvalues,
        ecdf_pvalues=ecdf_p,
        threshold=threshold,
        failed=failed,
        divergences=divergences,
        leapfrog_steps=steps,
        languages=problem.languages,
        budgets=problem.budgets,
        config=config,
        seconds=time.perf_counter() - t0,
    )
