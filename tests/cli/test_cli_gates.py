"""Issue 15: the convergence gate on every command that reads a fit, batch predict,
``evaluate --exclude``, and tables sized to their content."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from climb_bayes.cli import main
from climb_bayes.cli._decide import render_matrix, render_table, unchecked_extrapolation_warning
from climb_bayes.data.design import algorithm1_design
from climb_bayes.data.observations import Observations
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.decisions.mixtures import read_mixtures_file
from climb_bayes.evaluation.holdout_scores import EvalRow, format_table
from climb_bayes.inference.convergence import fit_gate, law_problems
from climb_bayes.inference.diagnostics import Diagnostics
from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble
from climb_bayes.inference.fitresult import load_fit
from climb_bayes.inference.fitting import fit_runs
from climb_bayes.laws import FitOptions, parse_laws
from climb_bayes.model.simulate import example_params, simulate_runs

BAD = Diagnostics(
    max_rhat=1.53,
    min_ess_bulk=7.0,
    min_ess_tail=9.0,
    divergences=3,
    n_draws=400,
    treedepth_saturated=0,
    max_tree_depth=10,
    min_bfmi=0.8,
    worst_parameters=["logit_f[wikipedia]"],
    problems=["R-hat 1.530 > 1.01 (logit_f[wikipedia])", "bulk ESS 7 < 400 (x)", "3 divergent"],
)


def _with_diagnostics(fit, diag, path):
    """``fit`` saved with other stored sampler diagnostics (the gate reads them from the file)."""
    tree = fit.tree.copy()
    tree.attrs = {**fit.tree.attrs, "diagnostics": diag.to_json()}
    type(fit)(tree).save(path)
    return path


@pytest.fixture(scope="module")
def good_fit_path(nuts_fit3, tmp_path_factory):
    good = Diagnostics(**{**json.loads(BAD.to_json()), "problems": [], "worst_parameters": []})
    return _with_diagnostics(nuts_fit3, good, tmp_path_factory.mktemp("gate") / "good.nc")


@pytest.fixture(scope="module")
def bad_fit_path(nuts_fit3, tmp_path_factory):
    """The same posterior with the diagnostics of a sampler that did not converge."""
    return _with_diagnostics(nuts_fit3, BAD, tmp_path_factory.mktemp("gate") / "bad.nc")


def _run(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "command",
    [
        ["summary", "{fit}"],
        ["predict", "{fit}", "--budget", "1e11"],
        ["optimize", "{fit}", "--budget", "1e11", "--max-draws", "50"],
        ["suggest", "{fit}", "--budget", "1e11", "--n-random", "3", "--outcomes", "8",
         "--max-draws", "50"],
        ["report", "{fit}", "--no-plots", "-o", "{tmp}/r.html"],
        ["plot", "{fit}", "--kind", "transfer", "--format", "png", "-o", "{tmp}/plots"],
    ],
)  # fmt: skip
def test_every_reader_warns_and_strict_refuses(
    command, bad_fit_path, good_fit_path, tmp_path, capsys
):
    def args(fit):
        return [c.format(fit=fit, tmp=tmp_path) for c in command]

    code, _out, err = _run(args(bad_fit_path), capsys)
    assert code == 0, err
    assert sum("did not converge" in ln for ln in err.splitlines()) == 1
    code, _out, err = _run([*args(bad_fit_path), "--strict"], capsys)
    assert code == 2 and "--strict" in err and "Traceback" not in err
    code, _out, err = _run([*args(good_fit_path), "--strict"], capsys)
    assert code == 0, err
    assert "did not converge" not in err


def test_warning_is_one_line_naming_the_problem(bad_fit_path, capsys):
    code, out, err = _run(["predict", bad_fit_path, "--budget", "1e11"], capsys)
    assert code == 0
    lines = [ln for ln in err.splitlines() if "did not converge" in ln]
    assert len(lines) == 1
    assert "R-hat 1.530" in lines[0] and "bulk ESS 7" in lines[0] and "--strict" in lines[0]
    code, _out, err = _run(["predict", bad_fit_path, "--budget", "1e11", "--strict"], capsys)
    assert code == 2 and "Traceback" not in err and "R-hat 1.530" in err


def test_gate_reads_point_fit_starts_and_stacked_laws(map_fit3):
    assert law_problems({"starts": "0/8 converged"}) == ["point fit: 0/8 L-BFGS starts converged"]
    assert law_problems({"starts": "3/8 converged"}) == []
    assert law_problems({"max_rhat": 1.83, "min_ess": 3, "divergences": 0}) == [
        "R-hat 1.830 > 1.01",
        "ESS 3 < 400",
    ]
    assert law_problems({"converged": False}) == ["optimizer did not converge"]
    # an ESS just under the threshold fails and says so ("399 < 400", not "400 < 400")
    assert law_problems({"max_rhat": 1.0, "min_ess": 399.6}) == ["ESS 399 < 400"]
    # the advice goes, the language blocks named inside the parentheses stay
    diag = Diagnostics(1.0, 900.0, 900.0, 55, 4000, 0, 10, 0.6, [], [
        "55 divergent transitions (language blocks: ubuntu_irc 50, hackernews 5): at target "
        "acceptance 0.98 they are the posterior's geometry, not the step size: check",
        "bulk ESS 243 < 400 (log_L0[dm_mathematics]): draw more samples",
    ])  # fmt: skip
    assert law_problems({"diagnostics": diag.to_json()}) == [
        "55 divergent transitions (language blocks: ubuntu_irc 50, hackernews 5)",
        "bulk ESS 243 < 400 (log_L0[dm_mathematics])",
    ]
    tree = map_fit3.tree.copy()
    tree.attrs = {**tree.attrs, "point_starts": "0/4 converged"}
    fit = type(map_fit3)(tree)
    gate = fit_gate(fit)
    assert not gate.ok and "climb: point fit: 0/4" in gate.warning()
    assert "stacking weight" not in gate.warning()
    # CLIMB failed but the stack gives it no weight: still a warning, saying what it concerns
    for climb_weight, says in ((0.0, True), (0.004, True), (0.3, False)):
        weights = {"climb": climb_weight, "isolated": 1.0 - climb_weight}
        tree.attrs = {**tree.attrs, "stacking_weights": json.dumps(weights)}
        gate = fit_gate(type(map_fit3)(tree))
        assert not gate.ok and "climb: point fit: 0/4" in gate.warning()
        assert ("the default predictive does not use it" in gate.warning()) is says


def test_gate_advice_follows_the_kind_of_problem():
    """The warning's fix follows what failed, not how a problem is worded: sampler problems
    get the NUTS advice, a failed point fit or Laplace mode search the NUTS refit (said once)."""
    import copy
    import pickle

    from climb_bayes.inference.convergence import ConvergenceGate

    (sampler,) = law_problems({"max_rhat": 1.83})
    (optimizer,) = law_problems({"converged": False})
    (point,) = law_problems({"starts": "0/8 converged"})
    assert (sampler.kind, optimizer.kind, point.kind) == ("sampler", "optimizer", "point_fit")
    for p in (sampler.for_law("msl"), pickle.loads(pickle.dumps(point)), copy.copy(point)):
        assert p.kind in ("sampler", "point_fit")
    assert sampler.for_law("msl") == "msl: R-hat 1.830 > 1.01"

    def advice(*problems):
        return ConvergenceGate(tuple(p.for_law("dml") for p in problems)).warning()

    assert "--target-accept" in advice(sampler, point) and "--target-accept" in advice(sampler)
    assert "Refit with --method nuts" in advice(optimizer) and "--method nuts" in advice(point)
    assert "--target-accept" not in advice(optimizer) + advice(point)
    far = law_problems({"far_from_prior": "1 of 12 coordinates more than 10 prior sds"})
    assert far[0].kind == "point_fit" and advice(*far).count("--method nuts") == 1
    # a Laplace approximation with a high Pareto k converged: the verdict says what failed
    (approx,) = law_problems({"converged": True, "pareto_k": 2.1, "pareto_k_max": 0.7})
    assert approx.kind == "approximation"
    assert "is a poor approximation of its posterior" in advice(approx)
    assert "did not converge" not in advice(approx) and "--method nuts" in advice(approx)
    assert "did not converge" in advice(approx, optimizer)


def test_evaluate_table_marks_unconverged_laws():
    metrics = {"n": 10, "mre": 0.01, "coverage": {"0.9": 0.9}}
    rows = [
        EvalRow("climb", "nuts", "positive", 100, 60, metrics, {"max_rhat": 1.83, "min_ess": 3}),
        EvalRow("msl", "nuts", "positive", 100, 20, metrics, {"max_rhat": 1.0, "min_ess": 900}),
        EvalRow("dml", "map", "positive", 100, 35, metrics, {"starts": "0/8 converged"}),
    ]
    for text in (format_table(rows, markdown=False), format_table(rows)):
        body = text.splitlines()
        climb = next(ln for ln in body if ln.lstrip("| ").startswith("climb"))
        msl = next(ln for ln in body if ln.lstrip("| ").startswith("msl"))
        assert "NO" in climb and "yes" in msl
        warn = [ln for ln in body if ln.startswith("WARNING")]
        assert len(warn) == 2 and "R-hat 1.830" in warn[0] and "0/8" in warn[1]


# -- batch predict --------------------------------------------------------------------------


def _mixtures_csv(path, n, langs, seed=0):
    x = np.random.default_rng(seed).dirichlet(np.ones(len(langs)), n)
    df = pd.DataFrame(x, columns=list(langs))
    df.insert(0, "name", [f"mix{i}" for i in range(n)])
    df.to_csv(path, index=False, float_format="%.12f")
    return df


def test_predict_many_mixtures_matches_one_at_a_time(good_fit_path, tmp_path, capsys):
    langs = ("en", "de", "zh")
    df = _mixtures_csv(tmp_path / "m.csv", 60, langs)
    out = tmp_path / "many.csv"
    code, text, err = _run(
        [
            "predict", good_fit_path, "--budgets", "1e10,1e11", "--mixtures", tmp_path / "m.csv",
            "-o", out,
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(out)
    assert set(table["mixture"]) == set(df["name"]) and len(table) == 60 * 2 * 3 * 2
    assert "60 mixture(s)" in text and text.count("mix59") == 2 * 3
    one = tmp_path / "one.csv"
    row = df.iloc[17]
    spec = ",".join(f"{lang}={row[lang]:.12f}" for lang in langs)
    code, _t, err = _run(
        ["predict", good_fit_path, "--budget", "1e11", "--mixture", spec, "-o", one], capsys
    )
    assert code == 0, err
    single = pd.read_csv(one)
    a = table[(table["mixture"] == "mix17") & (table["budget"] == 1e11)]
    for lang in langs:
        e1 = single[(single["language"] == lang) & (single["quantity"] == "expected")]
        e2 = a[(a["language"] == lang) & (a["quantity"] == "expected")]
        # the law's expected loss is a deterministic function of the draws
        assert float(e2["median"].iloc[0]) == pytest.approx(float(e1["median"].iloc[0]), 1e-9)


def test_mixtures_file_errors_name_line_and_column(tmp_path):
    langs = ("en", "de", "zh")
    bad = tmp_path / "bad.csv"
    bad.write_text("name,en,de,zh\na,0.5,0.5,0\nb,0.5,x,0.5\n")
    with pytest.raises(Exception, match=r"line 3, column de: 'x'"):
        read_mixtures_file(bad, langs)
    bad.write_text("name,en,de,zh\na,0.5,0.4,0\n")
    with pytest.raises(Exception, match=r"line 2 \(a\): shares sum to 0.9"):
        read_mixtures_file(bad, langs)
    bad.write_text("name,en,de,zh\na,0.5,0.5,0\na,0.2,0.3,0.5\n")
    with pytest.raises(Exception, match="repeat"):
        read_mixtures_file(bad, langs)
    bad.write_text("name,fr,es\na,0.5,0.5\n")
    with pytest.raises(Exception, match="no share column"):
        read_mixtures_file(bad, langs)
    good = tmp_path / "m.json"
    good.write_text(json.dumps({"a": {"en": 0.2, "de": 0.3, "zh": 0.5}}))
    names, shares = read_mixtures_file(good, langs)
    assert names == ["a"] and shares.shape == (1, 3)


def test_predict_mixtures_cli_bad_file_exit_2(good_fit_path, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,en,de,zh\na,0.5,oops,0.5\n")
    code, _out, err = _run(
        ["predict", good_fit_path, "--budget", "1e11", "--mixtures", bad], capsys
    )
    assert code == 2 and "line 2, column de" in err and "Traceback" not in err
    code, _out, err = _run(
        ["predict", good_fit_path, "--budget", "1e11", "--mixtures", bad, "--mixture", "natural"],
        capsys,
    )
    assert code == 2 and "not both" in err


# -- evaluate --exclude ---------------------------------------------------------------------


def test_evaluate_exclude_leaves_runs_out_of_fit_and_score(sim_frame3, tmp_path, capsys):
    path = tmp_path / "runs.csv"
    sim_frame3.to_csv(path, index=False)
    runs = runs_from_frame(sim_frame3)
    budgets = np.asarray(runs.run_budgets)
    n_small = int((budgets < 1e10).sum())
    out = tmp_path / "e.json"
    code, _t, err = _run(
        [
            "evaluate", path, "--laws", "isolated", "--n-starts", "1",
            "--holdout-mixtures", "2", "--exclude", "tokens<1e10", "-o", out,
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    res = json.loads(out.read_text())
    assert len(res["excluded_runs"]) == n_small
    assert res["n_fit_runs"] + res["n_test_runs"] == runs.n_runs - n_small
    assert not set(res["excluded_runs"]) & set(res["held_out_runs"])
    code, _t, err = _run(
        ["evaluate", path, "--holdout-mixtures", "2", "--exclude", "tokens>0"], capsys
    )
    assert code == 2 and "excludes every run" in err


def test_fit_exclude_fits_the_kept_runs_and_records_it(sim_frame3, tmp_path, capsys):
    path = tmp_path / "runs.csv"
    sim_frame3.to_csv(path, index=False)
    runs = runs_from_frame(sim_frame3)
    n_small = int((np.asarray(runs.run_budgets) < 1e10).sum())
    assert 0 < n_small < runs.n_runs
    out = tmp_path / "fit.nc"
    code, text, err = _run(
        ["fit", path, "--method", "map", "--laws", "climb", "--exclude", "tokens<1e10", "-o", out],
        capsys,
    )
    assert code == 0, err
    assert f"excluded (--exclude 'tokens<1e10'): {n_small} runs" in err
    fitted = load_fit(out)
    assert fitted.runs.n_runs == runs.n_runs - n_small
    assert np.asarray(fitted.runs.run_budgets).min() >= 1e10
    assert f"{n_small} runs excluded by --exclude 'tokens<1e10'" in fitted.attrs["data_label"]
    assert f"data: {n_small} runs excluded" in text
    code, _t, err = _run(["fit", path, "--method", "map", "--exclude", "tokens>0"], capsys)
    assert code == 2 and "excludes every run" in err and "Traceback" not in err
    code, _t, err = _run(["fit", path, "--method", "map", "--exclude", "tokens<<3"], capsys)
    assert code == 2 and "tokens<<3" in err and "Traceback" not in err


# -- table widths ---------------------------------------------------------------------------


def test_matrix_with_long_names_fits_100_columns():
    names = ["commoncrawl", "github", "stackexchange", "wikipedia", "arxiv", "books"] * 2
    names = [f"{n}{i}" for i, n in enumerate(names)]
    mat = np.random.default_rng(0).normal(size=(12, 12))
    text = render_matrix(names, mat, corner="source \\ target")
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 100
    assert "githubcommoncrawl" not in text
    for i, n in enumerate(names):  # the row labels are the legend of the numbered columns
        assert any(ln.startswith(f"[{i + 1}] {n}") for ln in lines)
    short = render_matrix(["en", "de"], np.zeros((2, 2)))
    assert short.splitlines()[0].split() == ["en", "de"]


def test_fit_summary_aligns_long_group_names(sim_frame3, capsys):
    rename = {"en": "commoncrawl2.4e+18", "de": "github", "zh": "stackexchange-and-more"}
    frame = sim_frame3.copy()
    frame["language"] = frame["language"].map(rename)
    frame = frame.rename(columns={f"r_{k}": f"r_{v}" for k, v in rename.items()})
    fit = fit_runs(runs_from_frame(frame), method="map", seed=0, n_starts=1)
    from climb_bayes.cli.fit_cmd import _summary_text

    text = _summary_text(fit)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 100
    start = next(i for i, ln in enumerate(lines) if ln.startswith("language"))
    table = lines[start : start + 5]
    # every row of the parameter table ends at the same column (right-aligned cells)
    assert len({len(ln) for ln in table}) == 1
    header = next(ln for ln in lines if ln.startswith("source \\ target"))
    assert "githubcommoncrawl" not in header and re.search(r"\bgithub\b", header)


def test_render_table_sizes_columns_to_content():
    text = render_table([["a-very-long-language-name", "1"], ["x", "22"]], ["language", "v"])
    first, rule, *rows = text.splitlines()
    assert len({len(ln) for ln in [first, rule, *rows]}) == 1


def test_warnings_are_one_plain_line(tmp_path, capsys):
    """A library warning reaches the user as ``warning: <message>``, not as Python's
    ``file:line: UserWarning:`` with a source line of climb-bayes' internals."""
    import warnings

    runs = tmp_path / "few.csv"
    runs.write_text("run_id,tokens,r_en,r_de,loss_en,loss_de\na,1e9,0.5,0.5,3.0,3.1\n")
    before = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # reads the table (2 observations for 12 parameters: a warning), then refuses the cut
        out = tmp_path / "few.nc"
        code, _o, err = _run(["fit", runs, "--lfo-cuts", "5", "--out", out], capsys)
    assert code == 2 and "LFO cut 5 tokens is not a budget level" in err
    assert f"warning: {runs}: only 2 observations for 12 CLIMB parameters" in err
    assert "UserWarning" not in err and ".py:" not in err
    assert warnings.showwarning is before  # restored for the caller


