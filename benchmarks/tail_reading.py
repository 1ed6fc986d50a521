"""Does reading a run's tail points as runs of ``tokens_seen`` tokens help or hurt extrapolation?

Usage::

    python benchmarks/tail_reading.py [--runs CSV] [--exclude EXPR] [--holdout EXPR]
        [--tails 0.85,0.99] [--likelihood student_t|normal] [--priors TOML] [--label TEXT]

A run's tail points (``--tail-start 0.85``: its last 15% of tokens) fall partly because the
learning rate decays there, and every law reads a point at its own ``tokens_seen``, so a fit
over two close budgets may take that fall for the slope in ``D``. This benchmark fits the
shipped pipeline (:func:`climb_bayes.evaluation.lfo_evaluate.evaluate_extrapolation`: four laws
by Laplace, Laplace inner folds, discrepancy, stacking) on the non-held-out runs of ``--runs``
once per ``--tails`` value and scores every fit on the *same* test points: the held-out runs'
final losses (their points at ``tokens_seen >= 0.99 budget``), so the rows compare like for
like. ``--exclude`` drops runs before both (e.g. a budget level, to make a two-level fit).

Prints one markdown row per tail setting: each law's MRE, the stacked predictive's MRE,
50% / 90% coverage and CRPS, the stacking weights, and the seconds. 1-4 min per row on 2 cores.
The rows of docs/model.md ("Does the tail's within-run slope mislead a two-budget fit?")::

    python benchmarks/tail_reading.py --exclude 'tokens>9e5 and tokens<1.1e6' --label '250k + 500k'
    python benchmarks/tail_reading.py --label '250k, 500k, 1M'
    python benchmarks/tail_reading.py --runs climb_bayes/data/tiny2024_runs.csv --label tiny-2024

References
----------
.. [1] Guo et al. (2025), "CLIMB", Section 5 (the average of the last steps as one observation).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import climb_bayes  # noqa: E402
from climb_bayes.data.tail_slopes import FINAL_POINT_TAIL  # noqa: E402

LAWS = "climb,isolated,msl,dml"
"""The stacked laws, as ``climb-bayes fit`` stacks them."""


def _runs(path: Path, tail: float, exclude: str | None):
    from climb_bayes.cli._runs_table import exclude_runs, read_runs_table

    runs = read_runs_table(
        path, tail_start=tail, tail_average=None, renormalize=False, languages=None, where=()
    )
    return exclude_runs(runs, exclude, lambda _s: None)[0]


def tail_row(
    path: Path,
    tail: float,
    exclude: str | None,
    holdout: str,
    likelihood: str | None = None,
    priors_file: Path | None = None,
) -> dict:
    """Fit on the non-held-out runs read with ``tail``; score on the held-out final losses.
    ``priors_file`` (a ``climb-bayes priors`` TOML) replaces the shipped priors and
    ``likelihood`` the likelihood (``None``: the file's, or the shipped Student-t)."""
    from climb_bayes.data.holdout import holdout_mask
    from climb_bayes.data.observations import Observations
    from climb_bayes.evaluation.lfo_evaluate import evaluate_extrapolation
    from climb_bayes.inference.ensemble import shipped_options
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.families import resolve_families
    from climb_bayes.laws.registry import parse_laws
    from climb_bayes.model.priors import load_priors

    priors = load_priors(priors_file, likelihood=likelihood)
    final = _runs(path, FINAL_POINT_TAIL, exclude)
    test = Observations.from_runs(final).select_runs(holdout_mask(final, holdout))
    runs = _runs(path, tail, exclude)
    laws = parse_laws(LAWS, families=resolve_families(None, runs.languages).mapping)
    train = Observations.from_runs(runs).select_runs(~holdout_mask(runs, holdout))
    t0 = time.perf_counter()
    res = evaluate_extrapolation(
        train,
        test,
        laws,
        FitOptions(seed=0, chains=4, warmup=500, samples=4000, priors=priors),
        shipped_options("laplace", "laplace"),
    )
    rows = {r.law: r.metrics for r in res.rows if r.ratio_bin == "all"}
    return {
        "n_test": test.n,
        "rows": rows,
        "weights": res.folds[0].get("weights", {}),
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = ROOT / "climb_bayes" / "data" / "default_runs.csv"
    parser.add_argument("--runs", type=Path, default=default, help="long-form runs CSV")
    parser.add_argument("--exclude", default=None, help="runs to drop first (--exclude syntax)")
    parser.add_argument("--holdout", default="run_id~holdout", help="held-out runs (test set)")
    parser.add_argument("--tails", default=f"0.85,{FINAL_POINT_TAIL}", help="tail starts")
    parser.add_argument(
        "--likelihood", default=None, help="replace the priors' likelihood (normal, student_t)"
    )
    parser.add_argument(
        "--priors", type=Path, default=None, help="priors TOML (e.g. student_df = 4)"
    )
    parser.add_argument("--label", default=None, help="first cell of each row")
    args = parser.parse_args(argv)
    climb_bayes.setup_jax()
    label = args.label or args.runs.name
    print(
        "| fit | tail | n test | CLIMB MRE | MSL | DML | Isolated | stacked MRE "
        "| stacked cov50 / cov90 | stacked CRPS | weights | seconds |"
    )
    print("|" + "---|" * 12)
    for tail in (float(t) for t in args.tails.split(",")):
        out = tail_row(args.runs, tail, args.exclude, args.holdout, args.likelihood, args.priors)
        rows = out["rows"]
        cov = rows["stacked"]["coverage"]
        name = "final" if tail >= FINAL_POINT_TAIL else f"{tail:g}"
        weights = ", ".join(f"{k} {v:.2f}" for k, v in out["weights"].items() if v >= 0.005)
        cells = [label, name, str(out["n_test"])]
        cells += [f"{rows[law]['mre']:.1%}" for law in ("climb", "msl", "dml", "isolated")]
        cells += [f"{rows['stacked']['mre']:.1%}", f"{cov['0.5']:.2f} / {cov['0.9']:.2f}"]
        cells += [f"{rows['stacked']['crps']:.4f}", weights, f"{out['seconds']:.0f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
