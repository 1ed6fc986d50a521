"""Do a run's tail points fall like runs of their own ``tokens_seen`` would?

Every law reads a tail point (``tokens_seen >= tail_start * budget``) as a run of
``tokens_seen`` tokens. That holds where the loss over a run's last steps falls as the loss of
longer runs does -- a constant learning rate, or data simulated from the law -- but over the
last 15% of a decaying schedule the loss falls for another reason. Measured on our own runs
(cosine to 10% of the peak; docs/model.md, "Does the tail's within-run slope mislead a
two-budget fit?"): the within-run log-slope of the tails is 0.37-0.67 of the slope across
budgets (default data 250k + 500k, tiny-2024 100k + 300k, default 250k-1M, per language), and
a fit over two budgets on those tails extrapolated 1.3-3x worse than on final points; on the
shipped synthetic table, simulated from the law, the ratio is 0.87-1.07.

This module measures that ratio on a runs table, per language:

* *within*: the slope of ``log loss`` on ``log tokens_seen`` inside each (run, language)'s kept
  tail, pooled over runs (each run centred on its own means);
* *across*: the slope of the final points' ``log loss`` on ``log budget``, with ``log r_i`` as
  a second regressor (a run's share moves its loss too), over runs at two or more budgets.

References
----------
.. [1] Guo et al. (2025), "CLIMB", Section 5 (the loss of a run is read at its final steps).
.. [2] Luo et al. (2025), "A multi-power law for loss curve prediction across learning rate
   schedules", arXiv:2503.12811 (the loss drop that a learning-rate decay induces).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from climb_bayes.data.runs import RunsData

__all__ = [
    "TailSlopes",
    "tail_slopes",
    "misleading_tails",
    "TAIL_SLOPE_TOLERANCE",
    "FINAL_POINT_TAIL",
]

FINAL_POINT_TAIL = 0.99
"""``tail_start`` that keeps a run's last 1% of tokens: its final evaluation point unless it
logs more often than that."""

TAIL_SLOPE_TOLERANCE = 4.0 / 3.0
"""A median ratio within ``[3/4, 4/3]`` counts as tails that fall like runs of their own
``tokens_seen``: our cosine-schedule runs gave 0.38-0.64 (medians per table), the simulated
table 0.97."""


class TailSlopes(NamedTuple):
    """Within-run and across-budget log-slopes per language (``nan`` where not measurable).

    Attributes
    ----------
    languages : tuple of str
    within : numpy.ndarray
        ``(m,)`` d log(loss) / d log(tokens_seen) inside the runs' tails.
    across : numpy.ndarray
        ``(m,)`` d log(loss) / d log(budget) of the runs' final points, given ``log r_i``.
    """

    languages: tuple[str, ...]
    within: np.ndarray
    across: np.ndarray

    @property
    def ratio(self) -> np.ndarray:
        """``(m,)`` within / across (``nan`` unless the final losses fall with the budget)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.across < 0, self.within / self.across, np.nan)

    @property
    def median_ratio(self) -> float:
        """Median of :attr:`ratio` over the languages where it is defined (``nan`` if none)."""
        r = self.ratio[np.isfinite(self.ratio)]
        return float(np.median(r)) if r.size else float("nan")

    def agree(self, tolerance: float = TAIL_SLOPE_TOLERANCE) -> bool:
        """Whether the tails fall like runs of their own ``tokens_seen`` (or it is unknown)."""
        r = self.median_ratio
        return not np.isfinite(r) or 1.0 / tolerance <= r <= tolerance


def tail_slopes(runs: RunsData) -> TailSlopes:
    """The within-run and across-budget log-slopes of ``runs``, per language.

    Parameters
    ----------
    runs : RunsData
        A runs table read with a tail (``tail_start < 1``); runs with one kept point per
        language give no within-run slope.

    Returns
    -------
    TailSlopes
    """
    m = runs.n_languages
    obs_run = runs.point_run[runs.obs_point]
    log_t = np.log(runs.point_tokens[runs.obs_point])
    log_y = np.log(runs.obs_loss)
    within, across = np.full(m, np.nan), np.full(m, np.nan)
    for i in range(m):
        sel = runs.obs_language == i
        if not sel.any():
            continue
        run, t, y = obs_run[sel], log_t[sel], log_y[sel]
        _, group, count = np.unique(run, return_inverse=True, return_counts=True)
        x = t - (np.bincount(group, t) / count)[group]
        z = y - (np.bincount(group, y) / count)[group]
        if np.sum(x * x) > 0:
            within[i] = float(np.sum(x * z) / np.sum(x * x))
        last = np.zeros(run.size, dtype=bool)  # each run's final point
        for g in range(count.size):
            idx = np.flatnonzero(group == g)
            last[idx[np.argmax(t[idx])]] = True
        budget = np.log(runs.run_budgets[run[last]])
        share = runs.run_proportions[run[last], i]
        if np.unique(np.round(budget, 6)).size < 2 or last.sum() < 4 or np.any(share <= 0):
            continue
        design = np.column_stack([np.ones(last.sum()), budget, np.log(share)])
        coef = np.linalg.lstsq(design, y[last], rcond=None)[0]
        across[i] = float(coef[1])
    return TailSlopes(tuple(runs.languages), within, across)


def misleading_tails(runs: RunsData) -> TailSlopes | None:
    """The slopes of runs whose tails fall unlike the runs across budgets, else ``None``.

    That is runs that give several tail points each (``tail_start`` below
    :data:`FINAL_POINT_TAIL`) and whose tails fall at a median ratio to the slope across budgets
    outside ``[1 / t, t]``, ``t =`` :data:`TAIL_SLOPE_TOLERANCE`. Whether that misleads a fit
    depends on its budget levels, which the callers judge (two levels, no leave-future-out
    folds: ``climb_bayes.cli._runs_table.read_fit_runs`` then reads final points only, and
    :func:`climb_bayes.viz.fit_text.tail_slope_hint` tells a user who asked for the tails).
    On our own two-budget runs, final points only extrapolated 1.3-3x better there (stacked MRE
    13.0% -> 7.6% on the default data's 250k + 500k -> 3M, 16.3% -> 10.0% on tiny-2024's 100k +
    300k -> 1M; ``benchmarks/tail_reading.py``), and a learned schedule offset for the tail
    points did no better than final points (docs/model.md).

    Parameters
    ----------
    runs : RunsData
        The runs a fit is about to use.

    Returns
    -------
    TailSlopes or None
    """
    several = runs.point_run.size > len(runs.run_ids)
    if not several or runs.tail_start >= FINAL_POINT_TAIL:
        return None
    slopes = tail_slopes(runs)
    return None if slopes.agree() else slopes