def test_odd_options_found_by_trying_every_command(good_fit_path, tmp_path, capsys):
    """Cases from docs/decisions.md's table that used to pass silently or mislead."""
    code, _o, err = _run(["plot", good_fit_path, "--kind", "fan", "--budget", "-1"], capsys)
    assert code == 2 and "--budget: budgets must be positive numbers of tokens, got -1.0" in err
    code, _o, err = _run(["predict", good_fit_path, "--budget", "2e10, 3e10"], capsys)
    assert code == 2 and "for several budgets use --budgets 2e10,3e10)" in err
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,tokens,r_en,r_de,loss_en,loss_de\na,1e9,0.5,0.5,3.0,3.1\n")
    code, _o, err = _run(["evaluate", runs, "--lfo", "--lfo-folds", "0"], capsys)
    assert code == 2 and "--lfo-folds must be >= 1" in err
    code, _o, err = _run(["evaluate", runs, "--lfo", "--target-accept", "1.5"], capsys)
    assert code == 2 and "--target-accept must lie in (0, 1)" in err
    code, _o, err = _run(["simulate", "-o", tmp_path / "s.csv", "--sigma", "-1"], capsys)
    assert code == 2 and "--sigma" in err and not (tmp_path / "s.csv").exists()
    # report: a bad budget, and a robustness file that is not one, fail before any work
    report = ["report", good_fit_path, "--no-plots", "-o", tmp_path / "r.html"]
    code, _o, err = _run([*report, "--budget", "-5"], capsys)
    assert code == 2 and "--budget: budgets must be positive numbers of tokens, got -5.0" in err
    for text, says in (("{bad", "not JSON (line 1, column 2"), ("[1, 2]", "not a robustness")):
        (tmp_path / "rob.json").write_text(text)
        code, _o, err = _run([*report, "--robustness", tmp_path / "rob.json"], capsys)
        assert code == 2 and says in err and "Fix: pass the JSON file" in err
        assert "Traceback" not in err and not (tmp_path / "r.html").exists()


