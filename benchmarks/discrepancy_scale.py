"""Could the inner leave-future-out folds choose how much discrepancy the stack needs?

Usage::

    python benchmarks/discrepancy_scale.py [--data ../shared/data] [--sizes 70M,160M,305M,410M]
        [--stack]

On the real extrapolation sets of ``benchmarks/real_data.py --pipeline`` (5Mix and RedPajama,
each model size) the shipped predictive's 90% intervals cover every held-out loss and its 50%
intervals 73-96% (docs/benchmarks.md): too wide. One candidate remedy is a common scale
``lam`` on every law's learned discrepancy ``tau``, picked like the stacking weights, by the
stacked log score of the inner folds (for each ``lam``: the weights that maximise it, then
the stacked score). This script prints, per set and ``lam``, that inner score and the weights,
and what the resulting predictive does on the held-out checkpoints (coverage, MRE of the
median, CRPS) -- so the remedy is judged out of sample before anything ships.

The fold fits, residuals and calibration are those of :func:`climb_bayes.inference.ensemble.
fit_ensemble` (Laplace folds, the two latest cuts), called step by step through its private
helpers so one set of fold fits serves every ``lam``. Skips cleanly without the data. About
5 minutes on the 2-core machine. The stack is scored as the mixture of the laws (the shipped
predictive when this was measured, docs/model.md; the shipped intervals now average the
laws' quantiles).

``--stack`` asks a second question on the same fits: the shipped intervals average the laws'
quantiles, each law carrying the discrepancy learned from *its own* inner-fold residuals; would
one discrepancy learned from the residuals of the *stack's* centre do better
(:func:`stack_scan`)? About 8 minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import climb_bayes  # noqa: E402
import climb_bayes.inference.ensemble as ensemble  # noqa: E402
from climb_bayes.data.observations import budget_range  # noqa: E402
from climb_bayes.data.published import shared_data_dir  # noqa: E402
from climb_bayes.evaluation.lfo_evaluate import _usable_by_all  # noqa: E402
from climb_bayes.evaluation.metrics import score  # noqa: E402
from climb_bayes.inference.predictive import predictive_samples  # noqa: E402
from climb_bayes.laws import FitOptions, parse_laws  # noqa: E402
from climb_bayes.model.discrepancy import (  # noqa: E402
    DiscrepancyPrior,
    LfoResiduals,
    calibrate,
    discrepancy_prior,
)

climb_bayes.setup_jax()

sys.path.insert(0, str(ROOT / "benchmarks"))
from real_data import extrapolation_splits  # noqa: E402

SCALES = (0.0, 0.25, 0.5, 0.75, 1.0)
OPTIONS = FitOptions(n_starts=2, seed=0, max_iter=1000, chains=2, warmup=500, samples=1000)
LAWS = ("climb", "msl", "dml", "isolated")


def _inner(train) -> tuple[dict, dict, dict, dict]:
    """Fold fits, residuals and calibrated discrepancies of every law (as ``fit_ensemble``), and
    each law's Laplace full fit: ``(resid, parts, discs, full)`` keyed by law."""
    laws = [law.prepare(train) for law in parse_laws(",".join(LAWS))]
    folds = ensemble.lfo_folds(train, max_folds=2, keep="latest")
    fold_opts = replace(OPTIONS, warmup=400, samples=400)
    resid: dict[str, list] = {law.name: [] for law in laws}
    parts: dict[str, list] = {law.name: [] for law in laws}
    for f, fold in enumerate(folds):
        tr, te = train.select(fold.fit), train.select(fold.test)
        for law in laws:
            fold_fit = law.prepare(tr).fit(tr, "laplace", fold_opts)
            r, p = ensemble._fold_residuals(fold_fit, te, f, train.m)
            resid[law.name].append(r)
            parts[law.name].append((fold_fit, te, p))
    lo, hi = budget_range(train)
    discs = {
        k: calibrate(LfoResiduals.concat(v), discrepancy_prior(k), lo, hi, seed=0)
        for k, v in resid.items()
    }
    full = {law.name: law.fit(train, "laplace", OPTIONS) for law in laws}
    return resid, parts, discs, full


def scan(name: str, train, test, log) -> list[str]:
    """Table rows of one set: every scale's inner stacked score, weights and held-out scores."""
    from scipy.special import logsumexp

    _, parts, discs, full = _inner(train)
    rows = []
    for lam in SCALES:
        scaled = {k: d._replace(tau=d.tau * max(lam, 1e-9)) for k, d in discs.items()}
        lpd = {k: ensemble._score_folds(parts[k], scaled[k], 0)[0] for k in scaled}
        w = ensemble.stacking_weights(lpd)
        live = [k for k in w if w[k] > 0]
        inner = logsumexp(
            np.stack([lpd[k] for k in live]) + np.log([w[k] for k in live])[:, None], axis=0
        ).sum()
        fits = {k: replace(full[k], discrepancy=scaled[k]) for k in full}
        stack = ensemble.LawEnsemble(fits, w, "lfo-stacking")
        samples = stack.predictive_samples(test, 1000, seed=0, combine="mixture")
        m = score(test.loss, test.group, np.median(samples, 0), samples, n_groups=test.m)
        cov = m["coverage"]
        weights = "/".join(f"{w[k]:.2f}" for k in LAWS)
        rows.append(
            f"| {name} | {lam:.2f} | {inner:.1f} | {weights} | {cov['0.5']:.2f} | "
            f"{cov['0.9']:.2f} | {m['mre']:.2%} | {m['crps']:.4f} |"
        )
        log(rows[-1])
    return rows


