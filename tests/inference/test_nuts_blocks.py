"""Per-language NUTS blocks: exact factorisation, assembly and agreement with the joint fit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size
from numpyro.infer.util import log_density

from climb_bayes.data.design import algorithm1_design
from climb_bayes.data.runs import runs_from_frame
from climb_bayes.errors import ClimbError
from climb_bayes.inference.fitting import fit_runs
from climb_bayes.inference.nuts import NutsConfig
from climb_bayes.inference.nuts_blocks import (
    CHUNK,
    MAX_THIN,
    REFERENCE_DRAWS,
    TARGET_ESS_PER_DRAW,
    WARMUP_WINDOWS,
    _pooled_metric,
    _thinned_stats,
    block_bfmi,
    block_thinning,
    language_blocks,
    use_language_blocks,
    warmup_windows,
)
from climb_bayes.model.climb_model import (
    climb_model,
    draw_prior,
    latent_sites,
    model_data,
    pair_indices,
)
from climb_bayes.model.priors import Priors
from climb_bayes.model.simulate import example_params, simulate_runs

PAIR_SITES = ("b_saturated", "kappa_saturated")


def _block_values(values: dict, i: int, m: int) -> dict:
    """The latent values of target language ``i``'s block (pairs into ``i``, source order)."""
    _, target = pair_indices(m)
    return {k: (v[target == i] if k in PAIR_SITES else v[[i]]) for k, v in values.items()}


def test_blocks_hold_each_language_once(runs3):
    data = model_data(runs3, Priors())
    blocks = language_blocks(data)
    m = runs3.n_languages
    assert len(blocks) == m
    for i, block in enumerate(blocks):
        assert block.n_targets == 1
        real = block.obs_mask
        sel = data.obs_language == i
        assert real.sum() == sel.sum()
        np.testing.assert_array_equal(block.obs_log_loss[real], data.obs_log_loss[sel])
        # Each observation sees the same shares (target first) and budget as in the joint data.
        order = [i] + [j for j in range(m) if j != i]
        np.testing.assert_array_equal(
            block.point_r[block.obs_point[real]], data.point_r[data.obs_point[sel]][:, order]
        )
        np.testing.assert_array_equal(
            block.point_d[block.obs_point[real]], data.point_d[data.obs_point[sel]]
        )
        # Only the points the target is observed at are kept (mono runs of others dropped).
        assert block.point_r.shape[0] < data.point_r.shape[0]
    assert len({(b.obs_log_loss.shape, b.point_r.shape) for b in blocks}) == 1  # one shape
    # The grouped likelihood sums over as many segments as the largest block has run groups
    # (a static shape under the block kernel's trace), and every real group id is below it.
    assert data.n_groups == np.unique(data.obs_group).size
    n_groups = [np.unique(data.obs_group[data.obs_language == i]).size for i in range(m)]
    for block in blocks:
        assert block.n_groups == max(n_groups) < block.obs_log_loss.size
        assert block.obs_group[block.obs_mask].max() < block.n_groups


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_joint_log_density_is_the_sum_of_the_blocks(runs3, seed):
    """The factorisation the blocked sampler relies on, at random points of the prior."""
    import jax

    priors = Priors()
    data = model_data(runs3, priors)
    m = runs3.n_languages
    draw = draw_prior(jax.random.PRNGKey(seed), data, priors)
    values = {k: np.asarray(draw[k]) for k in latent_sites(priors)}
    joint, _ = log_density(climb_model, (data, priors), {}, values)
    parts = [
        log_density(climb_model, (block, priors), {}, _block_values(values, i, m))[0]
        for i, block in enumerate(language_blocks(data))
    ]
    assert float(joint) == pytest.approx(float(sum(parts)), rel=1e-10, abs=1e-8)
    # A block paired with the wrong language's transfer gives a different density.
    swapped = _block_values(values, 1, m) | {"log_L0": values["log_L0"][[0]]}
    wrong = log_density(climb_model, (language_blocks(data)[0], priors), {}, swapped)[0]
    assert float(wrong) != pytest.approx(float(parts[0]), rel=1e-6)


