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
it by that label, or by any of its checkpoints' ``run_id`` (a ``run_id`` wins where a label
equals one). Without that column each run is its own training run.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from climb_bayes.data.runs import RunsData
from climb_bayes.errors import ClimbError

__all__ = ["ALL_RUNS", "ContinuedRun", "continued_run", "continued_runs", "runs_with_mixtures"]

ALL_RUNS = "all"
"""The name that asks :func:`continued_runs` for every training run of the fit."""


class ContinuedRun(NamedTuple):
    """A fitted training run to continue.

    Attributes
    ----------
    name : str
        How it was named: a ``run_id`` or a ``run_series`` label (``predict`` prints rows as
        ``run <name>``).
    run_id : str
        The checkpoint named, or the latest checkpoint where the run was named by its label.
    label : str
        Its ``run_series`` label in the fitted table (``""`` where it had none, or the fit
        file predates stored labels).
    series : int
        Its ``run_series`` code in the fit (:attr:`RunsData.series`).
    checkpoints : tuple of str
        ``run_id`` of every checkpoint of that training run, by budget.
    shares : numpy.ndarray
        ``(m,)`` the run's mixture (its continuation keeps it).
    last_budget : float
        Tokens of its latest checkpoint.
    """

    name: str
    run_id: str
    label: str
    series: int
    checkpoints: tuple[str, ...]
    shares: np.ndarray
    last_budget: float


def continued_run(runs: RunsData, run_id: str) -> ContinuedRun:
    """The training run that checkpoint ``run_id`` of ``runs`` belongs to, or that has the
    ``run_series`` label ``run_id``.

    Parameters
    ----------
    runs : RunsData
        The runs a fit saw (:attr:`~climb_bayes.inference.fitresult.Fit.runs`).
    run_id : str
        Any of the run's checkpoints (a ``run_id`` of the table), or its ``run_series`` label
        (:attr:`~climb_bayes.data.runs.RunsData.series_labels`; then ``run_id`` of the result
        is the latest checkpoint).

    Returns
    -------
    ContinuedRun

    Raises
    ------
    ClimbError
        When ``run_id`` is neither a run nor a ``run_series`` label of the table (the message
        lists close matches).
    """
    name = str(run_id).strip()
    labels = [lab for lab in dict.fromkeys(runs.series_labels or ()) if lab]
    if name in runs.run_ids:
        return _continued(runs, runs.run_ids.index(name), name)
    if name in labels:
        return _continued(runs, _checkpoints(runs, runs.series_labels.index(name))[-1], name)
    close = difflib.get_close_matches(name, [*runs.run_ids, *labels], n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    known = f"{runs.n_runs} runs: {_sample(runs.run_ids)}"
    if labels:
        known += f"; {len(labels)} run_series labels: {_sample(labels)}"
    raise ClimbError(
        f"--continue-run: the fit has no run or run_series label {name!r} ({known}). "
        f"{hint}Name the training run to continue by its run_series label or by any of its "
        "checkpoints' run_id in the fitted table."
    )


def _checkpoints(runs: RunsData, i: int) -> np.ndarray:
    """Indices of the runs of run ``i``'s training run, by budget."""
    members = np.flatnonzero(runs.series == runs.series[i])
    return members[np.argsort(runs.run_budgets[members], kind="stable")]


def _continued(runs: RunsData, i: int, name: str) -> ContinuedRun:
    """The training run of run ``i`` (the checkpoint it reports), named ``name``."""
    members = _checkpoints(runs, i)
    return ContinuedRun(
        name=name,
        run_id=runs.run_ids[i],
        label="" if runs.series_labels is None else runs.series_labels[i],
        series=int(runs.series[i]),
        checkpoints=tuple(runs.run_ids[j] for j in members),
        shares=np.asarray(runs.run_proportions[i], dtype=float),
        last_budget=float(runs.run_budgets[members[-1]]),
    )


def _sample(names: Sequence[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def continued_runs(runs: RunsData, names: str | Sequence[str]) -> list[ContinuedRun]:
    """Several training runs to continue: one per name (:func:`continued_run`), or with
    ``"all"`` (:data:`ALL_RUNS`) every training run of ``runs``, in the table's order, each
    named by its ``run_series`` label where the table gave one, else by its latest checkpoint.

    Raises
    ------
    ClimbError
        For an unknown name, no name, or two names of one training run.
    """
    names = [names] if isinstance(names, str) else list(names)
    if [n.strip().lower() for n in names] == [ALL_RUNS]:  # resolved by index, not by name
        _, first = np.unique(runs.series, return_index=True)
        latest = [_checkpoints(runs, i)[-1] for i in np.sort(first)]
        labels = runs.series_labels or ("",) * runs.n_runs
        return [_continued(runs, i, labels[i] or runs.run_ids[i]) for i in latest]
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


def runs_with_mixtures(
    runs: RunsData, shares: np.ndarray, atol: float = 1e-6
) -> list[list[ContinuedRun]]:
    """For each mixture of ``shares``, the fitted training runs with several checkpoints that
    have it.

    ``predict --mixture`` asks for a *new* run of a mixture; where the fitted table holds a
    checkpointed training run of that very mixture, the user often wants that run continued
    (``--continue-run``), whose prediction carries the run's fitted deviation forward: on
    rp-160M's held-out final checkpoints (``benchmarks/cli_path.py``, 2026-12-05) MRE 0.36%
    continued against 0.71% as new runs. ``predict`` names such runs in a note.

    Parameters
    ----------
    runs : RunsData
        The fitted table.
    shares : numpy.ndarray
        ``(K, m)`` mixtures.
    atol : float
        Largest difference of any share.

    Returns
    -------
    list of list of ContinuedRun
        Per mixture, the matching training runs with at least two checkpoints, in the table's
        order (named as ``continued_runs(runs, "all")`` names them).
    """
    checkpointed = [r for r in continued_runs(runs, ALL_RUNS) if len(r.checkpoints) >= 2]
    return [
        [r for r in checkpointed if np.allclose(r.shares, row, rtol=0.0, atol=atol)]
        for row in np.atleast_2d(np.asarray(shares, dtype=float))
    ]
