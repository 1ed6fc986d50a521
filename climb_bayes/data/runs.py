"""Reading and validating runs tables (the training runs a CLIMB law is fitted to).

A runs table comes in one of two forms, both described in ``docs/runs-format.md``:

* **wide** -- one row per finished run: ``run_id, tokens, r_<lang>..., loss_<lang>...``;
* **long** -- loss curves, one row per (run, evaluation point, language):
  ``run_id, budget_tokens, tokens_seen, language, proportion, loss`` (what ``training`` writes).

:func:`read_runs` (files) and :func:`runs_from_frame` (pandas frames) validate the table and
return a :class:`RunsData`: per-run mixtures and budgets, the evaluation points kept for the fit
(long form: only the tail of each curve, ``tokens_seen >= tail_start * budget_tokens``), and the
flat list of likelihood observations. Observations of a language with share ``r_i = 0`` are left
out (CLIMB predicts an infinite loss there) and counted.

Every problem with the input raises :class:`~climb_bayes.errors.RunsFormatError` with a message
naming the file, the row (counted as in a spreadsheet: the header is row 1, so the first data row
is row 2, i.e. the CSV line number) and/or the column, and the fix.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import shlex
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import numpy as np
import pandas as pd

from climb_bayes.errors import RunsFormatError

__all__ = [
    "RunsData",
    "read_runs",
    "runs_from_frame",
    "dense_groups",
    "DEFAULT_TAIL_START",
    "PAPER_TAIL_POINTS",
    "SERIES_COLUMN",
    "CHECKPOINT_HINT_BUDGETS",
    "infer_checkpoint_series",
    "mixture_codes",
    "MODEL_SIZE_COLUMNS",
    "MAX_LOSS_NATS",
]

DEFAULT_TAIL_START = 0.85
"""Default start of the fitted tail, as a fraction of each run's budget (last 15% of training)."""

SERIES_COLUMN = "run_series"
"""Optional column of both forms: runs with the same label are checkpoints of one training run
(one seed and data order), so their losses share that run's deviation from the law."""

CHECKPOINT_HINT_BUDGETS = 4
"""In a wide table without ``run_series``, a mixture with rows at this many budgets or more (one
per budget) is taken as one training run's checkpoints (:func:`infer_checkpoint_series`; with
repeated budgets, a note in :meth:`RunsData.summary` instead). Below it: the Algorithm-1
design's 2-3 budgets, whose runs of one mixture are separate runs."""

MAX_LOSS_NATS = 20.0
"""Largest validation loss (nats per token) accepted at a language with a positive share: a
uniform guess over 485 million tokens. Above it the column is almost surely a perplexity (the
exponential of the loss) or a sum over tokens, and fitting it as a loss would be silently wrong
(zero-share losses and, in the long form, curve points before the fitted tail, which are
left out of the fit, are not checked)."""

PROPORTION_TOL = 1e-6
"""Absolute tolerance on ``sum(r) == 1`` per run when ``renormalize=False``."""

TOKENS_REL_SLACK = 1e-9
"""Relative slack for ``tokens_seen <= budget_tokens``, the tail boundary and constant budgets."""

_ROW_OFFSET = 2  # data row i (0-based) is spreadsheet row / CSV line i + 2 (header is row 1)
_WIDE_REQUIRED = ("run_id", "tokens")
_LONG_REQUIRED = ("run_id", "budget_tokens", "tokens_seen", "language", "proportion", "loss")
_LONG_MARKERS = frozenset({"budget_tokens", "tokens_seen", "language", "proportion"})
_CSV_EXTENSIONS = frozenset({".csv"})
_PARQUET_EXTENSIONS = frozenset({".parquet", ".pq"})
_NA_STRINGS = frozenset({"", "nan", "na", "n/a", "null", "none", "<na>"})
_RENORM_HINT = "--renormalize (renormalize=True)"

MODEL_SIZE_COLUMNS = frozenset(
    {
        "model",
        "model_size",
        "model_size_label",
        "model_name",
        "model_params",
        "n_params",
        "num_params",
        "params",
        "parameters",
        "non_embedding_params",
    }
)
"""Extra columns read as a model's size or name (compared lower-case, spaces and hyphens as
underscores): a table whose rows hold several values in one of them mixes model sizes, which no
law here has a term for, and is refused (:func:`read_runs`). The parameter-count names
(:data:`_PARAM_COUNT_COLUMNS`) count only where every value reads as a size (``70M``, ``1.3B``,
``160000000``): a column ``params`` of hyper-parameter strings is an ordinary extra column."""

_PARAM_COUNT_COLUMNS = frozenset(
    {"model_params", "n_params", "num_params", "params", "parameters", "non_embedding_params"}
)
_SIZE_VALUE = r"^\s*\d+(\.\d+)?([eE][+-]?\d+)?\s*[kKmMbBtT]?\s*$"


# --------------------------------------------------------------------------------------------
# RunsData
# --------------------------------------------------------------------------------------------


PAPER_TAIL_POINTS = 3
"""Evaluation points the CLIMB paper averages into a run's validation loss."""


def dense_groups(*keys: np.ndarray) -> np.ndarray:
    """Dense ids ``0..G-1`` of the distinct rows of ``keys`` (in order of first appearance).

    ``dense_groups(series_of_obs, language_of_obs)`` labels the (trajectory, language) groups
    whose observations share a run effect.
    """
    stacked = np.stack([np.asarray(k, dtype=np.int64).ravel() for k in keys], axis=1)
    if stacked.shape[0] == 0:
        return np.zeros(0, dtype=np.int32)
    _, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[np.asarray(inverse).ravel()].astype(np.int32)


