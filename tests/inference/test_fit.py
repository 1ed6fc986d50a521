"""NUTS on simulated data: parameter recovery, extrapolation, and failure of a wrong model.

One converged 3-language fit (4 chains) is shared by the module; the no-transfer control is a
second fit whose transfer priors are squeezed to ~0 (the Isolated law).
"""

from __future__ import annotations

import numpy as np
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.data.design import algorithm1_design, holdout_design
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.inference.fitting import fit_runs
from climb_bayes.inference.nuts import NutsConfig
from climb_bayes.model.law import log_loss
from climb_bayes.model.observation import ONE_POINT_DF_MIN
from climb_bayes.model.priors import Priors
from climb_bayes.model.simulate import example_params, simulate_runs

LANGS = ("en", "de", "zh")
# Three budgets (the paper's design uses two): recovery of every transfer pair needs the budget
# dependence alpha(D) = b + k / D to be seen at more than two points; with two budgets b and k of
# some pairs are only weakly identified and chains mix slowly (measured: R-hat 1.13).
BUDGETS = (2e9, 1e10, 5e10)
EXTRAPOLATION_BUDGET = 5e11  # 10x the largest fitted budget
CONFIG = NutsConfig(chains=4, warmup=600, samples=1000, progress_bar=False)
# The no-transfer control only needs its posterior median (what _extrapolation_error reads):
# 2 x 300 draws put its worst 10x error at 0.047 (R-hat 1.03), three times the 0.015 the check
# asks of it, in 33 s instead of CONFIG's 112 s (2-core Intel Xeon, 2026-12-03).
CONTROL_CONFIG = NutsConfig(chains=2, warmup=300, samples=300, progress_bar=False)


@pytest.fixture(scope="module")
def world():
    return example_params(LANGS, seed=3, sigma=0.005)


@pytest.fixture(scope="module")
def runs(world):
    design = algorithm1_design(LANGS, BUDGETS, shares=(0.2, 0.6))
    return runs_from_frame(simulate_runs(world, design, seed=11))


@pytest.fixture(scope="module")
def fit(runs):
    return fit_runs(runs, method="nuts", config=CONFIG, seed=1)


@pytest.fixture(scope="module")
def isolated_fit(runs):
    squeezed = Priors(transfer_scale=1e-4, decay_scale=1e-4)
    return fit_runs(runs, squeezed, method="nuts", config=CONTROL_CONFIG, seed=1)


def _covered(draws: np.ndarray, truth: np.ndarray, level: float = 0.9) -> np.ndarray:
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return (lo <= truth) & (truth <= hi)


def _extrapolation_error(fit, world) -> np.ndarray:
    design = holdout_design(LANGS, EXTRAPOLATION_BUDGET, 8, seed=5, spread=False)
    r = design[[f"r_{x}" for x in LANGS]].to_numpy()
    truth = np.exp(np.asarray(log_loss(r, EXTRAPOLATION_BUDGET, *world.law())))
    p = fit.law_draws()
    pred = np.exp(
        np.asarray(
            log_loss(r[None], EXTRAPOLATION_BUDGET, *[x[:, None] for x in p])  # (draws, runs, m)
        )
    )
    return np.abs(np.median(pred, axis=0) / truth - 1)


def test_sampler_converged(fit):
    d = fit.diagnostics
    assert d.divergences == 0, d.report()
    assert d.max_rhat < 1.05, d.report()


def test_90pct_intervals_cover_true_parameters(fit, world):
    for name, truth in (("B", world.B), ("beta", world.beta), ("E", world.E), ("eta", world.eta)):
        cov = _covered(fit.draws(name), truth)
        assert cov.all(), f"{name}: truth {truth} not in 90% interval for {np.flatnonzero(~cov)}"
    # b and k pooled: 12 off-diagonal values. A calibrated 90% posterior covers all 6 of one
    # family only with probability 0.53, >= 10 of 12 with probability 0.89; the natural-scale
    # transfer prior this replaced covered 45% of b on the synthetic world (docs/model.md).
    off = ~np.eye(len(LANGS), dtype=bool)
    hits = [_covered(fit.draws(n), t)[off] for n, t in (("b", world.b), ("k", world.k))]
    rate = np.concatenate(hits).mean()
    assert rate >= 10 / 12, f"b, k: only {rate:.0%} of true values inside 90% intervals"


def test_extrapolation_to_10x_budget_within_tolerance(fit, world):
    err = _extrapolation_error(fit, world)
    # CLIMB's own law refitted: posterior-median loss at 10x the largest budget within 1.5%
    assert err.max() < 0.015, err


def test_model_without_transfer_fails_the_same_check(isolated_fit, world):
    err = _extrapolation_error(isolated_fit, world)
    assert err.max() > 0.015, err


def test_same_seed_gives_identical_draws(runs):
    small = NutsConfig(chains=2, warmup=50, samples=40, progress_bar=False)
    a = fit_runs(runs, method="nuts", config=small, seed=7)
    b = fit_runs(runs, method="nuts", config=small, seed=7)
    c = fit_runs(runs, method="nuts", config=small, seed=8)
    np.testing.assert_array_equal(a.draws("beta"), b.draws("beta"))
    np.testing.assert_array_equal(a.draws("b"), b.draws("b"))
    assert not np.array_equal(a.draws("beta"), c.draws("beta"))


