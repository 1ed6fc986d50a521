"""Holdout expressions, the evaluation loop and ``climb-bayes evaluate`` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from climb_bayes.cli import main
from climb_bayes.data.holdout import (
    holdout_mask,
    parse_holdout,
    random_mixtures_mask,
    runs_file_mask,
    split_runs,
)
from climb_bayes.errors import ClimbError
from climb_bayes.evaluation.holdout_scores import evaluate_laws, format_table, rows_to_json
from climb_bayes.laws import FitOptions, Observations, parse_laws


def test_holdout_expressions(runs3):
    big = runs3.run_budgets >= 2e10
    assert np.array_equal(parse_holdout("tokens>=2e10")(runs3), big)
    assert np.array_equal(parse_holdout("budget >= 25B")(runs3), big)
    assert np.array_equal(parse_holdout("tokens>1e10")(runs3), big)
    assert np.array_equal(parse_holdout("not tokens<2e10")(runs3), big)
    mono = np.array(["mono" in r for r in runs3.run_ids])
    assert np.array_equal(parse_holdout("run_id~mono")(runs3), mono)
    assert np.array_equal(parse_holdout("run_id !~ mono")(runs3), ~mono)
    both = parse_holdout("tokens>=2e10 and (run_id~mono or r_en>=0.5)")(runs3)
    en = runs3.run_proportions[:, 0] >= 0.5
    assert np.array_equal(both, big & (mono | en))
    rid = runs3.run_ids[0]
    assert parse_holdout(f"run_id=='{rid}'")(runs3).sum() == 1
    fit, test = split_runs(runs3, big)
    assert fit.n_runs + test.n_runs == runs3.n_runs
    assert np.all(test.run_budgets >= 2e10)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty"),
        ("tokens>>5", "expected a value"),
        ("foo>1", "unknown field 'foo'"),
        ("tokens>=abc", "'abc' is not a number"),
        ("tokens>=5e10 and", "ends too early"),
        ("(tokens>=5e10", "missing '\\)'"),
        ("run_id>3", "run_id takes"),
        ("tokens~5", "applies to run_id only"),
        ("tokens>=5e10 tokens<1", "expected 'and', 'or'"),
        ("run_id~'('", "bad regular expression"),
    ],
)
def test_bad_holdout_expressions(runs3, expr, message):
    with pytest.raises(ClimbError, match=message):
        holdout_mask(runs3, expr)


def test_holdout_split_errors_and_other_selectors(runs3, tmp_path):
    with pytest.raises(ClimbError, match="no group 'xx'"):
        holdout_mask(runs3, "r_xx>0.1")
    with pytest.raises(ClimbError, match="holds out no runs"):
        holdout_mask(runs3, "tokens>1e15")
    with pytest.raises(ClimbError, match="holds out every run"):
        holdout_mask(runs3, "tokens>0")
    ids = tmp_path / "ids.txt"
    ids.write_text(f"# held out\n{runs3.run_ids[0]}\n{runs3.run_ids[1]}\n")
    assert runs_file_mask(runs3, ids).sum() == 2
    ids.write_text("nope\n")
    with pytest.raises(ClimbError, match="not in the runs table: nope"):
        runs_file_mask(runs3, ids)
    mask = random_mixtures_mask(runs3, 2, seed=1)
    held = np.unique(np.round(runs3.run_proportions[mask], 9), axis=0)
    assert held.shape[0] == 2 and mask.sum() == 4  # each mixture at both budgets
    assert np.array_equal(mask, random_mixtures_mask(runs3, 2, seed=1))
    with pytest.raises(ClimbError, match="distinct mixtures"):
        random_mixtures_mask(runs3, 100)


def test_evaluate_laws_counts_zero_share_rows(runs3):
    obs = Observations.from_runs(runs3)
    mask = runs3.run_budgets >= 2e10
    rows, fits = evaluate_laws(
        obs.select_runs(~mask),
        obs.select_runs(mask),
        parse_laws("isolated,dml"),
        options=FitOptions(n_starts=1),
        n_predictive=200,
    )
    assert [(r.law, r.subset) for r in rows] == [("isolated", "positive"), ("dml", "positive")]
    for r in rows:
        m = r.flat()
        assert m["n"] == obs.select_runs(mask).n
        assert m["r2_group_mean"] <= m["r2_pooled"] + 1e-9 or np.isnan(m["r2_group_mean"])
        assert 0 <= m["cov95"] <= 1
    assert "| isolated | map | r>0 |" in format_table(rows)
    json.dumps(rows_to_json(rows))
    assert fits["dml"].law.budget_term is True  # curve points: several budgets


def test_evaluate_cli_end_to_end(tmp_path, runs3, capsys):
    path = tmp_path / "runs.csv"
    runs3.to_frame("long").to_csv(path, index=False)
    out = tmp_path / "eval.json"
    rc = main(
        [
            "evaluate",
            str(path),
            "--holdout-mixtures",
            "2",
            "--seed",
            "0",
            "--laws",
            "climb,isolated,msl,dml",
            "--n-starts",
            "1",
            "--json",
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    result = json.loads(captured.out)
    assert result == json.loads(out.read_text())
    assert result["n_test_runs"] == 4, captured.err  # 2 mixtures x 2 budgets
    laws = [r["law"] for r in result["rows"]]
    assert laws == ["climb", "isolated", "msl", "dml"]
    for row in result["rows"]:
        metrics = row["metrics"]
        assert metrics["n"] > 0
        for key in (
            "r2_pooled",
            "r2_group_mean",
            "huber_log",
            "huber_loss",
            "mre",
            "rmsle",
            "cal_error",
            "crps",
            "lpd",
        ):
            assert isinstance(metrics[key], float)
    climb = result["rows"][0]["metrics"]
    assert climb["mre"] < 0.05  # CLIMB is the true law here (new mixtures, fitted budgets)


def test_evaluate_cli_errors(tmp_path, runs3, capsys):
    path = tmp_path / "runs.csv"
    runs3.to_frame("long").to_csv(path, index=False)
    assert main(["evaluate", str(path)]) == 2
    assert "exactly one of --holdout" in capsys.readouterr().err
    assert (
        main(["evaluate", str(path), "--holdout", "tokens>=2e10", "--holdout-mixtures", "2"]) == 2
    )
    assert "exactly one" in capsys.readouterr().err
    assert main(["evaluate", str(path), "--holdout", "tokens>=", "--laws", "dml"]) == 2
    assert "--holdout 'tokens>='" in capsys.readouterr().err
    assert main(["evaluate", str(path), "--holdout", "tokens>=2e10", "--laws", "chinchilla"]) == 2
    assert "unknown law 'chinchilla'" in capsys.readouterr().err


def test_evaluate_cli_table_extrapolating_in_budget(tmp_path, runs3, capsys):
    path = tmp_path / "runs.csv"
    runs3.to_frame("long").to_csv(path, index=False)
    families = tmp_path / "families.json"
    families.write_text('{"en": "latin", "de": "latin"}')
    rc = main(
        [
            "evaluate",
            str(path),
            "--holdout",
            "tokens>=2e10",
            "--laws",
            "msl",
            "--families",
            str(families),
            "--n-starts",
            "1",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "R² pooled" in captured.out and "msl" in captured.out
    assert "plug-in" in captured.out
    assert "MSL families (families.json): latin (en, de)" in captured.err


def test_separately_read_test_table_is_not_conditioned_on_fitted_runs(sim_frame3, holdout_frame3):
    """A held-out table read on its own (a published train/test pair) reuses the run indices of
    the fit table; its runs are new runs, never continuations of unrelated fitted ones (the
    bug that collapsed RegMix's coverage to 0.3: a fitted run's residual shifted the held-out
    prediction and the scale shrank to the within-run noise)."""
    from climb_bayes.data.runs import runs_from_frame
    from climb_bayes.inference.predictive import predictive_parts

    fit_obs = Observations.from_runs(runs_from_frame(sim_frame3))
    test_obs = Observations.from_runs(runs_from_frame(holdout_frame3))
    assert set(test_obs.run_ids).isdisjoint(fit_obs.run_ids)
    law = parse_laws("isolated")[0].prepare(fit_obs)
    fit = law.fit(fit_obs, "map", FitOptions(n_starts=1, seed=0))
    assert fit.sigma_run is not None
    known = predictive_parts(fit, test_obs, known_runs=True)
    new = predictive_parts(fit, test_obs, known_runs=False)
    np.testing.assert_array_equal(known.shift, 0.0)
    np.testing.assert_allclose(known.scale, new.scale)
    # a run of the fit table itself is still recognised (the conditional is narrower)
    same = predictive_parts(fit, fit_obs, known_runs=True)
    assert np.any(same.shift != 0.0) and np.all(same.scale <= new.scale.max() + 1e-12)


def test_table_says_which_check_a_law_failed():
    """A Laplace approximation far from its posterior converged: the table calls it a poor
    approximation, as the fit gate does; a failed search is "NOT converged"."""
    from climb_bayes.evaluation.holdout_scores import EvalRow

    metrics = {"n": 10, "mre": 0.01}
    rows = [
        EvalRow(
            "climb", "laplace", "positive", 20, 5, metrics, {"pareto_k": 2.0, "pareto_k_max": 0.7}
        ),
        EvalRow("msl", "laplace", "positive", 20, 5, metrics, {"converged": False}),
        EvalRow(
            "dml", "laplace", "positive", 20, 5, metrics, {"pareto_k": 0.3, "pareto_k_max": 0.7}
        ),
    ]
    text = format_table(rows)
    assert "| poor approx. (see below) |" in text and "| NO (see below) |" in text
    assert "climb (laplace) is a poor approximation of its posterior: Laplace" in text
    assert "msl (laplace) NOT converged: optimizer did not converge" in text
    assert "dml (laplace)" not in text and text.count("| yes |") == 1
