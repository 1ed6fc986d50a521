"""``climb-bayes plan`` (Algorithm-1 run list) and ``suggest`` (preposterior ranking)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from climb_bayes.cli import main
from climb_bayes.decisions.ensemble_decision import decision_draws, draw_losses, optimum_draws
from climb_bayes.decisions.suggest import (
    Candidate,
    default_candidates,
    rank_candidates,
    read_candidates,
    spread_after,
)
from climb_bayes.errors import ClimbError

LANGS5 = ("en", "de", "ru", "zh", "ja")


# -- plan --------------------------------------------------------------------------------------


def test_plan_cli_writes_algorithm1_csv_for_training(tmp_path, capsys):
    out = tmp_path / "plan.csv"
    args = ["plan", "--languages", ",".join(LANGS5), "--budgets", "5e9,2.5e10"]
    args += ["--seed", "1", "--holdout", "4", "-o"]
    rc = main([*args, str(out)])
    assert rc == 0
    assert "30 Algorithm-1 runs" in capsys.readouterr().out
    df = pd.read_csv(out)
    assert list(df.columns) == ["run_id", "tokens"] + [f"r_{x}" for x in LANGS5]
    assert len(df) == 3 * 5 * 2 + 4
    r = df[[f"r_{x}" for x in LANGS5]].to_numpy()
    np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-9)
    main_runs = df.iloc[:30]
    assert set(main_runs["tokens"]) == {5e9, 2.5e10}
    assert (df.iloc[30:]["tokens"] == 1e11).all()  # hold-outs at 4x the largest budget
    # per language: one monolingual run and two runs at share c per budget
    for lang in LANGS5:
        mine = main_runs[main_runs["run_id"].str.startswith(f"{lang}-")]
        assert len(mine) == 6 and (mine[f"r_{lang}"] == 1.0).sum() == 2
    # the training module reads it
    from training.sweep import read_plan

    langs, runs = read_plan(out)
    assert langs == list(LANGS5) and len(runs) == 34
    # same seed, same plan
    out2 = tmp_path / "plan2.csv"
    main([*args, str(out2)])
    assert out.read_text() == out2.read_text()


def test_plan_cli_stdout_and_errors(capsys):
    assert main(["plan", "--languages", "en,de", "--budgets", "1e9", "--shares", "0.2,0.5"]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert text.startswith("run_id,tokens,r_en,r_de") and "en-c0.2-1B" in text
    # one budget level: the plan says its runs cannot check the law's extrapolation
    assert "1 budget level(s): `fit` and `evaluate --lfo` cannot check" in captured.err
    # three levels (two budgets and hold-outs at a larger one) can: no note
    args = ["--languages", "en,de", "--budgets", "1e9,2e9", "--holdout", "2"]
    assert main(["plan", *args]) == 0
    assert "cannot check" not in capsys.readouterr().err
    assert main(["plan", "--languages", "en,de", "--budgets", "1e9,2e9,4e9"]) == 0
    assert "cannot check" not in capsys.readouterr().err
    assert main(["plan", "--languages", "en,de", "--budgets", "1e9,2e9"]) == 0
    assert "2 budget level(s)" in capsys.readouterr().err
    for args, msg in (
        (["--languages", "en", "--budgets", "1e9"], "at least 2"),
        (["--languages", "en,de", "--budgets", "0"], "positive"),
        (["--languages", "en,de", "--budgets", "1e9", "--shares", "0.2"], "two numbers"),
        (["--languages", "en,en", "--budgets", "1e9"], "distinct"),
        (["--languages", "en,de", "--budgets", "1e9", "--holdout", "-1"], ">= 0"),
    ):
        assert main(["plan", *args]) == 2
        assert msg in capsys.readouterr().err


# -- suggest -----------------------------------------------------------------------------------


def test_spread_after_matches_the_gaussian_posterior_variance():
    """Q ~ N(0, 1), y = Q + N(0, s^2): E Var(Q | y) = s^2 / (1 + s^2); the regression finds it.
    Outcomes unrelated to Q teach nothing (the spread after is the spread now)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4000, 1))
    for s in (0.5, 1.0, 2.0):
        y = q + s * rng.standard_normal((4000, 1))
        assert spread_after(q, y) == pytest.approx(s**2 / (1 + s**2), rel=0.06)
    noise = rng.standard_normal((4000, 3))
    assert spread_after(q, noise) == pytest.approx(float(q.var()), rel=1e-12)
    # two target components, one outcome about each: the spreads add
    q2 = rng.standard_normal((4000, 2))
    y2 = q2 + rng.standard_normal((4000, 2))
    assert spread_after(q2, y2) == pytest.approx(1.0, rel=0.06)


