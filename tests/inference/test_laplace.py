"""Laplace approximation and the chain starts drawn from it (``mode_starts``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp

import climb_bayes  # noqa: F401
from climb_bayes.inference.laplace import (
    ModeStarts,
    evidence_picks,
    laplace_posterior,
    mode_starts,
)
from climb_bayes.inference.point_fit import newton_polish


def _two_bumps() -> None:
    """Two equally high modes at x = (-3, -3) and (3, 3), sd 0.5 each."""
    x = numpyro.sample("x", dist.Normal(0.0, 10.0).expand([2]).to_event(1))
    each = dist.Normal(jnp.array([[-3.0], [3.0]]), 0.5).log_prob(x).sum(-1)
    numpyro.factor("bumps", logsumexp(each))


def _skewed() -> None:
    """A posterior far from Gaussian in one direction: log-normal tail on exp(u)."""
    u = numpyro.sample("u", dist.Normal(0.0, 3.0))
    numpyro.sample("y", dist.Exponential(jnp.exp(u)), obs=jnp.full(20, 0.1))
    numpyro.sample("v", dist.Normal(u, 0.1))


def _potential(model, z: dict) -> float:
    from numpyro.infer.util import potential_energy

    return float(potential_energy(model, (), {}, {k: jnp.asarray(v) for k, v in z.items()}))


def test_each_chain_keeps_the_mode_its_search_reached():
    starts = {"x": np.array([[-2.0, -2.5], [2.5, 2.0], [-3.5, -2.0], [1.0, 3.5]])}
    res = mode_starts(_two_bumps, (), {"x": np.zeros(2)}, starts, key=jax.random.PRNGKey(0))
    assert res.modes == 2  # equal heights: told apart by location, not by potential
    np.testing.assert_array_equal(np.sign(res.init_params["x"][:, 0]), [-1, 1, -1, 1])
    np.testing.assert_allclose(res.potentials[0], res.potentials[1], atol=1e-6)
    assert res.inverse_mass.shape == (2, 2)


def test_one_mode_is_counted_once_and_starts_stay_in_the_typical_band():
    starts = {"u": np.array([-3.0, 0.0, 2.0, 4.0]), "v": np.array([0.0, 1.0, -1.0, 2.0])}
    res = mode_starts(
        _skewed, (), {"u": 0.0, "v": 0.0}, starts, key=jax.random.PRNGKey(1), dense=False
    )
    assert res.modes == 1
    assert res.inverse_mass.shape == (2,)
    band = 0.5 * 2 + 3.0 * np.sqrt(0.5 * 2)
    for c in range(4):
        z = {k: v[c] for k, v in res.init_params.items()}
        assert _potential(_skewed, z) - res.potentials[c] <= band + 1e-9
    # dispersed, not four copies of the mode
    assert np.ptp(res.init_params["u"]) > 0.01


def _searches(labels: list[int], log_evidence: list[float]) -> ModeStarts:
    n = len(labels)
    return ModeStarts({}, np.zeros(n), np.eye(1), max(labels) + 1, np.array(log_evidence),
                      np.array(labels))  # fmt: skip


def test_chains_start_at_modes_in_proportion_to_their_evidence():
    """One mode: every chain keeps its own search (whatever the searches' small evidence
    differences). Two equal modes reached by 3 and 1 searches: two chains each (the mode's
    evidence is shared among its searches, not multiplied by them). A mode 18 nats below the
    other (e^-18 of the mass): no chain."""
    for k in range(5):
        key = jax.random.PRNGKey(k)
        one = evidence_picks(_searches([0, 0, 0, 0], [1.0, 1.4, 1.0, 1.4]), 4, key)
        np.testing.assert_array_equal(one, [0, 1, 2, 3])
        split = evidence_picks(_searches([0, 0, 0, 1], [0.0, 0.0, 0.0, 0.0]), 4, key)
        assert np.sum(split == 3) == 2 and set(split[split != 3]) <= {0, 1, 2}
        lopsided = evidence_picks(_searches([0, 1, 0, 1], [0.0, -18.0, 0.0, -18.0]), 4, key)
        assert set(lopsided) <= {0, 2}
    failed = evidence_picks(_searches([-1, 0, -1, 0], [-np.inf, 0.0, -np.inf, 0.0]), 4, key)
    assert set(failed) <= {1, 3}


_D = 12
_Q = np.linalg.qr(np.random.default_rng(0).normal(size=(_D, _D)))[0]
_SCALES = 10.0 ** np.linspace(-3.0, 1.0, _D)
_MU = np.linspace(-1.0, 1.0, _D)


def _ill_conditioned() -> None:
    """A Gaussian posterior whose sds span 1e-3 to 1 along rotated axes (condition number
    ~1e6, like a CLIMB posterior's Hessian), so the Laplace approximation is exact."""
    z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([_D]).to_event(1))
    w = jnp.asarray(_Q).T @ (z - jnp.asarray(_MU)) / jnp.asarray(_SCALES)
    numpyro.factor("data", -0.5 * jnp.sum(w**2))


