"""Never two Slurm jobs on one run: remember which job trains which run folder.

``--slurm --no-slurm-wait`` submits the pending runs and returns; running the command again
before the array finishes used to submit the still-pending runs a second time (two jobs
training one folder). Each submission now records ``{run folder: job id}`` in
``OUT/slurm/jobs.json`` (merged, written atomically); before submitting, runs whose recorded
job is still queued or running (``squeue``/``sacct`` through submitit) are left alone and
reported. A job whose state cannot be read is treated as in flight: the message says how to
resubmit (remove its entry).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from training.atomic import atomic_write_text

__all__ = ["ACTIVE_STATES", "jobs_file", "read_jobs", "record_jobs", "in_flight", "slurm_state"]

ACTIVE_STATES = frozenset(
    {
        "PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING",
        "COMPLETING", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "UNKNOWN",
    }
)  # fmt: skip
"""Slurm job states in which the job may still write to its run folder (UNKNOWN: cannot tell)."""


def jobs_file(out: str | os.PathLike[str]) -> Path:
    return Path(out) / "slurm" / "jobs.json"


def read_jobs(out: str | os.PathLike[str]) -> dict[str, str]:
    """``{run folder name: job id}`` of earlier submissions (empty when none or unreadable)."""
    path = jobs_file(out)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def record_jobs(out: str | os.PathLike[str], submitted: dict[str, str]) -> None:
    """Merge ``submitted`` into the jobs file (atomically)."""
    jobs = read_jobs(out) | submitted
    path = jobs_file(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(jobs, indent=1, sort_keys=True) + "\n")


def in_flight(
    out: str | os.PathLike[str], run_dirs: Iterable[str], state_of: Callable[[str], str]
) -> dict[str, tuple[str, str]]:
    """Run folders (of ``run_dirs``) whose recorded job is still active: ``{dir: (job, state)}``.

    ``state_of(job_id)`` returns the Slurm state (e.g. ``"RUNNING"``; ``"UNKNOWN"`` when it
    cannot be read).
    """
    jobs = read_jobs(out)
    active = {}
    for name in run_dirs:
        job = jobs.get(name)
        if job is None:
            continue
        raw = str(state_of(job) or "").split()
        state = raw[0].upper() if raw else "UNKNOWN"
        if state in ACTIVE_STATES:
            active[name] = (job, state)
    return active


def slurm_state(out: str | os.PathLike[str], job_id: str, cluster: str | None = None) -> str:
    """Slurm state of ``job_id`` through submitit (``"UNKNOWN"`` if it cannot be read).

    Jobs of submitit's in-process ``debug`` cluster cannot outlive the command: ``"FINISHED"``.
    """
    if cluster == "debug":
        return "FINISHED"
    try:
        from submitit.slurm.slurm import SlurmJob

        return str(SlurmJob(folder=Path(out) / "slurm" / "%j", job_id=job_id).state)
    except Exception:  # noqa: BLE001 - no sacct, no Slurm: cannot tell
        return "UNKNOWN"
