"""The CLIMB model's sampled transfer coordinates: on one budget, the transfer at that budget."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from climb_bayes.model.climb_model import (
    draw_prior,
    model_data,
    model_trace,
    pair_indices,
    sampler_coordinates,
    transfer_budget,
)
from climb_bayes.model.priors import Priors


def _latent(draw: dict, priors: Priors, data) -> dict:
    natural = ("log_A", "log_E", "beta", "eta", "sigma", "sigma_run", "df", "b_offdiag",
               "kappa_offdiag")  # fmt: skip
    return sampler_coordinates({k: draw[k] for k in natural if k in draw}, data, priors)


def test_transfer_budget_is_the_one_budget_or_infinite(runs3):
    """One budget (a spread under a factor 2): its harmonic mean; several: inf (``b`` itself)."""
    assert transfer_budget(np.full(7, 3.0)) == pytest.approx(3.0)
    assert transfer_budget(np.array([1.0, 1.5])) == pytest.approx(1.2)
    assert transfer_budget(np.array([1.0, 2.0])) == np.inf
    assert model_data(runs3, Priors()).transfer_budget == np.inf  # 5e9 and 2.5e10 tokens


@pytest.mark.parametrize("d_star", [0.3, 1.0, 7.0, np.inf])
def test_transfer_coordinates_keep_the_stated_prior(runs3, d_star):
    """The prior density of ``(b_saturated, kappa_saturated)`` is Normal(0, s_b) at
    ``b s`` times Normal(0, s_k) at ``kappa s`` (unit Jacobian), whatever ``d*``: a wrong
    conditional mean or sd breaks it."""
    priors = Priors(transfer_scale=0.4, decay_scale=0.7)
    data = model_data(runs3, priors)._replace(transfer_budget=d_star)
    draw = draw_prior(jax.random.PRNGKey(5), data, priors)
    trace = model_trace(_latent(draw, priors, data), data, priors)
    got = sum(
        float(jnp.sum(trace[n]["fn"].log_prob(trace[n]["value"])))
        for n in ("b_saturated", "kappa_saturated")
    )
    _, target = pair_indices(data.point_r.shape[-1])
    sat = -np.expm1(-draw["eta"] * data.reference_share)[target]
    want = stats.norm(0, 0.4).logpdf(draw["b_offdiag"] * sat).sum()
    want += stats.norm(0, 0.7).logpdf(draw["kappa_offdiag"] * sat).sum()
    assert got == pytest.approx(want, rel=1e-9)
    assert np.allclose(trace["b_offdiag"]["value"], draw["b_offdiag"], rtol=1e-9, atol=1e-12)


def test_on_one_budget_the_likelihood_ignores_the_sampled_decay(runs3):
    """On one budget the data see ``b + kappa / D`` only: moving ``kappa_saturated`` with
    ``b_saturated`` fixed leaves the likelihood unchanged (the ridge is an axis), while
    on the fixture's two budgets the same move changes it."""
    priors = Priors()
    several = model_data(runs3, priors)
    one = several._replace(point_d=np.full_like(several.point_d, 2.0), transfer_budget=2.0)
    for data, flat in ((one, True), (several, False)):
        latent = _latent(draw_prior(jax.random.PRNGKey(1), data, priors), priors, data)
        moved = dict(latent, kappa_saturated=latent["kappa_saturated"] + 0.3)
        ll = [
            float(jnp.sum(model_trace(v, data, priors)["log_loss"]["fn"].log_prob(
                jnp.asarray(data.obs_log_loss)
            )))
            for v in (latent, moved)
        ]  # fmt: skip
        assert (abs(ll[0] - ll[1]) < 1e-8) == flat, (flat, ll)