@pytest.fixture(scope="module")
def joint3(nuts_fit3):
    """The default predictive of the 3-language NUTS fit (fitted budgets 5e9 and 2.5e10; its
    discrepancy from the prior), r* per joint draw at 1e12 and the uniform mixture's loss."""
    ens = nuts_fit3.ensemble()
    m = len(nuts_fit3.languages)
    w = np.full(m, 1 / m)
    draws = decision_draws(ens, 1e12, 400, seed=0)
    rstar = optimum_draws(draws, w, np.zeros(m), np.ones(m))
    return ens, draws, rstar, draw_losses(draws, w, w)


def _with_noise(ens, sigma):
    fits = {
        k: replace(f, sigma=np.full_like(f.sigma, sigma), sigma_run=None)
        for k, f in ens.fits.items()
    }
    return replace(ens, fits=fits)


def test_decision_draws_at_two_budgets_are_one_joint_draw(joint3):
    """Same seed, two budgets: the same law draws and discrepancy realisations; beyond the
    fitted range the discrepancy's part of the log-loss scales with the distance."""
    ens, draws, _, _ = joint3
    again = decision_draws(ens, 4e11, 400, seed=0)
    for a, b in zip(draws, again, strict=True):
        np.testing.assert_array_equal(a.index, b.index)
        np.testing.assert_array_equal(a.theta["phase"], b.theta["phase"])
        ratio = b.theta["shift"] / a.theta["shift"]
        np.testing.assert_allclose(ratio, np.broadcast_to(ratio[:1], ratio.shape), rtol=1e-9)
        assert np.all(ratio < 1.0)  # 4e11 is nearer the fitted range than 1e12


def test_a_run_beyond_the_fitted_budgets_teaches_the_discrepancy(nuts_fit3, joint3):
    """The spread of the uniform mixture's loss at 1e12 is mostly the extrapolation
    discrepancy. A run at the largest fitted budget (2.5e10) sees none of it; the same mixture
    at 1e11 shares the draw's discrepancy, so it narrows the loss a lot. A run measured with huge
    noise is worth nothing. r* at 40x is mostly the mixture-specific discrepancy, which one run
    cannot pin down: no run is credited with much (a CLIMB-posterior-only ranking credited runs
    with the parameters' share alone)."""
    ens, draws, rstar, loss = joint3
    langs = nuts_fit3.languages
    uniform = np.full(3, 1 / 3)
    cands = [Candidate("inside", uniform, 2.5e10), Candidate("beyond", uniform, 1e11)]
    table = rank_candidates(ens, draws, langs, cands, loss, target="loss").set_index("candidate")
    assert table.loc["beyond", "reduction_pct"] > 25.0
    assert table.loc["inside", "reduction_pct"] < 3.0
    assert table.loc["beyond", "snr_max"] > 2 * table.loc["inside", "snr_max"]
    assert "nats" in table.loc["beyond", "reason"]
    noisy = rank_candidates(_with_noise(ens, 5.0), draws, langs, cands, loss, target="loss")
    assert noisy["reduction_pct"].abs().max() < 3.0
    assert "within the noise" in noisy["reason"].iloc[0]
    for_rstar = rank_candidates(ens, draws, langs, cands, rstar)
    assert for_rstar["reduction_pct"].max() < 10.0
    assert for_rstar["spread_now"].iloc[0] > 0.1


