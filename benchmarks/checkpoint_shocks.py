"""Checkpoint shocks: the in-sample residuals of a law, averaged over the mixtures at each budget.

Usage::

    python benchmarks/checkpoint_shocks.py [--data ../shared/data] [--sets rp-70M,5mix-70M]
        [--laws climb,msl] [--refit-without-shocks]

For each real extrapolation set of ``benchmarks/real_data.py`` (the same fit split) and each law,
a Laplace fit on the fitted checkpoints, then per group: the median predicted log-loss's residual
averaged over the mixtures at each fitted budget ("level means"), the pooled sd of what a
quadratic in log D per group leaves of those means (checkpoint shocks that no smooth curve
explains; degrees of freedom corrected), and the mean residual at the held-out budgets.
A smooth bend beyond the law shows as a U-shape in the level means (the chord's signature); a
shock shared by every mixture at one checkpoint shows as a jump that the quadratic cannot follow.
docs/model.md ('Why CLIMB gets no weight on RedPajama') reads this table. Skips cleanly (exit 0,
one line) when the data folder is absent. About 30 s per set and law on 2 cores.

``--refit-without-shocks`` then tests whether the shocks are what inflates the learned
discrepancy: per set, the shipped predictive (``benchmarks/real_data.py --only-pipeline
--pipeline laplace``: four laws, Laplace inner folds, stacking) scored on the held-out budgets
twice, on the fitted checkpoints as published and with each (checkpoint, group) shock removed
(every loss divided by ``exp`` of its checkpoint's level mean minus the quadratic, from the first
law of ``--laws``). The held-out checkpoints keep their own shocks. Removing them is an upper
bound on what a model of the shocks could do to the fitted trend. About 1 min (as published) and
2.5 min (without shocks) per set.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import climb_bayes  # noqa: E402
from climb_bayes.data.published import shared_data_dir  # noqa: E402
from climb_bayes.laws import FitOptions, parse_laws  # noqa: E402


def level_means(obs, centre: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """``(log budgets, mean residual over the mixtures at each)`` of one group's observations."""
    sel = obs.group == group
    resid = np.log(obs.loss[sel]) - centre[sel]
    x = np.log(obs.tokens[sel])
    levels, level = np.unique(np.round(x, 6), return_inverse=True)
    return levels, np.bincount(level, resid) / np.bincount(level)


def shock_sd(levels: list[np.ndarray], means: list[np.ndarray]) -> float:
    """Pooled sd of the level means around a quadratic in log D per group (dof-corrected)."""
    left, dof = 0.0, 0
    for x, y in zip(levels, means, strict=True):
        if x.size <= 3:
            continue
        fit = np.polyval(np.polyfit(x, y, 2), x)
        left += float(((y - fit) ** 2).sum())
        dof += x.size - 3
    return float(np.sqrt(left / dof)) if dof else float("nan")


def shocks_removed(train, groups_means: list[tuple[np.ndarray, np.ndarray]]):
    """``train`` with every loss divided by ``exp`` of its (checkpoint, group) shock: the level
    mean minus a quadratic in log D per group (groups with <= 3 checkpoints are kept)."""
    shift = np.zeros(train.loss.size)
    for g, (x, y) in enumerate(groups_means):
        if x.size <= 3:
            continue
        shock = y - np.polyval(np.polyfit(x, y, 2), x)
        sel = train.group == g
        shift[sel] = shock[np.searchsorted(x, np.round(np.log(train.tokens[sel]), 6))]
    return dataclasses.replace(train, loss=train.loss * np.exp(-shift))


def pipeline_rows(train, test) -> list[str]:
    """Table cells ``law | weight | MRE | cov50 | cov90 | CRPS |`` of the shipped predictive
    (``benchmarks/real_data.py --only-pipeline --pipeline laplace``'s fits)."""
    from real_data import score_pipeline

    from climb_bayes.inference.ensemble import EnsembleOptions

    res = score_pipeline(train, test, EnsembleOptions(method="laplace"), log=lambda _: None)
    weights = res.folds[0]["weights"]
    rows = []
    for r in res.rows:
        if r.ratio_bin != "all" or r.law == "stacked-mixture":
            continue
        m, w = r.metrics, weights.get(r.law)
        rows.append(
            f"| {r.law} | {'-' if w is None else f'{w:.2f}'} | {m['mre']:.2%} | "
            f"{m['coverage']['0.5']:.2f} | {m['coverage']['0.9']:.2f} | {m['crps']:.4f} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--sets", default="rp-70M,5mix-70M")
    ap.add_argument("--laws", default="climb,msl")
    ap.add_argument(
        "--refit-without-shocks", action="store_true",
        help="also score the shipped predictive with the shocks removed from the fitted data",
    )  # fmt: skip
    args = ap.parse_args(argv)
    data = args.data or shared_data_dir()
    if data is None or not Path(data).is_dir():
        print("checkpoint-shock benchmark skipped: ../shared/data not found")
        return 0
    climb_bayes.setup_jax()
    from real_data import extrapolation_splits

    wanted = [s.strip() for s in args.sets.split(",") if s.strip()]
    sizes = tuple(sorted({s.split("-", 1)[1] for s in wanted}))
    print(
        "| set | law | group | level means at the fitted budgets (log-loss) | "
        "mean error at the held-out budgets |"
    )
    print("|---|---|---|---|---|")
    shocks, refits = [], []
    for name, obs, fit_sel, test_sel in extrapolation_splits(Path(data), sizes):
        if name not in wanted:
            continue
        train = obs.select(fit_sel & ~obs.zero_share)
        test = obs.select(test_sel & ~obs.zero_share)
        for k, law in enumerate(parse_laws(args.laws)):
            t0 = time.perf_counter()
            print(f"{name}: {law.name} (laplace) ...", file=sys.stderr, flush=True)
            law = law.prepare(train)
            fit = law.fit(train, "laplace", FitOptions(n_starts=2, seed=0))
            centre_train = np.median(fit.predict_obs(train), axis=0)
            centre_test = np.median(fit.predict_obs(test), axis=0)
            all_x, all_y = [], []
            for g, group in enumerate(train.groups):
                x, y = level_means(train, centre_train, g)
                all_x.append(x)
                all_y.append(y)
                sel = test.group == g
                err = np.log(test.loss[sel]) - centre_test[sel]
                print(
                    f"| {name} | {law.name} | {group} | {' / '.join(f'{v:+.4f}' for v in y)} | "
                    f"{err.mean():+.4f} |"
                )
            shocks.append((name, law.name, shock_sd(all_x, all_y), time.perf_counter() - t0))
            if args.refit_without_shocks and k == 0:  # shocks from the first law
                print(f"{name}: shipped predictive, with and without shocks ...", file=sys.stderr)
                smooth = shocks_removed(train, list(zip(all_x, all_y, strict=True)))
                for label, fitted in (
                    ("as published", train),
                    (f"shocks removed ({law.name})", smooth),
                ):
                    refits += [(name, label, row) for row in pipeline_rows(fitted, test)]
    print()
    print("| set | law | sd of the level means around a quadratic per group | s |")
    print("|---|---|---|---|")
    for name, law_name, sd, secs in shocks:
        print(f"| {name} | {law_name} | {sd:.4f} | {secs:.0f} |")
    if refits:
        print()
        print("| set | fitted checkpoints | law | stacking weight | MRE | cov50 | cov90 | CRPS |")
        print("|---|---|---|---|---|---|---|---|")
        for name, label, row in refits:
            print(f"| {name} | {label} {row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
