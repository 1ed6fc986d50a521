"""Extrapolation discrepancy: the law itself is uncertain beyond the fitted budgets.

A posterior over a law's parameters says how well the data pin the law down; it says nothing
about whether the law's *form* holds 10x beyond the largest fitted budget. Measured on real
extrapolations (docs/benchmarks.md), posterior intervals that ignore this covered 10-50% of
held-out losses at 90% nominal. Following Kennedy & O'Hagan (2001), the log-loss of language
``i`` at a budget ``D`` outside the fitted range is the law plus a discrepancy

    delta_i(D, r) = g_i(D) * tau_i * (sqrt(rho) a_i + sqrt(1 - rho) c_i(r)),
    g_i(D) = x_i(D) * (x_i(D) + W_i) + W_i^2 / 6   (outside the fitted range; 0 inside)

with ``x_i(D)`` the distance in ``log D`` outside language ``i``'s fitted budgets
(:func:`extrapolation_distance`; 0 inside, so interpolation is untouched) and ``W_i`` the
width of that range in ``log D`` (at least :data:`MIN_SPAN`; :func:`discrepancy_distance`),
``a_i ~ N(0, 1)`` shared by every mixture (the law bends the same way for all of them) and
``c_i(r)`` a unit-variance Gaussian process over mixtures (squared-exponential kernel, length
scale :data:`LENGTH_SCALE` in share space): mixtures far apart can be off differently, which is
what makes the ranking of two mixtures uncertain.

Why this ``g``: if the true ``log L`` bends away from the law with a curvature ``2 tau`` in
``log D``, a least-squares fit over a window of width ``W`` follows the chord, and its error at a
distance ``x`` beyond the window is ``tau (x^2 + W x + W^2/6)``: the chord's error at the edge,
``tau W^2/6``, a slope error ``tau W`` that grows with the fitted width, and the bend
``tau x^2``. ``tau`` is then a property of the curve, not of the window, so leave-future-out
folds that fit a shorter window estimate the same ``tau``. Measured (issue 13 notes): on a
simulated world whose ``log L`` bends quadratically away from the law
(tests/model/test_discrepancy.py) the 90% interval covered 0.56 with the linear form ``x`` and
0.84 with ``x (x + W)``; on 5Mix-70M, held-out budgets up to 8x, 0.71 and 1.00 (Gaussian
approximation; the shipped pipeline 0.99). The edge term (``"chord"``, the default since
2026-11-26; ``"curvature"`` leaves it out, as fits stored before did) matters for the folds'
evidence: just past a fold's cut ``x (x + W)`` is near 0, so a residual there of the chord's
size read as a huge ``tau``; on the RedPajama sets, whose inner folds extrapolate 1.1-1.2x, that
made the shipped intervals 2-4x too wide (docs/model.md). The leave-future-out evidence comes
from the folds nearest the full fit (:func:`climb_bayes.inference.lfo.lfo_folds` with
``keep="latest"``): on 5Mix the earliest folds (a span 5x shorter, early in training) gave a
linear-form ``tau`` 1.6-5.7x what the full fit's extrapolation needed. Fits stored before the
growth forms (no ``growth`` attribute) keep the linear one.

``tau_i`` (log-loss per squared unit of ``log D``) gets partial pooling across languages,
``log tau_i = log tau_0 + s psi_i``; ``tau_0`` has a prior calibrated on published benchmarks
(:data:`DISCREPANCY_PRIORS`, per law) and is updated by the leave-future-out residuals of the
user's own runs (:func:`calibrate`), where there are at least three budgets. Their likelihood
is the Gaussian the predictive draws: residuals of one mixture in one fold share its ``c_i(r)``
whatever their budgets (before 2026-12-02 each residual had its own, which overcounted the
evidence and put too much of the variance in the shared part, ``rho``; docs/model.md "One
mixture is one draw"), and a fold fit's parameter error, which bends all of that fold's
residuals together, enters as the low-rank covariance of the fold's posterior draws
(:func:`centre_factor`; before 2026-12-03 it was on the diagonal only and partly read as
discrepancy; docs/model.md "A fold's parameter error is not discrepancy").

A fold ends earlier in training than the full fit, and curves bend less later in training: on
the published 3Mix curves the ``tau`` of fits ending at 15-40% of the last step fell with where
the fit ended (docs/discrepancy_calibration.md, "trend actual"), and on the default data the
one inner fold (ending at half the full fit's budget), read as the full fit, gave a ``tau``
4-25x what the 3x holdouts need (docs/model.md, "Early folds bend more"). So a fold whose
fitted budgets end at ``c`` has ``tau_i (c / hi_i)^gamma`` (``hi_i`` the full fit's largest
budget of language ``i``; ``tau_i`` is the full fit's, the one the predictive uses),
``gamma ~ N(trend_mean, trend_sd)`` calibrated per law on the 3Mix curves
(:data:`DISCREPANCY_PRIORS`) and updated by the folds where they end at different budgets.
Beyond ``hi`` the predictive keeps ``tau_i`` (no further fall is assumed).
Out of sample, with inner folds that end at 1/6 and 1/3 of the fit's end (the default data's
geometry, beyond the calibration's range) on the 5Mix runs that continue to 100k steps, the trend
gave intervals no narrower than the shipped folds' and a lower CRPS than one ``tau`` on all four
splits (``benchmarks/trend_extrapolation.py``; docs/model.md, "The trend out of sample").

Units
-----
``tau`` in log-loss (relative error) per squared unit of natural-log ``D`` (per unit ``log D``
for the linear form); shares unit-free.

References
----------
.. [1] Kennedy & O'Hagan (2001), "Bayesian calibration of computer models", JRSS B 63(3)
   (model discrepancy as a Gaussian process added to the model).
.. [2] Brynjarsdottir & O'Hagan (2014), "Learning about physical parameters: the importance of
   model discrepancy", Inverse Problems 30 (discrepancy needs outside information: here the
   leave-future-out residuals and the benchmark prior).
.. [3] Rasmussen & Williams (2006), *Gaussian Processes for Machine Learning*, MIT Press,
   appendix A.3 (the matrix inversion and determinant lemmas of :func:`_cell_log_density`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "LENGTH_SCALE",
    "MIN_SPAN",
    "GROWTH_FORMS",
    "extrapolation_distance",
    "fitted_width",
    "discrepancy_distance",
    "edge_fraction",
    "DiscrepancyPrior",
    "DISCREPANCY_PRIORS",
    "discrepancy_prior",
    "Discrepancy",
    "LfoResiduals",
    "centre_factor",
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


MIN_SPAN = float(np.log(2.0))
"""Least fitted width ``W`` (natural-log budget span) in the bend term: a fit over budgets
less than 2x apart counts as a factor 2 (with one budget ``W`` would be 0)."""

GROWTH_FORMS = ("chord", "curvature", "linear")
"""How the discrepancy's sd grows with the distance ``x > 0``: ``x (x + W) + W^2/6`` (default),
``x (x + W)`` (fits stored before 2026-11-26) or ``x`` (fits stored before the bend term)."""


def fitted_width(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Width ``W`` of a fitted budget range in natural-log ``D``, at least :data:`MIN_SPAN`."""
    return np.maximum(np.log(np.asarray(hi, float) / np.asarray(lo, float)), MIN_SPAN)


