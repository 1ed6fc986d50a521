"""The intervals a user gets from the command line, on published checkpoints they were not fit on.

Usage::

    python benchmarks/cli_path.py [--sets rp-70M] [--data ../shared/data] [--work DIR]
        [--no-series | --blank-series] [--fit-args "--samples 2000"] [--reuse] [--out FILE]

``benchmarks/real_data.py`` scores the shipped predictive through the Python API, with the
benchmark's own sampler settings and with each held-out checkpoint conditioned on its training
run's fitted deviation. This script goes the way a user does: it writes the fitted checkpoints
of a Data Mixing Laws set as a wide-form runs CSV (``run_series`` = the mixture's training run,
docs/runs-format.md), runs ``climb-bayes fit`` with its defaults, asks ``climb-bayes predict
--mixtures ... --budgets ...`` for every held-out mixture and budget (new runs: ``predict``
knows nothing of the held-out trajectories), then ``climb-bayes predict --continue-run`` naming
each held-out mixture's training run by its ``run_series`` label (the same runs, continued: rows
``continued run``; not with ``--no-series``), and scores the intervals against the published
losses. ``--reuse`` keeps a fit already in ``--work`` (with its saved output and time).
``--no-series`` leaves the ``run_series`` column out, as a table without it would be read
(since 2026-12-02 the reader then takes each mixture's checkpoints as one training run,
:func:`climb_bayes.data.runs.infer_checkpoint_series`); ``--blank-series`` writes the column
empty (every checkpoint its own run: how a table without it was read before). The splits are
those of ``benchmarks/real_data.py`` (``rp-<size>``: fit steps <= 16k, score the final 30k;
``5mix-<size>``: fit <= 12k, score 20k and later); losses at share 0 are not scored.

Rows ``expected`` are the law's own interval (parameter uncertainty only), ``predictive`` the
interval for the loss of a new run (what ``predict`` reports as the answer). Skips cleanly
(exit 0, one line) when the data folder is absent.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from climb_bayes.data.published import shared_data_dir  # noqa: E402
from climb_bayes.data.runs import SERIES_COLUMN  # noqa: E402
from climb_bayes.evaluation.metrics import mean_relative_error  # noqa: E402

LEVELS = ("50%", "90%")


SERIES_MODES = {
    "labels": "yes",
    "absent": "no (the reader infers one training run per mixture)",
    "blank": "empty (every checkpoint its own run)",
}
"""How the fit table states the checkpoints' training runs, and the table's words for it."""


def write_split(
    obs, fit_sel, test_sel, folder: Path, series: str
) -> tuple[Path, Path, list, set[str]]:
    """The fit table (wide CSV), the held-out mixtures (CSV), the held-out losses
    ``[(mixture, budget, group, loss)]`` of one split, and the ``run_series`` labels of the
    fitted training runs (each mixture's label names its training run for ``predict
    --continue-run``)."""
    runs = obs.to_runs()
    frame = runs.to_frame("wide")
    frame[SERIES_COLUMN] = [f"mix{c}" for c in runs.series]  # readable labels, not codes
    run_fit = np.zeros(runs.n_runs, dtype=bool)
    run_test = np.zeros(runs.n_runs, dtype=bool)
    run_fit[obs.run[fit_sel]] = True
    run_test[obs.run[test_sel]] = True
    fit_path = folder / "fit_runs.csv"
    table = frame[run_fit]
    if series == "absent":
        table = table.drop(columns=[SERIES_COLUMN])
    elif series == "blank":
        table = table.assign(**{SERIES_COLUMN: ""})
    table.to_csv(fit_path, index=False)
    test = frame[run_test]
    shares = [c for c in frame.columns if c.startswith("r_")]
    mix = test[[SERIES_COLUMN, *shares]].drop_duplicates(SERIES_COLUMN)
    mix_path = folder / "heldout_mixtures.csv"
    mix.rename(columns={SERIES_COLUMN: "name"}).to_csv(mix_path, index=False)
    truth = [
        (row[SERIES_COLUMN], float(row["tokens"]), c[2:], float(row["loss_" + c[2:]]))
        for _, row in test.iterrows()
        for c in shares
        if row[c] > 0
    ]
    return fit_path, mix_path, truth, set(frame.loc[run_fit, SERIES_COLUMN])


def score(pred: pd.DataFrame, truth: list) -> list[dict]:
    """Coverage of the central intervals and relative error of the median, per quantity."""
    y = pd.DataFrame(truth, columns=["mixture", "budget", "language", "y"])
    out = []
    for quantity, rows in pred.groupby("quantity"):
        d = y.merge(rows, on=["mixture", "budget", "language"], how="inner")
        res = {"quantity": quantity, "n": len(d)}
        for level in LEVELS:
            inside = (d.y >= d[f"{level}_lo"]) & (d.y <= d[f"{level}_hi"])
            res[f"cov{level[:-1]}"] = float(inside.mean())
        res["mre"] = mean_relative_error(d["median"].to_numpy(), d.y.to_numpy())
        out.append(res)
    return out


def run_set(
    name, obs, fit_sel, test_sel, work: Path, series: str, fit_args: list[str], reuse: bool
) -> dict:
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    fit_path, mix_path, truth, fitted = write_split(obs, fit_sel, test_sel, folder, series)
    fit_file = folder / "fit.nc"
    fit_out, fit_time = folder / "fit.stdout", folder / "fit.seconds"
    if not (reuse and fit_file.exists() and fit_out.exists() and fit_time.exists()):
        print(f"{name}: climb-bayes fit {fit_path} {' '.join(fit_args)}", file=sys.stderr)
        t0 = time.perf_counter()
        fit = subprocess.run(
            ["climb-bayes", "fit", str(fit_path), "-o", str(fit_file), *fit_args],
            capture_output=True,
            text=True,
        )
        (folder / "fit.stderr").write_text(fit.stderr)
        if fit.returncode != 0:
            tail = fit.stderr[-2000:]
            raise SystemExit(f"{name}: climb-bayes fit failed ({fit.returncode}):\n{tail}")
        fit_out.write_text(fit.stdout)
        fit_time.write_text(f"{time.perf_counter() - t0:.1f}\n")
    stdout = fit_out.read_text().splitlines()
    verdict = next((ln for ln in stdout if ln.startswith("verdict:")), "")
    weights = next((ln.strip() for ln in stdout if "weights:" in ln), "")
    budgets = sorted({t[1] for t in truth})
    pred_path = folder / "predict.csv"
    _predict(fit_file, pred_path, budgets, ["--mixtures", str(mix_path)])
    pred = pd.read_csv(pred_path)
    scores = score(pred, truth)
    if series == "labels":  # each held-out mixture as the continuation of its training run
        held = sorted({t[0] for t in truth} & fitted)  # named by run_series label, as a user
        flags = [a for label in held for a in ("--continue-run", label)]
        path = folder / "continue.csv"
        _predict(fit_file, path, budgets, flags)
        cont = pd.read_csv(path).query("quantity == 'predictive'")
        mixture = cont["mixture"].str.removeprefix("run ")  # predict names "run <label>"
        cont = cont.assign(mixture=mixture, quantity="continued run")
        scores += score(cont, truth)
    return {
        "set": name,
        "seconds": float(fit_time.read_text()),
        "verdict": verdict.removeprefix("verdict:").strip(),
        "weights": weights.removeprefix("weights:").strip(),
        "scores": scores,
    }


def _predict(fit_file: Path, out: Path, budgets: list[float], args: list[str]) -> None:
    """``climb-bayes predict FIT --budgets ... ARGS -o OUT`` (the table it writes)."""
    text = ",".join(f"{b:.17g}" for b in budgets)
    cmd = ["climb-bayes", "predict", str(fit_file), "--budgets", text, *args, "-o", str(out)]
    subprocess.run(cmd, capture_output=True, text=True, check=True)


def format_rows(results: list[dict], series: str) -> str:
    lines = [
        f"run_series column: {SERIES_MODES[series]}",
        "",
        "| set | quantity | n | cov50 | cov90 | MRE | fit s | fit verdict | stacking weights |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for s in r["scores"]:
            lines.append(
                f"| {r['set']} | {s['quantity']} | {s['n']} | {s['cov50']:.2f} | "
                f"{s['cov90']:.2f} | {s['mre']:.2%} | {r['seconds']:.0f} | {r['verdict']} | "
                f"{r['weights']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="rp-70M", help="comma-separated, e.g. rp-70M,5mix-70M")
    parser.add_argument("--data", type=Path, default=None, help="shared data folder")
    parser.add_argument("--work", type=Path, default=None, help="keep the CSVs and fits here")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--no-series", action="store_true", help="leave run_series out")
    how.add_argument(
        "--blank-series", action="store_true", help="write run_series empty (no checkpoints)"
    )
    parser.add_argument("--fit-args", default="", help="extra climb-bayes fit options")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--reuse", action="store_true", help="keep a fit already in --work (same split and code)"
    )
    args = parser.parse_args(argv)
    data = args.data if args.data is not None else shared_data_dir()
    if data is None or not Path(data).is_dir():
        print("cli-path benchmark skipped: no shared data folder (../shared/data).")
        return 0
    # the benchmark's splits (importing real_data sets up JAX)
    from real_data import LARGER_SCALE, extrapolation_splits, larger_scale_splits

    wanted = [s.strip() for s in args.sets.split(",") if s.strip()]
    sizes = tuple(sorted({s.split("-", 1)[1] for s in wanted if s not in LARGER_SCALE}))
    splits = {name: rest for name, *rest in extrapolation_splits(Path(data), sizes)}
    larger = tuple(s for s in wanted if s in LARGER_SCALE)
    splits |= {name: rest for name, *rest in larger_scale_splits(Path(data), larger)}
    unknown = [s for s in wanted if s not in splits]
    if unknown:
        parser.error(f"unknown set(s) {', '.join(unknown)}; known: {', '.join(splits)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="climb-cli-path-"))
    series = "absent" if args.no_series else "blank" if args.blank_series else "labels"
    t0 = time.perf_counter()
    results = [
        run_set(name, *splits[name], work, series, shlex.split(args.fit_args), args.reuse)
        for name in wanted
    ]
    text = format_rows(results, series) + f"\n\n- total time {time.perf_counter() - t0:.0f} s"
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
