"""The run-effect observation model: exact densities, conditionals and sampling."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import climb_bayes  # noqa: F401  (float64)
from climb_bayes.errors import PriorsError
from climb_bayes.model.observation import (
    ONE_POINT_DF_MIN,
    GroupedNoise,
    KeyedStudentT,
    conditional_moments,
    draw_noise,
    group_stats,
    identifiable_noise,
    pad_segment_layout,
    run_effect_identified,
)
from climb_bayes.model.priors import Priors

GROUP = np.array([0, 0, 0, 2, 2, 5, 5])
S, T = 0.05, 0.08


def _dense(df):
    """Observations and their exact density, group by group; ``df``: ``None`` (Normal), one
    number, or one per group."""
    groups = np.unique(GROUP)
    dfs = df if np.ndim(df) else [df] * groups.size
    rng = np.random.default_rng(0)
    loc = rng.normal(size=GROUP.size)
    y = loc + 0.1 * rng.normal(size=GROUP.size)
    total = 0.0
    for g, d in zip(groups, dfs, strict=True):
        idx = GROUP == g
        n = idx.sum()
        cov = S**2 * np.eye(n) + T**2 * np.ones((n, n))
        if d is None:
            total += stats.multivariate_normal(loc[idx], cov).logpdf(y[idx])
        else:
            total += stats.multivariate_t(loc[idx], cov, df=d).logpdf(y[idx])
    return loc, y, total


@pytest.mark.parametrize("df", [None, 4.0])
def test_log_prob_equals_dense_compound_symmetric_density(df):
    loc, y, expected = _dense(df)
    d = GroupedNoise(loc, np.full(GROUP.size, S), np.full(GROUP.size, T), GROUP, df)
    assert float(d.log_prob(y)) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("df", [None, 4.0, "per-group"])
def test_one_segment_per_group_gives_the_density_of_one_per_observation(df):
    """Concrete ids sum over ``max(id) + 1`` segments, traced ids over one per observation (the
    static bound): the same density either way, and the segments follow the ids."""
    df = np.array([3.0, 3.0, 3.0, 7.0, 7.0, 12.0, 12.0]) if df == "per-group" else df
    loc, y, expected = _dense(None if df is None else df if np.ndim(df) == 0 else [3, 7, 12])
    scale, run_scale = np.full(GROUP.size, S), np.full(GROUP.size, T)
    concrete = GroupedNoise(loc, scale, run_scale, GROUP, df)
    assert concrete.n_groups == 6
    assert concrete.group_log_prob(y).shape == (6,)

    @jax.jit
    def traced(group):
        d = GroupedNoise(loc, scale, run_scale, group, df)
        assert d.n_groups == GROUP.size  # traced ids: one segment per observation
        return d.log_prob(y), d.group_log_prob(y).shape[0]

    value, n_segments = traced(GROUP)
    assert n_segments == GROUP.size
    assert float(concrete.log_prob(y)) == pytest.approx(expected, rel=1e-10)
    assert float(value) == pytest.approx(expected, rel=1e-10)


def test_masked_points_are_ignored():
    loc, y, _ = _dense(None)
    mask = np.array([True, True, False, True, True, True, True])
    d = GroupedNoise(loc, np.full(7, S), np.full(7, T), GROUP, None, mask)
    keep = GroupedNoise(loc[mask], np.full(6, S), np.full(6, T), GROUP[mask], None)
    assert float(d.log_prob(y)) == pytest.approx(float(keep.log_prob(y[mask])), rel=1e-12)


@pytest.mark.parametrize("df", [None, 4.0])
def test_conditional_of_a_new_point_matches_dense_algebra(df):
    rng = np.random.default_rng(1)
    e = rng.normal(size=3) * 0.1
    st = group_stats(jnp.asarray(e), jnp.zeros(3, dtype=int))
    shift, scale, df2 = conditional_moments(st, jnp.full(3, S), jnp.full(3, T), df)
    cov = S**2 * np.eye(4) + T**2 * np.ones((4, 4))
    s11, s21 = cov[:3, :3], cov[3, :3]
    mu = s21 @ np.linalg.solve(s11, e)
    var = cov[3, 3] - s21 @ np.linalg.solve(s11, s21)
    if df is not None:
        var *= (df + e @ np.linalg.solve(s11, e)) / (df + 3)
    assert float(shift[0]) == pytest.approx(mu, rel=1e-10)
    assert float(scale[0]) ** 2 == pytest.approx(var, rel=1e-10)
    assert float(df2[0]) == (np.inf if df is None else df + 3)


def test_samples_have_the_modelled_correlation():
    d = GroupedNoise(jnp.zeros(7), np.full(7, S), np.full(7, T), GROUP, None)
    x = np.asarray(d.sample(jax.random.PRNGKey(0), (20000,)))
    assert np.corrcoef(x[:, 0], x[:, 1])[0, 1] == pytest.approx(T**2 / (S**2 + T**2), abs=0.02)
    assert abs(np.corrcoef(x[:, 0], x[:, 3])[0, 1]) < 0.03  # other group: independent
    z = draw_noise(
        np.random.default_rng(0), np.full((20000, 7), S), np.full((20000, 7), T), GROUP, None
    )
    assert np.corrcoef(z[:, 3], z[:, 4])[0, 1] == pytest.approx(T**2 / (S**2 + T**2), abs=0.02)
    assert z[:, 0].std() == pytest.approx(np.hypot(S, T), rel=0.03)


def test_three_correlated_points_carry_about_one_point_of_information():
    """The reason for the model: the sd of a group mean barely shrinks with n when T >> S."""
    n = 3
    cov = 0.0035**2 * np.eye(n) + 0.0199**2 * np.ones((n, n))
    var_mean = np.ones(n) @ cov @ np.ones(n) / n**2
    effective_n = cov[0, 0] / var_mean
    assert 1.0 < effective_n < 1.1


def test_run_effect_is_switched_off_only_where_no_group_repeats():
    assert run_effect_identified(GROUP)  # groups 0, 2 and 5 hold several points
    assert not run_effect_identified(np.arange(7))  # one point per group: only s^2 + t^2 enters
    assert not run_effect_identified(np.array([], dtype=int))
    lines: list[str] = []
    priors = Priors(student_df=4.0)
    assert identifiable_noise(priors, GROUP, lines.append) is priors and not lines
    off = identifiable_noise(priors, np.arange(7), lines.append)
    assert off.run_effect is False and off.replace(run_effect=True) == priors
    assert len(lines) == 1 and "not separately identified" in lines[0]
    assert identifiable_noise(priors, None).run_effect is False  # every point its own group
    already = Priors(run_effect=False, student_df=4.0)
    assert identifiable_noise(already, np.arange(7), lines.append) is already and len(lines) == 1


def test_a_learned_df_is_bounded_at_2_where_every_group_is_one_point():
    """With one point per group a learned df near 1 collapsed the noise scale (df -> 1.007,
    sigma -> 0 on tiny-2024's final losses); several points per group keep the bound of 1; a
    fixed df, or the Normal likelihood, is left as asked."""
    lines: list[str] = []
    learned = Priors()
    assert learned.learned_df and learned.student_df_min == 1.0
    assert identifiable_noise(learned, GROUP, lines.append) is learned and not lines
    one = identifiable_noise(learned, np.arange(7), lines.append)
    assert one.learned_df and one.student_df_min == ONE_POINT_DF_MIN == 2.0
    assert one.run_effect is False and len(lines) == 2 and "bounded below by 2" in lines[1]
    assert identifiable_noise(Priors(run_effect=False), None).student_df_min == ONE_POINT_DF_MIN
    higher = Priors(run_effect=False, student_df_min=3.0)  # a user's higher bound is kept
    assert identifiable_noise(higher, np.arange(7)) is higher
    for kept in (Priors(student_df=7.0), Priors(likelihood="normal")):
        assert identifiable_noise(kept, np.arange(7)).replace(run_effect=True) == kept
    with pytest.raises(PriorsError, match="student_df_min"):
        Priors(student_df_min=0.5)


def test_singleton_groups_leave_s_and_t_unidentified():
    """The reason for :func:`identifiable_noise`: with one point per group the density depends
    on ``s^2 + t^2`` alone (a ridge), with repeated points it does not."""
    rng = np.random.default_rng(1)
    y = rng.normal(size=7)
    for group, identified in ((np.arange(7), False), (GROUP, True)):
        a = GroupedNoise(jnp.zeros(7), 0.06, 0.08, group, 4.0).log_prob(y)
        b = GroupedNoise(jnp.zeros(7), 0.08, 0.06, group, 4.0).log_prob(y)
        assert bool(np.isclose(a, b, rtol=0, atol=1e-12)) is not identified


def test_per_observation_df_gives_each_group_its_own_multivariate_t():
    dfs = (3.0, 9.0, 25.0)
    loc, y, expected = _dense(dfs)
    per_obs = np.array([dfs[{0: 0, 2: 1, 5: 2}[g]] for g in GROUP])
    d = GroupedNoise(loc, np.full(7, S), np.full(7, T), GROUP, per_obs)
    assert float(d.log_prob(y)) == pytest.approx(expected, rel=1e-10)
    # a constant array is the fixed df
    const = GroupedNoise(loc, np.full(7, S), np.full(7, T), GROUP, np.full(7, 4.0))
    fixed = GroupedNoise(loc, np.full(7, S), np.full(7, T), GROUP, 4.0)
    assert float(const.log_prob(y)) == pytest.approx(float(fixed.log_prob(y)), rel=1e-12)


def test_df_key_evaluates_the_normaliser_per_distinct_pair_with_the_same_density():
    """Groups of one language share a df: with ``df_key`` the Student-t normaliser is evaluated
    once per (language, group size) and gathered, scales and df are gathered from a member;
    the density equals the dense multivariate t and the segment-mean path (traced mask), a
    masked point included, and so do the gradients."""
    group = np.array([0, 0, 0, 1, 1, 1, 2, 2, 4, 4, 4, 5])
    lang = np.array([0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0])
    mask = np.ones(group.size, bool)
    mask[4] = False  # group 1 keeps 2 of its 3 points
    dfs, sig, sr = np.array([3.0, 11.0]), np.array([0.04, 0.07]), np.array([0.09, 0.05])
    rng = np.random.default_rng(3)
    loc = rng.normal(size=group.size)
    y = loc + 0.1 * rng.normal(size=group.size)
    expected = 0.0
    for g in np.unique(group):
        idx = (group == g) & mask
        n, k = idx.sum(), lang[idx][0]
        cov = sig[k] ** 2 * np.eye(n) + sr[k] ** 2 * np.ones((n, n))
        expected += stats.multivariate_t(loc[idx], cov, df=dfs[k]).logpdf(y[idx])

    def density(df, loc, keyed):
        d = GroupedNoise(
            loc, sig[lang], sr[lang], group, df[lang], mask, df_key=lang if keyed else None
        )
        return d.log_prob(jnp.asarray(y))

    keyed = GroupedNoise(loc, sig[lang], sr[lang], group, dfs[lang], mask, df_key=lang)
    # (language, size): (0, 3), (0, 2), (0, 1), (1, 2), (1, 3), and the unused id 3 (size 0)
    assert keyed.layout is not None and sorted(keyed.layout.pair_size) == [0, 1, 2, 2, 3, 3]
    for flag in (True, False):
        assert float(density(dfs, loc, flag)) == pytest.approx(expected, rel=1e-10)

    @jax.jit
    def traced_mask(m):  # a traced mask: no layout, the segment means
        d = GroupedNoise(loc, sig[lang], sr[lang], group, dfs[lang], m, df_key=lang)
        assert d.layout is None
        return d.log_prob(jnp.asarray(y))

    assert float(traced_mask(mask)) == pytest.approx(expected, rel=1e-10)

    @jax.jit
    def traced_layout(g, m, layout):  # ids, mask and a padded layout all traced
        d = GroupedNoise(loc, sig[lang], sr[lang], g, dfs[lang], m, 6, df_key=lang, layout=layout)
        return d.log_prob(jnp.asarray(y))

    padded = pad_segment_layout(keyed.layout, 9)
    assert padded.pair_member.size == 9 and padded.pair_index.max() < 6
    assert float(traced_layout(group, mask, padded)) == pytest.approx(expected, rel=1e-10)
    with pytest.raises(ValueError, match="more than 3"):
        pad_segment_layout(keyed.layout, 3)
    grads = [jax.grad(density, argnums=(0, 1))(dfs, loc, flag) for flag in (True, False)]
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-12)


def test_keyed_student_t_is_numpyros_student_t_with_the_normaliser_once_per_key():
    """The one-point-per-run likelihood: same log density and gradients as ``StudentT`` with the
    per-point df, a pytree that survives ``vmap``, and draws from the same law."""
    import numpyro.distributions as dist

    key = np.array([0, 1, 2, 1, 0, 2, 2])
    dfs = jnp.array([2.5, 7.0, 30.0])
    rng = np.random.default_rng(4)
    loc, scale = rng.normal(size=7), 0.05 + rng.random(7) * 0.1
    y = loc + 0.1 * rng.standard_t(3, size=7)

    def keyed(dfs, loc):
        return KeyedStudentT(dfs, key, loc, scale).log_prob(jnp.asarray(y)).sum()

    def plain(dfs, loc):
        return dist.StudentT(dfs[key], loc, scale).log_prob(jnp.asarray(y)).sum()

    assert float(keyed(dfs, loc)) == pytest.approx(float(plain(dfs, loc)), rel=1e-12)
    grads = [jax.grad(f, argnums=(0, 1))(dfs, loc) for f in (keyed, plain)]
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)
    batched = jax.vmap(lambda d: KeyedStudentT(d, key, loc, scale))(jnp.stack([dfs, dfs + 1]))
    assert batched.log_prob(jnp.asarray(y)).shape == (2, 7)
    draws = KeyedStudentT(dfs, key, loc, scale).sample(jax.random.PRNGKey(0), (20000,))
    z = (np.asarray(draws)[:, 2] - loc[2]) / scale[2]  # key 2: df 30
    assert stats.kstest(z, stats.t(30.0).cdf).pvalue > 1e-3


def test_noise_draws_use_each_groups_df():
    """Per-observation df arrays: a constant array draws exactly what the scalar draws, and a
    group with df 2.5 has a much heavier tail than one with df 200 (same scales)."""
    n = 40000
    scale, run = np.full((n, 7), S), np.full((n, 7), T)
    a = draw_noise(np.random.default_rng(3), scale, run, GROUP, np.full((n, 7), 4.0))
    b = draw_noise(np.random.default_rng(3), scale, run, GROUP, 4.0)
    assert np.array_equal(a, b)
    df = np.where(GROUP == 0, 2.5, 200.0)[None].repeat(n, axis=0)
    z = draw_noise(np.random.default_rng(4), scale, run, GROUP, df)
    kurt = stats.kurtosis(z, axis=0)
    assert kurt[:3].min() > 5.0 and kurt[3:].max() < 0.5, kurt
    x = np.asarray(
        GroupedNoise(jnp.zeros(7), np.full(7, S), np.full(7, T), GROUP, df[0]).sample(
            jax.random.PRNGKey(0), (n,)
        )
    )
    kurt = stats.kurtosis(x, axis=0)
    assert kurt[:3].min() > 5.0 and kurt[3:].max() < 0.5, kurt
