"""Whether a mixture lies among the fitted runs' mixtures, or extrapolates the law in mixture.

The extrapolation discrepancy (:mod:`climb_bayes.model.discrepancy`) grows with the distance
beyond the fitted *budgets*; the mixture discrepancy (:mod:`climb_bayes.model.mixture_discrepancy`,
since 2026-12-06) with the share ratio beyond each language's fitted *share range*. Where the
runs cover the simplex (the Algorithm-1 design trains every language alone, so every mixture is a
blend of fitted ones) neither matters. Where they do not -- a perturbation design around one
mixture, a table of the runs a team happened to make -- a prediction or a recommended ``r*``
beyond the fitted shares rests on a term calibrated on few published tables: this module says
so.

Measured, before the mixture discrepancy, on AutoScale's DDO runs (Kang et al. 2025;
``../shared/data/autoscale_ddo``: 15 runs of 7 RedPajama domains around the uniform mixture, one
domain's data cut to a fifth or tripled in each), fitting the 8 runs whose budget stayed at or
below 1.2e9 tokens (shares 0.03-0.16) and scoring the 7 with one domain tripled (that domain's
share 0.33; ``climb-bayes evaluate ddo_runs.csv --holdout 'tokens>1.3e9' --shipped --method
laplace``, 2026-12-06): the shipped stacked predictive's 50% / 90% intervals covered 0.14 / 0.55
of the held-out losses (MRE 0.84%), against a calibrated 0.37-0.63 / 0.82-0.98; with
``--method nuts`` 0.35 / 0.57. With the mixture discrepancy: 0.59 / 0.84
(docs/decisions.md, "Mixtures the fitted runs do not reach").

Which distance matters was measured too. On RegMix (Liu et al. 2025; ``load_regmix``: 512
fitted mixtures of 13 Pile domains, 256 held out, the shipped predictive with Laplace fits,
weights CLIMB 0.86 / MSL 0.08 / DML 0.06; a ``/tmp`` script, 187 s) 216 of the 256 held-out
mixtures lie outside the convex hull of the fitted ones (L1 distance up to 0.42, median 0.07:
13 dimensions), yet coverage does not fall with that distance: cov50 / cov90 0.55 / 0.89 inside
(distance < 0.01), 0.57-0.60 / 0.93 at 0.01-0.2 and 0.59 / 0.93 beyond 0.2 (MRE 1.2-1.3%
throughout). Only 4 of them put a domain's share beyond the range the fitted runs cover (by
0.015-0.069); DDO's held-out runs put one domain's share at twice the largest fitted (0.33
against 0.16). So the warning follows the per-language ranges, not the hull:
:func:`mixture_support` returns the languages whose share lies outside ``[lowest, highest]``
fitted share by more than :data:`MIXTURE_TOLERANCE`, and the L1 distance to the nearest convex
blend of the fitted mixtures (a linear programme, SciPy's HiGHS) as context. ``predict`` and
``optimize`` print a warning line, and ``report`` flags its ``r*``, for such mixtures.

References
----------
.. [1] Kang, F. et al. (2025), "AutoScale: Scale-Aware Data Mixing for Pre-Training LLMs",
   COLM 2025, arXiv 2407.20177 (the DDO perturbation runs).
.. [2] Liu, Q. et al. (2025), "RegMix: Data Mixture as Regression for Language Model
   Pre-training", ICLR 2025, arXiv 2407.01492 (the 512 + 256 mixtures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from climb_bayes.model.mixture_discrepancy import share_range

__all__ = ["MIXTURE_TOLERANCE", "MixtureSupport", "mixture_support", "mixture_support_warning"]

MIXTURE_TOLERANCE = 0.01
"""Share by which a language may lie outside the range of its fitted shares before a mixture
counts as an extrapolation in mixture (one point of share: the rounding of a typical table)."""


class MixtureSupport(NamedTuple):
    """How far one mixture lies from the fitted runs' mixtures.

    Attributes
    ----------
    distance : float
        L1 distance (sum over languages of the absolute share difference, 0-2) to the nearest
        convex blend of the fitted runs' mixtures; 0 inside their hull.
    beyond : tuple of (int, float, float, float)
        ``(language index, share, lowest fitted share, highest fitted share)`` of each language
        whose share lies outside the range the fitted runs cover by more than
        :data:`MIXTURE_TOLERANCE`.
    """

    distance: float
    beyond: tuple[tuple[int, float, float, float], ...]

    @property
    def extrapolates(self) -> bool:
        """True when some language's share lies outside its fitted range (module docstring:
        what the intervals miss; the hull distance alone did not matter on RegMix)."""
        return bool(self.beyond)


def mixture_support(shares: np.ndarray, fitted: np.ndarray) -> MixtureSupport:
    """How a mixture stands against the fitted runs' mixtures: the languages whose share lies
    outside their fitted range, and the L1 distance to the convex hull of the fitted mixtures.

    Parameters
    ----------
    shares : array (m,)
        The mixture (shares; divided by their sum, so per-language medians of ``r*`` draws,
        which need not sum to 1, are measured as the mixture they stand for).
    fitted : array (R, m)
        The fitted runs' mixtures.

    Returns
    -------
    MixtureSupport
    """
    from scipy.optimize import linprog

    r = np.asarray(shares, dtype=float)
    r = r / np.sum(r)
    f = np.asarray(fitted, dtype=float)
    n_runs, m = f.shape
    # variables: blend weights (R), then the positive and negative parts of blend - r (m each)
    cost = np.concatenate([np.zeros(n_runs), np.ones(2 * m)])
    a_eq = np.zeros((m + 1, n_runs + 2 * m))
    a_eq[:m, :n_runs] = f.T
    a_eq[:m, n_runs : n_runs + m] = -np.eye(m)
    a_eq[:m, n_runs + m :] = np.eye(m)
    a_eq[m, :n_runs] = 1.0
    res = linprog(cost, A_eq=a_eq, b_eq=np.append(r, 1.0), bounds=(0, None), method="highs")
    distance = float(res.fun) if res.status == 0 else float(np.min(np.abs(f - r).sum(axis=1)))
    lo, hi = share_range(f)
    beyond = tuple(
        (i, float(r[i]), float(lo[i]), float(hi[i]))
        for i in range(m)
        if r[i] > hi[i] + MIXTURE_TOLERANCE or r[i] < lo[i] - MIXTURE_TOLERANCE
    )
    return MixtureSupport(max(distance, 0.0), beyond)


def mixture_support_warning(
    names: Sequence[str], shares: np.ndarray, fitted: np.ndarray, languages: Sequence[str]
) -> str:
    """One warning line for the mixtures of ``shares`` (``(K, m)``, named ``names``) that put
    some language's share outside the range the fitted runs cover, or ``""`` when none does."""
    out = []
    for name, r in zip(names, np.atleast_2d(shares), strict=True):
        sup = mixture_support(r, fitted)
        if not sup.extrapolates:
            continue
        where = ", ".join(
            f"{languages[i]} {s:.3f} (fitted {lo:.3f}-{hi:.3f})" for i, s, lo, hi in sup.beyond
        )
        out.append(f"{name} ({where}; L1 distance {sup.distance:.2f} from the fitted mixtures)")
    if not out:
        return ""
    shown = "; ".join(out[:3]) + (f"; and {len(out) - 3} more" if len(out) > 3 else "")
    return (
        f"warning: {len(out)} mixture(s) give a language a share outside the range of the "
        f"fitted runs: {shown}. The law is extrapolated in mixture there; the intervals "
        "include a mixture discrepancy that grows with the share ratio beyond the fitted "
        "range, calibrated on few published tables (docs/model.md): runs near these mixtures "
        "would tell."
    )
