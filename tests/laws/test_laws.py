"""Each law recovers its own simulated parameters; the interface, registry and MSL optimum."""

from __future__ import annotations

import numpy as np
import pytest

from climb_bayes.data.runs import runs_from_frame
from climb_bayes.errors import ClimbError
from climb_bayes.inference.convergence import law_problems
from climb_bayes.inference.diagnostics import Diagnostics
from climb_bayes.inference.predictive import predictive_samples
from climb_bayes.laws import FitOptions, Observations, fit_map, fit_nuts, get_law, parse_laws
from climb_bayes.laws.climb import ClimbLaw, lawfit_from_fit
from climb_bayes.laws.dml import DMLLaw, full_t
from climb_bayes.laws.isolated import IsolatedLaw
from climb_bayes.laws.msl import MSLLaw, family_matrix, optimal_mixture, read_families
from climb_bayes.model.observation import ONE_POINT_DF_MIN

GROUPS = ("a", "b", "c")
D_REF = 1e9


def simulate(
    law, params, *, n_mix=16, budgets=(0.3, 1.0, 3.0, 10.0), sigma=0.002, seed=0, zero_shares=False
):
    """Observations drawn from ``law`` with ``params`` (reference units, d_ref = 1e9)."""
    rng = np.random.default_rng(seed)
    m = len(GROUPS)
    mixes = rng.dirichlet(np.ones(m), size=n_mix)
    mixes = np.vstack([mixes, np.eye(m) * 0.8 + 0.2 / m])
    if zero_shares:
        mixes[:3, 0] = 0.0
        mixes /= mixes.sum(axis=1, keepdims=True)
    run_r = np.repeat(mixes, len(budgets), axis=0)
    run_budget = np.tile(np.asarray(budgets) * D_REF, len(mixes))
    n_runs = run_r.shape[0]
    law = law.prepare(
        Observations(
            GROUPS,
            [str(i) for i in range(n_runs)],
            run_r,
            run_budget,
            np.arange(n_runs),
            run_budget,
            np.zeros(n_runs),
            np.ones(n_runs),
        )
    )
    from climb_bayes.laws.base import predict_draws

    pred = predict_draws(
        law, {k: np.asarray(v)[None] for k, v in params.items()}, run_r, run_budget / D_REF
    )[0]
    y = pred + rng.normal(0, sigma, pred.shape)
    return Observations(
        GROUPS,
        [str(i) for i in range(n_runs)],
        run_r,
        run_budget,
        np.repeat(np.arange(n_runs), m),
        np.repeat(run_budget, m),
        np.tile(np.arange(m), n_runs),
        np.exp(y).ravel(),
    ), law


OPTS = FitOptions(n_starts=2, seed=0)
ISOLATED_TRUTH = {
    "log_B": np.log([0.8, 0.6, 1.0]),
    "beta": np.array([0.3, 0.4, 0.35]),
    "log_E": np.log([1.8, 2.2, 1.5]),
}
"""A 3-group Isolated world (reference units); MSL adds ``gamma``."""


def _assert_close(fit, truth, names, atol):
    for name in names:
        got = fit.draws[name][0]
        assert np.allclose(got, truth[name], atol=atol), (name, got, truth[name])


def test_isolated_recovers_its_parameters():
    truth = ISOLATED_TRUTH
    obs, law = simulate(IsolatedLaw(), truth)
    fit = fit_map(law, obs, OPTS, d_ref=D_REF)
    _assert_close(fit, truth, ["log_B", "log_E"], 0.08)
    _assert_close(fit, truth, ["beta"], 0.04)
    assert np.all(fit.sigma < 0.005)


def test_msl_recovers_its_parameters_and_skips_zero_shares():
    truth = ISOLATED_TRUTH | {"gamma": np.array([0.05, 0.1, 0.2])}
    obs, law = simulate(MSLLaw(), truth, zero_shares=True)
    assert obs.zero_share.sum() == 3 * 4
    fit = fit_map(law, obs, OPTS, d_ref=D_REF)
    assert fit.info["n_fit"] == obs.n - 12
    _assert_close(fit, truth, ["log_B", "log_E"], 0.08)
    _assert_close(fit, truth, ["beta", "gamma"], 0.03)


