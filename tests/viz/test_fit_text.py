"""The fit summary's text pieces (climb_bayes.viz.fit_text) on the shipped runs tables."""

from pathlib import Path

import numpy as np

import climb_bayes
from climb_bayes.data.runs import read_runs
from climb_bayes.data.tail_slopes import FINAL_POINT_TAIL
from climb_bayes.viz.fit_text import tail_slope_hint

DATA = Path(climb_bayes.__file__).parent / "data"


def _levels(runs) -> int:
    return np.unique(runs.run_budgets).size


def test_tail_slope_hint_only_where_the_tails_mislead():
    # tiny-2024 without its holdouts: the Algorithm-1 runs at two budgets, 3 tail points each
    runs = read_runs(DATA / "tiny2024_runs.csv")
    fitted = runs.subset_runs(np.array(["holdout" not in r for r in runs.run_ids]))
    assert _levels(fitted) == 2 and fitted.point_run.size == 3 * len(fitted.run_ids)
    hint = tail_slope_hint(fitted, _levels(fitted))
    assert f"--tail-start {FINAL_POINT_TAIL}" in hint and "learning-rate schedule" in hint
    assert "0.39x the slope across budgets" in hint
    # one point per run: nothing within a run to mistake for the slope in D
    assert tail_slope_hint(fitted.average_tail(3), 2) == ""
    # the user already fits final points
    final = read_runs(DATA / "tiny2024_runs.csv", tail_start=FINAL_POINT_TAIL)
    assert final.point_run.size == len(final.run_ids)
    assert tail_slope_hint(final, 2) == ""
    # three budget levels: the leave-future-out folds check the extrapolation instead
    default = read_runs(DATA / "default_runs.csv")
    assert _levels(default) >= 3 and tail_slope_hint(default, _levels(default)) == ""
    # two levels whose tails fall like the runs across budgets (simulated from the law)
    synthetic = read_runs(DATA / "synthetic_runs.csv")
    assert _levels(synthetic) == 2 and tail_slope_hint(synthetic, 2) == ""
