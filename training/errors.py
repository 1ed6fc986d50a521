"""The one exception type of the training package.

Every problem a user can cause (a missing or corrupt corpus file, a plan language absent from
the corpus, a budget larger than the data) raises :class:`TrainingError` with a message that
names the file and the fix. The ``train`` command prints it without a traceback and exits 2.
"""

from __future__ import annotations

__all__ = ["TrainingError", "RunInterrupted"]


class TrainingError(Exception):
    """A user-facing training error: the message names the file and how to fix it."""


class RunInterrupted(Exception):  # noqa: N818 - it is a control-flow signal, not an error
    """A run stopped on purpose after writing a checkpoint (test hook, SIGTERM, preemption).

    Running the same run again resumes from that checkpoint.
    """
