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
   ``climb-bayes fit``, with the code's priors: each fold's ``tau`` referred to the full fit's
   end by the prior's trend);
4. measure the trend of ``tau`` in where a fit ends: the posterior of ``gamma`` (a fit ending
   at ``c`` has ``tau (c / hi)^gamma``) given the residuals of step 2 and of fits ending at
   :data:`TREND_FRACTIONS` of the last step, each at every later checkpoint (wide prior).

The table prints both per set and law (and the posterior of the share ``rho`` common to all
mixtures, median and 5-95%, from each, and of the trend), and the prior the code uses per law:
median = geometric mean of ``tau_actual`` over the sets, log-sd = their spread (at least 0.5);
trend mean = mean of the sets' posterior medians, sd = the spread between and within sets (at
least 0.5).
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
    LfoResiduals,
    calibrate,
)

climb_bayes.setup_jax()  # x64 and host devices before JAX starts

WIDE = DiscrepancyPrior(0.03, 2.0, "wide (calibration)", trend_mean=0.0, trend_sd=2.0)
SETS = [("2Mix", "70M"), ("2Mix", "160M"), ("3Mix", "70M"), ("3Mix", "160M")]
TREND_FRACTIONS = (0.15, 0.2, 0.3)
"""Where the earlier fits of the trend measurement end (share of the last step); those with
fewer than three budgets are skipped (2Mix has none)."""


def _thin(obs, ratio: float = 1.2):
    """Keep checkpoints on a geometric grid (3Mix logs every 500 steps)."""
    levels = np.unique(obs.run_budget)
    keep, last = [], -np.inf
    for b in levels:
        if np.log(b) - last >= np.log(ratio):
            keep.append(b)
            last = np.log(b)
    return obs.select(np.isin(obs.run_budget[obs.run], keep))


def _actual(fit, res):
    """The discrepancy's posterior given the fit's residuals ``res`` at the later checkpoints
    (as an inner fold gives them: ``ensemble._fold_residuals``)."""
    lo, hi = budget_range(fit.fit_obs)
    return calibrate(res, WIDE, lo, hi, n_draws=600)


def _trend(obs, spec, fit, res, opts, method: str):
    """The discrepancy's posterior given the residuals ``res`` of the fit and those of earlier
    fits (ending at :data:`TREND_FRACTIONS` of the last step) at their later checkpoints: its
    ``trend`` is how ``log tau`` changes with the log of where a fit ends (``None`` without
    earlier fits)."""
    m = fit.fit_obs.m
    parts = [res]
    levels = np.unique(obs.run_budget)
    for j, frac in enumerate(TREND_FRACTIONS, start=1):
        cut = frac * levels.max()
        if np.sum(levels <= cut) < 3:
            continue
        early_obs = obs.select(obs.run_budget[obs.run] <= cut)
        law = spec.prepare(early_obs)
        early = law.fit(early_obs, method, opts)
        later = law.usable(obs.select(obs.run_budget[obs.run] > cut))
        parts.append(_fold_residuals(early, later, j, m)[0])
    if len(parts) == 1:
        return None
    lo, hi = budget_range(fit.fit_obs)
    return calibrate(LfoResiduals.concat(parts), WIDE, lo, hi, n_draws=600)


def _quantiles(draws) -> str:
    """Median and 5-95% of ``draws``."""
    q = np.quantile(draws, [0.5, 0.05, 0.95])
    return f"{q[0]:.2f} ({q[1]:.2f}-{q[2]:.2f})"


def _rho(d) -> str:
    """Median and 5-95% of ``rho``."""
    return _quantiles(d.rho)


def _trend_prior(draws: list) -> tuple[float, float]:
    """Normal prior of the trend from the sets' posteriors: mean of their medians, sd from the
    spread between sets and each set's own posterior sd (at least 0.5)."""
    if not draws:
        return 0.0, 0.0
    med = np.array([np.median(d) for d in draws])
    within = np.mean([np.var(d) for d in draws])
    return float(med.mean()), max(float(np.sqrt(med.var() + within)), 0.5)


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
        for spec in parse_laws(args.laws):
            law = spec.prepare(fit_obs)
            print(f"{setting}-{size} {law.name} ...", file=sys.stderr, flush=True)
            fit = law.fit(fit_obs, args.method, opts)
            res, _ = _fold_residuals(fit, law.usable(test), 0, fit.fit_obs.m)
            actual = _actual(fit, res)
            trend = _trend(obs, spec, fit, res, opts, args.method)
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
            row = (f"{setting}-{size}", law.name, tau, lfo, disc.source, actual, disc, trend)
            rows.append(row)
    print(
        "| set | law | tau actual | tau from inner LFO | rho actual | rho from inner LFO "
        "| trend actual |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, law, actual, lfo, src, d_act, d_lfo, trend in rows:
        print(
            f"| {name} | {law} | {actual:.4f} | {lfo:.4f} ({src}) | {_rho(d_act)} | {_rho(d_lfo)} "
            f"| {_quantiles(trend.trend) if trend is not None else '-'} |"
        )
    print()
    print(
        "| law | prior median | prior log-sd | median ratio LFO / actual | trend prior mean "
        "| trend prior sd |"
    )
    print("|---|---|---|---|---|---|")
    for law in dict.fromkeys(r[1] for r in rows):
        act = np.array([r[2] for r in rows if r[1] == law])
        lfo = np.array([r[3] for r in rows if r[1] == law])
        med = float(np.exp(np.mean(np.log(act))))
        sd = max(float(np.std(np.log(act))), 0.5)
        mean, spread = _trend_prior([r[7].trend for r in rows if r[1] == law and r[7]])
        print(
            f"| {law} | {med:.4f} | {sd:.2f} | {np.median(lfo / act):.2f} | {mean:.2f} "
            f"| {spread:.2f} |"
        )
    print(
        f"\ntotal {time.perf_counter() - t0:.0f} s; fit on steps <= {args.fit_fraction:.0%} of "
        f"the last; tokens per step {TOKENS_PER_STEP}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
