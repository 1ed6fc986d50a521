"""Issue-14 targets on the shipped default dataset: does the law extrapolate on our own runs?

Usage::

    python benchmarks/default_data.py [--dataset default] [--chains 4] [--samples 4000]
        [--target-accept 0.98]  (default: each law's own, as ``climb-bayes fit``)

Three checks, each one ``climb-bayes evaluate`` call on ``climb_bayes/data/<dataset>_runs.csv``:

holdout
    Fit on the Algorithm-1 runs, predict the held-out mixtures (``--holdout 'run_id~holdout'``;
    3x the largest fitting budget on the default): CLIMB and the isolated law by NUTS
    (posterior median) and by Laplace approximation (``fit --method laplace``), CLIMB by MAP,
    NUTS with the sampler of ``climb-bayes fit``. A row whose fit
    fails the convergence gate says ``(flagged)`` and the problems follow the table. Targets:
    CLIMB NUTS MRE <= 3% and R² >= 0.5 for every language.
holdout, shipped predictive
    The same split for what ``climb-bayes fit`` ships (``--shipped``): every law with its
    learned discrepancy, and the stacked predictive. Target of issue 13: 50% intervals cover
    40-60%, 90% intervals 80-97%.
lfo
    Leave-future-out on the Algorithm-1 runs only (``--lfo --exclude 'run_id~holdout'``): fit
    the smaller budgets, predict the larger; every law and the stacked predictive (Laplace).

Prints one markdown table (the one in ``climb_bayes/data/DEFAULT_DATA.md``) and whether each
target is met. Takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOLDOUT = "run_id~holdout"
TARGET_MRE = 0.03
TARGET_R2 = 0.5


def _evaluate(args: list[str]) -> tuple[dict, float]:
    from climb_bayes.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["evaluate", *args, "-o", str(out)])
        if code != 0:
            raise SystemExit(f"climb-bayes evaluate {' '.join(args)} failed (exit {code})")
        return json.loads(out.read_text()), time.perf_counter() - t0


def _shipped_on_holdouts(
    path: str, sampler: list[str], verdict: list[str], flagged: list[str]
) -> list[str]:
    """Rows of the shipped predictive (every law as ``climb-bayes fit`` fits it, inner-fold
    discrepancies, stacking) fitted on the Algorithm-1 runs and scored on the holdouts:
    ``climb-bayes evaluate --holdout 'run_id~holdout' --shipped --method nuts``."""
    from climb_bayes.evaluation.lfo_evaluate import STACKED

    res, secs = _evaluate([path, "--holdout", HOLDOUT, "--shipped", "--method", "nuts", *sampler])
    weights = ", ".join(f"{k} {w:.2f}" for k, w in res["folds"][0]["weights"].items())
    out = []
    for row in res["rows"]:
        if row["ratio_bin"] != "all":
            continue
        cov = row["coverage"]
        out.append(
            f"| holdout, shipped predictive ({weights}) | {row['predictive']} | nuts + "
            f"discrepancy | {row['n']} | {row['mre']:.2%} | mean {row['r2_group_mean']:.2f} "
            f"| {row['r2_pooled']:.2f} | {cov['0.5']:.2f} | {cov['0.9']:.2f} | {secs:.0f} |"
        )
        if row["predictive"] == STACKED:
            band = row["coverage_if_calibrated"]
            verdict.append(
                f"shipped predictive on the holdouts: cov50 {cov['0.5']:.2f} [a calibrated "
                f"predictive: {band['0.5'][0]:.2f}-{band['0.5'][1]:.2f}], cov90 {cov['0.9']:.2f} "
                f"[{band['0.9'][0]:.2f}-{band['0.9'][1]:.2f}] (issue 13: 0.40-0.60, 0.80-0.97), "
                f"CRPS {row['crps']:.4f}"
            )
    flagged += [f"shipped predictive: {w.removeprefix('WARNING: ')}" for w in res["warnings"]]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="default")
    # the sampler of `climb-bayes fit` (evaluate's lighter defaults, 2 x (500 + 500) at 0.95,
    # failed the convergence gate here: R-hat 1.019, bulk ESS 233 for CLIMB, 2026-12-01)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--target-accept", type=float, default=None)  # None: each law's own
    args = ap.parse_args()

    from climb_bayes.data.datasets import dataset_path
    from climb_bayes.inference.convergence import law_problems
    from climb_bayes.laws import get_law

    path = str(dataset_path(args.dataset))
    hold = ["--holdout", HOLDOUT]
    lines = [
        "| check | law | method | n | MRE | R² per group | R² pooled | cov50 | cov90 | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdict, flagged = [], []
    sampler = ["--chains", str(args.chains), "--samples", str(args.samples)]
    given = [] if args.target_accept is None else ["--target-accept", str(args.target_accept)]
    for method, laws in (
        ("nuts", "climb"),  # one call per law: each with its own target acceptance, as `fit`
        ("nuts", "isolated"),
        ("laplace", "climb,isolated"),
        ("map", "climb"),
    ):
        extra = []
        if method == "nuts":
            own = ["--target-accept", str(get_law(laws).nuts_target_accept)]
            extra = [*sampler, *(given or own)]
        res, secs = _evaluate([path, *hold, "--method", method, "--laws", laws, *extra])
        for row in res["rows"]:
            m = row["metrics"]
            groups = ", ".join(
                f"{g} {v:.2f}" for g, v in zip(res["groups"], m["r2_group"], strict=True)
            )
            cov = m["coverage"]
            problems = law_problems(row.get("info", {}))
            if problems:  # the fit gate's verdict travels with the row
                flagged.append(f"{row['law']} {method}: NOT converged: {'; '.join(problems)}")
            how = f"{method} (flagged)" if problems else method
            lines.append(
                f"| holdout | {row['law']} | {how} | {m['n']} | {m['mre']:.2%} | {groups} "
                f"| {m['r2_pooled']:.2f} | {cov['0.5']:.2f} | {cov['0.9']:.2f} | {secs:.0f} |"
            )
            if row["law"] == "climb" and method == "nuts":
                verdict.append(
                    f"CLIMB NUTS holdout MRE {m['mre']:.2%} "
                    f"({'meets' if m['mre'] <= TARGET_MRE else 'misses'} <= {TARGET_MRE:.0%}); "
                    f"min R² per language {min(m['r2_group']):.2f} "
                    f"({'meets' if min(m['r2_group']) >= TARGET_R2 else 'misses'} >= {TARGET_R2})"
                )
    lines += _shipped_on_holdouts(path, [*sampler, *given], verdict, flagged)
    res, secs = _evaluate([path, "--lfo", "--exclude", "run_id~holdout", "--method", "laplace"])
    cuts = ", ".join(format(f["cut"], ".3g") for f in res["folds"])
    for row in res["rows"]:
        if row["ratio_bin"] != "all":
            continue
        cov = row["coverage"]
        lines.append(
            f"| lfo (cut {cuts}) | {row['predictive']} | laplace | {row['n']} | {row['mre']:.2%} "
            f"| mean {row['r2_group_mean']:.2f} | {row['r2_pooled']:.2f} | {cov['0.5']:.2f} "
            f"| {cov['0.9']:.2f} | {secs:.0f} |"
        )
    print("\n".join(lines))
    print()
    for v in verdict + flagged:
        print(f"- {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
