"""Mixtures outside the fitted runs' mixtures: the distance, and the warning of predict/optimize."""

from __future__ import annotations

import json

import numpy as np
import pytest

from climb_bayes.cli import main
from climb_bayes.decisions.mixture_support import (
    MIXTURE_TOLERANCE,
    mixture_support,
    mixture_support_warning,
)
from climb_bayes.inference.fitting import fit_runs

NEAR_UNIFORM = np.array([[0.34, 0.33, 0.33], [0.2, 0.4, 0.4], [0.4, 0.3, 0.3]])


def test_distance_is_zero_inside_and_the_l1_gap_outside():
    mono = np.eye(3)
    rng = np.random.default_rng(0)
    for r in rng.dirichlet(np.ones(3), size=20):  # every mixture blends the mono runs
        sup = mixture_support(r, mono)
        assert sup.distance < 1e-9 and sup.beyond == () and not sup.extrapolates
    inside = 0.5 * NEAR_UNIFORM[1] + 0.5 * NEAR_UNIFORM[2]
    assert mixture_support(inside, NEAR_UNIFORM).distance < 1e-9
    # (0.8, 0.1, 0.1): the nearest blend is (0.4, 0.3, 0.3), 0.4 + 0.2 + 0.2 away
    sup = mixture_support(np.array([0.8, 0.1, 0.1]), NEAR_UNIFORM)
    assert sup.distance == pytest.approx(0.8, abs=1e-9) and sup.extrapolates
    assert [b[0] for b in sup.beyond] == [0, 1, 2]
    assert sup.beyond[0] == pytest.approx((0, 0.8, 0.2, 0.4))
    # one language beyond its fitted range (fr 0.45 > 0.40 + tolerance)
    sup = mixture_support(np.array([0.2, 0.35, 0.45]), NEAR_UNIFORM)
    assert sup.beyond == ((2, 0.45, 0.3, 0.4),) and sup.extrapolates
    # outside the hull (every fitted mixture has de = fr) but inside every language's range:
    # the distance says so, the warning does not (on RegMix coverage did not fall with it)
    sup = mixture_support(np.array([0.3, 0.38, 0.32]), NEAR_UNIFORM)
    assert sup.distance > 0.05 and sup.beyond == () and not sup.extrapolates
    # within the tolerance of a range's end: not an extrapolation
    edge = np.array([0.2 - MIXTURE_TOLERANCE / 2, 0.4 + MIXTURE_TOLERANCE / 4, 0.4])
    assert not mixture_support(edge / edge.sum(), NEAR_UNIFORM).extrapolates
    # shares that do not sum to 1 (per-language medians of r* draws) are the mixture they scale to
    assert mixture_support(0.97 * inside, NEAR_UNIFORM).distance < 1e-9


def test_warning_names_only_the_mixtures_outside():
    shares = np.array([[0.3, 0.35, 0.35], [0.8, 0.1, 0.1]])
    text = mixture_support_warning(["near", "far"], shares, NEAR_UNIFORM, ["en", "de", "fr"])
    assert text.startswith("warning: 1 mixture(s) give a language a share outside the range")
    assert "far (en 0.800 (fitted 0.200-0.400)" in text and "near (" not in text
    assert "L1 distance 0.80 from the fitted mixtures" in text
    assert mixture_support_warning(["near"], shares[:1], NEAR_UNIFORM, ["en", "de", "fr"]) == ""


@pytest.fixture(scope="module")
def blended_fit_path(runs3, tmp_path_factory):
    """A point fit of :func:`runs3` without its single-language runs: the fitted mixtures then
    cover only part of the simplex (en 0.125-0.6)."""
    keep = runs3.run_proportions.max(axis=1) < 0.99
    fit = fit_runs(runs3.subset_runs(keep), method="map", seed=0, n_starts=2)
    path = tmp_path_factory.mktemp("support") / "blended.nc"
    fit.save(path)
    return path


def test_predict_and_optimize_warn_outside_the_fitted_mixtures(blended_fit_path, tmp_path, capsys):
    base = ["predict", str(blended_fit_path), "--budget", "1e11", "--max-draws", "1"]
    assert main([*base, "--mixture", "en=0.8,de=0.1,zh=0.1"]) == 0
    out = capsys.readouterr().out
    assert "warning: 1 mixture(s) give a language a share outside the range of the fitted" in out
    assert "en 0.800 (fitted 0.125-0.600)" in out
    assert main([*base, "--mixture", "uniform"]) == 0  # a blend of two fitted mixtures
    assert "share outside the range" not in capsys.readouterr().out
    table = tmp_path / "mixtures.csv"
    table.write_text("name,en,de,zh\ninside,0.45,0.3,0.25\nmostly_zh,0.05,0.05,0.9\n")
    many = ["predict", str(blended_fit_path), "--budget", "1e11", "--mixtures", str(table)]
    assert main(many) == 0
    out = capsys.readouterr().out
    assert "warning: 1 mixture(s)" in out and "mostly_zh (en 0.050 (fitted 0.125-0.600)" in out
    assert "zh 0.900 (fitted 0.100-0.750)" in out
    assert "inside (" not in out
    # optimize: warns exactly when its recommendation is outside the fitted mixtures
    res = tmp_path / "opt.json"
    args = ["optimize", str(blended_fit_path), "--budget", "1e11", "--no-baselines"]
    assert main([*args, "--out", str(res)]) == 0
    out = capsys.readouterr().out
    rec = json.loads(res.read_text())["results"][0]["recommended"]["shares"]
    rec = np.array([rec[lang] for lang in ("en", "de", "zh")])
    fitted = np.array([[0.5, 0.25, 0.25], [0.6, 0.2, 0.2], [0.4, 0.2, 0.4], [0.375, 0.25, 0.375],
                       [0.45, 0.45, 0.1], [0.125, 0.125, 0.75]])  # fmt: skip
    assert ("share outside the range" in out) is mixture_support(rec, fitted).extrapolates


def test_report_flags_an_rstar_outside_the_fitted_mixtures(blended_fit_path, tmp_path):
    from climb_bayes.inference.fitresult import load_fit
    from climb_bayes.viz.report import rstar_table

    html = tmp_path / "r.html"
    args = ["report", str(blended_fit_path), "--no-plots", "--budget", "1e11", "-o", str(html)]
    assert main(args) == 0
    fit = load_fit(blended_fit_path)
    table, _ = rstar_table(fit, 1e11)
    median = table.loc["r* median", list(fit.languages)].to_numpy(dtype=float)
    sup = mixture_support(median, fit.runs.run_proportions)
    assert ('id="rstar-extrapolates"' in html.read_text()) is sup.extrapolates
