"""The CLIMB law as pure functions: special cases, hand-computed values, shapes, gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.model.law import (
    LawParams,
    effective_ratio,
    from_reference_units,
    log_loss,
    loss,
    optimal_direction,
    paper_direction,
    to_reference_units,
    transfer_strength,
)


def _params(m=3, seed=0, transfer=True):
    rng = np.random.default_rng(seed)
    off = 1 - np.eye(m)
    return LawParams(
        log_B=np.log(rng.uniform(200, 800, m)),
        beta=rng.uniform(0.2, 0.4, m),
        log_E=np.log(rng.uniform(1.5, 2.5, m)),
        b=rng.uniform(-0.1, 0.4, (m, m)) * off * transfer,
        k=rng.uniform(-1e8, 1e9, (m, m)) * off * transfer,
        eta=rng.uniform(2, 10, m),
    )


def test_no_transfer_gives_rt_equal_r():
    p = _params(transfer=False)
    r = np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    rt = effective_ratio(r, np.array([1e9, 1e10]), p.b, p.k, p.eta)
    np.testing.assert_allclose(rt, r, atol=0)


def test_hand_computed_effective_ratio_and_loss():
    # two languages: rt_0 = r_0 + (b_10 + k_10 / D) r_1 (1 - exp(-eta_0 r_0))
    b = np.array([[0.0, 0.2], [0.3, 0.0]])
    k = np.array([[0.0, 1e9], [5e8, 0.0]])
    eta = np.array([4.0, 2.0])
    r = np.array([0.25, 0.75])
    D = 1e10
    rt0 = 0.25 + (0.3 + 5e8 / 1e10) * 0.75 * (1 - np.exp(-4.0 * 0.25))
    rt1 = 0.75 + (0.2 + 1e9 / 1e10) * 0.25 * (1 - np.exp(-2.0 * 0.75))
    np.testing.assert_allclose(effective_ratio(r, D, b, k, eta), [rt0, rt1], rtol=1e-12)
    B, beta, E = np.array([400.0, 600.0]), np.array([0.3, 0.25]), np.array([2.0, 1.8])
    expected = B / (D * np.array([rt0, rt1])) ** beta + E
    got = loss(r, D, LawParams(np.log(B), beta, np.log(E), b, k, eta))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_transfer_strength_decays_to_b_and_has_zero_diagonal():
    p = _params()
    a = transfer_strength(np.array([1e8, 1e15]), p.b, p.k)
    assert np.all(np.diagonal(a, axis1=-2, axis2=-1) == 0)
    np.testing.assert_allclose(a[1], p.b, atol=1e-6)


def test_loss_decreases_in_budget_and_approaches_E():
    p = _params()
    r = np.array([0.5, 0.3, 0.2])
    D = np.logspace(8, 40, 30)
    L = np.asarray(loss(np.broadcast_to(r, (30, 3)), D, p))
    assert np.all(np.diff(L[:15], axis=0) < 0)  # strictly, while B/(D rt)^beta is resolvable
    assert np.all(np.diff(L, axis=0) <= 0)
    assert np.all(L >= np.exp(p.log_E))
    np.testing.assert_allclose(L[-1], np.exp(p.log_E), rtol=1e-3)


def test_log_space_matches_direct_formula_at_extreme_budgets():
    p = _params(transfer=False)
    r = np.array([1e-3, 0.5, 0.499])
    for D in (1e6, 1e12, 1e15):
        direct = np.exp(p.log_B) / (D * r) ** p.beta + np.exp(p.log_E)
        np.testing.assert_allclose(np.exp(log_loss(r, D, *p)), direct, rtol=1e-10)


def test_negative_transfer_guard_is_finite_with_finite_gradient():
    m = 2
    p = _params(m=m)._replace(b=np.array([[0.0, -5.0], [-5.0, 0.0]]), k=np.zeros((m, m)))
    r = np.array([0.05, 0.95])
    val = log_loss(r, 1e10, *p)
    assert np.all(np.isfinite(val))
    g = jax.grad(lambda b: log_loss(r, 1e10, p.log_B, p.beta, p.log_E, b, p.k, p.eta).sum())(
        jnp.asarray(p.b)
    )
    assert np.all(np.isfinite(g))
    # language 0 gets rt_0 = 0.05 - 5 * 0.95 * (1 - exp(-eta_0 0.05)) < 0: floored, so its
    # loss is far above the no-transfer loss
    assert effective_ratio(r, 1e10, p.b, p.k, p.eta)[0] < 0
    assert val[0] > log_loss(r, 1e10, *p._replace(b=np.zeros((m, m))))[0] + 1


def test_vectorised_over_draws_and_runs_equals_loop():
    p = _params()
    rng = np.random.default_rng(1)
    draws = LawParams(*[np.stack([np.asarray(x) * (1 + 0.01 * i) for i in range(4)]) for x in p])
    r = rng.dirichlet(np.ones(3), size=5)
    D = np.logspace(9, 11, 5)
    batched = np.asarray(
        log_loss(r[None], D[None], *[x[:, None] if x.ndim == 2 else x[:, None] for x in draws])
    )
    assert batched.shape == (4, 5, 3)
    for i in range(4):
        for n in range(5):
            single = log_loss(r[n], D[n], *[x[i] for x in draws])
            np.testing.assert_allclose(batched[i, n], single, rtol=1e-12)


def test_reference_units_round_trip_and_invariance():
    p = _params()
    r = np.array([0.2, 0.3, 0.5])
    q = to_reference_units(p, 1e10)
    np.testing.assert_allclose(log_loss(r, 3.0, *q), log_loss(r, 3e10, *p), rtol=1e-12)
    back = from_reference_units(q, 1e10)
    for a, b in zip(back, p, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_paper_direction_equal_parameters_is_uniform_and_matches_eq7():
    m = 4
    p = paper_direction(1e10, np.full(m, np.log(500.0)), np.full(m, 0.3))
    np.testing.assert_allclose(p, np.full(m, 0.25), rtol=1e-12)
    B, beta, w = np.array([300.0, 900.0]), np.array([0.2, 0.4]), np.array([1.0, 2.0])
    D = 1e10
    raw = (w * B * beta) ** (1 / (beta + 1)) * D ** (-beta / (beta + 1))
    got = paper_direction(D, np.log(B), beta, w)
    np.testing.assert_allclose(got, raw / raw.sum(), rtol=1e-12)


def _simplex_minimiser(B, beta, w, D):
    """The constrained minimiser of sum_i w_i B_i (D r_i)^-beta_i by SLSQP (independent check)."""
    from scipy.optimize import minimize

    res = minimize(
        lambda r: np.sum(w * B * (D * r) ** (-beta)) / np.sum(w * B * D ** (-beta)),
        np.full(B.size, 1.0 / B.size),
        method="SLSQP",
        bounds=[(1e-9, 1.0)] * B.size,
        constraints=[{"type": "eq", "fun": lambda r: r.sum() - 1.0}],
        options={"ftol": 1e-16, "maxiter": 1000},
    )
    return res.x


@pytest.mark.parametrize("D", [1e10, 1e12])
def test_optimal_direction_is_the_constrained_minimiser_for_unequal_beta(D):
    """Issue 16: with unequal exponents Eq. 7 is off by ~0.02 in share; the exact direction is
    the minimiser (to 1e-6) and does not move when the weights are rescaled."""
    B, beta = np.array([300.0, 900.0, 500.0]), np.array([0.25, 0.35, 0.30])
    w = np.array([1.0, 1.0, 1.0])
    truth = _simplex_minimiser(B, beta, w, D)
    got = np.asarray(optimal_direction(D, np.log(B), beta, w))
    np.testing.assert_allclose(got, truth, atol=1e-6)
    np.testing.assert_allclose(got.sum(), 1.0, atol=1e-12)
    assert np.max(np.abs(np.asarray(paper_direction(D, np.log(B), beta, w)) - truth)) > 2e-3
    for c in (0.1, 10.0, 1e4):
        np.testing.assert_allclose(optimal_direction(D, np.log(B), beta, c * w), got, atol=1e-12)
    # equal exponents: the exact direction is Eq. 7
    eq = np.full(3, 0.3)
    np.testing.assert_allclose(
        optimal_direction(D, np.log(B), eq, w), paper_direction(D, np.log(B), eq, w), atol=1e-12
    )
    # a zero weight gives a zero share; the rest is the minimiser over the others
    w0 = np.array([1.0, 0.0, 2.0])
    got0 = np.asarray(optimal_direction(D, np.log(B), beta, w0))
    assert got0[1] == 0.0
    sub = _simplex_minimiser(B[[0, 2]], beta[[0, 2]], w0[[0, 2]], D)
    np.testing.assert_allclose(got0[[0, 2]], sub, atol=1e-6)


@pytest.mark.parametrize("shape", [(3,), (7, 3)])
def test_loss_is_jittable(shape):
    p = _params()
    r = np.broadcast_to(np.array([0.2, 0.3, 0.5]), shape)
    D = np.full(shape[:-1], 1e10)
    np.testing.assert_allclose(jax.jit(loss)(r, D, p), loss(r, D, p), rtol=1e-12)
