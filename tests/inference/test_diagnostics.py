"""Convergence diagnostics: each check fires on the sampler pathology it is for."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from climb_bayes.inference.diagnostics import Diagnostics, compute_diagnostics


def _datasets(draws, *, diverging=None, energy=None, n_steps=None):
    chains, n = draws.shape[:2]
    rng = np.random.default_rng(1)
    post = xr.Dataset({"theta": (("chain", "draw", "k"), draws)})
    stats = xr.Dataset(
        {
            "diverging": (
                ("chain", "draw"),
                np.zeros((chains, n), bool) if diverging is None else diverging,
            ),  # fmt: skip
            "energy": (
                ("chain", "draw"),
                rng.normal(size=(chains, n)) if energy is None else energy,
            ),  # fmt: skip
            "n_steps": (
                ("chain", "draw"),
                np.full((chains, n), 7) if n_steps is None else n_steps,
            ),  # fmt: skip
        }
    )
    return post, stats


def test_independent_chains_pass():
    draws = np.random.default_rng(0).normal(size=(4, 1000, 3))
    d = compute_diagnostics(*_datasets(draws), 10, ["theta"])
    assert d.ok, d.problems
    assert d.max_rhat < 1.01 and d.min_ess_bulk > 2000 and d.n_draws == 4000


def test_a_stuck_chain_fails_rhat_and_names_the_parameter():
    draws = np.random.default_rng(0).normal(size=(4, 1000, 3))
    draws[3, :, 2] += 1.0  # one chain in another mode for parameter 2
    d = compute_diagnostics(*_datasets(draws), 10, ["theta"])
    assert not d.ok and d.max_rhat > 1.05
    assert any(p.startswith("R-hat") and "theta[2]" in p for p in d.problems)


def test_autocorrelated_chains_fail_ess():
    rng = np.random.default_rng(0)
    eps = rng.normal(size=(4, 1000, 1))
    x = np.zeros_like(eps)
    for t in range(1, 1000):  # AR(1) with rho 0.97: ESS per draw ~0.015
        x[:, t] = 0.97 * x[:, t - 1] + eps[:, t]
    d = compute_diagnostics(*_datasets(x), 10, ["theta"])
    assert d.min_ess_bulk < 400
    assert any(p.startswith("bulk ESS") for p in d.problems)


def test_divergences_depth_and_bfmi_are_counted():
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(2, 1000, 1))
    div = np.zeros((2, 1000), bool)
    div[0, :3] = True
    steps = np.full((2, 1000), 1023)  # every draw at depth 10
    walk = np.cumsum(rng.normal(size=(2, 1000)), axis=1)  # energy as a random walk: E-BFMI ~0
    d = compute_diagnostics(
        *_datasets(draws, diverging=div, energy=walk, n_steps=steps), 10, ["theta"]
    )
    assert d.divergences == 3
    assert d.treedepth_saturated == 2000
    assert d.min_bfmi < 0.3
    text = " ".join(d.problems)
    assert "3 divergent" in text and "max tree depth" in text and "E-BFMI" in text


def test_divergences_name_the_language_blocks_they_came_from():
    """The language-block sampler's fit says which blocks diverged (most first), so a user
    sees one hard language rather than a fit-wide count."""
    draws = np.random.default_rng(0).normal(size=(2, 1000, 1))
    div = np.zeros((2, 1000), bool)
    div[1, :5] = True
    blocks = {"en": 0, "ubuntu_irc": 4, "de": 1}
    d = compute_diagnostics(
        *_datasets(draws, diverging=div), 10, ["theta"], block_divergences=blocks
    )
    (line,) = [p for p in d.problems if "divergent" in p]
    assert line.startswith("5 divergent transitions (language blocks: ubuntu_irc 4, de 1)")
    assert "en 0" not in line  # blocks without divergences are not listed


@pytest.mark.parametrize(
    ("target", "raise_to", "geometry"),
    [(0.95, "0.975", False), (0.98, "0.99", True), (0.995, None, True)],
)
def test_divergence_advice_follows_the_target_acceptance(target, raise_to, geometry):
    """Below 0.98 the advice is a higher target; from 0.98 it also says that divergences
    which survive ~0.99 are the posterior's geometry (RegMix's ubuntu_irc block), and at
    0.99 or above it no longer tells the user to raise it."""
    draws = np.random.default_rng(0).normal(size=(2, 1000, 1))
    div = np.zeros((2, 1000), bool)
    div[0, :3] = True
    d = compute_diagnostics(*_datasets(draws, diverging=div), 10, ["theta"], target_accept=target)
    (line,) = [p for p in d.problems if "divergent" in p]
    if raise_to is None:
        assert "raise --target-accept" not in line
    else:
        assert f"raise --target-accept (e.g. {raise_to})" in line
    assert ("posterior's geometry" in line) is geometry
    assert ("evaluate --lfo" in line) is geometry


def test_json_round_trip_and_report():
    draws = np.random.default_rng(0).normal(size=(4, 500, 2))
    d = compute_diagnostics(*_datasets(draws), 10, ["theta"])
    back = Diagnostics.from_json(d.to_json())
    assert back == d
    assert "verdict" in d.report()
