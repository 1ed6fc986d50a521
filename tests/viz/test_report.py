"""The HTML report is self-contained and renders in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from climb_bayes.cli.report_cmd import report
from climb_bayes.viz.report import render_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def report_html(nuts_fit3, tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    fit_path = folder / "fit.nc"
    nuts_fit3.tree.attrs["data_label"] = "SYNTHETIC data simulated for the tests"
    nuts_fit3.save(fit_path)
    rob = folder / "robustness.json"
    rob.write_text(
        json.dumps(
            {
                "verdict": {"robust": False, "text": "NOT ROBUST: prior study moved r*"},
                "studies": {
                    "prior": {
                        "verdict": "r* moves 0.2",
                        "flagged": True,
                        "max_rstar_shift": 0.2,
                        "max_loss_shift": 0.01,
                    }
                },
            }
        )
    )
    out = folder / "report.html"
    result = CliRunner().invoke(report, [str(fit_path), "-o", str(out), "--robustness", str(rob)])
    assert result.exit_code == 0, result.output
    return out


def test_report_self_contained(report_html):
    text = report_html.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") >= 5
    # nothing is loaded from elsewhere
    assert not re.search(r'src="(?!data:)', text)
    assert "<link" not in text
    assert "SYNTHETIC" in text


def test_report_point_fit_without_plots(map_fit3):
    lines: list[str] = []
    text = render_report(map_fit3, include_plots=False, log=lines.append)
    assert len(lines) == 3 and all(line.startswith("report: ") for line in lines)  # progress
    assert "Point fit: no sampler diagnostics" in text
    assert 'id="rstar-table"' in text
    assert "No robustness results given" in text


def test_report_renders_in_chromium(report_html, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(
                "chromium is not installed but CI=true: the report must be rendered in CI "
                "(.ci/run installs Debian's chromium package when it is missing)."
            )
        pytest.skip("chromium is not installed (apt-get install chromium to run this test)")
    url = report_html.resolve().as_uri()
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, "--dump-dom", url], capture_output=True, text=True, timeout=120
    ).stdout
    assert 'id="diagnostics-report"' in dom
    assert "max R-hat" in dom and "verdict:" in dom
    table = re.search(r'<table[^>]*id="rstar-table".*?</table>', dom, re.S)
    assert table is not None
    for lang in ("en", "de", "zh"):
        assert f"<th>{lang}</th>" in table.group(0)
    assert "r* median" in table.group(0) and "baseline: uniform" in table.group(0)
    assert 'id="parameter-table"' in dom
    assert "NOT ROBUST" in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [CHROMIUM, *FLAGS, "--window-size=1200,2000", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_report_keeps_what_the_reader_left_out_and_small_values(
    map_fit3, nuts_fit3, runs3, tmp_path
):
    """The data summary is the one `fit` printed (the counts of losses its reader left out
    travel in the fit file), and the parameter table is not rounded to two decimals (a noise
    scale of 0.004 read 0)."""
    from climb_bayes.inference.fitresult import load_fit
    from climb_bayes.viz.report import parameter_table

    assert runs3.n_points_dropped_head > 0
    path = tmp_path / "fit.nc"
    map_fit3.save(path)
    rebuilt = load_fit(path).runs
    assert rebuilt.n_excluded_zero_share == runs3.n_excluded_zero_share
    assert rebuilt.n_points_dropped_head == runs3.n_points_dropped_head
    assert rebuilt.summary().splitlines()[-2] == runs3.summary().splitlines()[-2]
    table = parameter_table(nuts_fit3)
    sigma = table.loc[[i for i in table.index if str(i).startswith("sigma[")], "mean"]
    assert (sigma > 0).all() and (sigma < 0.05).all()
    assert str(table["ess_bulk"].dtype) == "Int64"


def test_report_shows_a_laplace_fits_check_and_the_default_predictive(runs3):
    """A Laplace fit's diagnostics are its mode search and Pareto k (not "point fit"); a failed
    check puts the command line's warning on the page; predictions and r* are the default
    predictive's, with the laws' expected-loss interval beside one new run's."""
    from climb_bayes.inference.fitting import fit_runs
    from climb_bayes.inference.nuts import NutsConfig
    from climb_bayes.viz.report import prediction_table, rstar_table

    fit = fit_runs(runs3, method="laplace", config=NutsConfig(samples=400), seed=0)
    text = render_report(fit, include_plots=False)
    assert "Laplace approximation:" in text and "Point fit" not in text
    fit.tree.attrs["laplace_pareto_k"] = "2.0"  # as a posterior far from its Gaussian gives
    text = render_report(fit, include_plots=False)
    assert 'id="fit-warning"' in text and "poor approximation of its posterior" in text
    dmax = float(runs3.run_budgets.max())
    table = prediction_table(fit, [dmax, 100 * dmax])
    new_lo, new_hi = table["90% predictive low"], table["90% predictive high"]
    law_lo, law_hi = table["90% param low"], table["90% param high"]
    assert (new_lo <= law_lo).all() and (new_hi >= law_hi).all()
    assert ((law_lo <= table["median"]) & (table["median"] <= law_hi)).all()
    # the extrapolation discrepancy widens one new run's interval with the distance
    width = new_hi - new_lo
    near, far = table.index.get_level_values("budget").unique()  # in the order given
    assert (width.loc[far] > 2 * width.loc[near]).all()
    rstar, _ = rstar_table(fit, 10 * dmax)
    langs = list(fit.languages)
    for who in ("r*", "CLIMB r*"):
        lo, med, hi = (rstar.loc[f"{who} {q}", langs] for q in ("90% low", "median", "90% high"))
        assert (lo >= 0).all() and (lo <= med).all() and (med <= hi).all() and (hi <= 1).all()
        assert abs(med.sum() - 1.0) < 0.1  # medians per language: near, not on, the simplex
    # the discrepancy widens r* too: the default predictive's interval holds CLIMB's
    spread = rstar.loc["r* 90% high"] - rstar.loc["r* 90% low"]
    climb = rstar.loc["CLIMB r* 90% high"] - rstar.loc["CLIMB r* 90% low"]
    assert (spread[langs] >= climb[langs]).all()