def _frozen_array(x: object, dtype: type, name: str, ndim: int) -> np.ndarray:
    arr = np.array(x, dtype=dtype, copy=True)
    if arr.ndim != ndim:
        raise ValueError(f"RunsData.{name} must be {ndim}-dimensional, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


def _obs_from_point_loss(point_loss: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observations = finite entries of ``point_loss``, point-major then language order."""
    obs_point, obs_language = np.nonzero(np.isfinite(point_loss))
    return (
        obs_point.astype(np.int64),
        obs_language.astype(np.int64),
        point_loss[obs_point, obs_language].astype(np.float64),
    )


def _shown_path(source: str) -> str:
    """``source`` relative to the working directory when it lies under it (what the user typed,
    or the shipped dataset seen from a clone's root), else as given."""
    try:
        return str(Path(source).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(source)


@dataclass(frozen=True, eq=False)
class RunsData:
    """A validated runs table, ready for fitting.

    Arrays are copied on construction and made read-only; use :func:`dataclasses.replace` or
    :meth:`from_arrays` to derive modified data.

    Attributes
    ----------
    languages : tuple of str
        The ``m`` group names (languages or domains), in order of first appearance in the
        table (or in the order given by ``languages=`` when selecting).
    run_ids : tuple of str
        The ``n_runs`` run identifiers, in order of first appearance.
    run_proportions : numpy.ndarray
        ``(n_runs, m)`` float64 mixture shares ``r``; each row sums to 1.
    run_budgets : numpy.ndarray
        ``(n_runs,)`` float64 total training-token budget ``D`` of each run.
    point_run : numpy.ndarray
        ``(P,)`` int64 run index of each kept evaluation point. Points are sorted by run, then
        by ``tokens_seen``.
    point_tokens : numpy.ndarray
        ``(P,)`` float64 tokens seen at each point; this is the ``D`` the law is evaluated at.
        In the wide form there is one point per run, at its budget.
    point_loss : numpy.ndarray
        ``(P, m)`` float64 losses (nats/token); NaN where missing or excluded (``r_i = 0``).
    obs_point, obs_language : numpy.ndarray
        ``(N,)`` int64 point and language index of each likelihood observation (the finite
        entries of ``point_loss``, point-major).
    obs_loss : numpy.ndarray
        ``(N,)`` float64 observed losses, all finite and ``> 0``.
    n_excluded_zero_share : int
        Finite losses dropped because the language's share was 0 in that run.
    n_points_dropped_head : int
        Evaluation points dropped because they lie before the tail start (long form).
    source : str
        File path, or ``"<frame>"``.
    sha256 : str
        Hex SHA-256 of the file bytes (``""`` for frames).
    form : str
        ``"wide"`` or ``"long"``.
    tail_start : float
        Fraction of the budget where the fitted tail starts.
    point_n_excluded : numpy.ndarray or None
        ``(P,)`` per-point count behind ``n_excluded_zero_share`` (lets :meth:`subset_runs`
        recompute it). ``None`` when unknown.
    run_n_dropped_head : numpy.ndarray or None
        ``(n_runs,)`` per-run count behind ``n_points_dropped_head``. ``None`` when unknown.
    run_series : numpy.ndarray or None
        ``(n_runs,)`` int64 label of the training trajectory each run belongs to. Runs with
        the same label are checkpoints of one training run (their losses share that run's
        deviation from the law, see :mod:`climb_bayes.model.observation`). ``None``: every run is
        its own trajectory (the runs of a sweep).
    series_labels : tuple of str or None
        ``(n_runs,)`` the ``run_series`` label each run had in the table (``""``: a blank
        cell, the run is its own trajectory), so that a training run can be named by its
        label (``predict --continue-run``) and :meth:`to_frame` writes the labels back.
        ``None`` when unknown (no ``run_series`` column; fits written before 2026-11-27).
    series_inferred : bool
        The wide table had no ``run_series`` column and :func:`infer_checkpoint_series` took
        the rows of each mixture it holds at many budgets as one training run's checkpoints.
    """

    languages: tuple[str, ...]
    run_ids: tuple[str, ...]
    run_proportions: np.ndarray
    run_budgets: np.ndarray
    point_run: np.ndarray
    point_tokens: np.ndarray
    point_loss: np.ndarray
    obs_point: np.ndarray
    obs_language: np.ndarray
    obs_loss: np.ndarray
    n_excluded_zero_share: int = 0
    n_points_dropped_head: int = 0
    source: str = "<frame>"
    sha256: str = ""
    form: str = "long"
    tail_start: float = DEFAULT_TAIL_START
    point_n_excluded: np.ndarray | None = field(default=None, repr=False)
    run_n_dropped_head: np.ndarray | None = field(default=None, repr=False)
    run_series: np.ndarray | None = field(default=None, repr=False)
    series_labels: tuple[str, ...] | None = field(default=None, repr=False)
    series_inferred: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "languages", tuple(str(x) for x in self.languages))
        set_(self, "run_ids", tuple(str(x) for x in self.run_ids))
        specs = [
            ("run_proportions", np.float64, 2),
            ("run_budgets", np.float64, 1),
            ("point_run", np.int64, 1),
            ("point_tokens", np.float64, 1),
            ("point_loss", np.float64, 2),
            ("obs_point", np.int64, 1),
            ("obs_language", np.int64, 1),
            ("obs_loss", np.float64, 1),
        ]
        for name, dtype, ndim in specs:
            set_(self, name, _frozen_array(getattr(self, name), dtype, name, ndim))
        m, n_runs, n_points = len(self.languages), len(self.run_ids), len(self.point_run)
        expected = {
            "run_proportions": (n_runs, m),
            "run_budgets": (n_runs,),
            "point_tokens": (n_points,),
            "point_loss": (n_points, m),
            "obs_language": self.obs_point.shape,
            "obs_loss": self.obs_point.shape,
        }
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise ValueError(
                    f"RunsData.{name} has shape {getattr(self, name).shape}, expected {shape}"
                )
        if n_points and (self.point_run.min() < 0 or self.point_run.max() >= n_runs):
            raise ValueError("RunsData.point_run has run indices out of range")
        if self.obs_point.size:
            if self.obs_point.min() < 0 or self.obs_point.max() >= n_points:
                raise ValueError("RunsData.obs_point has point indices out of range")
            if self.obs_language.min() < 0 or self.obs_language.max() >= m:
                raise ValueError("RunsData.obs_language has language indices out of range")
        if self.form not in ("wide", "long"):
            raise ValueError(f"RunsData.form must be 'wide' or 'long', got {self.form!r}")
        set_(self, "n_excluded_zero_share", int(self.n_excluded_zero_share))
        set_(self, "n_points_dropped_head", int(self.n_points_dropped_head))
        set_(self, "tail_start", float(self.tail_start))
        if self.point_n_excluded is not None:
            arr = _frozen_array(self.point_n_excluded, np.int64, "point_n_excluded", 1)
            if arr.shape != (n_points,):
                raise ValueError("RunsData.point_n_excluded must have one entry per point")
            set_(self, "point_n_excluded", arr)
        if self.run_n_dropped_head is not None:
            arr = _frozen_array(self.run_n_dropped_head, np.int64, "run_n_dropped_head", 1)
            if arr.shape != (n_runs,):
                raise ValueError("RunsData.run_n_dropped_head must have one entry per run")
            set_(self, "run_n_dropped_head", arr)
        if self.run_series is not None:
            arr = _frozen_array(self.run_series, np.int64, "run_series", 1)
            if arr.shape != (n_runs,):
                raise ValueError("RunsData.run_series must have one entry per run")
            set_(self, "run_series", arr)
        if self.series_labels is not None:
            labels = tuple(str(x) for x in self.series_labels)
            if len(labels) != n_runs or self.run_series is None:
                raise ValueError(
                    "RunsData.series_labels needs run_series and must have one entry per run"
                )
            set_(self, "series_labels", labels)

    # ---------------------------------------------------------------- construction helpers

    @classmethod
    def from_arrays(
        cls,
        languages: Sequence[str],
        run_ids: Sequence[str],
        run_proportions: np.ndarray,
        run_budgets: np.ndarray,
        point_run: np.ndarray,
        point_tokens: np.ndarray,
        point_loss: np.ndarray,
        **kwargs: object,
    ) -> RunsData:
        """Build a :class:`RunsData` from point arrays, deriving the observation arrays.

        Entries of ``point_loss`` at a zero share are set to NaN (and counted as excluded)
        so that the result obeys the same rules as a parsed table. No other validation is
        done; use :func:`runs_from_frame` for untrusted input.

        Parameters
        ----------
        languages, run_ids, run_proportions, run_budgets, point_run, point_tokens, point_loss
            As the attributes of the same name.
        **kwargs
            Any other :class:`RunsData` field (``source``, ``form``, ``tail_start``, ...).

        Returns
        -------
        RunsData
        """
        props = np.asarray(run_proportions, dtype=np.float64)
        loss = np.array(point_loss, dtype=np.float64, copy=True)
        prun = np.asarray(point_run, dtype=np.int64)
        zero = props[prun] == 0 if loss.size else np.zeros(loss.shape, dtype=bool)
        excluded = zero & np.isfinite(loss)
        loss[zero] = np.nan
        obs_point, obs_language, obs_loss = _obs_from_point_loss(loss)
        kwargs.setdefault("n_excluded_zero_share", int(excluded.sum()))
        kwargs.setdefault("point_n_excluded", excluded.sum(axis=1))
        return cls(
            languages=tuple(languages),
            run_ids=tuple(run_ids),
            run_proportions=props,
            run_budgets=run_budgets,
            point_run=prun,
            point_tokens=point_tokens,
            point_loss=loss,
            obs_point=obs_point,
            obs_language=obs_language,
            obs_loss=obs_loss,
            **kwargs,  # type: ignore[arg-type]
        )

    # ---------------------------------------------------------------- sizes

    @property
    def n_runs(self) -> int:
        """Number of runs."""
        return len(self.run_ids)

    @property
    def n_languages(self) -> int:
        """Number of groups ``m``."""
        return len(self.languages)

    @property
    def n_points(self) -> int:
        """Number of kept evaluation points ``P``."""
        return int(self.point_run.shape[0])

    @property
    def n_obs(self) -> int:
        """Number of likelihood observations ``N``."""
        return int(self.obs_loss.shape[0])

    @property
    def n_parameters_climb(self) -> int:
        """Number of CLIMB parameters: ``B, beta, E`` (3m), ``b, k`` (2m(m-1)) and ``eta`` (m)."""
        m = self.n_languages
        return 3 * m + 2 * m * (m - 1) + m

    @property
    def obs_run(self) -> np.ndarray:
        """``(N,)`` run index of each observation."""
        return self.point_run[self.obs_point]

    @property
    def obs_tokens(self) -> np.ndarray:
        """``(N,)`` tokens seen (``D``) of each observation."""
        return self.point_tokens[self.obs_point]

    @property
    def series(self) -> np.ndarray:
        """``(n_runs,)`` trajectory label of each run (:attr:`run_series`, or one per run)."""
        return np.arange(self.n_runs) if self.run_series is None else self.run_series

    @property
    def obs_group(self) -> np.ndarray:
        """``(N,)`` dense id of each observation's (trajectory, language) group.

        The observations of one group share a run-level effect in the likelihood
        (:class:`climb_bayes.model.observation.GroupedNoise`).
        """
        return dense_groups(self.series[self.obs_run], self.obs_language)

    # ---------------------------------------------------------------- reporting

    def summary(self) -> str:
        """Describe the data in a few human-readable lines.

        Returns
        -------
        str
            Lines on the source, languages, runs and budgets, observations and exclusions.
        """
        lines = [f"runs table: {_shown_path(self.source)} ({self.form} form)"]
        if self.sha256:
            lines[0] += f", sha256 {self.sha256[:12]}"
        lines.append(f"languages ({self.n_languages}): {', '.join(self.languages)}")
        if self.n_runs:
            lo, hi = float(self.run_budgets.min()), float(self.run_budgets.max())
            budgets = f"{lo:.3g} tokens" if lo == hi else f"{lo:.3g} to {hi:.3g} tokens"
            lines.append(f"runs: {self.n_runs}, budgets {budgets}")
            n_series = None if self.run_series is None else np.unique(self.run_series).size
            if self.series_inferred:
                grouped = sum(1 for lab in (self.series_labels or ()) if lab)
                lines.append(
                    f"run_series: inferred (no run_series column): {grouped} rows, each mixture's "
                    f"rows at {CHECKPOINT_HINT_BUDGETS}+ budgets, are taken as checkpoints of one "
                    f"training run per mixture ({n_series} training runs in all), whose losses "
                    "share its deviation from the law; if they are separate runs, add an empty "
                    "run_series column (each row a run of its own; docs/runs-format.md)"
                )
            elif n_series == self.n_runs:
                lines.append("run_series: every run is a training run of its own")
            elif n_series is not None:
                lines.append(
                    f"run_series: the {self.n_runs} runs are checkpoints of {n_series} training "
                    "run(s); the losses of one training run share its deviation from the law"
                )
            elif self.form == "wide" and (n_mix := self._mixtures_at_many_budgets()):
                lines.append(
                    f"note: {n_mix} mixture(s) appear at {CHECKPOINT_HINT_BUDGETS}+ budgets: if "
                    "those rows are checkpoints of one training run, give them a run_series "
                    "column (docs/runs-format.md); without it they count as independent runs "
                    "and the intervals are too narrow"
                )
        else:
            lines.append("runs: 0")
        if self.form == "long":
            pct = (1.0 - self.tail_start) * 100.0
            where = f"last {pct:.4g}% of each run" if pct > 0 else "final point of each run"
            lines.append(
                f"observations: {self.n_obs} at {self.n_points} evaluation points ({where})"
            )
        else:
            lines.append(f"observations: {self.n_obs} final losses")
        lines.append(
            f"excluded: {self.n_excluded_zero_share} finite losses at zero share (r_i = 0), "
            f"{self.n_points_dropped_head} curve points before the tail"
        )
        lines.append(f"CLIMB parameters: {self.n_parameters_climb}")
        return "\n".join(lines)

    @property
    def run_mixture(self) -> np.ndarray:
        """``(n_runs,)`` index of each run's mixture among the table's distinct mixtures
        (shares compared after rounding to 9 decimals)."""
        return mixture_codes(self.run_proportions)

    def _mixtures_at_many_budgets(self) -> int:
        """How many mixtures have runs at :data:`CHECKPOINT_HINT_BUDGETS` or more budgets."""
        pairs = np.unique(np.column_stack([self.run_mixture, self.run_budgets]), axis=0)
        _, counts = np.unique(pairs[:, 0], return_counts=True)
        return int(np.sum(counts >= CHECKPOINT_HINT_BUDGETS))

    def __str__(self) -> str:
        return self.summary()

    # ---------------------------------------------------------------- conversion

    def to_frame(self, form: str = "wide") -> pd.DataFrame:
        """Return the data as a table in the on-disk format.

        The result passes :func:`runs_from_frame` and yields the same runs, points and
        observations. Dropped information (head points, losses at zero share) is not
        reproduced.

        Parameters
        ----------
        form : {"wide", "long"}
            ``"wide"`` needs exactly one point per run, at the run's budget; ``"long"``
            always works.

        Returns
        -------
        pandas.DataFrame

        Raises
        ------
        ValueError
            For an unknown ``form`` or data that the wide form cannot hold.
        """
        if form == "wide":
            return self._to_wide()
        if form == "long":
            return self._to_long()
        raise ValueError(f"form must be 'wide' or 'long', got {form!r}")

    def _to_wide(self) -> pd.DataFrame:
        counts = np.bincount(self.point_run, minlength=self.n_runs)
        if not np.all(counts == 1):
            raise ValueError(
                "the wide form holds exactly one point per run, but some runs have "
                f"{int(counts.min())} to {int(counts.max())}; use to_frame('long')"
            )
        order = np.argsort(self.point_run, kind="stable")
        tokens = self.point_tokens[order]
        if not np.allclose(tokens, self.run_budgets, rtol=TOKENS_REL_SLACK, atol=0.0):
            raise ValueError(
                "the wide form holds final losses at each run's budget, but some points are "
                "before the budget; use to_frame('long')"
            )
        columns: dict[str, object] = {
            "run_id": pd.Series(self.run_ids, dtype=object),
            "tokens": self.run_budgets.copy(),
        }
        for j, lang in enumerate(self.languages):
            columns[f"r_{lang}"] = self.run_proportions[:, j].copy()
        for j, lang in enumerate(self.languages):
            columns[f"loss_{lang}"] = self.point_loss[order, j].copy()
        if self.run_series is not None:
            columns[SERIES_COLUMN] = self._series_column()
        return pd.DataFrame(columns)

    def _to_long(self) -> pd.DataFrame:
        m, n_points = self.n_languages, self.n_points
        pidx = np.repeat(np.arange(n_points), m)
        lidx = np.tile(np.arange(m), n_points)
        runs = self.point_run[pidx]
        prop = self.run_proportions[runs, lidx]
        loss = self.point_loss[pidx, lidx]
        keep = (prop == 0) | np.isfinite(loss)  # an empty loss is only allowed at zero share
        run_ids = np.asarray(self.run_ids, dtype=object)
        langs = np.asarray(self.languages, dtype=object)
        columns: dict[str, object] = {
            "run_id": pd.Series(run_ids[runs[keep]], dtype=object),
            "budget_tokens": self.run_budgets[runs[keep]],
            "tokens_seen": self.point_tokens[pidx[keep]],
            "language": pd.Series(langs[lidx[keep]], dtype=object),
            "proportion": prop[keep],
            "loss": loss[keep],
        }
        if self.run_series is not None:
            columns[SERIES_COLUMN] = self._series_column()[runs[keep]]
        return pd.DataFrame(columns)

    def _series_column(self) -> np.ndarray:
        """``(n_runs,)`` the ``run_series`` column :meth:`to_frame` writes: the table's labels
        where known (a blank label stays blank), else the integer codes."""
        if self.series_labels is None:
            return self.run_series.copy()
        return np.asarray(self.series_labels, dtype=object)

    def subset_runs(self, runs: np.ndarray | Sequence[int] | Sequence[bool]) -> RunsData:
        """Keep some runs (e.g. for cross-validation folds), recomputing points and observations.

        Parameters
        ----------
        runs : array-like of bool or int
            A boolean mask of length ``n_runs``, or run indices (kept in the order given;
            no repeats).

        Returns
        -------
        RunsData
            Same languages, source and settings; only the selected runs, their points and
            observations. The excluded/dropped counts are recomputed when known.

        Raises
        ------
        ValueError
            For a mask of the wrong length, out-of-range or repeated indices, or an empty
            selection.
        """
        sel = np.asarray(runs)
        if sel.dtype == bool:
            if sel.shape != (self.n_runs,):
                raise ValueError(
                    f"boolean run mask has shape {sel.shape}, expected ({self.n_runs},)"
                )
            idx = np.flatnonzero(sel)
        else:
            if sel.size and not np.issubdtype(sel.dtype, np.integer):
                raise ValueError("subset_runs takes a boolean mask or integer run indices")
            idx = sel.astype(np.int64).ravel()
            if idx.size and (idx.min() < -self.n_runs or idx.max() >= self.n_runs):
                raise ValueError(f"run indices out of range for {self.n_runs} runs")
            idx = np.where(idx < 0, idx + self.n_runs, idx)
            if np.unique(idx).size != idx.size:
                raise ValueError("subset_runs got repeated run indices")
        if idx.size == 0:
            raise ValueError("subset_runs selected no runs")
        new_of_old = np.full(self.n_runs, -1, dtype=np.int64)
        new_of_old[idx] = np.arange(idx.size)
        new_run = new_of_old[self.point_run]
        kept = np.flatnonzero(new_run >= 0)
        pts = kept[np.argsort(new_run[kept], kind="stable")]
        point_loss = self.point_loss[pts]
        obs_point, obs_language, obs_loss = _obs_from_point_loss(point_loss)
        point_excl = None if self.point_n_excluded is None else self.point_n_excluded[pts]
        run_head = None if self.run_n_dropped_head is None else self.run_n_dropped_head[idx]
        return RunsData(
            languages=self.languages,
            run_ids=tuple(self.run_ids[i] for i in idx),
            run_proportions=self.run_proportions[idx],
            run_budgets=self.run_budgets[idx],
            point_run=new_run[pts],
            point_tokens=self.point_tokens[pts],
            point_loss=point_loss,
            obs_point=obs_point,
            obs_language=obs_language,
            obs_loss=obs_loss,
            n_excluded_zero_share=0 if point_excl is None else int(point_excl.sum()),
            n_points_dropped_head=0 if run_head is None else int(run_head.sum()),
            source=self.source,
            sha256=self.sha256,
            form=self.form,
            tail_start=self.tail_start,
            point_n_excluded=point_excl,
            run_n_dropped_head=run_head,
            run_series=None if self.run_series is None else self.run_series[idx],
            series_labels=None
            if self.series_labels is None
            else tuple(self.series_labels[i] for i in idx),
            series_inferred=self.series_inferred,
        )

    def average_tail(self, k: int = PAPER_TAIL_POINTS) -> RunsData:
        """Each run's last ``k`` evaluation points averaged into one (the paper's practice).

        The CLIMB paper's validation loss of a run is "the loss averaged across the final
        three training steps". Here, per run and language, the mean of the losses at the run's
        last ``k`` evaluation points (of the kept tail; fewer when the run has fewer), placed at
        the last point's ``tokens_seen``. The result has one point per run. Applied after
        ``tail_start``.

        Parameters
        ----------
        k : int
            Points to average (>= 1; 3 in the paper).

        Returns
        -------
        RunsData

        References
        ----------
        .. [1] Guo et al. (2025), Sec. 4.1 and Appendix E ("averaging the loss across the final
           three training steps of each run").
        """
        if int(k) != k or k < 1:
            raise RunsFormatError(
                f"{self.source}: --tail-average must be a whole number >= 1, got {k!r}."
            )
        k = int(k)
        n_runs = len(self.run_ids)
        tokens, losses, excluded = [], [], []
        for r in range(n_runs):
            pts = np.flatnonzero(self.point_run == r)
            pts = pts[np.argsort(self.point_tokens[pts], kind="stable")][-k:]
            tokens.append(self.point_tokens[pts[-1]])
            with np.errstate(invalid="ignore"):
                block = self.point_loss[pts]
                finite = np.isfinite(block)
                total = np.where(finite, block, 0.0).sum(axis=0)
                count = finite.sum(axis=0)
                losses.append(np.where(count > 0, total / np.maximum(count, 1), np.nan))
            if self.point_n_excluded is not None:
                excluded.append(int(np.max(self.point_n_excluded[pts])))
        return RunsData.from_arrays(
            self.languages,
            self.run_ids,
            self.run_proportions,
            self.run_budgets,
            np.arange(n_runs),
            np.asarray(tokens, dtype=float),
            np.asarray(losses, dtype=float).reshape(n_runs, len(self.languages)),
            source=self.source,
            sha256=self.sha256,
            form=self.form,
            tail_start=self.tail_start,
            n_excluded_zero_share=self.n_excluded_zero_share,
            n_points_dropped_head=self.n_points_dropped_head,
            point_n_excluded=np.asarray(excluded) if excluded else None,
            run_n_dropped_head=self.run_n_dropped_head,
            run_series=self.run_series,
            series_labels=self.series_labels,
            series_inferred=self.series_inferred,
        )


# --------------------------------------------------------------------------------------------
# Public readers
# --------------------------------------------------------------------------------------------


def read_runs(
    path: str | os.PathLike[str],
    *,
    tail_start: float = DEFAULT_TAIL_START,
    renormalize: bool = False,
    languages: Sequence[str] | None = None,
    tail_average: int | None = None,
    where: Mapping[str, object] | None = None,
) -> RunsData:
    """Read and validate a runs table from a CSV or Parquet file.

    Parameters
    ----------
    path : str or path-like
        A ``.csv``, ``.parquet`` or ``.pq`` file in the wide or long form
        (see ``docs/runs-format.md``); the form is detected from the columns. An optional
        ``run_series`` column names the training run each row is a checkpoint of
        (:data:`SERIES_COLUMN`; :attr:`RunsData.run_series`).
    tail_start : float, default 0.85
        Long form: keep only evaluation points with
        ``tokens_seen >= tail_start * budget_tokens``. Must be in ``(0, 1]``.
    renormalize : bool, default False
        Divide each run's proportions by their sum instead of requiring they sum to 1
        (within 1e-6), also after a ``languages`` selection drops languages.
    languages : sequence of str, optional
        Keep only these languages, in this order.
    tail_average : int, optional
        Average each run's last ``k`` evaluation points into one
        (:meth:`RunsData.average_tail`; the paper's practice with ``k = 3``).
    where : mapping of str to str or number, optional
        Keep only the rows whose column ``c`` holds ``v`` for every ``c: v`` (before anything
        else is read; row numbers in errors stay the file's). A cell matches when its text
        equals ``v`` or both are equal numbers. The way to fit one model of a published table
        that holds several (``{"model_size_label": "70M"}``): a table whose model column
        (:data:`MODEL_SIZE_COLUMNS`) holds several values is refused.

    Returns
    -------
    RunsData

    Raises
    ------
    RunsFormatError
        If the file is missing, unreadable, of an unsupported type, or the table is invalid.

    Warns
    -----
    UserWarning
        When there are fewer observations than CLIMB parameters.

    Examples
    --------
    >>> from climb_bayes.data.datasets import dataset_path
    >>> runs = read_runs(dataset_path("default"))
    >>> runs.languages, runs.n_runs
    (('en', 'de', 'ru', 'zh', 'ja'), 55)
    """
    source = os.fspath(path)
    p = Path(source)
    if not p.exists():
        _fail(source, "file not found", "check the path (and the working directory)")
    if not p.is_file():
        _fail(source, "not a regular file", "give the path of a .csv or .parquet runs table")
    ext = p.suffix.lower()
    if ext not in _CSV_EXTENSIONS | _PARQUET_EXTENSIONS:
        _fail(
            source,
            f"unsupported file extension {ext or '(none)'!r}",
            "save the runs table as .csv or .parquet (.pq)",
        )
    try:
        raw = p.read_bytes()
    except OSError as exc:
        _fail(source, f"cannot read the file ({exc.strerror or exc})", "check its permissions")
    digest = hashlib.sha256(raw).hexdigest()
    if ext in _CSV_EXTENSIONS:
        df = _parse_csv_bytes(raw, source)
    else:
        df = _parse_parquet_bytes(raw, source)
    return _from_frame(
        df,
        source=source,
        sha256=digest,
        tail_start=tail_start,
        renormalize=renormalize,
        languages=languages,
        tail_average=tail_average,
        where=where,
    )


def runs_from_frame(
    df: pd.DataFrame,
    *,
    source: str = "<frame>",
    tail_start: float = DEFAULT_TAIL_START,
    renormalize: bool = False,
    languages: Sequence[str] | None = None,
    tail_average: int | None = None,
    where: Mapping[str, object] | None = None,
) -> RunsData:
    """Validate a runs table held in a pandas DataFrame.

    Parameters
    ----------
    df : pandas.DataFrame
        The table, wide or long form (detected from the columns). Row numbers in error
        messages are the 0-based position plus 2 (as if the frame were a CSV file).
    source : str, default "<frame>"
        Name used in error messages and stored in :attr:`RunsData.source`.
    tail_start, renormalize, languages, tail_average, where
        As in :func:`read_runs`.

    Returns
    -------
    RunsData
        With ``sha256 == ""``.

    Raises
    ------
    RunsFormatError
        If the table is invalid.

    Warns
    -----
    UserWarning
        When there are fewer observations than CLIMB parameters.
    """
    return _from_frame(
        df,
        source=source,
        sha256="",
        tail_start=tail_start,
        renormalize=renormalize,
        languages=languages,
        tail_average=tail_average,
        where=where,
    )


# --------------------------------------------------------------------------------------------
# Internals: errors, file parsing, column helpers
# --------------------------------------------------------------------------------------------


def _fail(
    source: str,
    problem: str,
    fix: str,
    *,
    row: int | None = None,
    column: str | None = None,
) -> NoReturn:
    where = [source]
    if row is not None:
        where.append(f"row {row}")
    if column is not None:
        where.append(f"column '{column}'")
    raise RunsFormatError(f"{', '.join(where)}: {problem}. Fix: {fix}.")


def _parse_csv_bytes(raw: bytes, source: str) -> pd.DataFrame:
    if not raw.strip():
        _fail(source, "the file is empty", "write a header line and one row per run")
    try:
        return pd.read_csv(
            io.BytesIO(raw),
            encoding="utf-8-sig",
            dtype={"run_id": str, "language": str},
            skipinitialspace=True,
        )
    except UnicodeDecodeError:
        _fail(source, "the file is not UTF-8 text", "save the CSV with UTF-8 encoding")
    except pd.errors.EmptyDataError:
        _fail(source, "the file has no header or data", "write a header line and data rows")
    except (pd.errors.ParserError, ValueError) as exc:
        msg = " ".join(str(exc).split())
        _fail(source, f"cannot parse the CSV ({msg})", "check the quoting and column counts")


def _parse_parquet_bytes(raw: bytes, source: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(io.BytesIO(raw))
    except ImportError as exc:
        _fail(source, f"cannot read Parquet ({exc})", "install pyarrow, or use a .csv file")
    except Exception as exc:  # pyarrow raises many exception types for corrupt files
        msg = " ".join(str(exc).split())[:300]
        _fail(
            source,
            f"not a readable Parquet file ({type(exc).__name__}: {msg})",
            "re-export the table (e.g. DataFrame.to_parquet) or use a .csv file",
        )


def _check_tail_start(tail_start: float, source: str) -> float:
    ok = isinstance(tail_start, int | float | np.floating | np.integer) and not isinstance(
        tail_start, bool
    )
    value = float(tail_start) if ok else math.nan
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        _fail(
            source,
            f"tail_start must be in (0, 1], got {tail_start!r}",
            "use a fraction of the budget, e.g. 0.85 to fit the last 15% of training",
        )
    return value


def _is_blank(series: pd.Series) -> np.ndarray:
    """True where a value is missing: NA, or a string like '' / 'nan' / 'NULL'."""
    missing = series.isna().to_numpy()
    if series.dtype == object or pd.api.types.is_string_dtype(series.dtype):
        lowered = series.astype(str).str.strip().str.lower()
        missing = missing | lowered.isin(_NA_STRINGS).to_numpy(dtype=bool)
    return missing


def _numeric(df: pd.DataFrame, column: str, source: str) -> np.ndarray:
    """Column as float64 (NaN where empty); non-numeric values raise."""
    s = df[column]
    if pd.api.types.is_bool_dtype(s.dtype):
        _fail(
            source,
            "holds true/false values, not numbers",
            "write numbers in this column",
            column=column,
        )
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_complex_dtype(s.dtype):
        return s.to_numpy(dtype=np.float64, na_value=np.nan)
    coerced = pd.to_numeric(s, errors="coerce")
    values = coerced.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(values) & ~_is_blank(s)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _fail(
            source,
            f"value {s.iloc[i]!r} is not a number",
            "write plain numbers (e.g. 5e9, 0.25, 3.41), or leave the cell empty where allowed",
            row=_row_number(df, i),
            column=column,
        )
    return values


def _labels(df: pd.DataFrame, column: str, source: str) -> np.ndarray:
    """Column as an object array of stripped strings; empty cells raise."""
    s = df[column]
    blank = _is_blank(s)
    if blank.any():
        i = int(np.flatnonzero(blank)[0])
        _fail(
            source,
            "the cell is empty",
            f"give every row a {column}",
            row=_row_number(df, i),
            column=column,
        )
    return np.asarray(s.astype(str).str.strip().to_numpy(dtype=object), dtype=object)


def mixture_codes(props: np.ndarray) -> np.ndarray:
    """``(n_runs,)`` index of each run's mixture among the distinct mixtures of ``props``
    ``(n_runs, m)`` (shares compared after rounding to 9 decimals)."""
    _, which = np.unique(np.round(props, 9), axis=0, return_inverse=True)
    return np.asarray(which).ravel()


def infer_checkpoint_series(
    props: np.ndarray, budgets: np.ndarray
) -> tuple[np.ndarray, tuple[str, ...]] | tuple[None, None]:
    """Training runs of a wide table without ``run_series``: ``(n_runs,)`` codes and labels, or
    ``(None, None)`` when no mixture looks like one run's checkpoints.

    A mixture whose rows sit at :data:`CHECKPOINT_HINT_BUDGETS` or more budgets, one row per
    budget, is taken as the checkpoints of one training run (how published results are
    tabulated: Data Mixing Laws' 5Mix and RedPajama sets); its rows get the label
    ``mixture-<k>``. Every other row stays a run of its own (blank label): the Algorithm-1
    design's 2-3 budgets, replicates at one budget.

    Why guess: checkpoints of one run counted as independent runs overstate what the table
    knows. Through the command line on 5Mix-70M (fit the early checkpoints, predict the later
    ones; docs/runs-format.md) the 90% intervals covered 0.70 without labels and 0.99 with
    them, and the RedPajama-70M fit without them did not converge in 1,133 s. Taking separate
    runs as one run's checkpoints costs less (the run effect's scale is learned): on simulated
    separate runs read both ways (``benchmarks/series_inference.py``, 2 seeds) the true law's
    held-out error and 90% coverage did not change (0.82% / 0.83%, 0.77% / 0.76%; 1.00), the
    other laws' errors fell and their coverage dropped by up to 0.11.

    Parameters
    ----------
    props : ndarray (n_runs, m)
        Mixtures.
    budgets : ndarray (n_runs,)
        Token budgets.
    """
    mix = mixture_codes(props)
    codes = np.arange(mix.size, dtype=np.int64)
    labels = [""] * mix.size
    for k in range(int(mix.max()) + 1 if mix.size else 0):
        rows = np.flatnonzero(mix == k)
        n_budgets = np.unique(budgets[rows]).size
        if n_budgets >= CHECKPOINT_HINT_BUDGETS and n_budgets == rows.size:
            codes[rows] = rows[0]
            for r in rows:
                labels[r] = f"mixture-{k + 1}"
    if not any(labels):
        return None, None
    return pd.factorize(codes)[0].astype(np.int64), tuple(labels)


def _series_codes(
    df: pd.DataFrame,
    source: str,
    row_run: np.ndarray,
    run_ids: Sequence[str],
    run_rows: np.ndarray,
    props: np.ndarray,
) -> tuple[np.ndarray, tuple[str, ...]] | tuple[None, None]:
    """``(n_runs,)`` trajectory codes and labels from the optional ``run_series`` column, or
    ``(None, None)``.

    A blank cell makes the run its own trajectory. The label must be the same on every row of
    a run (long form), and the runs of one series must have the same mixture (checkpoints of
    one training run).
    """
    if SERIES_COLUMN not in df.columns:
        return None, None
    col = df[SERIES_COLUMN]
    blank = _is_blank(col)
    labels = np.where(blank, "", col.astype(str).str.strip().to_numpy(dtype=object))
    # the label constant within a run (long form), checked like budget_tokens
    by_run = pd.Series(labels, dtype=object).groupby(row_run)
    _, first_row = np.unique(row_run, return_index=True)
    per_run = labels[first_row]
    mixed = by_run.nunique().to_numpy() > 1
    if mixed.any():
        r = _first(mixed)
        i = _first((row_run == r) & (labels != per_run[r]))
        _fail(
            source,
            f"run '{run_ids[r]}' has run_series {per_run[r] or '(empty)'!r} on row "
            f"{_row_number(df, first_row[r])} and {labels[i] or '(empty)'!r} here",
            "give every row of a run the same run_series (the training run its "
            "checkpoints belong to)",
            row=_row_number(df, i),
            column=SERIES_COLUMN,
        )
    # a blank label: the run is its own trajectory (a label no written one can equal)
    keys = [lab if lab else ("", r) for r, lab in enumerate(per_run)]
    codes = pd.factorize(pd.Series(keys, dtype=object))[0].astype(np.int64)
    _, first = np.unique(codes, return_index=True)
    lead = first[codes]  # the first run of each run's series
    diff = np.max(np.abs(props - props[lead]), axis=1)
    bad = diff > PROPORTION_TOL
    if bad.any():
        r = _first(bad)
        _fail(
            source,
            f"runs '{run_ids[lead[r]]}' (row {run_rows[lead[r]]}) and '{run_ids[r]}' share "
            f"run_series {per_run[r]!r} but not their mixture (shares differ by up to "
            f"{diff[r]:.6g})",
            "run_series labels the checkpoints of one training run, which have one mixture: "
            "give runs of different mixtures different labels (or leave the cell empty)",
            row=int(run_rows[r]),
            column=SERIES_COLUMN,
        )
    return codes, tuple(str(x) for x in per_run)


def _row_number(df: pd.DataFrame, i: int) -> int:
    """Spreadsheet row of the frame's ``i``-th row (its row in the file, also after a
    ``where`` selection kept only some rows)."""
    return int(df.index[int(i)]) + _ROW_OFFSET


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_positive_tokens(
    values: np.ndarray, column: str, source: str, what: str, rows: np.ndarray
) -> None:
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        i = _first(bad)
        v = values[i]
        problem = "the cell is empty" if np.isnan(v) else f"must be a token count > 0, got {v:.6g}"
        _fail(
            source,
            problem,
            f"write {what} as a count of tokens (e.g. 5e9), > 0",
            row=int(rows[i]),
            column=column,
        )


def _check_proportion_values(
    values: np.ndarray, column: str, source: str, rows: np.ndarray
) -> None:
    bad = ~(np.isfinite(values) & (values >= 0))
    if bad.any():
        i = _first(bad)
        v = values[i]
        if np.isnan(v):
            problem = "proportion is empty"
            fix = "give every language a share in every run (0 where it is not trained on)"
        else:
            problem = f"proportion must be a finite share >= 0, got {v:.6g}"
            fix = "write mixture shares between 0 and 1 that sum to 1 per run"
        _fail(source, problem, fix, row=int(rows[i]), column=column)


def _normalise_columns(df: pd.DataFrame, source: str) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"runs_from_frame expects a pandas DataFrame, got {type(df).__name__}")
    names = [str(c).strip() for c in df.columns]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            _fail(
                source,
                f"column {name!r} appears more than once",
                "keep one column per name",
                column=name,
            )
        seen.add(name)
    if len(df) == 0 or len(names) == 0:
        _fail(
            source,
            "the table has no data rows",
            "write a header line and one row per run (wide) or per run/point/language (long)",
        )
    out = df.copy(deep=False)
    out.columns = names
    return out.reset_index(drop=True)


def _loss_problem(v: float) -> tuple[str, str]:
    """Problem and fix for a positive-share loss ``v`` that is not a finite value in
    ``(0, MAX_LOSS_NATS]`` (an empty one is the caller's)."""
    if np.isfinite(v) and v > MAX_LOSS_NATS:
        return (
            f"loss {v:.6g} is above {MAX_LOSS_NATS:g} nats per token (a uniform guess over "
            f"{math.exp(MAX_LOSS_NATS):.3g} tokens): it looks like a perplexity or a sum over "
            "tokens",
            "write the mean validation cross-entropy in nats per token (the natural log of a "
            "perplexity; a loss in bits times ln 2 = 0.693)",
        )
    return (
        f"loss must be a finite value > 0 (nats per token), got {v:.6g}",
        "write the mean validation cross-entropy in nats per token",
    )


def _select_rows(
    frame: pd.DataFrame, where: Mapping[str, object] | None, source: str
) -> pd.DataFrame:
    """The rows whose column ``c`` holds ``v`` for every ``c = v`` of ``where`` (row numbers in
    later errors stay the file's).

    A value matches a cell when their stripped texts are equal, or when both read as numbers
    and are equal (``70e6`` matches ``70000000``; a size like ``70M`` is compared as text).
    """
    if not where:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    for name, wanted in where.items():
        column = _find_column(frame, str(name))
        if column is None:
            _fail(
                source,
                f"the selection {name}={wanted} names no column of the table (columns: "
                f"{', '.join(frame.columns)})",
                "name one of the table's columns (as written in its header)",
            )
        cells = frame[column].astype(str).str.strip()
        text = str(wanted).strip()
        match = np.array(cells == text, dtype=bool)
        number = pd.to_numeric(pd.Series([text]), errors="coerce").iloc[0]
        if not pd.isna(number):
            numeric = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
            match |= np.isclose(numeric, float(number), rtol=1e-12, atol=0.0)
        if not (keep & match).any():
            seen = list(dict.fromkeys(cells[~_is_blank(frame[column])]))
            shown = ", ".join(seen[:8]) + (", ..." if len(seen) > 8 else "")
            _fail(
                source,
                f"no row has {column} = {text}"
                + (" among the rows the other selections keep" if match.any() else "")
                + f" (values in the column: {shown or 'none'})",
                "give one of the column's values, e.g. --where "
                + shlex.quote(f"{column}={seen[0]}")
                if seen
                else f"fill the column '{column}' or drop the selection",
                column=column,
            )
        keep &= match
    return frame[keep]


def _find_column(frame: pd.DataFrame, name: str) -> str | None:
    """The frame's column called ``name`` (exactly, else ignoring case), or None."""
    name = name.strip()
    if name in frame.columns:
        return name
    folded = [c for c in frame.columns if c.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None


def _check_one_model(frame: pd.DataFrame, source: str) -> None:
    """Refuse a table whose :data:`MODEL_SIZE_COLUMNS` column holds several values.

    The laws fitted here (CLIMB, MSL, DML, Isolated) predict loss from tokens and mixture for
    one model; runs of a 70M and a 1B model at the same mixture and budget differ by far more
    than run-to-run noise, and fitted as one law they would read as a huge run effect (or, at
    one mixture and several budgets, as the checkpoints of one run) and every interval would be
    wrong without any error. Published tables often keep such a column (Data Mixing Laws'
    ``model_size_label``), so it is checked rather than ignored with the other extra columns.
    """
    for column in frame.columns:
        key = column.strip().lower().replace(" ", "_").replace("-", "_")
        if key not in MODEL_SIZE_COLUMNS:
            continue
        values = frame[column][~_is_blank(frame[column])].astype(str).str.strip()
        if key in _PARAM_COUNT_COLUMNS and not values.str.match(_SIZE_VALUE).all():
            continue  # e.g. hyper-parameter strings: not a model size
        distinct = list(dict.fromkeys(values))
        if len(distinct) > 1:
            shown = ", ".join(distinct[:5]) + (", ..." if len(distinct) > 5 else "")
            first = int(np.flatnonzero((values != distinct[0]).to_numpy())[0])
            _fail(
                source,
                f"the table mixes {len(distinct)} models ({shown}); the laws here have no "
                "model-size term, so runs of different models cannot be fitted as one law",
                f"fit one model at a time, e.g. --where {shlex.quote(f'{column}={distinct[0]}')} "
                "(read_runs(..., "
                f"where={{'{column}': '{distinct[0]}'}})), or drop the column if its values "
                "name the same model",
                row=int(values.index[first]) + _ROW_OFFSET,
                column=column,
            )


def _detect_form(columns: list[str], source: str) -> str:
    cols = set(columns)
    if cols & _LONG_MARKERS:
        return "long"
    if "tokens" in cols or any(c.startswith(("r_", "loss_")) for c in columns):
        return "wide"
    _fail(
        source,
        f"cannot tell the table's form from its columns {columns}",
        "use the wide columns run_id, tokens, r_<lang>..., loss_<lang>... or the long columns "
        + ", ".join(_LONG_REQUIRED)
        + " (see docs/runs-format.md)",
    )


def _missing_columns(columns: list[str], required: Sequence[str], source: str, form: str) -> None:
    missing = [c for c in required if c not in columns]
    if missing:
        _fail(
            source,
            f"the {form}-form table lacks required column(s) {', '.join(missing)} "
            f"(found: {', '.join(columns)})",
            f"add them; the {form} form needs the columns {', '.join(required)}"
            + (
                " and a pair of r_<lang>, loss_<lang> columns per language"
                if form == "wide"
                else ""
            )
            + (
                "; if every row is a run's final loss, set tokens_seen to budget_tokens (or "
                "use the wide form: run_id, tokens, r_<lang>, loss_<lang>)"
                if missing == ["tokens_seen"]
                else ""
            ),
        )


def _select_languages(
    all_langs: list[str],
    props_all: np.ndarray,
    languages: Sequence[str] | None,
    renormalize: bool,
    source: str,
    run_ids: Sequence[str],
    run_rows: np.ndarray,
    prop_where: str,
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Check proportions, apply the language selection and normalise rows to sum 1.

    Returns the kept language names, their ``(n_runs, m)`` proportions and their indices
    into ``all_langs``.
    """
    if languages is None:
        idx = np.arange(len(all_langs))
    else:
        wanted = [languages] if isinstance(languages, str) else [str(x) for x in languages]
        if not wanted:
            _fail(source, "the language selection is empty", "select at least one language")
        dup = sorted({x for x in wanted if wanted.count(x) > 1})
        if dup:
            _fail(source, f"language(s) {', '.join(dup)} selected twice", "list each once")
        unknown = [x for x in wanted if x not in all_langs]
        if unknown:
            _fail(
                source,
                f"selected language(s) {', '.join(unknown)} not in the table "
                f"(it has: {', '.join(all_langs)})",
                "select languages that appear in the table (names are case-sensitive)",
            )
        idx = np.array([all_langs.index(x) for x in wanted], dtype=np.int64)
    langs = [all_langs[i] for i in idx]

    sums_all = props_all.sum(axis=1)
    if not renormalize:
        bad = np.abs(sums_all - 1.0) > PROPORTION_TOL
        if bad.any():
            i = _first(bad)
            _fail(
                source,
                f"the proportions {prop_where} of run '{run_ids[i]}' sum to {sums_all[i]:.9g}, "
                f"not 1 (tolerance {PROPORTION_TOL:g})",
                "correct them so each run's shares sum to 1, or pass "
                f"{_RENORM_HINT} to divide each run's proportions by their sum",
                row=int(run_rows[i]),
            )
    props = props_all[:, idx]
    sums = props.sum(axis=1)
    if not renormalize:
        bad = np.abs(sums - 1.0) > PROPORTION_TOL
        if bad.any():
            i = _first(bad)
            dropped = [all_langs[j] for j in range(len(all_langs)) if j not in set(idx.tolist())]
            _fail(
                source,
                f"run '{run_ids[i]}' gives a share of {1.0 - sums[i]:.6g} to language(s) left "
                f"out by the selection ({', '.join(dropped)}), so the kept shares sum to "
                f"{sums[i]:.9g}, not 1",
                f"pass {_RENORM_HINT} to rescale the kept languages' shares to sum to 1, or "
                "keep those languages",
                row=int(run_rows[i]),
            )
    if (sums <= 0).any():
        i = _first(sums <= 0)
        _fail(
            source,
            f"run '{run_ids[i]}' has share 0 for every selected language "
            f"({', '.join(langs)}), so its proportions cannot be renormalised",
            "remove this run from the table, or select languages it was trained on",
            row=int(run_rows[i]),
        )
    props = props / sums[:, None]
    never = ~(props > 0).any(axis=0)
    if never.any():
        j = _first(never)
        _fail(
            source,
            f"language '{langs[j]}' has proportion 0 in every run, so it has no observations "
            "and its CLIMB parameters cannot be learned",
            "leave it out with --languages (languages=...), or add runs that train on it",
        )
    return langs, props, idx


def _warn_if_few(data: RunsData, stacklevel: int) -> None:
    k = data.n_parameters_climb
    if data.n_obs < k:
        warnings.warn(
            f"{data.source}: only {data.n_obs} observations for {k} CLIMB parameters "
            f"({data.n_languages} languages); the fit will be prior-dominated. Add runs or "
            "evaluation points (long form), or fit fewer languages.",
            UserWarning,
            stacklevel=stacklevel,
        )


# --------------------------------------------------------------------------------------------
# Internals: the two forms
# --------------------------------------------------------------------------------------------


def _from_frame(
    df: pd.DataFrame,
    *,
    source: str,
    sha256: str,
    tail_start: float,
    renormalize: bool,
    languages: Sequence[str] | None,
    tail_average: int | None,
    where: Mapping[str, object] | None = None,
) -> RunsData:
    """Validate a frame (either form), average tails if asked, warn when data are few."""
    tail = _check_tail_start(tail_start, source)
    frame = _select_rows(_normalise_columns(df, source), where, source)
    if where:  # the selection is part of what was read: errors and the fit file name it
        source += " [where " + ", ".join(f"{c}={str(v).strip()}" for c, v in where.items()) + "]"
    _check_one_model(frame, source)
    form = _detect_form(list(frame.columns), source)
    parse = _parse_wide if form == "wide" else _parse_long
    data = parse(frame, source, sha256, tail, bool(renormalize), languages)
    if tail_average is not None:
        data = data.average_tail(tail_average)
    _warn_if_few(data, stacklevel=4)  # the caller of read_runs / runs_from_frame
    return data


def _parse_wide(
    df: pd.DataFrame,
    source: str,
    sha256: str,
    tail_start: float,
    renormalize: bool,
    languages: Sequence[str] | None,
) -> RunsData:
    columns = list(df.columns)
    _missing_columns(columns, _WIDE_REQUIRED, source, "wide")
    all_langs: list[str] = []
    r_cols: dict[str, str] = {}
    loss_cols: dict[str, str] = {}
    for col in columns:
        for prefix, target in (("r_", r_cols), ("loss_", loss_cols)):
            if col.startswith(prefix):
                name = col[len(prefix) :]
                if not name:
                    _fail(
                        source,
                        f"column name {col!r} has no language after the prefix",
                        f"name it {prefix}<lang>, e.g. {prefix}en",
                        column=col,
                    )
                target[name] = col
                if name not in all_langs:
                    all_langs.append(name)
    if not all_langs:
        _fail(
            source,
            f"no language columns (found: {', '.join(columns)})",
            "add an r_<lang> and a loss_<lang> column per language, e.g. r_en, loss_en",
        )
    if r_cols and not loss_cols:
        _fail(
            source,
            "the table has r_<lang> columns but no loss_<lang> columns; it looks like a plan "
            "(run list) rather than a runs table with results",
            "train the planned runs (e.g. with the training package) and pass the runs table "
            "it writes, or add a loss_<lang> column per language",
        )
    for name in all_langs:
        if name not in loss_cols:
            _fail(
                source,
                f"r_{name} has no matching loss_{name} column",
                f"add a loss_{name} column (empty where r_{name} is 0), or remove r_{name}",
                column=f"r_{name}",
            )
        if name not in r_cols:
            _fail(
                source,
                f"loss_{name} has no matching r_{name} column",
                f"add r_{name} with the share of {name} in each run, or remove loss_{name}",
                column=f"loss_{name}",
            )

    n = len(df)
    rows = df.index.to_numpy() + _ROW_OFFSET
    run_ids = _labels(df, "run_id", source)
    dup = pd.Series(run_ids).duplicated(keep=False).to_numpy()
    if dup.any():
        rid = run_ids[_first(dup)]
        where = rows[run_ids == rid][:5].tolist()
        _fail(
            source,
            f"run_id '{rid}' appears more than once (rows {', '.join(map(str, where))})",
            "give every run a unique run_id (the wide form has one row per finished run; "
            "use the long form for loss curves)",
            row=where[1],
            column="run_id",
        )
    tokens = _numeric(df, "tokens", source)
    _check_positive_tokens(tokens, "tokens", source, "each run's total training budget", rows)

    props_all = np.empty((n, len(all_langs)), dtype=np.float64)
    for j, name in enumerate(all_langs):
        col = r_cols[name]
        props_all[:, j] = _numeric(df, col, source)
        _check_proportion_values(props_all[:, j], col, source, rows)
    langs, props, idx = _select_languages(
        all_langs,
        props_all,
        languages,
        renormalize,
        source,
        run_ids,
        rows,
        "(r_* columns)",
    )

    m = len(langs)
    loss = np.empty((n, m), dtype=np.float64)
    for j, name in enumerate(langs):
        col = loss_cols[name]
        values = _numeric(df, col, source)
        positive = props[:, j] > 0
        bad = positive & ~(np.isfinite(values) & (values > 0) & (values <= MAX_LOSS_NATS))
        bad |= np.isfinite(values) & (values <= 0)
        if bad.any():
            i = _first(bad)
            v = values[i]
            if np.isnan(v):
                problem = f"loss is empty although r_{name} = {props_all[i, idx[j]]:.6g} > 0"
                fix = (
                    f"fill in the run's final validation loss on {name}, or set r_{name} to 0 "
                    "if the run did not train on it"
                )
            else:
                problem, fix = _loss_problem(v)
            _fail(source, problem, fix, row=int(rows[i]), column=col)
        loss[:, j] = values

    series, labels = _series_codes(df, source, np.arange(n), run_ids.tolist(), rows, props)
    inferred = False
    if series is None:
        series, labels = infer_checkpoint_series(props, tokens)
        inferred = series is not None
    zero = props == 0
    excluded = zero & np.isfinite(loss)
    loss[zero] = np.nan
    obs_point, obs_language, obs_loss = _obs_from_point_loss(loss)
    return RunsData(
        languages=tuple(langs),
        run_ids=tuple(run_ids.tolist()),
        run_proportions=props,
        run_budgets=tokens,
        point_run=np.arange(n),
        point_tokens=tokens,
        point_loss=loss,
        obs_point=obs_point,
        obs_language=obs_language,
        obs_loss=obs_loss,
        n_excluded_zero_share=int(excluded.sum()),
        n_points_dropped_head=0,
        source=source,
        sha256=sha256,
        form="wide",
        tail_start=tail_start,
        point_n_excluded=excluded.sum(axis=1),
        run_n_dropped_head=np.zeros(n, dtype=np.int64),
        run_series=series,
        series_labels=labels,
        series_inferred=inferred,
    )


def _parse_long(
    df: pd.DataFrame,
    source: str,
    sha256: str,
    tail_start: float,
    renormalize: bool,
    languages: Sequence[str] | None,
) -> RunsData:
    columns = list(df.columns)
    _missing_columns(columns, _LONG_REQUIRED, source, "long")
    rows = df.index.to_numpy() + _ROW_OFFSET

    run_labels = _labels(df, "run_id", source)
    lang_labels = _labels(df, "language", source)
    budget = _numeric(df, "budget_tokens", source)
    tokens = _numeric(df, "tokens_seen", source)
    prop = _numeric(df, "proportion", source)
    loss = _numeric(df, "loss", source)

    _check_positive_tokens(
        budget, "budget_tokens", source, "each run's total training budget", rows
    )
    _check_positive_tokens(
        tokens, "tokens_seen", source, "the tokens seen at each eval point", rows
    )
    over = tokens > budget * (1.0 + TOKENS_REL_SLACK)
    if over.any():
        i = _first(over)
        _fail(
            source,
            f"tokens_seen = {tokens[i]:.10g} exceeds budget_tokens = {budget[i]:.10g}",
            "budget_tokens must be the run's total training budget, at least every "
            "tokens_seen of the run",
            row=int(rows[i]),
            column="tokens_seen",
        )
    _check_proportion_values(prop, "proportion", source, rows)

    run_codes, run_uniques = pd.factorize(run_labels)
    lang_codes, lang_uniques = pd.factorize(lang_labels)
    run_codes = run_codes.astype(np.int64)
    lang_codes = lang_codes.astype(np.int64)
    run_ids = [str(x) for x in run_uniques]
    all_langs = [str(x) for x in lang_uniques]
    n_runs, n_all = len(run_ids), len(all_langs)
    _, run_first = np.unique(run_codes, return_index=True)
    run_rows = rows[run_first]

    # (run, tokens_seen, language) must be unique.
    keys = pd.DataFrame({"r": run_codes, "t": tokens, "l": lang_codes})
    dup = keys.duplicated(keep=False).to_numpy()
    if dup.any():
        i = _first(dup)
        same = (run_codes == run_codes[i]) & (tokens == tokens[i]) & (lang_codes == lang_codes[i])
        where = rows[same][:5].tolist()
        _fail(
            source,
            f"duplicate entry for run '{run_labels[i]}', tokens_seen = {tokens[i]:.10g}, "
            f"language '{lang_labels[i]}' (rows {', '.join(map(str, where))})",
            "keep one row per (run_id, tokens_seen, language); if these are different runs "
            "(e.g. seeds), give them different run_ids",
            row=where[1],
        )

    # budget_tokens constant within a run.
    by_run = pd.Series(budget).groupby(run_codes)
    bmin, bmax = by_run.min().to_numpy(), by_run.max().to_numpy()
    bad = (bmax - bmin) > TOKENS_REL_SLACK * bmax
    if bad.any():
        r = _first(bad)
        in_run = run_codes == r
        r_lo = int(rows[_first(in_run & (budget == bmin[r]))])
        r_hi = int(rows[_first(in_run & (budget == bmax[r]))])
        _fail(
            source,
            f"run '{run_ids[r]}' has different budget_tokens: {bmin[r]:.10g} (row {r_lo}) "
            f"and {bmax[r]:.10g} (row {r_hi})",
            "budget_tokens is the run's total budget and must be the same on all its rows; "
            "if these are different runs, give them different run_ids",
            row=max(r_lo, r_hi),
            column="budget_tokens",
        )
    run_budgets = budget[run_first]

    # proportion constant within (run, language); every run lists every language.
    pair = run_codes * n_all + lang_codes
    by_pair = pd.Series(prop).groupby(pair)
    pmin, pmax = by_pair.min(), by_pair.max()
    bad_pairs = (pmax - pmin).to_numpy() > 0
    if bad_pairs.any():
        key = int(pmin.index[_first(bad_pairs)])
        r, j = divmod(key, n_all)
        in_pair = pair == key
        r_lo = int(rows[_first(in_pair & (prop == pmin[key]))])
        r_hi = int(rows[_first(in_pair & (prop == pmax[key]))])
        _fail(
            source,
            f"the proportion of language '{all_langs[j]}' in run '{run_ids[r]}' changes: "
            f"{pmin[key]:.9g} (row {r_lo}) and {pmax[key]:.9g} (row {r_hi})",
            "proportion is the run's mixture share of that language and must be the same at "
            "every evaluation point of the run",
            row=max(r_lo, r_hi),
            column="proportion",
        )
    props_all = np.full(n_runs * n_all, np.nan)
    props_all[pmin.index.to_numpy(dtype=np.int64)] = pmin.to_numpy()
    props_all = props_all.reshape(n_runs, n_all)
    absent = np.isnan(props_all)
    if absent.any():
        r, j = (int(x[0]) for x in np.nonzero(absent))
        have = int(np.sum(~absent[:, j]))
        if 2 * have <= n_runs:  # a language few runs list: more likely a misspelt name
            first = int(rows[_first(lang_codes == j)])
            _fail(
                source,
                f"language '{all_langs[j]}' appears in only {have} of {n_runs} runs (first at "
                f"row {first}); every run must list every language of the table",
                f"if '{all_langs[j]}' is a misspelt language name, correct it; otherwise add rows "
                "with proportion 0 (and an empty loss) for it to the runs not trained on it",
                row=first,
                column="language",
            )
        _fail(
            source,
            f"run '{run_ids[r]}' (first at row {run_rows[r]}) has no rows for language "
            f"'{all_langs[j]}'",
            "every run must list every language of the table; add rows with proportion 0 "
            "(and an empty loss) for languages the run was not trained on",
            row=int(run_rows[r]),
            column="language",
        )

    langs, props, idx = _select_languages(
        all_langs,
        props_all,
        languages,
        renormalize,
        source,
        run_ids,
        run_rows,
        "(column 'proportion')",
    )
    series, labels = _series_codes(df, source, run_codes, run_ids, run_rows, props)
    m = len(langs)
    new_lang_of_old = np.full(n_all, -1, dtype=np.int64)
    new_lang_of_old[idx] = np.arange(m)
    new_lang = new_lang_of_old[lang_codes]
    kept_lang = new_lang >= 0

    # Loss values (kept languages): finite losses must be > 0 everywhere; in the tail, a
    # loss is required wherever the share is > 0.
    in_tail = tokens >= tail_start * budget * (1.0 - TOKENS_REL_SLACK)
    positive = prop > 0
    bad = kept_lang & np.isfinite(loss) & (loss <= 0)
    bad |= kept_lang & in_tail & positive & ~np.isfinite(loss)
    bad |= kept_lang & in_tail & positive & np.isfinite(loss) & (loss > MAX_LOSS_NATS)
    if bad.any():
        i = _first(bad)
        v = loss[i]
        if np.isnan(v):
            problem = (
                f"loss is empty for run '{run_labels[i]}', language '{lang_labels[i]}' at "
                f"tokens_seen = {tokens[i]:.10g}, although its proportion is {prop[i]:.6g} > 0"
            )
            fix = (
                "fill in the validation loss, or remove this evaluation point's rows "
                "(a missing eval is better than an empty one)"
            )
        else:
            problem, fix = _loss_problem(v)
        _fail(source, problem, fix, row=int(rows[i]), column="loss")

    # Tail filter: every run needs a point in the tail.
    sel = kept_lang & in_tail
    tail_count = np.bincount(run_codes[sel], minlength=n_runs)
    if (tail_count == 0).any():
        r = _first(tail_count == 0)
        last = float(tokens[run_codes == r].max())
        b = float(run_budgets[r])
        _fail(
            source,
            f"run '{run_ids[r]}' has no evaluation point in the last "
            f"{(1.0 - tail_start) * 100:.4g}% of training: its last point is at tokens_seen = "
            f"{last:.6g} of budget_tokens = {b:.6g}, and the tail starts at "
            f"{tail_start * b:.6g} (tail_start = {tail_start:g})",
            "lower tail_start (--tail-start), or log more evaluation points near the end of "
            "the run (including one at the end)",
            row=int(run_rows[r]),
        )
    head = kept_lang & ~in_tail
    head_pts = pd.DataFrame({"r": run_codes[head], "t": tokens[head]}).drop_duplicates()
    run_head = np.bincount(head_pts["r"].to_numpy(dtype=np.int64), minlength=n_runs)

    # Points: unique (run, tokens_seen) of kept tail rows, sorted by run then tokens.
    pr, pt = run_codes[sel], tokens[sel]
    point_of_row = (
        pd.DataFrame({"r": pr, "t": pt}).groupby(["r", "t"], sort=True).ngroup().to_numpy()
    )
    n_points = int(point_of_row.max()) + 1
    point_run = np.empty(n_points, dtype=np.int64)
    point_tokens = np.empty(n_points, dtype=np.float64)
    point_run[point_of_row] = pr
    point_tokens[point_of_row] = pt
    point_loss = np.full((n_points, m), np.nan)
    point_loss[point_of_row, new_lang[sel]] = loss[sel]

    zero = props[point_run] == 0
    excluded = zero & np.isfinite(point_loss)
    point_loss[zero] = np.nan
    obs_point, obs_language, obs_loss = _obs_from_point_loss(point_loss)
    return RunsData(
        languages=tuple(langs),
        run_ids=tuple(run_ids),
        run_proportions=props,
        run_budgets=run_budgets,
        point_run=point_run,
        point_tokens=point_tokens,
        point_loss=point_loss,
        obs_point=obs_point,
        obs_language=obs_language,
        obs_loss=obs_loss,
        n_excluded_zero_share=int(excluded.sum()),
        n_points_dropped_head=int(run_head.sum()),
        source=source,
        sha256=sha256,
        form="long",
        tail_start=tail_start,
        point_n_excluded=excluded.sum(axis=1),
        run_n_dropped_head=run_head,
        run_series=series,
        series_labels=labels,
    )