def discrepancy_distance(
    tokens: np.ndarray, lo: np.ndarray, hi: np.ndarray, growth: str = "chord"
) -> np.ndarray:
    """The factor ``g`` that multiplies ``tau`` (module docstring), per budget.

    With ``x`` = :func:`extrapolation_distance` and ``W = max(log(hi / lo), MIN_SPAN)``:
    ``x (x + W) + W^2 / 6`` where ``x > 0`` (0 inside the range) for ``growth="chord"``,
    ``x (x + W)`` for ``"curvature"``, ``x`` for ``"linear"``. Arguments broadcast.
    """
    if growth not in GROWTH_FORMS:
        raise ValueError(f"growth must be one of {GROWTH_FORMS}, got {growth!r}.")
    x = extrapolation_distance(tokens, lo, hi)
    if growth == "linear":
        return x
    span = fitted_width(lo, hi)
    if growth == "curvature":
        return x * (x + span)
    return np.where(x > 0, x * (x + span) + span**2 / 6.0, 0.0)


def edge_fraction(
    tokens: np.ndarray, lo: np.ndarray, hi: np.ndarray, growth: str = "chord"
) -> np.ndarray:
    """Share of the discrepancy at ``tokens`` that the bend already puts at the fitted edge.

    Under the chord form the law's error at a distance ``x`` beyond the fitted window is
    ``tau (x (x + W) + W^2/6)`` and just past the edge ``tau W^2/6``: one realisation of the
    bend moves the true curve by ``q = (W^2/6) / g`` of its value at ``x`` there already
    (:func:`climb_bayes.inference.predictive.monotone_bounds` compares the curve at ``x`` with
    the curve at the edge). 0 inside the range and for the other growth forms (no edge term).
    """
    g = discrepancy_distance(tokens, lo, hi, growth)
    if growth != "chord":
        return np.zeros_like(g)
    span = fitted_width(lo, hi)
    return np.where(g > 0, span**2 / 6.0 / np.where(g > 0, g, 1.0), 0.0)


class DiscrepancyPrior(NamedTuple):
    """LogNormal prior of the typical discrepancy scale ``tau_0`` of one law, Normal of its trend.

    Attributes
    ----------
    median : float
        Median of ``tau_0`` (log-loss per squared unit of ``log D``).
    log_sd : float
        sd of ``log tau_0``.
    source : str
        Where the numbers come from.
    trend_mean, trend_sd : float
        Normal prior of the trend ``gamma`` of ``log tau`` in the log of where a fit ends
        (:func:`calibrate`): a fold whose fitted budgets end at ``c`` (tokens) has
        ``tau (c / hi)^gamma``, ``hi`` the full fit's largest budget. ``0, 0``: no trend (the
        model before 2026-12-03).
    """

    median: float
    log_sd: float
    source: str
    trend_mean: float = 0.0
    trend_sd: float = 0.0