def test_laplace_reaches_the_mode_where_lbfgs_stops_short():
    """With 25 L-BFGS iterations on a condition number of 1e6 the search stops far from the
    mode (thin directions unconverged); the Newton polish still lands on it, so the Laplace
    mean and sds are the exact posterior's."""
    precision = _Q @ np.diag(_SCALES**-2.0) @ _Q.T + np.eye(_D)
    cov = np.linalg.inv(precision)
    mean = cov @ (_Q @ np.diag(_SCALES**-2.0) @ _Q.T @ _MU)
    res = laplace_posterior(
        _ill_conditioned, (), {"z": np.zeros(_D)}, key=jax.random.PRNGKey(0), n_draws=4000,
        max_iter=25,
    )  # fmt: skip
    z = res.samples["z"]
    assert res.converged and res.min_eigenvalue > 0.5
    whitened = np.linalg.cholesky(precision).T @ (z.mean(axis=0) - mean)
    assert np.abs(whitened).max() < 0.1  # within 0.1 posterior sd in every direction
    np.testing.assert_allclose(z.std(axis=0), np.sqrt(np.diag(cov)), rtol=0.06)


def test_chain_starts_are_polished_to_the_mode_where_lbfgs_stops_short():
    """``mode_starts`` with 25 L-BFGS iterations on the condition number of 1e6: every search
    still reports the mode's potential (each is polished), one mode, and the inverse Hessian
    there; unpolished, the searches stop above the mode (the code before the polish failed
    this)."""
    precision = _Q @ np.diag(_SCALES**-2.0) @ _Q.T + np.eye(_D)
    mean = np.linalg.solve(precision, _Q @ np.diag(_SCALES**-2.0) @ _Q.T @ _MU)
    starts = {"z": np.random.default_rng(1).normal(size=(4, _D))}
    res = mode_starts(
        _ill_conditioned, (), {"z": np.zeros(_D)}, starts, key=jax.random.PRNGKey(0), max_iter=25
    )
    np.testing.assert_allclose(res.potentials, _potential(_ill_conditioned, {"z": mean}), atol=1e-8)
    assert res.modes == 1
    np.testing.assert_allclose(res.inverse_mass, np.linalg.inv(precision), atol=1e-10)


def test_newton_polish_never_leaves_a_minimum_worse():
    def bowl(x: jax.Array) -> jax.Array:
        return jnp.sum((x - 1.0) ** 2 * jnp.arange(1.0, 4.0))

    res = newton_polish(bowl, np.ones(3))
    assert res.fun == 0.0 and np.array_equal(res.x, np.ones(3))
    res = newton_polish(bowl, np.array([5.0, -2.0, 0.5]))
    assert res.success and np.allclose(res.x, 1.0, atol=1e-8)
    # one trust-region step (radius 1) from 4 away is not at the mode, and says so
    assert not newton_polish(bowl, np.array([5.0, -2.0, 0.5]), max_iter=1).success


def _unequal_bumps() -> None:
    """Two Gaussian bumps at x = (-3, -3) (sd 0.5, mass 3/4) and (3, 3) (sd 0.25, mass 1/4):
    the narrower one has the higher peak (by a factor 4 x 1/3 = 4/3)."""
    x = numpyro.sample("x", dist.Normal(0.0, 1e3).expand([2]).to_event(1))
    each = jnp.stack([
        jnp.log(0.75) + dist.Normal(-3.0, 0.5).log_prob(x).sum(-1),
        jnp.log(0.25) + dist.Normal(3.0, 0.25).log_prob(x).sum(-1),
    ])  # fmt: skip
    numpyro.factor("bumps", logsumexp(each))


