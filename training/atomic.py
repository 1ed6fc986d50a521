"""Atomic file writing for the training package: a temporary sibling, fsync, ``os.replace``.

A killed process leaves either the old file or the new one, never half of one. Every file the
package writes (checkpoints, token caches, records, run rows, the runs table) goes through
:func:`atomic_path`, and every folder (the saved model, the tokenizer, sharded checkpoints)
through :func:`atomic_dir` / :func:`replace_dir`. The package does not import ``climb_bayes``
(training meets fitting only at the runs format), so this is the training side's one copy;
``climb_bayes.atomic`` is the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_path",
    "atomic_dir",
    "replace_dir",
    "fsync_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; fsync it and move it onto ``path`` if the block
    succeeds (on an exception the temporary file is removed and ``path`` is untouched)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, sort_keys: bool = False) -> None:
    """Write ``obj`` as indented JSON (trailing newline) to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n")


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (renames into it) to disk, where the filesystem allows it."""
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_dir(
    tmp: str | os.PathLike[str], path: str | os.PathLike[str], old: str | os.PathLike[str]
) -> None:
    """Move the finished folder ``tmp`` onto ``path``.

    The current ``path`` is first renamed to ``old`` and removed only once ``tmp`` is in place,
    so a crash between the two renames leaves ``old`` complete for the reader to move back (the
    checkpoint loader does). Both renames stay inside one filesystem (siblings).
    """
    tmp, path, old = Path(tmp), Path(path), Path(old)
    fsync_dir(tmp)
    if old.exists():
        shutil.rmtree(old)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling folder of ``path``; move it onto ``path`` if the block succeeds
    (:func:`replace_dir`); on an exception it is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        replace_dir(tmp, path, path.parent / f".{path.name}.old")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
