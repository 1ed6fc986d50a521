"""Speed and accuracy of the batched mixture solver against scipy trust-constr per draw.

For each (draws, languages) configuration: synthetic posterior draws
(:func:`climb_bayes.model.simulate.example_draws`), the direct minimiser of the weighted loss and
the paper's two-step solution at a target budget, solved

* all draws at once with the fast path (:func:`climb_bayes.decisions.solvers.direct_batch`,
  :func:`~climb_bayes.decisions.solvers.two_step_batch`; compile time reported separately), and
* one draw at a time with scipy ``trust-constr`` (the paper's trust-region interior-point
  method) on a subset of the draws, its time extrapolated to all draws.

Prints a table: draws x languages, problem, fast seconds, trust-constr seconds (extrapolated),
speed-up, and the objective gap on the subset (fast minus trust-constr; negative: the fast path
found a lower value). Usage::

    python benchmarks/optimize_speed.py                      # 2000 x 16 and 2000 x 5
    python benchmarks/optimize_speed.py --config 400x3 --subset 40
    python benchmarks/optimize_speed.py --config 2000x16 --box 0.02,0.09   # tight share bounds
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import climb_bayes  # noqa: E402
from climb_bayes.decisions.solvers import (  # noqa: E402
    direct_batch,
    direct_trust_constr,
    two_step_batch,
    two_step_trust_constr,
)
from climb_bayes.model.simulate import example_draws  # noqa: E402

climb_bayes.setup_jax()  # x64 and host devices before JAX starts


def run(
    n: int, m: int, subset: int, budget: float, rho: float, reps: int, box: tuple | None = None
) -> list[dict]:
    params = example_draws(m, n)
    w = np.full(m, 1.0 / m)
    lo, hi = (np.zeros(m), np.ones(m)) if box is None else (np.full(m, box[0]), np.full(m, box[1]))
    sub = np.arange(min(subset, n))
    rows = []
    for problem in ("direct", "two-step"):
        if problem == "direct":

            def fast():
                return direct_batch(params, budget, w, lo, hi)

            def slow():
                return direct_trust_constr(params, budget, w, lo, hi, draws=sub)
        else:

            def fast():
                return two_step_batch(params, budget, w, lo, hi, rho)[0]

            def slow():
                return two_step_trust_constr(params, budget, w, lo, hi, rho, draws=sub)

        t0 = time.perf_counter()
        sol = fast()
        first = time.perf_counter() - t0
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            sol = fast()
            times.append(time.perf_counter() - t0)
        t_fast = min(times)
        t0 = time.perf_counter()
        _, f_ref = slow()
        t_slow = (time.perf_counter() - t0) * n / sub.size
        gap = sol.fun[sub] - f_ref
        rows.append(
            {
                "config": f"{n} x {m}" + ("" if box is None else f" box{list(box)}"),
                "problem": problem,
                "fast_s": t_fast,
                "compile_s": max(first - t_fast, 0.0),
                "trust_constr_s": t_slow,
                "speedup": t_slow / t_fast,
                "max_gap": float(np.max(gap)),
                "max_abs_gap": float(np.max(np.abs(gap))),
                "subset": int(sub.size),
            }
        )
        print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict) -> str:
    return (
        f"| {r['config']:>11} | {r['problem']:>8} | {r['fast_s']:8.2f} | {r['compile_s']:8.1f} | "
        f"{r['trust_constr_s']:9.0f} | {r['speedup']:7.0f}x | {r['max_gap']:+.1e} | "
        f"{r['max_abs_gap']:.1e} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", action="append", default=None, help="DRAWSxLANGUAGES (repeatable).")
    ap.add_argument("--subset", type=int, default=20, help="Draws solved with trust-constr.")
    ap.add_argument("--budget", type=float, default=1e12, help="Target budget (tokens).")
    ap.add_argument("--rho", type=float, default=100.0, help="Two-step penalty.")
    ap.add_argument("--reps", type=int, default=3, help="Timed repetitions of the fast path.")
    ap.add_argument(
        "--box", default=None, help="Share bounds LO,HI for every language (e.g. 0.02,0.09)."
    )
    args = ap.parse_args()
    configs = args.config or ["2000x16", "2000x5"]
    print(
        "| draws x lang | problem  | fast (s) | compile (s) | trust-constr (s, extrap.) | "
        "speed-up | max gap (fast - tc) | max abs gap |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for c in configs:
        n, m = (int(x) for x in c.lower().split("x"))
        box = None if args.box is None else tuple(float(x) for x in args.box.split(","))
        run(n, m, args.subset, args.budget, args.rho, args.reps, box)


if __name__ == "__main__":
    main()
