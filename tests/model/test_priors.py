"""Priors: the TOML file a user edits, its validation, and what the model reads from it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from climb_bayes.errors import PriorsError
from climb_bayes.model.priors import Priors, load_priors, priors_to_toml


def test_toml_round_trip_keeps_every_setting(tmp_path):
    custom = Priors(
        beta_median=0.25,
        transfer_scale=0.3,
        likelihood="normal",
        transfer_prior="natural",
        hierarchical_transfer=True,
        reducible_loc={"en": 0.5, "de": 0.7},
    )
    path = tmp_path / "p.toml"
    path.write_text(priors_to_toml(custom), encoding="utf-8")
    back = load_priors(path)
    assert back == custom  # ``source`` is excluded from equality
    assert back.source == str(path)
    # the commented template lists every field with a note
    text = priors_to_toml()
    for f in dataclasses.fields(Priors):
        if f.name != "source":
            assert f"\n{f.name} = " in text


def test_a_partial_file_keeps_defaults_and_overrides_win(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[priors]\nbeta_median = 0.2\n", encoding="utf-8")
    p = load_priors(path, likelihood="normal", noise_scale=None)
    assert p.beta_median == 0.2 and p.likelihood == "normal"
    assert p.noise_scale == Priors().noise_scale  # None means "not given"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[priors]\nbeta_mediam = 0.2\n", "unknown prior setting(s) beta_mediam"),
        ("[priors]\nnoise_scale = 0\n", "'noise_scale' must be a positive number"),
        ("[priors]\neta_log_sd = -1.0\n", "'eta_log_sd' must be a positive number"),
        ('[priors]\nlikelihood = "cauchy"\n', "'likelihood' must be one of"),
        ('[priors]\ntransfer_prior = "flat"\n', "'transfer_prior' must be one of"),
        ('[priors]\nreducible_loc = "median"\n', "'reducible_loc' must be \"auto\""),
        ("[priors\n", "not valid TOML"),
    ],
)
def test_bad_files_name_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PriorsError) as err:
        load_priors(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(PriorsError, match="climb-bayes priors >"):
        load_priors(tmp_path / "none.toml")


def test_the_model_uses_the_stated_priors(runs3):
    """Prior draws of the CLIMB model follow the settings: the median of beta is beta_median
    and the sd of log beta is beta_log_sd (a wrong transform or a swapped field breaks it)."""
    import jax

    from climb_bayes.model.climb_model import draw_prior, model_data

    for median, sd in [(0.3, 0.2), (0.1, 0.5)]:
        priors = Priors(beta_median=median, beta_log_sd=sd)
        data = model_data(runs3, priors)
        keys = jax.random.split(jax.random.PRNGKey(0), 400)
        log_beta = np.log(np.stack([draw_prior(k, data, priors)["beta"] for k in keys]))
        assert np.median(log_beta) == pytest.approx(np.log(median), abs=0.05)
        assert np.std(log_beta) == pytest.approx(sd, rel=0.12)