DML_TRUTH = {
    "log_c": np.log([1.5, 1.8, 1.2]),
    "log_k": np.log([0.9, 0.7, 1.1]),
    "t_free": np.array([[-1.5, 0.5, 0.3], [0.7, -2.0, 0.2]]),
    "alpha": np.array([0.3, 0.25, 0.4]),
}
"""A 3-group Data Mixing Law world with the budget term (reference units)."""


def test_dml_recovers_its_parameters_with_budget_term():
    truth, t = DML_TRUTH, DML_TRUTH["t_free"]
    obs, law = simulate(DMLLaw(), truth, zero_shares=True)
    assert law.budget_term is True
    fit = fit_map(law, obs, OPTS, d_ref=D_REF)
    assert fit.info["n_fit"] == obs.n  # zero-share observations are usable
    _assert_close(fit, truth, ["log_c", "log_k"], 0.08)
    _assert_close(fit, truth, ["t_free"], 0.25)
    _assert_close(fit, truth, ["alpha"], 0.04)
    assert np.allclose(np.asarray(full_t(t)).sum(axis=0), 0.0)


def test_dml_drops_budget_term_on_one_budget():
    truth = {
        "log_c": np.log([1.5, 1.8, 1.2]),
        "log_k": np.log([0.9, 0.7, 1.1]),
        "t_free": np.array([[-1.5, 0.5, 0.3], [0.7, -2.0, 0.2]]),
    }
    obs, law = simulate(DMLLaw(), truth, budgets=(1.0,), n_mix=30)
    assert law.budget_term is False
    assert "alpha" not in law.param_specs(3)
    fit = fit_map(law, obs, OPTS, d_ref=D_REF)
    _assert_close(fit, truth, ["t_free"], 0.3)


def test_dml_centres_its_exponent_on_the_fitted_mixtures_and_reads_old_files_uncentred():
    """``k`` is the reducible loss at the runs' mean mixture: the same curves as the uniform
    gauge with ``log k`` shifted by ``t . r_bar``; a spec without ``centre`` (an older fit file)
    evaluates uncentred, as it was fitted."""
    import json

    import jax.numpy as jnp

    from climb_bayes.laws.registry import law_from_spec, law_spec

    obs, law = simulate(DMLLaw(), DML_TRUTH, n_mix=6, budgets=(1.0, 3.0))
    r_bar = obs.run_r.mean(axis=0)
    assert law.centre is not None and np.allclose(law.centre, r_bar)
    assert not np.allclose(r_bar, 1 / 3)  # a centre that is not the uniform mixture
    assert law.prepare(obs.select(obs.run < 3)).centre == law.centre  # prepared once
    r = jnp.asarray(obs.run_r[obs.run])
    d = jnp.asarray(obs.tokens / D_REF)
    params = {k: jnp.asarray(v) for k, v in DML_TRUTH.items()}
    t = full_t(params["t_free"])
    shifted = params | {"log_k": params["log_k"] - jnp.asarray(r_bar) @ t}
    uncentred = DMLLaw(budget_term=True)
    got = np.asarray(law.log_loss(params, r, d))
    assert np.allclose(got, np.asarray(uncentred.log_loss(shifted, r, d)), atol=1e-12)
    assert not np.allclose(got, np.asarray(uncentred.log_loss(params, r, d)), atol=1e-3)
    # an older file's spec has no centre: uncentred, i.e. centred on the uniform mixture
    spec = json.loads(law_spec(law))
    assert law_from_spec(json.dumps(spec)) == law
    del spec["fields"]["centre"]
    old = law_from_spec(json.dumps(spec))
    assert old.centre is None
    uniform = DMLLaw(budget_term=True, centre=(1 / 3,) * 3)
    assert np.allclose(old.log_loss(params, r, d), uniform.log_loss(params, r, d), atol=1e-12)