def test_a_single_chain_runs(runs):
    # NumPyro takes one chain's starts without the chain axis (this crashed before)
    one = fit_runs(runs, config=NutsConfig(chains=1, warmup=50, samples=50, progress_bar=False))
    assert one.tree["posterior"].sizes["chain"] == 1
    assert one.tree["posterior"].sizes["draw"] == 50


def test_one_point_per_run_fits_without_the_unidentified_run_effect(sim_frame3):
    """A table of final losses (one point per run and language, as RegMix publishes) cannot
    separate run-level from point-level noise: the fit uses one noise scale and says so."""
    final = sim_frame3[sim_frame3["tokens_seen"] == sim_frame3["budget_tokens"]]
    lines: list[str] = []
    fit = fit_runs(runs_from_frame(final), method="map", seed=0, n_starts=2, log=lines.append)
    assert fit.priors.run_effect is False and fit.priors.student_df_min == ONE_POINT_DF_MIN
    assert "sigma_run" not in fit.tree["posterior"].data_vars
    assert float(fit.tree["posterior"]["df"].min()) >= ONE_POINT_DF_MIN
    assert any("run effect off" in line for line in lines)
    # the same runs with their tails keep it
    tails = fit_runs(runs_from_frame(sim_frame3), method="map", seed=0, n_starts=2)
    assert tails.priors.run_effect is True and "sigma_run" in tails.tree["posterior"].data_vars


@pytest.fixture(scope="module")
def laplace_fit(runs):
    return fit_runs(runs, method="laplace", config=CONFIG, seed=1)


def test_laplace_fit_recovers_what_nuts_recovers(laplace_fit, fit, world, tmp_path):
    """``method="laplace"``: the same model at its modes, ``samples`` draws as one chain. It
    must recover the simulated world as NUTS does (the same 90% checks and the 10x
    extrapolation tolerance) and sit where NUTS's posterior is (medians within half a NUTS
    posterior sd for the per-language parameters)."""
    from climb_bayes.inference.convergence import fit_gate
    from climb_bayes.inference.fitresult import load_fit

    post = laplace_fit.tree["posterior"]
    assert (post.sizes["chain"], post.sizes["draw"]) == (1, CONFIG.samples)
    assert laplace_fit.diagnostics is None and "sample_stats" not in laplace_fit.tree.children
    assert laplace_fit.attrs["laplace_converged"] == 1
    # The Gaussian at the mode is only roughly this posterior's shape: its Pareto k, estimated
    # from 4,000 or 16,000 draws with seeds 0-3, is 0.70-0.93 (2026-12-02), at the 0.7 line, and
    # from the 1,000 draws here 0.57-1.03 by seed and machine (this test's seed gave <= 0.67 on
    # the machines before, 0.995 on that day's). So the gate may flag it, but for nothing else.
    k, k_max = laplace_fit.attrs["laplace_pareto_k"], laplace_fit.attrs["laplace_pareto_k_max"]
    assert 0.3 < k < 1.5 and k_max == pytest.approx(1 - 1 / 3)
    gate = fit_gate(laplace_fit)
    assert (k > k_max) == (not gate.ok)
    assert all(p.kind == "approximation" for p in gate.problems)
    for name, truth in (("B", world.B), ("beta", world.beta), ("E", world.E), ("eta", world.eta)):
        cov = _covered(laplace_fit.draws(name), truth)
        assert cov.all(), f"{name}: truth {truth} not in 90% interval for {np.flatnonzero(~cov)}"
        gap = np.abs(np.median(laplace_fit.draws(name), 0) - np.median(fit.draws(name), 0))
        assert np.all(gap < 0.5 * np.std(fit.draws(name), 0)), (name, gap)
    assert _extrapolation_error(laplace_fit, world).max() < 0.015
    path = tmp_path / "laplace.nc"
    laplace_fit.save(path)
    again = load_fit(path)
    assert again.method == "laplace" and again.method_label == "Laplace approximation"
    np.testing.assert_array_equal(again.draws("b"), laplace_fit.draws("b"))


def test_laplace_fit_whose_mode_search_failed_or_whose_pareto_k_is_high_is_flagged(laplace_fit):
    from climb_bayes.inference.convergence import fit_gate
    from climb_bayes.inference.fitresult import Fit

    def gate_with(**attrs):
        tree = laplace_fit.tree.copy()
        tree.attrs = {**tree.attrs, **attrs}
        return fit_gate(Fit(tree))

    gate = gate_with(laplace_converged=0, laplace_pareto_k=0.3)
    assert gate.problems == ("climb: optimizer did not converge",)
    assert "Refit with --method nuts" in gate.warning()
    gate = gate_with(laplace_pareto_k=2.1)
    assert gate.problems == (
        "climb: Laplace approximation: Pareto k 2.10 > 0.67 (the posterior is far from the "
        "Gaussian at its mode)",
    )
    assert gate.problems[0].kind == "approximation"
    assert "Refit with --method nuts" in gate.warning()
