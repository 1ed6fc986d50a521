"""Checkpoints that let a killed run continue exactly where it stopped.

A checkpoint holds the model and optimizer states, the step (the learning-rate schedule and the
data position are functions of it: the block order is fixed by the run seed), the per-language
token counts so far, the evaluation rows so far, and the Python, NumPy and torch (CPU and CUDA)
random states. It is written to a temporary file and moved into place.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from training.atomic import atomic_path

__all__ = ["rng_state", "set_rng_state", "save_checkpoint", "load_checkpoint"]


def rng_state() -> dict[str, Any]:
    """Snapshot of the Python, NumPy and torch random generators."""
    import torch

    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002 - global state of other libs
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a snapshot taken by :func:`rng_state`."""
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """``torch.save`` to ``path`` atomically (:func:`training.atomic.atomic_path`)."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: str | Path) -> dict[str, Any] | None:
    """Load a checkpoint (on CPU) or return ``None`` when there is none."""
    import torch

    path = Path(path)
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