def test_climb_adapter_matches_core_fit_and_recovers_the_world(map_fit3, world3, runs3):
    fit = lawfit_from_fit(map_fit3)
    assert fit.method == "map" and fit.n_draws == 1
    obs = Observations.from_runs(runs3)
    # adapter predictions equal the core law's predictions in tokens units
    from climb_bayes.model.law import log_loss

    p = map_fit3.law_draws()
    core = np.asarray(log_loss(obs.r, obs.tokens, *[np.asarray(x)[0] for x in p]))
    assert np.allclose(fit.predict_obs(obs)[0], core[np.arange(obs.n), obs.group], atol=1e-9)
    # and they match the noise-free truth closely on the fitted design
    truth = np.asarray(log_loss(obs.r, obs.tokens, *world3.law()))[np.arange(obs.n), obs.group]
    # (two budgets do not pin beta and E separately for a point fit: compare predictions)
    assert np.max(np.abs(fit.predict_obs(obs)[0] - truth)) < 0.03


def test_nuts_on_a_tiny_model():
    truth = ISOLATED_TRUTH
    obs, law = simulate(IsolatedLaw(), truth, n_mix=6, sigma=0.01)
    opts = FitOptions(n_starts=1, chains=1, warmup=100, samples=150)
    fit = fit_nuts(law, obs, opts, d_ref=D_REF)
    assert fit.method == "nuts" and fit.n_draws == 150
    assert fit.info["target_accept"] == 0.95  # the options' (FitOptions' default)
    assert fit.sigma.shape == (150, 3)
    assert fit.sigma_run is None  # one point per (run, group): the run effect is not identified
    assert np.allclose(np.median(fit.draws["beta"], axis=0), truth["beta"], atol=0.1)
    samples = predictive_samples(fit, obs, 200)
    assert samples.shape == (200, obs.n)


@pytest.mark.parametrize("law", [IsolatedLaw(), MSLLaw(), DMLLaw()], ids=lambda x: x.name)
def test_power_law_coordinates_change_variables_exactly(law):
    """NUTS moves in (log L0, logit f, log slope) (model.power_coordinates); the posterior must be
    the one the priors on (log A, beta, log E) define: the log density there equals the directly
    parameterised model's plus log |d beta / d log slope| = sum log beta."""
    from dataclasses import fields

    from numpyro.infer.util import log_density

    from climb_bayes.laws.base import _numpyro_model
    from climb_bayes.model.power_coordinates import power_coordinates
    from climb_bayes.model.priors import Priors

    truth = ISOLATED_TRUTH | {"gamma": np.array([0.05, 0.1, 0.2])}
    truth = DML_TRUTH if law.name == "dml" else {k: v for k, v in truth.items()
                                                   if k in law.param_specs(3)}  # fmt: skip
    obs, law = simulate(law, truth, n_mix=6)
    amp, expo, irr = law.power_law()

    class Direct(type(law)):
        def power_law(self):
            return None

    direct = Direct(**{f.name: getattr(law, f.name) for f in fields(law)})
    priors = Priors()
    point_r, point_tokens, obs_point = obs.points()
    data = (point_r, point_tokens / D_REF, np.log(obs.loss))

    def density(model_law, values):
        args = (model_law, model_law.priors(obs, priors), obs_point, obs.group, obs.obs_group,
                obs.m, priors, *data)  # fmt: skip
        return float(log_density(_numpyro_model, args, {}, values)[0])

    rng = np.random.default_rng(1)
    noise = {"sigma": np.full(3, 0.01), "sigma_run": np.full(3, 0.005), "df": np.full(3, 6.0)}
    for _ in range(3):
        natural = {k: v + rng.normal(0, 0.1, np.shape(v)) for k, v in truth.items()}
        natural[expo] = np.abs(natural[expo])
        latent = {k: v for k, v in natural.items() if k not in (amp, expo, irr)}
        latent |= power_coordinates(natural[amp], natural[irr], natural[expo])
        new = density(law, latent | noise)
        old = density(direct, natural | noise)
        assert new == pytest.approx(old + np.sum(np.log(natural[expo])), rel=1e-10, abs=1e-8)


