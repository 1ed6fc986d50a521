"""Atomic file writing for the training package: a temporary sibling, fsync, ``os.replace``.

A killed process leaves either the old file or the new one, never half of one. Every file the
package writes (checkpoints, token caches, records, run rows, the runs table) goes through
:func:`atomic_path`. The package does not import ``climb_bayes`` (training meets fitting only at
the runs format), so this is the training side's one copy; ``climb_bayes.atomic`` is the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_write_json"]


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
