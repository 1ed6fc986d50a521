"""Nested leave-future-out evaluation (``climb-bayes evaluate --lfo``) on a world where the law
holds: intervals must cover, and nothing of a scored budget may enter a fit."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.cli import main
from climb_bayes.data.design import algorithm1_design
from climb_bayes.data.observations import Observations
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.evaluation.lfo_evaluate import (
    STACKED,
    STACKED_MIXTURE,
    LfoEvaluation,
    LfoRow,
    calibration_lines,
    evaluate_extrapolation,
    evaluate_lfo,
    fold_warnings,
    format_lfo_table,
)
from climb_bayes.inference.ensemble import EnsembleOptions
from climb_bayes.laws.base import FitOptions
from climb_bayes.laws.registry import get_law
from climb_bayes.model.simulate import simulate_runs

LANGS = ("en", "de", "zh")  # the languages of the world3 fixture
BUDGETS = [1e9, 2e9, 4e9, 8e9]


@pytest.fixture(scope="module")
def frame(world3):
    design = pd.concat(
        [algorithm1_design(LANGS, [b], seed=i, pool="central") for i, b in enumerate(BUDGETS)],
        ignore_index=True,
    )
    design["run_id"] = [f"{r}-{i}" for i, r in enumerate(design["run_id"])]
    return simulate_runs(world3, design, seed=2)


@pytest.fixture
def path(tmp_path, frame):
    """The world's runs table as a CSV file, as a user passes it to ``climb-bayes evaluate``."""
    out = tmp_path / "runs.csv"
    frame.to_csv(out, index=False)
    return out


def test_lfo_evaluation_covers_where_the_law_holds(frame):
    obs = Observations.from_runs(runs_from_frame(frame))
    res = evaluate_lfo(
        obs,
        [get_law("climb")],
        FitOptions(seed=0, samples=300),
        EnsembleOptions(method="laplace", lfo="laplace"),
        max_folds=2,
        n_predictive=800,
    )
    assert [f["cut"] for f in res.folds] == [2e9, 4e9]
    assert all(f["n_fit"] > 0 and f["n_test"] > 0 for f in res.folds)
    overall = {r.law: r for r in res.rows if r.ratio_bin == "all"}
    assert set(overall) == {"climb"}  # one law: no stacked row
    row = overall["climb"]
    assert row.n == sum(f["n_test"] for f in res.folds)
    assert row.metrics["mre"] < 0.02
    cov = row.metrics["coverage"]
    assert 0.75 <= cov["0.9"] <= 1.0
    assert cov["0.5"] <= cov["0.9"]
    bins = [r.ratio_bin for r in res.rows if r.law == "climb" and r.ratio_bin != "all"]
    assert bins == ["(1.5, 2]", "(2, 4]"]
    assert "cov90" in format_lfo_table(res)


def test_extrapolation_split_scores_by_ratio_and_covers(frame):
    """A fixed fit/held-out split (published curves): fit <= 4e9, score 8e9 (ratio 2)."""
    obs = Observations.from_runs(runs_from_frame(frame))
    budget = obs.run_budget[obs.run]
    res = evaluate_extrapolation(
        obs.select(budget <= 4e9),
        obs.select(budget >= 8e9),
        [get_law("climb")],
        FitOptions(seed=0, samples=300),
        EnsembleOptions(method="laplace", lfo="laplace"),
        n_predictive=800,
    )
    assert len(res.folds) == 1 and res.folds[0]["cut"] == pytest.approx(4e9)
    assert res.folds[0]["n_test"] == int((budget >= 8e9).sum())
    rows = {(r.law, r.ratio_bin): r for r in res.rows}
    assert set(rows) == {("climb", "(1.5, 2]"), ("climb", "all")}
    row = rows[("climb", "all")]
    assert row.metrics["mre"] < 0.02 and 0.75 <= row.metrics["coverage"]["0.9"] <= 1.0


