"""One sweep at a time per output folder: ``OUT/sweep.lock``.

Two ``climb-bayes train`` commands on the same ``--out`` would train the same pending runs into
the same folders (two writers of one checkpoint). The first command creates ``OUT/sweep.lock``
atomically (``O_CREAT | O_EXCL``) with its host, pid and start time and removes it when it
ends; a second one stops with a clear error. A lock left by a process that died on *this* host
(its pid no longer exists) is stale and taken over with a warning; a lock from another host
cannot be checked and must be removed by hand (the message says so). Slurm jobs submitted
with ``--no-slurm-wait`` outlive the command; :mod:`training.slurm_jobs` guards those.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from training.errors import TrainingError

__all__ = ["sweep_lock", "LOCK_FILE"]

LOCK_FILE = "sweep.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _try_create(path: Path, info: dict) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(info, fh)
    return True


@contextlib.contextmanager
def sweep_lock(out: str | os.PathLike[str], log: Callable[[str], None] = print) -> Iterator[None]:
    """Hold ``OUT/sweep.lock`` for the duration of a sweep (see the module docstring).

    Raises
    ------
    TrainingError
        Another live sweep holds the lock (or one on another host may).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    host = socket.gethostname()
    info = {"host": host, "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if not _try_create(path, info):
        try:
            held = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            held = {}
        who = f"pid {held.get('pid')} on {held.get('host')}, since {held.get('started')}"
        if (
            held.get("host") == host
            and isinstance(held.get("pid"), int)
            and not _alive(held["pid"])
        ):
            log(f"warning: {path}: removing the stale lock of a sweep that died ({who})")
            path.unlink(missing_ok=True)
            if not _try_create(path, info):
                raise TrainingError(f"{path}: another sweep took the lock just now. Fix: wait.")
        else:
            raise TrainingError(
                f"another sweep is running on {out} ({who}). Fix: wait for it to finish; if it "
                f"died (e.g. on another machine), delete {path} and run the command again."
            )
    try:
        yield
    finally:
        with contextlib.suppress(OSError, json.JSONDecodeError):
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                path.unlink()
