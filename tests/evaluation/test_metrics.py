"""Metrics match hand-computed values; coverage is nominal for a calibrated Gaussian forecast."""

from __future__ import annotations

import math

import numpy as np
import pytest

from climb_bayes.evaluation.metrics import (
    COVERAGE_LEVELS,
    calibration_error,
    coverage_if_calibrated,
    crps_samples,
    huber_log,
    huber_loss,
    interval_coverage,
    log_predictive_density,
    mean_relative_error,
    r2,
    r2_by_group,
    rmsle,
    score,
)


def test_r2_hand_computed():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    yhat = np.array([1.1, 1.9, 3.2, 3.8])
    # SS_res = 0.01 + 0.01 + 0.04 + 0.04 = 0.1; SS_tot = 5
    assert r2(y, yhat) == pytest.approx(1 - 0.1 / 5.0)
    assert math.isnan(r2(np.array([1.0]), np.array([1.0])))
    assert math.isnan(r2(np.ones(3), np.ones(3)))


def test_pooled_r2_is_inflated_by_spread_between_groups():
    rng = np.random.default_rng(0)
    group = np.repeat([0, 1], 50)
    y = np.where(group == 0, 2.0, 4.0) + rng.normal(0, 0.1, 100)
    yhat = np.where(group == 0, 2.0, 4.0)  # knows only each group's mean
    per = r2_by_group(y, yhat, group)
    assert r2(y, yhat) > 0.98
    assert np.all(per < 0.05)


def test_huber_mre_rmsle_hand_computed():
    obs = np.array([2.0, 3.0])
    pred = obs * np.exp([0.0005, 0.01])  # one quadratic, one linear residual
    expected = (0.5 * 0.0005**2 + 1e-3 * (0.01 - 0.0005)) / 2
    assert huber_log(pred, obs) == pytest.approx(expected, rel=1e-9)
    # on the loss itself, delta = 1 nat: 0.03 nats is quadratic, 2 nats linear
    got = huber_loss(np.array([3.03, 5.0]), np.array([3.0, 3.0]))
    assert got == pytest.approx((0.5 * 0.03**2 + 1.0 * (2.0 - 0.5)) / 2, rel=1e-9)
    # the scale of the CLIMB paper's Table 1 (0.2-8 x 1e-3) for 1-4% errors at 2-3 nats
    assert 2e-4 < huber_loss(3.0 * np.array([1.01, 0.98]), np.array([3.0, 3.0])) < 8e-3
    assert mean_relative_error(np.array([1.1, 0.9]), np.array([1.0, 1.0])) == pytest.approx(0.1)
    assert rmsle(np.exp([0.1, -0.1]), np.ones(2)) == pytest.approx(0.1)


def test_crps_point_forecast_and_brute_force():
    y = np.array([0.3, -1.0])
    point = np.zeros((5, 2))
    assert np.allclose(crps_samples(point, y), np.abs(y))
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 2))
    brute = np.mean(np.abs(x - y), axis=0) - 0.5 * np.mean(
        np.abs(x[:, None, :] - x[None, :, :]), axis=(0, 1)
    )
    assert np.allclose(crps_samples(x, y), brute)


def test_crps_matches_gaussian_closed_form():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(20000, 1))
    closed = 2 / math.sqrt(2 * math.pi) - 1 / math.sqrt(math.pi)  # CRPS(N(0,1), 0)
    assert crps_samples(x, np.zeros(1))[0] == pytest.approx(closed, abs=0.01)


def test_log_predictive_density():
    ll = np.array([[-1.0, -2.0], [-1.0, -3.0]])
    expected = [-1.0, math.log(0.5 * (math.exp(-2) + math.exp(-3)))]
    assert np.allclose(log_predictive_density(ll), expected)


def test_coverage_calibrated_gaussian_is_nominal_and_narrow_is_flagged():
    rng = np.random.default_rng(3)
    n = 4000
    y = rng.normal(size=n)
    calibrated = rng.normal(size=(400, n))
    cov = interval_coverage(calibrated, y)
    assert np.allclose(cov, COVERAGE_LEVELS, atol=0.03)
    assert calibration_error(cov) < 1e-3
    narrow = 0.3 * rng.normal(size=(400, n))
    cov_n = interval_coverage(narrow, y)
    assert np.all(cov_n < np.asarray(COVERAGE_LEVELS) - 0.2)
    assert calibration_error(cov_n) > 0.05