def test_predict_combine_option_names_the_rule(good_fit_path, capsys):
    from types import SimpleNamespace

    import numpy as np

    from climb_bayes.cli._decide import predictive_line

    fits = {k: SimpleNamespace(discrepancy=None, method="nuts") for k in ("climb", "msl")}
    unmeasured = lambda names: np.ones((len(names), len(names)))  # noqa: E731
    ens = SimpleNamespace(
        weights={"climb": 0.6, "msl": 0.4}, fits=fits, lfo={}, weight_method="x",
        error_correlation=unmeasured,
    )  # fmt: skip
    assert "average the laws' quantiles" in predictive_line(ens, "quantile")
    ens.error_correlation = lambda names: np.array([[1.0, 0.3], [0.3, 1.0]])
    line = predictive_line(ens, "quantile")  # the copula of LawEnsemble._combined
    assert "average" not in line and "correlation of their leave-future-out errors" in line
    assert "(climb~msl 0.30)" in line
    assert "mixture of the laws" in predictive_line(ens, "mixture")
    assert "quantiles" not in predictive_line(ens)  # optimize/suggest: decisions mix the laws
    one = SimpleNamespace(
        weights={"climb": 1.0, "msl": 0.0}, fits=fits, lfo={}, weight_method="x",
        error_correlation=unmeasured,
    )  # fmt: skip
    assert "quantiles" not in predictive_line(one, "quantile")  # one law: nothing to combine
    code, _out, err = _run(
        ["predict", good_fit_path, "--budget", "1e11", "--combine", "mixture"], capsys
    )
    assert code == 0, err
    code, _out, err = _run(
        ["predict", good_fit_path, "--budget", "1e11", "--combine", "average"], capsys
    )
    assert code == 2 and "average" in err


