"""The documentation site builds cleanly and the CLI reference matches the commands."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'not included in the "nav"' not in proc.stderr, proc.stderr  # every page linked
    assert (tmp_path / "site" / "robustness" / "index.html").is_file()


def _sections(text: str, drop: set[str]) -> dict[str, str]:
    """``## name`` sections of cli.md (the header under ``""``), without those in ``drop``."""
    parts = ("\n" + text).split("\n## ")
    out = {"": parts[0]}
    for part in parts[1:]:
        name = part.split("\n", 1)[0].strip()
        if name not in drop:
            out[name] = part
    return out


def test_cli_reference_is_up_to_date():
    # Rendered in a fresh interpreter: click caches a command's help option on the command the
    # first time any context asks, so a test that invoked `robustness` on its own (default
    # `--help` only) would otherwise change what this process renders.
    gen = str(ROOT / "docs" / "gen_cli.py")
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('gen_cli', {gen!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "sys.stdout.write(m.render())\n"
    )
    fresh = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    stored = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    # `train` lives in the optional [train] extra: its help text depends on what is installed.
    drop = set() if importlib.util.find_spec("transformers") else {"train"}
    assert _sections(fresh, drop) == _sections(stored, drop), (
        "docs/cli.md is stale: run `python docs/gen_cli.py`"
    )


THROUGHPUT_ROWS = sorted((ROOT / "benchmarks" / "results").glob("throughput-*.jsonl"))


@pytest.mark.parametrize("rows", THROUGHPUT_ROWS, ids=lambda p: p.name)
def test_gpu_throughput_tables_come_from_their_result_files(rows):
    """docs/performance.md holds each kept result file's table exactly as the script renders it."""
    table = subprocess.run(
        [sys.executable, "benchmarks/train_throughput.py", "--render", str(rows), "--markdown"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert table.count("\n") >= 3, table
    assert table in (ROOT / "docs" / "performance.md").read_text()
