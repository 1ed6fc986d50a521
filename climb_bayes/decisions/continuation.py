"""Which fitted training run a prediction continues (``predict --continue-run``).

A pretraining team with checkpoints of its own run asks "what will *this* run's loss be at
2x the tokens?", not "what will a new run of this mixture reach?". The answers differ by the
run's own deviation from the law: runs of one mixture and budget differ (seed, data order), and
the checkpoints of one run share that deviation (the run effect of
:mod:`climb_bayes.model.observation`). The fitted residuals of the named run's checkpoints
inform its deviation at a larger budget; the predictive then conditions on them
(:func:`climb_bayes.inference.predictive.predictive_parts`, ``known_runs``) instead of drawing a
new run's deviation.

A training run is the set of runs sharing a ``run_series`` label (docs/runs-format.md): name
any of its checkpoints' ``run_id``. Without that column each run is its own training run.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from climb_bayes.data.runs import RunsData
from climb_bayes.errors import ClimbError

__all__ = ["ALL_RUNS", "ContinuedRun", "continued_run", "continued_runs"]

ALL_RUNS = "all"
"""The name that asks :func:`continued_runs` for every training run of the fit."""


class ContinuedRun(NamedTuple):
    """A fitted training run to continue.

    Attributes
    ----------
    run_id : str
        The checkpoint named.
    series : int
        Its ``run_series`` code in the fit (:attr:`RunsData.series`).
    checkpoints : tuple of str
        ``run_id`` of every checkpoint of that training run, by budget.
    shares : numpy.ndarray
        ``(m,)`` the run's mixture (its continuation keeps it).
    last_budget : float
        Tokens of its latest checkpoint.
    """

    run_id: str
    series: int
    checkpoints: tuple[str, ...]
    shares: np.ndarray
    last_budget: float


def continued_run(runs: RunsData, run_id: str) -> ContinuedRun:
    """The training run that checkpoint ``run_id`` of ``runs`` belongs to.

    Parameters
    ----------
    runs : RunsData
        The runs a fit saw (:attr:`~climb_bayes.inference.fitresult.Fit.runs`).
    run_id : str
        Any of the run's checkpoints (a ``run_id`` of the table).

    Returns
    -------
    ContinuedRun

    Raises
    ------
    ClimbError
        When ``run_id`` is not a run of the table (the message lists close matches).
    """
    name = str(run_id).strip()
    if name not in runs.run_ids:
        close = difflib.get_close_matches(name, runs.run_ids, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        sample = ", ".join(runs.run_ids[:5]) + (", ..." if runs.n_runs > 5 else "")
        raise ClimbError(
            f"--continue-run: the fit has no run {name!r} ({runs.n_runs} runs: {sample}). "
            f"{hint}Name any checkpoint of the training run to continue, as its run_id in the "
            "fitted table."
        )
    i = runs.run_ids.index(name)
    series = runs.series
    members = np.flatnonzero(series == series[i])
    members = members[np.argsort(runs.run_budgets[members], kind="stable")]
    return ContinuedRun(
        run_id=name,
        series=int(series[i]),
        checkpoints=tuple(runs.run_ids[j] for j in members),
        shares=np.asarray(runs.run_proportions[i], dtype=float),
        last_budget=float(runs.run_budgets[members[-1]]),
    )


def continued_runs(runs: RunsData, names: str | Sequence[str]) -> list[ContinuedRun]:
    """Several training runs to continue: one per name (:func:`continued_run`), or with
    ``"all"`` (:data:`ALL_RUNS`) every training run of ``runs``, each named by its latest
    checkpoint, in the table's order.

    Raises
    ------
    ClimbError
        For an unknown name, no name, or two names of one training run.
    """
    names = [names] if isinstance(names, str) else list(names)
    if [n.strip().lower() for n in names] == [ALL_RUNS]:
        series = runs.series
        _, first = np.unique(series, return_index=True)
        latest = [continued_run(runs, runs.run_ids[i]) for i in np.sort(first)]
        names = [run.checkpoints[-1] for run in latest]
    if not names:
        raise ClimbError("--continue-run: name at least one run (or 'all').")
    out = [continued_run(runs, n) for n in names]
    seen: dict[int, str] = {}
    for run in out:
        if run.series in seen:
            raise ClimbError(
                f"--continue-run: {seen[run.series]!r} and {run.run_id!r} are checkpoints of one "
                "training run; name it once."
            )
        seen[run.series] = run.run_id
    return out
