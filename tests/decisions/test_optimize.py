"""Mixture solvers, decisions, baselines, constraints and the ``optimize`` command."""

from __future__ import annotations

import json

import numpy as np
import pytest

from climb_bayes.cli import main
from climb_bayes.decisions.baselines import (
    isolated_optimum,
    natural_mixture,
    temperature_mixture,
    uniform_mixture,
    unimax_mixture,
)
from climb_bayes.decisions.constraints import Availability, Constraints, read_availability
from climb_bayes.decisions.decision import bayes_decision, cvar, cvar_decision, draw_losses
from climb_bayes.decisions.mixtures import parse_weights
from climb_bayes.decisions.optimization import optimize_mixture, thin_draws
from climb_bayes.decisions.solvers import (
    direct_batch,
    direct_trust_constr,
    magnitude_objective,
    project_capped_simplex,
    two_step_batch,
    two_step_trust_constr,
)
from climb_bayes.errors import ClimbError
from climb_bayes.model.law import LawParams, optimal_direction, paper_direction
from climb_bayes.model.simulate import example_draws

M = 3  # the fit fixtures' size: every test reuses the same compiled solvers
N = 6
D = 1e12


def _no_transfer(beta: np.ndarray, n: int = N, seed: int = 0) -> LawParams:
    """``n`` draws of a law without transfer (b = k = 0)."""
    rng = np.random.default_rng(seed)
    beta = np.broadcast_to(beta, (n, M)).copy()
    log_b = np.log(rng.uniform(0.5, 1.0, (n, M))) + beta * np.log(1e10)
    log_e = np.log(rng.uniform(1.6, 2.4, (n, M)))
    zero = np.zeros((n, M, M))
    return LawParams(log_b, beta, log_e, zero, zero, rng.uniform(3, 10, (n, M)))


# -- known optima ------------------------------------------------------------------------------


def test_equal_beta_closed_form_every_solver():
    """No transfer, equal beta: every solver returns the paper's p (Eq. 7) to 1e-6."""
    law = _no_transfer(np.full(M, 0.3))
    w = np.array([0.5, 0.3, 0.2])
    lo, hi = np.zeros(M), np.ones(M)
    p = np.asarray(optimal_direction(D, law.log_B, law.beta, w))
    iso = isolated_optimum(law.log_B, law.beta, D, w)
    direct = direct_batch(law, D, w, lo, hi).x
    two, p2 = two_step_batch(law, D, w, lo, hi, rho=100.0)
    tc, _ = direct_trust_constr(law, D, w, lo, hi)
    tc2, _ = two_step_trust_constr(law, D, w, lo, hi, 100.0)
    for r in (iso, direct, two.x, tc, tc2, p2):
        np.testing.assert_allclose(r, p, atol=1e-6)
    # the vectorised helper evaluates the same magnitude objective the solver minimised
    np.testing.assert_allclose(magnitude_objective(two.x, D, law, p2, 100.0), two.fun, rtol=1e-12)


def test_isolated_unequal_beta_exact_lagrangian():
    """Unequal beta: the closed form p is not optimal; the 1-D root find is (KKT + direct)."""
    law = _no_transfer(np.array([0.25, 0.32, 0.4]))
    w = np.full(M, 1 / M)
    iso = isolated_optimum(law.log_B, law.beta, D, w)
    p = np.asarray(paper_direction(D, law.log_B, law.beta, w))
    assert np.max(np.abs(iso - p)) > 1e-3  # the paper's Eq. 7 is not the optimum
    np.testing.assert_allclose(optimal_direction(D, law.log_B, law.beta, w), iso, atol=1e-9)
    np.testing.assert_allclose(iso.sum(axis=1), 1.0, atol=1e-12)
    # KKT: the marginal loss w_i B_i beta_i D^-beta_i r_i^-(beta_i+1) is equal across languages
    marginal = w * np.exp(law.log_B) * law.beta * D ** (-law.beta) * iso ** (-(law.beta + 1))
    np.testing.assert_allclose(marginal / marginal[:, :1], 1.0, rtol=1e-9)
    direct = direct_batch(law, D, w, np.zeros(M), np.ones(M)).x
    np.testing.assert_allclose(direct, iso, atol=1e-6)
    f_iso = draw_losses(law, D, iso, w)
    f_p = draw_losses(law, D, p, w)
    assert np.all(f_iso < f_p)


