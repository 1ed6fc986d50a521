"""Exception types with messages meant for people.

Every error a user can trigger with bad input is a subclass of :class:`ClimbError`.
The CLI catches ``ClimbError`` and prints its message (no traceback) with a non-zero
exit. Messages name the file, the row/column when there is one, and the fix.
"""

from __future__ import annotations

__all__ = ["ClimbError", "RunsFormatError", "PriorsError", "FitFileError", "ConvergenceError"]


class ClimbError(Exception):
    """Base class of every user-facing climb-bayes error."""


class RunsFormatError(ClimbError, ValueError):
    """A runs table is malformed (see ``docs/runs-format.md``)."""


class PriorsError(ClimbError, ValueError):
    """A priors file or override is malformed."""


class FitFileError(ClimbError, ValueError):
    """A ``fit.nc`` file is missing, unreadable or not a climb-bayes fit."""


class ConvergenceError(ClimbError, RuntimeError):
    """Raised under ``--strict`` when diagnostics fail their thresholds."""
