"""Extrapolation discrepancy: the law itself is uncertain beyond the fitted budgets.

A posterior over a law's parameters says how well the data pin the law down; it says nothing
about whether the law's *form* holds 10x beyond the largest fitted budget. Measured on real
extrapolations (docs/benchmarks.md), posterior intervals that ignore this covered 10-50% of
held-out losses at 90% nominal. Following Kennedy & O'Hagan (2001), the log-loss of language
``i`` at a budget ``D`` outside the fitted range is the law plus a discrepancy

    delta_i(D, r) = x_i(D) * tau_i * (sqrt(rho) a_i + sqrt(1 - rho) c_i(r))

with ``x_i(D)`` the distance in ``log D`` outside language ``i``'s fitted budgets
(:func:`extrapolation_distance`; 0 inside, so interpolation is untouched),
``a_i ~ N(0, 1)`` shared by every mixture (the law bends the same way for all of them) and
``c_i(r)`` a unit-variance Gaussian process over mixtures (squared-exponential kernel, length
scale :data:`LENGTH_SCALE` in share space): mixtures far apart can be off differently, which is
what makes the ranking of two mixtures uncertain. The standard deviation grows linearly in the
log-distance: a slope error in ``log L`` vs ``log D`` (measured: the ratio ``|residual| / x`` of
leave-future-out residuals is roughly constant from 1.5x to 8x, docs/model.md).

``tau_i`` (log-loss per unit ``log D``) gets partial pooling across languages,
``log tau_i = log tau_0 + s psi_i``; ``tau_0`` has a prior calibrated on published benchmarks
(:data:`DISCREPANCY_PRIORS`, per law) and is updated by the leave-future-out residuals of the
user's own runs (:func:`calibrate`), where there are at least three budgets.

Units
-----
``tau`` in log-loss (relative error) per unit natural-log distance in ``D``; shares unit-free.

References
----------
.. [1] Kennedy & O'Hagan (2001), "Bayesian calibration of computer models", JRSS B 63(3)
   (model discrepancy as a Gaussian process added to the model).
.. [2] Brynjarsdottir & O'Hagan (2014), "Learning about physical parameters: the importance of
   model discrepancy", Inverse Problems 30 (discrepancy needs outside information: here the
   leave-future-out residuals and the benchmark prior).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LENGTH_SCALE",
    "extrapolation_distance",
    "DiscrepancyPrior",
    "DISCREPANCY_PRIORS",
    "discrepancy_prior",
    "Discrepancy",
    "LfoResiduals",
    "calibrate",
    "prior_discrepancy",
]

LENGTH_SCALE = 0.2
"""Correlation length (Euclidean distance of share vectors) of the mixture-specific part: two
mixtures 0.05 apart share 97% of it, two random 5-language mixtures (~0.4 apart) 14%."""


def extrapolation_distance(tokens: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Distance in ``log D`` outside the fitted budget range ``[lo, hi]`` (0 inside).

    ``max(0, log(D / hi)) + max(0, log(lo / D))``, natural log; ``tokens``, ``lo`` and ``hi``
    broadcast (e.g. ``(N,)`` budgets against per-observation ranges).
    """
    tokens = np.asarray(tokens, dtype=float)
    return np.maximum(0.0, np.log(tokens / hi)) + np.maximum(0.0, np.log(lo / tokens))


class DiscrepancyPrior(NamedTuple):
    """LogNormal prior of the typical discrepancy scale ``tau_0`` of one law.

    Attributes
    ----------
    median : float
        Median of ``tau_0`` (log-loss per unit ``log D``).
    log_sd : float
        sd of ``log tau_0``.
    source : str
        Where the numbers come from.
    """

    median: float
    log_sd: float
    source: str


_CALIBRATION = (
    "benchmarks/calibrate_discrepancy.py --method laplace: Data Mixing Laws 2Mix/3Mix, 70M and "
    "160M, fit on steps <= 40% of the last, geometric mean of the actual tau of the 4 sets"
)
DISCREPANCY_PRIORS: dict[str, DiscrepancyPrior] = {
    "climb": DiscrepancyPrior(0.0086, 0.60, _CALIBRATION),
    "msl": DiscrepancyPrior(0.0322, 0.82, _CALIBRATION),
    "dml": DiscrepancyPrior(0.0313, 1.07, _CALIBRATION),
    "isolated": DiscrepancyPrior(0.0394, 1.09, _CALIBRATION),
}
"""Per-law priors of ``tau_0`` (see :func:`discrepancy_prior`), from the printed table of the
calibration script (docs/model.md). The calibration sets are kept out of every evaluation in
docs/benchmarks.md (5Mix, RegMix, the default data)."""

_FALLBACK = DiscrepancyPrior(0.05, 0.8, "generic (law not calibrated)")


