"""The shipped datasets: the default is the Algorithm-1 design at three budgets plus held-out
mixtures that extrapolate, every run trained on exactly floor(r_i * D) tokens without repeating
data; the previous default stays readable under its own name."""

from __future__ import annotations

import json
from decimal import Decimal
from math import floor

import numpy as np
import pandas as pd
import pytest

import climb_bayes  # noqa: F401
from climb_bayes.data.datasets import DATASETS, dataset_label, dataset_path, default_dataset
from climb_bayes.data.runs import read_runs
from climb_bayes.errors import ClimbError

LANGS = ["en", "de", "ru", "zh", "ja"]


def _records(name: str) -> dict:
    path = dataset_path(name)
    return json.loads(path.with_name(path.name.replace(".csv", "_records.json")).read_text())


def test_every_named_dataset_reads():
    assert default_dataset() == "default"
    for name in DATASETS:
        runs = read_runs(dataset_path(name))
        assert list(runs.languages) == LANGS
        assert dataset_label(name)
    assert "SYNTHETIC" in dataset_label("synthetic")
    assert read_runs(dataset_path("tiny-2024")).n_runs == 34  # the 2024 default, unchanged
    with pytest.raises(ClimbError, match="unknown dataset"):
        dataset_path("nope")


def test_default_is_algorithm1_at_three_budgets_with_extrapolating_holdouts():
    meta = _records("default")
    runs = meta["runs"]
    fit = [r for r in runs if not r["run_id"].startswith("holdout-")]
    held = [r for r in runs if r["run_id"].startswith("holdout-")]
    budgets = sorted({r["budget_tokens"] for r in fit})
    assert len(budgets) == 3
    assert len(fit) == 3 * len(LANGS) * 3  # Algorithm 1: 3 runs per language per budget
    for lang in LANGS:  # per language and budget: one monolingual run and two at r_lang = c
        for b in budgets:
            own = [r for r in fit if r["run_id"].startswith(f"{lang}-") and r["budget_tokens"] == b]
            assert len(own) == 3
            focal = sorted(r["shares"][lang] for r in own)
            assert focal[-1] == 1.0 and focal[0] <= 0.5 < focal[1] < 1.0  # both halves of c
            for r in own:  # the other languages split the rest equally
                rest = [r["shares"][x] for x in LANGS if x != lang]
                assert max(rest) - min(rest) < 1e-9
    assert len(held) >= 8
    assert min(r["budget_tokens"] for r in held) >= 3 * budgets[-1]
    shares = np.array([[r["shares"][x] for x in LANGS] for r in held])
    tv = 0.5 * np.abs(shares[:, None] - shares[None]).sum(-1)
    assert tv[np.triu_indices(len(held), 1)].min() >= 0.05  # no near-duplicate holdouts


def test_default_runs_trained_exact_budgets_without_repetition():
    meta = _records("default")
    available = meta["data"]["training_tokens_available"]
    for r in meta["runs"]:
        for lang in LANGS:
            # exact decimal floor, as training.mixture computes it
            want = floor(Decimal(repr(float(r["shares"][lang]))) * Decimal(r["budget_tokens"]))
            assert r["realised_tokens"][lang] == want, (r["run_id"], lang)
            assert r["realised_tokens"][lang] <= available[lang], (r["run_id"], lang)
            assert r["epochs"][lang] <= 1.0
    table = pd.read_csv(dataset_path("default"))
    assert set(table["run_id"]) == {r["run_id"] for r in meta["runs"]}
    assert np.isfinite(table["loss"]).all()


@pytest.fixture(scope="module")
def default_obs():
    from climb_bayes.data.observations import Observations

    return Observations.from_runs(read_runs(dataset_path("default")))


def test_default_holdouts_extrapolate_3x_with_covering_intervals(default_obs):
    """Fit CLIMB (Laplace) on the Algorithm-1 runs, predict the 3M-token holdouts (3x beyond).

    Measured 2026-11-24: MRE 4.7%, pooled R² 0.90, 90% coverage 0.97 (NUTS in
    DEFAULT_DATA.md: MRE 3.9%). The issue-14 targets (MRE <= 3%, per-language R² >= 0.5: de is
    at 0.03-0.32) are NOT met and are reported there, not asserted here; these bounds are what a
    wrong law, a broken reader or a mislabelled holdout breaks (an intercept-only model has
    R² 0, the transfer-free isolated law MRE 5.6%)."""
    from climb_bayes.inference.predictive import predictive_samples
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.registry import get_law

    obs = default_obs
    held = np.array([r.startswith("holdout-") for r in obs.run_ids])[obs.run]
    law = get_law("climb")
    fit = law.fit(obs.select(~held), "laplace", FitOptions(seed=0, samples=400))
    test = law.prepare(obs).usable(obs.select(held))
    pred = np.median(fit.predict_obs(test), axis=0)
    y = np.log(test.loss)
    assert np.mean(np.abs(np.exp(pred - y) - 1)) < 0.06
    assert 1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2) > 0.8
    lo, hi = np.quantile(predictive_samples(fit, test, 1000, seed=0), [0.05, 0.95], axis=0)
    assert np.mean((y >= lo) & (y <= hi)) >= 0.85


def test_default_supports_leave_future_out_fit_two_predict_third(default_obs):
    from climb_bayes.evaluation.lfo_evaluate import evaluate_lfo
    from climb_bayes.inference.ensemble import EnsembleOptions
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.registry import get_law

    obs = default_obs
    fit_runs = np.array([not r.startswith("holdout-") for r in obs.run_ids])
    res = evaluate_lfo(
        obs.select_runs(fit_runs),
        [get_law("climb")],
        FitOptions(seed=0, samples=200),
        EnsembleOptions(method="laplace", lfo="none"),
        max_folds=3,
        n_predictive=400,
    )
    assert [f["cut"] for f in res.folds] == [5e5]  # fit 250k + 500k, score 1M
    assert res.folds[0]["n_test"] > 0
    bins = {r.ratio_bin for r in res.rows if r.law == "climb"}
    assert bins == {"(1.5, 2]", "all"}
