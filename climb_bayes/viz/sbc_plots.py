"""Figure of a simulation-based-calibration study: rank ECDF differences with simultaneous bands.

One panel per ranked parameter shows ``F(z) - z``, the empirical CDF of the scaled ranks minus
the uniform CDF, with the simultaneous 95% band of
:func:`climb_bayes.evaluation.sbc.ecdf_difference_bands`. Under correct calibration the whole curve
stays inside the band in 95% of studies. Shapes point at the failure: a curve above zero (ranks too
small: the truth sits low in the posterior, so the posterior is biased upwards), below zero (biased
downwards), an S-shape rising then falling (ranks piled at both ends: posterior too narrow /
overconfident), the mirror S (ranks piled in the middle: posterior too wide).

References
----------
.. [1] Säilynoja, Bürkner & Vehtari (2022), "Graphical test for discrete uniformity and its
   applications in goodness-of-fit evaluation and multiple sample comparison", Statistics and
   Computing 32, 32.
.. [2] Talts et al. (2018), "Validating Bayesian inference algorithms with simulation-based
   calibration", arXiv:1804.06788.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from matplotlib.figure import Figure

import climb_bayes.viz.plots  # noqa: F401  (Agg backend)
from climb_bayes.evaluation.sbc import SbcResult, ecdf_difference, ecdf_difference_bands

__all__ = ["plot_sbc_ecdf"]


def plot_sbc_ecdf(
    result: SbcResult, key: jax.Array | None = None, alpha: float | None = None, n_sim: int = 5000
) -> Figure:
    """ECDF-difference plot of an SBC study, one panel per parameter.

    Parameters
    ----------
    result : SbcResult
        From :func:`climb_bayes.evaluation.sbc.run_sbc`.
    key : jax.Array, optional
        PRNG key of the band simulation (``PRNGKey(0)`` by default).
    alpha : float, optional
        The band of each panel is simultaneous at level ``1 - alpha``; by default the
        per-test threshold of the verdict (``result.threshold``), so that a curve leaving the
        band is a failed ECDF test.
    n_sim : int
        Simulated uniform rank samples behind the band.

    Returns
    -------
    matplotlib.figure.Figure
        Panels titled with the parameter and its chi-square and ECDF p-values; failed
        parameters in red.
    """
    key = jax.random.PRNGKey(0) if key is None else key
    alpha = result.threshold if alpha is None else alpha
    n, k = result.ranks.shape
    z, lower, upper = ecdf_difference_bands(key, n, result.n_draws, alpha=alpha, n_sim=n_sim)
    diff = ecdf_difference(result.ranks, result.n_draws)
    # Steps from each evaluation point z_j to the next (the last one held up to z = 1).
    zs = np.append(z, 1.0)
    idx = np.append(np.arange(z.size), z.size - 1)
    cols = min(4, k)
    rows = math.ceil(k / cols)
    fig = Figure(figsize=(3.0 * cols, 2.3 * rows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)).ravel()
    for j, ax in enumerate(axes):
        if j >= k:
            ax.set_visible(False)
            continue
        label = result.labels[j]
        failed = label in result.failed
        outside = bool(np.any((diff[:, j] < lower - 1e-12) | (diff[:, j] > upper + 1e-12)))
        ax.fill_between(zs, lower[idx], upper[idx], step="post", color="0.85", lw=0)
        ax.axhline(0.0, color="0.5", lw=0.6)
        colour = "C3" if failed or outside else "C0"
        ax.step(zs, diff[idx, j], where="post", color=colour, lw=1.2)
        ax.set_title(
            f"{label}\np = {result.pvalues[j]:.2g} (chi2), {result.ecdf_pvalues[j]:.2g} (ECDF)",
            fontsize=8,
            color="C3" if failed else "k",
        )
        ax.tick_params(labelsize=7)
    for ax in axes[-cols:]:
        ax.set_xlabel("scaled rank z", fontsize=8)
    for ax in axes[::cols]:
        ax.set_ylabel("ECDF(z) - z", fontsize=8)
    verdict = "uniform" if result.passed else f"NOT uniform for {len(result.failed)} of {k} (red)"
    fig.suptitle(
        f"SBC rank ECDF differences ({n} replications, L = {result.n_draws}; grey: simultaneous "
        f"{1 - alpha:.3g} band): {verdict}",
        fontsize=9,
    )
    return fig