def test_fit_where_fits_one_model_of_a_table_and_records_it(sim_frame3, tmp_path, capsys):
    """A table holding two models is refused (exit 2, the fix names ``--where``); ``--where``
    fits one of them and the fit file records the selection."""
    two = pd.concat(
        [
            sim_frame3.assign(model="70M"),
            sim_frame3.assign(model="160M", run_id=sim_frame3["run_id"].astype(str) + "-big"),
        ]
    )
    path = tmp_path / "two_models.csv"
    two.to_csv(path, index=False)
    code, _t, err = _run(["fit", path, "--method", "map", "--laws", "climb"], capsys)
    assert code == 2 and "mixes 2 models" in err and "--where model=70M" in err
    assert "Traceback" not in err
    out = tmp_path / "fit.nc"
    code, text, err = _run(
        ["fit", path, "--method", "map", "--laws", "climb", "--where", "model=70M", "-o", out],
        capsys,
    )
    assert code == 0, err
    fitted = load_fit(out)
    assert fitted.runs.run_ids == runs_from_frame(sim_frame3).run_ids
    assert fitted.attrs["data_label"] == "rows where model = 70M"
    assert fitted.attrs["data_source"].endswith("[where model=70M]")
    assert "data: rows where model = 70M" in text
    code, _t, err = _run(["fit", path, "--where", "model"], capsys)
    assert code == 2 and "is not COLUMN=VALUE" in err


