"""``predict --continue-run``: a fitted training run continued, not a new run of its mixture."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import climb_bayes as cb
from climb_bayes.cli import main
from climb_bayes.data.design import algorithm1_design
from climb_bayes.data.runs import SERIES_COLUMN, runs_from_frame
from climb_bayes.decisions.continuation import continued_run, continued_runs, runs_with_mixtures
from climb_bayes.errors import ClimbError
from climb_bayes.model.simulate import example_params, simulate_runs

LANGS = ("en", "de", "zh")
RUN_SD = 0.05
"""sd of each training run's own log-loss deviation (5x the point noise of the world)."""
N_SEEDS = 3


def _label(run_id: str) -> str:
    return run_id.rsplit("-", 1)[0]  # "s0-en-c0.5-25B" -> "s0-en-c0.5": (seed, mixture)


def _with_run_effects(frame: pd.DataFrame, offsets: dict) -> pd.DataFrame:
    """Each (training run, language) loss shifted by its persistent log-offset."""
    out = frame.copy()
    out[SERIES_COLUMN] = out["run_id"].map(_label)
    shift = [
        offsets[(s, lang)] for s, lang in zip(out[SERIES_COLUMN], out["language"], strict=True)
    ]
    out["loss"] = out["loss"] * np.exp(shift)
    return out


@pytest.fixture(scope="module")
def world():
    """Checkpoints at 5B and 25B tokens of 27 training runs (3 seeds of each of 9 mixtures),
    each with its own persistent deviation from the law, and the same runs continued to 250B
    (the truth to predict). With one run per mixture the law could absorb the deviations (they
    would be the mixtures'); seeds make them the runs'."""
    params = example_params(LANGS, seed=3, sigma=0.01)
    plan = algorithm1_design(LANGS, (5e9, 2.5e10), seed=0, pool="central")
    design = pd.concat(
        [plan.assign(run_id=f"s{k}-" + plan.run_id) for k in range(N_SEEDS)], ignore_index=True
    )
    rng = np.random.default_rng(7)
    series = sorted({_label(r) for r in design.run_id})
    offsets = {(s, lang): RUN_SD * rng.standard_normal() for s in series for lang in LANGS}
    fitted = _with_run_effects(simulate_runs(params, design, seed=0), offsets)
    late = design[design.tokens == 2.5e10].assign(tokens=2.5e11)
    late["run_id"] = late["run_id"].str.replace("-25B", "-250B")
    truth = _with_run_effects(simulate_runs(params, late, seed=1), offsets)
    final = truth[truth.tokens_seen == truth.budget_tokens].dropna(subset=["loss"])
    runs = runs_from_frame(fitted, source="checkpoints.csv")
    fit = cb.fit(runs, laws=("climb",), method="map", lfo="none")
    return runs, fit, final, offsets


def test_continued_run_names_the_training_run_of_a_checkpoint(world):
    runs, *_ = world
    run = continued_run(runs, "s1-de-c0.2-5B")
    assert run.checkpoints == ("s1-de-c0.2-5B", "s1-de-c0.2-25B")
    assert run.last_budget == 2.5e10
    np.testing.assert_allclose(run.shares, [0.4, 0.2, 0.4])
    assert continued_run(runs, "s1-de-c0.2-25B").series == run.series
    with pytest.raises(ClimbError, match=r"label 's1-de-c0.2-50B'.*did you mean 's1-de-c0.2-5B'"):
        continued_run(runs, "s1-de-c0.2-50B")
    with pytest.raises(ClimbError, match="checkpoints of one training run; name it once"):
        continued_runs(runs, ["s1-de-c0.2-5B", "s0-en-c0.5-5B", "s1-de-c0.2-25B"])


def test_a_training_run_is_named_by_its_run_series_label(world, tmp_path, capsys):
    """The label of the runs table names the whole training run (its latest checkpoint is
    continued); it survives the fit file, and a run_id still wins where both could match."""
    runs, fit, *_ = world
    run = continued_run(runs, " s1-de-c0.2 ")
    assert (run.name, run.label, run.run_id) == ("s1-de-c0.2", "s1-de-c0.2", "s1-de-c0.2-25B")
    assert run.checkpoints == continued_run(runs, "s1-de-c0.2-5B").checkpoints
    assert continued_run(runs, "s1-de-c0.2-5B").label == "s1-de-c0.2"
    with pytest.raises(ClimbError, match="checkpoints of one training run; name it once"):
        continued_runs(runs, ["s1-de-c0.2", "s1-de-c0.2-5B"])
    loaded = cb.load_fit(fit.save(tmp_path / "fit.nc"))
    assert loaded.runs.series_labels == runs.series_labels
    args = ["predict", str(tmp_path / "fit.nc"), "--budget", "1e11", "--continue-run"]
    assert main([*args, "s1-de-c0.2"]) == 0
    text = capsys.readouterr().out
    assert "continuing training run 's1-de-c0.2': 2 fitted checkpoint(s)" in text
    assert "training run 's1-de-c0.2', continued" in text
    # a fit file without labels (written before they were kept): run_ids still work
    unlabelled = runs.subset_runs(np.arange(runs.n_runs))
    object.__setattr__(unlabelled, "series_labels", None)
    assert continued_run(unlabelled, "s1-de-c0.2-5B").label == ""
    with pytest.raises(ClimbError, match=r"no run or run_series label 's1-de-c0.2' \(54 runs"):
        continued_run(unlabelled, "s1-de-c0.2")


