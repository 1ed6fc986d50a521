"""The mixture discrepancy: its distance, its draws, and where the predictive adds it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.data.observations import Observations
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble
from climb_bayes.inference.predictive import (
    predictive_parts,
    predictive_samples,
    query_observations,
)
from climb_bayes.laws.base import FitOptions
from climb_bayes.laws.registry import get_law
from climb_bayes.model.mixture_discrepancy import (
    MIXTURE_SCALES,
    SHARE_FLOOR,
    ShareRange,
    mixture_distance,
    mixture_draws,
    mixture_scale,
    share_excess,
    share_range,
)
from climb_bayes.model.simulate import example_params, simulate_runs

LANGS = ("en", "de", "fr")


def test_share_excess_is_the_log_ratio_beyond_each_range():
    fitted = ShareRange(np.array([0.0, 0.1, 0.2]), np.array([0.25, 0.6, 0.5]))
    f = SHARE_FLOOR
    r = np.array([[0.5, 0.02, 0.48], [0.2, 0.4, 0.4], [0.0, 0.7, 0.3]])
    e = share_excess(r, fitted)
    expected = [np.log((0.5 + f) / (0.25 + f)), np.log((0.1 + f) / (0.02 + f)), 0.0]
    assert e[0] == pytest.approx(expected)
    assert np.all(e[1] == 0)  # every share inside its range
    # en 0 against a fitted lowest 0: inside; de 0.7 above 0.6
    assert e[2] == pytest.approx([0.0, np.log((0.7 + f) / (0.6 + f)), 0.0])
    assert mixture_distance(r, fitted) == pytest.approx(e.sum(axis=1))
    # a share of 0 against a fitted lowest of one floor is a factor 2, not infinite
    assert share_excess(np.array([0.0]), ShareRange(np.array([f]), np.array([1.0])))[0] == (
        pytest.approx(np.log(2.0))
    )
    runs = np.array([[0.2, 0.8], [0.6, 0.4], [0.9, 0.1]])
    rng_ = share_range(runs, np.array([0, 1, 1, 0]))  # only runs that have observations
    assert rng_.lo == pytest.approx([0.2, 0.4]) and rng_.hi == pytest.approx([0.6, 0.8])


def test_one_draw_per_mixture_and_language_shared_by_its_budgets():
    rng = np.random.default_rng(0)
    r = np.array([[0.8, 0.1, 0.1]] * 4 + [[0.1, 0.8, 0.1]] * 2)
    group = np.array([0, 0, 1, 1, 0, 0])
    sd = np.array([0.02, 0.02, 0.03, 0.03, 0.0, 0.0])
    d = mixture_draws(rng, sd, r, group, 4000)
    assert np.array_equal(d[:, 0], d[:, 1]) and np.array_equal(d[:, 2], d[:, 3])
    assert np.all(d[:, 4:] == 0)  # sd 0: no draw
    assert abs(np.corrcoef(d[:, 0], d[:, 2])[0, 1]) < 0.05  # languages independent
    assert d[:, 0].std() == pytest.approx(0.02, rel=0.05)
    assert d[:, 2].std() == pytest.approx(0.03, rel=0.05)


def test_every_calibrated_law_has_a_scale_and_others_get_a_larger_one():
    assert set(MIXTURE_SCALES) == {"climb", "msl", "dml", "isolated"}
    assert all(0 < s.kappa < 0.1 for s in MIXTURE_SCALES.values())
    assert mixture_scale("new-law").kappa >= max(s.kappa for s in MIXTURE_SCALES.values())


@pytest.fixture(scope="module")
def near_uniform_fit():
    """CLIMB (Laplace, discrepancy from leave-future-out folds) on 3-language runs whose shares
    stay within 0.2-0.5 of every language, at three budgets."""
    truth = example_params(LANGS, seed=3)
    mixes = [(0.34, 0.33, 0.33), (0.5, 0.3, 0.2), (0.2, 0.5, 0.3), (0.3, 0.2, 0.5), (0.4, 0.4, 0.2)]
    rows = [
        {
            "run_id": f"m{k}-{int(b)}",
            "tokens": b,
            **{f"r_{l}": s for l, s in zip(LANGS, mix, strict=True)},
        }
        for k, mix in enumerate(mixes)
        for b in (1e9, 3e9, 1e10)
    ]
    frame = simulate_runs(truth, pd.DataFrame(rows), seed=0)
    obs = Observations.from_runs(runs_from_frame(frame))
    ens = fit_ensemble(
        obs,
        [get_law("climb")],
        FitOptions(seed=0, samples=1000),
        EnsembleOptions(method="laplace", lfo="laplace", lfo_folds=2),
    )
    return ens.fits["climb"]


def test_the_predictive_adds_it_only_beyond_the_fitted_shares(near_uniform_fit):
    fit = near_uniform_fit
    assert fit.discrepancy is not None
    fitted = share_range(fit.fit_obs.run_r, fit.fit_obs.run)
    assert fitted.lo == pytest.approx([0.2] * 3) and fitted.hi == pytest.approx([0.5] * 3)
    inside = query_observations(fit.groups, np.array([[0.3, 0.3, 0.4]]), np.array([3e9]))
    outside = query_observations(fit.groups, np.array([[0.9, 0.05, 0.05]]), np.array([3e9]))
    # inside: no term, and the same draws with it on or off
    assert predictive_parts(fit, inside).mix_sd is None
    a = predictive_samples(fit, inside, 500, seed=1)
    assert np.array_equal(a, predictive_samples(fit, inside, 500, seed=1, mixture=False))
    # outside: sd kappa u, the same for every language (u sums over languages)
    parts = predictive_parts(fit, outside)
    kappa = mixture_scale("climb").kappa
    u = mixture_distance(np.array([0.9, 0.05, 0.05]), fitted)
    assert parts.mix_sd == pytest.approx(np.full(3, kappa * u))
    off = predictive_parts(fit, outside, mixture=False)
    assert parts.variance() - off.variance() == pytest.approx((kappa * u) ** 2)
    assert parts.variance(False) == pytest.approx(off.variance(False))  # parameters only
    on_s = predictive_samples(fit, outside, 4000, seed=2)
    off_s = predictive_samples(fit, outside, 4000, seed=2, mixture=False)
    # the same noise and budget discrepancy, plus the mixture draws
    assert (on_s - off_s).std(axis=0) == pytest.approx(np.full(3, kappa * u), rel=0.05)
    # a fit without a discrepancy (parameters and noise only) gets none either
    bare = replace(fit, discrepancy=None)
    assert predictive_parts(bare, outside).mix_sd is None


def test_decision_draws_carry_it_beyond_the_fitted_shares_only(near_uniform_fit):
    """``optimize``'s objective draws: the mixture term is ``kappa z u(r)`` per draw and
    language (``z`` shared by every mixture of a draw, so each draw's objective stays smooth in
    ``r``), 0 inside every fitted share range; the other random numbers are those of a fit
    without it."""
    from climb_bayes.decisions.ensemble_decision import decision_draws, draw_log_losses
    from climb_bayes.inference.ensemble import LawEnsemble

    fit = near_uniform_fit
    ens = LawEnsemble({"climb": fit}, {"climb": 1.0})
    draws = decision_draws(ens, 1e11, 2000, seed=3)
    without = [ld._replace(theta={**ld.theta, "mix": 0.0 * ld.theta["mix"]}) for ld in draws]
    inside, outside = np.array([0.3, 0.3, 0.4]), np.array([0.9, 0.05, 0.05])
    assert np.array_equal(draw_log_losses(draws, inside), draw_log_losses(without, inside))
    added = draw_log_losses(draws, outside) - draw_log_losses(without, outside)
    u = mixture_distance(outside, share_range(fit.fit_obs.run_r, fit.fit_obs.run))
    kappa = mixture_scale("climb").kappa
    assert added.std(axis=0) == pytest.approx(np.full(3, kappa * u), rel=0.08)
    # the budget discrepancy's draws are those of a fit without fitted runs (no mixture term)
    bare = LawEnsemble({"climb": replace(fit, fit_obs=None)}, {"climb": 1.0})
    other = decision_draws(bare, 1e11, 2000, seed=3)
    assert np.array_equal(other[0].theta["amp"], draws[0].theta["amp"])
    assert np.all(other[0].theta["mix"] == 0)


def test_fit_summary_names_the_share_ranges_only_when_they_fall_short():
    from climb_bayes.data.design import algorithm1_design
    from climb_bayes.viz.fit_text import mixture_lines

    design = algorithm1_design(LANGS, [1e9, 3e9], seed=0)
    props = design[[f"r_{lang}" for lang in LANGS]].to_numpy(float)
    assert mixture_lines(LANGS, props, ["climb", "msl"]) == []  # Algorithm 1: every share 0-1
    near = np.array([[0.34, 0.33, 0.33], [0.5, 0.3, 0.2], [0.2, 0.5, 0.3]])
    text = " ".join(" ".join(mixture_lines(LANGS, near, ["msl", "climb"])).split())
    assert "en 0.20-0.50, de 0.30-0.50, fr 0.20-0.33 as share ranges" in text
    assert f"kappa msl {mixture_scale('msl').kappa:.3f}, climb " in text
