"""How far the paper's two-step solution is from the direct optimum, and what ``rho`` does.

For each world (a fitted law at its posterior medians, or the shipped synthetic truth) and each
target budget, solves

* the **direct** minimiser of the equally weighted loss ``sum_i w_i L_i(D, r)``
  (:func:`climb_bayes.decisions.solvers.direct_batch`), and
* the paper's **two-step** solution (direction ``p``, then the penalised magnitude problem,
  Eq. 8; :func:`climb_bayes.decisions.solvers.two_step_batch`) for each ``rho`` in ``--rho``,

and prints the extra weighted loss (nats/token) of the two-step solution and of the uniform
mixture over the direct optimum, plus the largest share difference to the direct optimum.
docs/decisions.md shows this table. Usage::

    climb-bayes fit -o fit.nc                       # the shipped default, NUTS
    python benchmarks/two_step_gap.py --fit fit.nc  # + the synthetic truth
    python benchmarks/two_step_gap.py               # MAP fit of the default data instead

References
----------
.. [1] Guo et al. (2025), Eq. (7)-(8) and Appendix C (the claim that the two steps reach the
   direct optimum).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import climb_bayes  # noqa: E402
from climb_bayes.decisions.optimization import median_params  # noqa: E402
from climb_bayes.decisions.solvers import direct_batch, two_step_batch, weighted_loss  # noqa: E402
from climb_bayes.model.law import LawParams  # noqa: E402

climb_bayes.setup_jax()  # x64 and host devices before JAX starts

DATA = Path(__file__).resolve().parent.parent / "climb_bayes" / "data"
DEFAULT_RHOS = (0.01, 1.0, 10.0, 100.0, 1e4)


def gap_rows(name: str, params: LawParams, budgets, rhos) -> list[dict]:
    """Rows of the table for one world (``params``: a one-draw ``LawParams``, tokens units)."""
    m = params.beta.shape[-1]
    w = np.full(m, 1.0 / m)
    lo, hi = np.zeros(m), np.ones(m)
    rows = []
    for D in budgets:
        direct = direct_batch(params, D, w, lo, hi).x
        f_direct = float(weighted_loss(direct, D, params, w)[0])
        uniform = np.full((1, m), 1.0 / m)
        rows.append(
            dict(
                world=name,
                D=D,
                answer="uniform",
                gap=float(weighted_loss(uniform, D, params, w)[0]) - f_direct,
                share=float(np.abs(uniform - direct).max()),
            )
        )
        for rho in rhos:
            sol, _ = two_step_batch(params, D, w, lo, hi, rho)
            rows.append(
                dict(
                    world=name,
                    D=D,
                    answer=f"two-step rho={rho:g}",
                    gap=float(weighted_loss(sol.x, D, params, w)[0]) - f_direct,
                    share=float(np.abs(sol.x - direct).max()),
                )
            )
    return rows


def _default_map() -> LawParams:
    from climb_bayes.data.datasets import dataset_path, default_dataset
    from climb_bayes.data.runs import read_runs
    from climb_bayes.inference.fitting import fit_runs
    from climb_bayes.model.priors import Priors

    runs = read_runs(dataset_path(default_dataset()))
    fit = fit_runs(runs, Priors(), method="map", seed=0)
    return median_params(fit.law_draws())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", type=Path, help="A fit.nc (posterior medians); default: MAP fit.")
    ap.add_argument(
        "--budgets",
        default=None,
        help="Target budgets (tokens); default 1e6,1e9,1e12 for a fit (its fitted range, then "
        "far beyond) and 1e10,1e12 for the synthetic truth (whose transfer k/D is meant for "
        "budgets of 1e9 and up).",
    )
    ap.add_argument("--rho", default=",".join(f"{r:g}" for r in DEFAULT_RHOS))
    args = ap.parse_args(argv)
    chosen = [float(x) for x in args.budgets.split(",")] if args.budgets else None
    rhos = [float(x) for x in args.rho.split(",")]
    t0 = time.perf_counter()
    if args.fit is not None:
        from climb_bayes.inference.fitresult import load_fit

        fit = load_fit(args.fit)
        fitted = (f"{args.fit.name} (posterior medians)", median_params(fit.law_draws()))
    else:
        fitted = ("default data (MAP)", _default_map())
    worlds = [(*fitted, chosen or [1e6, 1e9, 1e12])]
    from climb_bayes.model.simulate import TrueParams

    truth = TrueParams.read(DATA / "synthetic_params.json").law()
    truth = LawParams(*(np.asarray(x)[None] for x in truth))
    worlds.append(("synthetic truth", truth, chosen or [1e10, 1e12]))
    rows = [r for name, p, budgets in worlds for r in gap_rows(name, p, budgets, rhos)]
    print("| world | D (tokens) | answer | extra loss over direct (nats) | max share diff |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['world']} | {r['D']:.0e} | {r['answer']} | {r['gap']:+.2e} | {r['share']:.3f} |"
        )
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
