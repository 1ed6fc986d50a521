"""Stacking weights, discrepancy calibration and the stacked predictive (fast MAP settings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.data.design import algorithm1_design
from climb_bayes.data.observations import Observations
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.errors import ClimbError
from climb_bayes.inference.ensemble import (
    EnsembleOptions,
    copula_average,
    error_correlation,
    fit_ensemble,
    quantile_average,
    stacking_weights,
)
from climb_bayes.inference.predictive import predictive_samples
from climb_bayes.laws.base import FitOptions, Law, ParamSpec
from climb_bayes.laws.registry import get_law
from climb_bayes.model.discrepancy import DiscrepancyPrior, LfoResiduals, calibrate
from climb_bayes.model.simulate import example_params, simulate_runs


@dataclass(frozen=True)
class ConstantLaw(Law):
    """A broken law: one constant log-loss per group, whatever the budget and mixture."""

    name: ClassVar[str] = "constant"
    zero_share_ok: ClassVar[bool] = True

    def param_specs(self, m: int) -> dict[str, ParamSpec]:
        return {"c": ParamSpec((m,))}

    def log_loss(self, params, r, d):
        return jnp.broadcast_to(params["c"], jnp.shape(r))

    def init(self, obs: Observations) -> dict[str, Any]:
        return {"c": np.full(obs.m, np.log(np.median(obs.loss)))}

    def priors(self, obs: Observations, priors: Any) -> dict[str, Any]:
        return {"c": dist.Normal(jnp.asarray(self.init(obs)["c"]), 1.0)}


def test_stacking_weights_sum_to_one_and_follow_the_log_score():
    rng = np.random.default_rng(0)
    good = rng.normal(1.0, 0.3, 200)
    w = stacking_weights({"good": good, "worse": good - 0.5, "broken": np.full(200, -30.0)})
    assert sum(w.values()) == pytest.approx(1.0)
    assert w["good"] > 0.95 and w["broken"] < 1e-6


@pytest.fixture(scope="module")
def isolated_world():
    truth = example_params(("en", "de", "fr"), seed=2)
    truth = type(truth)(
        truth.languages, truth.B, truth.beta, truth.E, truth.b * 0, truth.k * 0, truth.eta,
        truth.sigma,
    )  # fmt: skip
    design = algorithm1_design(truth.languages, [1e9, 2e9, 4e9, 8e9], seed=0, pool="central")
    frame = simulate_runs(truth, design, seed=1)
    return Observations.from_runs(runs_from_frame(frame))


def test_generating_law_wins_and_a_constant_law_gets_nothing(isolated_world):
    laws = [get_law("isolated"), ConstantLaw(), get_law("dml")]
    ens = fit_ensemble(
        isolated_world,
        laws,
        FitOptions(n_starts=2, max_iter=400),
        EnsembleOptions(method="map", lfo="map", lfo_folds=2),
    )
    assert ens.weight_method == "lfo-bootstrap-stacking"
    assert sum(ens.weights.values()) == pytest.approx(1.0)
    assert ens.weights["isolated"] > 0.8
    assert ens.weights["constant"] < 0.01


def test_quantile_average_keeps_the_spread_where_a_mixture_adds_the_disagreement():
    # two calibrated forecasts 2 sd apart: averaging their quantiles gives N(0, 1) (centre
    # and spread averaged); mixing them gives sd sqrt(2) and a 50% interval 1.7x as wide
    rng = np.random.default_rng(0)
    a, b = rng.normal(-1.0, 1.0, (20000, 3)), rng.normal(1.0, 1.0, (20000, 3))
    avg = quantile_average([a, b], [0.5, 0.5])
    assert avg.shape == a.shape
    np.testing.assert_allclose(np.median(avg, axis=0), 0.0, atol=0.03)
    np.testing.assert_allclose(avg.std(axis=0), 1.0, atol=0.03)
    mixture = np.concatenate([a[:10000], b[:10000]])
    q = [0.25, 0.75]
    width = np.diff(np.quantile(avg, q, axis=0), axis=0)
    assert np.all(np.diff(np.quantile(mixture, q, axis=0), axis=0) > 1.5 * width)
    # weights are normalised and shift the centre; one law alone is its own sorted draws
    np.testing.assert_allclose(
        np.median(quantile_average([a, b], [1.0, 3.0]), axis=0), 0.5, atol=0.03
    )
    np.testing.assert_array_equal(quantile_average([a, b], [0.0, 2.0]), np.sort(b, axis=0))
    with pytest.raises(ClimbError, match="one weight"):
        quantile_average([a, b], [0.5])
    with pytest.raises(ClimbError, match="one shape"):
        quantile_average([a, b[:100]], [0.5, 0.5])


@pytest.mark.parametrize("rho", [1.0, 0.5, 0.0, -0.5])
def test_copula_average_spread_follows_the_laws_error_correlation(rho):
    # two calibrated N(mu_k, 1) forecasts whose errors correlate rho: the error of the
    # equal-weight centre has sd sqrt((1 + rho) / 2); rho = 1 is the quantile average exactly
    rng = np.random.default_rng(0)
    a, b = rng.normal(-1.0, 1.0, (20000, 3)), rng.normal(1.0, 1.0, (20000, 3))
    corr = np.array([[1.0, rho], [rho, 1.0]])
    out = copula_average([a, b], [0.5, 0.5], corr, seed=1)
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=0.03)
    np.testing.assert_allclose(out.std(axis=0), np.sqrt((1 + rho) / 2), atol=0.03)
    # every law's draws are used once each: the sorted parts are the laws' sorted draws
    if rho == 1.0:
        np.testing.assert_array_equal(out, quantile_average([a, b], [0.5, 0.5]))
    with pytest.raises(ClimbError, match="correlation"):
        copula_average([a, b], [0.5, 0.5], np.ones((3, 3)))


def test_error_correlation_is_uncentred_so_a_bias_counts_as_error():
    e = np.random.default_rng(2).standard_normal(400)
    corr = error_correlation([e, -e, e + 1.0])
    np.testing.assert_allclose(np.diag(corr), 1.0)
    assert corr[0, 1] == pytest.approx(-1.0)
    # a centred correlation would call e and e + 1 identical; as errors they are not
    assert corr[0, 2] == pytest.approx(
        np.sum(e * (e + 1)) / np.sqrt(np.sum(e**2) * np.sum((e + 1) ** 2))
    )
    assert corr[0, 2] < 0.8
    np.testing.assert_array_equal(error_correlation([np.zeros(0), np.zeros(0)]), np.ones((2, 2)))


def test_ensemble_joins_the_laws_by_their_inner_fold_error_correlation(isolated_world):
    laws = [get_law("isolated"), get_law("dml")]
    opts = FitOptions(n_starts=1, max_iter=300)
    ens = fit_ensemble(isolated_world, laws, opts, EnsembleOptions(method="map", lfo="map"))
    rho = ens.lfo["isolated"]["error_correlation"]["dml"]
    assert rho == pytest.approx(ens.lfo["dml"]["error_correlation"]["isolated"])
    assert -1.0 <= rho < 1.0
    np.testing.assert_allclose(ens.error_correlation(["isolated", "dml"]), [[1, rho], [rho, 1]])
    off = fit_ensemble(
        isolated_world, laws, opts, EnsembleOptions(method="map", lfo="map", correlate=False)
    )
    assert "error_correlation" not in off.lfo["isolated"]
    np.testing.assert_array_equal(off.error_correlation(["isolated", "dml"]), np.ones((2, 2)))


def test_stacked_intervals_average_the_laws_quantiles(isolated_world):
    from dataclasses import replace

    ens = fit_ensemble(
        isolated_world,
        [get_law("isolated"), get_law("dml")],
        FitOptions(n_starts=1, max_iter=300),
        EnsembleOptions(method="map", lfo="none"),
    )
    ens = replace(ens, weights={"isolated": 0.3, "dml": 0.7})
    test = isolated_world.select(isolated_world.tokens >= 4e9)
    q = [0.05, 0.5, 0.95]
    laws = [predictive_samples(ens.fits[k], test, 500, seed=j) for j, k in enumerate(ens.fits)]
    stacked = ens.predictive_samples(test, 500, seed=0)
    expected = 0.3 * np.quantile(laws[0], q, axis=0) + 0.7 * np.quantile(laws[1], q, axis=0)
    np.testing.assert_allclose(np.quantile(stacked, q, axis=0), expected, rtol=0, atol=1e-12)
    mixture = ens.predictive_samples(test, 500, seed=0, combine="mixture")
    assert mixture.shape == stacked.shape
    with pytest.raises(ClimbError, match="combine"):
        ens.predictive_samples(test, 10, combine="average")


def test_a_law_without_stacking_weight_gets_the_cheaper_full_fit(isolated_world):
    # the weights come from the inner folds alone, so the full fits can follow them: NUTS for
    # a law that shapes the predictive, a Laplace fit for one the folds give no weight
    laws = [get_law("isolated"), ConstantLaw()]
    opts = FitOptions(n_starts=1, max_iter=300, chains=1, warmup=150, samples=150)
    ens = fit_ensemble(
        isolated_world,
        laws,
        opts,
        EnsembleOptions(method="nuts", lfo="map", lfo_folds=2, nuts_min_weight=0.01),
    )
    assert ens.weights["constant"] < 0.01
    assert ens.fits["isolated"].method == "nuts"
    assert ens.fits["constant"].method == "laplace"
    assert ens.fits["constant"].discrepancy is not None  # attached whatever the fit method


def test_discrepancy_calibration_recovers_a_known_scale():
    rng = np.random.default_rng(0)
    n_blocks, per = 40, 10
    tau_true = 0.05
    x = rng.uniform(0.3, 2.0, n_blocks * per)
    block = np.repeat(np.arange(n_blocks), per)
    a = rng.normal(size=n_blocks)[block]
    c = rng.normal(size=x.size)
    v = np.full(x.size, 0.002**2)
    z = x * tau_true * (np.sqrt(0.5) * a + np.sqrt(0.5) * c) + np.sqrt(v) * rng.normal(size=x.size)
    group = np.zeros(x.size, dtype=int)
    res = LfoResiduals(z, v, x, group, block)
    prior = DiscrepancyPrior(0.01, 1.0, "test")  # deliberately off by 5x
    d = calibrate(res, prior, np.ones(1), np.ones(1), n_draws=400)
    assert d.source == "lfo"
    assert np.median(d.tau) == pytest.approx(tau_true, rel=0.3)


def test_psis_loo_returns_pareto_k_instead_of_warning():
    """The one-budget LOO weights report high Pareto k in the fit's log (one line per law), not
    as arviz-stats' UserWarning with a source path on the user's terminal."""
    import warnings

    from climb_bayes.inference.ensemble import _psis_loo_pointwise

    rng = np.random.default_rng(0)
    ll = rng.standard_t(1.5, (1000, 20))  # heavy-tailed log-likelihoods: unreliable groups
    ll[:, :5] = rng.normal(0.0, 0.01, (1000, 5))  # and well-behaved ones
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        elpd, khat, good_k = _psis_loo_pointwise(ll)
    assert elpd.shape == khat.shape == (20,)
    assert 0.5 < good_k <= 0.7
    assert (khat[:5] < good_k).all() and (khat[5:] > good_k).any()


def test_laplace_fold_refits_record_their_pareto_k(isolated_world):
    """Laplace fold refits (the default ``--lfo``) carry the worst fold's Pareto k and its
    threshold into the LFO summary, which ``fit`` prints when a law's folds are unreliable;
    point-fit folds have none."""
    laws = [get_law("isolated"), ConstantLaw()]
    opts = FitOptions(n_starts=1, max_iter=300, samples=400)
    ens = fit_ensemble(isolated_world, laws, opts, EnsembleOptions(method="laplace", lfo="laplace"))
    for name in ("isolated", "constant"):
        rec = ens.lfo[name]
        assert np.isfinite(rec["fold_pareto_k"]), rec
        assert rec["fold_pareto_k_max"] == pytest.approx(1 - 1 / np.log10(400))
    off = fit_ensemble(isolated_world, laws, opts, EnsembleOptions(method="map", lfo="map"))
    assert "fold_pareto_k" not in off.lfo["isolated"]


def test_nuts_fold_refits_run_short_chains(isolated_world):
    """`lfo="nuts"` refits the folds by FOLD_NUTS_CHAINS x (FOLD_NUTS_WARMUP + ...) whatever the
    full fits' settings (a fold only places its predictive; measured in docs/model.md), and
    never longer than the full fit; an explicit `lfo_options` wins."""
    from dataclasses import replace

    from climb_bayes.inference.ensemble import (
        FOLD_NUTS_CHAINS,
        FOLD_NUTS_SAMPLES,
        FOLD_NUTS_WARMUP,
    )

    seen: list[tuple[str, int, int, int]] = []

    @dataclass(frozen=True)
    class Recording(ConstantLaw):
        def fit(self, obs, method="map", options=None, log=None):
            seen.append((method, options.chains, options.warmup, options.samples))
            return super().fit(obs, "map", options, log)  # the settings are what is checked

    full = FitOptions(n_starts=1, max_iter=200, chains=4, warmup=500, samples=4000)
    fit_ensemble(isolated_world, [Recording()], full, EnsembleOptions(method="map", lfo="nuts"))
    folds = [s for s in seen if s[0] == "nuts"]
    assert folds and set(folds) == {("nuts", FOLD_NUTS_CHAINS, FOLD_NUTS_WARMUP, FOLD_NUTS_SAMPLES)}
    seen.clear()
    short = replace(full, chains=1, warmup=50, samples=60)
    fit_ensemble(isolated_world, [Recording()], short, EnsembleOptions(method="map", lfo="nuts"))
    assert {s for s in seen if s[0] == "nuts"} == {("nuts", 1, 50, 60)}
    seen.clear()
    mine = replace(full, chains=3, warmup=70, samples=90)
    fit_ensemble(
        isolated_world,
        [Recording()],
        full,
        EnsembleOptions(method="map", lfo="nuts", lfo_options=mine),
    )
    assert {s for s in seen if s[0] == "nuts"} == {("nuts", 3, 70, 90)}