def discrepancy_prior(law: str) -> DiscrepancyPrior:
    """The calibrated prior of ``tau_0`` for ``law`` (a generic wide one for other laws)."""
    return DISCREPANCY_PRIORS.get(law, _FALLBACK)


class Discrepancy(NamedTuple):
    """Posterior (or prior) draws of the discrepancy of one fitted law.

    Attributes
    ----------
    tau : numpy.ndarray
        ``(S, m)`` scale per draw and language (log-loss per unit ``log D``).
    rho : numpy.ndarray
        ``(S,)`` share of the variance common to all mixtures.
    lo, hi : numpy.ndarray
        ``(m,)`` fitted budget range of each language (tokens).
    source : str
        ``"prior"`` or ``"lfo"`` (updated by leave-future-out residuals).
    length_scale : float
        Correlation length of the mixture-specific part.
    """

    tau: np.ndarray
    rho: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    source: str = "prior"
    length_scale: float = LENGTH_SCALE

    def distance(self, tokens: np.ndarray, group: np.ndarray) -> np.ndarray:
        """``(N,)`` distance in ``log D`` outside each observation's language range."""
        group = np.asarray(group, dtype=np.int64)
        return extrapolation_distance(tokens, self.lo[group], self.hi[group])

    def sd(self, tokens: np.ndarray, group: np.ndarray) -> np.ndarray:
        """``(S, N)`` standard deviation of the discrepancy at each observation."""
        x = self.distance(tokens, group)
        return self.tau[:, np.asarray(group, dtype=np.int64)] * x[None, :]

    def take(self, idx: np.ndarray) -> Discrepancy:
        """The draws ``idx`` (to pair with a subset of posterior draws)."""
        return self._replace(tau=self.tau[idx], rho=self.rho[idx])

    def sample(
        self,
        rng: np.random.Generator,
        tokens: np.ndarray,
        group: np.ndarray,
        r: np.ndarray,
    ) -> np.ndarray:
        """``(S, N)`` draws of ``delta`` at observations (one per discrepancy draw).

        Parameters
        ----------
        rng : numpy.random.Generator
        tokens : array (N,)
            Budgets (tokens).
        group : array of int (N,)
            Language of each observation.
        r : array (N, m)
            Mixture of each observation.
        """
        group = np.asarray(group, dtype=np.int64)
        s, m = self.tau.shape
        x = self.distance(tokens, group)
        out = np.zeros((s, x.size))
        live = x > 0
        if not live.any():
            return out
        mixes, k_of = np.unique(
            np.round(np.asarray(r, float)[live], 9), axis=0, return_inverse=True
        )
        k_of = np.asarray(k_of).ravel()
        d2 = np.sum((mixes[:, None, :] - mixes[None, :, :]) ** 2, axis=-1)
        kern = np.exp(-0.5 * d2 / self.length_scale**2) + 1e-9 * np.eye(mixes.shape[0])
        chol = np.linalg.cholesky(kern)
        c = np.einsum("kj,sjm->skm", chol, rng.standard_normal((s, mixes.shape[0], m)))
        a = rng.standard_normal((s, m))
        g = group[live]
        shared = np.sqrt(self.rho)[:, None] * a[:, g]
        specific = np.sqrt(1.0 - self.rho)[:, None] * c[:, k_of, g]
        out[:, live] = x[live][None, :] * self.tau[:, g] * (shared + specific)
        return out


class LfoResiduals(NamedTuple):
    """What the calibration needs from leave-future-out predictions of one law.

    Attributes
    ----------
    z : numpy.ndarray
        ``(n,)`` residual ``log y - E[log y | fold fit]`` (without discrepancy).
    v : numpy.ndarray
        ``(n,)`` predictive variance of ``log y`` without discrepancy (parameters, run effect,
        noise).
    x : numpy.ndarray
        ``(n,)`` distance in ``log D`` beyond the fold's fitted budgets.
    group : numpy.ndarray
        ``(n,)`` language of each residual.
    block : numpy.ndarray
        ``(n,)`` id of the (fold, language) the residual belongs to (shares ``a_i``).
    """

    z: np.ndarray
    v: np.ndarray
    x: np.ndarray
    group: np.ndarray
    block: np.ndarray

    @staticmethod
    def concat(parts: list[LfoResiduals]) -> LfoResiduals:
        """Residuals of several folds, block ids kept apart."""
        if not parts:
            e = np.zeros(0)
            return LfoResiduals(e, e, e, e.astype(np.int64), e.astype(np.int64))
        offset, blocks = 0, []
        for p in parts:
            blocks.append(np.asarray(p.block) + offset)
            offset += int(np.max(p.block)) + 1 if p.block.size else 0
        return LfoResiduals(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("z", "v", "x", "group")),
            np.concatenate(blocks),
        )


