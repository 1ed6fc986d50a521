"""Mixture laws behind one interface (CLIMB, Isolated, MSL, Data Mixing Law).

See :mod:`climb_bayes.laws.base` for the interface and ``docs/laws.md`` for adding a law.
"""

from __future__ import annotations

from climb_bayes.data.observations import Observations
from climb_bayes.laws.base import (
    FitOptions,
    Law,
    LawFit,
    ParamSpec,
    fit_map,
    fit_nuts,
    predict_draws,
)
from climb_bayes.laws.registry import DEFAULT_LAWS, LAWS, get_law, parse_laws

__all__ = [
    "FitOptions",
    "Law",
    "LawFit",
    "Observations",
    "ParamSpec",
    "fit_map",
    "fit_nuts",
    "predict_draws",
    "LAWS",
    "DEFAULT_LAWS",
    "get_law",
    "parse_laws",
]
