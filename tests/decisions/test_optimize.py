"""Decisions under the posterior (:mod:`climb_bayes.decisions.optimization`), weights and the
``optimize`` command; the solvers, baselines and constraints have their own test modules."""

from __future__ import annotations

import json

import numpy as np
import pytest

from climb_bayes.cli import main
from climb_bayes.decisions.decision import cvar
from climb_bayes.decisions.mixtures import parse_weights
from climb_bayes.decisions.optimization import optimize_mixture, thin_draws
from climb_bayes.errors import ClimbError

N = 6  # posterior draws the r* check solves for
D = 1e12


def test_optimize_result_on_nuts_fit(nuts_fit3, assert_valid_mixtures):
    law = thin_draws(nuts_fit3.law_draws(), 100)
    langs = nuts_fit3.languages
    res = optimize_mixture(law, langs, D, risk=0.9)
    for r in (res.direct, res.two_step, res.bayes, res.risk_averse, res.direction):
        assert_valid_mixtures(r, res.lo, res.hi)
    # the Bayes decision minimises the posterior expected loss among everything compared ...
    for c in res.comparisons:
        assert np.mean(res.bayes_losses) <= c.mean + 1e-9, c.name
    # ... and the CVaR decision the CVaR
    assert cvar(res.risk_losses, 0.9) <= cvar(res.bayes_losses, 0.9) + 1e-7
    # per draw, the direct optimum is at least as good as the two-step solution
    assert np.all(res.direct_loss <= res.two_step_loss + 1e-9)
    names = [c.name for c in res.comparisons]
    assert names[0].startswith("recommended") and "uniform" in names
    assert any(n.startswith("isolated") for n in names)
    assert set(res.skipped) >= {"natural", "unimax"}
    for c in res.comparisons:
        assert 0.0 <= c.p_beaten <= 1.0
    tab = res.mixture_table()
    assert list(tab["language"]) == list(langs)
    json.dumps(res.to_dict())  # JSON-able
    # hooks used by plots/report
    from climb_bayes.decisions.baselines import baseline_mixtures
    from climb_bayes.decisions.rstar import rstar_draws

    draws = rstar_draws(nuts_fit3, D, max_draws=N)
    assert_valid_mixtures(draws, np.zeros(3), np.ones(3))
    assert {"uniform", "isolated"} <= set(baseline_mixtures(nuts_fit3, D))


# -- bad input ---------------------------------------------------------------------------------


def test_weights_validation():
    langs = ("en", "de", "zh")
    np.testing.assert_allclose(parse_weights("en=2", langs), [0.5, 0.25, 0.25])
    np.testing.assert_allclose(parse_weights("1,1,2", langs), [0.25, 0.25, 0.5])
    with pytest.raises(ClimbError, match="3 languages"):
        parse_weights("1,2", langs)
    with pytest.raises(ClimbError, match=">= 0"):
        parse_weights("en=-1", langs)
    with pytest.raises(ClimbError, match="not in the fit"):
        parse_weights("fr=1", langs)
    with pytest.raises(ClimbError, match="positive"):
        parse_weights("0,0,0", langs)


# -- command line ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nuts_file(nuts_fit3, tmp_path_factory):
    path = tmp_path_factory.mktemp("opt") / "fit.nc"
    nuts_fit3.save(path)
    return path


def test_optimize_cli(nuts_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CLIMB_BAYES_COMPILE_CACHE", "0")
    avail = tmp_path / "avail.csv"
    avail.write_text("language,tokens\nen,2e12\nde,1e12\nzh,3e11\n")
    out = tmp_path / "opt.json"
    draws = tmp_path / "draws.csv"
    rc = main(
        [
            "optimize",
            str(nuts_file),
            "--budgets",
            "1e11,1e12",
            "--max-draws",
            "100",
            "--available",
            str(avail),
            "--max-epochs",
            "2",
            "--weights",
            "en=2",
            "--min",
            "de=0.1",
            "-o",
            str(out),
            "--draws-out",
            str(draws),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "recommended mixture" in text and "r* against the budget" in text
    for name in ("uniform", "natural", "temperature", "unimax", "isolated"):
        assert name in text
    doc = json.loads(out.read_text())
    assert len(doc["results"]) == 2
    for res in doc["results"]:
        shares = np.array(list(res["recommended"]["shares"].values()))
        assert abs(shares.sum() - 1) < 1e-9 and shares[1] >= 0.1 - 1e-9
        assert np.array(res["draws"]["direct"]).shape == (100, 3)
    import pandas as pd

    df = pd.read_csv(draws)
    assert set(df["solution"]) == {"direct", "two_step", "direction"} and len(df) == 600
    out_csv = tmp_path / "opt.csv"
    rc = main(
        [
            "optimize",
            str(nuts_file),
            "--budget",
            "1T",
            "--max-draws",
            "100",
            "--no-baselines",
            "-o",
            str(out_csv),
        ]
    )
    assert rc == 0
    assert (tmp_path / "opt_comparisons.csv").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget", "0"], "positive"),
        (["--budget", "-5e9"], "positive"),
        (["--budget", "1e12", "--weights", "1,2"], "3 languages"),
        (["--budget", "1e12", "--weights", "en=-1"], ">= 0"),
        (["--budget", "1e12", "--weights", "fr=1"], "not in the fit"),
        (["--budget", "1e12", "--max", "en=0.2,de=0.2,zh=0.2"], "infeasible"),
        (["--budget", "1e12", "--min", "xx=0.2"], "not in the fit"),
        (["--budget", "1e12", "--risk", "1.5"], "--risk"),
        (["--budget", "1e12", "--budgets", "1e11"], "exactly one"),
    ],
)
def test_optimize_cli_errors(nuts_file, capsys, args, message):
    rc = main(["optimize", str(nuts_file), "--max-draws", "20", "--no-baselines", *args])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_optimize_cli_infeasible_caps(nuts_file, tmp_path, capsys):
    avail = tmp_path / "avail.csv"
    avail.write_text("language,tokens\nen,1e10\nde,1e10\nzh,1e10\n")
    rc = main(["optimize", str(nuts_file), "--budget", "1e12", "--available", str(avail)])
    assert rc == 2
    assert "cannot fill the budget" in capsys.readouterr().err