def test_isolated_with_bounds_matches_direct():
    law = _no_transfer(np.array([0.25, 0.32, 0.4]))
    w = np.array([0.5, 0.3, 0.2])
    lo = np.array([0.0, 0.3, 0.0])
    hi = np.array([0.3, 1.0, 0.05])
    iso = isolated_optimum(law.log_B, law.beta, D, w, lo, hi)
    direct = direct_batch(law, D, w, lo, hi).x
    np.testing.assert_allclose(direct, iso, atol=1e-6)
    assert np.all(iso >= lo - 1e-12) and np.all(iso <= hi + 1e-12)


# -- constraints and validity ------------------------------------------------------------------


def _valid(r: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
    r = np.atleast_2d(r)
    assert np.all(np.isfinite(r))
    assert np.all(r >= 0.0)
    np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(r >= lo - 1e-12) and np.all(r <= hi + 1e-12)


@pytest.mark.parametrize(
    "lo, hi",
    [
        (np.zeros(M), np.ones(M)),
        (np.array([0.1, 0.0, 0.2]), np.array([1.0, 0.15, 1.0])),
        (np.array([0.25, 0.0, 0.0]), np.array([0.25, 1.0, 0.5])),  # a fixed share
        (np.zeros(M), np.array([0.5, 0.3, 0.2])),  # caps summing to 1: a single feasible point
    ],
)
def test_constraints_respected_by_every_solution(lo, hi):
    law = example_draws(M, N, seed=1)
    w = np.array([0.4, 0.0, 0.6])  # a zero weight: that language may go to its bound
    for r in (
        direct_batch(law, D, w, lo, hi).x,
        two_step_batch(law, D, w, lo, hi, 100.0)[0].x,
        bayes_decision(law, D, w, lo, hi)[0],
        cvar_decision(law, D, w, lo, hi, 0.8)[0],
    ):
        _valid(r, lo, hi)


def test_fast_path_matches_trust_constr_on_a_real_fit(nuts_fit3):
    """Batched solver vs trust-constr per draw on NUTS draws: objectives agree to 1e-5."""
    law = thin_draws(nuts_fit3.law_draws(), N)
    m = len(nuts_fit3.languages)
    w = np.full(m, 1.0 / m)
    sub = np.arange(N)
    for lo, hi in ((np.zeros(m), np.ones(m)), (np.array([0.0, 0.1, 0.0]), np.full(m, 0.45))):
        fast = direct_batch(law, D, w, lo, hi)
        _, f_ref = direct_trust_constr(law, D, w, lo, hi, draws=sub)
        assert np.all(fast.fun[sub] <= f_ref + 1e-5)
        assert np.max(np.abs(fast.fun[sub] - f_ref)) < 1e-5
        fast2, _ = two_step_batch(law, D, w, lo, hi, 100.0)
        _, g_ref = two_step_trust_constr(law, D, w, lo, hi, 100.0, draws=sub)
        assert np.max(np.abs(fast2.fun[sub] - g_ref)) < 1e-5
        _valid(fast.x, lo, hi)


def test_optimize_result_on_nuts_fit(nuts_fit3):
    law = thin_draws(nuts_fit3.law_draws(), 100)
    langs = nuts_fit3.languages
    res = optimize_mixture(law, langs, D, risk=0.9)
    for r in (res.direct, res.two_step, res.bayes, res.risk_averse, res.direction):
        _valid(r, res.lo, res.hi)
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
    _valid(draws, np.zeros(3), np.ones(3))
    assert {"uniform", "isolated"} <= set(baseline_mixtures(nuts_fit3, D))


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


def test_projection_onto_capped_simplex():
    rng = np.random.default_rng(0)
    lo = np.array([0.0, 0.1, 0.2])
    hi = np.array([0.5, 1.0, 0.3])
    r = project_capped_simplex(rng.normal(size=(50, M)), lo, hi)
    _valid(r, lo, hi)


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