def test_registry_and_errors(tmp_path):
    laws = parse_laws("climb, isolated,msl,dml")
    assert [law.name for law in laws] == ["climb", "isolated", "msl", "dml"]
    assert isinstance(laws[0], ClimbLaw)
    with pytest.raises(ClimbError, match="unknown law 'foo'"):
        parse_laws("climb,foo")
    with pytest.raises(ClimbError, match="twice"):
        parse_laws("msl,msl")
    with pytest.raises(ClimbError, match="empty"):
        parse_laws(" , ")
    path = tmp_path / "fam.csv"
    path.write_text("group,family\na,x\nb,x\n")
    assert read_families(path) == {"a": "x", "b": "x"}
    law = get_law("msl", families=read_families(path))
    assert law.families == (("a", "x"), ("b", "x"))
    bad = tmp_path / "fam.txt"
    bad.write_text("a x\n")
    with pytest.raises(ClimbError, match="must be .csv"):
        read_families(bad)


def test_msl_families_share_the_family_budget():
    same = family_matrix(GROUPS, {"a": "x", "b": "x"})
    assert np.array_equal(same, [[1, 1, 0], [1, 1, 0], [0, 0, 1]])
    law = MSLLaw.with_families({"a": "x", "b": "x"})
    obs, law = simulate(
        law,
        {
            "log_B": np.zeros(3),
            "beta": np.full(3, 0.3),
            "log_E": np.zeros(3),
            "gamma": np.full(3, 0.1),
        },
        zero_shares=True,
    )
    # a has zero share in 3 mixtures but its family (with b) does not: still usable
    assert law.usable(obs).n == obs.n


def test_msl_optimal_mixture_closed_form_and_optimality():
    C = np.array([2.0, 1.0, 3.0])
    gamma = np.full(3, 0.2)
    w = np.array([1.0, 2.0, 1.0])
    r = optimal_mixture(C, gamma, weights=w)
    closed = (w * C * gamma) ** (1 / 1.2)
    assert np.allclose(r, closed / closed.sum(), atol=1e-9)
    # unequal gammas and families: no random mixture does better
    gamma = np.array([0.1, 0.3, 0.2])
    same = family_matrix(GROUPS, {"a": "x", "b": "x"})
    r = optimal_mixture(C, gamma, weights=w, same=same)
    assert r.sum() == pytest.approx(1.0)

    def objective(mix):
        s = mix @ same
        return np.sum(w * C * s ** (-gamma), axis=-1)

    rand = np.random.default_rng(0).dirichlet(np.ones(3), size=2000)
    assert objective(r) <= objective(rand).min() + 1e-12
    # vectorised over draws
    rs = optimal_mixture(np.stack([C, C * 2]), np.stack([gamma, gamma]))
    assert rs.shape == (2, 3)


def test_observations_to_runs_round_trip(runs3):
    obs = Observations.from_runs(runs3)
    back = obs.to_runs()
    assert back.n_obs == runs3.n_obs
    assert np.allclose(np.sort(back.obs_loss), np.sort(runs3.obs_loss))
    r, tok, op = obs.points()
    assert r.shape == (runs3.n_points, 3) and op.shape == (obs.n,)


