"""How the law's extrapolation error splits across mixtures on real checkpoints.

The discrepancy (:mod:`climb_bayes.model.discrepancy`) gives every language an error beyond
the fitted budgets with a part shared by all mixtures (share ``rho``) and a mixture-specific
part (a Gaussian process over shares, length scale ``LENGTH_SCALE``). The mixture-specific
part is what makes the ranking of two mixtures, and so ``r*``, uncertain (docs/decisions.md:
it is most of the predictive spread of ``r*`` on the default data). This script measures the
split on the 5Mix and RedPajama sets of ``benchmarks/real_data.py``:

CLIMB by Laplace (:func:`climb_bayes.inference.laplace`) on the fit split (steps <= 12k for 5Mix,
<= 16k for RedPajama), residual ``e = log y - mean over draws of log yhat`` at the held-out
budget with the most mixtures (the latest such). Per language: the **shared** error (the mean
of ``e`` over mixtures) and the **mixture-specific** one (the deviations from it), whose rms is
set beside what the model already expects of it without any discrepancy: the observation noise
of one point (``sqrt(s^2 + t^2)``, posterior medians) and the spread across mixtures of the
parameter uncertainty (the variance over draws of the deviation of a mixture's prediction from
the mixtures' mean). ``excess`` is the mixture-specific rms left after both. The variogram
pools the mixture-specific deviations of every set and language: half the squared difference
of two mixtures' deviations, over its mean, against the share distance of the mixtures (the
GP's ``1 - K(d)`` beside it). ``--rho`` also fits the shipped predictive's four laws on each set
(MAP full fits, the default inner folds) and prints the share ``rho`` each law's discrepancy
learned from its folds (posterior median and 5-95%).

Usage: ``python benchmarks/discrepancy_structure.py [--data DIR] [--sets 5mix-70M,...] [--rho]``
(under 2 min on 2 cores; ``--rho`` about 2 min more per set).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import climb_bayes  # noqa: E402

climb_bayes.setup_jax()

from real_data import extrapolation_splits  # noqa: E402

from climb_bayes.data.observations import Observations, budget_range  # noqa: E402
from climb_bayes.data.published import shared_data_dir  # noqa: E402
from climb_bayes.inference.ensemble import EnsembleOptions, fit_ensemble  # noqa: E402
from climb_bayes.laws.base import FitOptions  # noqa: E402
from climb_bayes.laws.registry import get_law, parse_laws  # noqa: E402
from climb_bayes.model.discrepancy import LENGTH_SCALE  # noqa: E402

SIZES = ("70M", "160M", "305M", "410M")
DISTANCE_BINS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 1.5)


def residual_matrix(
    test: Observations, pred: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """At the held-out budget with the most mixtures: the budget (tokens), ``(K, m)`` residuals
    (NaN where a language was not scored), ``(S, K, m)`` predictions and ``(K, m)`` shares."""
    budgets = test.run_budget[test.run]
    levels, counts = np.unique(budgets, return_counts=True)
    level = levels[np.flatnonzero(counts == counts.max())[-1]]
    sel = np.isclose(budgets, level)
    runs = np.unique(test.run[sel])
    m = len(test.groups)
    resid = np.full((runs.size, m), np.nan)
    draws = np.full((pred.shape[0], runs.size, m), np.nan)
    e = test.log_loss - pred.mean(axis=0)
    for a, run in enumerate(runs):
        for i in range(m):
            j = np.flatnonzero(sel & (test.run == run) & (test.group == i))
            if j.size:
                resid[a, i], draws[:, a, i] = e[j[0]], pred[:, j[0]]
    return float(level), resid, draws, test.run_r[runs]


LAWS = ("climb", "msl", "dml", "isolated")


def learned_rho(train: Observations, seed: int) -> list[str]:
    """Per law of the shipped predictive: its discrepancy's ``rho`` (median, 5-95%) and its
    stacking weight, fitted on ``train`` with MAP full fits and the default inner folds."""
    options = FitOptions(n_starts=2, seed=seed, max_iter=1000)
    ens = fit_ensemble(train, parse_laws(",".join(LAWS)), options, EnsembleOptions(method="map"))
    out = []
    for law in LAWS:
        disc = ens.fits[law].discrepancy
        if disc is None:
            out.append("-")
            continue
        q = np.quantile(disc.rho, [0.5, 0.05, 0.95])
        out.append(f"{q[0]:.2f} ({q[1]:.2f}-{q[2]:.2f}; {disc.source}) ({ens.weights[law]:.2f})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="shared data folder")
    ap.add_argument(
        "--sets", default=None, help="comma-separated (default: 5Mix and RedPajama, 70M-410M)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rho", action="store_true", help="also the share rho each law learned")
    args = ap.parse_args(argv)
    data = args.data if args.data is not None else shared_data_dir()
    if data is None or not (Path(data) / "mixinglaws").is_dir():
        print("discrepancy-structure benchmark skipped: no shared data folder (../shared/data).")
        return 0
    want = None if args.sets is None else set(args.sets.split(","))
    law = get_law("climb")
    rows, pairs, rho_rows = [], [], []
    for name, obs, fit_sel, test_sel in extrapolation_splits(Path(data), SIZES):
        if want is not None and name not in want:
            continue
        t0 = time.perf_counter()
        train, test = law.usable(obs.select(fit_sel)), law.usable(obs.select(test_sel))
        fit = law.fit(train, method="laplace", options=FitOptions(seed=args.seed))
        level, resid, draws, shares = residual_matrix(test, fit.predict_obs(test))
        k = resid.shape[0]
        shared = np.nanmean(resid, axis=0)
        specific = resid - shared
        spec_rms = np.sqrt(np.nanmean(specific**2) * k / (k - 1))
        centred = draws - np.nanmean(draws, axis=1, keepdims=True)
        param = np.sqrt(np.nanmean(np.nanvar(centred, axis=0)))
        s = np.median(fit.sigma, axis=0)
        t = np.zeros_like(s) if fit.sigma_run is None else np.median(fit.sigma_run, axis=0)
        noise = np.sqrt(np.mean(s**2 + t**2))
        excess = np.sqrt(max(0.0, spec_rms**2 - noise**2 - param**2))
        hi = budget_range(train)[1].max()
        rows.append(
            f"| {name} | {level / hi:.2f} | {k} | {np.sqrt(np.mean(shared**2)):.4f} | "
            f"{spec_rms:.4f} | {noise:.4f} | {param:.4f} | {excess:.4f} |"
        )
        dist = np.sqrt(((shares[:, None] - shares[None]) ** 2).sum(-1))
        iu = np.triu_indices(k, 1)
        for i in range(resid.shape[1]):
            col = specific[:, i]
            semi = 0.5 * (col[:, None] - col[None]) ** 2 / np.nanmean(col**2)
            pairs.append(np.c_[dist[iu], semi[iu]])
        if args.rho:
            rho_rows.append(f"| {name} | " + " | ".join(learned_rho(train, args.seed)) + " |")
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(
        "| set | held-out budget / largest fitted | mixtures | shared rms | mixture-specific rms "
        "| noise of a point | parameter uncertainty across mixtures | excess |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    pa = np.concatenate(pairs)
    pa = pa[np.isfinite(pa[:, 1])]
    print()
    print(f"| share distance | pairs | semivariance / mean | GP 1 - K(d), length {LENGTH_SCALE} |")
    print("|---|---|---|---|")
    for lo, hi in zip(DISTANCE_BINS[:-1], DISTANCE_BINS[1:], strict=True):
        sel = (pa[:, 0] >= lo) & (pa[:, 0] < hi)
        if sel.any():
            d = pa[sel, 0].mean()
            gp = 1.0 - np.exp(-0.5 * d**2 / LENGTH_SCALE**2)
            print(
                f"| {lo}-{hi} (mean {d:.2f}) | {sel.sum()} | {pa[sel, 1].mean():.2f} | {gp:.2f} |"
            )
    if rho_rows:
        print()
        header = " | ".join(f"{law}: rho (5-95%; source) (weight)" for law in LAWS)
        print(f"| set | {header} |")
        print("|---|" + "---|" * len(LAWS))
        print("\n".join(rho_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
