"""Robustness studies on small simulated fits: verdicts change when they should."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from climb_bayes.cli.robustness_cmd import robustness
from climb_bayes.fitresult import Fit
from climb_bayes.priors import Priors, priors_to_toml
from climb_bayes.robustness import (
    PARETO_K_MAX,
    log_prior_tree,
    prior_sensitivity,
    run_loglik,
    run_pareto_k,
    run_robustness,
)
from climb_bayes.runs import RunsData


def _with_priors(fit: Fit, priors: Priors) -> Fit:
    tree = fit.tree.copy()
    tree.attrs = dict(fit.tree.attrs) | {"priors_toml": priors_to_toml(priors, comments=False)}
    return Fit(tree)


def test_conflicting_prior_is_flagged(map_fit3):
    # beta ~ LogNormal(log 3, 0.02): exponents near 3 conflict with the data (true ~0.3).
    conflicting = Priors(beta_median=3.0, beta_log_sd=0.02)
    res = run_robustness(
        _with_priors(map_fit3, conflicting),
        ["prior"],
        prior_sets={"defaults": lambda _p: Priors()},
    )
    study = res["studies"]["prior"]
    assert study["flagged"], study["verdict"]
    assert study["verdict"].startswith("SENSITIVE")
    assert not res["verdict"]["robust"]
    assert "NOT ROBUST" in res["verdict"]["text"]


def test_planted_outlier_run_gets_high_pareto_k(nuts_fit3):
    runs = nuts_fit3.runs
    k_clean, _ = run_pareto_k(nuts_fit3)
    target = int(np.argmin(k_clean))
    point_loss = np.array(runs.point_loss)
    point_loss[np.asarray(runs.point_run) == target] *= 1.15  # 15% off: an outlier run
    planted = RunsData.from_arrays(
        runs.languages,
        list(runs.run_ids),
        np.asarray(runs.run_proportions),
        np.asarray(runs.run_budgets),
        np.asarray(runs.point_run),
        np.asarray(runs.point_tokens),
        point_loss,
        tail_start=runs.tail_start,
    )
    k, _ = run_pareto_k(nuts_fit3, run_loglik(nuts_fit3, planted))
    assert k[target] > PARETO_K_MAX
    assert k[target] == k.max()
    assert k_clean[target] < PARETO_K_MAX


def test_log_prior_group_and_psense(nuts_fit3):
    tree = log_prior_tree(nuts_fit3)
    lp = tree["log_prior"]
    assert {"beta", "eta", "sigma", "b_offdiag", "kappa_offdiag", "log_A_log_E"} <= set(
        lp.data_vars
    )
    assert lp["beta"].dims == ("chain", "draw")
    assert np.isfinite(lp["beta"].values).all()
    res = prior_sensitivity(nuts_fit3)
    assert res["available"]
    assert {r["variable"].split("[")[0] for r in res["table"]} >= {"beta", "log_B"}


def test_robustness_cli_writes_results(map_fit3, tmp_path):
    fit_path = tmp_path / "fit.nc"
    map_fit3.save(fit_path)
    out = tmp_path / "rob.json"
    result = CliRunner().invoke(
        robustness,
        [str(fit_path), "--studies", "budget,bootstrap", "--n-boot", "1", "-o", str(out)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data["studies"]) == {"budget", "bootstrap"}
    assert "VERDICT:" in data["verdict"]["text"]
    assert "VERDICT:" in result.output
    assert len(data["studies"]["bootstrap"]["variants"]) == 1
    for study in data["studies"].values():
        assert isinstance(study["flagged"], bool)


def test_unknown_study_rejected(tmp_path):
    result = CliRunner().invoke(robustness, [str(tmp_path / "x.nc"), "--studies", "nope"])
    assert result.exit_code != 0
    assert "unknown study" in result.output