_CALIBRATION = (
    "benchmarks/calibrate_discrepancy.py --method laplace: Data Mixing Laws 2Mix/3Mix, 70M and "
    "160M, fit on steps <= 40% of the last, geometric mean of the actual tau of the 4 sets; "
    "trend from fits ending at 15-40% of the last step on 3Mix"
)
DISCREPANCY_PRIORS: dict[str, DiscrepancyPrior] = {
    "climb": DiscrepancyPrior(0.0035, 0.93, _CALIBRATION, -1.39, 0.76),
    "msl": DiscrepancyPrior(0.0054, 0.50, _CALIBRATION, -0.63, 0.53),
    "dml": DiscrepancyPrior(0.0078, 0.50, _CALIBRATION, -0.53, 0.51),
    "isolated": DiscrepancyPrior(0.0084, 0.70, _CALIBRATION, 0.10, 0.50),
}
"""Per-law priors of ``tau_0`` and of its trend (see :func:`discrepancy_prior`), from the
printed table of the calibration script (docs/discrepancy_calibration.md). The calibration sets
are kept out of every evaluation in docs/benchmarks.md (5Mix, RegMix, the default data)."""

_FALLBACK = DiscrepancyPrior(
    0.02, 1.0, "generic (law not calibrated; above every calibrated median)", 0.0, 0.5
)


def discrepancy_prior(law: str) -> DiscrepancyPrior:
    """The calibrated prior of ``tau_0`` and its trend for ``law`` (a generic wide one for
    other laws)."""
    return DISCREPANCY_PRIORS.get(law, _FALLBACK)


