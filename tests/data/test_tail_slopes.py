"""Within-run against across-budget slopes (climb_bayes.data.tail_slopes) on the shipped tables."""

from pathlib import Path

import numpy as np
import pytest

import climb_bayes
from climb_bayes.data.runs import read_runs
from climb_bayes.data.tail_slopes import (
    FINAL_POINT_TAIL,
    TAIL_SLOPE_TOLERANCE,
    misleading_tails,
    tail_slopes,
)

DATA = Path(climb_bayes.__file__).parent / "data"


def _fitted(name: str, tail: float = 0.85):
    runs = read_runs(DATA / name, tail_start=tail)
    return runs.subset_runs(np.array(["holdout" not in r for r in runs.run_ids]))


def _levels(runs) -> int:
    return np.unique(runs.run_budgets).size


def test_cosine_schedule_tails_fall_at_half_the_slope_across_budgets():
    # our own runs (cosine to 10%): the tails fall at 0.38-0.54 of the slope across budgets
    slopes = tail_slopes(_fitted("tiny2024_runs.csv"))
    assert slopes.languages == ("en", "de", "ru", "zh", "ja")
    assert np.all(slopes.within < 0) and np.all(slopes.across < 0)
    assert np.all(slopes.ratio < 0.6) and np.all(slopes.ratio > 0.3)
    assert not slopes.agree()


def test_tails_simulated_from_the_law_agree():
    # the synthetic table's tails are the law at tokens_seen: within = across up to the noise
    slopes = tail_slopes(read_runs(DATA / "synthetic_runs.csv"))
    assert np.all(np.abs(np.log(slopes.ratio)) < np.log(TAIL_SLOPE_TOLERANCE))
    assert slopes.agree()
    assert misleading_tails(read_runs(DATA / "synthetic_runs.csv")) is None


def test_misleading_tails_only_with_several_tail_points():
    fitted = _fitted("tiny2024_runs.csv")
    assert _levels(fitted) == 2
    found = misleading_tails(fitted)
    assert found is not None and found.median_ratio == pytest.approx(0.39, abs=0.02)
    assert misleading_tails(fitted.average_tail(3)) is None  # one point per run
    assert misleading_tails(_fitted("tiny2024_runs.csv", FINAL_POINT_TAIL)) is None
    # three levels: the tails fall unlike the runs across budgets here too; that the LFO folds
    # check such a fit instead is the hint's call (tests/viz/test_fit_text.py)
    default = _fitted("default_runs.csv")
    assert _levels(default) == 3
    assert misleading_tails(default).median_ratio == pytest.approx(0.58, abs=0.02)


def test_no_across_slope_from_one_budget():
    runs = _fitted("tiny2024_runs.csv")
    one = runs.subset_runs(runs.run_budgets == runs.run_budgets.min())
    slopes = tail_slopes(one)
    assert np.all(np.isnan(slopes.across)) and np.all(np.isfinite(slopes.within))
    assert np.isnan(slopes.median_ratio) and slopes.agree()  # unknown: keep the tails
