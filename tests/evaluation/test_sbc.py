"""Simulation-based calibration: rank statistics, the uniformity verdict and ``--sbc``.

The verdict is checked on synthetic SBC studies of a conjugate Normal model, where the exact
posterior is known: exact posterior draws must pass, a shifted or a too-narrow posterior must
fail. The CLI test runs a real (short) SBC of the reduced CLIMB model end to end.
"""

from __future__ import annotations

import functools
import json

import jax
import numpy as np
import pytest
from click.testing import CliRunner

from climb_bayes.cli import main
from climb_bayes.cli.robustness_cmd import robustness
from climb_bayes.evaluation.robustness import attach_sbc
from climb_bayes.evaluation.sbc import (
    SbcConfig,
    ecdf_difference,
    ecdf_difference_bands,
    ecdf_uniformity_test,
    prior_draw,
    rank_statistic,
    sbc_problem,
    uniformity_test,
)
from climb_bayes.model.priors import Priors

L = 99  # posterior draws per replication: ranks in 0..99


def _conjugate_ranks(n: int, shift: float = 0.0, scale: float = 1.0, seed: int = 0) -> np.ndarray:
    """Ranks of an SBC study of theta ~ N(0, 1), y ~ N(theta, 1) (posterior N(y/2, 1/2)),
    with the posterior draws shifted by ``shift`` and their spread scaled by ``scale``."""
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    ranks = []
    for i in range(n):
        theta = rng.normal(size=2)  # two independent parameters
        y = theta + rng.normal(size=2)
        draws = y / 2 + shift + scale * np.sqrt(0.5) * rng.normal(size=(L, 2))
        ranks.append(rank_statistic(jax.random.fold_in(key, i), draws, theta))
    return np.array(ranks)


def test_ranks_in_range_and_ties():
    key = jax.random.PRNGKey(0)
    draws = np.arange(10.0)[:, None] * np.ones((1, 4))
    truth = np.array([-1.0, 100.0, 4.5, 3.0])
    r = rank_statistic(key, draws, truth)
    assert r.tolist()[:3] == [0, 10, 5]
    assert r[3] in (3, 4)  # one tie: split at random
    stuck = np.zeros((10, 500))  # a stuck chain: every draw equals the truth
    r = rank_statistic(key, stuck, np.zeros(500))
    assert r.min() >= 0 and r.max() <= 10
    assert 0 < r.mean() < 10 and len(np.unique(r)) == 11
    ranks = _conjugate_ranks(50)
    assert ranks.dtype.kind == "i" and ranks.min() >= 0 and ranks.max() <= L


def test_exact_posterior_passes_uniformity():
    ranks = _conjugate_ranks(400)
    chi2, p, bins = uniformity_test(ranks, L)
    assert bins == 20
    assert p.min() > 0.05 / 2, p  # Bonferroni over the two parameters
    flat = np.tile(np.arange(L + 1), 3)[:, None]  # perfectly uniform ranks
    assert uniformity_test(flat, L, bins=10)[1][0] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("shift", "scale"), [(0.5, 1.0), (-0.5, 1.0), (0.0, 0.5)], ids=["up", "down", "narrow"]
)
def test_biased_posterior_fails_uniformity(shift, scale):
    ranks = _conjugate_ranks(400, shift=shift, scale=scale)
    _chi2, p, _bins = uniformity_test(ranks, L)
    assert p.max() < 1e-4, p
    z, lo, hi = ecdf_difference_bands(jax.random.PRNGKey(1), 400, L)
    diff = ecdf_difference(ranks, L)
    assert np.all(np.any((diff < lo[:, None]) | (diff > hi[:, None]), axis=0))
    if shift > 0:  # truth low in the posterior: ranks too small, ECDF above the diagonal
        assert diff.mean() > 0
    elif shift < 0:
        assert diff.mean() < 0


def test_ecdf_test_sees_ranks_piled_at_the_ends():
    # 15% of replications where the chains missed the truth (rank 0 or L), the rest uniform:
    # binning dilutes the pile-up, the ECDF test does not.
    rng = np.random.default_rng(4)
    ranks = rng.integers(0, L + 1, size=(200, 3))
    ranks[:30] = rng.choice([0, L], size=(30, 3))
    key = jax.random.PRNGKey(5)
    p_ecdf = ecdf_uniformity_test(key, ranks, L)
    assert p_ecdf.max() < 0.05 / 6, p_ecdf
    p_uniform = ecdf_uniformity_test(key, _conjugate_ranks(200, seed=6), L)
    assert p_uniform.min() > 0.05 / 4, p_uniform
    # The p-value and the band agree: p < alpha <=> the curve leaves the 1 - alpha band.
    z, lo, hi = ecdf_difference_bands(key, 200, L, alpha=0.05)
    diff = ecdf_difference(ranks, L)
    outside = np.any((diff < lo[:, None] - 1e-12) | (diff > hi[:, None] + 1e-12), axis=0)
    assert np.array_equal(outside, p_ecdf < 0.05)


def test_ecdf_bands_cover_uniform_ranks():
    z, lo, hi = ecdf_difference_bands(jax.random.PRNGKey(2), 400, L)
    assert z.shape == lo.shape == hi.shape == (L,)
    assert np.all(lo < 0) and np.all(hi > 0)
    diff = ecdf_difference(_conjugate_ranks(400, seed=3), L)
    assert np.all((diff >= lo[:, None] - 1e-12) & (diff <= hi[:, None] + 1e-12))