def test_laplace_mixes_the_modes_its_searches_reach_by_their_evidence():
    """From the left bump's side alone: the plain Laplace approximation there. With a start on
    each side: draws at both bumps in proportion to their mass (3/4, 1/4), not to their
    heights (the right bump's density peak is 4/3 times the left one's), each bump with its own
    sd. A wrong weighting (by potential: 3/7, or equal: 1/2) fails the share test."""
    one = laplace_posterior(
        _unequal_bumps, (), {"x": np.array([-2.0, -2.0])}, key=jax.random.PRNGKey(0),
        n_draws=2000,
    )  # fmt: skip
    assert one.mode_weights.size == 1 and np.all(one.samples["x"] < 0)
    both = laplace_posterior(
        _unequal_bumps, (), {"x": np.array([-2.0, -2.0])}, key=jax.random.PRNGKey(0),
        n_draws=2000, starts={"x": np.array([[2.0, 2.5], [-3.5, -2.5]])},
    )  # fmt: skip
    x = both.samples["x"]
    left = x[:, 0] < 0
    np.testing.assert_allclose(both.mode_weights, [0.75, 0.25], atol=1e-6)
    np.testing.assert_allclose(np.sort(both.mode_potentials), both.mode_potentials[::-1])
    assert abs(left.mean() - 0.75) <= 1 / 2000  # systematic resampling: exact to one draw
    np.testing.assert_allclose(x[left].mean(0), [-3, -3], atol=0.05)
    np.testing.assert_allclose(x[~left].mean(0), [3, 3], atol=0.05)
    np.testing.assert_allclose(x[left].std(0), [0.5, 0.5], rtol=0.08)
    np.testing.assert_allclose(x[~left].std(0), [0.25, 0.25], rtol=0.08)
    assert both.converged and both.potential == both.mode_potentials[0]


def _spike_and_slab() -> None:
    """Half the mass in a spike of sd 0.1 at 0, half in a slab of sd 3 around it: the curvature
    at the mode is the spike's, the spread the slab's."""
    x = numpyro.sample("x", dist.Normal(0.0, 100.0))
    both = jnp.stack([dist.Normal(0.0, 0.1).log_prob(x), dist.Normal(0.0, 3.0).log_prob(x)])
    numpyro.factor("mix", logsumexp(both) - jnp.log(2.0))


def test_pareto_k_tells_a_gaussian_posterior_from_a_heavy_tailed_one():
    """The Laplace fit's Pareto k (Yao et al. 2018): the two-bump mixture is exactly a mixture
    of Gaussians, which the approximation reproduces (k well below 0.7); a spike-and-slab
    posterior has mass far beyond the curvature at its mode (k above 0.7)."""
    from climb_bayes.inference.laplace import approximation_pareto_k, pareto_k_threshold

    starts = {"x": np.array([[2.0, 2.5], [-3.5, -2.5]])}
    key = jax.random.PRNGKey(0)
    both = laplace_posterior(
        _unequal_bumps, (), {"x": np.array([-2.0, -2.0])}, key=key, n_draws=4000, starts=starts
    )
    heavy = laplace_posterior(_spike_and_slab, (), {"x": np.array(0.5)}, key=key, n_draws=4000)
    assert pareto_k_threshold(4000) == 0.7 and round(pareto_k_threshold(400), 3) == 0.616
    assert both.pareto_k < 0.3, both.pareto_k
    assert heavy.pareto_k > 0.7, heavy.pareto_k
    assert approximation_pareto_k(np.full(100, 3.0)) < 0.7  # q = p up to a constant
    assert approximation_pareto_k(np.r_[np.zeros(99), np.inf]) == np.inf


def _bounded_with_deterministic(y: jax.Array) -> None:
    """Sites with a lower bound, an interval and a deterministic site."""
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0))
    df = numpyro.sample("df", dist.Uniform(2.0, 30.0))
    loc = numpyro.sample("loc", dist.Normal(0.0, 5.0))
    numpyro.deterministic("spread", scale * jnp.sqrt(df / (df - 2.0)))
    numpyro.sample("y", dist.StudentT(df, loc, scale), obs=y)


