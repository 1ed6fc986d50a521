"""Sharded checkpoints that let a killed run continue exactly where it stopped.

A checkpoint is the folder ``RUN/checkpoint/``::

    shard-0000<k>-model-00001-of-00001.safetensors   one per rank (k = rank + 1): its shards of
                                                      the model and optimizer states
    train_state.json                                  step, token counts, evaluation rows, resumes,
                                                      timing, RNG states, run key (written last)

The model and optimizer states are saved with ``torch.distributed.checkpoint`` (DCP):
``get_state_dict`` gives every rank its own shards (FSDP2: its DTensor shards; DDP: the replicated
tensors, which DCP's planner splits so that each is written by one rank), and
``HuggingFaceStorageWriter(save_distributed=True)`` writes each rank's part to its own safetensors
file, with the shard offsets in the file header. Loading (``dcp.load`` into the state dict of the
freshly built, already sharded model, then ``set_state_dict``) reads on each rank only the slices
it holds, so a resume never materialises the whole model on every rank, and it can reshard (a
checkpoint of 2 FSDP2 ranks loads into one process). Only tensors go into the shards (the
optimizer's ``param_groups`` are rebuilt from the run config), and everything else is JSON:
nothing in a checkpoint is unpickled, so resuming from a folder someone else wrote cannot run code.

Writing is asynchronous: ``dcp.async_save`` copies the rank's shards to CPU memory (a snapshot;
training goes on and may change the parameters) and writes them from a background thread over a
process group of its own (gloo, so that its collectives never interleave with the training's on
the default group; measured on 2 CPU processes, gloo: a ``small``-preset FSDP2 checkpoint blocks
training 0.45 s instead of 3.7 s for ``dcp.save``, docs/performance.md). The folder is written as
``RUN/.checkpoint-<step>.tmp/``; once the save has finished (rank 0's save completes only after
DCP has gathered every rank's write results), rank 0 writes ``train_state.json`` into it and swaps
it in: ``checkpoint/`` -> ``.checkpoint.old/``, the new folder -> ``checkpoint/``, then removes the
old one. Before the swap, a background thread fsyncs the written files, so the swapped-in folder
is on disk (before, the shard files were never fsynced) and the swap on the training thread is
only renames. On an H100 machine (paper-1.2b shape, 16 GB of shards, 2026-11-25) one training
step stalled 18 s when the write finished; with the fsync moved here it still stalled 17 s, so
the swap was not the cause, which is not established (docs/performance.md).
A crash at any point leaves the last complete checkpoint: an unfinished ``.tmp`` folder is
ignored and removed at the next start, and a ``.checkpoint.old/`` left between the two renames is
moved back. A checkpoint taken to stop (SIGTERM, preemption, the test hook) is waited for.

Checkpoints of earlier versions (a single ``RUN/checkpoint.pt`` written with ``torch.save``) are
refused with a :class:`~training.errors.TrainingError` naming the fix, rather than unpickled.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from training.atomic import atomic_write_text, fsync_dir, replace_dir
from training.errors import TrainingError

__all__ = [
    "CHECKPOINT_DIR",
    "STATE_FILE",
    "LEGACY_FILE",
    "rng_state",
    "set_rng_state",
    "refuse_legacy",
    "read_state",
    "Checkpointer",
]

CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "train_state.json"
LEGACY_FILE = "checkpoint.pt"
FORMAT = "climb-bayes-training-checkpoint/2"
_OLD = ".checkpoint.old"


def _b64(t: Any) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode("ascii")


def _unb64(s: str) -> Any:
    import torch

    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8).clone()


def rng_state() -> dict[str, Any]:
    """Snapshot of the Python, NumPy and torch random generators, as plain JSON values."""
    import torch

    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002 - global state
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {
            "kind": str(kind),
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": _b64(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a snapshot taken by :func:`rng_state`."""
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    keys = np.asarray(n["keys"], dtype=np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))  # noqa: NPY002
    torch.set_rng_state(_unb64(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


def refuse_legacy(run_dir: str | Path) -> None:
    """Raise :class:`TrainingError` if ``run_dir`` holds a single-file checkpoint of an earlier
    version (``checkpoint.pt``): it is a pickle, which this version does not load."""
    path = Path(run_dir) / LEGACY_FILE
    if path.exists():
        raise TrainingError(
            f"{path} is a checkpoint of an earlier climb-bayes version (one torch.save file); "
            f"this version writes sharded checkpoints to {path.parent / CHECKPOINT_DIR}/ and "
            "does not unpickle files. Fix: finish this run with the version that wrote the "
            "file, or delete it to restart the run from step 0."
        )


def _complete(folder: Path) -> bool:
    return (folder / STATE_FILE).is_file()


def read_state(run_dir: str | Path) -> dict[str, Any] | None:
    """``train_state.json`` of the run's complete checkpoint, or ``None`` when there is none."""
    import json

    path = Path(run_dir) / CHECKPOINT_DIR / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TrainingError(
            f"{path}: unreadable checkpoint state ({exc}). Fix: delete {path.parent} to restart "
            "this run from step 0."
        ) from None
    if state.get("format") != FORMAT:
        raise TrainingError(
            f"{path}: checkpoint format {state.get('format')!r}, this version reads {FORMAT!r}. "
            f"Fix: delete {path.parent} to restart this run from step 0."
        )
    return state


def _check_torch() -> None:
    """Refuse, with the fix, a torch whose DCP cannot write per-rank safetensors shards."""
    import inspect

    import torch

    try:
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        ok = "save_distributed" in inspect.signature(HuggingFaceStorageWriter).parameters
    except ImportError:
        ok = False
    if not ok:
        raise TrainingError(
            f"torch {torch.__version__} lacks torch.distributed.checkpoint."
            "HuggingFaceStorageWriter(save_distributed=...), which training checkpoints need. "
            "Fix: install a current torch (tested with 2.13)."
        )


def _flush_when_written(written: Any, folder: Path, sync: bool) -> None:
    """Wait for DCP's write, then (``sync``) fsync every file of ``folder`` and the folder
    (background).

    Only rank 0 syncs: its write completes after every rank's (DCP's coordinator gathers the
    ranks' write results before it finishes), and fsync flushes a file whoever wrote it. The
    other ranks only wait: walking the folder from them raced rank 0 renaming it into place
    (``FileNotFoundError`` in a two-process run, 2026-11-27)."""
    written.result()  # re-raises a failed write
    if not sync:
        return
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(folder)


class Checkpointer:
    """Writes and reads one run's sharded checkpoint; every rank makes the same calls.

    Parameters
    ----------
    run_dir
        The run's folder (``checkpoint/`` goes in it).
    rank, world
        This process's rank and the number of processes (``torch.distributed`` is initialised
        when ``world > 1``).
    """

    def __init__(self, run_dir: str | Path, rank: int, world: int) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / CHECKPOINT_DIR
        self.rank, self.world = rank, world
        self.group = None
        _check_torch()
        self._pending: tuple[Any, Path, str] | None = None
        self._flusher: Any = None  # one background thread: fsync a written checkpoint
        if world > 1:
            import torch.distributed as dist

            # a group of its own for the background writes (a collective call: every rank)
            self.group = dist.new_group(backend="gloo")
        else:  # DCP warns on every single-process save/load, also from its writer thread
            warnings.filterwarnings(
                "ignore", message="torch.distributed is disabled, unavailable or uninitialized"
            )

    @property
    def main(self) -> bool:
        return self.rank == 0

    def _barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier(group=self.group)

    def prepare(self) -> dict[str, Any] | None:
        """Tidy the run folder (rank 0) and return the complete checkpoint's state, if any.

        Refuses an earlier version's ``checkpoint.pt``; moves back a ``.checkpoint.old/`` that a
        crash left between the two renames; removes unfinished ``.checkpoint-*.tmp/`` folders.
        """
        refuse_legacy(self.run_dir)
        if self.main and self.run_dir.is_dir():
            old = self.run_dir / _OLD
            if not _complete(self.dir) and _complete(old):
                if self.dir.exists():
                    shutil.rmtree(self.dir)
                os.replace(old, self.dir)
            for stale in [old, *self.run_dir.glob(".checkpoint-*.tmp")]:
                if stale.exists():
                    shutil.rmtree(stale, ignore_errors=True)
        self._barrier()
        return read_state(self.run_dir) if _complete(self.dir) else None

    @staticmethod
    def _state_dicts(model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(model, optimizer)
        return {"model": msd, "optim": {"state": osd["state"]}}, osd

    def load(self, model: Any, optimizer: Any) -> None:
        """Load the checkpoint's model and optimizer states into ``model`` and ``optimizer``
        (already on their device and sharded as they will train): each rank reads its slices."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageReader
        from torch.distributed.checkpoint.state_dict import set_state_dict

        sd, osd = self._state_dicts(model, optimizer)
        dcp.load(
            sd,
            storage_reader=HuggingFaceStorageReader(str(self.dir)),
            process_group=self.group,
            no_dist=self.world == 1,
        )
        set_state_dict(
            model,
            optimizer,
            model_state_dict=sd["model"],
            optim_state_dict={"state": sd["optim"]["state"], "param_groups": osd["param_groups"]},
        )

    def save(self, model: Any, optimizer: Any, state: dict[str, Any], *, wait: bool) -> None:
        """Snapshot the model and optimizer shards and write them in the background (``wait``:
        finish before returning); ``state`` (JSON values, serialised now: the caller may change
        them meanwhile; rank 0's is kept) goes in ``train_state.json`` once the shards are
        written."""
        import json

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        self.wait()  # one save in flight at a time
        tmp = self.run_dir / f".checkpoint-{int(state['step']):09d}.tmp"
        sd, _ = self._state_dicts(model, optimizer)
        resp = dcp.async_save(
            sd,
            storage_writer=HuggingFaceStorageWriter(str(tmp), save_distributed=True),
            process_group=self.group,
            no_dist=self.world == 1,
        )
        written = getattr(resp, "upload_completion", resp)
        if self._flusher is None:
            from concurrent.futures import ThreadPoolExecutor

            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-fsync")
        future = self._flusher.submit(_flush_when_written, written, tmp, self.main)
        self._pending = (future, tmp, json.dumps({"format": FORMAT, **state}, indent=1) + "\n")
        if wait:
            self.wait()

    def poll(self) -> None:
        """Swap in a finished background save (cheap; call once per step)."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        """Wait for the save in flight, if any, and (rank 0) swap it in as ``checkpoint/``."""
        if self._pending is None:
            return
        future, tmp, state = self._pending
        self._pending = None
        future.result()  # re-raises a failed write
        if not self.main:
            return
        atomic_write_text(tmp / STATE_FILE, state)  # last: marks the folder complete
        replace_dir(tmp, self.dir, self.run_dir / _OLD)

    def remove(self) -> None:
        """Delete the checkpoint (rank 0; the run has finished)."""
        self.wait()
        if self.main:
            shutil.rmtree(self.dir, ignore_errors=True)
