"""Is the Laplace approximation a fair stand-in for NUTS where the benchmarks use it?

Usage::

    python benchmarks/laplace_check.py [--data ../shared/data] [--sets rp-160M,5mix-70M]
        [--laws climb,msl,dml,isolated] [--nuts]

``benchmarks/real_data.py --pipeline laplace`` fits each law's full posterior by Laplace
approximation (:func:`climb_bayes.laws.base.fit_laplace`) for speed; ``climb-bayes fit``
samples them by NUTS. The Laplace fit carries its own check, the Pareto k of the importance
ratios posterior / approximation (Yao et al. 2018; above :func:`pareto_k_threshold` the
approximation is unreliable, and ``climb-bayes fit --method laplace`` warns). This script
fits every law to the training split of each pipeline set (the same splits and fit settings as
``real_data.py``'s pipeline) and prints, per (set, law), that Pareto k and what the
approximation does where it matters, at the held-out budgets: the parameter-only 90%
interval's half-width (the law's spread over posterior draws, median over held-out points, in
log-loss), the share of stray draws (more than 5 half-widths from the median: a Gaussian has
none) and the MRE of the predictive centre (the mean over draws; runs that continue are
conditioned on their fitted points, as the pipeline scores them; no discrepancy). With
``--nuts`` the same from a NUTS fit (``real_data.py``'s pipeline settings: 2 chains x
(500 warm-up + 500 draws)) beside it, and its convergence checks.

About 5 s per Laplace fit and 20-120 s per NUTS fit on the 2-core machines; skips cleanly
(exit 0, one line) when the data folder is absent.

References
----------
.. [1] Yao, Vehtari, Simpson & Gelman (2018), "Yes, but Did It Work?: Evaluating Variational
   Inference", ICML (the Pareto k diagnostic of an approximate posterior).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import climb_bayes  # noqa: E402
from climb_bayes.data.published import shared_data_dir  # noqa: E402


def _at_target(fit, test) -> tuple[float, float, float]:
    """At ``test``: the median half-width of the parameter-only 90% interval, the share of
    (draw, point) pairs whose law lies more than 5 such half-widths from the point's median
    (an approximation's stray draws), and the MRE of the predictive centre (the mean over
    draws, no discrepancy)."""
    from climb_bayes.inference.predictive import predictive_parts

    parts = predictive_parts(fit, test, discrepancy=False)
    lo, hi = np.quantile(parts.law, [0.05, 0.95], axis=0)
    half = (hi - lo) / 2.0
    stray = float(np.mean(np.abs(parts.law - np.median(parts.law, axis=0)) > 5.0 * half))
    centre = parts.centre.mean(axis=0)
    mre = float(np.mean(np.abs(np.expm1(centre - test.log_loss))))
    return float(np.median(half)), stray, mre


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--sets", default=None, help="comma-separated (default: all ten)")
    ap.add_argument("--laws", default="climb,msl,dml,isolated")
    ap.add_argument("--nuts", action="store_true", help="also fit by NUTS and compare")
    args = ap.parse_args(argv)
    data = args.data or shared_data_dir()
    if data is None or not Path(data).is_dir():
        print("laplace-check benchmark skipped: ../shared/data not found")
        return 0
    climb_bayes.setup_jax()
    from real_data import pipeline_options, pipeline_splits

    from climb_bayes.inference.convergence import law_problems
    from climb_bayes.laws import parse_laws

    sets = None if args.sets is None else tuple(s.strip() for s in args.sets.split(","))
    options = pipeline_options()
    head = (
        "| set | law | Laplace Pareto k (max) | Laplace 90% half-width | stray draws | "
        "Laplace MRE |"
    )
    rule = "|---|---|---|---|---|---|"
    if args.nuts:
        head += " NUTS 90% half-width | stray draws | NUTS MRE | NUTS checks |"
        rule += "---|---|---|---|"
    lines = [head, rule]
    t_all = time.perf_counter()
    for name, obs, fit_sel, test_sel in pipeline_splits(Path(data), sets):
        train = obs.select(fit_sel & ~obs.zero_share)
        test = obs.select(test_sel & ~obs.zero_share)
        for law in parse_laws(args.laws):
            law = law.prepare(train)
            t0 = time.perf_counter()
            fit = law.fit(train, "laplace", options)
            k, k_max = fit.info["pareto_k"], fit.info["pareto_k_max"]
            usable = law.usable(test)
            width, stray, mre = _at_target(fit, usable)
            flag = " unreliable" if k > k_max else ""
            row = (
                f"| {name} | {law.name} | {k:.2f} ({k_max:.2f}){flag} | {width:.4f} | "
                f"{stray:.1%} | {mre:.2%} |"
            )
            if args.nuts:
                nuts = law.fit(train, "nuts", options)
                n_width, n_stray, n_mre = _at_target(nuts, usable)
                checks = "; ".join(law_problems(nuts.info)) or "ok"
                row += f" {n_width:.4f} | {n_stray:.1%} | {n_mre:.2%} | {checks} |"
            lines.append(row)
            seconds = time.perf_counter() - t0
            print(f"{name} {law.name}: {seconds:.0f} s", file=sys.stderr, flush=True)
    print("\n".join(lines))
    print(f"\n- total time {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
