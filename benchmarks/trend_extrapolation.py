"""Does the discrepancy's trend hold where the inner folds end far from the full fit's end?

Usage::

    python benchmarks/trend_extrapolation.py [--data ../shared/data] [--sizes 70M,160M]
        [--splits 30k,20k]

The discrepancy's ``tau`` falls with where a fit ends (``tau (cut / end)^gamma``, the trend
prior calibrated on the 3Mix curves at fits ending down to ``log(cut / end) = -1``;
:mod:`climb_bayes.model.discrepancy`). On the shipped default data the inner folds end at 1/6
and 1/3 of the full fit's largest budget (offsets -1.8 and -1.1), so the trend refers their
``tau`` down by up to 8x: outside the range it was calibrated on. This benchmark scores that
geometry out of sample on the Data Mixing Laws 5Mix runs, which no trend prior was fitted to:
per model size with runs to 100k steps (70M, 160M), fit on the checkpoints up to step 30k
(``30k``; predict steps >= 60k, 2-3.3x) or 20k (``20k``; predict >= 40k, 2-5x), and fit the
shipped predictive (``benchmarks/real_data.py --only-pipeline --pipeline laplace``: four laws,
Laplace inner folds, discrepancy, stacking) three ways:

``latest``
    the shipped inner folds (the last two cuts, nearest the full fit's end);
``far``
    inner folds cut at the budget levels nearest 1/6 and 1/3 of the fit's end (the default
    data's geometry), with the trend (the shipped model);
``far, no trend``
    the same folds, one ``tau`` for folds and full fit (``EnsembleOptions(trend=False)``, the
    model before 2026-12-03).

Prints one markdown table: the stacked predictive's coverage (in brackets the 5-95% range a
calibrated predictive shows on the same points, whose errors cluster by domain), CRPS and MRE,
CLIMB's own, the stacking weights and CLIMB's learned trend. About 2-5 min per row on 2 cores
(the four splits x three arms: 40 min on the 2-core Intel Xeon). Skips cleanly (exit 0, one
line) when the data folder is absent.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import climb_bayes  # noqa: E402
from climb_bayes.data.published import TOKENS_PER_STEP, load_5mix, shared_data_dir  # noqa: E402
from climb_bayes.inference.ensemble import EnsembleOptions  # noqa: E402
from climb_bayes.inference.lfo import budget_levels, lfo_folds  # noqa: E402

SPLITS = {"30k": (30_000, 60_000), "20k": (20_000, 40_000)}
"""Split name: (last fitted step, first held-out step)."""
FOLD_END_FRACTIONS = (1 / 6, 1 / 3)
"""Where the default data's inner folds end, as a fraction of the full fit's largest budget."""
ARMS = (
    ("latest", False, True),
    ("far", True, True),
    ("far, no trend", True, False),
)
"""(name, far folds, trend)."""


def far_cuts(obs) -> tuple[float, ...]:
    """The inner-fold cuts (:func:`~climb_bayes.inference.lfo.lfo_folds`) nearest (in log) each
    of :data:`FOLD_END_FRACTIONS` of the largest budget of ``obs``."""
    usable = np.array([fold.cut for fold in lfo_folds(obs)])
    end = budget_levels(obs)[-1]
    cuts = {
        float(usable[np.argmin(np.abs(np.log(usable / (f * end))))]) for f in FOLD_END_FRACTIONS
    }
    return tuple(sorted(cuts))


def _row(name: str, arm: str, cuts: str, res, trend: float | None) -> str:
    every = {r.law: r.metrics for r in res.rows if r.ratio_bin == "all"}
    st, cl = every["stacked"], every["climb"]
    cov, band = st["coverage"], st["coverage_if_calibrated"]
    cell = "{:.2f} [{:.2f}, {:.2f}]".format
    weights = " / ".join(f"{res.folds[0]['weights'][k]:.2f}" for k in ("climb", "msl", "dml"))
    return (
        f"| {name} | {arm} | {cuts} | {cell(cov['0.5'], *band['0.5'])} | "
        f"{cell(cov['0.9'], *band['0.9'])} | {st['crps']:.4f} | {st['mre']:.2%} | "
        f"{cl['coverage']['0.5']:.2f} / {cl['coverage']['0.9']:.2f} / {cl['crps']:.4f} | "
        f"{weights} | {'-' if trend is None else f'{trend:.2f}'} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--sizes", default="70M,160M")
    ap.add_argument("--splits", default="30k,20k", help=f"of {', '.join(SPLITS)}")
    args = ap.parse_args(argv)
    data = args.data or shared_data_dir()
    if data is None or not Path(data).is_dir():
        print("trend-extrapolation benchmark skipped: ../shared/data not found")
        return 0
    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise SystemExit(f"--splits: unknown {', '.join(unknown)}; known: {', '.join(SPLITS)}")
    climb_bayes.setup_jax()
    from real_data import score_pipeline

    trends: list[float] = []

    def log(msg: str) -> None:  # CLIMB's learned trend, from fit_ensemble's discrepancy line
        found = re.search(r"trend median (-?[0-9.]+)", msg)
        if msg.strip().startswith("climb: discrepancy") and found:
            trends.append(float(found.group(1)))

    sizes = tuple(s.strip() for s in args.sizes.split(",") if s.strip())
    lines = [
        "| set | inner folds | cuts (steps) | stacked cov50 [calibrated] | cov90 [calibrated] | "
        "CRPS | MRE | CLIMB cov50 / cov90 / CRPS | weights climb / msl / dml | CLIMB trend |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    t_all = time.perf_counter()
    for size, obs in load_5mix(Path(data), sizes).items():
        for split in splits:
            last, first = SPLITS[split]
            train = obs.select((obs.tokens <= last * TOKENS_PER_STEP) & ~obs.zero_share)
            test = obs.select((obs.tokens >= first * TOKENS_PER_STEP) & ~obs.zero_share)
            name = f"5mix-{size} <= {split}"
            if test.n == 0:
                lines.append(f"| {name} | no runs at or beyond step {first} | | | | | | | | |")
                continue
            cuts = far_cuts(train)
            for arm, far, trend in ARMS:
                t0 = time.perf_counter()
                print(f"{name}: {arm} ...", file=sys.stderr, flush=True)
                ens = EnsembleOptions(
                    method="laplace", lfo="laplace", lfo_cuts=cuts if far else None, trend=trend
                )
                trends.clear()
                res = score_pipeline(train, test, ens, log=log)
                shown = ", ".join(f"{c / TOKENS_PER_STEP:.0f}" for c in cuts) if far else "last two"
                lines.append(_row(name, arm, shown, res, trends[0] if trend and trends else None))
                print(f"  {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print("\n".join(lines))
    print(f"\n- total time {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
