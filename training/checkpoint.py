"""Checkpoints that let a killed run continue exactly where it stopped.

A checkpoint holds the model and optimizer states, the step (the learning-rate schedule and the
data position are functions of it: the block order is fixed by the run seed), the per-language
token counts so far, the evaluation rows so far, and the Python, NumPy and torch (CPU and CUDA)
random states. It is written to a temporary file and moved into place.

Checkpoints hold only tensors and plain Python values (the NumPy generator state is stored as a
tensor), so :func:`load_checkpoint` reads them with ``torch.load(weights_only=True)``: resuming
from a run folder someone else wrote cannot execute code hidden in a pickle.
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

    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002 - global state
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a snapshot taken by :func:`rng_state`."""
    import torch

    random.setstate(state["python"])
    n = state["numpy"]
    keys = np.asarray(n["keys"].numpy(), dtype=np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """``torch.save`` to ``path`` atomically (:func:`training.atomic.atomic_path`)."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: str | Path) -> dict[str, Any] | None:
    """Load a checkpoint (on CPU, tensors and plain values only) or return ``None`` when there
    is none.

    Raises
    ------
    TrainingError
        The file holds anything but tensors and plain values (a checkpoint of an older version
        with a pickled NumPy state, or a tampered file).
    """
    import pickle

    import torch

    from training.errors import TrainingError

    path = Path(path)
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise TrainingError(
            f"{path}: not a plain checkpoint (torch.load(weights_only=True) refused it: it holds"
            " more than tensors and Python values). "
            "Fix: delete it to restart this run from step 0 (older versions pickled NumPy "
            "objects into checkpoints)."
        ) from None
