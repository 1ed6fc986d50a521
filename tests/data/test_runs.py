"""Tests of climb_bayes.data.runs: parsing, validation messages, conversions."""

from __future__ import annotations

import hashlib
import io
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from climb_bayes.data.runs import DEFAULT_TAIL_START, RunsData, read_runs, runs_from_frame
from climb_bayes.errors import ClimbError, RunsFormatError

NAN = float("nan")


@pytest.fixture(autouse=True)
def _no_few_obs_warning_noise():
    # Small hand-made tables have fewer observations than CLIMB parameters on purpose.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*prior-dominated.*", category=UserWarning)
        yield


def wide_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": ["a", "b", "c"],
            "tokens": [1e9, 2e9, 4e9],
            "r_en": [1.0, 0.25, 0.0],
            "r_fr": [0.0, 0.75, 1.0],
            "loss_en": [3.0, 3.2, 5.5],  # 5.5 at r_en = 0 -> excluded
            "loss_fr": [NAN, 3.5, 3.1],
            "seed": [1, 2, 3],  # extra columns are ignored
        }
    )


def long_frame() -> pd.DataFrame:
    """Two runs, languages en/fr, eval points at 50%, 90% and 100% of the budget."""
    rows = []
    for run, budget, r_en in (("x", 1000.0, 1.0), ("y", 2000.0, 0.5)):
        for frac in (0.5, 0.9, 1.0):
            t = frac * budget
            rows.append((run, budget, t, "en", r_en, 4.0 - frac))
            loss_fr = 9.0 if r_en == 1.0 else 5.0 - frac  # finite loss at r_fr = 0 in run x
            rows.append((run, budget, t, "fr", 1.0 - r_en, loss_fr))
    cols = ["run_id", "budget_tokens", "tokens_seen", "language", "proportion", "loss"]
    return pd.DataFrame(rows, columns=cols)


