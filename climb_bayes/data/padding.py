"""Padding a fit's arrays to a fixed shape, the padded observations masked out.

The leave-future-out refits of one table fit subsets of it; padded to the full table's
shape (and with the data passed as arguments of the compiled programs:
:mod:`climb_bayes.inference.argument_potential`), every fold of a law and its full fit share
one set of compiled programs instead of compiling their own. Padding repeats the first row of
each array, so every padded value is a valid one (a law evaluated there is finite: a masked
term that is ``nan`` would still poison the gradient through ``0 * nan``), and the mask
(``False`` on the padding) removes the padded observations from the likelihood.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from climb_bayes.data.observations import Observations

__all__ = ["PaddedShape", "pad_rows", "padding_mask"]


class PaddedShape(NamedTuple):
    """Sizes a fit's arrays are padded to.

    Attributes
    ----------
    n_obs : int
        Observations (log-losses).
    n_points : int
        Distinct evaluation points (run, tokens) the law is evaluated at.
    n_groups : int
        Run-effect groups (trajectory, group).
    """

    n_obs: int
    n_points: int
    n_groups: int

    @classmethod
    def of(cls, obs: Observations) -> PaddedShape:
        """The shape of ``obs``: pad a subset of it to this to share its programs."""
        n_groups = int(obs.obs_group.max()) + 1 if obs.n else 0
        return cls(obs.n, int(obs.points()[1].size), n_groups)

    def holds(self, n_obs: int, n_points: int, n_groups: int) -> bool:
        """Whether arrays of these sizes fit (are not larger than this shape)."""
        return n_obs <= self.n_obs and n_points <= self.n_points and n_groups <= self.n_groups


def pad_rows(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` with copies of its first row appended along axis 0 up to ``n`` rows.

    Parameters
    ----------
    a : numpy.ndarray
        ``(k, ...)`` with ``1 <= k <= n`` (or ``k == n == 0``).
    n : int
        Rows wanted.

    Returns
    -------
    numpy.ndarray
        ``(n, ...)``, the first ``k`` rows ``a``'s.
    """
    a = np.asarray(a)
    if a.shape[0] > n:
        raise ValueError(f"cannot pad {a.shape[0]} rows to {n}.")
    if a.shape[0] == n:
        return a
    fill = np.broadcast_to(a[:1], (n - a.shape[0],) + a.shape[1:])
    return np.concatenate([a, fill], axis=0)


def padding_mask(n_real: int, n: int) -> np.ndarray:
    """``(n,)`` bool: ``True`` for the first ``n_real`` (observed) rows, ``False`` on the
    padding."""
    return np.arange(n) < n_real
