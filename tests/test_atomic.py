"""climb_bayes.atomic: readers never see a half-written file; a failure keeps the old one."""

from __future__ import annotations

import os
import stat

import pytest

from climb_bayes.atomic import atomic_path, atomic_write_text


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "out.txt"  # the folder is created
    atomic_write_text(target, "first")
    atomic_write_text(target, "second")
    assert target.read_text(encoding="utf-8") == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half", encoding="utf-8")
            raise RuntimeError("killed mid-write")
    assert target.read_text(encoding="utf-8") == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_the_file_gets_the_permissions_of_a_plain_write(tmp_path):
    mask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "out.txt", "x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o644  # mkstemp gives 0o600