def test_evaluate_cli_lfo(path, tmp_path, capsys):
    out = tmp_path / "lfo.json"
    args = [
        "evaluate", str(path), "--lfo", "--lfo-folds", "1", "--method", "laplace",
        "--laws", "climb,isolated", "--samples", "200", "-o", str(out),
    ]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "D/D_fit" in text and STACKED in text
    payload = json.loads(out.read_text())
    assert payload["folds"][0]["cut"] == pytest.approx(2e9)  # one fold: the earliest cut
    assert abs(sum(payload["folds"][0]["weights"].values()) - 1) < 1e-9
    predictives = {r["predictive"] for r in payload["rows"]}
    assert predictives == {"climb", "isolated", STACKED, STACKED_MIXTURE}
    assert np.isfinite([r["crps"] for r in payload["rows"]]).all()


def test_evaluate_cli_lfo_and_holdout_conflict(path):
    assert main(["evaluate", str(path), "--lfo", "--holdout", "tokens>4e9"]) == 2


def test_evaluate_cli_shipped_scores_the_pipeline_on_a_holdout(path, tmp_path, frame, capsys):
    """``--holdout EXPR --shipped``: the `fit` pipeline on the other runs, scored on the held-out
    ones per extrapolation ratio, with the stacked rows and the fit's weights."""
    out = tmp_path / "shipped.json"
    args = [
        "evaluate", str(path), "--holdout", "tokens>=8e9", "--shipped", "--method", "laplace",
        "--laws", "climb,isolated", "--samples", "200", "-o", str(out),
    ]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "D/D_fit" in text and "stacking weights, fit <= 4e+09:" in text
    payload = json.loads(out.read_text())
    assert payload["holdout"] == "--holdout 'tokens>=8e9'"
    held = frame.loc[frame["budget_tokens"] >= 8e9, "run_id"].unique()
    assert sorted(payload["held_out_runs"]) == sorted(held)
    (fold,) = payload["folds"]
    assert fold["cut"] == pytest.approx(4e9) and fold["levels"] == 3
    assert abs(sum(fold["weights"].values()) - 1) < 1e-9
    rows = {(r["predictive"], r["ratio_bin"]): r for r in payload["rows"]}
    assert {p for p, _b in rows} == {"climb", "isolated", STACKED, STACKED_MIXTURE}
    assert {b for _p, b in rows} == {"(1.5, 2]", "all"}
    climb = rows[("climb", "all")]
    assert climb["mre"] < 0.02 and 0.75 <= climb["coverage"]["0.9"] <= 1.0  # the law holds
    assert isinstance(payload["warnings"], list)
    assert payload["calibration"][0].startswith("calibration of stacked:")
    assert payload["calibration"][0] in text


def test_evaluate_cli_shipped_needs_a_holdout(path, capsys):
    assert main(["evaluate", str(path), "--lfo", "--shipped"]) == 2
    assert "--shipped goes with --holdout" in capsys.readouterr().err


def test_lfo_cuts_choose_the_inner_folds_of_fit_and_evaluate_shipped(path, tmp_path, capsys):
    """``--lfo-cuts``: the inner folds end where asked (recorded and printed); a cut that is
    not a usable budget level fails with exit 2 before any fit, naming the usable ones; without
    ``--shipped`` ``evaluate`` refuses it."""
    out = tmp_path / "fit.nc"
    common = ["--method", "laplace", "--laws", "climb", "--samples", "200"]
    fit = ["fit", str(path), "--lfo-cuts", "2e9", "-o", str(out), *common]
    assert main([*fit, "--laws", "climb,isolated"]) == 0  # two laws: the stack's lines print
    captured = capsys.readouterr()
    assert "leave-future-out fold 1/1: fit budgets <= 2e+09" in captured.err
    assert "(1 fold(s) cut at 2e+09 tokens:" in captured.out
    summary = json.loads(climb_bayes.load_fit(out).attrs["lfo_summary"])
    assert summary["climb"]["cuts"] == [2e9] and summary["climb"]["folds"] == 1
    assert main(["fit", str(path), "--lfo-cuts", "3e9", "-o", str(out), *common]) == 2
    err = capsys.readouterr().err
    assert "not a budget level below the largest; use one of 1e+09, 2e+09, 4e+09" in err
    assert "Laplace" not in err  # refused before CLIMB's fit
    assert main(["fit", str(path), "--lfo-cuts", "2e9,x"]) == 2
    assert "comma-separated list of token counts" in capsys.readouterr().err
    args = ["evaluate", str(path), "--holdout", "tokens>=8e9", "--shipped", "--lfo-cuts", "1e9"]
    assert main([*args, *common]) == 2  # the fitted runs have one level up to 1e9
    assert "use a later cut (2e+09)" in capsys.readouterr().err
    assert main([*args, "--inner-lfo", "none", *common]) == 2  # cuts of refits turned off
    assert "evaluate --inner-lfo none" in capsys.readouterr().err
    assert main(["evaluate", str(path), "--holdout", "tokens>=8e9", "--lfo-cuts", "2e9"]) == 2
    assert "add --shipped" in capsys.readouterr().err


