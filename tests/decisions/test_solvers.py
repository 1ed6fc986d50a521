"""Mixture solvers (:mod:`climb_bayes.decisions.solvers`): known optima, share bounds, the
capped-simplex projection, and the batched fast path against scipy's ``trust-constr``."""

from __future__ import annotations

import numpy as np
import pytest

from climb_bayes.decisions.baselines import isolated_optimum
from climb_bayes.decisions.decision import bayes_decision, cvar_decision, draw_losses
from climb_bayes.decisions.optimization import thin_draws
from climb_bayes.decisions.solvers import (
    direct_batch,
    direct_trust_constr,
    magnitude_objective,
    project_capped_simplex,
    two_step_batch,
    two_step_trust_constr,
)
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


# -- share bounds and validity ------------------------------------------------------------------


@pytest.mark.parametrize(
    "lo, hi",
    [
        (np.zeros(M), np.ones(M)),
        (np.array([0.1, 0.0, 0.2]), np.array([1.0, 0.15, 1.0])),
        (np.array([0.25, 0.0, 0.0]), np.array([0.25, 1.0, 0.5])),  # a fixed share
        (np.zeros(M), np.array([0.5, 0.3, 0.2])),  # caps summing to 1: a single feasible point
    ],
)
def test_constraints_respected_by_every_solution(lo, hi, assert_valid_mixtures):
    law = example_draws(M, N, seed=1)
    w = np.array([0.4, 0.0, 0.6])  # a zero weight: that language may go to its bound
    for r in (
        direct_batch(law, D, w, lo, hi).x,
        two_step_batch(law, D, w, lo, hi, 100.0)[0].x,
        bayes_decision(law, D, w, lo, hi)[0],
        cvar_decision(law, D, w, lo, hi, 0.8)[0],
    ):
        assert_valid_mixtures(r, lo, hi)


def test_fast_path_matches_trust_constr_on_a_real_fit(nuts_fit3, assert_valid_mixtures):
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
        assert_valid_mixtures(fast.x, lo, hi)


def test_projection_onto_capped_simplex(assert_valid_mixtures):
    rng = np.random.default_rng(0)
    lo = np.array([0.0, 0.1, 0.2])
    hi = np.array([0.5, 1.0, 0.3])
    r = project_capped_simplex(rng.normal(size=(50, M)), lo, hi)
    assert_valid_mixtures(r, lo, hi)