def _dynamic_support(y: jax.Array) -> None:
    """A support that depends on another site: only NumPyro's own set-up handles it."""
    low = numpyro.sample("low", dist.Normal(0.0, 1.0))
    high = numpyro.sample("high", dist.Uniform(low, low + 5.0))
    numpyro.sample("y", dist.Normal(high, 1.0), obs=y)


def test_flat_model_matches_numpyro_initialize_model():
    from climb_bayes.inference.laplace import _initialize_model, flat_model

    y = jnp.array([0.3, -1.2, 2.5, 0.8, 4.0])
    key = jax.random.PRNGKey(3)
    cases = [
        (_bounded_with_deterministic, {"scale": 1.5, "df": 6.0, "loc": 0.4}, True),
        (_dynamic_support, {"low": 0.5, "high": 2.0}, False),  # falls back
        (_bounded_with_deterministic, {"scale": 1.5, "df": 6.0}, False),  # loc has no value
    ]
    points = np.random.default_rng(0).normal(size=(4, 3))
    for model, init, abstract in cases:
        info, z0, unravel, potential = flat_model(model, (y,), init, key)
        assert (info.model_trace is None) == abstract
        ref = _initialize_model(model, (y,), init, key)
        z_ref, unravel_ref = jax.flatten_util.ravel_pytree(ref.param_info.z)
        if abstract:  # the start is exactly the given values, unconstrained
            np.testing.assert_allclose(z0, z_ref, rtol=0, atol=0)
        for x in z0 + 0.3 * points[:, : z0.size]:
            x = jnp.asarray(x)
            np.testing.assert_allclose(
                float(potential(x)), float(ref.potential_fn(unravel_ref(x))), rtol=1e-12
            )
            got, want = info.postprocess_fn(unravel(x)), ref.postprocess_fn(unravel_ref(x))
            assert sorted(got) == sorted(want)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-12)


def test_laplace_fits_of_equal_shapes_share_compiled_programs(backend_compiles):
    """The model's data enter the compiled potential, gradient, Hessian and batched
    post-processing as arguments: a second fit of other data of the same shapes compiles
    nothing (each compiled its own when the data were constants of the programs), and each
    fit is still its own data's."""
    from climb_bayes.inference.argument_potential import ArgumentPotential
    from climb_bayes.inference.laplace import flat_model

    init = {"scale": 1.5, "df": 6.0, "loc": 0.4}
    key = jax.random.PRNGKey(0)
    y1 = jnp.array([0.3, -1.2, 2.5, 0.8, 4.0])
    y2 = y1 + 3.0
    first = laplace_posterior(_bounded_with_deterministic, (y1,), init, key=key, n_draws=200)
    with backend_compiles() as compiles:
        second = laplace_posterior(_bounded_with_deterministic, (y2,), init, key=key, n_draws=200)
    assert compiles == []
    # the location follows its own data; the deterministic site comes back with the draws
    assert abs(np.median(second.samples["loc"]) - np.median(first.samples["loc"]) - 3.0) < 0.3
    np.testing.assert_allclose(
        second.samples["spread"],
        second.samples["scale"] * np.sqrt(second.samples["df"] / (second.samples["df"] - 2.0)),
        rtol=1e-12,
    )
    _, z0, _, potential = flat_model(_bounded_with_deterministic, (y2,), init, key)
    assert isinstance(potential, ArgumentPotential)
    np.testing.assert_allclose(float(potential(z0)), _potential_at(init, y2), rtol=1e-12)


def _potential_at(init: dict, y: jax.Array) -> float:
    from numpyro.infer.util import potential_energy, unconstrain_fn

    z = unconstrain_fn(_bounded_with_deterministic, (y,), {}, init)
    return float(potential_energy(_bounded_with_deterministic, (y,), {}, z))


def _python_branch_on_data(y: jax.Array, shift: float) -> None:
    """A model whose Python code needs a concrete value of an argument."""
    loc = numpyro.sample("loc", dist.Normal(0.0, 5.0))
    if shift > 0:
        loc = loc + shift
    numpyro.sample("y", dist.Normal(loc, 1.0), obs=y)


