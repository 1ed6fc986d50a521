"""Mixture discrepancy: the law is uncertain at shares the fitted runs never gave a language.

The budget discrepancy (:mod:`climb_bayes.model.discrepancy`) grows with the distance beyond the
fitted *budgets*. A mixture that gives some language a share outside the range the fitted runs
cover extrapolates the law in *mixture* as well: its transfer terms (how much one language's
data helps another's loss) are read off shares that were never trained. Following Kennedy &
O'Hagan (2001) again, the log-loss of language ``i`` at mixture ``r`` gets a further error

    eps_i(r) ~ Normal(0, (kappa * u_i(r))^2),
    u_i(r) = sum_j e_j(r),
    e_j(r) = max(0, log((r_j + f) / (hi_j + f))) + max(0, log((lo_j + f) / (r_j + f)))

with ``[lo_j, hi_j]`` the range of language ``j``'s share over the fitted runs and ``f`` =
:data:`SHARE_FLOOR` (so a share of 0 against a fitted 0.01 is a factor 2, not infinite).
``e_j`` is 0 inside the range, so mixtures among the fitted ones are untouched (every mixture
is inside when the runs train each language alone and at 0, as the Algorithm-1 design does).
One draw of ``eps`` is shared by all budgets of one (mixture, language): it is an error of the
law at that mixture, not noise.

Why the sum over all languages, not language ``i``'s own share: on the leave-extreme-mixtures-out
splits of the calibration (:data:`MIXTURE_SCALES`), fitting separate scales for a language's own
excess and the others' gave the stacked predictive 0.014 and 0.008 per unit, and the other
languages' losses missed nearly as often as the extrapolated language's own when one share left
its range (the transfer terms extrapolate too): Gaussian 90% coverage 0.89 of the 1,253 held-out
losses with no excess of their own share, 0.87 of the 257 with. One scale on the sum is the
simpler model for both.

Measured (``benchmarks/calibrate_mixture.py``, docs/mixture_calibration.md, 2026-12-06; 13
splits: Data Mixing Laws 5Mix and RedPajama at 70M and 410M, each holding out the runs that give
one domain its largest share, and AutoScale's DDO runs with one domain tripled; scored at the
fitted budgets, so only the mixture extrapolates): the shipped stacked predictive's 50% / 90%
intervals covered 0.51 / 0.86 of the 1,510 held-out losses without the term and 0.63 / 0.94
with it (DDO 0.20 / 0.55 -> 0.59 / 0.84; the worst split, RedPajama-410M with github at 0.56
against a fitted 0.28 at most, 0.20 / 0.50 -> 0.33 / 1.00). Out of sample, with ``kappa``
refitted without one family of tables and scored on it (Gaussian approximation): 5Mix 90%
coverage 0.93 -> 0.95, RedPajama 0.89 -> 0.97, DDO 0.63 -> 0.84; and on the model sizes the
calibration did not use (160M and 305M, 12 splits, the shipped scales, samples) 0.49 / 0.87 ->
0.63 / 0.95. ``kappa`` is per law (each
law's own residuals; 0.008-0.017).

The predictive (``predict``, ``evaluate``, the stacking densities, ``report``'s intervals) draws
``eps`` independently per (mixture, language). The decision draws of ``optimize`` and ``suggest``
(:mod:`climb_bayes.decisions.ensemble_decision`) need each draw's objective smooth in ``r``, so
there one draw is ``kappa z_i u(r)`` with ``z_i`` shared by every mixture of that draw: the same
sd at each mixture, the Bayes decision (the mean over draws of ``exp``) penalising a mixture by
about ``exp((kappa u)^2 / 2)``. ``optimize`` still warns when its recommendation leaves the
fitted shares (:mod:`climb_bayes.decisions.mixture_support`).

Units
-----
``kappa`` in log-loss (relative error of the loss) per unit of natural-log share ratio.

References
----------
.. [1] Kennedy & O'Hagan (2001), "Bayesian calibration of computer models", JRSS B 63(3).
.. [2] Kang, F. et al. (2025), "AutoScale: Scale-Aware Data Mixing for Pre-Training LLMs",
   arXiv 2407.20177 (the DDO perturbation runs of the calibration).
.. [3] Ye, J. et al. (2024), "Data Mixing Laws: Optimizing Data Mixtures by Predicting Language
   Modeling Performance", arXiv 2403.16952 (the 5Mix and RedPajama runs of the calibration).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "SHARE_FLOOR",
    "MixtureScale",
    "MIXTURE_SCALES",
    "mixture_scale",
    "ShareRange",
    "share_range",
    "share_excess",
    "mixture_distance",
    "mixture_sd",
    "mixture_draws",
]

SHARE_FLOOR = 0.01
"""Share added to both sides of the log ratio of :func:`share_excess`: one point of share (the
rounding of a typical table), so a share of 0 against a fitted 0.01 counts as a factor 2."""


class MixtureScale(NamedTuple):
    """The calibrated scale of the mixture discrepancy.

    Attributes
    ----------
    kappa : float
        sd of ``log L`` per unit of the distance ``u`` (:func:`mixture_distance`).
    source : str
        Where the number comes from.
    """

    kappa: float
    source: str


_CALIBRATION = (
    "benchmarks/calibrate_mixture.py: 13 leave-extreme-mixtures-out splits of Data Mixing "
    "Laws 5Mix/RedPajama 70M and 410M and AutoScale DDO, Laplace fits, pooled maximum likelihood"
)
MIXTURE_SCALES: dict[str, MixtureScale] = {
    "climb": MixtureScale(0.0080, _CALIBRATION),
    "msl": MixtureScale(0.0163, _CALIBRATION),
    "dml": MixtureScale(0.0122, _CALIBRATION),
    "isolated": MixtureScale(0.0173, _CALIBRATION),
}
"""Per-law ``kappa`` from the printed table of the calibration script (docs/model.md,
"Mixtures beyond the fitted shares")."""

_FALLBACK = MixtureScale(0.02, "generic (law not calibrated; above every calibrated kappa)")


def mixture_scale(law: str) -> MixtureScale:
    """The calibrated scale of ``law``'s mixture discrepancy (a generic larger one for other
    laws)."""
    return MIXTURE_SCALES.get(law, _FALLBACK)


class ShareRange(NamedTuple):
    """Lowest and highest share of each language over the fitted runs (``(m,)`` each)."""

    lo: np.ndarray
    hi: np.ndarray


def share_range(run_r: np.ndarray, runs: np.ndarray | None = None) -> ShareRange:
    """The per-language share range of the runs ``runs`` (indices into ``run_r``, ``(R, m)``;
    all rows by default)."""
    r = np.asarray(run_r, dtype=float)
    if runs is not None:
        r = r[np.unique(np.asarray(runs, dtype=np.int64))]
    return ShareRange(r.min(axis=0), r.max(axis=0))


def share_excess(r: Any, fitted: ShareRange, xp: Any = np) -> Any:
    """``(..., m)`` log ratio ``e_j`` by which each share of ``r`` lies outside its fitted
    range (module docstring; 0 inside). ``xp``: the array namespace (``jax.numpy`` for the
    decision objective, which differentiates it in ``r``)."""
    r = (np.asarray(r, dtype=float) if xp is np else r) + SHARE_FLOOR
    lo, hi = fitted.lo + SHARE_FLOOR, fitted.hi + SHARE_FLOOR
    return xp.maximum(0.0, xp.log(r / hi)) + xp.maximum(0.0, xp.log(lo / r))


def mixture_distance(r: Any, fitted: ShareRange, xp: Any = np) -> Any:
    """``(...,)`` distance ``u`` of each mixture ``r`` (``(..., m)``) beyond the fitted shares:
    the sum of :func:`share_excess` over languages (namespace ``xp``, as there)."""
    return share_excess(r, fitted, xp).sum(axis=-1)


def mixture_sd(r: np.ndarray, fitted: ShareRange, scale: MixtureScale) -> np.ndarray:
    """``(...,)`` sd of the mixture discrepancy of ``log L`` at mixtures ``r``: ``kappa u``."""
    return scale.kappa * mixture_distance(r, fitted)


def mixture_draws(
    rng: np.random.Generator, sd: np.ndarray, r: np.ndarray, group: np.ndarray, n: int
) -> np.ndarray:
    """``(n, N)`` draws of the mixture discrepancy at ``N`` observations with sd ``sd``
    (``(N,)``), mixtures ``r`` (``(N, m)``) and languages ``group``: one standard-normal draw
    per (mixture, language) and sample, shared by that pair's budgets."""
    sd = np.asarray(sd, dtype=float)
    out = np.zeros((n, sd.size))
    live = sd > 0
    if not live.any():
        return out
    key = np.column_stack([np.round(np.asarray(r, float)[live], 9), np.asarray(group)[live]])
    _, k_of = np.unique(key, axis=0, return_inverse=True)
    k_of = np.asarray(k_of).ravel()
    z = rng.standard_normal((n, int(k_of.max()) + 1))
    out[:, live] = z[:, k_of] * sd[live][None, :]
    return out