def test_calibration_error_hand_computed():
    cov = np.array([0.25, 0.4, 0.45, 0.5])
    expected = np.mean((cov - np.array([0.5, 0.8, 0.9, 0.95])) ** 2)
    assert calibration_error(cov) == pytest.approx(expected)
    with pytest.raises(ValueError):
        calibration_error(np.ones(3))


def test_score_reports_everything():
    rng = np.random.default_rng(4)
    loss = np.exp(rng.normal(1.0, 0.1, 60))
    group = np.repeat([0, 1, 2], 20)
    point = np.log(loss) + 0.01
    samples = np.log(loss)[None] + rng.normal(0, 0.02, (200, 60))
    out = score(loss, group, point, samples, np.full((1, 60), -1.0), n_groups=3)
    for key in (
        "r2_pooled", "r2_group_mean", "huber_log", "huber_loss", "mre", "rmsle", "cal_error",
        "crps",
    ):  # fmt: skip
        assert np.isfinite(out[key])
    assert out["lpd"] == pytest.approx(-1.0)
    assert set(out["coverage"]) == {"0.5", "0.8", "0.9", "0.95"}
    assert len(out["r2_group"]) == 3


def _clustered_sets(icc: float, n_sets: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Sets of 5 clusters x 40 standard-Normal errors with intra-class correlation ``icc``,
    each scored by the marginally calibrated predictive N(0, 1) (400 samples)."""
    rng = np.random.default_rng(seed)
    cluster = np.repeat(np.arange(5), 40)
    out = []
    for _ in range(n_sets):
        y = np.sqrt(icc) * rng.standard_normal(5)[cluster] + np.sqrt(1 - icc) * rng.normal(
            size=cluster.size
        )
        out.append((rng.standard_normal((400, cluster.size)), y))
    return out


def test_coverage_if_calibrated_is_binomial_for_independent_errors():
    from scipy import stats

    rng = np.random.default_rng(3)
    n = 500
    cluster = np.arange(n) // 5  # clusters of 5 independent points: no correlation
    y, samples = rng.standard_normal(n), rng.standard_normal((2000, n))
    band = coverage_if_calibrated(samples, y, cluster, (0.5, 0.9), n_sim=4000)
    for (lo, hi), level in zip(band, (0.5, 0.9), strict=True):
        binomial = stats.binom(n, level).ppf([0.05, 0.95]) / n
        assert lo == pytest.approx(binomial[0], abs=0.015)
        assert hi == pytest.approx(binomial[1], abs=0.015)


def test_coverage_if_calibrated_holds_the_coverage_of_calibrated_clustered_sets():
    """Over 150 calibrated sets whose errors share a per-cluster term (icc 0.8), the observed
    90% coverage falls inside its 5-95% range most of the time (0.81 measured: with 5 clusters
    the icc each set estimates is uncertain, so the range is somewhat narrow); a binomial
    range, which treats the 200 points as independent, holds it about a quarter of the time."""
    from scipy import stats

    inside = binomial_inside = 0
    sets = _clustered_sets(0.8, 150, seed=4)
    for samples, y in sets:
        cov = interval_coverage(samples, y, (0.9,))[0]
        ((lo, hi),) = coverage_if_calibrated(samples, y, np.repeat(np.arange(5), 40), (0.9,))
        inside += lo <= cov <= hi
        b_lo, b_hi = stats.binom(y.size, 0.9).ppf([0.05, 0.95]) / y.size
        binomial_inside += b_lo <= cov <= b_hi
    assert 0.75 <= inside / len(sets) <= 0.97
    assert binomial_inside / len(sets) < 0.4


def test_coverage_if_calibrated_flags_a_too_wide_predictive():
    """A predictive 3x too wide covers ~every point at 50%: outside the calibrated range."""
    samples, y = _clustered_sets(0.5, 1, seed=5)[0]
    cov = interval_coverage(3.0 * samples, y, (0.5,))[0]
    ((lo, hi),) = coverage_if_calibrated(3.0 * samples, y, np.repeat(np.arange(5), 40), (0.5,))
    assert cov > hi
    assert lo < 0.5 < hi