class Discrepancy(NamedTuple):
    """Posterior (or prior) draws of the discrepancy of one fitted law.

    Attributes
    ----------
    tau : numpy.ndarray
        ``(S, m)`` scale per draw and language (log-loss per squared unit of ``log D``).
    rho : numpy.ndarray
        ``(S,)`` share of the variance common to all mixtures.
    lo, hi : numpy.ndarray
        ``(m,)`` fitted budget range of each language (tokens).
    source : str
        ``"prior"`` or ``"lfo"`` (updated by leave-future-out residuals).
    length_scale : float
        Correlation length of the mixture-specific part.
    growth : str
        One of :data:`GROWTH_FORMS` (:func:`discrepancy_distance`).
    trend : numpy.ndarray or None
        ``(S,)`` draws of the trend ``gamma`` of ``log tau`` in the log of where a fit ends
        (:func:`calibrate`; ``tau`` is at the full fit's end, where the predictive uses it).
        ``None`` for prior draws and fits stored before 2026-12-03.
    """

    tau: np.ndarray
    rho: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    source: str = "prior"
    length_scale: float = LENGTH_SCALE
    growth: str = "chord"
    trend: np.ndarray | None = None

    def distance(self, tokens: np.ndarray, group: np.ndarray) -> np.ndarray:
        """``(N,)`` factor ``g`` (:func:`discrepancy_distance`) of each observation."""
        group = np.asarray(group, dtype=np.int64)
        return discrepancy_distance(tokens, self.lo[group], self.hi[group], self.growth)

    def edge_fraction(self, tokens: np.ndarray, group: np.ndarray) -> np.ndarray:
        """``(N,)`` :func:`edge_fraction` of each observation."""
        group = np.asarray(group, dtype=np.int64)
        return edge_fraction(tokens, self.lo[group], self.hi[group], self.growth)

    def distance_at(self, budget: float) -> np.ndarray:
        """``(m,)`` factor ``g`` of every language at a budget (tokens; scalar or ``(m,)``)."""
        return discrepancy_distance(budget, self.lo, self.hi, self.growth)

    def sd(self, tokens: np.ndarray, group: np.ndarray) -> np.ndarray:
        """``(S, N)`` standard deviation of the discrepancy at each observation."""
        x = self.distance(tokens, group)
        return self.tau[:, np.asarray(group, dtype=np.int64)] * x[None, :]

    def for_range(self, lo: np.ndarray, hi: np.ndarray) -> Discrepancy:
        """The discrepancy of a fit over ``[lo, hi]`` (tokens, per language) that ends at or
        before this one's: distances from that range, and ``tau (hi / self.hi)^trend`` (an
        earlier end has the larger ``tau`` the calibration learned; unchanged without
        ``trend``). An inner fold's predictive is this, as in the calibration's likelihood."""
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        tau = self.tau
        if self.trend is not None:
            offset = _end_offset(hi, self.hi)
            tau = tau * np.exp(np.asarray(self.trend)[:, None] * offset[None, :])
        return self._replace(tau=tau, lo=lo, hi=hi)

    def take(self, idx: np.ndarray) -> Discrepancy:
        """The draws ``idx`` (to pair with a subset of posterior draws)."""
        trend = None if self.trend is None else self.trend[idx]
        return self._replace(tau=self.tau[idx], rho=self.rho[idx], trend=trend)

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
        ``(n,)`` factor ``g`` (:func:`discrepancy_distance`) beyond the fold's fitted budgets.
    group : numpy.ndarray
        ``(n,)`` language of each residual.
    block : numpy.ndarray
        ``(n,)`` id of the (fold, language) the residual belongs to (shares ``a_i``).
    mixture : numpy.ndarray or None
        ``(n, m)`` mixture (shares) of each residual's run: residuals of one block at one
        mixture share its ``c_i(r)``, and nearby mixtures are correlated through the kernel, as
        in :meth:`Discrepancy.sample`. ``None``: every residual has its own, independent
        mixture-specific part (the likelihood before 2026-12-02).
    cut : numpy.ndarray or None
        ``(n,)`` the largest budget (tokens) the fold fit had for the residual's language: where
        its extrapolation starts. With it :func:`calibrate` learns how ``tau`` changes with where
        a fit ends (``DiscrepancyPrior.trend_mean``); ``None``: every fold counts as the full
        fit (the likelihood before 2026-12-03).
    factor : numpy.ndarray or None
        ``(n, k)`` low-rank factor ``L`` of the covariance of the fold fit's predictive centre
        across its posterior draws (:func:`centre_factor`): the parameter (and run-effect) error
        of one fold is shared by all its residuals, and ``v`` counts it on the diagonal only.
        With it (and ``mixture``) the residuals' covariance is
        ``diag(v - rowsum(L^2)) + L L^T + discrepancy``. ``None``: residuals independent given
        the discrepancy (the likelihood before 2026-12-03).
    """

    z: np.ndarray
    v: np.ndarray
    x: np.ndarray
    group: np.ndarray
    block: np.ndarray
    mixture: np.ndarray | None = None
    factor: np.ndarray | None = None
    cut: np.ndarray | None = None

    @staticmethod
    def concat(parts: list[LfoResiduals]) -> LfoResiduals:
        """Residuals of several folds, block ids kept apart (mixtures and cuts kept where every
        part has them; factors, where every part has one, block-diagonal: folds are separate
        fits)."""
        if not parts:
            e = np.zeros(0)
            return LfoResiduals(e, e, e, e.astype(np.int64), e.astype(np.int64))
        offset, blocks = 0, []
        for p in parts:
            blocks.append(np.asarray(p.block) + offset)
            offset += int(np.max(p.block)) + 1 if p.block.size else 0
        mixed = all(p.mixture is not None for p in parts)
        factored = all(p.factor is not None for p in parts)
        cut = all(p.cut is not None for p in parts)
        import scipy.linalg  # here, not at import: JAX does not load it

        return LfoResiduals(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("z", "v", "x", "group")),
            np.concatenate(blocks),
            np.concatenate([p.mixture for p in parts]) if mixed else None,
            scipy.linalg.block_diag(*(p.factor for p in parts)) if factored else None,
            np.concatenate([p.cut for p in parts]) if cut else None,
        )


FACTOR_WIDTH = 20
"""Columns per group (fold) of the calibration's factor, at least: :func:`centre_factor`'s
``max_rank``. Narrower groups are padded with the zero column (an identity block in ``I + L^T
A^-1 L``: the same density), so every law's calibration of one fit has the same shapes and
they share one compiled sampler; measured on the default data, CLIMB's and the DML's factors
had 20 columns per fold, MSL's and Isolated's 12, and compiled two samplers (2026-12-07)."""


def centre_factor(
    centre: np.ndarray, max_rank: int = FACTOR_WIDTH, share: float = 0.99
) -> np.ndarray:
    """Low-rank factor ``L`` (``(n, k)``) with ``L L^T`` the covariance of ``centre``'s draws.

    The leading principal components of the ``(S, n)`` draws (a fold fit's predictive centre at
    its ``n`` held-out residuals), as many as explain ``share`` of the variance, at most
    ``max_rank``. Its rows' squared norms never exceed the draws' variance (``ddof=0``, as
    :meth:`~climb_bayes.inference.predictive.PredictiveParts.variance`), so the diagonal left
    for the rest, ``v - rowsum(L^2)``, stays at least the noise variance.

    Parameters
    ----------
    centre : numpy.ndarray
        ``(S, n)`` draws of the predictive centre of ``log y`` (log-loss).
    max_rank, share : int, float
        Most components, and the share of the total variance to keep.

    Returns
    -------
    numpy.ndarray
        ``(n, k)`` factor (log-loss).
    """
    c = np.asarray(centre, float)
    c = (c - c.mean(axis=0)) / np.sqrt(c.shape[0])
    _, s, vt = np.linalg.svd(c, full_matrices=False)
    var = s**2
    if var.sum() <= 0.0:
        return np.zeros((c.shape[1], 0))
    k = min(max_rank, int(np.searchsorted(np.cumsum(var) / var.sum(), share)) + 1)
    return vt[:k].T * s[:k]


def _end_offset(end: np.ndarray, full_end: np.ndarray) -> np.ndarray:
    """``log(end / full_end)``, at most 0: where a fold's fit ends relative to the full fit's
    end, the exponent's argument of ``tau (end / full_end)^gamma`` in both the calibration's
    likelihood (:func:`calibrate`) and a fold's predictive (:meth:`Discrepancy.for_range`)."""
    return np.minimum(np.log(np.asarray(end, float) / np.asarray(full_end, float)), 0.0)


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


