"""The flat list of loss observations every law fits (one entry per run, group and checkpoint).

:class:`Observations` is built from a :class:`~climb_bayes.data.runs.RunsData` table (or from a
published table) and is what every law in :mod:`climb_bayes.laws` fits, predicts and is scored on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from climb_bayes.data.runs import RunsData, dense_groups
from climb_bayes.errors import ClimbError

__all__ = ["Observations", "median_loss", "budget_range"]


@dataclass(frozen=True)
class Observations:
    """Flat list of loss observations, with the runs (mixture, budget) they come from.

    Unlike :class:`~climb_bayes.data.runs.RunsData` this may hold losses of groups with zero share
    (``r_i = 0``): laws with ``zero_share_ok`` can fit and predict those. Runs without any
    observation may be present (e.g. after :meth:`select`); they are ignored.

    Attributes
    ----------
    groups : tuple of str
        The ``m`` group names (languages or domains).
    run_ids : tuple of str
        Run names.
    run_r : numpy.ndarray
        ``(n_runs, m)`` mixture of each run (rows sum to 1).
    run_budget : numpy.ndarray
        ``(n_runs,)`` total budget of each run (tokens).
    run : numpy.ndarray
        ``(N,)`` run index of each observation.
    tokens : numpy.ndarray
        ``(N,)`` tokens seen at the observation (the ``D`` the law is evaluated at).
    group : numpy.ndarray
        ``(N,)`` group index of each observation.
    loss : numpy.ndarray
        ``(N,)`` observed loss (nats/token, > 0).
    run_series : numpy.ndarray or None
        ``(n_runs,)`` training trajectory of each run (checkpoints of one training run share
        a label); ``None``: every run is its own trajectory.
    series_labels : tuple of str or None
        ``(n_runs,)`` the written label of each run's trajectory
        (:attr:`climb_bayes.data.runs.RunsData.series_labels`); ``None`` when unknown.
    """

    groups: tuple[str, ...]
    run_ids: tuple[str, ...]
    run_r: np.ndarray
    run_budget: np.ndarray
    run: np.ndarray
    tokens: np.ndarray
    group: np.ndarray
    loss: np.ndarray
    run_series: np.ndarray | None = None
    series_labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "groups", tuple(str(g) for g in self.groups))
        set_(self, "run_ids", tuple(str(x) for x in self.run_ids))
        for name, dtype in (
            ("run_r", float),
            ("run_budget", float),
            ("run", np.int64),
            ("tokens", float),
            ("group", np.int64),
            ("loss", float),
        ):
            set_(self, name, np.asarray(getattr(self, name), dtype=dtype))
        if self.run_series is not None:
            set_(self, "run_series", np.asarray(self.run_series, dtype=np.int64))
            if self.run_series.shape != (len(self.run_ids),):
                raise ValueError("Observations: run_series must have one entry per run")
        if self.series_labels is not None:
            set_(self, "series_labels", tuple(str(x) for x in self.series_labels))
            if len(self.series_labels) != len(self.run_ids) or self.run_series is None:
                raise ValueError("Observations: series_labels needs run_series, one per run")
        n = self.loss.shape[0]
        if not (self.run.shape == self.tokens.shape == self.group.shape == (n,)):
            raise ValueError("Observations: run, tokens, group and loss must have equal length")
        if self.run_r.shape != (len(self.run_ids), len(self.groups)):
            raise ValueError("Observations: run_r must have shape (n_runs, m)")
        if n and (np.any(self.loss <= 0) or not np.all(np.isfinite(self.loss))):
            raise ValueError("Observations: losses must be finite and > 0")

    @property
    def m(self) -> int:
        """Number of groups."""
        return len(self.groups)

    @property
    def n(self) -> int:
        """Number of observations."""
        return int(self.loss.shape[0])

    @property
    def r(self) -> np.ndarray:
        """``(N, m)`` mixture of each observation's run."""
        return self.run_r[self.run]

    @property
    def zero_share(self) -> np.ndarray:
        """``(N,)`` True where the observed group had share 0 in the run."""
        return self.r[np.arange(self.n), self.group] == 0

    @property
    def log_loss(self) -> np.ndarray:
        """``(N,)`` log of the observed losses."""
        return np.log(self.loss)

    @property
    def series(self) -> np.ndarray:
        """``(n_runs,)`` trajectory label of each run (one per run when not given)."""
        return np.arange(len(self.run_ids)) if self.run_series is None else self.run_series

    @property
    def obs_series(self) -> np.ndarray:
        """``(N,)`` trajectory label of each observation."""
        return self.series[self.run]

    @property
    def obs_group(self) -> np.ndarray:
        """``(N,)`` dense (trajectory, group) id: observations that share a run effect."""
        return dense_groups(self.obs_series, self.group)

    @classmethod
    def from_runs(cls, runs: RunsData) -> Observations:
        """The observations of a validated runs table (zero-share losses are already left out)."""
        return cls(
            groups=runs.languages,
            run_ids=runs.run_ids,
            run_r=runs.run_proportions,
            run_budget=runs.run_budgets,
            run=runs.obs_run,
            tokens=runs.obs_tokens,
            group=runs.obs_language,
            loss=runs.obs_loss,
            run_series=runs.run_series,
            series_labels=runs.series_labels,
        )

    def points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Distinct evaluation points: ``(point_r (P, m), point_tokens (P,), obs_point (N,))``.

        Laws are evaluated once per (run, tokens) point and gathered per observation, which is
        ``m`` times cheaper than evaluating per observation.
        """
        if self.n == 0:
            return np.zeros((0, self.m)), np.zeros(0), np.zeros(0, dtype=np.int64)
        keys = np.stack([self.run.astype(float), self.tokens], axis=1)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        run = uniq[:, 0].astype(np.int64)
        return self.run_r[run], uniq[:, 1], np.asarray(inverse, dtype=np.int64).ravel()

    def select(self, mask: np.ndarray) -> Observations:
        """Keep the observations where ``mask`` (``(N,)`` bool) is True; runs are kept."""
        mask = np.asarray(mask, dtype=bool)
        return Observations(
            self.groups,
            self.run_ids,
            self.run_r,
            self.run_budget,
            self.run[mask],
            self.tokens[mask],
            self.group[mask],
            self.loss[mask],
            self.run_series,
            self.series_labels,
        )

    def select_runs(self, run_mask: np.ndarray) -> Observations:
        """Keep the observations of the runs where ``run_mask`` (``(n_runs,)`` bool) is True."""
        run_mask = np.asarray(run_mask, dtype=bool)
        return self.select(run_mask[self.run])

    def positive_share(self) -> Observations:
        """Only the observations whose group had a positive share."""
        return self.select(~self.zero_share)

    def to_runs(self, source: str = "<observations>") -> RunsData:
        """A :class:`RunsData` with one evaluation point per (run, tokens) (wide-like).

        Zero-share losses are dropped (and counted), runs without observations are left out.
        """
        keys = np.unique(np.stack([self.run, self.tokens]).T, axis=0) if self.n else None
        if keys is None:
            raise ClimbError("no observations to fit")
        used = np.unique(keys[:, 0].astype(np.int64))
        new_of_old = np.full(len(self.run_ids), -1, dtype=np.int64)
        new_of_old[used] = np.arange(used.size)
        point_run = new_of_old[keys[:, 0].astype(np.int64)]
        point_tokens = keys[:, 1]
        point_loss = np.full((keys.shape[0], self.m), np.nan)
        lookup = {(int(r), float(t)): i for i, (r, t) in enumerate(keys)}
        for run, tok, g, loss in zip(self.run, self.tokens, self.group, self.loss, strict=True):
            point_loss[lookup[(int(run), float(tok))], g] = loss
        return RunsData.from_arrays(
            self.groups,
            [self.run_ids[i] for i in used],
            self.run_r[used],
            self.run_budget[used],
            point_run,
            point_tokens,
            point_loss,
            source=source,
            form="wide" if np.allclose(point_tokens, self.run_budget[used][point_run]) else "long",
            tail_start=1.0,
            run_series=self.series[used],  # labels stay those of this table's runs
            series_labels=None
            if self.series_labels is None
            else tuple(self.series_labels[i] for i in used),
        )


def median_loss(obs: Observations) -> np.ndarray:
    """``(m,)`` median observed loss per group (1.0 for a group without observations)."""
    return np.array(
        [
            np.median(obs.loss[obs.group == g]) if np.any(obs.group == g) else 1.0
            for g in range(obs.m)
        ]
    )


def budget_range(obs: Observations) -> tuple[np.ndarray, np.ndarray]:
    """``(m,)`` smallest and largest run budget (tokens) with an observation, per group.

    Groups without observations get the range over all groups.
    """
    budget = obs.run_budget[obs.run]
    lo = np.full(obs.m, budget.min())
    hi = np.full(obs.m, budget.max())
    for g in range(obs.m):
        sel = obs.group == g
        if sel.any():
            lo[g], hi[g] = budget[sel].min(), budget[sel].max()
    return lo, hi
