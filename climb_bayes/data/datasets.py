"""Datasets shipped with climb-bayes.

``default``
    Real CPU-scale runs trained by the ``training`` package on the Debian multilingual corpus
    (``climb_bayes/data/default_runs.csv``, see ``DEFAULT_DATA.md`` beside it), when present:
    the CLIMB Algorithm-1 design at three budgets (250k-1M tokens, the 0.36M-parameter ``mini``
    model, in the regime where a power law in D holds) plus ten held-out mixtures at 3M tokens.
``tiny-2024``
    The previous default (``tiny2024_runs.csv``, ``TINY2024_DATA.md``): 34 runs of the ``tiny``
    model at 100k/300k tokens plus four holdouts at 1M, trained before the law's regime (every
    law misses the holdouts by ~9%). Kept so that results computed on it reproduce.
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
    "tiny-2024": "tiny2024_runs.csv",
    "synthetic": "synthetic_runs.csv",
}

_LABELS = {
    "default": "real CPU-scale runs (mini LLaMA models, Debian corpus); see DEFAULT_DATA.md",
    "tiny-2024": "real CPU-scale runs of 2024 (tiny LLaMA models, 1e5-1e6 tokens, before the"
    " law's regime); see TINY2024_DATA.md",
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