def test_a_model_that_needs_concrete_arguments_keeps_its_closure():
    from climb_bayes.inference.argument_potential import ArgumentPotential, argument_potential
    from climb_bayes.inference.laplace import flat_model

    y = jnp.array([1.0, 2.0, 3.0])
    key = jax.random.PRNGKey(0)
    z = {"loc": jnp.array(0.0)}
    assert argument_potential(_python_branch_on_data, (y, 1.0), z, key, deterministic=False) is None
    _, z0, _, potential = flat_model(_python_branch_on_data, (y, 1.0), {"loc": 0.0}, key)
    assert not isinstance(potential, ArgumentPotential)
    res = laplace_posterior(_python_branch_on_data, (y, 1.0), {"loc": 0.0}, key=key, n_draws=400)
    # posterior of loc: Normal(sum(y - 1) / (3 + 1/25), 1 / sqrt(3 + 1/25))
    np.testing.assert_allclose(np.mean(res.samples["loc"]), 3.0 / 3.04, atol=0.1)


def _gaussian(precision) -> None:
    """A Gaussian posterior with the given precision matrix, mode at 0."""
    numpyro.sample(
        "x", dist.MultivariateNormal(jnp.zeros(precision.shape[0]), precision_matrix=precision)
    )


def test_laplace_draws_are_continuous_in_the_hessian():
    """Two posteriors whose precisions differ by 1e-7 (a nearly repeated eigenvalue, split in
    two different directions) must give the same draws to within 1e-5 from one key. Draws through
    the Hessian's eigenvectors fail this at O(1): the near-repeated eigenvalue's basis, and
    every eigenvector's sign, follow the perturbation (the default fit's stacking weights
    flipped between laws with rounding-level changes that way). Both keep the covariance."""
    base = np.diag([2.0, 2.0, 2.0, 5.0])
    base[3, 0] = base[0, 3] = 0.5
    draws = []
    for i, j in ((0, 1), (1, 2)):
        precision = base.copy()
        precision[i, j] += 1e-7
        precision[j, i] += 1e-7
        res = laplace_posterior(
            _gaussian, (jnp.asarray(precision),), {"x": np.zeros(4)},
            key=jax.random.PRNGKey(3), n_draws=4000,
        )  # fmt: skip
        assert res.converged and res.mode_weights.size == 1
        np.testing.assert_allclose(np.cov(res.samples["x"].T), np.linalg.inv(precision), atol=0.02)
        draws.append(res.samples["x"])
    assert np.abs(draws[0] - draws[1]).max() < 1e-5


def _dip_in_a_broad_basin() -> None:
    """0.75 N(0, I) + 0.25 N((1, 1), 0.3^2 I) in 2-d: a broad minimum at 0 and a deeper,
    narrow one at (1, 1) inside its typical set. Mean 0.25 per coordinate."""
    x = numpyro.sample("x", dist.Normal(0.0, 10.0).expand([2]).to_event(1))
    each = jnp.stack([
        jnp.log(0.75) + dist.Normal(0.0, 1.0).log_prob(x).sum(),
        jnp.log(0.25) + dist.Normal(1.0, 0.3).log_prob(x).sum(),
    ])  # fmt: skip
    numpyro.factor("mix", logsumexp(each))


def test_polishes_from_the_found_gaussian_find_the_minima_inside_it():
    """The search from (-1, -1) ends at the broad minimum only. Polishes from draws of its
    Gaussian (NEIGHBOUR_POLISHES) find the deeper minimum inside its typical set on most seeds
    (without them: on none), and the mixture over both has the true mean (0.25; the broad
    Gaussian alone: 0)."""
    found = 0
    for seed in range(8):
        res = laplace_posterior(
            _dip_in_a_broad_basin, (), {"x": np.array([-1.0, -1.0])},
            key=jax.random.PRNGKey(seed), n_draws=4000,
        )  # fmt: skip
        if res.mode_weights.size == 2:
            found += 1
            np.testing.assert_allclose(res.samples["x"].mean(0), [0.25, 0.25], atol=0.08)
            np.testing.assert_allclose(res.samples["x"].std(0), [0.98, 0.98], atol=0.05)
    assert found >= 5