def test_predicting_beyond_a_fit_without_lfo_folds_warns(runs3):
    # two budget levels (5e9, 2.5e10): no leave-future-out folds, so a budget beyond the
    # largest fitted one is an unchecked extrapolation; a third level gives folds and no warning
    def ensemble(obs):
        opts = FitOptions(n_starts=1, max_iter=300)
        return fit_ensemble(obs, parse_laws("isolated,msl"), opts, EnsembleOptions(method="map"))

    two = Observations.from_runs(runs3)
    top = float(runs3.run_budgets.max())
    ens = ensemble(two)
    assert ens.weight_method == "loo-stacking"
    text = unchecked_extrapolation_warning(ens, [top / 2, 4 * top], top)
    assert text.startswith("WARNING: D up to 4x the largest fitted budget")
    assert "third budget" in text
    assert unchecked_extrapolation_warning(ens, [top], top) == ""  # not beyond the fitted

    world = example_params(runs3.languages, seed=3, sigma=0.01)
    design = algorithm1_design(runs3.languages, [5e9, 1e10, 2.5e10], seed=0, pool="central")
    three = Observations.from_runs(runs_from_frame(simulate_runs(world, design, seed=0)))
    ens3 = ensemble(three)
    assert ens3.weight_method.startswith("lfo")
    assert unchecked_extrapolation_warning(ens3, [4 * top], top) == ""
