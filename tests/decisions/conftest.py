"""Shared checks of the decision tests."""

from __future__ import annotations

import numpy as np
import pytest


def _assert_valid_mixtures(r: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
    """Every row of ``r`` is a finite mixture on the simplex within the bounds ``[lo, hi]``."""
    r = np.atleast_2d(r)
    assert np.all(np.isfinite(r))
    assert np.all(r >= 0.0)
    np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(r >= lo - 1e-12) and np.all(r <= hi + 1e-12)


@pytest.fixture
def assert_valid_mixtures():
    """The check :func:`_assert_valid_mixtures`, as a fixture (test modules do not import each
    other)."""
    return _assert_valid_mixtures
