"""The paper's Huber point fit: where its estimate lies relative to the priors, and the gate."""

from __future__ import annotations

import numpy as np

import climb_bayes  # noqa: F401
from climb_bayes.data.datasets import dataset_path
from climb_bayes.data.runs import read_runs
from climb_bayes.inference.convergence import fit_gate, law_problems
from climb_bayes.inference.fitting import fit_runs
from climb_bayes.inference.point_fit import coordinate_labels, far_from_prior


def test_coordinate_labels_follow_the_search_vector():
    labels = coordinate_labels(["en", "de", "zh"])
    assert len(labels) == 3 * 3 + 2 * 6 + 3  # log_A, log_beta, log_E; b, kappa; log_eta
    assert labels[:3] == ["log_A[en]", "log_A[de]", "log_A[zh]"]
    assert labels[6] == "log_E[en]" and labels[9] == "b[en->de]" and labels[-1] == "log_eta[zh]"


def test_coordinate_labels_line_up_with_the_unpacked_sites():
    """Label ``k`` names the value that search coordinate ``k`` sets (one layout table)."""
    import jax.numpy as jnp

    from climb_bayes.inference.point_fit import _pack, _unpack
    from climb_bayes.model.climb_model import pair_labels

    langs = ["en", "de", "zh"]
    labels = coordinate_labels(langs)
    theta = np.linspace(-1.0, 1.0, len(labels))
    v = {k: np.asarray(x) for k, x in _unpack(jnp.asarray(theta), len(langs)).items()}
    np.testing.assert_allclose(_pack(v), theta, rtol=1e-12)
    pairs = pair_labels(langs)
    for label, value in [
        ("log_A[de]", v["log_A"][1]),
        ("log_beta[zh]", np.log(v["beta"][2])),
        ("log_E[en]", v["log_E"][0]),
        ("b[de->zh]", v["b_offdiag"][pairs.index("de->zh")]),
        ("kappa[zh->en]", v["kappa_offdiag"][pairs.index("zh->en")]),
        ("log_eta[de]", np.log(v["eta"][1])),
    ]:
        assert np.isclose(theta[labels.index(label)], value), label


def test_far_from_prior_names_the_worst_coordinates():
    z = np.zeros(24)
    z[[6, 9, 10, 11]] = [-273.0, 12.0, -40.0, 9.9]  # 9.9 sd is inside the limit
    text = far_from_prior(z, ["en", "de", "zh"])
    assert text.startswith("3 of 24 coordinates more than 10 prior sds")
    assert "(log_E[en] -273, b[en->zh] -40, b[en->de] +12)" in text
    assert far_from_prior(np.full(24, 9.9), ["en", "de", "zh"]) == ""
    assert far_from_prior(np.r_[np.zeros(23), np.nan], ["en", "de", "zh"]).startswith("1 of 24")


def test_healthy_point_fit_passes_the_gate(map_fit3):
    """A simulated 3-language world: the estimate stays within a few prior sds."""
    assert map_fit3.attrs["point_far_from_prior"] == ""
    assert fit_gate(map_fit3).ok


def test_point_fit_without_a_finite_minimiser_is_flagged():
    """On the shipped default table the Huber loss keeps falling as every ``E_i`` goes to 0 and
    the transfers grow (measured: ``E`` 1e-71..1e-119, ``b`` down to -96; which start wins
    depends on the CPU). Such an estimate must not pass the gate silently."""
    runs = read_runs(dataset_path("default"))
    fit = fit_runs(runs, method="map", seed=0)
    far = fit.attrs["point_far_from_prior"]
    assert far and "log_E[" in far, far
    gate = fit_gate(fit)
    assert not gate.ok
    assert gate.problems[0].startswith("climb: point fit: ")
    assert "refit with --method nuts" in gate.warning()
    assert "--target-accept" not in gate.warning()  # not a sampler problem
    assert law_problems({"far_from_prior": far})[0].startswith("point fit: ")


def test_every_law_point_fit_is_checked_against_its_priors():
    """The same check for the other laws' Huber fits, against each law's own priors: Isolated
    (no transfer) drives ``E`` to 0 on the default table as CLIMB does; MSL stays near its
    prior centre (measured: within 1.3 sds)."""
    from climb_bayes.data.observations import Observations
    from climb_bayes.laws import FitOptions, get_law

    obs = Observations.from_runs(read_runs(dataset_path("default")))
    iso = get_law("isolated").prepare(obs).fit(obs, "map", FitOptions(n_starts=2))
    assert "log_E[" in iso.info["far_from_prior"]
    assert law_problems(iso.info)[-1].startswith("point fit: ")
    msl = get_law("msl").prepare(obs).fit(obs, "map", FitOptions(n_starts=2))
    assert msl.info["far_from_prior"] == "" and law_problems(msl.info) == []