def test_shipped_family_table_pools_known_languages_only(tmp_path):
    from climb_bayes.laws.families import describe_families, resolve_families

    groups = ["en", "de", "ru", "zh", "ja"]
    choice = resolve_families("auto", groups)
    assert choice.source == "table"
    assert choice.mapping["en"] == choice.mapping["de"] == "Germanic"
    assert len({choice.mapping[g] for g in ("ru", "zh", "ja")}) == 3
    line = describe_families(choice, groups)
    assert "Germanic (en, de)" in line and "on their own: ru, zh, ja" in line
    # names, regional variants and case resolve through the same table
    choice = resolve_families(None, ["French", "es", "pt-BR", "Pile-CC"])
    assert {choice.mapping[g] for g in ("French", "es", "pt-BR")} == {"Romance"}
    assert "Pile-CC" not in choice.mapping
    # nothing shared (domains, or one language per family): the per-group form
    assert resolve_families("auto", ["Pile-CC", "ArXiv"]).mapping is None
    assert resolve_families("auto", ["en", "ru"]).mapping is None
    assert resolve_families("none", groups) == (None, "none")
    assert "per language (--families none)" in describe_families(
        resolve_families("none", groups), groups
    )
    path = tmp_path / "fam.json"
    path.write_text('{"ru": "east", "ja": "east"}')
    choice = resolve_families(path, groups)
    assert choice.mapping == {"ru": "east", "ja": "east"} and choice.source == "fam.json"
    with pytest.raises(ClimbError, match="not found"):
        resolve_families(tmp_path / "missing.csv", groups)


def test_nuts_diagnostics_of_a_law_with_parameters_of_different_sizes():
    """The DML samples ``t_free`` of shape (m - 1, m) next to per-group sites: the one
    diagnostics path (arviz-stats, as CLIMB's) must keep their dimensions apart (sharing one
    ``dim_0`` crashed the default fit)."""
    truth = DML_TRUTH
    obs, law = simulate(DMLLaw(), truth)
    fit = fit_nuts(law, obs, FitOptions(n_starts=1, chains=2, warmup=100, samples=100))
    diag = Diagnostics.from_json(fit.info["diagnostics"])
    assert diag.n_draws == 100 and diag.max_rhat == fit.info["max_rhat"]
    assert law_problems(fit.info) == [p.split(": ")[0] for p in diag.problems]
    for label in diag.worst_parameters:  # per-group axes named by group: "log_c[b]"
        assert set(label[label.index("[") + 1 : -1].split(",")) & set(GROUPS), label


def test_generic_fits_keep_the_run_effect_only_where_groups_repeat():
    obs, law = simulate(IsolatedLaw(), ISOLATED_TRUTH, n_mix=6, sigma=0.01)
    lines: list[str] = []
    single = fit_map(law, obs, OPTS, d_ref=D_REF, log=lines.append)
    assert single.sigma_run is None and any("run effect off" in x for x in lines)
    # every observation twice (two checkpoints of one run): the run effect is identified
    twice = Observations(
        obs.groups, obs.run_ids, obs.run_r, obs.run_budget, np.tile(obs.run, 2),
        np.tile(obs.tokens, 2), np.tile(obs.group, 2), np.tile(obs.loss, 2),
    )  # fmt: skip
    assert fit_map(law, twice, OPTS, d_ref=D_REF).sigma_run is not None


