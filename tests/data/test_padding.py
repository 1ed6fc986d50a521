"""Padding a fit's arrays: the padded density is the unpadded one's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.data.observations import Observations
from climb_bayes.data.padding import PaddedShape, pad_rows, padding_mask


def test_pad_rows_repeats_the_first_row_and_refuses_to_shrink():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(pad_rows(a, 4), [[1, 2], [3, 4], [1, 2], [1, 2]])
    assert pad_rows(a, 2) is a
    np.testing.assert_array_equal(padding_mask(2, 4), [True, True, False, False])
    with pytest.raises(ValueError, match="cannot pad 2 rows to 1"):
        pad_rows(a, 1)


def test_padded_shape_of_a_table_holds_its_subsets(runs3):
    obs = Observations.from_runs(runs3)
    shape = PaddedShape.of(obs)
    assert shape.n_obs == obs.n and shape.n_points == obs.points()[1].size
    sub = obs.select(obs.run % 3 != 0)
    sub_shape = PaddedShape.of(sub)
    assert shape.holds(*sub_shape) and not sub_shape.holds(*shape)


def _potential(model, args, values):
    from numpyro.infer.util import potential_energy, unconstrain_fn

    z = unconstrain_fn(model, args, {}, values)
    return float(potential_energy(model, args, {}, z))


def test_padded_climb_model_has_the_unpadded_density(runs3):
    """A fold's CLIMB model padded to the full table's shape: same potential at the same
    parameters, run effect on and off."""
    from climb_bayes.inference.nuts import prior_centre
    from climb_bayes.model.climb_model import (
        climb_model,
        model_data,
        pad_model_data,
        sampler_coordinates,
    )
    from climb_bayes.model.priors import Priors

    obs = Observations.from_runs(runs3)
    fold = obs.select(obs.run % 3 != 0).to_runs()  # a subset of the runs, both budgets
    for priors in (Priors(), Priors(run_effect=False)):
        data = model_data(fold, priors)
        padded = pad_model_data(data, PaddedShape.of(obs))
        assert padded.obs_log_loss.shape[0] == obs.n > data.obs_log_loss.shape[0]
        assert padded.n_groups == PaddedShape.of(obs).n_groups
        values = sampler_coordinates(prior_centre(data, priors), data, priors)
        values = {k: jnp.asarray(v) + 0.05 for k, v in values.items()}  # off the centre
        want = _potential(climb_model, (data, priors), values)
        got = _potential(climb_model, (padded, priors), values)
        np.testing.assert_allclose(got, want, rtol=1e-10)
        # the padding's own terms would move it: the mask is what keeps them out
        unmasked = padded._replace(obs_mask=np.ones_like(padded.obs_mask))
        assert abs(_potential(climb_model, (unmasked, priors), values) - want) > 1.0


def test_padded_generic_law_fit_has_the_unpadded_density(runs3):
    """A law's Laplace fit padded to the full table's shape reaches the unpadded fit's mode:
    same potential (nats) and the same posterior medians up to the draws' noise."""
    from dataclasses import replace

    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.registry import get_law

    obs = Observations.from_runs(runs3)
    fold = obs.select(obs.run % 3 != 0)
    law = get_law("isolated").prepare(fold)
    opts = FitOptions(seed=0, samples=400)
    lines_plain, lines_padded = [], []
    plain = law.fit(fold, "laplace", opts, log=lines_plain.append)
    padded = law.fit(
        fold, "laplace", replace(opts, pad_to=PaddedShape.of(obs)), log=lines_padded.append
    )
    assert lines_plain[-1].split("(")[-1] == lines_padded[-1].split("(")[-1]  # the mode
    for name in ("log_B", "beta", "log_E"):
        a, b = plain.draws[name], padded.draws[name]
        np.testing.assert_allclose(np.median(b, 0), np.median(a, 0), atol=0.25 * a.std(0).max())
    assert jax.numpy.all(jnp.isfinite(padded.sigma))
