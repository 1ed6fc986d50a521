"""climb-bayes: Bayesian CLIMB multilingual data-mixture scaling laws.

The public Python API (:mod:`climb_bayes.api`, loaded on first use so that ``import
climb_bayes`` stays cheap and changes no JAX setting)::

    import climb_bayes as cb

    runs = cb.read_runs("runs.csv")
    fit = cb.fit(runs)                           # NUTS posterior + stacked laws
    fit.save("fit.nc"); fit = cb.load_fit("fit.nc")
    table = cb.predict(fit, {"en": 0.5, "de": 0.3, "zh": 0.2}, 1e12)
    best = cb.optimize(fit, 1e12)

The API functions set JAX up themselves (:func:`setup_jax`: 64-bit floats, one host device per
core); call ``cb.setup_jax()`` first when using the lower-level modules directly.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = (
    "setup_jax",
    "read_runs",
    "RunsData",
    "Priors",
    "load_priors",
    "fit",
    "Fit",
    "load_fit",
    "predict",
    "optimize",
    "evaluate",
    "algorithm1_design",
    "holdout_design",
    "Constraints",
    "ClimbError",
    "dataset_path",
)
"""Names of :mod:`climb_bayes.api`, served here on first use."""

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:  # PEP 562: the API is imported on first use
    if name in _API:
        value = getattr(importlib.import_module("climb_bayes.api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'climb_bayes' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
