"""``--tail-start`` left to the data: a two-budget fit whose tails fall unlike the runs across
budgets reads final points only (climb_bayes.cli._runs_table.read_fit_runs)."""

from __future__ import annotations

import re
from pathlib import Path

import climb_bayes
from climb_bayes.cli import main
from climb_bayes.cli._runs_table import exclude_runs, read_fit_runs

DATA = Path(climb_bayes.__file__).parent / "data"
TINY = DATA / "tiny2024_runs.csv"


def _read(path, exclude=None, **kw):
    said = []
    options = {"tail_start": None, "tail_average": None} | kw
    runs = read_fit_runs(
        path,
        renormalize=False,
        languages=None,
        where=None,
        fitted=lambda table: exclude_runs(table, exclude, lambda _msg: None)[0],
        echo=said.append,
        **options,
    )
    return runs, said


def test_two_levels_with_misleading_tails_read_final_points():
    runs, said = _read(TINY, "run_id~holdout")
    assert runs.tail_start == 0.99 and runs.point_run.size == runs.n_runs
    assert len(said) == 1 and "0.39x the slope across budgets" in said[0]
    assert "--tail-start 0.85 keeps the tails" in said[0]


def test_the_tails_stay_where_they_check_out_or_are_asked_for():
    runs, said = _read(TINY)  # with the 1M holdouts: three levels, the LFO folds check it
    assert runs.tail_start == 0.85 and not said
    runs, said = _read(DATA / "synthetic_runs.csv")  # two levels, tails that follow the law
    assert runs.tail_start == 0.85 and not said
    runs, said = _read(TINY, "run_id~holdout", tail_start=0.85)  # asked for
    assert runs.tail_start == 0.85 and not said
    runs, said = _read(TINY, "run_id~holdout", tail_average=3)  # one averaged point per run
    assert runs.point_run.size == runs.n_runs and not said


def test_evaluate_decides_on_the_runs_it_fits(capsys):
    # the held-out 1M runs are not fitted: the fitted runs span two levels
    args = [TINY, "--holdout", "run_id~holdout", "--method", "map", "--laws", "isolated"]
    assert main(["evaluate", *map(str, args)]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "fitting each run's final point only" in text
    assert re.search(r"fit on 30 runs, 110 observations", text)
    assert main(["evaluate", *map(str, args), "--tail-start", "0.85"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "final point only" not in text
    assert re.search(r"fit on 30 runs, 330 observations", text)
