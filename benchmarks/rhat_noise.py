"""How often does the convergence gate fail chains that mix perfectly?

Usage::

    python benchmarks/rhat_noise.py [--quantities 60] [--reps 200] [--seed 0]

The gate of ``climb-bayes fit`` asks every rank-normalised split R-hat to be at most 1.01
(Vehtari et al. 2021). R-hat is an estimate: even for chains drawn from the target it is
above 1 by a random amount that shrinks with the effective sample size. This script draws 4
independent stationary AR(1) chains per quantity (the autocorrelation chosen to give the bulk
ESS of the row), computes R-hat and bulk ESS with arviz-stats exactly as the fit does, and
prints, for ``--quantities`` independent quantities, the median of the largest R-hat and how
often it exceeds 1.01. Prints a markdown table.

References
----------
.. [1] Vehtari, Gelman, Simpson, Carpenter & Bürkner (2021), "Rank-normalization, folding, and
   localization: An improved R-hat for assessing convergence of MCMC", Bayesian Analysis 16(2).
"""

from __future__ import annotations

import argparse
import time

import arviz_stats as azs
import numpy as np
import xarray as xr

ROWS = [(500, 0.626), (500, 0.4), (1000, 0.626), (1000, 0.4), (2000, 0.626)]
"""(draws per chain, AR(1) coefficient): ESS per draw (1 - phi) / (1 + phi) is 0.23 at 0.626
(the slowest quantities of the default fit) and 0.43 at 0.4."""


def max_rhat(rng: np.random.Generator, chains: int, draws: int, phi: float, k: int) -> tuple:
    """Largest R-hat, median and smallest bulk ESS of ``k`` quantities of perfect AR(1) chains."""
    burn = 50
    e = rng.normal(size=(chains, draws + burn, k))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, draws + burn):
        x[:, t] = phi * x[:, t - 1] + np.sqrt(1.0 - phi**2) * e[:, t]
    ds = xr.Dataset({"q": (("chain", "draw", "k"), x[:, burn:])})
    rhat = azs.rhat(ds, sample_dims=["chain", "draw"])["q"].values
    ess = azs.ess(ds, sample_dims=["chain", "draw"], method="bulk")["q"].values
    return float(rhat.max()), float(np.median(ess)), float(ess.min())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quantities", type=int, default=60)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(
        f"| draws per chain | ESS per draw | median bulk ESS | median max R-hat over "
        f"{args.quantities} | P(max R-hat > 1.01) |"
    )
    print("|---|---|---|---|---|")
    for draws, phi in ROWS:
        out = np.array(
            [max_rhat(rng, args.chains, draws, phi, args.quantities) for _ in range(args.reps)]
        )
        print(
            f"| {draws} | {(1 - phi) / (1 + phi):.2f} | {np.median(out[:, 1]):.0f} | "
            f"{np.median(out[:, 0]):.4f} | {np.mean(out[:, 0] > 1.01):.2f} |"
        )
    print()
    print(
        f"{args.chains} chains, {args.quantities} independent quantities, {args.reps} replicates, "
        f"seed {args.seed}; {time.perf_counter() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