def test_fold_warnings_name_the_law_and_whether_the_stack_uses_it():
    folds = [
        {
            "cut": 2e9,
            "weights": {"climb": 0.7, "dml": 0.0},
            "problems": {"climb": ["R-hat 1.03 > 1.01"], "dml": ["Pareto k 1.2 > 0.70"]},
            "approximation_only": ["dml"],
        },
        {"cut": 4e9, "weights": {"climb": 1.0}, "problems": {}},
    ]
    lines = fold_warnings(LfoEvaluation([], folds))
    assert len(lines) == 2
    assert lines[0].startswith("WARNING: outer fold 1 (fit <= 2e+09): climb NOT converged")
    assert "R-hat 1.03" in lines[0] and "stacked rows (weight 0.70)" in lines[0]
    assert "dml is a poor approximation" in lines[1] and "not the stacked ones" in lines[1]
    assert fold_warnings(LfoEvaluation([], folds[1:])) == []


def test_api_evaluate_shipped_returns_the_pipeline_rows(frame):
    """``cb.evaluate(..., shipped=True)``: the same scoring as ``evaluate --shipped``."""
    import climb_bayes as cb

    runs = runs_from_frame(frame)
    scores = cb.evaluate(
        runs, "tokens>=8e9", laws=("climb", "isolated"), method="laplace", shipped=True
    )
    assert set(scores["predictive"]) == {"climb", "isolated", STACKED, STACKED_MIXTURE}
    assert set(scores["ratio_bin"]) == {"(1.5, 2]", "all"}
    assert abs(sum(scores.attrs["weights"].values()) - 1) < 1e-9
    assert isinstance(scores.attrs["warnings"], list)
    assert scores.attrs["calibration"][0].startswith("calibration of stacked:")
    climb = scores[(scores["predictive"] == "climb") & (scores["ratio_bin"] == "all")].iloc[0]
    assert climb["mre"] < 0.02 and 0.75 <= climb["coverage"]["0.9"] <= 1.0


def test_calibration_lines_judge_the_stack_against_the_calibrated_range():
    def row(law, c50, c90, band50=(0.38, 0.61), band90=(0.81, 0.96)):
        metrics = {
            "coverage": {"0.5": c50, "0.9": c90},
            "coverage_if_calibrated": {"0.5": list(band50), "0.9": list(band90)},
        }
        return LfoRow(law, "all", 150, metrics)

    wide = LfoEvaluation([row("climb", 0.5, 0.9), row(STACKED, 0.73, 0.99)], [])
    (line,) = calibration_lines(wide)
    assert line.startswith("calibration of stacked: 50% intervals cover 0.73 (calibrated: 0.38")
    assert "too wide: evidence of miscalibration" in line
    fine = LfoEvaluation([row(STACKED, 0.45, 0.85)], [])
    assert "consistent with calibrated intervals" in calibration_lines(fine)[0]
    narrow = LfoEvaluation([row("climb", 0.2, 0.95)], [])  # one law: no stacked row
    (line,) = calibration_lines(narrow)
    assert line.startswith("calibration of climb:") and "too narrow" in line
    assert calibration_lines(LfoEvaluation([LfoRow(STACKED, "all", 3, {})], [])) == []
