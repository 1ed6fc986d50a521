"""Datasets shipped with climb-bayes.

``default``
    Real CPU-scale runs trained by the ``training`` package on the Debian multilingual corpus
    (``climb_bayes/data/default_runs.csv``, see ``DEFAULT_DATA.md`` beside it), when present.
``synthetic``
    A 5-language table made by ``climb-bayes simulate`` on the Algorithm-1 design
    (``climb_bayes/data/synthetic_runs.csv``; its true parameters are in
    ``synthetic_params.json``). It is labelled synthetic wherever it is shown.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from climb_bayes.errors import ClimbError

__all__ = ["DATASETS", "dataset_path", "dataset_label", "default_dataset"]

DATASETS = {
    "default": "default_runs.csv",
    "synthetic": "synthetic_runs.csv",
}

_LABELS = {
    "default": "real CPU-scale runs (tiny LLaMA models, Debian corpus); see DEFAULT_DATA.md",
    "synthetic": "SYNTHETIC data simulated by `climb-bayes simulate` (not real training runs)",
}


def _data_dir() -> Path:
    return Path(str(resources.files("climb_bayes") / "data"))


def dataset_path(name: str) -> Path:
    """Path of a shipped dataset by name (see :data:`DATASETS`)."""
    if name not in DATASETS:
        raise ClimbError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}.")
    path = _data_dir() / DATASETS[name]
    if not path.is_file():
        raise ClimbError(f"dataset {name!r} is not installed ({path} missing).")
    return path


def default_dataset() -> str:
    """Name of the dataset ``climb-bayes fit`` uses with no file: real runs if shipped."""
    return "default" if (_data_dir() / DATASETS["default"]).is_file() else "synthetic"


def dataset_label(name: str) -> str:
    """One-line description shown next to results (says 'SYNTHETIC' for simulated data)."""
    return _LABELS[name]