def _two_modes(w: float) -> None:
    """x with modes at -1 (mass ``w``) and +1 (mass ``1 - w``), each of sd 0.2."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.scipy.special import logsumexp

    x = numpyro.sample("x", dist.Normal(0.0, 10.0))
    parts = jnp.stack(
        [
            jnp.log(w) + dist.Normal(-1.0, 0.2).log_prob(x),
            jnp.log1p(-w) + dist.Normal(1.0, 0.2).log_prob(x),
        ]
    )
    numpyro.factor("mixture", logsumexp(parts))


def test_climb_laplace_resolves_the_noise_model_of_one_point_runs(sim_frame3):
    """The law-level Laplace fit (the shipped pipeline's inner folds, evaluate's extrapolation
    check) uses the noise model every fit uses: on a table of final losses no run effect and
    the learned df bounded at 2 (until 2026-12-07 it kept both scales and the bound of 1)."""
    final = sim_frame3[sim_frame3["tokens_seen"] == sim_frame3["budget_tokens"]]
    obs = Observations.from_runs(runs_from_frame(final))
    lines: list[str] = []
    fit = ClimbLaw().fit(obs, "laplace", FitOptions(seed=0, samples=200), log=lines.append)
    assert fit.sigma_run is None and np.asarray(fit.student_df).min() >= ONE_POINT_DF_MIN
    assert any("run effect off" in x for x in lines) and any("bounded below" in x for x in lines)
    tails = ClimbLaw().fit(Observations.from_runs(runs_from_frame(sim_frame3)), "laplace",
                           FitOptions(seed=0, samples=200))  # fmt: skip
    assert tails.sigma_run is not None


@pytest.mark.parametrize("w", [0.99, 0.5])
def test_law_chains_start_where_the_modes_hold_mass(w):
    """A point fit on the side of the minor mode (x = 0.5): the searches from jittered copies
    find both modes, and the chains start at each in proportion to its Laplace evidence (not to
    the number of searches that reached it) -- all at -1 when it holds 99% of the mass, about
    half when the modes are equal (3-4 of 6 over keys 0-9; without the evidence weighting
    all 6 starts would stay where the point fit is, and counting searches gave 1 of 6)."""
    import jax

    from climb_bayes.laws.base import _mode_starts

    init, found = _mode_starts(
        lambda: _two_modes(w), (), {"x": np.asarray(0.5)}, 6, jax.random.PRNGKey(0)
    )
    assert found.modes == 2
    x = np.asarray(init["x"])
    assert np.all(np.abs(np.abs(x) - 1.0) < 0.8)  # every start near a mode
    n_minus = int(np.sum(x < 0))
    assert n_minus == 6 if w == 0.99 else 2 <= n_minus <= 4, x


def test_fit_options_refuse_settings_nuts_cannot_use():
    """Every law's NUTS settings are checked where they are made, with the flag's name."""
    for bad, flag in [
        ({"target_accept": 1.0}, "--target-accept"),
        ({"warmup": 0}, "--warmup"),
    ]:
        with pytest.raises(ClimbError, match=flag):
            FitOptions(**bad)
    config = FitOptions(chains=4, samples=2).nuts_config(4)
    assert config.draws_per_chain == 1 and not config.dense_mass


def test_each_law_has_its_own_target_acceptance_unless_one_is_given():
    """`fit` without --target-accept: CLIMB's sampler default for CLIMB and the DML, 0.9 for
    Isolated and MSL (no funnel); a value given applies to every law."""
    from climb_bayes.inference.nuts import FIT_SAMPLER

    laws = {law.name: law for law in parse_laws("climb,msl,dml,isolated")}
    own = FitOptions(target_accept=None)
    assert {n: own.target_accept_for(law) for n, law in laws.items()} == {
        "climb": FIT_SAMPLER.target_accept,
        "msl": 0.9,
        "dml": FIT_SAMPLER.target_accept,
        "isolated": 0.9,
    }
    assert own.nuts_config(4, own.target_accept_for(laws["isolated"])).target_accept == 0.9
    given = FitOptions(target_accept=0.99)
    assert {given.target_accept_for(law) for law in laws.values()} == {0.99}


@pytest.mark.parametrize("name", ["isolated", "climb"])
def test_padded_fold_fits_of_a_law_share_their_compiled_programs(runs3, name, backend_compiles):
    """Two Laplace fits of different subsets of one table, padded to its shape (as the
    ensemble's leave-future-out folds are): the second compiles nothing -- its point fit,
    mode searches, Hessians and draws run the first one's programs with its own data -- and
    is its own data's fit."""
    from climb_bayes.data.padding import PaddedShape

    obs = Observations.from_runs(runs3)
    opts = FitOptions(seed=0, samples=200, pad_to=PaddedShape.of(obs))
    first, second = obs.select(obs.run % 3 != 0), obs.select(obs.run % 3 != 1)
    law = get_law(name)
    fit_a = law.prepare(first).fit(first, "laplace", opts)
    with backend_compiles() as compiles:
        fit_b = law.prepare(second).fit(second, "laplace", opts)
    assert compiles == []
    assert fit_a.fit_obs.n == first.n and fit_b.fit_obs.n == second.n
    assert not np.allclose(np.median(fit_a.draws["log_E"], 0), np.median(fit_b.draws["log_E"], 0))