def test_uniformity_test_rejects_bad_input():
    from climb_bayes.errors import ClimbError

    with pytest.raises(ClimbError, match="0..5"):
        uniformity_test(np.array([[6]]), 5)
    with pytest.raises(ClimbError, match="bins"):
        uniformity_test(np.zeros((10, 1), dtype=int), 5, bins=7)


def test_prior_draw_follows_the_stated_prior():
    # log A and log E must follow their Normal priors (ancestral sampling of the sampler's
    # log_L0 / logit_f coordinates would not).
    priors = Priors(reducible_scale=0.7, irreducible_scale=0.3)
    problem = sbc_problem(("en", "de"), (5e9, 2.5e10), priors, 1e10, [0.2, 0.4], [0.5, 0.6])
    assert problem.priors.reducible_loc == {"en": 0.2, "de": 0.4}
    assert len(problem.labels) == 14 and "b_offdiag[en->de]" in problem.labels
    key = jax.random.PRNGKey(0)
    draws = [prior_draw(jax.random.fold_in(key, i), problem) for i in range(150)]
    log_A = np.array([d["log_A"] for d in draws])
    log_E = np.array([d["log_E"] for d in draws])
    np.testing.assert_allclose(log_A.mean(0), [0.2, 0.4], atol=0.2)
    np.testing.assert_allclose(log_A.std(0), 0.7, rtol=0.2)
    np.testing.assert_allclose(log_E.mean(0), [0.5, 0.6], atol=0.1)
    np.testing.assert_allclose(log_E.std(0), 0.3, rtol=0.2)
    assert draws[0]["log_loss"].shape == problem.data.obs_log_loss.shape
    assert np.isfinite(draws[0]["log_loss"]).all()


def test_attach_sbc_verdicts():
    sbc = {"verdict": "SBC: ranks NOT uniform for 1 of 14 parameters", "passed": False}
    only = attach_sbc(None, sbc)
    assert only["studies"] == {} and only["verdict"]["text"] == sbc["verdict"]
    assert only["verdict"]["sbc_passed"] is False and "robust" not in only["verdict"]
    both = attach_sbc({"studies": {"budget": {}}, "verdict": {"robust": True, "text": "V"}}, sbc)
    assert both["verdict"]["text"] == "V\n" + sbc["verdict"]
    assert both["verdict"]["robust"] is True and both["sbc"] is sbc


@pytest.mark.parametrize("n", ["0", "-3", "x"])
def test_bad_sbc_count_is_a_clear_error(tmp_path, n):
    result = CliRunner().invoke(robustness, [str(tmp_path / "fit.nc"), "--sbc", n])
    assert result.exit_code == 2
    assert "--sbc" in result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_nothing_to_do_is_a_clear_error(map_fit3, tmp_path, capsys):
    path = tmp_path / "fit.nc"
    map_fit3.save(path)
    assert main(["robustness", str(path), "--studies", "none"]) == 2
    assert "nothing to do" in capsys.readouterr().err


def test_sbc_cli_end_to_end(map_fit3, tmp_path, monkeypatch):
    monkeypatch.setenv("CLIMB_BAYES_COMPILE_CACHE", "0")
    # A shorter sampler than the CLI's default (the wiring is under test here, not the
    # sampler): compilation then dominates the runtime.
    short = functools.partial(SbcConfig, warmup=100, draws_per_chain=50, thin=2, max_tree_depth=6)
    monkeypatch.setattr("climb_bayes.evaluation.sbc.SbcConfig", short)
    fit_path = tmp_path / "fit.nc"
    map_fit3.save(fit_path)
    out = tmp_path / "res" / "rob.json"
    result = CliRunner().invoke(
        robustness, [str(fit_path), "--studies", "none", "--sbc", "8", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["studies"] == {}
    sbc = data["sbc"]
    assert sbc["n_replications"] == 8 and sbc["n_draws"] == 50
    assert sbc["config"]["max_tree_depth"] == 6
    assert sbc["languages"] == list(map_fit3.languages[:2])
    assert len(sbc["parameters"]) == 14
    for entry in sbc["parameters"].values():
        assert len(entry["ranks"]) == 8
        assert all(0 <= r <= sbc["n_draws"] for r in entry["ranks"])
        assert 0 <= entry["pvalue"] <= 1 and 0 < entry["ecdf_pvalue"] <= 1
    assert sbc["threshold"] == pytest.approx(0.05 / 28)
    worst = min(min(e["pvalue"], e["ecdf_pvalue"]) for e in sbc["parameters"].values())
    assert sbc["passed"] == (worst >= sbc["threshold"])
    assert isinstance(sbc["passed"], bool)
    for p in sbc["plot"]:
        assert (out.parent / p.split("/")[-1]).stat().st_size > 1000
    assert {p.rsplit(".", 1)[1] for p in sbc["plot"]} == {"png", "svg"}
    assert "SBC: ranks" in result.output
    assert "SBC [8/8]" in result.output  # progress (stderr is mixed into output)
    assert data["verdict"]["sbc_passed"] is sbc["passed"]