def _hyper_prior_draws(
    rng: np.random.Generator, prior: DiscrepancyPrior, m: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    log_tau0 = np.log(prior.median) + prior.log_sd * rng.standard_normal(n)
    spread = np.abs(0.5 * rng.standard_normal(n))
    tau = np.exp(log_tau0[:, None] + spread[:, None] * rng.standard_normal((n, m)))
    rho = rng.beta(2.0, 2.0, n)
    return tau, rho


def prior_discrepancy(
    prior: DiscrepancyPrior, lo: np.ndarray, hi: np.ndarray, n: int, seed: int = 0
) -> Discrepancy:
    """``n`` draws of the discrepancy from its prior (no leave-future-out evidence)."""
    tau, rho = _hyper_prior_draws(np.random.default_rng(seed), prior, len(lo), n)
    return Discrepancy(tau, rho, np.asarray(lo, float), np.asarray(hi, float), "prior")


def _block_log_density(
    z: jax.Array,
    v: jax.Array,
    x: jax.Array,
    tau: jax.Array,
    rho: jax.Array,
    block: jax.Array,
    n_blocks: int,
) -> jax.Array:
    """Sum over blocks of ``log N(z_B; 0, D_B + a_B a_B^T)`` (diagonal plus rank one).

    ``D = v + (1 - rho) tau^2 x^2`` and ``a = sqrt(rho) tau x``; matrix determinant lemma and
    Sherman-Morrison give the density in ``O(n)``.
    """
    d = v + (1.0 - rho) * (tau * x) ** 2
    a = jnp.sqrt(rho) * tau * x

    def seg(values: jax.Array) -> jax.Array:
        return jax.ops.segment_sum(values, block, num_segments=n_blocks)

    aa, az, zz = seg(a * a / d), seg(a * z / d), seg(z * z / d)
    quad = zz - az**2 / (1.0 + aa)
    logdet = seg(jnp.log(d)) + jnp.log1p(aa)
    return -0.5 * jnp.sum(quad + logdet) - 0.5 * z.size * jnp.log(2.0 * jnp.pi)


def calibrate(
    resid: LfoResiduals,
    prior: DiscrepancyPrior,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    n_draws: int = 1000,
    seed: int = 0,
) -> Discrepancy:
    """Posterior draws of the discrepancy given leave-future-out residuals of one law.

    The hierarchical model of the module docstring (``tau_0`` with ``prior``, per-language
    deviations ``s psi_i`` with ``s ~ HalfNormal(0.5)``, ``rho ~ Beta(2, 2)``), with the exact
    Gaussian likelihood of the residuals: within a (fold, language) block they share ``a_i``.
    Sampled with NumPyro's NUTS (2 chains); without residuals the draws are the prior's.

    Parameters
    ----------
    resid : LfoResiduals
        Residuals of every fold.
    prior : DiscrepancyPrior
        Prior of ``tau_0``.
    lo, hi : array (m,)
        The full fit's budget range per language (stored with the draws).
    n_draws : int
        Draws to return.
    seed : int
        Seed.

    Returns
    -------
    Discrepancy
    """
    m = len(lo)
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    keep = np.asarray(resid.x) > 0
    if not keep.any():
        return prior_discrepancy(prior, lo, hi, n_draws, seed)
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    z, v, x = (jnp.asarray(np.asarray(a, float)[keep]) for a in (resid.z, resid.v, resid.x))
    group = jnp.asarray(np.asarray(resid.group)[keep])
    _, block = np.unique(np.asarray(resid.block)[keep], return_inverse=True)
    n_blocks = int(block.max()) + 1

    def model() -> None:
        log_tau0 = numpyro.sample("log_tau0", dist.Normal(np.log(prior.median), prior.log_sd))
        spread = numpyro.sample("spread", dist.HalfNormal(0.5))
        psi = numpyro.sample("psi", dist.Normal(0.0, 1.0).expand([m]).to_event(1))
        rho = numpyro.sample("rho", dist.Beta(2.0, 2.0))
        tau = numpyro.deterministic("tau", jnp.exp(log_tau0 + spread * psi))
        numpyro.factor(
            "lfo", _block_log_density(z, v, x, tau[group], rho, jnp.asarray(block), n_blocks)
        )

    chains = 2
    mcmc = MCMC(
        NUTS(model, target_accept_prob=0.9),
        num_warmup=500,
        num_samples=-(-n_draws // chains),
        num_chains=chains,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed))
    post = mcmc.get_samples()
    tau = np.asarray(post["tau"])[:n_draws]
    rho = np.asarray(post["rho"])[:n_draws]
    return Discrepancy(tau, rho, lo, hi, "lfo")