class _Cells(NamedTuple):
    """Where each residual's mixture-specific part sits: residuals of one block at one mixture
    form a cell; a block's cells are padded to ``k`` slots."""

    cell: np.ndarray  # (n,) cell of each residual
    block: np.ndarray  # (C,) block of each cell
    slot: np.ndarray  # (C,) slot of each cell within its block
    kernel: np.ndarray  # (B, k, k) kernel between a block's cells (identity on padding)
    mask: np.ndarray  # (B, k) True on real cells


def _cells(block: np.ndarray, mixture: np.ndarray, length_scale: float) -> _Cells:
    """Group residuals into (block, mixture) cells (shares rounded to 9 decimals, as
    :meth:`Discrepancy.sample` does) and build each block's squared-exponential kernel."""
    n_blocks = int(block.max()) + 1
    key = np.column_stack([block, np.round(np.asarray(mixture, float), 9)])
    cells, cell = np.unique(key, axis=0, return_inverse=True)
    cell = np.asarray(cell).ravel()
    cell_block = cells[:, 0].astype(np.int64)
    shares = cells[:, 1:]
    first = np.searchsorted(cell_block, np.arange(n_blocks))  # cells are sorted by block
    slot = np.arange(cell_block.size) - first[cell_block]
    k = int(slot.max()) + 1
    padded = np.zeros((n_blocks, k, shares.shape[1]))
    padded[cell_block, slot] = shares
    mask = np.zeros((n_blocks, k), dtype=bool)
    mask[cell_block, slot] = True
    d2 = np.sum((padded[:, :, None, :] - padded[:, None, :, :]) ** 2, axis=-1)
    kern = np.exp(-0.5 * d2 / length_scale**2) * (mask[:, :, None] & mask[:, None, :])
    kern = kern + np.eye(k)[None] * np.where(mask, 1e-9, 1.0)[:, :, None]
    return _Cells(cell, cell_block, slot, kern, mask)


class _CellStatistics(NamedTuple):
    """What :func:`_statistics_log_density` needs of the residuals, the cells and the factor:
    everything that does not depend on ``tau`` and ``rho`` (:func:`_cell_statistics`). The
    factor's columns are split into groups that no block shares (a fold's parameter error
    touches that fold's blocks only), so ``M`` is block-diagonal over the groups."""

    fixed: np.ndarray  # (G, p, p) y^T V^-1 y - b^T b per group, y = [z, L of the group]
    log_det_v: np.ndarray  # () sum log v
    eigenvalues: np.ndarray  # (B, k) of W^1/2 K W^1/2 per block
    shared: np.ndarray  # (B, k) W^1/2 1 in its eigenbasis
    projected: np.ndarray  # (B, k, p) b(y) in its eigenbasis, y with its group's columns
    group: np.ndarray  # (B,) group of each block
    n: np.ndarray  # () residuals


def _factor_groups(block: np.ndarray, factor: np.ndarray, n_blocks: int) -> tuple:
    """``(group of each block, (G, r) column indices per group, -1 padded)``: the connected
    components of blocks and the factor columns that are non-zero on their residuals; a block
    that no column touches joins group 0 (its columns there are zero). Groups are at least
    :data:`FACTOR_WIDTH` wide."""
    import scipy.sparse
    import scipy.sparse.csgraph

    r = factor.shape[1]
    touches = np.zeros((n_blocks, r), dtype=bool)
    np.logical_or.at(touches, block, factor != 0.0)
    rows, cols = np.nonzero(touches)
    graph = scipy.sparse.coo_matrix(
        (np.ones(rows.size), (rows, n_blocks + cols)), shape=(n_blocks + r, n_blocks + r)
    )
    _, label = scipy.sparse.csgraph.connected_components(graph, directed=False)
    col_label = label[n_blocks:]
    groups = list(dict.fromkeys(col_label.tolist())) or [-1]
    columns = [np.flatnonzero(col_label == g) for g in groups]
    width = max(c.size for c in columns)
    if r:  # one width for every law's factor: the calibrations share one compiled sampler
        width = max(width, FACTOR_WIDTH)
    index = np.full((len(groups), width), -1)
    for g, c in enumerate(columns):
        index[g, : c.size] = c
    where = {g: i for i, g in enumerate(groups)}
    block_group = np.array([where.get(label[b], 0) for b in range(n_blocks)])
    return block_group, index


