"""Calibrate the prior of each law's extrapolation discrepancy on published curves.

Usage::

    python benchmarks/calibrate_discrepancy.py [--data ../shared/data] [--method nuts]
        [--fit-fraction 0.4]

For every calibration set -- the Data Mixing Laws 2Mix and 3Mix checkpoints (70M and 160M
models; not used by ``benchmarks/real_data.py``, whose 5Mix, RegMix and default-data rows stay
out-of-sample for the prior) -- and every law:

1. fit the law on the checkpoints up to ``--fit-fraction`` of the last step;
2. measure its actual discrepancy ``tau_actual``: the posterior of the discrepancy model
   (:mod:`climb_bayes.model.discrepancy`) given the residuals of that fit's predictive at the later
   checkpoints (a wide prior, median 0.03, log-sd 2);
3. measure what the user's own data would have said: ``tau_lfo``, the same posterior from the
   leave-future-out refits *inside* the fitted checkpoints (Laplace refits, as
   ``climb-bayes fit``).

The table prints both per set and law (and the posterior of the share ``rho`` common to all
mixtures, median and 5-95%, from each), and the prior the code uses per law: median = geometric
mean of ``tau_actual`` over the sets, log-sd = their spread (at least 0.5).
Prints a markdown table; exits 0 with one line when the data folder is absent.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import climb_bayes  # noqa: E402
from climb_bayes.data.observations import budget_range  # noqa: E402
from climb_bayes.data.published import (  # noqa: E402
    SMALL_MIX_GROUPS,
    TOKENS_PER_STEP,
    load_mixinglaws,
    shared_data_dir,
)
from climb_bayes.inference.ensemble import (  # noqa: E402
    EnsembleOptions,
    _fold_residuals,
    fit_ensemble,
)
from climb_bayes.laws import FitOptions, parse_laws  # noqa: E402
from climb_bayes.model.discrepancy import (  # noqa: E402
    DiscrepancyPrior,
    calibrate,
)

climb_bayes.setup_jax()  # x64 and host devices before JAX starts

WIDE = DiscrepancyPrior(0.03, 2.0, "wide (calibration)")
SETS = [("2Mix", "70M"), ("2Mix", "160M"), ("3Mix", "70M"), ("3Mix", "160M")]


def _thin(obs, ratio: float = 1.2):
    """Keep checkpoints on a geometric grid (3Mix logs every 500 steps)."""
    levels = np.unique(obs.run_budget)
    keep, last = [], -np.inf
    for b in levels:
        if np.log(b) - last >= np.log(ratio):
            keep.append(b)
            last = np.log(b)
    return obs.select(np.isin(obs.run_budget[obs.run], keep))


def _actual(fit, test):
    """The discrepancy's posterior given the fit's residuals at the later checkpoints."""
    res, _ = _fold_residuals(fit, test, 0, fit.fit_obs.m)  # the residuals an inner fold gives
    lo, hi = budget_range(fit.fit_obs)
    return calibrate(res, WIDE, lo, hi, n_draws=600)


def _rho(d) -> str:
    """Median and 5-95% of ``rho``."""
    q = np.quantile(d.rho, [0.5, 0.05, 0.95])
    return f"{q[0]:.2f} ({q[1]:.2f}-{q[2]:.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--method", default="nuts", choices=["nuts", "laplace"])
    ap.add_argument("--fit-fraction", type=float, default=0.4)
    ap.add_argument("--laws", default="climb,msl,dml,isolated")
    args = ap.parse_args(argv)
    data = args.data if args.data is not None else shared_data_dir()
    if data is None or not Path(data).is_dir():
        print("discrepancy calibration skipped: no shared data folder (../shared/data).")
        return 0
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    opts = FitOptions(seed=0, n_starts=2, max_iter=1000, chains=2, warmup=500, samples=1000)
    rows = []
    for setting, size in SETS:
        obs = _thin(load_mixinglaws(Path(data), setting, SMALL_MIX_GROUPS[setting], [size])[size])
        cut = args.fit_fraction * obs.run_budget.max()
        fit_obs = obs.select(obs.run_budget[obs.run] <= cut)
        test = obs.select(obs.run_budget[obs.run] > cut)
        for law in parse_laws(args.laws):
            law = law.prepare(fit_obs)
            print(f"{setting}-{size} {law.name} ...", file=sys.stderr, flush=True)
            fit = law.fit(fit_obs, args.method, opts)
            actual = _actual(fit, law.usable(test))
            ens = fit_ensemble(
                fit_obs,
                [law],
                opts,
                EnsembleOptions(method=args.method, lfo="laplace", lfo_folds=3),
                prefit={law.name: fit},
            )
            disc = ens.fits[law.name].discrepancy
            lfo = float(np.median(disc.tau))
            tau = float(np.median(actual.tau))
            rows.append((f"{setting}-{size}", law.name, tau, lfo, disc.source, actual, disc))
    print("| set | law | tau actual | tau from inner LFO | rho actual | rho from inner LFO |")
    print("|---|---|---|---|---|---|")
    for name, law, actual, lfo, src, d_act, d_lfo in rows:
        print(
            f"| {name} | {law} | {actual:.4f} | {lfo:.4f} ({src}) | {_rho(d_act)} | {_rho(d_lfo)} |"
        )
    print()
    print("| law | prior median | prior log-sd | median ratio LFO / actual |")
    print("|---|---|---|---|")
    for law in dict.fromkeys(r[1] for r in rows):
        act = np.array([r[2] for r in rows if r[1] == law])
        lfo = np.array([r[3] for r in rows if r[1] == law])
        med = float(np.exp(np.mean(np.log(act))))
        sd = max(float(np.std(np.log(act))), 0.5)
        print(f"| {law} | {med:.4f} | {sd:.2f} | {np.median(lfo / act):.2f} |")
    print(
        f"\ntotal {time.perf_counter() - t0:.0f} s; fit on steps <= {args.fit_fraction:.0%} of "
        f"the last; tokens per step {TOKENS_PER_STEP}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
