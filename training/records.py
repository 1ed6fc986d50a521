"""Atomic writing of a run's outputs: runs-table rows (long form) and the JSON record.

Every file is written with :mod:`training.atomic` (a temporary sibling moved into place), so a
killed process leaves either the old file or the new one, never half of one. A run is finished
exactly when its ``record.json`` exists with ``"status": "finished"``; it is written last.

Runs-table long form (what ``climb_bayes.data.runs.read_runs`` reads): one row per
(run, evaluation point, language) with columns ``run_id, budget_tokens, tokens_seen, language,
proportion, loss`` (plus ``step``, ignored by the reader).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from training.atomic import atomic_write_json, atomic_write_text

__all__ = [
    "RUNS_COLUMNS",
    "rows_to_csv",
    "read_record",
    "is_finished",
    "write_finished_run",
    "write_table",
]

RUNS_COLUMNS = ("run_id", "budget_tokens", "tokens_seen", "language", "proportion", "loss", "step")


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


def rows_to_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str] = RUNS_COLUMNS) -> str:
    """Format runs-table rows as CSV text (floats with 8 significant digits)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_fmt(row.get(c)) for c in columns])
    return buf.getvalue()


def read_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's ``record.json`` or ``None`` when absent or unreadable."""
    path = Path(run_dir) / "record.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def is_finished(run_dir: str | Path) -> bool:
    """Whether the run in ``run_dir`` has finished (rows and record written)."""
    rec = read_record(run_dir)
    return bool(rec and rec.get("status") == "finished" and (Path(run_dir) / "rows.csv").is_file())


def write_finished_run(
    run_dir: str | Path, rows: Sequence[Mapping[str, Any]], record: Mapping[str, Any]
) -> None:
    """Write ``rows.csv`` then ``record.json`` (the finish marker), each atomically."""
    run_dir = Path(run_dir)
    atomic_write_text(run_dir / "rows.csv", rows_to_csv(rows))
    atomic_write_json(run_dir / "record.json", {**record, "status": "finished"})


def write_table(
    run_dirs: Sequence[str | Path], table_path: str | Path, records_path: str | Path | None
) -> int:
    """Concatenate finished runs into one runs table (and a JSON list of their records).

    Unfinished runs are left out. Returns the number of runs written.
    """
    lines: list[str] = []
    records: list[dict[str, Any]] = []
    header = ",".join(RUNS_COLUMNS)
    for d in run_dirs:
        if not is_finished(d):
            continue
        text = (Path(d) / "rows.csv").read_text().splitlines()
        lines.extend(text[1:])
        records.append(read_record(d) or {})
    atomic_write_text(table_path, "\n".join([header, *lines]) + "\n")
    if records_path is not None:
        atomic_write_json(records_path, records)
    return len(records)