def stack_scan(name: str, train, test, log) -> list[str]:
    """Rows of one set for ``--stack``: the shipped intervals (each law's own discrepancy, the
    laws' quantiles averaged) against one discrepancy calibrated on the *stack's* inner-fold
    residuals, added to the quantile average of the laws' predictives without discrepancy.

    The stack's residual at an inner-fold point is ``sum_k w_k z_k`` (the centre of the
    quantile average is the weighted average of the laws' centres) and its variance without
    discrepancy ``(sum_k w_k sqrt(v_k))^2`` (its spread the weighted average of theirs); the
    prior of its ``tau_0`` has the weighted geometric mean of the laws' prior medians and the
    weighted mean of their log-sds. The weights are the shipped ones (``lam = 1``).
    """
    resid, parts, discs, full = _inner(train)
    lpd = {k: ensemble._score_folds(parts[k], discs[k], 0)[0] for k in discs}
    w = {k: v for k, v in ensemble.stacking_weights(lpd).items() if v > 1e-6}
    total = sum(w.values())
    w = {k: v / total for k, v in w.items()}
    folds = []
    for f in range(len(resid[LAWS[0]])):
        each = {k: resid[k][f] for k in w}
        first = next(iter(each.values()))
        z = sum(w[k] * each[k].z for k in w)
        v = sum(w[k] * np.sqrt(each[k].v) for k in w) ** 2
        folds.append(LfoResiduals(z, v, first.x, first.group, first.block, first.mixture))
    prior = DiscrepancyPrior(
        float(np.exp(sum(w[k] * np.log(discrepancy_prior(k).median) for k in w))),
        float(sum(w[k] * discrepancy_prior(k).log_sd for k in w)),
        "stack",
    )
    lo, hi = budget_range(train)
    stack_disc = calibrate(LfoResiduals.concat(folds), prior, lo, hi, seed=0)
    names = list(w)
    plain = [
        predictive_samples(full[k], test, 1000, seed=j, discrepancy=False)
        for j, k in enumerate(names)
    ]
    base = ensemble.quantile_average(plain, [w[k] for k in names])
    delta = stack_disc.sample(
        np.random.default_rng(0), test.run_budget[test.run], test.group, test.r
    )
    shipped = ensemble.LawEnsemble(
        {k: replace(full[k], discrepancy=discs[k]) for k in full}, w, "lfo-stacking"
    ).predictive_samples(test, 1000, seed=0)
    tau = np.median(stack_disc.tau, axis=0)
    weights = "/".join(f"{w.get(k, 0.0):.2f}" for k in LAWS)
    rows = []
    for label, samples in (
        ("shipped (each law's own)", shipped),
        (f"the stack's own (tau {tau.min():.4f}-{tau.max():.4f})", base + delta),
        ("none", base),
    ):
        m = score(test.loss, test.group, np.median(samples, 0), samples, n_groups=test.m)
        cov = m["coverage"]
        rows.append(
            f"| {name} | {weights} | {label} | {cov['0.5']:.2f} | {cov['0.8']:.2f} | "
            f"{cov['0.9']:.2f} | {m['mre']:.2%} | {m['crps']:.4f} |"
        )
        log(rows[-1])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--sizes", default="70M,160M,305M,410M")
    ap.add_argument(
        "--stack",
        action="store_true",
        help="compare the shipped intervals with a discrepancy learned for the stack itself",
    )
    args = ap.parse_args()
    data = args.data or shared_data_dir()
    if data is None or not Path(data).is_dir():
        print("discrepancy_scale: ../shared/data not found; skipped")
        return 0
    splits = extrapolation_splits(Path(data), tuple(args.sizes.split(",")))
    laws = parse_laws(",".join(LAWS))
    lines = (
        [
            "| set | weights climb/msl/dml/isolated | discrepancy | cov50 | cov80 | cov90 | "
            "MRE | CRPS |",
            "|---|---|---|---|---|---|---|---|",
        ]
        if args.stack
        else [
            "| set | lam | inner stacked LPD | weights climb/msl/dml/isolated | cov50 | cov90 | "
            "MRE | CRPS |",
            "|---|---|---|---|---|---|---|---|",
        ]
    )
    run = stack_scan if args.stack else scan
    t0 = time.perf_counter()
    for name, obs, fit_sel, test_sel in splits:
        train = _usable_by_all(obs.select(fit_sel & ~obs.zero_share), laws)
        test = _usable_by_all(obs.select(test_sel & ~obs.zero_share), laws)
        lines += run(name, train, test, lambda s: print(s, file=sys.stderr, flush=True))
    print("\n".join(lines))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
