"""Constraints on a mixture: per-language share bounds and data-availability caps.

A mixture ``r`` must lie in ``{sum_i r_i = 1, lo_i <= r_i <= hi_i}``. The bounds come from

* ``--min lang=share,...`` and ``--max lang=share,...`` (shares of the budget, in [0, 1]);
* an **availability file** (``--available FILE``): the unique tokens each language has and how
  many times (epochs) it may be repeated; at a budget ``D`` it caps the share at
  ``r_i <= tokens_i * max_epochs_i / D`` (the per-language epoch cap of UniMax).

Availability file format (CSV, UTF-8, header line; documented in ``docs/decisions.md``)::

    language,tokens,max_epochs
    en,2.0e12,1
    de,3.0e11,2
    sw,4.0e9,4

``max_epochs`` is optional (per row, or the whole column); where absent the ``--max-epochs``
default applies. Languages of the file that the fit does not know are ignored; languages of the
fit missing from the file are an error.

Units
-----
``tokens`` and budgets in tokens; shares and epochs unit-free.

References
----------
.. [1] Chung et al. (2023), "UniMax: Fairer and More Effective Language Sampling for
   Large-Scale Multilingual Pretraining", ICLR (epoch caps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from climb_bayes.errors import ClimbError

__all__ = ["Availability", "read_availability", "Constraints", "FEASIBILITY_TOL"]

FEASIBILITY_TOL = 1e-9
"""Slack allowed in ``sum(lo) <= 1 <= sum(hi)`` before constraints are declared infeasible."""


@dataclass(frozen=True)
class Availability:
    """Unique tokens per language and the epochs each may be repeated.

    Attributes
    ----------
    languages : tuple of str
        Language names (the order of the arrays).
    tokens : ndarray (m,)
        Unique tokens available (tokens, > 0).
    max_epochs : ndarray (m,)
        Most passes over each language's data (> 0).
    source : str
        Where it was read from (for messages).
    """

    languages: tuple[str, ...]
    tokens: np.ndarray
    max_epochs: np.ndarray
    source: str = "<availability>"

    def select(self, languages: Sequence[str]) -> Availability:
        """The same table restricted to and ordered as ``languages`` (missing ones: error)."""
        index = {lang: i for i, lang in enumerate(self.languages)}
        missing = [lang for lang in languages if lang not in index]
        if missing:
            raise ClimbError(
                f"{self.source}: no row for language(s) {', '.join(missing)} of the fit; add a "
                f"row 'language,tokens[,max_epochs]' for each."
            )
        idx = [index[lang] for lang in languages]
        return Availability(tuple(languages), self.tokens[idx], self.max_epochs[idx], self.source)

    def caps(self, budget: float) -> np.ndarray:
        """Share caps ``tokens_i * max_epochs_i / budget`` at ``budget`` tokens (unclipped)."""
        return self.tokens * self.max_epochs / float(budget)


def read_availability(
    path: str | Path, languages: Sequence[str] | None = None, *, default_epochs: float = 1.0
) -> Availability:
    """Read an availability CSV (``language,tokens[,max_epochs]``; see module docstring).

    Parameters
    ----------
    path : str or Path
        The CSV file.
    languages : sequence of str, optional
        Keep and order these languages (all must be present).
    default_epochs : float
        ``max_epochs`` where the file has none.

    Returns
    -------
    Availability
    """
    path = Path(path)
    if not math.isfinite(default_epochs) or default_epochs <= 0:
        raise ClimbError(f"--max-epochs must be a positive number, got {default_epochs}.")
    if not path.is_file():
        raise ClimbError(
            f"{path}: availability file not found (CSV: language,tokens[,max_epochs])."
        )
    try:
        df = pd.read_csv(path, dtype={"language": str})
    except Exception as exc:  # noqa: BLE001 - any parser failure means the same to the user
        raise ClimbError(f"{path}: cannot read the availability CSV ({exc}).") from None
    df.columns = [str(c).strip().lower() for c in df.columns]
    for col in ("language", "tokens"):
        if col not in df.columns:
            raise ClimbError(
                f"{path}: missing column '{col}'; expected header 'language,tokens[,max_epochs]'."
            )
    if df.empty:
        raise ClimbError(f"{path}: no rows; add one row per language.")
    langs = [str(x).strip() for x in df["language"]]
    dup = sorted({x for x in langs if langs.count(x) > 1})
    if dup:
        raise ClimbError(f"{path}: language(s) listed twice: {', '.join(dup)}.")
    tokens = pd.to_numeric(df["tokens"], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(tokens) | (tokens <= 0))
    if bad.size:
        raise ClimbError(
            f"{path}: row {bad[0] + 2} (language {langs[bad[0]]}): 'tokens' must be a positive "
            f"number of tokens, got {df['tokens'].iloc[bad[0]]!r}."
        )
    if "max_epochs" in df.columns:
        raw = df["max_epochs"]
        epochs = pd.to_numeric(raw, errors="coerce").to_numpy(float)
        blank = raw.isna().to_numpy()
        epochs = np.where(blank, default_epochs, epochs)
        bad = np.flatnonzero(~np.isfinite(epochs) | (epochs <= 0))
        if bad.size:
            raise ClimbError(
                f"{path}: row {bad[0] + 2} (language {langs[bad[0]]}): 'max_epochs' must be a "
                f"positive number, got {raw.iloc[bad[0]]!r}."
            )
    else:
        epochs = np.full(len(langs), float(default_epochs))
    avail = Availability(tuple(langs), tokens, epochs, str(path))
    return avail.select(languages) if languages is not None else avail


@dataclass(frozen=True)
class Constraints:
    """Share bounds of a mixture problem (fixed bounds plus budget-dependent caps).

    Attributes
    ----------
    languages : tuple of str
        Order of the arrays.
    minimum, maximum : ndarray (m,)
        User bounds on shares (defaults 0 and 1).
    availability : Availability, optional
        Availability caps, applied at each budget.
    """

    languages: tuple[str, ...]
    minimum: np.ndarray
    maximum: np.ndarray
    availability: Availability | None = None

    @classmethod
    def build(
        cls,
        languages: Sequence[str],
        minimum: Mapping[str, float] | None = None,
        maximum: Mapping[str, float] | None = None,
        availability: Availability | None = None,
    ) -> Constraints:
        """Validate user bounds (names, values in [0, 1], ``min <= max``) into arrays."""
        languages = tuple(languages)
        m = len(languages)
        lo, hi = np.zeros(m), np.ones(m)
        for option, values, target in (("--min", minimum, lo), ("--max", maximum, hi)):
            for lang, value in (values or {}).items():
                if lang not in languages:
                    raise ClimbError(
                        f"{option}: language {lang!r} is not in the fit (languages: "
                        f"{', '.join(languages)})."
                    )
                if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                    raise ClimbError(f"{option}: share of {lang} must be in [0, 1], got {value}.")
                target[languages.index(lang)] = value
        bad = np.flatnonzero(lo > hi)
        if bad.size:
            i = bad[0]
            raise ClimbError(
                f"infeasible constraints: --min {languages[i]}={lo[i]:g} exceeds "
                f"--max {languages[i]}={hi[i]:g}."
            )
        if availability is not None:
            availability = availability.select(languages)
        out = cls(languages, lo, hi, availability)
        out.bounds(None)  # sum checks of the fixed part
        return out

    @classmethod
    def none(cls, languages: Sequence[str]) -> Constraints:
        """No constraint beyond the simplex."""
        m = len(languages)
        return cls(tuple(languages), np.zeros(m), np.ones(m), None)

    @property
    def is_trivial(self) -> bool:
        """True when only the simplex constrains the mixture."""
        return (
            self.availability is None
            and not np.any(self.minimum > 0)
            and not np.any(self.maximum < 1)
        )

    def bounds(self, budget: float | None) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` at ``budget`` tokens, checked feasible.

        Raises
        ------
        ClimbError
            When ``sum(lo) > 1``, ``sum(hi) < 1`` or a cap falls below a minimum, naming the
            languages involved and the fix.
        """
        lo = self.minimum.copy()
        hi = self.maximum.copy()
        capped = np.zeros(lo.size, bool)
        if self.availability is not None and budget is not None:
            caps = self.availability.caps(budget)
            capped = caps < hi
            hi = np.minimum(hi, caps)
        where = f" at a budget of {budget:.4g} tokens" if budget is not None else ""
        bad = np.flatnonzero(lo > hi + FEASIBILITY_TOL)
        if bad.size:
            i = bad[0]
            raise ClimbError(
                f"infeasible constraints{where}: {self.languages[i]} may use at most "
                f"{hi[i]:.4g} of the budget (its available tokens x max epochs) but --min asks "
                f"for {lo[i]:g}; lower --min, raise max_epochs or lower the budget."
            )
        hi = np.maximum(hi, lo)
        if lo.sum() > 1.0 + FEASIBILITY_TOL:
            raise ClimbError(
                f"infeasible constraints: the minimum shares sum to {lo.sum():.4g} > 1 "
                f"({', '.join(f'{a}={v:g}' for a, v in zip(self.languages, lo, strict=True) if v)})"
                "."
            )
        if hi.sum() < 1.0 - FEASIBILITY_TOL:
            detail = ""
            if capped.any():
                total = float(np.sum(self.availability.tokens * self.availability.max_epochs))
                detail = (
                    f"; the available data ({total:.4g} tokens counting max epochs) cannot fill "
                    f"the budget: add data, allow more epochs (--max-epochs or the file's "
                    f"max_epochs column) or lower the budget"
                )
            raise ClimbError(
                f"infeasible constraints{where}: the maximum shares sum to {hi.sum():.4g} < 1"
                f"{detail}."
            )
        return lo, hi

    def check(self, r: np.ndarray, budget: float | None, tol: float = 1e-8) -> bool:
        """Whether mixture(s) ``r`` satisfy the constraints at ``budget`` (within ``tol``)."""
        lo, hi = self.bounds(budget)
        r = np.asarray(r, dtype=float)
        return bool(
            np.all(r >= lo - tol)
            and np.all(r <= hi + tol)
            and np.all(np.abs(r.sum(axis=-1) - 1.0) <= tol)
        )