def _cell_statistics(
    z: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    cells: _Cells,
    factor: np.ndarray | None = None,
) -> _CellStatistics:
    """The parts of :func:`_cell_log_density` that depend on the data alone, computed once per
    calibration: the cells' weights and projections and, per block, the eigen-decomposition of
    ``W^{1/2} K W^{1/2}`` (``K`` the kernel between the block's cells), in whose basis the
    hyper-parameters enter only through a diagonal and one rank-one term."""
    z, v, x = (np.asarray(a, dtype=float) for a in (z, v, x))
    cell, block, slot = (np.asarray(a) for a in (cells.cell, cells.block, cells.slot))
    shape = np.asarray(cells.mask).shape
    res_block = block[cell]  # block of each residual
    if factor is None:
        factor = np.zeros((z.size, 0))
    block_group, index = _factor_groups(res_block, np.asarray(factor, float), shape[0])
    own = index[block_group[res_block]]  # (n, r) each residual's group's columns
    padded = np.concatenate([factor, np.zeros((z.size, 1))], axis=1)  # column -1: zeros
    y = np.concatenate([z[:, None], np.take_along_axis(padded, own, axis=1)], axis=1)
    w = np.bincount(cell, x * x / v, minlength=block.size)
    xy = np.zeros((block.size, y.shape[1]))
    np.add.at(xy, cell, (x / v)[:, None] * y)
    sqrt_w = np.zeros(shape)
    sqrt_w[block, slot] = np.sqrt(w)
    b = np.zeros((*shape, y.shape[1]))
    b[block, slot] = xy / np.sqrt(w)[:, None]
    fixed = np.zeros((index.shape[0], y.shape[1], y.shape[1]))
    np.add.at(fixed, block_group[res_block], (y / v[:, None])[:, :, None] * y[:, None, :])
    np.add.at(fixed, block_group, -np.einsum("bkp,bkq->bpq", b, b))
    scaled = sqrt_w[:, :, None] * np.asarray(cells.kernel) * sqrt_w[:, None, :]
    eigenvalues, q = np.linalg.eigh(0.5 * (scaled + np.swapaxes(scaled, 1, 2)))
    return _CellStatistics(
        fixed,
        np.asarray(np.sum(np.log(v))),
        eigenvalues,
        np.einsum("bkj,bk->bj", q, sqrt_w),
        np.einsum("bkj,bkp->bjp", q, b),
        block_group,
        np.asarray(float(z.size)),
    )


def _statistics_log_density(
    stats: _CellStatistics, tau_block: jax.Array, rho: jax.Array
) -> jax.Array:
    """:func:`_cell_log_density` from its :func:`_cell_statistics`.

    Per block, ``S = I + W^{1/2} C W^{1/2} = I + alpha u u^T + beta M`` with ``u = W^{1/2} 1``,
    ``M = W^{1/2} K W^{1/2} = Q diag(lambda) Q^T``, ``alpha = tau^2 rho`` and
    ``beta = tau^2 (1 - rho)``; with ``D = I + beta diag(lambda)``, ``u~ = Q^T u`` and
    ``b~ = Q^T b``, Sherman-Morrison and the determinant lemma give

        log det S = sum log D + log(1 + alpha s),   s = u~^T D^-1 u~,
        b^T S^-1 b = b~^T D^-1 b~ - alpha t t^T / (1 + alpha s),   t = b~^T D^-1 u~,

    elementwise work instead of a Cholesky factorisation per block and evaluation, and the
    factor's ``M`` factorised per group of columns (per fold) instead of whole. Measured on the
    default data's DML residuals (10 blocks of up to 21 cells, two folds, a 40-column factor),
    one value and gradient in a compiled loop: 274 us with a Cholesky factorisation per block,
    96 us in the eigenbasis with ``M`` whole, 61 us with it per fold; the same density to
    1e-12."""
    alpha = tau_block**2 * rho
    beta = tau_block**2 * (1.0 - rho)
    d = 1.0 + beta[:, None] * stats.eigenvalues
    c = stats.shared / d
    s = jnp.sum(stats.shared * c, axis=1)
    t = jnp.einsum("bkp,bk->bp", stats.projected, c)
    per_block = jnp.einsum("bkp,bk,bkq->bpq", stats.projected, 1.0 / d, stats.projected)
    per_block = per_block - (alpha / (1.0 + alpha * s))[:, None, None] * (
        t[:, :, None] * t[:, None, :]
    )
    n_groups = stats.fixed.shape[0]
    gram = stats.fixed + jax.ops.segment_sum(per_block, stats.group, num_segments=n_groups)
    logdet = stats.log_det_v + jnp.sum(jnp.log(d)) + jnp.sum(jnp.log1p(alpha * s))
    quad = jnp.sum(gram[:, 0, 0])  # y^T A^-1 y per group
    if gram.shape[1] > 1:  # the factor L: M = I + L^T A^-1 L, one per group
        chol_m = jnp.linalg.cholesky(jnp.eye(gram.shape[1] - 1)[None] + gram[:, 1:, 1:])
        u = jax.scipy.linalg.solve_triangular(chol_m, gram[:, 1:, :1], lower=True)
        quad = quad - jnp.sum(u**2)
        logdet = logdet + 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol_m, axis1=1, axis2=2)))
    return -0.5 * (quad + logdet) - 0.5 * stats.n * jnp.log(2.0 * jnp.pi)


