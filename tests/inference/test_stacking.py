"""Stacking weights: the arviz-stats optimum, the weighted EM and the cluster bootstrap."""

import numpy as np
import pytest

from climb_bayes.inference.stacking import (
    bootstrap_stacking_weights,
    stacking_weights,
    weighted_stacking,
)


def test_weighted_stacking_with_unit_weights_is_the_arviz_optimum():
    rng = np.random.default_rng(3)
    base = rng.normal(1.0, 0.4, 300)
    lpd = {
        "a": base + rng.normal(0.0, 0.5, 300),
        "b": base + rng.normal(-0.1, 0.5, 300),
        "c": base - 0.8 + rng.normal(0.0, 0.2, 300),
    }
    reference = stacking_weights(lpd)
    ours = weighted_stacking(np.stack(list(lpd.values())), np.ones((1, 300)))[0]
    assert 0.05 < reference["b"] < reference["a"] < 0.95  # an interior optimum, not a corner
    np.testing.assert_allclose(ours, [reference[k] for k in lpd], atol=0.01)


def test_weighted_stacking_follows_the_point_weights():
    # law a is better on the first half, b on the second: the weighting decides
    lpd = np.zeros((2, 100))
    lpd[1, :50] = lpd[0, 50:] = -2.0
    c = np.ones((3, 100))
    c[1, 50:] = 0.01
    c[2, :50] = 0.01
    w = weighted_stacking(lpd, c)
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    assert w[0, 0] == pytest.approx(0.5, abs=1e-6)
    assert w[1, 0] > 0.95 and w[2, 1] > 0.95


def test_a_law_that_wins_in_one_block_keeps_less_weight_than_pointwise_stacking_gives():
    # 5 blocks of 80 points; law a wins block 0 by a lot, law b wins the other four a little:
    # pointwise stacking counts block 0's 80 points as 80 independent wins for a; resampling
    # the blocks knows it is one
    rng = np.random.default_rng(0)
    blocks = np.repeat(np.arange(5), 80)
    a = rng.normal(0.0, 0.05, blocks.size)
    b = a + np.where(blocks == 0, -1.0, 0.08)
    lpd = {"a": a, "b": b}
    pointwise = stacking_weights(lpd)
    boot = bootstrap_stacking_weights(lpd, blocks, seed=0)
    assert sum(boot.values()) == pytest.approx(1.0)
    assert pointwise["a"] > 0.5
    assert boot["a"] < pointwise["a"] - 0.1
    # one point per block is the ordinary Bayesian bootstrap: close to the point optimum here
    per_point = bootstrap_stacking_weights(lpd, np.arange(blocks.size), seed=0)
    assert per_point["a"] == pytest.approx(pointwise["a"], abs=0.1)
    # deterministic for a seed; a single block or law falls back to plain stacking
    assert bootstrap_stacking_weights(lpd, blocks, seed=0) == boot
    assert bootstrap_stacking_weights(lpd, np.zeros(blocks.size), seed=0) == pointwise
    assert bootstrap_stacking_weights({"a": a}, blocks) == {"a": 1.0}
    # a law that loses everywhere gets exactly 0, not the iteration's residue
    lpd["broken"] = a - 5.0
    assert bootstrap_stacking_weights(lpd, blocks, seed=0)["broken"] == 0.0


def test_loo_weights_replace_failed_psis_points(monkeypatch):
    # PSIS-LOO returned NaN at some run groups for CLIMB and the DML (Normal likelihood on
    # tiny-2024's final points, 2026-12-07), and arviz-stats' stacking then gave every law
    # 0.25 without a word; the in-sample density now stands in there, and the log says so.
    import climb_bayes.inference.ensemble as ensemble
    import climb_bayes.inference.predictive as predictive

    rng = np.random.default_rng(0)
    good = rng.normal(1.0, 0.05, (400, 30))  # a law that predicts every group well
    poor = rng.normal(-1.0, 0.05, (400, 30))
    lls = {"good": good, "poor": poor}
    monkeypatch.setattr(predictive, "pointwise_log_likelihood", lambda fit, obs: lls[fit])
    real = ensemble._psis_loo_pointwise

    def failing(ll):
        elpd, khat, good_k = real(ll)
        elpd = elpd.copy()
        elpd[:5] = np.nan
        return elpd, khat, good_k

    monkeypatch.setattr(ensemble, "_psis_loo_pointwise", failing)
    said = []
    weights = ensemble._loo_weights({"good": "good", "poor": "poor"}, None, said.append)
    assert weights["good"] > 0.9  # not the silent 0.5 / 0.5
    assert sum("PSIS-LOO failed (not finite) at 5 of 30" in s for s in said) == 2
    np.testing.assert_allclose(ensemble.in_sample_lpd(good), np.log(np.mean(np.exp(good), 0)))