def test_all_resolves_each_training_run_by_index_not_by_its_label():
    """A label may equal another training run's checkpoint id; ``all`` still gives each
    training run once, named by its label (resolving the label as a name would pick the
    checkpoint of the other run)."""
    frame = pd.DataFrame(
        {
            "run_id": ["a@1k", "a@2k", "b@1k"],
            "tokens": [1e9, 2e9, 1e9],
            "r_en": [0.5, 0.5, 0.2],
            "r_de": [0.5, 0.5, 0.8],
            "loss_en": [3.0, 2.9, 3.3],
            "loss_de": [3.1, 3.0, 2.8],
            SERIES_COLUMN: ["b@1k", "b@1k", "solo"],  # run a's label is run b's id
        }
    )
    runs = runs_from_frame(frame)
    chosen = continued_runs(runs, "all")
    assert [(r.name, r.run_id, r.checkpoints) for r in chosen] == [
        ("b@1k", "a@2k", ("a@1k", "a@2k")),
        ("solo", "b@1k", ("b@1k",)),
    ]
    assert continued_run(runs, "b@1k").checkpoints == ("b@1k",)  # a run_id wins as a name


def test_predict_names_the_checkpointed_runs_of_an_asked_mixture(world, tmp_path, capsys):
    """``predict --mixture`` of a mixture the fit holds checkpointed training runs of says so and
    names ``--continue-run``; a mixture of no fitted run, and a run with one checkpoint, do
    not."""
    runs, fit, *_ = world
    found, off = runs_with_mixtures(
        runs, np.array([[0.4, 0.2, 0.4], [0.4, 0.2 + 1e-4, 0.4 - 1e-4]])
    )
    assert [r.name for r in found] == ["s0-de-c0.2", "s1-de-c0.2", "s2-de-c0.2"]
    assert off == []
    single = runs.subset_runs(runs.run_budgets < 1e10)  # the 5B checkpoints only
    assert runs_with_mixtures(single, np.array([[0.4, 0.2, 0.4]])) == [[]]
    path = fit.save(tmp_path / "fit.nc")
    args = ["predict", str(path), "--budget", "1e11", "--mixture"]
    assert main([*args, "en=0.4,de=0.2,zh=0.4"]) == 0
    text = capsys.readouterr().out
    assert "note: this is the mixture of 3 checkpointed training run(s) of the fit" in text
    assert "`--continue-run s0-de-c0.2` predicts that run continued" in text
    assert main([*args, "en=0.3,de=0.3,zh=0.4"]) == 0
    assert "checkpointed training run" not in capsys.readouterr().out
    mixtures = tmp_path / "m.csv"
    mixtures.write_text("name,r_en,r_de,r_zh\nde-c0.2,0.4,0.2,0.4\nother,0.3,0.3,0.4\n")
    assert main(["predict", str(path), "--budget", "1e11", "--mixtures", str(mixtures)]) == 0
    text = capsys.readouterr().out
    assert "note: 1 of these mixtures (de-c0.2) are those of checkpointed" in text


def test_continuing_a_run_carries_its_deviation_forward(world):
    """At 10x the largest fitted budget, the continued run's median sits off a new run's by the
    run's own deviation (sd 0.05 in log-loss here, 5x the point noise), learned from its two
    fitted checkpoints: a predictive that drops the fitted residuals, or conditions on another
    run's, is uncorrelated with the true deviations."""
    runs, fit, final, offsets = world
    chosen = continued_runs(runs, "all")  # every training run, named by its run_series label
    assert [r.run_id for r in chosen] == [r.checkpoints[-1] for r in chosen]
    assert [r.name for r in chosen] == [_label(r.run_id) for r in chosen]
    assert len(chosen) == 9 * N_SEEDS and all(r.run_id.endswith("-25B") for r in chosen)
    cont = cb.predict(fit, None, 2.5e11, continue_run="all")
    new = cb.predict(fit, np.stack([r.shares for r in chosen]), 2.5e11)
    med = [
        t[t.quantity == "predictive"]["median"].to_numpy().reshape(len(chosen), 3)
        for t in (cont, new)
    ]
    carried, true = [], []
    for k, run in enumerate(chosen):
        series = _label(run.run_id)
        for lang in final.loc[final[SERIES_COLUMN] == series, "language"]:
            j = LANGS.index(lang)
            carried.append(np.log(med[0][k, j] / med[1][k, j]))
            true.append(offsets[(series, lang)])
    carried, true = np.array(carried), np.array(true)
    assert carried.size == 21 * N_SEEDS  # the finite losses of 27 runs
    assert np.corrcoef(carried, true)[0, 1] > 0.8
    # measured: correlation 0.87, mean error 0.017 against mean deviation 0.036
    assert np.mean(np.abs(carried - true)) < 0.6 * np.mean(np.abs(true))