def test_traced_blocks_keep_the_joint_density_through_their_segment_layouts(runs3):
    """The block kernel gets each block's data as traced arguments; the grouped likelihood
    then uses the blocks' precomputed segment layouts (padded to one shape), and must give
    the joint density, also where the blocks' run groups differ in number and size."""
    import jax

    priors = Priors()
    full = model_data(runs3, priors)
    keep = np.ones(full.obs_language.size, bool)
    keep[np.flatnonzero(full.obs_language == 0)[:5]] = False  # whole groups and a part
    keep[np.flatnonzero(full.obs_language == 2)[1:3]] = False
    data = full._replace(
        **{k: getattr(full, k)[keep] for k in ("obs_point", "obs_language", "obs_log_loss")},
        obs_group=full.obs_group[keep],
    )
    blocks = language_blocks(data)
    layouts = [b.segment_layout for b in blocks]
    assert len({tuple(np.shape(a) for a in lay) for lay in layouts}) == 1  # one shape
    assert len({tuple(lay.pair_size) for lay in layouts}) > 1  # the blocks' groups differ
    m = runs3.n_languages
    traced = jax.jit(lambda block, values: log_density(climb_model, (block, priors), {}, values)[0])
    for seed in range(3):
        draw = draw_prior(jax.random.PRNGKey(seed), data, priors)
        values = {k: np.asarray(draw[k]) for k in latent_sites(priors)}
        joint, _ = log_density(climb_model, (data, priors), {}, values)
        parts = [traced(b, _block_values(values, i, m)) for i, b in enumerate(blocks)]
        assert float(joint) == pytest.approx(float(sum(parts)), rel=1e-10, abs=1e-8)
        # Without the layouts the traced blocks take segment means: the same density.
        plain = [
            traced(b._replace(segment_layout=None), _block_values(values, i, m))
            for i, b in enumerate(blocks)
        ]
        np.testing.assert_allclose(parts, plain, rtol=1e-12)
    # A layout of another block is a different density (the layout is read, not ignored).
    swapped = blocks[0]._replace(segment_layout=layouts[1])
    values0 = _block_values(values, 0, m)
    assert float(traced(swapped, values0)) != pytest.approx(float(parts[0]), rel=1e-6)


def test_auto_picks_blocks_only_when_the_posterior_factorises():
    config = NutsConfig()
    assert not use_language_blocks(config, Priors(), 5)
    assert use_language_blocks(config, Priors(), 16)
    assert not use_language_blocks(config, Priors(hierarchical_transfer=True), 16)
    assert not use_language_blocks(config._replace(init="map"), Priors(), 16)
    assert use_language_blocks(config._replace(blocks="language"), Priors(), 2)
    with pytest.raises(ClimbError, match="--blocks joint"):
        use_language_blocks(
            config._replace(blocks="language"), Priors(hierarchical_transfer=True), 3
        )
    with pytest.raises(ClimbError, match="--blocks must be one of"):
        NutsConfig(blocks="pairs").check()


@pytest.mark.parametrize("warmup", [1, 25, 26, 60, 100, 500, 1000, 1001])
def test_warmup_windows_split_the_warmup_into_whole_chunks(warmup):
    windows = warmup_windows(warmup)
    assert min(windows) >= 1
    assert sum(windows) * CHUNK >= warmup > (sum(windows) - 1) * CHUNK  # rounded up, once
    assert len(windows) == min(WARMUP_WINDOWS, sum(windows))
    assert max(windows) - min(windows) <= 1
    assert windows == sorted(windows, reverse=True)  # the explore window is never shorter


def test_pooled_metric_recovers_the_covariance_of_the_later_draws():
    import jax

    rng = np.random.default_rng(0)
    sd = np.array([1.0, 0.003, 0.5])  # transfer-sized scales must not be swamped
    corr = np.array([[1.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 1.0]])
    cov = corr * np.outer(sd, sd)
    chains, draws = 4, 3000
    x = rng.multivariate_normal([1.0, -2.0, 0.0], cov, size=(chains, draws))
    x[:, : draws // 2] += 50.0  # the first half (still moving) must be ignored
    z = {"a": jax.numpy.asarray(x[..., :1]), "b": jax.numpy.asarray(x[..., 1:])}
    dense = _pooled_metric(z, dense=True)
    np.testing.assert_allclose(dense / np.outer(sd, sd), corr, atol=0.05)
    np.testing.assert_allclose(np.sqrt(np.diag(dense)), sd, rtol=0.05)
    np.testing.assert_allclose(_pooled_metric(z, dense=False), np.diag(dense))


def _ar1(rho: float, chains: int = 4, draws: int = 2000, dim: int = 3) -> np.ndarray:
    rng = np.random.default_rng(1)
    e = rng.standard_normal((chains, draws, dim))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, draws):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
    return x


@pytest.mark.parametrize("rho", [0.0, 0.6, 0.95])
def test_block_thinning_follows_the_pilot_autocorrelation(rho):
    """ESS per draw of AR(1) is (1 - rho) / (1 + rho): 1, 0.25 and 0.026 here."""
    exact = np.ceil(TARGET_ESS_PER_DRAW * (1 + rho) / (1 - rho))
    expected = {int(np.clip(exact + d, 1, MAX_THIN)) for d in (0, 1)}
    pilot = {"a": _ar1(rho)[..., :1], "b": _ar1(rho)[..., 1:]}
    assert block_thinning(pilot) in expected  # +1 allowed: ESS estimates scatter
    # The worst coordinate decides: one slow coordinate among fast ones.
    mixed = {"fast": _ar1(0.0), "slow": _ar1(0.95)[..., :1]}
    assert block_thinning(mixed) == MAX_THIN