def _cell_log_density(
    z: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    tau_block: jax.Array,
    rho: jax.Array,
    cells: _Cells,
    factor: np.ndarray | None = None,
) -> jax.Array:
    """``log N(z; 0, V + U C U^T [+ L L^T])``: the discrepancy as :meth:`Discrepancy.sample`
    draws it, plus the fold fits' shared parameter error where ``factor`` (``L``) is given.

    Within a block (one fold and language, one ``tau``) a residual at mixture ``k`` has
    ``delta = x tau (sqrt(rho) a + sqrt(1 - rho) c_k)``, so with ``U = diag(x) P`` (``P`` maps
    residuals to their cell) the block's covariance is ``A = V + U C U^T`` with
    ``C = tau^2 (rho 1 1^T + (1 - rho) K)`` over its cells. Because every residual sits in one
    cell, ``U^T V^{-1} U = W`` is diagonal (``W_k = sum x^2 / v`` over cell ``k``), and the
    determinant lemma and Woodbury give, with ``S = I + W^{1/2} C W^{1/2}`` and
    ``b_k(y) = W_k^{-1/2} sum x y / v``,

        log det A = sum log v + log det S,
        y^T A^{-1} y' = sum y y' / v - b(y)^T b(y') + b(y)^T S^{-1} b(y'),

    ``O(n + B k^2)`` per evaluation once the data's part is computed
    (:func:`_statistics_log_density`). ``L`` couples the blocks (a fold's parameters are
    shared by its languages and mixtures); with ``M = I + L^T A^{-1} L`` the same two lemmas
    give ``log det A + log det M`` and ``z^T A^{-1} z - (L^T A^{-1} z)^T M^{-1} (L^T A^{-1} z)``:
    one Cholesky factorisation, of ``M``. ``z``, ``v``, ``x`` and ``factor`` are data
    (NumPy), ``tau_block`` and ``rho`` may be traced.
    """
    return _statistics_log_density(_cell_statistics(z, v, x, cells, factor), tau_block, rho)


_CHAINS = 2


@functools.lru_cache(maxsize=8)
def _chains_in_parallel(single_chain: Any, collect_fields: tuple, remove_sites: tuple) -> Any:
    """``jax.pmap`` of NumPyro's one-chain function (``MCMC._single_chain_mcmc``) with the
    model's arguments broadcast to the devices as arguments (cached per sampler)."""

    def chain(map_args: Any, args: Any, kwargs: Any) -> Any:
        return single_chain(
            map_args,
            args=args,
            kwargs=kwargs,
            collect_fields=collect_fields,
            remove_sites=remove_sites,
        )

    return jax.pmap(chain, in_axes=(0, None, None))


def _parallel_with_data_as_arguments(chain_fn: functools.partial) -> Any:
    """``MCMC``'s ``chain_method`` (a callable is public API): its chains in parallel like
    ``"parallel"``, but the model's arguments enter the compiled program as arguments.

    With ``"parallel"`` NumPyro maps a ``functools.partial`` that holds the model's arguments,
    so they are compiled in as constants and every call with other data compiles the whole
    sampler again (``jit_model_args`` does not reach that path): the four laws' calibrations of
    one fit compiled four programs of 8.5-11 s each on a 2-core AMD EPYC without AVX-512
    (2026-12-07, ``JAX_LOG_COMPILES=1``); with the arguments mapped, one program serves every
    calibration of the same shapes (:data:`FACTOR_WIDTH` makes the laws' shapes equal). The
    same model, keys and chains; the draws move only by rounding, as XLA no longer folds the
    data into the program (docs/performance.md).
    """
    kw = getattr(chain_fn, "keywords", {})
    if not {"args", "kwargs", "collect_fields", "remove_sites"} <= kw.keys():
        return jax.pmap(chain_fn)  # another NumPyro layout: its own "parallel", data as constants
    mapped = _chains_in_parallel(chain_fn.func, kw["collect_fields"], kw["remove_sites"])
    return lambda map_args: mapped(map_args, kw["args"], kw["kwargs"])


