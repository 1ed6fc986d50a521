"""What reading separate runs as one run's checkpoints costs (the reader's run_series guess).

Usage::

    python benchmarks/series_inference.py                 # seeds 0 and 1, Laplace fits
    python benchmarks/series_inference.py --seeds 0 --method nuts

A wide runs table without ``run_series`` in which a mixture has rows at 4+ budgets is read as
one training run's checkpoints per mixture (:func:`climb_bayes.data.runs.infer_checkpoint_series`).
This script measures the wrong guess: it simulates *separate* runs (6 random mixtures x 6
budgets, 3 languages, the package's simulated world), writes them as a wide table without the
column (read as checkpoints) and with an empty one (read as separate runs, the truth), and runs
``climb-bayes evaluate --holdout 'tokens>=1e11'`` (the largest budget held out, 4x the largest
fitted one) on both. Prints one row per seed, law and reading: held-out MRE and 90% coverage.
The other error (checkpoints read as separate runs) is measured on published checkpoints by
``benchmarks/cli_path.py --blank-series`` (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd

import climb_bayes
from climb_bayes.cli import main as cli
from climb_bayes.data.runs import SERIES_COLUMN, runs_from_frame
from climb_bayes.model.simulate import example_params, simulate_runs

climb_bayes.setup_jax()

LANGS = ("en", "de", "zh")
BUDGETS = (2e9, 4e9, 8e9, 1.6e10, 3.2e10, 1.28e11)


def separate_runs(seed: int) -> pd.DataFrame:
    """Wide table of separate runs: 6 mixtures x :data:`BUDGETS`, final losses, no labels."""
    world = example_params(LANGS, seed=3, sigma=0.01)
    rng = np.random.default_rng(0)
    rows = []
    for k in range(6):
        r = 0.9 * rng.dirichlet(np.ones(len(LANGS))) + 0.1 / len(LANGS)
        for b in BUDGETS:
            shares = {f"r_{lang}": r[i] for i, lang in enumerate(LANGS)}
            rows.append({"run_id": f"m{k}@{b:.0e}", "tokens": b, **shares})
    curves = simulate_runs(world, pd.DataFrame(rows), seed=seed, curve_fractions=(1.0,))
    wide = runs_from_frame(curves).to_frame("wide")
    return wide.drop(columns=[c for c in wide.columns if c == SERIES_COLUMN])


def evaluate(path: Path, method: str) -> pd.DataFrame:
    """``climb-bayes evaluate`` on the held-out largest budget: one row per law."""
    out = path.with_suffix(".scores.json")
    argv = ["evaluate", str(path), "--holdout", "tokens>=1e11", "--method", method]
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        rc = cli([*argv, "-o", str(out)])
    if rc not in (0, 1):
        raise SystemExit(f"evaluate failed on {path} (exit {rc})")
    rows = json.loads(out.read_text())["rows"]
    return pd.DataFrame(
        {
            "law": [r["law"] for r in rows],
            "mre": [r["metrics"]["mre"] for r in rows],
            "cov90": [r["metrics"]["coverage"]["0.9"] for r in rows],
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1", help="noise seeds of the simulated runs")
    ap.add_argument("--method", default="laplace", choices=["laplace", "nuts", "map"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="climb-series-"))
    print("| seed | law | read as | MRE | cov90 |")
    print("|---|---|---|---|---|")
    for seed in (int(s) for s in args.seeds.split(",")):
        table = separate_runs(seed)
        readings = {
            "checkpoints (no column)": table,
            "separate runs (empty column)": table.assign(**{SERIES_COLUMN: ""}),
        }
        scores = {}
        for label, frame in readings.items():
            path = work / f"seed{seed}-{'absent' if SERIES_COLUMN not in frame else 'blank'}.csv"
            frame.to_csv(path, index=False)
            scores[label] = evaluate(path, args.method).set_index("law")
        for law in scores["checkpoints (no column)"].index:
            for label, df in scores.items():
                row = df.loc[law]
                print(f"| {seed} | {law} | {label} | {row['mre']:.2%} | {row['cov90']:.2f} |")


if __name__ == "__main__":
    main()