def test_continue_run_from_the_command_line(world, tmp_path, capsys):
    _, fit, *_ = world
    path = fit.save(tmp_path / "fit.nc")
    out = tmp_path / "cont.csv"
    args = ["predict", str(path), "--budgets", "5e10,2.5e11", "--continue-run", "s2-zh-c0.1-25B"]
    assert main([*args, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "continuing training run 's2-zh-c0.1': 2 fitted checkpoint(s)" in text
    assert "training run 's2-zh-c0.1', continued" in text
    table = pd.read_csv(out)
    assert len(table) == 2 * 3 * 2 and set(table.mixture) == {"run s2-zh-c0.1-25B"}
    np.testing.assert_allclose(
        table.groupby("language")["share"].first()[list(LANGS)], [0.45] * 2 + [0.1]
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--continue-run", "nope"], "no run or run_series label 'nope'"),
        (["--continue-run", "s0-en-c0.5-5B", "--mixture", "uniform"], "leave out --mixture"),
        (["--continue-run", "s0-en-c0.5-5B", "--mixtures", "m.csv"], "leave out --mixtures"),
    ],
)
def test_continue_run_errors_exit_2(world, tmp_path, capsys, extra, message):
    _, fit, *_ = world
    path = fit.save(tmp_path / "fit.nc")
    assert main(["predict", str(path), "--budget", "1e11", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_evaluate_says_which_held_out_runs_it_continues(world, tmp_path, capsys):
    """``evaluate --holdout`` on checkpoints: the later checkpoints of fitted training runs are
    predicted as continuations, and the command says how many."""
    runs, *_ = world
    path = tmp_path / "checkpoints.csv"
    runs.to_frame("long").to_csv(path, index=False)
    args = ["evaluate", str(path), "--holdout", "tokens>=2.5e10", "--method", "map"]
    assert main([*args, "--laws", "isolated", "--n-starts", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "27 of the held-out runs are checkpoints of fitted training runs" in captured.err
    assert json.loads(captured.out)["n_test_runs_continued"] == 27


def test_continue_run_without_a_run_effect_warns(world, tmp_path, capsys):
    """A fit without run effects has no deviation to carry: the command says so, and the
    continued run's predictive is a new run's."""
    runs, *_ = world
    fit = cb.fit(runs, cb.Priors(run_effect=False), laws=("climb",), method="map", lfo="none")
    path = fit.save(tmp_path / "fit.nc")
    assert main(["predict", str(path), "--budget", "1e11", "--continue-run", "s0-en-c0.5-5B"]) == 0
    assert "warning: the fit has no run effect" in capsys.readouterr().out
    run = continued_run(runs, "s0-en-c0.5-5B")
    cont = cb.predict(fit, None, 1e11, continue_run=run.run_id)
    new = cb.predict(fit, run.shares, 1e11)
    pd.testing.assert_frame_equal(cont.drop(columns="mixture"), new.drop(columns="mixture"))


def test_continue_several_runs_from_the_command_line(world, tmp_path, capsys):
    _, fit, *_ = world
    path = fit.save(tmp_path / "fit.nc")
    out = tmp_path / "cont.csv"
    args = ["predict", str(path), "--budgets", "5e10,2.5e11", "--continue-run", "s0-en-mono-5B"]
    assert main([*args, "--continue-run", "s1-zh-c0.75-25B", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 fitted training run(s) continued" in text and "run s1-zh-c0.75-25B" in text
    table = pd.read_csv(out)
    assert len(table) == 2 * 2 * 3 * 2
    assert set(table.mixture) == {"run s0-en-mono-5B", "run s1-zh-c0.75-25B"}
    mono = table[(table.mixture == "run s0-en-mono-5B") & (table.language != "en")]
    assert np.isinf(mono["median"]).all()  # share 0: CLIMB predicts an unbounded loss
