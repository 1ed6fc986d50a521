"""Leave-future-out folds: construction, no leakage of future budgets, ratio bins."""

from __future__ import annotations

import numpy as np
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.data.design import algorithm1_design
from climb_bayes.data.observations import Observations
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.errors import ClimbError
from climb_bayes.inference.lfo import LfoFold, budget_levels, check_no_leakage, lfo_folds, ratio_bin
from climb_bayes.model.simulate import example_params, simulate_runs


@pytest.fixture(scope="module")
def three_budget_obs():
    truth = example_params(("en", "de", "fr"), seed=0)
    design = algorithm1_design(truth.languages, [1e9, 3e9, 1e10], seed=0, pool="central")
    frame = simulate_runs(truth, design, seed=0)
    return Observations.from_runs(runs_from_frame(frame))


def test_levels_and_the_one_fold_of_three_budgets(three_budget_obs):
    obs = three_budget_obs
    assert np.allclose(budget_levels(obs), [1e9, 3e9, 1e10])
    # a runs table's budgets give the same levels; near-equal budgets are one level
    budgets = np.array([3e9, 1e9, 1e10, 1e9 * (1 + 1e-9)])
    assert np.allclose(budget_levels(budgets), [1e9, 3e9, 1e10])
    folds = lfo_folds(obs)  # two levels must be fitted: only the cut at 3e9
    assert len(folds) == 1
    fold = folds[0]
    assert fold.cut == pytest.approx(3e9) and fold.n_levels == 2
    budget = obs.run_budget[obs.run]
    assert np.all(budget[fold.fit] <= 3e9) and np.all(budget[fold.test] == 1e10)
    assert not np.any(fold.fit & fold.test) and np.all(fold.fit | fold.test)
    assert np.allclose(fold.ratio(obs), 1e10 / 3e9)
    check_no_leakage(obs, fold)


def test_one_level_folds_and_selection(three_budget_obs):
    folds = lfo_folds(three_budget_obs, min_fit_levels=1)
    assert [f.cut for f in folds] == pytest.approx([1e9, 3e9])
    assert lfo_folds(three_budget_obs, min_fit_levels=3) == []
    assert [f.cut for f in lfo_folds(three_budget_obs, min_fit_levels=1, max_folds=1)] == [1e9]
    latest = lfo_folds(three_budget_obs, min_fit_levels=1, max_folds=1, keep="latest")
    assert [f.cut for f in latest] == [3e9]  # the fold nearest the full fit
    with pytest.raises(ClimbError, match="keep"):
        lfo_folds(three_budget_obs, keep="first")


def test_the_ensemble_learns_from_the_folds_nearest_the_full_fit():
    # five budget levels, two inner folds: the ensemble must use the cuts at 4e9 and 8e9
    # (fitted spans 4x and 8x), not the earliest at 2e9 (a 2x span)
    from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.registry import get_law

    truth = example_params(("en", "de"), seed=0)
    design = algorithm1_design(truth.languages, [1e9, 2e9, 4e9, 8e9, 1.6e10], seed=0)
    obs = Observations.from_runs(runs_from_frame(simulate_runs(truth, design, seed=0)))
    seen = []
    ens = fit_ensemble(
        obs,
        [get_law("isolated")],
        FitOptions(seed=0, samples=200),
        EnsembleOptions(method="laplace", lfo="laplace", lfo_folds=2),
        log=seen.append,
    )
    cuts = [line for line in seen if line.startswith("leave-future-out fold")]
    assert len(cuts) == 2
    assert "<= 4e+09" in cuts[0] and "<= 8e+09" in cuts[1]
    assert ens.fits["isolated"].discrepancy.source == "lfo"


def test_explicit_cuts_choose_the_folds_and_name_the_levels_when_wrong(three_budget_obs):
    obs = three_budget_obs
    (fold,) = lfo_folds(obs, cuts=[3e9 * (1 + 1e-9)])  # a level, within the level tolerance
    (auto,) = lfo_folds(obs)
    assert fold.cut == auto.cut and fold.n_levels == auto.n_levels
    assert np.array_equal(fold.fit, auto.fit) and np.array_equal(fold.test, auto.test)
    check_no_leakage(obs, fold)
    assert [f.cut for f in lfo_folds(obs, min_fit_levels=1, cuts=[3e9, 1e9])] == [1e9, 3e9]
    with pytest.raises(ClimbError, match=r"2e\+09 tokens is not a budget level.*1e\+09, 3e\+09"):
        lfo_folds(obs, cuts=[2e9])
    with pytest.raises(ClimbError, match="not a budget level below the largest"):
        lfo_folds(obs, cuts=[1e10])  # nothing left to score
    with pytest.raises(ClimbError, match="fits 1 budget level.*use a later cut"):
        lfo_folds(obs, cuts=[1e9])  # two levels must be fitted


def test_the_ensemble_takes_explicit_cuts_and_can_leave_out_the_trend():
    from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.registry import get_law

    truth = example_params(("en", "de"), seed=0)
    design = algorithm1_design(truth.languages, [1e9, 2e9, 4e9, 8e9, 1.6e10], seed=0)
    obs = Observations.from_runs(runs_from_frame(simulate_runs(truth, design, seed=0)))
    trends = {}
    for trend in (True, False):
        seen = []
        ens = fit_ensemble(
            obs,
            [get_law("isolated")],
            FitOptions(seed=0, samples=200),
            EnsembleOptions(method="laplace", lfo="laplace", lfo_cuts=(2e9, 4e9), trend=trend),
            log=seen.append,
        )
        cuts = [line for line in seen if line.startswith("leave-future-out fold")]
        assert len(cuts) == 2  # the cuts asked for, not the last two (4e9 and 8e9)
        assert "<= 2e+09" in cuts[0] and "<= 4e+09" in cuts[1]
        trends[trend] = ens.fits["isolated"].discrepancy.trend
    assert np.std(trends[True]) > 0.1  # drawn from the prior's trend and the folds
    assert np.all(trends[False] == 0.0)  # one tau for the folds and the full fit


def test_leakage_guard_fails_on_a_bad_fold(three_budget_obs):
    obs = three_budget_obs
    budget = obs.run_budget[obs.run]
    bad = LfoFold(3e9, 2, np.ones(obs.n, bool), budget > 3e9)
    with pytest.raises(ClimbError, match="leaked"):
        check_no_leakage(obs, bad)


def test_ratio_bins():
    assert ratio_bin(np.array([0.5, 1.2, 1.5, 1.7, 3.0, 5.0, 20.0])).tolist() == [
        -1, 0, 0, 1, 2, 3, 4,
    ]  # fmt: skip