def test_rank_candidates_table(nuts_fit3, joint3):
    ens, draws, rstar, _ = joint3
    langs = nuts_fit3.languages
    cands = default_candidates(langs, [2.5e10, 1e11], recommended=rstar.mean(axis=0), n_random=2)
    assert len(cands) == 2 * (1 + 1 + 3 + 2)
    for c in cands:
        assert abs(c.shares.sum() - 1) < 1e-12 and c.shares.min() > 0
    df = rank_candidates(ens, draws, langs, cands, rstar)
    assert list(df["rank"]) == list(range(1, len(cands) + 1))
    assert (np.diff(df["reduction"].to_numpy()) <= 1e-15).all()
    assert (df["spread_after"] <= df["spread_now"] + 1e-12).all()
    assert df["reason"].str.len().min() > 20
    few = decision_draws(ens, 1e12, 30, seed=0)
    with pytest.raises(ClimbError, match="max-draws"):
        rank_candidates(ens, few, langs, cands, rstar[:30])
    with pytest.raises(ClimbError, match="draws"):
        rank_candidates(ens, few, langs, cands, rstar)


def test_read_candidates(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("run_id,tokens,r_en,r_de,r_zh\na,1e11,0.5,0.3,0.2\nb,5e10,0,0.5,0.5\n")
    cands = read_candidates(str(path), ("en", "de", "zh"))
    assert [c.name for c in cands] == ["a", "b"] and cands[1].budget == 5e10
    path.write_text("run_id,tokens,r_en,r_de\na,1e11,0.5,0.5\n")
    with pytest.raises(ClimbError, match="r_zh"):
        read_candidates(str(path), ("en", "de", "zh"))


@pytest.fixture(scope="module")
def fit_files(nuts_fit3, map_fit3, tmp_path_factory):
    d = tmp_path_factory.mktemp("suggest")
    return nuts_fit3.save(d / "nuts.nc"), map_fit3.save(d / "map.nc")


def test_suggest_cli(fit_files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CLIMB_BAYES_COMPILE_CACHE", "0")
    nuts, _ = fit_files
    out = tmp_path / "s.csv"
    rc = main(
        [
            "suggest",
            str(nuts),
            "--budget",
            "1e12",
            "--max-draws",
            "200",
            "--outcomes",
            "16",
            "--n-random",
            "2",
            "--top",
            "3",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "why:" in text and text.count(" tokens the ") >= 3
    assert "predictive: climb alone" in text and "signal" in text
    ranking = text[text.index("target:") :].splitlines()  # the header lines are shared
    assert [line for line in ranking if len(line) > 100] == []
    assert text.count("  rank ") == 1  # 3 languages: the table is one block, not split
    assert "--outcomes is ignored" in captured.err
    df = pd.read_csv(out)
    assert len(df) == 14 and df["rank"].iloc[0] == 1
    # r* 40x beyond two budgets: no run narrows it much, and the command says why
    assert df["reduction_pct"].max() < 5.0 and "no candidate narrows" in text
    rc = main(
        [
            "suggest",
            str(nuts),
            "--budget",
            "1e12",
            "--target",
            "loss",
            "--max-draws",
            "100",
            "--outcomes",
            "8",
            "--n-random",
            "0",
            "--candidate-budgets",
            "5e10",
        ]
    )
    assert rc == 0


def test_suggest_cli_errors(fit_files, capsys):
    nuts, point = fit_files
    assert main(["suggest", str(point), "--budget", "1e12"]) == 2
    assert "NUTS" in capsys.readouterr().err
    assert main(["suggest", str(nuts), "--budget", "-1"]) == 2
    assert "positive" in capsys.readouterr().err
    assert main(["suggest", str(nuts), "--budget", "1e12", "--weights", "1,2"]) == 2
    assert "3 languages" in capsys.readouterr().err


def test_algorithm1_default_draws_from_both_halves_of_the_paper_grid():
    """Issue 16: c comes from the paper's 15-value grid, one share <= 0.5 and one > 0.5 per
    language (the small shares identify eta); the central pool stays behind pool='central'."""
    from climb_bayes.data.design import CENTRAL_SHARES, PAPER_SHARES, algorithm1_design

    langs = [f"l{i}" for i in range(8)]
    seen = set()
    for seed in range(5):
        df = algorithm1_design(langs, [1e9], seed=seed)
        for lang in langs:
            mine = df[df["run_id"].str.startswith(f"{lang}-c")]
            cs = sorted(float(x) for x in mine[f"r_{lang}"])
            assert len(cs) == 2 and cs[0] <= 0.5 < cs[1]
            assert all(min(abs(c - g) for g in PAPER_SHARES) < 1e-12 for c in cs)
            seen.update(cs)
    assert min(seen) < 0.1 and max(seen) > 0.75  # outside the old central pool
    old = algorithm1_design(langs, [1e9], seed=0, pool="central")
    cs = old[old["run_id"].str.contains("-c")]
    assert all(
        any(abs(float(row[f"r_{rid.split('-')[0]}"]) - g) < 1e-12 for g in CENTRAL_SHARES)
        for rid, (_, row) in zip(cs["run_id"], cs.iterrows(), strict=True)
    )
    with pytest.raises(ClimbError, match="share pool"):
        algorithm1_design(langs, [1e9], pool="grid")


def test_holdout_mixtures_are_spread_apart():
    """Issue 16: raw Dirichlet holdouts can be near-duplicates (TV distance 0.007 with seed 1);
    the default keeps every pair >= 0.1 apart."""
    from climb_bayes.data.design import HOLDOUT_MIN_DISTANCE, holdout_design

    def min_tv(df):
        r = df[[c for c in df.columns if c.startswith("r_")]].to_numpy()
        d = 0.5 * np.abs(r[:, None] - r[None]).sum(-1)
        return d[~np.eye(len(r), dtype=bool)].min()

    langs = ["en", "de", "zh"]
    assert min_tv(holdout_design(langs, 1e10, 8, seed=1, spread=False)) < 0.01
    for seed in range(4):
        spread = holdout_design(langs, 1e10, 8, seed=seed)
        assert min_tv(spread) >= HOLDOUT_MIN_DISTANCE - 1e-3  # 4-decimal rounding
        r = spread[[f"r_{x}" for x in langs]].to_numpy()
        np.testing.assert_allclose(r.sum(axis=1), 1.0, atol=1e-12)
    many = holdout_design(langs, 1e10, 60, seed=0)  # more than fit at 0.1: relaxed, still apart
    assert len(many) == 60 and min_tv(many) > 0.0


def test_plan_warns_below_the_papers_reliable_budget(capsys):
    assert main(["plan", "--languages", "en,de", "--budgets", "1e9"]) == 0
    assert "below 25B" in capsys.readouterr().err
    assert main(["plan", "--languages", "en,de", "--budgets", "2.5e10,1e11"]) == 0
    assert "below 25B" not in capsys.readouterr().err


def test_holdout_design_respects_share_bounds():
    """Availability caps: no held-out mixture gives a language more than its bound; an
    impossible bound is a clear error, not an endless loop."""
    from climb_bayes.data.design import holdout_design

    langs = ["en", "de", "ru", "zh", "ja"]
    cap = [1.0, 1.0, 0.3, 0.3, 1.0]
    plan = holdout_design(langs, 3e6, 8, seed=0, max_shares=cap)
    shares = plan[[f"r_{x}" for x in langs]].to_numpy()
    assert np.all(shares <= np.asarray(cap) + 1e-4)
    free = holdout_design(langs, 3e6, 8, seed=0)
    assert free[["r_ru", "r_zh"]].to_numpy().max() > 0.3  # the bound did bind
    with pytest.raises(ClimbError, match="max_shares"):
        holdout_design(langs, 3e6, 8, seed=0, max_shares=[0.1] * 5)
