"""Does a run's deviation from the law shrink with its budget?

Usage::

    python benchmarks/run_effect_by_budget.py [--runs CSV] [--holdout EXPR]
        [--laws climb,msl,isolated] [--tail-start 0.85]

The observation model gives every (run, language) one shared deviation from the law with one
scale ``sigma_run`` per language, whatever the run's budget (:mod:`climb_bayes.model.observation`).
If the deviations of larger runs were smaller, the predictive of a new run at a larger budget
would be too wide by that much. Per law, this fits the non-held-out runs by Laplace
(:meth:`climb_bayes.laws.base.Law.fit`, seed 0) and takes each (run, language)'s mean residual
``log y - median(log yhat)`` over its points (the posterior median: a Laplace fit's mean is
pulled by its far draws where its Pareto k is large); per (language, budget) their mean is the
*shared* error and the deviations from it the *mixture-specific* part, whose sd (pooled over
languages) is set beside the fitted ``sigma_run``, per budget level, for the fitted runs and the
held-out ones. Prints one markdown table; about 10 s per law on 2 cores with a warm compilation
cache.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import climb_bayes  # noqa: E402


def group_deviations(obs, residual: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (run, group): ``(budget, group, mean residual)``."""
    key = obs.run.astype(np.int64) * obs.m + obs.group
    uniq, inverse = np.unique(key, return_inverse=True)
    mean = np.bincount(inverse, residual) / np.bincount(inverse)
    run, group = uniq // obs.m, uniq % obs.m
    return obs.run_budget[run], group, mean


def split_by_budget(budget: np.ndarray, group: np.ndarray, mean: np.ndarray) -> list[tuple]:
    """Per budget level: ``(budget, n groups, mixture-specific sd, shared error per group)``."""
    rows = []
    for b in np.unique(budget):
        at = budget == b
        parts, shared = [], {}
        for g in np.unique(group[at]):
            sel = at & (group == g)
            shared[int(g)] = float(mean[sel].mean())
            if sel.sum() >= 3:
                parts.append(mean[sel] - mean[sel].mean())
        sd = float(np.concatenate(parts).std(ddof=1)) if parts else float("nan")
        rows.append((float(b), int(at.sum()), sd, shared))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = ROOT / "climb_bayes" / "data" / "default_runs.csv"
    parser.add_argument("--runs", type=Path, default=default, help="long-form runs CSV")
    parser.add_argument("--holdout", default="run_id~holdout", help="held-out runs")
    parser.add_argument("--laws", default="climb,msl,isolated")
    parser.add_argument("--tail-start", type=float, default=0.85, help="as fit's --tail-start")
    args = parser.parse_args(argv)
    climb_bayes.setup_jax()
    from climb_bayes.data.holdout import holdout_mask
    from climb_bayes.data.observations import Observations
    from climb_bayes.data.runs import read_runs
    from climb_bayes.laws.base import FitOptions
    from climb_bayes.laws.families import resolve_families
    from climb_bayes.laws.registry import parse_laws

    runs = read_runs(args.runs, tail_start=args.tail_start)
    held = holdout_mask(runs, args.holdout)
    obs = Observations.from_runs(runs)
    sets = (("fitted", obs.select_runs(~held)), ("held out", obs.select_runs(held)))
    laws = parse_laws(args.laws, families=resolve_families(None, runs.languages).mapping)
    print(
        "| law | fitted sigma_run (median per language) | runs | budget | (run, language) groups "
        "| mixture-specific sd | shared error per language |"
    )
    print("|" + "---|" * 7)
    for law in laws:
        fit = law.fit(sets[0][1], "laplace", FitOptions(seed=0, samples=1000))
        if fit.sigma_run is None:  # one point per group: no run effect (observation.py)
            sigma_run = np.full(len(runs.languages), np.nan)
        else:
            sigma_run = np.median(np.asarray(fit.sigma_run), axis=0)
        for name, part in sets:
            part = fit.law.usable(part)
            residual = part.log_loss - np.median(fit.predict_obs(part), axis=0)
            for b, n, sd, shared in split_by_budget(*group_deviations(part, residual)):
                errors = ", ".join(f"{part.groups[g]} {v:+.3f}" for g, v in shared.items())
                scale = ", ".join(f"{v:.3f}" for v in sigma_run)
                print(f"| {law.name} | {scale} | {name} | {b:.3g} | {n} | {sd:.3f} | {errors} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
