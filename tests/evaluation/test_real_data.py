"""Published data (RegMix, Data Mixing Laws) load and score; skipped when the folder is absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from climb_bayes.data.published import TOKENS_PER_STEP, load_5mix, load_regmix
from climb_bayes.evaluation.holdout_scores import evaluate_laws
from climb_bayes.laws import FitOptions, parse_laws

DATA = Path(__file__).parents[2] / ".." / "shared" / "data"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="no ../shared/data folder")


def test_regmix_loads_13_domains_with_zero_shares_counted():
    fit, notes = load_regmix(DATA, "train")
    assert fit.m == 13 and len(fit.run_ids) == 512 and fit.n == 512 * 13
    assert notes["dropped_domains"] == ["nih_exporter", "philpapers", "enron_emails", "europarl"]
    assert notes["n_zero_share"] == int(fit.zero_share.sum()) > 1000
    assert np.allclose(fit.run_r.sum(axis=1), 1.0)
    test, _ = load_regmix(DATA, "test")
    assert len(test.run_ids) == 256


def test_5mix_token_extrapolation_scores():
    obs = load_5mix(DATA, ("70M",))["70M"]
    assert obs.groups == ("academic", "prose", "dialogue", "symbolic", "internet")
    fit = obs.select(obs.tokens <= 12_000 * TOKENS_PER_STEP)
    test = obs.select((obs.tokens >= 20_000 * TOKENS_PER_STEP) & (obs.tokens <= 3.2e10))
    rows, _ = evaluate_laws(
        fit, test, parse_laws("msl,dml"), options=FitOptions(n_starts=1), n_predictive=200
    )
    subsets = [(r.law, r.subset) for r in rows]
    assert subsets == [("msl", "positive"), ("dml", "positive"), ("dml", "zero")]
    for r in rows:
        assert r.metrics["n"] > 0
        assert r.metrics["mre"] < 0.2
    assert rows[0].metrics["r2_pooled"] > 0.5