def test_block_thinning_aims_for_a_total_ess_from_the_reference_draws_up():
    """ESS per draw 0.25 (AR(1), rho 0.6): thin 4 at 2,000 kept draws, 2 at 4,000 (the same
    total ESS), and never more than the per-draw aim with fewer draws."""
    pilot = {"a": _ar1(0.6)}
    at_reference = block_thinning(pilot, REFERENCE_DRAWS)
    assert at_reference == block_thinning(pilot) == MAX_THIN  # 4: ceil(1 / 0.25), clipped
    assert block_thinning(pilot, 2 * REFERENCE_DRAWS) in (2, 3)
    assert block_thinning(pilot, 2 * REFERENCE_DRAWS) < at_reference
    assert block_thinning(pilot, REFERENCE_DRAWS // 2) == at_reference


def test_thinned_stats_keep_every_divergence_and_count_every_step():
    chains, draws, thin = 2, 3, 2
    diverging = np.zeros((chains, draws * thin), bool)
    diverging[0, 2] = True  # a discarded iteration (kept ones are 1, 3, 5)
    stats = {
        "diverging": diverging,
        "num_steps": np.arange(chains * draws * thin).reshape(chains, -1),
        "energy": np.arange(chains * draws * thin, dtype=float).reshape(chains, -1),
        "accept_prob": np.full((chains, draws * thin), 0.5),
    }
    out = _thinned_stats(stats, thin)
    assert out["diverging"].tolist() == [[False, True, False], [False, False, False]]
    assert out["steps_total"].sum() == stats["num_steps"].sum()
    np.testing.assert_array_equal(out["num_steps"], stats["num_steps"][:, 1::2])  # the larger
    np.testing.assert_array_equal(out["energy"], stats["energy"][:, 1::2])
    assert out["accept_prob"].shape == (chains, draws)


def test_block_bfmi_is_not_diluted_by_a_good_block_or_by_thinning():
    """A block whose energy random-walks (E-BFMI ~0) is reported as such; the old statistic,
    E-BFMI of the summed (and thinned) energies, let a large, well-mixed block hide it."""
    import arviz_stats as azs

    rng = np.random.default_rng(0)
    good = rng.normal(0.0, 10.0, (2, 2000))  # independent energies: E-BFMI ~2
    bad = 0.05 * rng.normal(size=(2, 2000)).cumsum(axis=1)  # random walk: E-BFMI << 0.3
    per_block = np.stack([block_bfmi(good), block_bfmi(bad)])
    assert per_block[0].min() > 1.5 and per_block[1].max() < 0.05
    summed_thinned = np.asarray(azs.bfmi((good + bad)[:, 3::4]))
    assert summed_thinned.min() > 1.0  # what the combined statistic said


def test_blocked_fit_matches_the_joint_fit():
    """Same posterior, sampled block by block: means agree within Monte Carlo error."""
    langs = ["en", "de"]
    world = example_params(langs, seed=0, sigma=0.01)
    runs = runs_from_frame(
        simulate_runs(world, algorithm1_design(langs, [5e9, 2.5e10], pool="central"), seed=0)
    )
    config = NutsConfig(chains=2, warmup=400, samples=1200, progress_bar=False)
    fits = {
        blocks: fit_runs(runs, method="nuts", config=config._replace(blocks=blocks), seed=0)
        for blocks in ("joint", "language")
    }
    post_b, post_j = fits["language"].tree["posterior"], fits["joint"].tree["posterior"]
    stats = fits["language"].tree["sample_stats"]
    assert set(post_b.data_vars) == set(post_j.data_vars)
    assert (stats["n_steps_total"] >= stats["n_steps"]).all()
    assert "n_steps_total" not in fits["joint"].tree["sample_stats"]
    thinning = json.loads(fits["language"].tree.attrs["block_thinning"])
    assert set(thinning) == set(langs) and all(1 <= t <= MAX_THIN for t in thinning.values())
    for fit in fits.values():
        assert fit.diagnostics.max_rhat < 1.05, fit.diagnostics.problems
    assert 0.3 < fits["language"].diagnostics.min_bfmi < 5.0  # per block, unthinned
    for name in ("log_L0", "log_slope", "logit_f", "eta", "b_offdiag", "kappa_offdiag"):
        means, mcse = [], []
        for post in (post_b, post_j):
            x = post[name].values  # (chain, draw, ...)
            means.append(x.mean(axis=(0, 1)))
            ess = np.asarray(effective_sample_size(x))
            mcse.append(x.std(axis=(0, 1)) / np.sqrt(ess))
        bound = 4.0 * np.hypot(*mcse)
        np.testing.assert_array_less(np.abs(means[0] - means[1]), bound, err_msg=name)