@functools.lru_cache(maxsize=8)
def _calibration_sampler(m: int, n_blocks: int, samples_per_chain: int, by_cell: bool) -> Any:
    """NumPyro ``MCMC`` for :func:`calibrate`, with the data as arguments: one ensemble
    calibrates every law on residuals of the same shape, and the cached sampler compiles once
    (measured on the default data: 3.0 s per law when rebuilt, 1.8 s when reused). Its two
    chains run in parallel where there is a host device per chain (as every NUTS fit here):
    the four laws of the default fit in 4.1 s instead of 7.4 s sequentially, with the compile
    cache of earlier fits (2-core machine; the first compilation of the parallel program takes
    ~10 s longer; measured 2026-11-26). With the cells' likelihood and the fold factor (both
    added later) the four calibrations took 29.6 s on a 2-core AMD EPYC machine, 9.2 s since
    :func:`_statistics_log_density` (2026-12-04, warm cache). ``by_cell``: the likelihood of
    :func:`_cell_log_density` (residuals with their mixtures, and the fold fits' parameter-error
    factor where given) from its :func:`_cell_statistics`, else :func:`_block_log_density`."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    def model(z, v, x, group, block, stats, block_group, offset, log_median, log_sd, trend) -> None:
        log_tau0 = numpyro.sample("log_tau0", dist.Normal(log_median, log_sd))
        spread = numpyro.sample("spread", dist.HalfNormal(0.5))
        psi = numpyro.sample("psi", dist.Normal(0.0, 1.0).expand([m]).to_event(1))
        rho = numpyro.sample("rho", dist.Beta(2.0, 2.0))
        gamma_raw = numpyro.sample("gamma_raw", dist.Normal(0.0, 1.0))
        gamma = numpyro.deterministic("gamma", trend[0] + trend[1] * gamma_raw)
        tau = numpyro.deterministic("tau", jnp.exp(log_tau0 + spread * psi))
        shift = jnp.exp(gamma * offset)  # per block (cells) or per residual: where folds end
        if by_cell:
            density = _statistics_log_density(stats, tau[block_group] * shift, rho)
        else:
            density = _block_log_density(z, v, x, tau[group] * shift, rho, block, n_blocks)
        numpyro.factor("lfo", density)

    return MCMC(
        NUTS(model, target_accept_prob=0.9),
        num_warmup=500,
        num_samples=samples_per_chain,
        num_chains=_CHAINS,
        chain_method=(
            _parallel_with_data_as_arguments
            if jax.local_device_count() >= _CHAINS
            else "sequential"
        ),
        progress_bar=False,
        jit_model_args=True,
    )


def calibrate(
    resid: LfoResiduals,
    prior: DiscrepancyPrior,
    lo: np.ndarray,
    hi: np.ndarray,
    *,
    n_draws: int = 1000,
    seed: int = 0,
    length_scale: float = LENGTH_SCALE,
) -> Discrepancy:
    """Posterior draws of the discrepancy given leave-future-out residuals of one law.

    The hierarchical model of the module docstring (``tau_0`` with ``prior``, per-language
    deviations ``s psi_i`` with ``s ~ HalfNormal(0.5)``, ``rho ~ Beta(2, 2)``), with the exact
    Gaussian likelihood of the residuals: within a (fold, language) block they share ``a_i``,
    and, where ``resid.mixture`` is given, residuals at one mixture share ``c_i(r)`` and
    mixtures are correlated through the kernel of length ``length_scale``
    (:func:`_cell_log_density`), so a mixture seen at several budgets counts as one draw of its
    specific part, as the predictive draws it; where ``resid.factor`` is given too, a fold
    fit's parameter error, shared by all its residuals, is in the likelihood as the low-rank
    covariance it has, so it is not read as discrepancy; where ``resid.cut`` is given, a fold
    ending at ``c`` has ``tau (c / hi)^gamma`` with ``gamma`` from the prior's trend (module
    docstring), and the draws are of ``tau`` at ``hi``. Sampled with NumPyro's NUTS
    (2 chains); without residuals the draws are the prior's.

    Parameters
    ----------
    resid : LfoResiduals
        Residuals of every fold.
    prior : DiscrepancyPrior
        Prior of ``tau_0`` and of the trend ``gamma``.
    lo, hi : array (m,)
        The full fit's budget range per language (tokens; stored with the draws; ``hi`` is
        where ``tau`` is referred to).
    n_draws : int
        Draws to return.
    seed : int
        Seed.
    length_scale : float
        Correlation length of the mixture-specific part (stored with the draws).

    Returns
    -------
    Discrepancy
    """
    m = len(lo)
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    keep = np.asarray(resid.x) > 0
    if not keep.any():
        return prior_discrepancy(prior, lo, hi, n_draws, seed)._replace(length_scale=length_scale)
    v_np = np.asarray(resid.v, float)[keep]
    factor = None
    if resid.factor is not None and resid.mixture is not None:
        f_np = np.asarray(resid.factor, float)[keep]
        f_np = f_np[:, np.any(f_np != 0.0, axis=0)]  # components of folds with residuals here
        if f_np.shape[1]:
            # the factor's share of v moves off the diagonal (never below 1% of v)
            v_np = np.maximum(v_np - np.sum(f_np**2, axis=1), 0.01 * v_np)
            factor = f_np
    z_np, x_np = (np.asarray(a, float)[keep] for a in (resid.z, resid.x))
    group_np = np.asarray(resid.group)[keep]
    _, block = np.unique(np.asarray(resid.block)[keep], return_inverse=True)
    block = np.asarray(block).ravel()
    n_blocks = int(block.max()) + 1
    offset = np.zeros(group_np.size)  # log(where the fold's fit ends / the full fit's hi)
    if resid.cut is not None:
        offset = _end_offset(np.asarray(resid.cut)[keep], hi[group_np])
    stats = block_group = None
    if resid.mixture is not None:
        cells = _cells(block, np.asarray(resid.mixture)[keep], length_scale)
        stats = _CellStatistics(
            *(jnp.asarray(a) for a in _cell_statistics(z_np, v_np, x_np, cells, factor))
        )
        block_group = np.zeros(n_blocks, dtype=np.int64)
        block_group[block] = group_np
        block_group = jnp.asarray(block_group)
        block_offset = np.zeros(n_blocks)
        block_offset[block] = offset  # one fold and language: one end of the fit
        offset = block_offset
    mcmc = _calibration_sampler(m, n_blocks, -(-n_draws // _CHAINS), stats is not None)
    mcmc.run(
        jax.random.PRNGKey(seed),
        jnp.asarray(z_np),
        jnp.asarray(v_np),
        jnp.asarray(x_np),
        jnp.asarray(group_np),
        jnp.asarray(block),
        stats,
        block_group,
        jnp.asarray(offset),
        float(np.log(prior.median)),
        float(prior.log_sd),
        jnp.asarray([prior.trend_mean, prior.trend_sd], dtype=float),
    )
    post = mcmc.get_samples()
    tau, rho, trend = (np.asarray(post[k])[:n_draws] for k in ("tau", "rho", "gamma"))
    return Discrepancy(tau, rho, lo, hi, "lfo", length_scale, trend=trend)
