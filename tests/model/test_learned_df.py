"""A learned Student-t df (``Priors.student_df = "learned"``): its prior, the model's use of it,
storage, and that the data move it (per-group densities and noise draws with a df per
observation: tests/model/test_observation.py)."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density
from scipy import stats

import climb_bayes  # noqa: F401  (float64)
from climb_bayes.errors import PriorsError
from climb_bayes.model.climb_model import climb_model, draw_prior, latent_sites, model_data
from climb_bayes.model.observation import DF_MIN, DF_PRIOR, df_prior, draw_df_prior
from climb_bayes.model.priors import LEARNED, Priors, load_priors, priors_to_toml
from climb_bayes.runtime import memory_maps


def test_learned_or_a_fixed_number(tmp_path):
    learned = Priors(student_df=LEARNED)
    assert learned.learned_df and learned.fixed_df is None
    assert Priors().learned_df and Priors().full_share_scale == 2.0  # the defaults since 2026-11-26
    assert Priors(student_df=4).fixed_df == 4.0 and not Priors(student_df=4).learned_df
    assert not Priors(likelihood="normal", student_df=LEARNED).learned_df  # the Normal has none
    with pytest.raises(PriorsError, match="'student_df' must be \"learned\" or a positive"):
        Priors(student_df="auto")
    with pytest.raises(PriorsError, match="'student_df' must be a positive number"):
        Priors(student_df=-1.0)
    path = tmp_path / "p.toml"
    for priors in (learned, Priors(student_df=7.5)):
        path.write_text(priors_to_toml(priors), encoding="utf-8")
        assert load_priors(path).student_df == priors.student_df


def test_df_prior_is_gamma_2_01_above_1():
    """Juarez & Steel's Gamma(2, rate 0.1), truncated to df >= 1 as brms does: median 16.9, 5%
    and 95% quantiles 3.7 and 47.5; nothing below 1."""
    x = np.array([1.5, 4.0, 17.0, 60.0])
    gamma = stats.gamma(DF_PRIOR[0], scale=1 / DF_PRIOR[1])
    got = np.asarray(df_prior().log_prob(jnp.asarray(x)))
    assert got == pytest.approx(gamma.logpdf(x) - gamma.logsf(DF_MIN), rel=1e-10)
    q = gamma.ppf(gamma.cdf(DF_MIN) + gamma.sf(DF_MIN) * np.array([0.05, 0.5, 0.95]))
    assert q == pytest.approx([3.73, 16.86, 47.50], abs=0.01)
    draws = np.asarray(df_prior().sample(jax.random.PRNGKey(0), (20000,)))
    assert draws.min() >= DF_MIN and np.median(draws) == pytest.approx(16.86, rel=0.03)
    mine = draw_df_prior(jax.random.PRNGKey(1), (20000,))  # what draw_prior uses
    assert mine.min() >= DF_MIN
    assert np.quantile(mine, [0.05, 0.5, 0.95]) == pytest.approx(q, rel=0.03)
    assert stats.kstest(mine, draws).pvalue > 0.01


@pytest.mark.skipif(memory_maps() is None, reason="reads /proc (Linux)")
def test_prior_draws_do_not_compile_new_programs_each_call(runs3):
    """draw_prior with a learned df once compiled new XLA programs per call (~200 memory
    mappings each; 800 calls crashed the suite at the kernel's mapping limit)."""
    priors = Priors(student_df=LEARNED)
    data = model_data(runs3, priors)
    draw_prior(jax.random.PRNGKey(0), data, priors)  # compiles what it needs once
    before = memory_maps()[0]
    for k in jax.random.split(jax.random.PRNGKey(1), 20):
        draw_prior(k, data, priors)
    assert memory_maps()[0] - before < 400


def test_climb_model_adds_exactly_the_df_prior(runs3):
    """Learned df set to 4 everywhere: the log density is the fixed-df 4 model's plus the
    prior of each language's df (so the likelihood is the same; the sampler's coordinate is
    ``log(df - 1)``, whose Jacobian ``log_density`` does not add)."""
    learned, fixed = Priors(student_df=LEARNED), Priors(student_df=4.0)
    assert "df" in latent_sites(learned) and "df" not in latent_sites(fixed)
    data = model_data(runs3, fixed)
    draw = draw_prior(jax.random.PRNGKey(2), data, learned)
    assert draw["df"].shape == (data.n_targets,) and np.all(draw["df"] > 0)
    names = [n for n in latent_sites(fixed)]
    latent = {k: draw[k] for k in names}
    m = data.n_targets
    dens_l = float(
        log_density(climb_model, (data, learned), {}, latent | {"df": np.full(m, 4.0)})[0]
    )
    dens_f = float(log_density(climb_model, (data, fixed), {}, latent)[0])
    gamma = stats.gamma(2.0, scale=10.0)
    prior = m * (gamma.logpdf(4.0) - gamma.logsf(1.0))
    assert dens_l - dens_f == pytest.approx(prior, rel=1e-9)


def test_the_data_move_a_learned_df_per_group():
    """Isolated-law world, one group with t(1.5) errors and two with Normal errors: the
    Laplace posterior puts the heavy group's df low and the others' high (a shared or fixed
    df cannot)."""
    from climb_bayes.laws.base import FitOptions, fit_laplace
    from climb_bayes.laws.isolated import IsolatedLaw
    from tests.laws.test_laws import ISOLATED_TRUTH, simulate

    obs, law = simulate(IsolatedLaw(), ISOLATED_TRUTH, n_mix=40, sigma=0.004, seed=2)
    rng = np.random.default_rng(5)
    heavy = obs.group == 0
    y = np.log(obs.loss)
    y[heavy] += 0.004 * rng.standard_t(1.5, heavy.sum())
    obs = replace(obs, loss=np.exp(y))
    options = FitOptions(n_starts=2, seed=0, samples=2000, priors=Priors(student_df=LEARNED))
    fit = fit_laplace(law, obs, options)
    df = np.median(fit.student_df, axis=0)
    assert fit.student_df.shape == (2000, 3)
    assert df[0] < 4.0 and df[1:].min() > 8.0, df
    thinned = fit.thin(np.arange(10))
    assert thinned.student_df.shape == (10, 3)
    assert np.all(np.isinf(replace(fit, likelihood="normal").df_draws()))
