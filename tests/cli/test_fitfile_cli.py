"""fit.nc round trip, priors I/O and the fit/priors/simulate/summary commands."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.cli import main
from climb_bayes.errors import FitFileError, PriorsError
from climb_bayes.inference.fitresult import load_fit
from climb_bayes.model.law import log_loss
from climb_bayes.model.priors import Priors, load_priors, priors_to_toml


def _predict(fit, r, D):
    return np.asarray(log_loss(r, D, *fit.law_draws()))


@pytest.mark.parametrize("which", ["map_fit3", "nuts_fit3"])
def test_fit_file_round_trip_reproduces_predictions_exactly(which, request, tmp_path):
    fit = request.getfixturevalue(which)
    path = fit.save(tmp_path / "fit.nc")
    loaded = load_fit(path)
    r, D = np.array([0.5, 0.3, 0.2]), 1e12
    np.testing.assert_array_equal(_predict(loaded, r, D), _predict(fit, r, D))
    assert loaded.languages == fit.languages
    assert loaded.d_ref == fit.d_ref
    assert loaded.priors == fit.priors
    assert loaded.runs.n_obs == fit.runs.n_obs
    np.testing.assert_array_equal(loaded.runs.obs_loss, fit.runs.obs_loss)
    groups = set(loaded.tree.children)
    expected = {"posterior", "log_likelihood", "observed_data", "posterior_predictive"}
    assert expected <= groups
    if which == "nuts_fit3":
        assert "sample_stats" in groups
        assert loaded.diagnostics == fit.diagnostics
    post = loaded.tree["posterior"]
    assert post["b"].dims[-2:] == ("source_language", "language")
    assert list(post["language"].values) == list(fit.languages)
    # one log-likelihood term per (run, language) group: the run effect ties its points
    assert loaded.tree["log_likelihood"]["log_loss"].dims[-1] == "group"
    assert "run" in loaded.tree["constant_data"].dims
    assert loaded.attrs["data_sha256"] == fit.attrs["data_sha256"]
    assert loaded.attrs["climb_bayes_version"] == climb_bayes.__version__


def test_load_fit_errors(tmp_path):
    with pytest.raises(FitFileError, match="not found"):
        load_fit(tmp_path / "missing.nc")
    bad = tmp_path / "bad.nc"
    bad.write_text("not netcdf")
    with pytest.raises(FitFileError, match="not a readable"):
        load_fit(bad)


def test_priors_toml_round_trip_and_errors(tmp_path):
    p = Priors(beta_median=0.4, likelihood="normal", hierarchical_transfer=True)
    f = tmp_path / "p.toml"
    f.write_text(priors_to_toml(p))
    assert load_priors(f) == p
    f.write_text("[priors]\nbeta_medain = 0.3\n")
    with pytest.raises(PriorsError, match="beta_medain"):
        load_priors(f)
    f.write_text("[priors]\nnoise_scale = -1\n")
    with pytest.raises(PriorsError, match="noise_scale"):
        load_priors(f)
    f.write_text("[priors\n")
    with pytest.raises(PriorsError, match="not valid TOML"):
        load_priors(f)


def test_cli_priors_prints_loadable_toml(capsys, tmp_path):
    assert main(["priors"]) == 0
    out = capsys.readouterr().out
    assert "beta_median = 0.3" in out
    (tmp_path / "p.toml").write_text(out)
    assert load_priors(tmp_path / "p.toml") == Priors()


def test_cli_simulate_then_fit_map_then_summary(tmp_path, capsys):
    runs = tmp_path / "runs.csv"
    params = tmp_path / "params.json"
    rc = main(
        [
            "simulate",
            "-o",
            str(runs),
            "--languages",
            "en,de,zh",
            "--seed",
            "2",
            "--params-out",
            str(params),
        ]
    )
    assert rc == 0 and runs.is_file() and params.is_file()
    out = tmp_path / "fit.nc"
    assert main(["fit", str(runs), "--method", "map", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "per-language parameters" in text and f"wrote {out}" in text
    assert load_fit(out).method == "map"
    assert main(["summary", str(out)]) == 0
    assert "transfer b" in capsys.readouterr().out


def test_cli_fit_laplace_then_predict_and_suggest(tmp_path, capsys, sim_frame3):
    """``fit --method laplace``: every law by Laplace approximation; the commands that need
    posterior draws take it (a point fit they refuse or mark)."""
    runs = tmp_path / "runs.csv"
    sim_frame3.to_csv(runs, index=False)
    out = tmp_path / "fit.nc"
    assert main(["fit", str(runs), "--method", "laplace", "--samples", "400", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "method: laplace, 400 draw(s)" in text and "mode search converged" in text
    assert "diagnostics:" not in text and "weights:" in text
    # two budgets: no leave-future-out folds, and the line says why and what to do
    assert "(2 budget(s); a leave-future-out check needs 3" in " ".join(text.split())
    assert main(["predict", str(out), "--budget", "1e11", "--mixture", "uniform"]) == 0
    text = capsys.readouterr().out
    assert "Laplace approximation, 400 draw(s)" in text and "one draw" not in text
    argv = ["suggest", str(out), "--budget", "1e11", "--max-draws", "100", "--outcomes", "8"]
    assert main([*argv, "--n-random", "2", "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "why:" in text and "predictive: stacked laws" in text  # ranked under the predictive
    assert "lower bound" in text


def test_cli_fit_strict_fails_on_unconverged_chains(tmp_path, sim_frame3):
    runs = tmp_path / "runs.csv"
    sim_frame3.to_csv(runs, index=False)
    out = tmp_path / "fit.nc"
    rc = main(
        [
            "fit",
            str(runs),
            "--samples",
            "20",
            "--warmup",
            "20",
            "--chains",
            "2",
            "--strict",
            "-o",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 2
    assert out.is_file()  # the fit is kept for inspection; the exit code flags it


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("run_id,tokens,r_en,r_de,loss_en,loss_de\na,1e9,0.5,0.6,3.0,3.1\n", "sum"),
        ("run_id,tokens,r_en,r_de,loss_en,loss_de\na,1e9,0.5,0.5,-3.0,3.1\n", "loss_en"),
        ("run_id,tokens,r_en,loss_en,loss_de\na,1e9,1.0,3.0,3.1\n", "r_de"),
    ],
)
def test_cli_bad_runs_file_exits_2_without_traceback(tmp_path, content, needle):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "climb_bayes",
            "fit",
            str(f),
            "--method",
            "map",
            "-o",
            str(tmp_path / "fit.nc"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "bad.csv" in proc.stderr and needle in proc.stderr
    assert not (tmp_path / "fit.nc").exists()


def test_cli_missing_file_and_bad_priors_file(tmp_path, capsys):
    assert main(["fit", str(tmp_path / "nope.csv"), "--method", "map"]) == 2
    assert "nope.csv" in capsys.readouterr().err
    f = tmp_path / "runs.csv"
    f.write_text("run_id,tokens,r_en,r_de,loss_en,loss_de\na,1e9,0.5,0.5,3.0,3.1\n")
    assert main(["fit", str(f), "--method", "map", "--priors", str(tmp_path / "p.toml")]) == 2
    assert "priors file not found" in capsys.readouterr().err


def test_cli_blocks_with_hierarchical_transfer_is_refused(tmp_path, capsys):
    out = tmp_path / "fit.nc"
    code = main(["fit", "--blocks", "language", "--hierarchical-transfer", "-o", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "--blocks joint" in err and "Traceback" not in err
    assert not out.exists()