def write_csv(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ happy paths


def test_wide_parse_exact():
    d = runs_from_frame(wide_frame())
    assert d.form == "wide"
    assert d.languages == ("en", "fr")
    assert d.run_ids == ("a", "b", "c")
    np.testing.assert_array_equal(d.run_proportions, [[1, 0], [0.25, 0.75], [0, 1]])
    np.testing.assert_array_equal(d.run_budgets, [1e9, 2e9, 4e9])
    np.testing.assert_array_equal(d.point_run, [0, 1, 2])
    np.testing.assert_array_equal(d.point_tokens, [1e9, 2e9, 4e9])
    np.testing.assert_array_equal(d.point_loss, [[3.0, NAN], [3.2, 3.5], [NAN, 3.1]])
    np.testing.assert_array_equal(d.obs_point, [0, 1, 1, 2])
    np.testing.assert_array_equal(d.obs_language, [0, 0, 1, 1])
    np.testing.assert_array_equal(d.obs_loss, [3.0, 3.2, 3.5, 3.1])
    np.testing.assert_array_equal(d.obs_run, [0, 1, 1, 2])
    np.testing.assert_array_equal(d.obs_tokens, [1e9, 2e9, 2e9, 4e9])
    assert d.n_excluded_zero_share == 1
    assert d.n_points_dropped_head == 0
    assert (d.n_runs, d.n_languages, d.n_obs, d.n_points) == (3, 2, 4, 3)
    assert d.n_parameters_climb == 2 * 3 + 2 * 2 * 1 + 2
    assert d.source == "<frame>" and d.sha256 == ""
    assert d.tail_start == DEFAULT_TAIL_START
    assert d.point_run.dtype == np.int64 and d.obs_loss.dtype == np.float64


def test_long_parse_exact_and_tail_filter():
    d = runs_from_frame(long_frame())
    assert d.form == "long"
    assert d.languages == ("en", "fr")
    assert d.run_ids == ("x", "y")
    np.testing.assert_array_equal(d.run_proportions, [[1.0, 0.0], [0.5, 0.5]])
    np.testing.assert_array_equal(d.run_budgets, [1000.0, 2000.0])
    # 0.5 * budget is before the tail (0.85); 0.9 and 1.0 are kept.
    np.testing.assert_array_equal(d.point_run, [0, 0, 1, 1])
    np.testing.assert_array_equal(d.point_tokens, [900.0, 1000.0, 1800.0, 2000.0])
    np.testing.assert_allclose(
        d.point_loss, [[3.1, NAN], [3.0, NAN], [3.1, 4.1], [3.0, 4.0]], equal_nan=True
    )
    np.testing.assert_array_equal(d.obs_point, [0, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(d.obs_language, [0, 0, 0, 1, 0, 1])
    assert d.n_points_dropped_head == 2
    assert d.n_excluded_zero_share == 2  # run x's fr losses at 0.9 and 1.0
    np.testing.assert_array_equal(d.run_n_dropped_head, [1, 1])


def test_long_tail_start_one_keeps_final_points_only():
    d = runs_from_frame(long_frame(), tail_start=1.0)
    np.testing.assert_array_equal(d.point_tokens, [1000.0, 2000.0])
    assert d.n_points_dropped_head == 4
    assert d.tail_start == 1.0


def test_long_rows_in_any_order():
    df = long_frame().sample(frac=1.0, random_state=3).reset_index(drop=True)
    d = runs_from_frame(df, languages=["en", "fr"])
    ref = runs_from_frame(long_frame())
    assert set(d.run_ids) == {"x", "y"}
    order = [d.run_ids.index(r) for r in ref.run_ids]
    np.testing.assert_array_equal(d.run_proportions[order], ref.run_proportions)
    assert d.n_obs == ref.n_obs
    assert np.all(np.diff(d.point_run) >= 0)


def test_long_point_may_omit_a_language():
    df = long_frame()
    df = df[~((df.run_id == "y") & (df.tokens_seen == 1800.0) & (df.language == "fr"))]
    d = runs_from_frame(df)
    assert d.n_obs == 5
    assert math.isnan(d.point_loss[2, 1])


def test_long_empty_loss_before_tail_is_ignored():
    df = long_frame()
    df.loc[(df.run_id == "y") & (df.tokens_seen == 1000.0), "loss"] = NAN
    d = runs_from_frame(df)
    assert d.n_obs == 6


def test_integer_run_ids_and_whitespace_from_csv(tmp_path):
    path = write_csv(
        tmp_path,
        "w.csv",
        "run_id, tokens, r_en, loss_en\n1, 1e9, 1.0, 3.0\n2, 2e9, 1.0, 2.9\n",
    )
    d = read_runs(path)
    assert d.run_ids == ("1", "2")
    assert d.languages == ("en",)
    assert d.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert d.source == str(path)


def test_tokens_seen_within_slack_is_accepted():
    df = long_frame()
    df.loc[df.tokens_seen == 1000.0, "tokens_seen"] = 1000.0 * (1 + 1e-12)
    d = runs_from_frame(df)
    assert d.n_points == 4


def test_summary_mentions_key_numbers():
    text = runs_from_frame(long_frame()).summary()
    assert "en, fr" in text
    assert "runs: 2" in text
    assert "observations: 6 at 4 evaluation points" in text
    assert "2 finite losses at zero share" in text
    assert "2 curve points before the tail" in text


def test_arrays_are_read_only():
    d = runs_from_frame(wide_frame())
    with pytest.raises(ValueError):
        d.point_loss[0, 0] = 1.0


# ------------------------------------------------------------------------------ round trips


def test_parquet_round_trip(tmp_path):
    df = long_frame()
    pq = tmp_path / "runs.parquet"
    csv = tmp_path / "runs.csv"
    df.to_parquet(pq)
    df.to_csv(csv, index=False)
    a, b = read_runs(pq), read_runs(csv)
    assert a.sha256 == hashlib.sha256(pq.read_bytes()).hexdigest()
    for name in ("run_proportions", "run_budgets", "point_run", "point_tokens", "obs_loss"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.run_ids == b.run_ids and a.languages == b.languages
    pq2 = tmp_path / "runs.pq"
    runs_from_frame(df).to_frame("long").to_parquet(pq2)
    assert read_runs(pq2).n_obs == a.n_obs


@pytest.mark.parametrize("form", ["wide", "long"])
def test_to_frame_round_trip_wide_data(form):
    d = runs_from_frame(wide_frame())
    e = runs_from_frame(d.to_frame(form))
    assert e.form == form
    assert e.languages == d.languages and e.run_ids == d.run_ids
    for name in ("run_proportions", "run_budgets", "point_run", "point_tokens", "point_loss"):
        np.testing.assert_array_equal(getattr(e, name), getattr(d, name))
    for name in ("obs_point", "obs_language", "obs_loss"):
        np.testing.assert_array_equal(getattr(e, name), getattr(d, name))


def test_to_frame_round_trip_long_data():
    d = runs_from_frame(long_frame())
    e = runs_from_frame(d.to_frame("long"))
    for name in ("run_proportions", "run_budgets", "point_run", "point_tokens", "point_loss"):
        np.testing.assert_array_equal(getattr(e, name), getattr(d, name))
    np.testing.assert_array_equal(e.obs_loss, d.obs_loss)
    with pytest.raises(ValueError, match="long"):
        d.to_frame("wide")
    with pytest.raises(ValueError):
        d.to_frame("tall")


def checkpoint_frame() -> pd.DataFrame:
    """Two training runs published as checkpoints (wide form), one sweep run without a label."""
    return pd.DataFrame(
        {
            "run_id": ["m1@1k", "m1@2k", "m2@1k", "m2@2k", "m1@3k", "sweep"],
            "tokens": [1e9, 2e9, 1e9, 2e9, 3e9, 2e9],
            "r_en": [0.5, 0.5, 0.25, 0.25, 0.5, 0.25],
            "r_fr": [0.5, 0.5, 0.75, 0.75, 0.5, 0.75],
            "loss_en": [3.4, 3.2, 3.6, 3.4, 3.1, 3.45],
            "loss_fr": [3.5, 3.3, 3.3, 3.1, 3.2, 3.15],
            "run_series": ["m1", "m1", "m2", "m2", "m1", ""],
        }
    )


@pytest.mark.parametrize("form", ["wide", "long"])
def test_run_series_groups_checkpoints_of_one_training_run(form):
    d = runs_from_frame(checkpoint_frame())
    # m1 (3 checkpoints), m2 (2) and the unlabelled run on its own
    np.testing.assert_array_equal(d.run_series, [0, 0, 1, 1, 0, 2])
    assert "checkpoints of 3 training run(s)" in d.summary()
    # one likelihood group per (training run, language), not per checkpoint
    assert np.unique(d.obs_group).size == 3 * 2
    unlabelled = runs_from_frame(checkpoint_frame().drop(columns="run_series"))
    assert unlabelled.run_series is None and np.unique(unlabelled.obs_group).size == 12
    assert d.series_labels == ("m1", "m1", "m2", "m2", "m1", "")  # as written ("" = blank)
    e = runs_from_frame(d.to_frame(form))  # written and read back in either form
    np.testing.assert_array_equal(e.run_series, d.run_series)
    np.testing.assert_array_equal(e.obs_group, d.obs_group)
    assert e.series_labels == d.series_labels  # the labels, not their codes, are written
    sub = d.subset_runs([1, 3, 4])
    np.testing.assert_array_equal(sub.run_series, [0, 1, 0])
    assert sub.series_labels == ("m1", "m2", "m1")


def test_wide_table_without_labels_infers_one_training_run_per_checkpointed_mixture():
    """A mixture at 4+ budgets, one row each, without run_series: its rows are taken as one
    training run's checkpoints (and the summary says so and how to undo it); the Algorithm-1
    design's 3 budgets, replicates at one budget, a labelled table are left alone."""
    frame = checkpoint_frame().drop(columns="run_series")
    three = runs_from_frame(frame)  # m1 at 3 budgets
    assert three.run_series is None and "note:" not in three.summary()
    extra = frame.iloc[[4]].assign(run_id="m1@4k", tokens=4e9)
    more = pd.concat([frame, extra], ignore_index=True)
    d = runs_from_frame(more)
    assert d.series_inferred
    np.testing.assert_array_equal(d.run_series, [0, 0, 1, 2, 0, 3, 0])  # m1's 4 rows: one run
    assert np.unique(d.obs_group).size == 4 * 2  # one group per (training run, language)
    text = " ".join(d.summary().split())
    assert "run_series: inferred (no run_series column): 4 rows" in text
    assert "4 training runs in all" in text and "add an empty run_series column" in text
    # written and read back: the labels are explicit now, the grouping the same
    back = runs_from_frame(d.to_frame("long"))
    np.testing.assert_array_equal(back.run_series, d.run_series)
    assert not back.series_inferred and "inferred" not in back.summary()
    # a subset keeps the flag (evaluate's folds)
    assert d.subset_runs([0, 1, 4, 6]).series_inferred
    # a replicate at one of m1's budgets: not one run's checkpoints; a note instead
    rep = pd.concat([more, extra.assign(run_id="m1@4k-seed2")], ignore_index=True)
    r = runs_from_frame(rep)
    assert r.run_series is None and "note: 1 mixture(s) appear at 4+ budgets" in r.summary()
    # labelled (blank cells: runs of their own): as written
    labelled = more.assign(run_series=["m1", "m1", "m2", "m2", "m1", "", "m1"])
    assert not runs_from_frame(labelled).series_inferred
    blank = runs_from_frame(more.assign(run_series=""))
    assert np.unique(blank.run_series).size == len(more)


def test_run_series_errors_name_row_column_and_fix():
    df = checkpoint_frame()
    df.loc[3, "run_series"] = "m1"  # m2@2k labelled m1 but trained on another mixture
    with pytest.raises(RunsFormatError) as err:
        runs_from_frame(df, source="ckpt.csv")
    msg = str(err.value)
    assert msg.startswith("ckpt.csv, row 5, column 'run_series'")
    assert "'m1@1k' (row 2)" in msg and "'m2@2k'" in msg and "Fix:" in msg
    long = runs_from_frame(checkpoint_frame()).to_frame("long")
    long["run_series"] = long["run_series"].astype(object)
    long.loc[1, "run_series"] = "other"  # one row of run m1@1k relabelled
    with pytest.raises(RunsFormatError, match=r"row 3, column 'run_series'.*same run_series"):
        runs_from_frame(long, source="ckpt.csv")


def test_perplexities_are_refused_as_losses():
    """A loss above MAX_LOSS_NATS at a positive share (a perplexity, most likely) is refused,
    naming the row and column; a zero-share loss and a curve point before the tail, which are
    left out of the fit, are not checked."""
    df = wide_frame()
    df.loc[1, "loss_fr"] = 33.1  # exp(3.5)
    with pytest.raises(RunsFormatError) as err:
        runs_from_frame(df, source="ppl.csv")
    msg = str(err.value)
    assert msg.startswith("ppl.csv, row 3, column 'loss_fr': loss 33.1 is above 20 nats")
    assert "perplexity" in msg and "natural log" in msg
    ok = wide_frame()
    ok.loc[2, "loss_en"] = 25.0  # r_en = 0 there: excluded, as 5.5 was
    assert runs_from_frame(ok).n_excluded_zero_share == 1
    long = long_frame()
    long.loc[5, "loss"] = 90.0  # run x, fr at r = 0: not checked
    long.loc[6, "loss"] = 25.0  # run y, en at half its budget: before the tail, not checked
    assert runs_from_frame(long).n_obs == runs_from_frame(long_frame()).n_obs
    long.loc[8, "loss"] = 54.6  # run y, en at 90% of its budget: in the tail
    with pytest.raises(RunsFormatError, match=r"row 10, column 'loss': loss 54.6 is above 20"):
        runs_from_frame(long)


def test_tables_that_mix_model_sizes_are_refused():
    """A column naming the model (Data Mixing Laws' ``model_size_label``) with two values: the
    laws have no model-size term, so the table is refused at the first row of the second model;
    one value (or blanks) is an ordinary extra column."""
    df = wide_frame()
    df["Model Size"] = ["70M", "70M", "160M"]
    with pytest.raises(RunsFormatError) as err:
        runs_from_frame(df, source="mix.csv")
    msg = str(err.value)
    assert msg.startswith("mix.csv, row 4, column 'Model Size'")
    assert "mixes 2 models (70M, 160M)" in msg and "--where 'Model Size=70M'" in msg
    long = long_frame()
    long["model_size_label"] = ["410M"] * 6 + ["1B"] * 6
    with pytest.raises(RunsFormatError, match=r"row 8, column 'model_size_label'"):
        runs_from_frame(long)
    counts = wide_frame()
    counts["n_params"] = [7e7, 7e7, 1.6e8]
    with pytest.raises(RunsFormatError, match=r"column 'n_params': the table mixes 2 models"):
        runs_from_frame(counts)
    one = wide_frame()
    one["model"] = ["70M", "70M", ""]
    one["size"] = [1, 2, 3]  # not a model column: ignored like any extra one
    one["params"] = ["lr=1e-3", "lr=3e-4", "lr=1e-3"]  # hyper-parameters, not a model size
    assert runs_from_frame(one).run_ids == ("a", "b", "c")


def test_where_fits_one_model_of_a_table_and_errors_keep_the_files_rows(tmp_path):
    """``where`` keeps the rows of one model (text or an equal number), so a published table
    holding several models reads without editing; later errors still name the file's rows and
    the selection; a selection of no row or of no column is refused naming what exists."""
    df = pd.DataFrame(
        {
            "run_id": ["a", "b", "c", "d", "e", "f"],
            "model": ["70M", "160M", "70M", "160M", "70M", "160M"],
            "tokens": [1e6, 1e6, 2e6, 2e6, 4e6, 4e6],
            "r_en": [0.5, 0.5, 0.3, 0.3, 0.7, 0.7],
            "r_de": ["0.5", "0.5", "0.7", "0.7", "0.3", "x"],
            "loss_en": [3.1, 2.9, 3.0, 2.8, 2.8, 2.6],
            "loss_de": [3.3, 3.1, 3.0, 2.9, 3.2, 3.0],
        }
    )
    path = tmp_path / "sizes.csv"
    df.to_csv(path, index=False)
    with pytest.raises(RunsFormatError, match=r"row 3, column 'model': the table mixes"):
        read_runs(path)
    small = read_runs(path, where={"model": "70M"})
    assert small.run_ids == ("a", "c", "e") and small.source.endswith("[where model=70M]")
    np.testing.assert_allclose(small.run_budgets, [1e6, 2e6, 4e6])
    assert read_runs(path, where={"model": "70M", "tokens": 2000000}).run_ids == ("c",)
    with pytest.raises(RunsFormatError) as err:  # 'x' is on line 7 of the file
        read_runs(path, where={"model": "160M"})
    assert str(err.value).startswith(f"{path} [where model=160M], row 7, column 'r_de'")
    with pytest.raises(RunsFormatError, match=r"no row has model = 1B \(values in the column: "
                       r"70M, 160M\)"):  # fmt: skip
        read_runs(path, where={"Model": "1B"})
    with pytest.raises(RunsFormatError, match=r"the selection size=70M names no column"):
        read_runs(path, where={"size": "70M"})


# ------------------------------------------------------------------------------ subsetting


def test_subset_runs_mask_and_indices():
    d = runs_from_frame(long_frame())
    s = d.subset_runs([False, True])
    assert s.run_ids == ("y",) and s.languages == d.languages
    np.testing.assert_array_equal(s.point_run, [0, 0])
    np.testing.assert_array_equal(s.point_tokens, [1800.0, 2000.0])
    np.testing.assert_array_equal(s.obs_point, [0, 0, 1, 1])
    assert s.n_excluded_zero_share == 0 and s.n_points_dropped_head == 1
    r = d.subset_runs([1, 0])  # reorder
    assert r.run_ids == ("y", "x")
    np.testing.assert_array_equal(r.point_run, [0, 0, 1, 1])
    np.testing.assert_array_equal(r.point_tokens, [1800.0, 2000.0, 900.0, 1000.0])
    assert r.n_obs == d.n_obs and r.n_excluded_zero_share == 2
    x = d.subset_runs(np.array([0]))
    assert x.n_obs == 2 and x.n_excluded_zero_share == 2
    for bad in ([True], [0, 0], [5], []):
        with pytest.raises(ValueError):
            d.subset_runs(bad)


def test_from_arrays_excludes_zero_share():
    d = RunsData.from_arrays(
        ["en", "fr"],
        ["a"],
        np.array([[1.0, 0.0]]),
        np.array([10.0]),
        np.array([0]),
        np.array([10.0]),
        np.array([[3.0, 4.0]]),
    )
    assert d.n_obs == 1 and d.n_excluded_zero_share == 1
    assert math.isnan(d.point_loss[0, 1])


# ------------------------------------------------------------------------------ proportions


def test_renormalize_fixes_sums():
    df = wide_frame()
    df.loc[1, ["r_en", "r_fr"]] = [25.0, 75.0]  # percentages
    with pytest.raises(RunsFormatError, match="--renormalize"):
        runs_from_frame(df)
    d = runs_from_frame(df, renormalize=True)
    np.testing.assert_allclose(d.run_proportions[1], [0.25, 0.75])
    np.testing.assert_allclose(d.run_proportions.sum(axis=1), 1.0)


def test_sum_within_tolerance_accepted():
    df = wide_frame()
    df.loc[1, "r_en"] = 0.25 + 5e-7
    d = runs_from_frame(df)
    np.testing.assert_allclose(d.run_proportions.sum(axis=1), 1.0, rtol=0, atol=1e-15)


def three_language_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": ["a", "b", "c"],
            "tokens": [1e9, 1e9, 1e9],
            "r_en": [0.5, 0.0, 1.0],
            "r_fr": [0.5, 0.6, 0.0],
            "r_de": [0.0, 0.4, 0.0],
            "loss_en": [3.0, NAN, 2.9],
            "loss_fr": [3.5, 3.4, NAN],
            "loss_de": [NAN, 4.0, NAN],
        }
    )


def test_language_selection_and_renormalize():
    df = three_language_frame()
    with pytest.raises(RunsFormatError) as err:
        runs_from_frame(df, languages=["fr", "en"])
    msg = str(err.value)
    assert "run 'b'" in msg and "de" in msg and "--renormalize" in msg and "row 3" in msg
    d = runs_from_frame(df, languages=["fr", "en"], renormalize=True)
    assert d.languages == ("fr", "en")
    np.testing.assert_allclose(d.run_proportions, [[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(d.obs_language, [0, 1, 0, 1])
    # dropping a language with zero share in all runs needs no renormalisation
    e = runs_from_frame(df.drop(index=1), languages=["en", "fr"])
    assert e.languages == ("en", "fr")


def test_language_selection_errors():
    df = three_language_frame()
    with pytest.raises(RunsFormatError, match="'xx'|xx"):
        runs_from_frame(df, languages=["en", "xx"])
    with pytest.raises(RunsFormatError, match="twice"):
        runs_from_frame(df, languages=["en", "en"])
    with pytest.raises(RunsFormatError, match="share 0 for every selected language"):
        runs_from_frame(df, languages=["de"], renormalize=True)


def test_long_language_selection():
    d = runs_from_frame(long_frame(), languages=["en"], renormalize=True)
    assert d.languages == ("en",)
    np.testing.assert_array_equal(d.run_proportions, [[1.0], [1.0]])
    assert d.n_obs == 4 and d.n_excluded_zero_share == 0


# ------------------------------------------------------------------------------ warnings


def test_few_observations_warning(tmp_path):
    with pytest.warns(UserWarning, match="prior-dominated") as caught:
        runs_from_frame(wide_frame())
    assert caught[0].filename == __file__  # points at the caller, not into runs.py
    path = tmp_path / "few.csv"
    wide_frame().to_csv(path, index=False)
    with pytest.warns(UserWarning, match="prior-dominated") as caught:
        read_runs(path)
    assert caught[0].filename == __file__


def test_no_warning_with_enough_observations(tmp_path):
    n = 6
    df = pd.DataFrame(
        {
            "run_id": [f"r{i}" for i in range(n)],
            "tokens": np.full(n, 1e9),
            "r_en": np.ones(n),
            "loss_en": np.linspace(3.0, 3.5, n),
        }
    )
    path = tmp_path / "w.csv"
    df.to_csv(path, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = read_runs(path)
    assert d.n_obs == 6 > d.n_parameters_climb


# ------------------------------------------------------------------------------ bad input

WIDE_HEAD = "run_id,tokens,r_en,r_fr,loss_en,loss_fr\n"
WIDE_OK = ["a,1e9,1.0,0.0,3.0,", "b,2e9,0.5,0.5,3.1,3.6", "c,4e9,0.0,1.0,,3.3"]
LONG_HEAD = "run_id,budget_tokens,tokens_seen,language,proportion,loss\n"
LONG_OK = [
    "x,1000,900,en,1.0,3.1",
    "x,1000,900,fr,0.0,",
    "x,1000,1000,en,1.0,3.0",
    "x,1000,1000,fr,0.0,",
    "y,2000,2000,en,0.5,3.2",
    "y,2000,2000,fr,0.5,3.4",
]


def wide_csv(replace: dict[int, str] | None = None, head: str = WIDE_HEAD) -> str:
    lines = list(WIDE_OK)
    for i, text in (replace or {}).items():
        lines[i] = text
    return head + "\n".join(lines) + "\n"


def long_csv(replace: dict[int, str] | None = None, extra: tuple[str, ...] = ()) -> str:
    lines = list(LONG_OK)
    for i, text in (replace or {}).items():
        lines[i] = text
    return LONG_HEAD + "\n".join(lines + list(extra)) + "\n"


BAD_CASES = {
    # name: (csv text, substrings the message must contain)
    "sum_not_one": (wide_csv({1: "b,2e9,0.5,0.4,3.1,3.6"}), ["row 3", "sum to 0.9", "renormalize"]),
    "negative_r": (wide_csv({1: "b,2e9,1.5,-0.5,3.1,3.6"}), ["row 3", "column 'r_fr'", ">= 0"]),
    "nan_r": (wide_csv({2: "c,4e9,,1.0,,3.3"}), ["row 4", "column 'r_en'", "empty"]),
    "zero_loss": (wide_csv({1: "b,2e9,0.5,0.5,0,3.6"}), ["row 3", "column 'loss_en'", "> 0"]),
    "negative_loss_at_zero_share": (
        wide_csv({0: "a,1e9,1.0,0.0,3.0,-1"}),
        ["row 2", "column 'loss_fr'"],
    ),
    "missing_loss_r_pos": (
        wide_csv({1: "b,2e9,0.5,0.5,3.1,"}),
        ["row 3", "column 'loss_fr'", "empty"],
    ),
    "non_numeric_loss": (
        wide_csv({1: "b,2e9,0.5,0.5,abc,3.6"}),
        ["row 3", "column 'loss_en'", "'abc'", "not a number"],
    ),
    "non_numeric_tokens": (wide_csv({2: "c,lots,0.0,1.0,,3.3"}), ["row 4", "column 'tokens'"]),
    "missing_tokens_column": (
        "run_id,r_en,loss_en\na,1.0,3.0\n",
        ["tokens", "found: run_id, r_en, loss_en"],
    ),
    "r_without_loss": (
        wide_csv(head="run_id,tokens,r_en,r_fr,loss_en,lossfr\n"),
        ["column 'r_fr'", "loss_fr"],
    ),
    "loss_without_r": (
        "run_id,tokens,r_en,loss_en,loss_de\na,1e9,1.0,3.0,4.0\n",
        ["column 'loss_de'", "r_de"],
    ),
    "plan_table_not_results": (
        "run_id,tokens,r_en,r_fr\na,1e9,0.5,0.5\n",
        ["plan", "no loss_<lang> columns"],
    ),
    "no_language_columns": ("run_id,tokens,seed\na,1e9,1\n", ["no language columns"]),
    "duplicate_wide_run": (
        wide_csv({2: "a,4e9,0.0,1.0,,3.3"}),
        ["run_id 'a'", "rows 2, 4", "unique"],
    ),
    "empty_run_id": (wide_csv({1: ",2e9,0.5,0.5,3.1,3.6"}), ["row 3", "column 'run_id'"]),
    "zero_tokens": (wide_csv({1: "b,0,0.5,0.5,3.1,3.6"}), ["row 3", "column 'tokens'"]),
    "language_never_positive": (
        wide_csv({1: "b,2e9,1.0,0.0,3.1,", 2: "c,4e9,1.0,0.0,3.3,"}),
        ["language 'fr'", "proportion 0 in every run", "--languages"],
    ),
    "long_missing_column": (
        "run_id,budget_tokens,tokens_seen,language,proportion\nx,1,1,en,1\n",
        ["loss", "found: run_id, budget_tokens"],
    ),
    "long_final_losses_without_tokens_seen": (
        "run_id,budget_tokens,language,proportion,loss\nx,1000,en,1.0,3.0\n",
        ["tokens_seen", "set tokens_seen to budget_tokens", "wide form"],
    ),
    "long_duplicate": (
        long_csv(extra=("x,1000,1000,en,1.0,3.05",)),
        ["run 'x'", "tokens_seen = 1000", "'en'", "rows 4, 8"],
    ),
    "long_budget_not_constant": (
        long_csv({2: "x,1100,1000,en,1.0,3.0"}),
        ["run 'x'", "budget_tokens", "row 4"],
    ),
    "long_proportion_not_constant": (
        long_csv({2: "x,1000,1000,en,0.9,3.0"}),
        ["'en'", "run 'x'", "column 'proportion'", "row 4"],
    ),
    "long_zero_budget": (long_csv({0: "x,0,900,en,1.0,3.1"}), ["row 2", "budget_tokens"]),
    "long_zero_tokens_seen": (long_csv({0: "x,1000,0,en,1.0,3.1"}), ["row 2", "tokens_seen"]),
    "long_tokens_over_budget": (
        long_csv({0: "x,1000,1200,en,1.0,3.1"}),
        ["row 2", "column 'tokens_seen'", "exceeds"],
    ),
    "long_run_missing_language": (
        long_csv(extra=("z,1000,1000,en,1.0,3.0",)),
        ["run 'z'", "'fr'", "row 8"],
    ),
    "long_misspelt_language": (
        long_csv(
            extra=(
                "z,1000,1000,en,1.0,3.0",
                "z,1000,1000,fr,0.0,",
                "w,1000,1000,en,1.0,3.0",
                "w,1000,1000,frr,0.0,",
            )
        ),
        ["language 'frr'", "only 1 of 4 runs", "row 11", "misspelt"],
    ),
    "long_no_tail_points": (
        long_csv(extra=("z,1000,500,en,1.0,3.0", "z,1000,500,fr,0.0,")),
        ["run 'z'", "no evaluation point", "tail_start", "more evaluation points"],
    ),
    "long_empty_loss_in_tail": (
        long_csv({4: "y,2000,2000,en,0.5,"}),
        ["row 6", "column 'loss'", "empty"],
    ),
    "long_non_numeric_proportion": (
        long_csv({5: "y,2000,2000,fr,half,3.4"}),
        ["row 7", "column 'proportion'", "'half'"],
    ),
    "long_negative_proportion": (
        long_csv({1: "x,1000,900,fr,-0.0001,"}),
        ["row 3", "column 'proportion'"],
    ),
    "long_empty_language": (long_csv({5: "y,2000,2000,,0.5,3.4"}), ["row 7", "'language'"]),
    "unknown_form": ("a,b\n1,2\n", ["cannot tell", "run_id"]),
    "header_only": (WIDE_HEAD, ["no data rows"]),
    "empty_file": ("", ["empty"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_raises(tmp_path, case):
    text, needles = BAD_CASES[case]
    path = write_csv(tmp_path, f"{case}.csv", text)
    with pytest.raises(RunsFormatError) as err:
        read_runs(path)
    msg = str(err.value)
    assert str(path) in msg
    assert "Fix:" in msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    assert isinstance(err.value, ClimbError) and isinstance(err.value, ValueError)


@pytest.mark.parametrize("tail", [0.0, -0.1, 1.5, NAN, True, "0.9"])
def test_bad_tail_start(tmp_path, tail):
    path = write_csv(tmp_path, "ok.csv", long_csv())
    with pytest.raises(RunsFormatError, match=r"ok\.csv.*tail_start must be in \(0, 1\]"):
        read_runs(path, tail_start=tail)


def test_valid_csv_fixtures_parse(tmp_path):
    assert read_runs(write_csv(tmp_path, "w.csv", wide_csv())).n_obs == 4
    assert read_runs(write_csv(tmp_path, "l.csv", long_csv())).n_obs == 4


def test_file_level_errors(tmp_path):
    with pytest.raises(RunsFormatError, match="file not found"):
        read_runs(tmp_path / "nope.csv")
    with pytest.raises(RunsFormatError, match="not a regular file"):
        read_runs(tmp_path)
    txt = write_csv(tmp_path, "runs.txt", wide_csv())
    with pytest.raises(RunsFormatError, match=r"runs\.txt.*extension '\.txt'.*\.parquet"):
        read_runs(txt)
    bad_pq = tmp_path / "bad.parquet"
    bad_pq.write_bytes(b"this is not parquet")
    with pytest.raises(RunsFormatError, match=r"bad\.parquet.*not a readable Parquet"):
        read_runs(bad_pq)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(WIDE_HEAD.encode() + "a,1e9,1.0,0.0,3.0,\xe9\n".encode("latin-1"))
    with pytest.raises(RunsFormatError, match=r"latin\.csv.*UTF-8"):
        read_runs(latin)


def test_frame_errors_use_source_name():
    df = wide_frame()
    df.loc[2, "tokens"] = -5.0
    with pytest.raises(RunsFormatError, match=r"^mytable, row 4, column 'tokens'"):
        runs_from_frame(df, source="mytable")
    with pytest.raises(RunsFormatError, match="no data rows"):
        runs_from_frame(wide_frame().iloc[:0])
    with pytest.raises(TypeError):
        runs_from_frame([1, 2, 3])  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ performance


def test_100k_long_rows_fast():
    rng = np.random.default_rng(0)
    n_runs, n_pts, m = 500, 40, 5
    run = np.repeat(np.arange(n_runs), n_pts * m)
    pt = np.tile(np.repeat(np.arange(1, n_pts + 1), m), n_runs)
    lang = np.tile(np.arange(m), n_runs * n_pts)
    props = rng.dirichlet(np.ones(m), n_runs)
    df = pd.DataFrame(
        {
            "run_id": pd.Series(run).map("run{}".format),
            "budget_tokens": 1e9,
            "tokens_seen": pt / n_pts * 1e9,
            "language": pd.Series(lang).map("l{}".format),
            "proportion": props[run, lang],
            "loss": 3.0 + rng.random(run.size),
        }
    )
    assert len(df) == 100_000
    t0 = time.perf_counter()
    d = runs_from_frame(df)
    assert time.perf_counter() - t0 < 2.0
    assert d.n_points == n_runs * 7  # points at 34/40 ... 40/40 of the budget
    assert d.n_points_dropped_head == n_runs * 33
    assert d.n_obs == d.n_points * m


@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_average_tail_is_the_papers_validation_loss(sim_frame3):
    """Issue 16: the paper's validation loss averages the final three evaluation points."""
    from climb_bayes.data.runs import PAPER_TAIL_POINTS

    full = runs_from_frame(sim_frame3, tail_start=0.5)
    avg = runs_from_frame(sim_frame3, tail_start=0.5, tail_average=PAPER_TAIL_POINTS)
    assert len(avg.point_run) == len(avg.run_ids) == len(full.run_ids)
    for r, run_id in enumerate(full.run_ids):
        pts = np.flatnonzero(full.point_run == r)
        pts = pts[np.argsort(full.point_tokens[pts])]
        assert len(pts) >= 3
        last = pts[-3:]
        np.testing.assert_allclose(
            avg.point_loss[r], np.nanmean(full.point_loss[last], axis=0), rtol=1e-12
        )
        assert avg.point_tokens[r] == full.point_tokens[pts[-1]]
        assert avg.run_ids[r] == run_id
    # zero shares stay excluded; k larger than the tail averages what there is
    assert np.array_equal(np.isnan(avg.point_loss), full.run_proportions == 0)
    big = full.average_tail(1000)
    for r in range(len(full.run_ids)):
        sel = full.point_run == r
        np.testing.assert_allclose(
            big.point_loss[r], np.nanmean(full.point_loss[sel], axis=0), rtol=1e-12
        )
    with pytest.raises(RunsFormatError, match="tail-average"):
        full.average_tail(0)


def test_cli_fit_tail_average(sim_frame3, tmp_path, capsys):
    from climb_bayes.cli import main

    path = tmp_path / "runs.csv"
    sim_frame3.to_csv(path, index=False)
    out = tmp_path / "fit.nc"
    args = ["fit", str(path), "--method", "map", "--laws", "climb", "--tail-average", "3"]
    assert main([*args, "-o", str(out)]) == 0
    text = capsys.readouterr().err
    avg = runs_from_frame(sim_frame3, tail_average=3)
    n_runs = sim_frame3["run_id"].nunique()
    assert f"observations: {len(avg.obs_loss)} at {n_runs} evaluation points" in text
    assert main(["fit", str(path), "--method", "map", "--tail-average", "0", "-o", str(out)]) == 2


def test_csv_examples_of_the_runs_format_page_parse():
    """Every ```csv block of docs/runs-format.md is a valid runs table."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "runs-format.md").read_text()
    blocks = [b.split("```")[0] for b in page.split("```csv\n")[1:]]
    assert len(blocks) >= 3
    parsed = [runs_from_frame(pd.read_csv(io.StringIO(b))) for b in blocks]
    assert [d.form for d in parsed][:2] == ["wide", "long"]
    assert any(d.run_series is not None for d in parsed)


def test_cli_reports_a_bad_run_series_with_exit_code_2(tmp_path, capsys):
    from climb_bayes.cli import main

    df = checkpoint_frame()
    df.loc[3, "run_series"] = "m1"  # another mixture's checkpoint labelled m1
    path = tmp_path / "ckpt.csv"
    df.to_csv(path, index=False)
    assert main(["fit", str(path), "--method", "map", "-o", str(tmp_path / "fit.nc")]) == 2
    err = capsys.readouterr().err
    assert "row 5, column 'run_series'" in err and "Fix:" in err
    assert "Traceback" not in err and not (tmp_path / "fit.nc").exists()
