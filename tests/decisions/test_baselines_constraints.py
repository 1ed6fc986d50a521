"""Baseline mixtures (:mod:`climb_bayes.decisions.baselines`) and share constraints
(:mod:`climb_bayes.decisions.constraints`): formulas computed by hand, infeasible input."""

from __future__ import annotations

import numpy as np
import pytest

from climb_bayes.decisions.baselines import (
    natural_mixture,
    temperature_mixture,
    uniform_mixture,
    unimax_mixture,
)
from climb_bayes.decisions.constraints import Availability, Constraints, read_availability
from climb_bayes.decisions.optimization import optimize_mixture
from climb_bayes.errors import ClimbError
from climb_bayes.model.simulate import example_draws

M = 3


# -- baselines ---------------------------------------------------------------------------------


def test_baseline_formulas_hand_computed():
    np.testing.assert_allclose(uniform_mixture(4), [0.25] * 4)
    n = np.array([100.0, 10.0, 1.0])
    np.testing.assert_allclose(natural_mixture(n), n / 111.0)
    q = np.array([100.0, 10.0, 1.0]) ** 0.3
    np.testing.assert_allclose(temperature_mixture(n, 0.3), q / q.sum())
    np.testing.assert_allclose(temperature_mixture(n, 0.0), [1 / 3] * 3)
    np.testing.assert_allclose(temperature_mixture(n, 1.0), n / n.sum())
    # UniMax, budget 300, 1 epoch: 10 -> min(100, 10) = 10; 100 -> min(145, 100); 1000 -> 190
    np.testing.assert_allclose(
        unimax_mixture(np.array([1000.0, 100.0, 10.0]), 300.0, 1.0),
        [190 / 300, 100 / 300, 10 / 300],
    )
    # with 2 epochs the small language gets 20 and the medium one min(140, 200) = 140
    np.testing.assert_allclose(
        unimax_mixture(np.array([1000.0, 100.0, 10.0]), 300.0, 2.0),
        [140 / 300, 140 / 300, 20 / 300],
    )
    with pytest.raises(ClimbError, match="cannot fill"):
        unimax_mixture(np.array([10.0, 10.0]), 100.0, 2.0)


# -- constraints -------------------------------------------------------------------------------


def test_infeasible_constraints(tmp_path):
    langs = ("en", "de", "zh")
    with pytest.raises(ClimbError, match="exceeds"):
        Constraints.build(langs, {"en": 0.5}, {"en": 0.4})
    with pytest.raises(ClimbError, match="sum to 1.2"):
        Constraints.build(langs, {"en": 0.6, "de": 0.6})
    with pytest.raises(ClimbError, match="sum to 0.9"):
        Constraints.build(langs, None, {"en": 0.3, "de": 0.3, "zh": 0.3})
    path = tmp_path / "avail.csv"
    path.write_text("language,tokens,max_epochs\nen,1e11,1\nde,1e11,2\nzh,5e10,\n")
    avail = read_availability(path, langs, default_epochs=2.0)
    np.testing.assert_allclose(avail.max_epochs, [1, 2, 2])
    cons = Constraints.build(langs, availability=avail)
    lo, hi = cons.bounds(2e11)
    np.testing.assert_allclose(hi, [0.5, 1.0, 0.5])
    with pytest.raises(ClimbError, match="cannot fill the budget"):
        cons.bounds(1e12)  # 4e11 tokens counting epochs < 1e12
    with pytest.raises(ClimbError, match="no row for language"):
        read_availability(path, ("en", "fr"))
    avail2 = Availability(langs, np.array([1e11, 1e11, 1e11]), np.ones(3))
    with pytest.raises(ClimbError, match="at most"):
        Constraints.build(langs, {"zh": 0.5}, availability=avail2).bounds(1e12)
    with pytest.raises(ClimbError, match="positive"):
        optimize_mixture(example_draws(M, 2, seed=1), [f"l{i}" for i in range(M)], -1.0)
